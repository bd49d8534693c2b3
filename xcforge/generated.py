"""Files xcforge generates and commits (Dockerfiles, docker-bake.hcl, workflows, operator examples,
docs sections): written, or checked for drift, the same way everywhere. `commands/_drift.py` prints
the results and turns stale ones into exit 4."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Generated:
    path: Path
    status: str  # unchanged | written | stale | missing | removed


def write_or_check(path: Path, text: str, *, check: bool) -> Generated:
    """Write `text` to `path` unless it is already there; with `check`, change nothing and say how
    the committed file differs."""
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if current == text:
        return Generated(path, "unchanged")
    if check:
        return Generated(path, "missing" if current is None else "stale")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return Generated(path, "written")


def remove_or_check(path: Path, *, check: bool) -> Generated:
    """A generated file whose source is gone (an example of a removed target)."""
    if not check:
        path.unlink(missing_ok=True)
    return Generated(path, "stale" if check else "removed")
