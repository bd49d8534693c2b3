"""What the rendered files (the Dockerfiles under images/<target>/ and docker-bake.hcl) are a
function of, digested, so that a build can skip re-rendering them when nothing they depend on
changed since the last check that passed (as make skips a target whose inputs are older).

The digest covers every input the renderer reads, by content: matrix.yaml, templates/, the
committed locks (the bake file's verification labels come from them), the committed outputs
themselves, xcforge's own source (the renderer is code), the Jinja2 release that compiles the
templates and the Python that runs it. Any change to any of them means a full render and compare.
Skipping saves loading Jinja2 and rendering: 60 ms of a cached build's time outside its bake.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from xcforge.config.matrix import Matrix

_XCFORGE_SOURCE = Path(__file__).resolve().parents[1]


def _files(directory: Path, pattern: str = "*") -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts)


def _jinja2_release() -> Path | None:
    spec = importlib.util.find_spec("jinja2")  # where it is, without importing it
    return Path(spec.origin) if spec and spec.origin else None


def digest(matrix: Matrix, outputs: Iterable[Path]) -> str:
    """sha256 over the paths and contents of every input and of the committed `outputs`."""
    paths = [
        matrix.path.resolve(),
        *_files(matrix.templates_dir),
        *(p for locks in sorted(matrix.images_dir.glob("*/locks")) for p in _files(locks)),
        *_files(_XCFORGE_SOURCE, "*.py"),
        *sorted(Path(p).resolve() for p in outputs),
    ]
    jinja2 = _jinja2_release()
    if jinja2:
        paths.append(jinja2)  # its __init__.py names the release
    h = hashlib.sha256(sys.version.encode())
    for path in paths:
        h.update(b"\0" + str(path).encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"(absent)")
    return h.hexdigest()


class Stamp:
    """The digest of the inputs the last passing drift check saw, kept in `path` (dist/.cache)."""

    def __init__(self, path: Path, inputs: str) -> None:
        self.path, self.inputs = path, inputs

    def current(self) -> bool:
        try:
            return bool(json.loads(self.path.read_text()).get("inputs") == self.inputs)
        except (OSError, ValueError, AttributeError):
            return False

    def record(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"inputs": self.inputs}) + "\n")
        except OSError:
            pass  # an unwritable dist: the next build checks in full again


__all__ = ["Stamp", "digest"]
