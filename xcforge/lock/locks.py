"""The committed locks under images/<target>/locks/, read: what a plan, the report and the build
need of them before anything is built. Resolving and writing them is `deps`'s job (lock/deps.py,
which imports uv's machinery, indexes and archives); this module is standard library only, so a
build reads its locks without loading that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from xcforge.config.matrix import Matrix, Target
from xcforge.errors import ConfigError

# Engines built from a hash-pinned sdist (locks/engine-sdist.txt) rather than installed as wheels.
SOURCE_BUILDS = ("source-empty", "llama-server")


def engine_sdist_pin(matrix: Matrix, target: Target) -> tuple[str, str] | None:
    """(version, sha256) of the engine sdist a source-empty target's lock pins, if it has one."""
    path = deps_path(matrix, target).parent / "engine-sdist.txt"
    if target.engine.install not in SOURCE_BUILDS or not path.exists():
        return None
    m = re.search(r"^\S+==(\S+) --hash=sha256:([0-9a-f]{64})$", path.read_text(), re.M)
    return (m.group(1), m.group(2)) if m else None


def deps_path(matrix: Matrix, target: Target) -> Path:
    return matrix.images_dir / target.name / "locks" / "deps.json"


def read_deps(matrix: Matrix, target: Target) -> dict[str, Any] | None:
    path = deps_path(matrix, target)
    if not path.exists():
        return None
    try:
        deps: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return deps
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: unreadable ({exc}); regenerate it with `python build.py deps --target {target.name}`"
        ) from exc


def set_status(
    matrix: Matrix, target: Target, platform: str, python: str | None = None, fallback: bool = False
) -> dict[str, Any] | None:
    """The committed summary of one set (the vendor's Python unless `python` says otherwise)."""
    deps = read_deps(matrix, target) or {}
    python = python or target.python.version
    sets: list[dict[str, Any]] = deps.get("sets", [])
    for entry in sets:
        if (
            entry.get("platform") == platform
            and entry.get("python") == python
            and bool(entry.get("fallback")) == fallback
        ):
            return entry
    return None


def lock_omitted(matrix: Matrix, target: Target, platform: str) -> tuple[str, ...]:
    """Index-only packages the platform's committed lock was made without (a wheelhouse stood in for
    their index: deps.json's `omitted`); the build leaves them out and the image says so."""
    entry = set_status(matrix, target, platform) or {}
    return tuple(entry.get("omitted", [])) if entry.get("lock") else ()


def pins(lock_text: str) -> dict[str, str]:
    """name (canonical) → version of every `name==version` line of a lock."""
    found = {}
    for line in lock_text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m:
            found[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return found


__all__ = ["SOURCE_BUILDS", "deps_path", "engine_sdist_pin", "lock_omitted", "pins", "read_deps", "set_status"]
