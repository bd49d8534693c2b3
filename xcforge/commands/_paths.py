"""Path checks the commands share, so a bad path is refused before anything is written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from xcforge.errors import ConfigError


def blocking_file(path: Path) -> Path | None:
    """What stops `path` from being (or becoming) a directory: itself or its nearest existing
    ancestor, when that is not a directory; None when `path` can be a directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def unwritable_reason(path: Path) -> str | None:
    """Why files cannot be written into directory `path` (or created under it): the error of a probe
    file made and removed in `path`, or in its nearest existing ancestor when `path` does not exist
    yet; None when writing works. Permission bits are not enough: root ignores them, and a
    read-only mount or a pseudo file system refuses root too."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return None  # blocking_file reports a file in the way
    try:
        fd, probe = tempfile.mkstemp(prefix=".xcforge-probe-", dir=existing)
    except OSError as exc:
        what = "cannot write there" if existing == path else f"cannot create it under {existing}"
        return f"{what} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


def check_directory(path: Path, what: str) -> None:
    """`path` is, or can be created as, a directory: no ancestor of it is a file (ConfigError naming `what`)."""
    blocker = blocking_file(path)
    if blocker is not None:
        where = "is a file" if blocker == path else f"is under {blocker}, which is a file"
        raise ConfigError(f"{what} {path}: {where}; give a directory")
