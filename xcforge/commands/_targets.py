"""Selecting targets from the matrix, shared by the commands."""

from __future__ import annotations

import argparse

from xcforge.config.matrix import Matrix, Target, load_matrix
from xcforge.errors import ConfigError


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", "-t", action="append", default=[], metavar="NAME", help="target to act on (repeatable)"
    )
    parser.add_argument("--all", action="store_true", help="act on every target in the matrix")


def selected_targets(args: argparse.Namespace, *, required: bool = True) -> tuple[Matrix, list[Target]]:
    if args.all and args.target:
        raise ConfigError("--all and --target exclude each other: give one (--all acts on every target)")
    matrix = load_matrix(args.matrix)
    if args.all:
        return matrix, list(matrix.targets.values())
    if not args.target:
        if required:
            raise ConfigError(
                f"name a target with --target NAME or use --all; valid targets: {', '.join(matrix.targets)}"
            )
        return matrix, []
    return matrix, [matrix.target(name) for name in dict.fromkeys(args.target)]
