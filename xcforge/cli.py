"""Command line: `python build.py [build] --target ascend`, `render --all --check`, and friends.

`build` is the default command, so `python build.py --target cpu --dry-run` works as the
README says. Every failure is one of xcforge.errors.KNOWN_ERRORS printed as `error: ...` lines
with its exit code (xcforge.errors.exit_code); tracebacks only with --debug. Command modules
register their own subparsers, so this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from xcforge import __version__
from xcforge.errors import KNOWN_ERRORS, ConfigError, Interrupted, exit_code

DEFAULT_COMMAND = "build"

# Modules exposing register(subparsers), each with the commands it adds (set_defaults(func=...)).
# The names are written here so that a run imports only its own command's module: `build` then
# skips the signing, deploy and CI code (a tenth of a second of a cached build's 1-2 s of
# orchestration). tests/foundation/test_cli.py checks that every module registers exactly these.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "xcforge.commands.build_cmds": ("build", "contexts", "merge"),
    "xcforge.commands.render_cmds": ("render",),
    "xcforge.commands.deps_cmds": ("deps",),
    "xcforge.commands.sign_cmds": ("keygen", "sign", "verify", "promote", "audit"),
    "xcforge.commands.sbom_cmds": ("sbom",),
    "xcforge.commands.smoke_cmds": ("smoke",),
    "xcforge.commands.deploy_cmds": ("deploy",),
    "xcforge.commands.ci_cmds": ("workflows", "ci"),
    "xcforge.commands.bundle_cmds": ("bundle", "import"),
    "xcforge.commands.zstd_cmds": ("zstd",),
    "xcforge.commands.model_cmds": ("model",),
}
COMMANDS = frozenset(name for names in COMMAND_MODULES.values() for name in names)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as ConfigError (one line, exit 2, no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (see --help)")


MATRIX_ENV = "XCFORGE_MATRIX"


def _matrix_path(value: str) -> Path:
    if value.strip():
        return Path(value)
    env = os.environ.get(MATRIX_ENV)
    if env is not None and not env.strip():
        raise ConfigError(
            f"${MATRIX_ENV} is set but empty; unset it (the default is ./matrix.yaml) or set it to the matrix "
            "file's path"
        )
    raise ConfigError("--matrix is empty; name the matrix file (e.g. --matrix matrix.yaml)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with `command` only the module that registers it."""
    parser = _Parser(
        prog="build.py",
        description="Build, sign and smoke-test vLLM images for the targets of matrix.yaml (cuda, ascend, cpu, ...).",
    )
    parser.add_argument("--version", action="version", version=f"xcforge {__version__}")
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    # A string default goes through `type` too (argparse converts it when the flag is absent), so an
    # empty $XCFORGE_MATRIX is refused as such instead of reading the current directory.
    common.add_argument(
        "--matrix", type=_matrix_path, default=os.environ.get(MATRIX_ENV, "matrix.yaml"), help="matrix file"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module_name, names in COMMAND_MODULES.items():
        if command is None or command in names:
            importlib.import_module(module_name).register(subparsers, common)
    parser.set_defaults(_subparsers=subparsers)
    return parser


def _with_default_command(argv: list[str]) -> list[str]:
    if not argv or argv[0] in COMMANDS or argv[0] in {"-h", "--help", "--version"}:
        return argv
    return [DEFAULT_COMMAND, *argv]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list or os.environ.get("XCFORGE_DEBUG") == "1"
    try:
        argv = _with_default_command(args_list)
        parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
        args = parser.parse_args(argv)
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
    except KNOWN_ERRORS as err:
        if debug:
            traceback.print_exc()
        for line in err.message.splitlines() or [""]:
            print(f"error: {line}", file=sys.stderr)
        return exit_code(err)
    except ModuleNotFoundError as exc:
        if debug:
            traceback.print_exc()
        print(
            f"error: missing Python dependency ({exc.name}); run `scripts/provision.sh` or `pip install -e .`",
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
