"""Big files: replacing one without waiting while the file system frees the old one, and writing
one that must be on the disk when the command says so.

Freeing a 300 MiB OCI archive right after its successor was written takes ext4 0.1 s (its pages
leave the cache while the new file's are still being written back): 1 % of a cached rebuild, paid
after the build's last line. `os.replace` over it pays that in the caller's time, and so does a
thread (a process exits only when all its threads have left the kernel). So the old file is moved
aside, the new one takes its name, and a process of its own (`rm`, in a session of its own, with
no terminal or pipes of ours) deletes the old one while this one goes on and exits.

A bundle goes onto a medium that is carried away and an unpacked model is served from the disk, so
both are synced before "wrote" is printed. `SyncedWriter` syncs every SYNC_EVERY bytes as it goes:
the disk works while the writer's caller receives and hashes the next block, instead of one long
fsync at the end (docs/benchmarks.md §7), and the dirty pages a 70 GB model leaves stay bounded.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from xcforge.console import echo

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

SYNC_EVERY = 64 << 20

_ASIDE = ".{name}.replaced-"
# Not waited for; kept so that an `rm` still running when a long-lived caller (a test) drops its
# handle is not reported as an abandoned subprocess.
_deleting: list[subprocess.Popen[bytes]] = []


def replace(new: Path, path: Path) -> None:
    """`new` takes the name `path`; the file that had it is deleted by a process of its own."""
    prefix = _ASIDE.format(name=path.name)
    # Left over from a run killed before its `rm` ran (or while it did: rm -f on a gone file is fine).
    doomed = sorted(path.parent.glob(f"{prefix}*"))
    old = path.with_name(f"{prefix}{os.getpid()}")
    try:
        # Two renames, not one over the other: ext4 (auto_da_alloc) makes a rename over an existing
        # file write the new one out first, which is most of that time. For the microseconds
        # between them the path is missing; nothing reads dist/ during a build.
        os.rename(path, old)
        doomed.append(old)
    except FileNotFoundError:
        pass
    os.replace(new, path)
    if doomed:
        _delete_detached(doomed)


def _delete_detached(paths: list[Path]) -> None:
    cmd = ["rm", "-f", "--", *map(str, paths)]
    echo(cmd)
    try:
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not ours to wait for: no signal from our terminal reaches it
        )
        _deleting.append(process)
    except OSError:
        for path in paths:  # no rm on PATH: delete them here, in our own time
            path.unlink(missing_ok=True)


__all__ = ["replace"]


class SyncedWriter:
    """Writes to `out`, fdatasync every SYNC_EVERY bytes; `sync()` at the end puts the rest there."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.unsynced = 0

    def write(self, data: ReadableBuffer) -> None:
        self.out.write(data)
        self.unsynced += memoryview(data).nbytes
        if self.unsynced >= SYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        self.out.flush()
        os.fdatasync(self.out.fileno())
        self.unsynced = 0


def write_synced(path: Path, data: bytes) -> None:
    """`path` written and on the disk."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def sync_directory(path: Path) -> None:
    """The directory's entries (names made or renamed in it) on the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
