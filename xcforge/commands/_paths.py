"""Path checks the commands share, so a bad path is refused before anything is written."""

from __future__ import annotations

from pathlib import Path


def blocking_file(path: Path) -> Path | None:
    """What stops `path` from being (or becoming) a directory: itself or its nearest existing
    ancestor, when that is not a directory; None when `path` can be a directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None
