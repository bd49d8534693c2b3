"""Command line: `python build.py [build] --target ascend`, `render --all --check`, and friends.

`build` is the default command, so `python build.py --target cpu --dry-run` works as the
README says. Every failure is an XcforgeError printed as `error: ...` lines with the error's exit
code; tracebacks only with --debug. Command modules register their own subparsers, so this file
only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from ocicore.errors import ConfigError, Interrupted, XcforgeError
from xcforge import __version__

DEFAULT_COMMAND = "build"

# Modules exposing register(subparsers); each adds its commands with set_defaults(func=...).
# A module that is not there yet (work in progress) is skipped, not fatal.
COMMAND_MODULES = (
    "xcforge.commands.build_cmds",
    "xcforge.commands.render_cmds",
    "xcforge.commands.deps_cmds",
    "xcforge.commands.sign_cmds",
    "xcforge.commands.sbom_cmds",
    "xcforge.commands.smoke_cmds",
    "xcforge.commands.deploy_cmds",
    "xcforge.commands.ci_cmds",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as ConfigError (one line, exit 2, no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="build.py",
        description="Build, sign and smoke-test vLLM images for the targets of matrix.yaml (cuda, ascend, cpu, ...).",
    )
    parser.add_argument("--version", action="version", version=f"xcforge {__version__}")
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    common.add_argument(
        "--matrix", type=Path, default=Path(os.environ.get("XCFORGE_MATRIX", "matrix.yaml")), help="matrix file"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.register(subparsers, common)
    parser.set_defaults(_subparsers=subparsers)
    return parser


def _with_default_command(argv: list[str], commands: set[str]) -> list[str]:
    if not argv or argv[0] in commands or argv[0] in {"-h", "--help", "--version"}:
        return argv
    return [DEFAULT_COMMAND, *argv]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list or os.environ.get("XCFORGE_DEBUG") == "1"
    try:
        parser = build_parser()
        commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
        args = parser.parse_args(_with_default_command(args_list, commands))
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        if args.matrix and not args.matrix.is_absolute() and not args.matrix.exists():
            # Let `python /path/to/build.py` work from anywhere: fall back to the checkout's matrix.
            candidate = Path(__file__).resolve().parent.parent / args.matrix
            if candidate.exists():
                args.matrix = candidate
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # `build.py --dry-run | head`: the reader went away; that is not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        err = Interrupted("interrupted; partial work was cleaned up and nothing was published under final tags")
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    except XcforgeError as err:
        if debug:
            traceback.print_exc()
        for line in err.message.splitlines() or [""]:
            print(f"error: {line}", file=sys.stderr)
        return err.exit_code
    except ModuleNotFoundError as exc:
        if debug:
            traceback.print_exc()
        print(
            f"error: missing Python dependency ({exc.name}); run `sudo scripts/provision.sh` or `pip install -e .`",
            file=sys.stderr,
        )
        return 3
    except Exception as exc:  # a bug in xcforge, not a user error
        if debug:
            traceback.print_exc()
        print(
            f"error: internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", file=sys.stderr
        )
        return 70
