"""The README's promises match the repository: the quick start's two commands, CI's test command,
and the CLI commands it documents."""

from __future__ import annotations

import re
from pathlib import Path

from xcforge.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _quick_start() -> list[str]:
    section = README.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_quick_start_is_two_commands_that_exist():
    commands = _quick_start()
    assert len(commands) == 2
    for command in commands:
        script = command.removeprefix("sudo ").split()[0]
        assert (REPO / script).is_file(), script


def test_ci_runs_the_readme_test_command():
    test_command = _quick_start()[1].removeprefix("sudo ")
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(test_command)}\b", ci, re.M), f".ci/run does not call {test_command}"
    assert "scripts/provision.sh" in ci


def test_documented_commands_exist():
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    documented = set(re.findall(r"`python build\.py ([a-z][a-z-]+)", README))
    assert documented <= known, documented - known
