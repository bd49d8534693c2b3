"""`build` (the default command) and `merge`: the main flow of xcforge.

matrix → plan → rendered Dockerfile → buildx → report [→ signatures → smoke results].
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from xcforge.bake.docker_env import start_docker_check
from xcforge.commands._keys import add_private_keys
from xcforge.commands._targets import add_target_arguments, selected_targets
from xcforge.config.matrix import Matrix, is_arch, load_matrix
from xcforge.config.site import BUILDER_NAME_RE, load_site
from xcforge.errors import ConfigError
from xcforge.paths import DIST_DIR
from xcforge.plan.build_plan import BuildOptions, BuildPlan, make_plan, named_contexts_for
from xcforge.plan.verification import lock_level, lock_status
from xcforge.publish.options import ZstdOptions, resolve_zstd_options
from xcforge.render.dockerfile import render_target

if TYPE_CHECKING:
    from xcforge.pipeline import LaterStages


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "build",
        parents=[common],
        help="build targets (the default command)",
        description="Build targets with docker buildx. Without --registry the result is an OCI archive under "
        "dist/ (and the native platform is loaded into the local engine).",
    )
    add_target_arguments(parser)
    parser.add_argument("--list", action="store_true", help="list the targets, one line each, and exit")
    parser.add_argument("--dry-run", action="store_true", help="print the build plan and Dockerfile; touch nothing")
    parser.add_argument("--site", type=Path, help="site config (mirrors, indexes, proxies, CA); default $XCFORGE_SITE")
    parser.add_argument("--registry", help="registry and repository prefix, e.g. 127.0.0.1:5000/xcforge")
    parser.add_argument("--push", action="store_true", help="push a multi-platform index to --registry")
    parser.add_argument(
        "--platform", action="append", default=[], help="build only this platform (repeatable), e.g. linux/arm64"
    )
    parser.add_argument(
        "--push-by-digest",
        action="store_true",
        help="split mode for CI: build one --platform and push it untagged; `merge` assembles the index",
    )
    parser.add_argument("--wheelhouse", type=Path, help="directory of wheels offered to pip (air-gapped, vendor SDKs)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the fingerprint is unchanged")
    parser.add_argument("--keep-going", action="store_true", help="with several targets: go on after a failure")
    parser.add_argument(
        "--builder",
        help="buildx builder for every platform (default: the site's `builders` map, else the current builder)",
    )
    parser.add_argument("--dist", type=Path, default=DIST_DIR, help="where archives and reports go (default dist/)")
    parser.add_argument(
        "--zstd",
        action="store_true",
        help="with --push: also publish each image's zstd variant under <tag>-zstd (the gzip tags stay)",
    )
    parser.add_argument("--smoke", action="store_true", help="smoke-test each built image")
    parser.add_argument("--sign", action="store_true", help="sign each pushed digest (needs --push and keys)")
    add_private_keys(parser, "for --sign (loaded and decrypted before the build starts)")
    parser.add_argument("--keyless", action="store_true", help="with --sign: also sign keyless with Sigstore (OIDC)")
    parser.set_defaults(func=run_build)

    contexts = subparsers.add_parser(
        "contexts",
        parents=[common],
        help="prepare the named build contexts docker-bake.hcl names (engine wheel, engine sdists)",
        description="Fill dist/.contexts so that `docker buildx bake -f docker-bake.hcl TARGET` builds without "
        "xcforge.",
    )
    add_target_arguments(contexts)
    contexts.add_argument("--site", type=Path, help="site config (package index for the sdists)")
    contexts.add_argument("--dist", type=Path, default=DIST_DIR, help=argparse.SUPPRESS)
    contexts.set_defaults(func=run_contexts)

    merge = subparsers.add_parser(
        "merge",
        parents=[common],
        help="assemble a multi-platform index from per-platform digests (split CI builds)",
    )
    merge.add_argument("--target", "-t", required=True)
    merge.add_argument("--registry", required=True)
    merge.add_argument("--digest", action="append", default=[], required=True, help="platform digest (repeatable)")
    merge.add_argument("--site", type=Path)
    merge.add_argument("--dist", type=Path, default=DIST_DIR)
    merge.set_defaults(func=run_merge)


def _list(args: argparse.Namespace) -> int:
    from xcforge.render.dockerfile import vendor_assertions

    matrix = load_matrix(args.matrix)
    width = max(len(n) for n in matrix.targets)
    for name, target in matrix.targets.items():
        engine = f"vLLM {matrix.engine_version(target)}" if target.engine.is_vllm else "llama.cpp server (GGUF)"
        if target.plugin:
            engine += f" + {target.plugin.name} {target.plugin.version}"
        platforms = ",".join(target.archs)
        print(f"{name:<{width}}  {platforms:<13}  {engine:<40}  {target.description}")
        if target.vendor_image:
            asserted = " ".join(f"{pkg}{spec}" for pkg, spec in vendor_assertions(matrix, target).items())
            print(f"{'':<{width}}    {'mode':<12} {'vendor-image':<14} on {target.base.image}; asserts {asserted}")
        # What the committed lock proves per platform (the first rung of the verification ladder);
        # builds and smoke tests raise it (report.json says how far each image got).
        for platform in target.platforms:
            status, note = lock_status(matrix, target, platform)
            level = lock_level(status)
            detail = f"lock {status}" + (f" ({note})" if note else "")
            if status == "partial":
                detail += " (engine locked, plugin resolved at build time)"
            print(f"{'':<{width}}    {platform:<12} {level:<14} {detail}")
            # Which CPUs it runs on (the launcher refuses others with the image to use instead).
            arch = platform.split("/", 1)[1]
            isa = target.cpu_isa.get(arch) if is_arch(arch) else None
            if isa:
                print(f"{'':<{width}}    {'':<12} {'needs':<14} {isa.describes} ({' '.join(isa.requires)})")
        if target.engine.fallback and any(p in target.engine.fallback.platforms for p in target.platforms):
            fb = target.engine.fallback
            print(f"{'':<{width}}    {'':<12} {'fallback':<14} {', '.join(fb.platforms)}: {target.engine.package} "
                  f"{fb.version} where a site names it in engine_fallback")  # fmt: skip
    print("\nWhich image fits which CPU, with the docker run line for each: docs/operators.md")
    return 0


def _base_digest_now(plan: BuildPlan) -> str:
    """What a build would pin the base to, read from the site's registry now (a dry run writes nothing;
    bases the site does not map are not looked up: public registries may be out of reach)."""
    if "@sha256:" in plan.base_ref or plan.base_ref == plan.base_original:
        return "base now:      (not looked up: " + ("pinned)" if "@sha256:" in plan.base_ref else "no site mirror)")
    from ocicore import registry
    from ocicore.errors import RegistryError

    try:
        digest, configs = registry.describe(plan.base_ref, retries=0)
        # The label every stand-in base carries (xcforge.provision.standin.LABEL_OF).
        standin = any("io.xcforge.stand-in" in labels for labels in registry.config_labels(configs).values())
    except RegistryError as exc:
        return f"base now:      not reachable ({exc.message.split(': ', 1)[-1][:160]})"
    return f"base now:      {digest}" + (" (a stand-in)" if standin else "") + "; a build pins what it resolves"


def _check_dist(dist: Path) -> None:
    if dist.exists() and not dist.is_dir():
        raise ConfigError(f"--dist {dist}: is a file; give the directory archives and reports go into")


def _check_wheelhouse(path: Path | None) -> None:
    if path is None:
        return
    if not path.exists():
        raise ConfigError(
            f"--wheelhouse {path}: does not exist; give the directory of wheels (e.g. `pip download -d DIR ...`)"
        )
    if not path.is_dir():
        raise ConfigError(f"--wheelhouse {path}: is a file, not a directory; give the directory the .whl files are in")


def _options(args: argparse.Namespace) -> BuildOptions:
    if args.builder is not None and not BUILDER_NAME_RE.fullmatch(args.builder):
        raise ConfigError(
            f"--builder {args.builder!r}: not a buildx builder name (letters, digits, . _ -); "
            "give a name `docker buildx ls` lists"
        )
    _check_dist(args.dist)
    if args.push and args.push_by_digest:
        raise ConfigError(
            "--push and --push-by-digest are different output modes: --push pushes a tagged multi-platform "
            "index, --push-by-digest one untagged platform for `merge`; pass only one of them"
        )
    _check_wheelhouse(args.wheelhouse)
    if args.sign and not (args.push or args.push_by_digest):
        raise ConfigError(
            "--sign signs pushed digests only: add --push --registry R (an archive is signed with `sign`)"
        )
    for flag, given in (("--sm2-key", args.sm2_key), ("--cosign-key", args.cosign_key), ("--keyless", args.keyless)):
        if given and not args.sign:
            raise ConfigError(f"{flag} is for signing: add --sign (with --push), or drop {flag}")
    return BuildOptions(
        registry=args.registry,
        push=args.push,
        platforms=tuple(args.platform),
        push_by_digest=args.push_by_digest,
        wheelhouse=args.wheelhouse,
        force=args.force,
        dist_dir=args.dist,
    )


def run_build(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    matrix, targets = selected_targets(args)
    site = load_site(args.site)
    options = _options(args)
    zstd = resolve_zstd_options(push=args.push, dist_dir=options.dist_dir) if args.zstd else None
    plans = [make_plan(matrix, target, site, options) for target in targets]
    if args.dry_run:
        for plan in plans:
            print(f"# ---- build plan: {plan.target.name}")
            print(plan.describe())
            print(_base_digest_now(plan))
            print(f"# ---- Dockerfile ({plan.dockerfile}):")
            sys.stdout.write(render_target(matrix, plan.target).text)
        return 0
    later = _later_stages(args, matrix, options, zstd)  # keys decrypted, options checked: before any build
    start_docker_check()  # the engine answers while the build stages load
    from xcforge.bake.stage import BuildRequest
    from xcforge.pipeline import run_builds

    request = BuildRequest(
        matrix=matrix, plans=plans, options=options, builder=args.builder, keep_going=args.keep_going
    )
    return run_builds(request, later)


def _later_stages(
    args: argparse.Namespace, matrix: Matrix, options: BuildOptions, zstd: ZstdOptions | None
) -> LaterStages:
    """Each later stage's options, resolved by its own module now (zstd's already, before a dry run
    too): a wrong password stops the run here, before anything is built, pushed or tagged. Keys are
    not loaded for --dry-run (no password prompt for a plan)."""
    from xcforge.pipeline import LaterStages
    from xcforge.sign.options import SignOptions, resolve_signing_keys
    from xcforge.smoke.options import SmokeOptions

    sign = None
    if args.sign:
        keys = resolve_signing_keys(args.sm2_key, args.cosign_key, keyless=args.keyless, missing="--sign needs")
        sign = SignOptions(keys, options.dist_dir)
    return LaterStages(
        zstd=zstd,
        sign=sign,
        smoke=SmokeOptions(matrix) if args.smoke else None,
    )


def run_contexts(args: argparse.Namespace) -> int:
    from xcforge.bake.contexts import prepare_contexts

    matrix, targets = selected_targets(args)
    site = load_site(args.site)
    plans = [make_plan(matrix, target, site, BuildOptions(dist_dir=args.dist)) for target in targets]
    engine_dir, _ = prepare_contexts(matrix, plans)
    for target in targets:  # what the committed file names, also where the site replaces it
        for path in named_contexts_for(matrix, target, args.dist / ".contexts").values():
            path.mkdir(parents=True, exist_ok=True)
    print(f"engine wheel: {engine_dir}")
    for plan in plans:
        print(f"{plan.target.name}: contexts ready; docker buildx bake -f docker-bake.hcl {plan.target.name}")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    from xcforge.pipeline import merge_and_report

    matrix = load_matrix(args.matrix)
    target = matrix.target(args.target)
    site = load_site(args.site)
    _check_dist(args.dist)
    options = BuildOptions(registry=args.registry, push=True, dist_dir=args.dist)
    plan = make_plan(matrix, target, site, options)
    return merge_and_report(matrix, plan, args.digest)
