"""The shared engine package (images/engine) as a wheel: the `engine` build context of every image.

Built on the build machine rather than in the image so the image step needs no network and no
build backend, with SOURCE_DATE_EPOCH fixed so the same sources give the same bytes (and BuildKit's
cache for that layer keeps hitting).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from xcforge.bake.fingerprint import hash_tree
from xcforge.errors import EnvironmentProblem
from xcforge.shell import run

_STAMP = ".source-sha256"
# 2020-01-01: any fixed value makes zip timestamps reproducible.
_SOURCE_DATE_EPOCH = "1577836800"


def engine_source_hash(src: Path) -> str:
    return hash_tree(src)


def ensure_engine_wheel(dest: Path, src: Path) -> tuple[Path, str]:
    """Build the wheel into dest unless dest already holds one for these exact sources."""
    if not (src / "pyproject.toml").exists():
        raise EnvironmentProblem(f"{src}/pyproject.toml is missing: the engine package is not in this checkout")
    source_hash = engine_source_hash(src)
    stamp = dest / _STAMP
    wheels = sorted(dest.glob("*.whl")) if dest.exists() else []
    if stamp.exists() and stamp.read_text().strip() == source_hash and len(wheels) == 1:
        return wheels[0], source_hash
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources otherwise.
    with tempfile.TemporaryDirectory(prefix="xcforge-engine-") as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(src, work, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        out = Path(tmp) / "out"
        proc = run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(out),
                str(work),
            ],
            env={"SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH, "PIP_NO_INDEX": "1"},
            check=False,
        )
        if proc.returncode != 0:
            raise EnvironmentProblem(
                f"building the engine wheel from {src} failed (exit {proc.returncode}); "
                "`pip install 'setuptools>=70.1'` in this environment (scripts/provision.sh does)"
            )
        built = sorted(out.glob("*.whl"))
        if len(built) != 1:
            raise EnvironmentProblem(f"building the engine wheel from {src} produced {len(built)} wheels")
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        target = dest / built[0].name
        shutil.copy2(built[0], target)
        os.utime(target, (int(_SOURCE_DATE_EPOCH), int(_SOURCE_DATE_EPOCH)))
    stamp.write_text(source_hash + "\n")
    return target, source_hash
