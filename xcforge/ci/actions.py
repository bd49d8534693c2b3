"""GitHub Actions integration: log groups, annotations, step summary, masks, step outputs.

Everything here degrades to plain text outside Actions, so the rest of xcforge calls it
unconditionally. Workflow commands are written to stdout (the runner reads commands from both
streams; stdout keeps them in order with our own output), after flushing stderr so an echoed
`+ docker ...` line is not overtaken by the group that contains it.

Escaping follows the runner's rules (actions/toolkit `command.ts`): in a message `%`, CR and LF
are escaped; in a property value (`file=`, `title=`) also `:` and `,`, which would otherwise end
the property. Without it, a message with a newline would be cut at the first line and a path with
a comma would silently lose the annotation's location.

`python -m xcforge.ci.actions detect-runners ...` runs with the standard library alone, so a workflow
job can call it before installing xcforge's dependencies (release.yml's detect-runners job).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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


# --------------------------------------------------------------------------- self-hosted runners


@dataclass(frozen=True)
class RunnerAvailability:
    """Whether jobs with `runs-on: [self-hosted, <label>]` can run in this repository now."""

    label: str
    available: bool
    reason: str

    def summary_line(self) -> str:
        if self.available:
            return f"- `{self.label}`: {self.reason}"
        return f"- `{self.label}`: skipped: {self.reason}"


def parse_runners(text: str) -> list[dict[str, Any]]:
    """Runners from `gh api .../actions/runners`: the response object, a list, or one JSON object a line
    (`gh api --paginate --jq '.runners[]'`)."""
    text = text.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = data.get("runners", [data] if "labels" in data else [])
    if not isinstance(data, list):
        raise ValueError("expected a list of runners or an object with 'runners'")
    return [r for r in data if isinstance(r, dict)]


def _labels_of(runner: Mapping[str, Any]) -> set[str]:
    out = set()
    for label in runner.get("labels") or ():
        name = label.get("name") if isinstance(label, Mapping) else label
        if isinstance(name, str):
            out.add(name.lower())
    return out


def detect_runners(
    labels: Iterable[str],
    runners: Sequence[Mapping[str, Any]] | None,
    declared: Iterable[str] = (),
) -> list[RunnerAvailability]:
    """For each label: is a self-hosted runner with it registered and online?

    `runners` None means the API could not be asked (no token): nothing is available unless the
    label is `declared` (the XCFORGE_SELF_HOSTED_LABELS variable, for organisation-level runners,
    which the repository's runners API does not list).
    """
    declared_set = {d.strip().lower() for d in declared if d.strip()}
    out = []
    for label in labels:
        key = label.lower()
        if key in declared_set:
            out.append(RunnerAvailability(label, True, "declared in XCFORGE_SELF_HOSTED_LABELS"))
            continue
        if runners is None:
            out.append(
                RunnerAvailability(
                    label,
                    False,
                    f"no self-hosted {label} runner registered (RUNNERS_TOKEN secret not set, so none could be "
                    "looked up; set it or list the label in the XCFORGE_SELF_HOSTED_LABELS variable)",
                )
            )
            continue
        matching = [r for r in runners if {"self-hosted", key} <= _labels_of(r)]
        online = [r for r in matching if str(r.get("status", "")).lower() == "online"]
        if online:
            names = ", ".join(sorted(str(r.get("name", "?")) for r in online))
            out.append(RunnerAvailability(label, True, f"{len(online)} online ({names})"))
        elif matching:
            out.append(
                RunnerAvailability(label, False, f"self-hosted {label} runner registered but offline ({len(matching)})")
            )
        else:
            out.append(RunnerAvailability(label, False, f"no self-hosted {label} runner registered"))
    return out


def report_runners(results: Sequence[RunnerAvailability], env: Mapping[str, str] | None = None) -> None:
    """Step outputs `<label>=true|false`, a step-summary section, and the same lines in the log."""
    lines = ["### Self-hosted hardware runners", ""] + [r.summary_line() for r in results]
    for result in results:
        set_output(result.label, "true" if result.available else "false", env)
        if not result.available:
            # A skipped hardware job should be visible on the run page, not only in this job's log.
            notice(f"hardware jobs for [self-hosted, {result.label}] skipped: {result.reason}")
    write_step_summary("\n".join(lines) + "\n", env)
    for line in lines[2:]:
        print(line.removeprefix("- "))


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xcforge.ci.actions")
    sub = parser.add_subparsers(dest="command", required=True)
    detect = sub.add_parser("detect-runners", help="which self-hosted runner labels can run jobs now")
    detect.add_argument("--labels", required=True, help="comma-separated runner labels, e.g. gpu,ascend,mlu,arm64")
    source = detect.add_mutually_exclusive_group(required=True)
    source.add_argument("--runners", type=Path, help="JSON from `gh api repos/OWNER/REPO/actions/runners`")
    source.add_argument("--no-token", action="store_true", help="the runners API could not be asked")
    detect.add_argument("--declared", default="", help="labels known to exist (comma-separated)")
    args = parser.parse_args(argv)
    labels = [x.strip() for x in args.labels.split(",") if x.strip()]
    runners = None
    if args.runners is not None:
        try:
            runners = parse_runners(args.runners.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: {args.runners}: cannot read runners ({exc})", file=sys.stderr)
            return 2
    report_runners(detect_runners(labels, runners, args.declared.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
