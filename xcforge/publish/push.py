"""Built images → the registry: the publish stage's first step, before the zstd variants.

Publishing is two-phase so that a failed or interrupted build leaves nothing under the final tags:
the bake stage leaves each image of a push as a whole, digest-checked OCI archive (the build plan's
`built_archive`, under dist/.work), with its SBOM and provenance written beside it. This module
pushes that archive by digest, tags it last (ocicore/push.py), attaches the SBOMs, and deletes the
work archive. Registry errors are retried with backoff, then reported with the registry's words.
The split CI mode's second half (`merge`) is here too: an index from per-platform digests, tagged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ocicore import registry
from ocicore.digest import is_sha256
from ocicore.errors import RegistryError
from ocicore.push import push_layout
from ocicore.registry import RegistryClient, parse_reference
from xcforge import console
from xcforge.attest import sbom
from xcforge.bake import definition
from xcforge.bake.result import BuildResult, PlatformResult
from xcforge.bake.runner import RETRYABLE
from xcforge.bake.stage import REGISTRY_RETRIES, result_for
from xcforge.config.matrix import Matrix
from xcforge.console import say
from xcforge.errors import KNOWN_ERRORS, ConfigError, exit_code
from xcforge.plan.build_plan import BuildPlan, OutputMode
from xcforge.records import AttestationRecord
from xcforge.shell import DOCKER, run


@dataclass(frozen=True)
class PushOutcome:
    """The push of one built target: its SBOM records with where each was attached, the time it
    took, and the error that stopped it. The build record is not touched: the report stage puts the
    two together (xcforge/report/results.py, `with_outcomes`)."""

    target: str
    attestations: tuple[AttestationRecord, ...] = ()
    duration_s: float = 0.0
    error: str | None = None
    error_code: int = 0


def push_results(builds: Iterable[BuildResult], plans: Iterable[BuildPlan]) -> list[PushOutcome]:
    """Every image this run built for a registry, pushed from its work archive; the work archives
    are deleted afterwards, pushed or not."""
    by_target = {plan.target.name: plan for plan in plans if plan.output.pushes}
    try:
        return [
            push_built(build, by_target[build.target])
            for build in builds
            if build.target in by_target and build.status == "built" and not build.error
        ]
    finally:
        for plan in by_target.values():
            plan.built_archive.unlink(missing_ok=True)


def push_built(build: BuildResult, plan: BuildPlan) -> PushOutcome:
    """One image: pushed by digest, tagged last, then its SBOMs attached; errors are the outcome's."""
    started = time.monotonic()
    try:
        with console.group(f"push {plan.image_repo}@{build.digest}"):
            push_layout(
                plan.built_archive, plan.image_repo, plan.tags, progress=lambda m: say(f"[{plan.target.name}] {m}")
            )
            attestations = attach_sboms(plan, build.attestations)
        if plan.output is OutputMode.PUSH_BY_DIGEST:
            _record_digest(plan, build.digest or "")
    except KNOWN_ERRORS as exc:
        return PushOutcome(build.target, (), time.monotonic() - started, exc.message, exit_code(exc))
    return PushOutcome(build.target, attestations, time.monotonic() - started)


def attach_sboms(plan: BuildPlan, attestations: Iterable[AttestationRecord]) -> tuple[AttestationRecord, ...]:
    """The raw SBOM next to each platform manifest (`sha256-<hex>.sbom`); signed at the sign step.
    Returns the records with where each was attached."""
    from signing.attest import attach_sbom

    ref = parse_reference(plan.image_repo)
    client = RegistryClient(ref.registry)
    attached = []
    for entry in attestations:
        data = Path(entry.sbom).read_bytes()
        subject = {"mediaType": entry.media_type, "size": entry.size, "digest": entry.digest}
        where = attach_sbom(client, ref.repository, subject, data, sbom.MEDIA_TYPE)
        say(f"[{plan.target.name}] SBOM {entry.platform} attached: {where}")
        attached.append(replace(entry, sbom_ref=where))
    return tuple(attached)


def _record_digest(plan: BuildPlan, digest: str) -> None:
    """Split CI mode, first half: the platform's digest where `merge` reads it."""
    platform = plan.platforms[0]
    out = plan.archive_dir_for_digests()
    out.mkdir(parents=True, exist_ok=True)
    record = {"target": plan.target.name, "platform": platform, "repo": plan.image_repo, "digest": digest}
    (out / f"{plan.target.name}-{platform.split('/')[1]}.json").write_text(json.dumps(record) + "\n")


def _attach_tags(plan: BuildPlan, sources: list[str], matrix: Matrix) -> None:
    """Point every final tag at an index of the pushed digests, with retries.

    A loop of its own, not urllib3's Retry: `docker buildx imagetools create` is a subprocess doing
    its own HTTP, so the retry is of the command, decided on its last stderr line (`RETRYABLE`)."""
    cmd = [DOCKER, "buildx", "imagetools", "create"]
    for ref in plan.refs:
        cmd += ["--tag", ref]
    # The merged index gets the image's annotations (definition.ANNOTATED_LABELS).
    for key, value in definition.annotated_labels(matrix, plan.target, plan.build_args).items():
        cmd += ["--annotation", f"index:{key}={value}"]
    cmd += sources
    for attempt in range(1, REGISTRY_RETRIES + 1):
        proc = run(cmd, capture=True, check=False)
        if proc.returncode == 0:
            return
        message = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        if attempt == REGISTRY_RETRIES or not RETRYABLE.search(message):
            raise RegistryError(f"{plan.target.name}: tagging {plan.image_repo} failed: {message}")
        time.sleep(5 * 3 ** (attempt - 1))


def merge_digests(matrix: Matrix, plan: BuildPlan, digests: list[str]) -> BuildResult:
    """Split CI mode, second half: assemble the index from per-platform digests, then tag it."""
    for digest in digests:
        if not is_sha256(digest):
            raise ConfigError(
                f"--digest {digest!r} is not a digest (sha256:<64 hex>); pass each platform's digest as "
                "`build --push-by-digest` printed it"
            )
    started = time.monotonic()
    _attach_tags(plan, [f"{plan.image_repo}@{d}" for d in digests], matrix)
    digest = registry.resolve_digest(plan.refs[0])
    result = result_for(plan, "built", digest=digest)
    platforms = registry.registry_platforms(plan.image_repo, digest)
    return replace(
        result,
        refs=tuple(plan.refs),
        platforms=tuple(PlatformResult(p, d, s) for p, (d, s) in sorted(platforms.items())),
        duration_s=time.monotonic() - started,
        notes=(*result.notes, f"index assembled from {len(digests)} platform digest(s)"),
    )


__all__ = ["PushOutcome", "attach_sboms", "merge_digests", "push_built", "push_results"]
