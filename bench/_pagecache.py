"""The page cache for the disk benchmarks: evict what a step reads, sync what it wrote.

No imports from this checkout, so that `ab_transfer.py`'s runs inside another checkout (the old code
of an A/B) use it without loading this tree's packages.
"""

from __future__ import annotations

import os
from pathlib import Path


def files_under(*paths: Path) -> list[Path]:
    return [f for path in paths for f in ([path] if path.is_file() else sorted(path.rglob("*"))) if f.is_file()]


def evict(*paths: Path) -> None:
    """Drop these files (or every file under these directories) from the page cache (this VM cannot
    drop caches: fsync, then posix_fadvise DONTNEED)."""
    for file in files_under(*paths):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fsync_all(*paths: Path) -> None:
    """What dd's conv=fdatasync does at its end: the bytes a step wrote, on the disk."""
    for file in files_under(*paths):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
