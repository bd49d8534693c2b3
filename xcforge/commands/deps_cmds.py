"""`deps`: resolve every target's dependency sets and write the committed locks (or check them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from xcforge.commands._drift import report_drift
from xcforge.commands._targets import add_target_arguments, selected_targets
from xcforge.config.site import SiteConfig, load_site
from xcforge.errors import ConfigError
from xcforge.lock import deps


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "deps",
        parents=[common],
        help="resolve each target/platform/Python's dependencies and write images/<target>/locks/ "
        "(--check: offline drift check; --dry-run: resolve and report only)",
    )
    add_target_arguments(parser)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 4 if a lock is out of date")
    parser.add_argument("--dry-run", action="store_true", help="resolve and report; write nothing")
    parser.add_argument(
        "--site",
        type=Path,
        help="resolve through a site's mirrors and wheelhouse (default: the matrix's own indexes, as "
        "production builds use them; the machine's stand-in default is ignored here)",
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        help="a directory of wheels that may stand in for an unreachable engine index (default: the site's, "
        "else pip's configured find-links); a lock made from it says so in its header and deps.json",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    matrix, selected = selected_targets(args)
    # A target built on the vendor's own image has no set to lock: check-install asserts the vendor's.
    targets = [t for t in selected if not t.engine.is_vendor_image]
    for target in selected:
        if target.engine.is_vendor_image:
            print(f"{target.name:7} vendor image  {target.base.image}: its own set, asserted at build time (no lock)")
    if args.check:
        return report_drift(
            deps.check(matrix, targets), what="dependency locks", fix="python build.py deps --all", root=matrix.root
        )
    site = load_site(args.site) if args.site else SiteConfig()
    site.check_targets(matrix)
    probe = deps.IndexProbe(site)
    if args.wheelhouse is not None and not args.wheelhouse.is_dir():
        raise ConfigError(f"--wheelhouse: '{args.wheelhouse}' is not a directory; name a directory of wheels")
    wheelhouse = args.wheelhouse or site.wheelhouse or deps.pip_wheelhouse()
    resolver = deps.uv_version()
    all_results: list[deps.SetResult] = []
    changes: list[str] = []
    for target in targets:
        results = [deps.resolve_set(lset, site, probe, wheelhouse) for lset in deps.lock_sets(matrix, target)]
        for result in results:
            print(deps.format_line(result), flush=True)
        all_results += results
        sdist = deps.source_sha256(matrix, target, site)
        if sdist:
            print(
                f"{target.name:7} sources      {target.engine.package}=={matrix.engine_version(target)} sha256:{sdist}"
            )
        if not args.dry_run and not any(r.status == "conflict" for r in results):
            changes += deps.write(matrix, target, results, resolver, sdist=sdist)
    for line in changes:
        print(f"changed  {line}")
    statuses = ("locked", "partial", "unverified", "conflict", "refused")
    counts = {s: sum(r.status == s for r in all_results) for s in statuses}
    print(
        f"{counts['locked']} locked, {counts['partial']} partial (plugin unverified), "
        f"{counts['unverified']} UNVERIFIED, {counts['conflict']} conflicts, {counts['refused']} REFUSED "
        "(the matrix's targets.<name>.refused)"
    )
    deps.raise_on_conflict(all_results)
    return 0
