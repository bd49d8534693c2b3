"""`render`: write the committed Dockerfiles under images/<target>/, or check them for drift."""

from __future__ import annotations

import argparse
import sys

from xcforge.commands._targets import add_target_arguments, selected_targets
from xcforge.errors import RenderError
from xcforge.render import write_or_check


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "render", parents=[common], help="write images/<target>/Dockerfile from templates (--check: fail on drift)"
    )
    add_target_arguments(parser)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 4 if a committed file is stale")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, targets = selected_targets(args)
    results = write_or_check(matrix, targets, check=args.check)
    for result in results:
        print(f"{result.status:8} {result.path}", file=sys.stdout)
    bad = [r for r in results if r.status in {"stale", "missing"}]
    if bad:
        names = ", ".join(r.target for r in bad)
        raise RenderError(
            f"committed Dockerfiles are out of date for: {names}; run `python build.py render --all` and commit"
        )
    return 0
