"""One line per event on stderr, prefixed `[xcforge]`, so the launcher's lines stand out in vLLM's log."""

from __future__ import annotations

import sys

PREFIX = "[xcforge]"


def _emit(text: str) -> None:
    # One event, one line: a message that carries a newline (an OS error, a file's content) is
    # folded so log collectors never split it.
    line = " ".join(text.split("\n"))
    sys.stderr.write(f"{PREFIX} {line}\n")
    sys.stderr.flush()


def info(text: str) -> None:
    _emit(text)


def warning(text: str) -> None:
    _emit(f"warning: {text}")


def error(text: str) -> None:
    _emit(f"error: {text}")
