"""`render`: write the committed Dockerfiles under images/<target>/, docker-bake.hcl and the doc
sections generated from the matrix and the code (README's targets, docs/engine.md's backends), or
check them for drift."""

from __future__ import annotations

import argparse

from xcforge.bake import definition
from xcforge.commands._drift import report_drift
from xcforge.commands._targets import add_target_arguments, selected_targets
from xcforge.docgen import doc_tables, readme_table
from xcforge.render.dockerfile import write_or_check


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "render",
        parents=[common],
        help="write images/<target>/Dockerfile, docker-bake.hcl, README's target list and table and docs/engine.md's "
        "backend table (--check: fail on drift)",
    )
    add_target_arguments(parser)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 4 if a committed file is stale")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, targets = selected_targets(args)
    results = [
        *write_or_check(matrix, targets, check=args.check),
        definition.write_or_check(matrix, check=args.check),
        *readme_table.write_or_check(matrix, check=args.check),
        *doc_tables.write_or_check(matrix, check=args.check),
    ]
    return report_drift(
        results,
        what="committed Dockerfiles, bake file and generated doc sections",
        fix="python build.py render --all",
        root=matrix.root,
    )
