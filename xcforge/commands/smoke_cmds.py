"""`smoke`: smoke-test an already-built image (by digest, or the last build of a target)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ocicore.digest import is_sha256
from xcforge.bake.docker_env import check_docker
from xcforge.bake.result import BuildResult
from xcforge.commands._paths import blocking_file
from xcforge.config.matrix import load_matrix
from xcforge.errors import ConfigError, SmokeFailed
from xcforge.paths import DIST_DIR
from xcforge.report.results import load_results, print_table, with_outcomes, write_reports
from xcforge.smoke.checks import SmokeSubject, device_flags, run_smoke, smoke_outcome


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "smoke",
        parents=[common],
        help="smoke-test a built image (metadata, files, commands, doctor, serve)",
        description="Smoke-test IMAGE@DIGEST (or the target's last build recorded in dist/report.json).",
    )
    parser.add_argument("--target", "-t", required=True)
    parser.add_argument("--image", help="REPO@sha256:... to test (default: the last build of --target)")
    parser.add_argument("--platform", action="append", default=[], help="only this platform (repeatable)")
    parser.add_argument("--dist", type=Path, default=DIST_DIR)
    serve = parser.add_mutually_exclusive_group()
    serve.add_argument("--serve", dest="serve", action="store_true", default=None, help="force the serve test")
    serve.add_argument("--no-serve", dest="serve", action="store_false", help="skip the serve test")
    parser.add_argument("--model", type=Path, help="model directory for the serve test (default: a generated tiny one)")
    parser.add_argument(
        "--device",
        action="store_true",
        help="this machine has the target's hardware: pass its devices and driver mounts, expect a clean doctor",
    )
    parser.set_defaults(func=run)


def _load_results(dist: Path) -> list[BuildResult]:
    if dist.exists() and not dist.is_dir():
        raise ConfigError(f"--dist {dist}: is a file; give the directory holding report.json")
    return load_results(dist)


def run(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)
    target = matrix.target(args.target)
    if args.image and "@sha256:" in args.image and not is_sha256(args.image.rpartition("@")[2]):
        raise ConfigError(
            f"--image {args.image}: the digest must be sha256:<64 lower-case hex digits>; copy REPO@DIGEST "
            "as the build printed it"
        )
    # A directory that does not exist yet is where the generated tiny model goes (and is kept).
    if args.model is not None:
        blocker = blocking_file(args.model)
        if blocker is not None:
            raise ConfigError(f"--model {args.model}: {blocker} is a file; give a model directory (config.json, ...)")
    results = _load_results(args.dist)
    record = next((r for r in results if r.target == target.name), None)
    archive = None
    engine_install = "full"
    if args.image:
        if "@sha256:" not in args.image:
            raise ConfigError(f"--image {args.image}: smoke tests run against a digest (REPO@sha256:...), not a tag")
        ref = args.image
        platforms = tuple(args.platform) or target.platforms
        if record and record.digest and args.image.endswith(record.digest):
            engine_install = record.engine_install
    else:
        if record is None or not record.digest:
            raise ConfigError(
                f"{args.dist}/report.json has no build of '{target.name}'; build it first or pass --image REPO@DIGEST"
            )
        ref = f"{record.image_repo}@{record.digest}" if record.output.pushes else record.refs[0]
        platforms = tuple(args.platform) or tuple(p.platform for p in record.platforms)
        engine_install = record.engine_install
        archive = Path(record.archive) if record.archive else None
    native = check_docker().native_platform
    flags: tuple[str, ...] = ()
    if args.device:
        flags = device_flags(target)
        if target.runtime.devices and "--device" not in flags:
            raise ConfigError(
                f"--device: none of {', '.join(target.runtime.devices)} exists on this machine; "
                f"run on a [self-hosted, {target.backend}] runner"
            )
        platforms = tuple(p for p in platforms if p == native)
    subject = SmokeSubject(target, ref, platforms, native, engine_install, archive, flags)
    checks = run_smoke(subject, serve=args.serve, model_dir=args.model)
    outcome = smoke_outcome(target.name, checks, device=bool(flags))
    if record is not None:
        [updated] = with_outcomes([record], smoked=[outcome])
        write_reports([updated if r is record else r for r in results], args.dist)
        print_table([updated])
    failed = outcome.failed
    passed = sum(1 for c in checks if c.status == "pass")
    skipped = sum(1 for c in checks if c.status == "skip")
    print(f"smoke {target.name}: {passed} passed, {len(failed)} failed, {skipped} skipped")
    if failed:
        raise SmokeFailed(
            f"{len(failed)} smoke check(s) failed for {target.name}: " + ", ".join(c.check for c in failed)
        )
    return 0
