"""What xcforge prints while it works, in one place: progress lines, echoed commands, and GitHub
Actions' workflow commands (log groups, annotations, step summary, masks, step outputs).

Progress (`say`) and echoed commands (`echo`, every external command before it runs) go to
stderr, one whole line at a time under one lock, so lines from the threads that watch parallel
bakes never interleave; the live bake lines (xcforge/bake/runner.py) draw under the same lock.
Results go to stdout (the CLI and report stage), not through here.

The Actions half degrades to plain text outside Actions, so the rest of xcforge calls it
unconditionally. Workflow commands are written to stdout (the runner reads commands from both
streams; stdout keeps them in order with our own output), after flushing stderr so an echoed
`+ docker ...` line is not overtaken by the group that contains it.

Escaping follows the runner's rules (actions/toolkit `command.ts`): in a message `%`, CR and LF
are escaped; in a property value (`file=`, `title=`) also `:` and `,`, which would otherwise end
the property. Without it, a message with a newline would be cut at the first line and a path with
a comma would silently lose the annotation's location.

Standard library only: `python -m xcforge.ci.runners` imports it before xcforge's dependencies
are installed (release.yml's detect-runners job).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, TextIO

# GitHub does not nest log groups: an inner ::group:: would close the outer one. Inner groups are
# printed as plain headings inside the outer group instead.
_group_depth = 0


def in_github_actions(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"


def escape_data(value: str) -> str:
    return str(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def format_command(command: str, message: str = "", properties: Mapping[str, object] | None = None) -> str:
    """`::command prop=value,prop=value::message`, with properties that are None left out."""
    props = ",".join(
        f"{key}={escape_property(str(value))}" for key, value in (properties or {}).items() if value is not None
    )
    return f"::{command}{' ' + props if props else ''}::{escape_data(message)}"


def _emit(line: str, stream: IO[str] | None = None) -> None:
    sys.stderr.flush()
    out = stream or sys.stdout
    print(line, file=out, flush=True)


@contextlib.contextmanager
def group(title: str, stream: IO[str] | None = None) -> Iterator[None]:
    """Fold everything printed inside into one collapsible log section (a heading elsewhere)."""
    global _group_depth
    native = in_github_actions() and _group_depth == 0
    if native:
        _emit(format_command("group", title), stream)
    else:
        _emit(f"==> {title}", stream)
    _group_depth += 1
    try:
        yield
    finally:
        _group_depth -= 1
        if native:
            sys.stdout.flush()
            _emit("::endgroup::", stream)


def _annotate(
    level: str,
    message: str,
    file: str | os.PathLike[str] | None,
    line: int | None,
    title: str | None,
    column: int | None,
    stream: IO[str] | None,
    echo: bool,
) -> None:
    if in_github_actions():
        properties = {"file": os.fspath(file) if file is not None else None, "line": line, "col": column}
        properties["title"] = title
        _emit(format_command(level, message, properties), stream)
        return
    if not echo:
        return
    where = ""
    if file is not None:
        where = os.fspath(file) + (f":{line}" if line is not None else "") + ": "
    # Outside Actions this goes with the rest of the diagnostics, on stderr.
    print(f"{level}: {where}{message}", file=stream or sys.stderr, flush=True)


def annotate_error(
    message: str,
    file: str | os.PathLike[str] | None = None,
    line: int | None = None,
    *,
    title: str | None = None,
    column: int | None = None,
    stream: IO[str] | None = None,
    echo: bool = False,
) -> None:
    """An error annotation on the run page (and on `file:line` in the diff when given).

    Outside Actions it prints nothing: an error is also raised and printed by the CLI as `error: ...`,
    and printing it here too would show it twice. Pass echo=True where nothing else reports it.
    """
    _annotate("error", message, file, line, title, column, stream, echo)


def warning(
    message: str,
    file: str | os.PathLike[str] | None = None,
    line: int | None = None,
    *,
    title: str | None = None,
    column: int | None = None,
    stream: IO[str] | None = None,
) -> None:
    """A warning annotation in Actions; `warning: [file:line: ]message` on stderr elsewhere."""
    _annotate("warning", message, file, line, title, column, stream, True)


def notice(
    message: str,
    file: str | os.PathLike[str] | None = None,
    line: int | None = None,
    *,
    title: str | None = None,
    stream: IO[str] | None = None,
) -> None:
    """A notice annotation in Actions; `notice: ...` on stderr elsewhere."""
    _annotate("notice", message, file, line, title, None, stream, True)


def mask(value: str, stream: IO[str] | None = None) -> None:
    """Ask the runner to replace `value` with *** in every later log line. No-op outside Actions.

    The runner masks line by line, so a multi-line secret (a PEM key) is registered one line at a time.
    """
    if not in_github_actions() or not value:
        return
    for part in str(value).splitlines():
        if part.strip():
            _emit(format_command("add-mask", part), stream)


def write_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> bool:
    """Append markdown to the job's summary page; False (and nothing written) outside Actions."""
    path = (os.environ if env is None else env).get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return True


def set_output(name: str, value: str, env: Mapping[str, str] | None = None) -> bool:
    """Set a step output (`steps.<id>.outputs.<name>`); False outside Actions.

    Multi-line values use the heredoc form with a random delimiter, so a value can never end the
    block early and inject another output.
    """
    path = (os.environ if env is None else env).get("GITHUB_OUTPUT")
    if not path:
        return False
    value = str(value)
    with open(path, "a", encoding="utf-8") as fh:
        if "\n" in value or "\r" in value:
            delimiter = f"xcforge_{uuid.uuid4().hex}"
            fh.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
        else:
            fh.write(f"{name}={value}\n")
    return True


# --------------------------------------------------------------------------- progress and echoed commands

# One lock for every line xcforge writes to the terminal (and the live bake lines' redraws).
output_lock = threading.Lock()


def say(message: str, *, prefix: str | None = None) -> None:
    """One progress line on stderr; `prefix` names the stage (`[smoke] ...`)."""
    with output_lock:
        print(f"[{prefix}] {message}" if prefix else message, file=sys.stderr, flush=True)


_SECRET_MARKERS = ("password", "token", "secret")


def shell_line(argv: Sequence[str]) -> str:
    """Quote argv for the echo line; values of secret-looking flags are masked."""
    shown: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            shown.append("***")
            mask_next = False
            continue
        lowered = arg.lower()
        if lowered.startswith("--") and any(m in lowered for m in _SECRET_MARKERS):
            if "=" in arg:
                shown.append(arg.split("=", 1)[0] + "=***")
            else:
                shown.append(arg)
                mask_next = True
            continue
        shown.append(arg)
    return shlex.join(shown)


def echo(argv: Sequence[str], stream: TextIO | None = None) -> None:
    """The command about to run, as a shell line (the house rule: every external command is echoed)."""
    with output_lock:
        print(f"+ {shell_line(argv)}", file=stream or sys.stderr, flush=True)
