"""The stage order of a build run, in one place: check → contexts → build → push → zstd → record → sign
→ smoke → report.

Each stage is a function of the results of the one before and returns its own: build → a frozen
BuildResult per target, push → PushOutcome, zstd (`--zstd`) → PublishOutcome, sign → SignOutcome,
smoke → SmokeOutcome; the report stage puts them together, once, at the end (`with_outcomes`).
None of them imports a later one, and none changes another's result. The standalone `zstd`, `sign`
and `smoke` commands call the same stage functions on recorded results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xcforge import console
from xcforge.bake.contexts import check_rendered, prepare_contexts
from xcforge.bake.docker_env import check_docker, start_docker_check
from xcforge.bake.runner import BuilderNode, check_builder, prefetch_nodes
from xcforge.bake.stage import BuildRequest, build_all
from xcforge.config.matrix import Matrix
from xcforge.console import say
from xcforge.errors import BuildFailed, ConfigError
from xcforge.plan.build_plan import BuildPlan

if TYPE_CHECKING:  # resolved by the command line before the build; the stages load while it bakes
    from xcforge.publish.options import ZstdOptions
    from xcforge.sign.options import SignOptions
    from xcforge.smoke.options import SmokeOptions


@dataclass(frozen=True)
class LaterStages:
    """The options of the stages after the build, each resolved and checked by its own stage's
    module before the first bake starts; None: the stage does not run."""

    zstd: ZstdOptions | None = None
    sign: SignOptions | None = None
    smoke: SmokeOptions | None = None


def _load_later_stages() -> None:
    """The stages after the build: publish, sign, smoke, report. Imported here, not with this module, so
    that they load while the bakes run (`build_all(while_baking=...)`): a cached build waits there
    for seconds with this process idle, and loading them first (rich's tables, the smoke and sign
    stages, the audit log: 0.1 s) would put them on the user's clock before the bake starts. (The
    functions below import them again by name, from the module cache by then.)"""
    import xcforge.publish.push
    import xcforge.publish.zstd
    import xcforge.report.results
    import xcforge.sign.stage
    import xcforge.smoke.checks  # noqa: F401


def _describe(node: BuilderNode) -> str:
    declared = f", sent {'/'.join(node.declared)}" if node.declared else ""
    return f"{node.name} (own platform {node.native or '?'}{declared})"


def _check_builders(request: BuildRequest) -> None:
    """Every named builder answers before anything is built (or pushed)."""
    wanted: dict[str, set[str]] = {}
    for plan in request.plans:
        for platform, builder in request.builders_for(plan).items():
            if builder:
                wanted.setdefault(builder, set()).add(platform)
    for builder, platforms in sorted(wanted.items()):
        problem = check_builder(builder, platforms)
        if problem:
            raise ConfigError(
                f"builder {builder} (for {', '.join(sorted(platforms))}) is not usable: {problem}; "
                "create it with `docker buildx create --name " + builder + " ...` or fix `builders` in the site"
            )
        nodes = request.nodes(builder)
        described = ", ".join(_describe(node) for node in nodes) or "?"
        say(f"builder {builder}: {len(nodes)} node(s): {described}; builds {', '.join(sorted(platforms))}")


def run_builds(request: BuildRequest, later: LaterStages) -> int:
    plans = request.plans
    for plan in plans:
        if plan.blockers:
            raise ConfigError("\n".join(plan.blockers))
    start_docker_check()  # answered while the files are checked and the contexts prepared
    builders = {b for plan in plans for b in request.builders_for(plan).values()}
    # A named builder's nodes decide its bakes (one per platform on a multi-node builder): asked
    # now. The current builder's are for the report only: asked while the bakes run.
    prefetch_nodes(b for b in builders if b)
    check_rendered(request.matrix, plans, request.options.dist_dir / ".cache")
    _, engine_hash = prepare_contexts(request.matrix, plans)
    env = check_docker()
    say(f"docker {env.server_version}, buildx {'.'.join(map(str, env.buildx_version))}, native {env.native_platform}")
    _check_builders(request)

    def while_baking() -> None:
        prefetch_nodes(builders)
        _load_later_stages()

    builds = build_all(request, engine_hash, while_baking=while_baking)
    from xcforge.publish import push
    from xcforge.publish import zstd as publish
    from xcforge.report import results as report
    from xcforge.sign import stage as sign
    from xcforge.smoke import checks as smoke

    pushed = push.push_results(builds, plans)
    for message in [b.error for b in builds] + [o.error for o in pushed]:
        if message:
            console.annotate_error(message)
    failed = any(build.error for build in builds) or any(outcome.error for outcome in pushed)

    # The zstd variants, before anything is signed: the sign stage signs their digests too.
    published = publish.publish_results(builds, later.zstd) if later.zstd and not failed else []
    failed |= any(outcome.error for outcome in published)
    sign.record_builds(builds, request.options.dist_dir, pushed, published)
    signed = sign.sign_results(builds, later.sign, published) if later.sign and not failed else []
    failed |= any(outcome.error for outcome in signed)
    smoked = smoke.smoke_results(builds, later.smoke) if later.smoke and not failed else []
    failed |= any(outcome.error for outcome in smoked)

    # The report, once: each frozen build record with what the later stages returned for it.
    results = report.with_outcomes(builds, signed, smoked, published, pushed)
    dist = request.options.dist_dir
    json_path, md_path = report.write_reports(report.merge_into_report(results, dist), dist)
    report.print_table(results)
    say(f"report: {json_path} and {md_path}")
    for result in results:
        if result.digest:
            print(f"{result.target} {result.image_repo}@{result.digest}")
    failures = [(r, r.error) for r in results if r.error]
    if failures:
        first, first_error = failures[0]
        error = BuildFailed(f"{len(failures)} of {len(plans)} target(s) failed; first: {first_error.splitlines()[0]}")
        # The first failure's own exit code (6 for a registry, 7 for signing...) tells CI what broke.
        error.exit_code = first.error_code or BuildFailed.exit_code
        raise error
    if failed:
        return 9
    return 0


def merge_and_report(matrix: Matrix, plan: BuildPlan, digests: list[str]) -> int:
    """Split CI mode, second half: the index from per-platform digests (build stage), then the report."""
    from xcforge.publish.push import merge_digests
    from xcforge.report import results as report

    result = merge_digests(matrix, plan, digests)
    report.write_reports(report.merge_into_report([result], plan.dist_dir), plan.dist_dir)
    report.print_table([result])
    print(f"{plan.target.name} {plan.image_repo}@{result.digest}")
    return 0


__all__ = ["LaterStages", "merge_and_report", "run_builds"]
