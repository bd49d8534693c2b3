"""Progress of a step that takes more than a few seconds, as plain lines (CI logs stay readable).

`Progress("stand-in bases").say("building 2/4 ...")` prints `stand-in bases:  building 2/4 ...`,
aligned like provision.sh's own lines; `heartbeat("building 2/4 ...")` around a long subprocess
adds `... still running after 45 s` every $XCFORGE_HEARTBEAT_S seconds (15 by default). Lines go
to the file descriptor $XCFORGE_PROGRESS_FD names (provision.sh: its terminal, while the
commands' own output goes to its log), else to stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

DEFAULT_HEARTBEAT_S = 15.0


def heartbeat_seconds() -> float:
    try:
        seconds = float(os.environ.get("XCFORGE_HEARTBEAT_S", DEFAULT_HEARTBEAT_S))
    except ValueError:
        return DEFAULT_HEARTBEAT_S
    return seconds if seconds > 0 else DEFAULT_HEARTBEAT_S


def progress_stream() -> TextIO:
    fd = os.environ.get("XCFORGE_PROGRESS_FD", "")
    if fd.isdigit():
        with contextlib.suppress(OSError):
            return os.fdopen(int(fd), "w", buffering=1, closefd=False)
    return sys.stderr


class Progress:
    def __init__(self, step: str, stream: TextIO | None = None) -> None:
        self.step = step
        self.stream = stream or progress_stream()
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        with self._lock:
            print(f"{self.step + ':':<16} {message}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def heartbeat(self, doing: str, every: float | None = None) -> Iterator[None]:
        """Say `doing` now, then `doing: still running after N s` every `every` seconds until done."""
        every = every or heartbeat_seconds()
        started = time.monotonic()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(every):
                self.say(f"{doing}: still running after {time.monotonic() - started:.0f} s")

        self.say(doing)
        thread = threading.Thread(target=beat, name="xcforge-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
