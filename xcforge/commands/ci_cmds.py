"""`workflows` (write or check the generated GitHub workflows) and `ci` (helpers the workflows call)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from xcforge import console
from xcforge.ci import runners as runners_mod
from xcforge.commands._drift import report_drift
from xcforge.config.matrix import load_matrix
from xcforge.errors import ConfigError
from xcforge.paths import REPO_ROOT


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    workflows = subparsers.add_parser(
        "workflows",
        parents=[common],
        help="write .github/workflows/*.yml from matrix.yaml (--check: fail on drift)",
        description="Generate the GitHub Actions workflows (ci.yml, release.yml, target.yml) and "
        ".github/actionlint.yaml from matrix.yaml. They are committed; CI runs `workflows --check`.",
    )
    workflows.add_argument("--check", action="store_true", help="change nothing; exit 4 if a committed file is stale")
    workflows.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    workflows.set_defaults(func=run_workflows)

    ci_parser = subparsers.add_parser("ci", parents=[common], help="helpers the GitHub workflows call")
    ci_sub = ci_parser.add_subparsers(dest="ci_command", metavar="COMMAND", parser_class=type(ci_parser))
    ci_parser.set_defaults(func=lambda args: _missing(ci_parser))

    select = ci_sub.add_parser(
        "select-targets",
        parents=[common],
        help="validate a comma list of targets (or 'all') and set the step outputs <target>=true|false",
    )
    select.add_argument("--targets", default="all", help="comma-separated target names, or 'all' (default)")
    select.set_defaults(func=run_select_targets)

    detect = ci_sub.add_parser(
        "detect-runners",
        parents=[common],
        help="set the step outputs <label>=true|false: is a [self-hosted, <label>] runner registered and online",
    )
    detect.add_argument("--labels", help="comma-separated labels (default: every hardware label of the matrix)")
    source = detect.add_mutually_exclusive_group(required=True)
    source.add_argument("--runners", type=Path, help="output of `gh api repos/OWNER/REPO/actions/runners`")
    source.add_argument("--no-token", action="store_true", help="the runners API could not be asked")
    detect.add_argument("--declared", default="", help="labels known to be available (organisation runners)")
    detect.set_defaults(func=run_detect_runners)


def _missing(parser: argparse.ArgumentParser) -> int:
    raise ConfigError(f"{parser.prog}: choose a command (select-targets, detect-runners); see --help")


def _check_step_files() -> None:
    """The files Actions reads outputs and the summary from must be writable before anything is set."""
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        value = os.environ.get(name)
        if not value:
            continue
        path = Path(value)
        if path.is_dir():
            raise ConfigError(f"${name} {path}: is a directory; it must name a file (the runner sets it)")
        if not path.parent.is_dir():
            raise ConfigError(f"${name} {path}: directory {path.parent} does not exist; unset it outside Actions")


def run_workflows(args: argparse.Namespace) -> int:
    from xcforge.ci.workflows import write_or_check

    matrix = load_matrix(args.matrix)
    results = write_or_check(matrix, args.root, check=args.check)
    return report_drift(
        results,
        what="generated workflows (never edit them by hand)",
        fix="python build.py workflows",
        root=args.root,
    )


def selected_target_names(matrix_targets: list[str], spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names or names == ["all"]:
        return list(matrix_targets)
    import difflib

    unknown = [n for n in names if n not in matrix_targets]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, matrix_targets, n=1)
            hints.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise ConfigError(
            f"--targets: unknown target {', '.join(hints)}; valid targets: {', '.join(matrix_targets)} (or all)"
        )
    return [n for n in matrix_targets if n in names]


def run_select_targets(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)
    chosen = selected_target_names(list(matrix.targets), args.targets)
    # A refused target's engine is not built (matrix.yaml says why): a release never publishes it.
    refused = {n: matrix.targets[n].refused for n in chosen if matrix.targets[n].refused}
    chosen = [n for n in chosen if n not in refused]
    _check_step_files()
    for name in matrix.targets:
        console.set_output(name, "true" if name in chosen else "false")
        print(f"{name}={'true' if name in chosen else 'false'}")
    for name, why in refused.items():
        print(f"{name}: refused, not released: {why}")
    skipped = [n for n in matrix.targets if n not in chosen and n not in refused]
    summary = f"### Release targets\n\nreleasing: {', '.join(chosen) or 'none'}"
    if refused:
        summary += "\n\nrefused (matrix.yaml), not released:" + "".join(f"\n- {n}: {w}" for n, w in refused.items())
    if skipped:
        summary += f"\n\nnot selected (skipped): {', '.join(skipped)}"
    console.write_step_summary(summary + "\n")
    return 0


def run_detect_runners(args: argparse.Namespace) -> int:
    if args.labels:
        labels = [x.strip() for x in args.labels.split(",") if x.strip()]
    else:
        from xcforge.ci.workflows import hardware_labels

        labels = hardware_labels(load_matrix(args.matrix))
    runners = None
    if args.runners is not None:
        try:
            runners = runners_mod.parse_runners(args.runners.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"--runners {args.runners}: cannot read the runners list ({exc}); give the JSON file the "
                "GitHub API's runners list returned"
            ) from None
    _check_step_files()
    runners_mod.report_runners(runners_mod.detect_runners(labels, runners, args.declared.split(",")))
    sys.stdout.flush()
    return 0
