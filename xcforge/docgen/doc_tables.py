"""Sections of hand-written docs generated from the code, between markers, and drift-checked by
`render --check` like README's target table: docs/engine.md's backend table, read from the engine
package's backend modules (adding a module adds its row)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from xcforge import generated
from xcforge.config.matrix import Matrix
from xcforge.errors import RenderError

ENGINE_DOC = "docs/engine.md"
ENGINE_SRC = "images/engine/src"
BACKENDS_BEGIN = (
    "<!-- BEGIN GENERATED: python build.py render (edit images/engine/src/xcforge_engine/backends/, not this table) -->"
)
END = "<!-- END GENERATED -->"

# Run in a child Python with the checkout's engine sources first on the path: the rows come from
# this tree's modules (not an installed xcforge-engine), and xcforge never imports the launcher.
_READ_BACKENDS = """
import json
from xcforge_engine.backends import BACKENDS
print(json.dumps([
    {"name": b.name, "title": b.title, "probe": b.probe, "device_word": b.device_word,
     "visible_env": list(b.visible_env)}
    for b in BACKENDS.values()
]))
"""


class EngineBackend(TypedDict):
    """One backend as _READ_BACKENDS prints it."""

    name: str
    title: str
    probe: str | None
    device_word: str
    visible_env: list[str]


def engine_backends(root: Path) -> list[EngineBackend]:
    """Each backend module's name, title, probe, device word and device-selection variables, in
    the launcher's own order (accelerators first: the order it probes them in)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root / ENGINE_SRC), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, "-c", _READ_BACKENDS], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RenderError(f"reading the engine's backends from {root / ENGINE_SRC} failed:\n{out.stderr.strip()}")
    backends: list[EngineBackend] = json.loads(out.stdout)
    return backends


def backends_table(matrix: Matrix, backends: list[EngineBackend]) -> str:
    rows = [
        "| backend | title | probed by (control node) | device | device-selection variables | targets |",
        "|---|---|---|---|---|---|",
    ]
    for b in backends:
        targets = [f"`{t.name}`" for t in matrix.targets.values() if t.backend == b["name"]]
        cells = [
            f"`{b['name']}`",
            b["title"],
            f"`{b['probe']}`" if b["probe"] else "none",
            b["device_word"],
            ", ".join(f"`{v}`" for v in b["visible_env"]) or "none",
            ", ".join(targets) or "none",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def replace_section(text: str, begin: str, body: str, end: str = END) -> str | None:
    """`text` with what lies between `begin` and the next `end` replaced by `body`; None when the
    markers are not there (a test's copy of the project without that doc)."""
    head, sep, rest = text.partition(begin)
    _, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        return None
    return f"{head}{begin}\n{body}\n{end}{tail}"


def write_or_check(matrix: Matrix, check: bool) -> list[generated.Generated]:
    path = matrix.root / ENGINE_DOC
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    if BACKENDS_BEGIN not in text:
        return [generated.Generated(path, "unchanged")]
    new = replace_section(text, BACKENDS_BEGIN, backends_table(matrix, engine_backends(matrix.root)))
    if new is None:
        return [generated.Generated(path, "unchanged")]
    return [generated.write_or_check(path, new, check=check)]
