"""The command table in xcforge/cli.py names what each module registers, so a run can import only its
own command's module. Kept true here: a module that adds or renames a command fails this test."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from xcforge import cli
from xcforge.paths import REPO_ROOT as REPO


@pytest.mark.parametrize("module_name", sorted(cli.COMMAND_MODULES))
def test_each_module_registers_exactly_the_commands_the_table_names(module_name: str) -> None:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="command")
    importlib.import_module(module_name).register(subparsers, argparse.ArgumentParser(add_help=False))
    assert tuple(subparsers.choices) == cli.COMMAND_MODULES[module_name]


def test_a_command_parser_holds_only_its_module_and_the_full_one_holds_all() -> None:
    assert set(cli.build_parser("render")._subparsers._group_actions[0].choices) == {"render"}  # type: ignore[union-attr]
    assert set(cli.build_parser()._subparsers._group_actions[0].choices) == cli.COMMANDS  # type: ignore[union-attr]


def test_build_imports_no_signing_deploy_or_ci_command_code() -> None:
    # The point of the table: `build.py --target cpu --dry-run` does not pay for the other commands.
    code = (
        "import sys\n"
        "from xcforge.cli import main\n"
        "main(['--target', 'cpu', '--dry-run'])\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('xcforge.commands.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    loaded = out.stdout.strip().splitlines()[-1].split()
    assert "xcforge.commands.build_cmds" in loaded
    assert not {"xcforge.commands.sign_cmds", "xcforge.commands.deploy_cmds", "xcforge.commands.ci_cmds"} & set(loaded)


def test_unknown_words_still_go_to_the_default_command() -> None:
    assert cli._with_default_command(["--target", "cpu"]) == ["build", "--target", "cpu"]
    assert cli._with_default_command(["sign", "x"]) == ["sign", "x"]
    assert cli._with_default_command(["--help"]) == ["--help"]
