"""`zstd`: publish the zstd variant (`<tag>-zstd`) of images the last build pushed (dist/report.json).

The same stage function `build --push --zstd` runs (xcforge.publish.zstd.publish_zstd), on the
recorded results: for split CI builds after `merge`, or for an image pushed before. The report
records each variant; `sign --target T` then signs its digests with the gzip ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from xcforge.errors import ConfigError, XcforgeError
from xcforge.paths import DIST_DIR

if TYPE_CHECKING:
    from xcforge.bake.result import BuildResult


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "zstd",
        parents=[common],
        help="publish the zstd variant (<tag>-zstd) of pushed images, next to the gzip ones",
        description="Recompress every gzip layer of each pushed image recorded in dist/report.json with zstd, in the "
        "registry, and tag the variant <tag>-zstd (the gzip tags stay). Idempotent: layers already transcoded are "
        "reused.",
    )
    parser.add_argument(
        "--target", "-t", action="append", default=[], metavar="NAME", help="only this target (repeatable)"
    )
    parser.add_argument("--dist", type=Path, default=DIST_DIR, help="directory holding report.json (default dist/)")
    parser.set_defaults(func=run)


def _chosen(args: argparse.Namespace, results: list[BuildResult]) -> list[BuildResult]:
    from xcforge.config.matrix import load_matrix
    from xcforge.publish.zstd import why_not_publishable

    report = args.dist / "report.json"
    if not results:
        raise ConfigError(f"{report}: no builds recorded; build and push first (--registry R --push)")
    if not args.target:
        chosen = [r for r in results if why_not_publishable(r) is None]
        if not chosen:
            raise ConfigError(
                f"{report}: no pushed, tagged build to recompress; build with --registry R --push (or name --target)"
            )
        return chosen
    matrix = load_matrix(args.matrix)
    chosen = []
    for name in dict.fromkeys(args.target):
        target = matrix.target(name)  # an unknown name is refused with the nearest valid one
        record = next((r for r in results if r.target == target.name), None)
        if record is None:
            raise ConfigError(f"zstd --target {name}: no build of it in {report}; build it with --registry R --push")
        problem = why_not_publishable(record)
        if problem:
            raise ConfigError(f"zstd --target {name}: {problem}")
        chosen.append(record)
    return chosen


def run(args: argparse.Namespace) -> int:
    from xcforge.publish.zstd import publish_zstd
    from xcforge.report.results import load_results, print_table, with_outcomes, write_reports
    from xcforge.sign.stage import record_variants

    if args.dist.exists() and not args.dist.is_dir():
        raise ConfigError(f"--dist {args.dist}: is a file; give the directory holding report.json")
    results = load_results(args.dist)
    chosen = _chosen(args, results)
    work = args.dist / ".cache" / "zstd"
    work.mkdir(parents=True, exist_ok=True)
    outcomes = [publish_zstd(record, work_dir=work) for record in chosen]
    # Only what was published goes into the report: a failed recompression leaves the gzip
    # build's record as it was (the gzip image is fine), and the exit code says what broke.
    done = [o for o in outcomes if not o.error]
    updated = {
        r.target: r for r in with_outcomes([r for r in chosen if r.target in {o.target for o in done}], published=done)
    }
    if updated:
        record_variants([(r, r.variants) for r in updated.values()], args.dist)
        write_reports([updated.get(r.target, r) for r in results], args.dist)
        print_table(list(updated.values()))
    for record in updated.values():
        for variant in record.variants:
            tags = ", ".join(ref.rpartition(":")[2] for ref in variant.refs) or "untagged"
            print(f"{record.target} {variant.compression} {record.image_repo}@{variant.digest} ({tags})")
    failed = [o for o in outcomes if o.error]
    if failed:
        first = failed[0]
        error = XcforgeError(
            f"{len(failed)} of {len(outcomes)} zstd variant(s) not published; first: {first.target}: {first.error}"
        )
        error.exit_code = first.error_code or 1
        raise error
    if any(record.signatures for record in updated.values()):
        print("note: the gzip digests were signed before; sign the variant too: python build.py sign --target T")
    return 0
