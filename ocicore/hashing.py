"""SHA-256 on a thread of its own, for streams where hashing is one of three steps in a row.

A registry download that goes into a file receives a block, hashes it and hands it on; on one thread
those add up (here about 0.5 s per GiB to receive, 0.7 s to hash), although hashlib and socket reads
both release the GIL. `ThreadedSha256` takes the hashing off the receiving thread: `update` queues the
block (bytes, which nobody can change afterwards) and a worker hashes it, so receiving, hashing and
the sink's writing (a thread of its own in the bundle writer) overlap on two cores. At most `depth`
blocks wait, so memory stays bounded and a slow hasher slows the receiver instead of filling memory.
"""

from __future__ import annotations

import hashlib
import queue
import threading


class ThreadedSha256:
    """`update(bytes)` from one thread, then `hexdigest()` once; the same digest as hashlib's."""

    def __init__(self, depth: int = 8) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._hash = hashlib.sha256()
        self._digest: str | None = None
        self._worker = threading.Thread(target=self._drain, name="sha256", daemon=True)
        self._worker.start()

    def _drain(self) -> None:
        while (block := self._queue.get()) is not None:
            self._hash.update(block)

    def update(self, block: bytes) -> None:
        if self._digest is not None:
            raise ValueError("ThreadedSha256: update after hexdigest")
        self._queue.put(block)

    def hexdigest(self) -> str:
        if self._digest is None:
            self._queue.put(None)
            self._worker.join()
            self._digest = self._hash.hexdigest()
        return self._digest

    def close(self) -> None:
        """Stop the worker without a digest (the stream failed); safe to call after hexdigest."""
        if self._digest is None:
            self.hexdigest()

    def __enter__(self) -> ThreadedSha256:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
