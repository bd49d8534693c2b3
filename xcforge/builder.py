"""Build plans → images, with docker buildx: the third arrow of the flow.

Publishing is two-phase so that a failed or interrupted build leaves nothing under the final tags:
buildx pushes the image by digest only, and the tags are attached afterwards in one quick,
manifest-only step (`imagetools create`). Archives are written to a `.partial` name and renamed
when complete. Registry errors are retried with backoff, then reported with the registry's words.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import tempfile
import time
from configparser import ConfigParser
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from xcforge import ci, deps, image_inspect, sbom
from xcforge.attestations import attestation_dir, load_recorded, write_attestations
from xcforge.buildx import RETRYABLE, annotations, buildx_command, failure_reason, output_spec, say, stream_buildx
from xcforge.docker_env import DockerEnvironment, check_docker
from xcforge.engine_wheel import ensure_engine_wheel
from xcforge.errors import BuildFailed, ConfigError, RegistryError, RenderError, XcforgeError
from xcforge.fingerprint import build_fingerprint, hash_tree
from xcforge.matrix import Matrix
from xcforge.oci import RegistryClient, parse_reference
from xcforge.plan import BuildOptions, BuildPlan
from xcforge.push import push_layout
from xcforge.render import render_target
from xcforge.report import BuildResult, PlatformResult, merge_into_report, print_table, write_reports
from xcforge.shell import DOCKER, run

STANDIN_LABEL = "io.xcforge.stand-in"
FINGERPRINT_LABEL = "io.xcforge.fingerprint"
REGISTRY_RETRIES = 3


@dataclass(frozen=True)
class BuildRequest:
    matrix: Matrix
    plans: list[BuildPlan]
    options: BuildOptions
    jobs: int = 1
    keep_going: bool = False
    smoke: bool = False
    sign: bool = False
    sm2_key: Path | None = None
    cosign_key: Path | None = None
    keyless: bool = False


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
        digest = plan.base_ref.split("@", 1)[1] if "@" in plan.base_ref else image_inspect.resolve_digest(plan.base_ref)
        labels = image_inspect.labels(plan.base_ref)
    except RegistryError as exc:
        raise BuildFailed(
            f"{plan.target.name}: base image {plan.base_ref} is not reachable ({exc.message.split(': ', 1)[-1]}); "
            "map it to a reachable mirror with `mirrors` in --site, or run scripts/provision.sh for stand-ins"
        ) from None
    kind = "stand-in" if any(STANDIN_LABEL in platform_labels for platform_labels in labels.values()) else "real"
    return digest, kind


# --------------------------------------------------------------------------- buildx


# --------------------------------------------------------------------------- one target


def _skip_if_unchanged(plan: BuildPlan, fingerprint: str, record_path: Path | None) -> BuildResult | None:
    if plan.output == "push":
        ref = plan.refs[0]
        if not image_inspect.exists(ref):
            return None
        labels = image_inspect.labels(ref)
        if not labels or any(lab.get(FINGERPRINT_LABEL) != fingerprint for lab in labels.values()):
            return None
        digest = image_inspect.resolve_digest(ref)
        platforms = image_inspect.registry_platforms(plan.image_repo, digest)
        result = _result(plan, "skipped", digest=digest)
        result.platforms = [PlatformResult(p, d, s) for p, (d, s) in sorted(platforms.items())]
        result.refs = [ref]
        result.attestations = load_recorded(_attestation_dir(plan), {p.digest for p in result.platforms})
        return result
    if plan.output == "archive" and record_path and record_path.exists() and plan.archive_path.exists():
        record = json.loads(record_path.read_text())
        if record.get("fingerprint") != fingerprint:
            return None
        result = _result(plan, "skipped", digest=record.get("digest"))
        result.platforms = [PlatformResult(**p) for p in record.get("platforms", [])]
        result.archive = str(plan.archive_path)
        result.refs = list(plan.refs)
        result.attestations = load_recorded(_attestation_dir(plan), {p.digest for p in result.platforms})
        return result
    return None


def _result(plan: BuildPlan, status: str, **kw) -> BuildResult:
    return BuildResult(
        target=plan.target.name,
        status=status,
        platforms=[PlatformResult(p) for p in plan.platforms],
        image_repo=plan.image_repo,
        output=plan.output,
        base=plan.base_ref,
        engine_install=plan.engine_install,
        revision=plan.revision,
        verification=[v.as_dict() for v in plan.verification],
        **kw,
    )


def build_one(plan: BuildPlan, env: DockerEnvironment, engine_dir: Path, engine_hash: str, force: bool) -> BuildResult:
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
            skipped.base_digest, skipped.base_kind, skipped.fingerprint = base_digest, base_kind, fingerprint
            skipped.duration_s = time.monotonic() - started
            skipped.notes.append("unchanged since the last build (same fingerprint); --force rebuilds")
            say(f"[{name}] skipped: fingerprint {fingerprint[:19]}… unchanged")
            return skipped

    result = _result(plan, "failed", base_digest=base_digest, base_kind=base_kind, fingerprint=fingerprint)
    if base_kind == "stand-in":
        result.notes.append(f"built on a stand-in for {plan.base_original}, not the vendor base")
        python = plan.target.python
        if python.standin_version and python.standin_version != python.version:
            result.notes.append(
                f"stand-in Python {python.standin_version} (Debian) instead of the vendor's {python.version}: "
                f"installed from the py{python.standin_version.replace('.', '')} locks, not the production ones"
            )
    if plan.engine_install != "full":
        result.notes.append(f"engine install: {plan.engine_install} (the vendor engine cannot be installed here)")
    if base_kind == "stand-in" and plan.engine_install == "full":
        result.notes.append("the real engine was installed on the stand-in base")
    metadata_dir = Path(tempfile.mkdtemp(prefix=f"xcforge-{name}-"))
    # Archive output goes to dist/ (renamed from .partial when complete); push modes use a work file.
    final_archive = (
        plan.archive_path
        or plan.dist_dir
        / ".work"
        / f"{name}-{'-'.join(a for a in plan.target.archs if f'linux/{a}' in plan.platforms)}.oci.tar"
    )
    partial = final_archive.with_name(final_archive.name + ".partial")
    try:
        secret_files: dict[str, Path] = {}
        for secret in plan.secrets:
            if secret.kind == "file" and secret.path:
                secret_files[secret.id] = secret.path
            elif secret.id == "pip.conf":
                content = _pip_conf(plan)
                if content:
                    path = metadata_dir / "pip.conf"
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w") as fh:
                        fh.write(content)
                    secret_files["pip.conf"] = path
        metadata = metadata_dir / "metadata.json"
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.unlink(missing_ok=True)
        cmd = buildx_command(
            plan,
            build_args=build_args,
            secret_files=secret_files,
            output=output_spec(plan, partial),
            metadata=metadata,
        )
        attempt = 0
        while True:
            attempt += 1
            with ci.group(f"build {name} ({', '.join(plan.platforms)})"):
                outcome = stream_buildx(cmd, name)
            result.cache_hits, result.steps = outcome.cache_hits, outcome.steps
            if outcome.returncode == 0:
                break
            reason = failure_reason(outcome.tail)
            retryable = plan.output != "archive" and RETRYABLE.search("\n".join(outcome.tail[-15:]))
            if retryable and attempt < REGISTRY_RETRIES:
                delay = 5 * 3 ** (attempt - 1)
                say(f"[{name}] registry error ({reason}); retrying in {delay} s ({attempt}/{REGISTRY_RETRIES - 1})")
                time.sleep(delay)
                continue
            if retryable:
                raise RegistryError(f"{name}: registry error after {attempt} attempts: {reason}")
            raise BuildFailed(f"{name}: build failed: {reason}")
        _finish(plan, result, partial, record_path)
        result.status = "built"
    except XcforgeError as exc:
        result.error, result.error_code = exc.message, exc.exit_code
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(metadata_dir, ignore_errors=True)
        result.duration_s = time.monotonic() - started
    return result


def _attestation_dir(plan: BuildPlan) -> Path:
    return attestation_dir(plan.archive_path or plan.dist_dir / f"{plan.target.name}.oci.tar")


def _finish(plan: BuildPlan, result: BuildResult, partial: Path, record_path: Path | None) -> None:
    archive = image_inspect.OciArchive(partial)
    digest, _ = archive.top_index()
    result.digest = digest
    result.platforms = [PlatformResult(p, d, s) for p, (d, s) in sorted(archive.platforms().items())]
    say(f"[{plan.target.name}] reading each platform's package databases for its SBOM")
    sbom_started = time.monotonic()
    written = write_attestations(partial, _attestation_dir(plan), plan.image_repo)
    result.attestations = [w.as_dict() for w in written]
    for entry in written:
        say(f"[{plan.target.name}] SBOM {entry.platform}: {entry.components} components → {entry.sbom}")
    say(f"[{plan.target.name}] SBOMs and provenance written in {time.monotonic() - sbom_started:.1f} s")
    if plan.output == "archive":
        assert plan.archive_path and record_path
        partial.replace(plan.archive_path)
        result.archive = str(plan.archive_path)
        result.refs = list(plan.refs)
        # Operators `docker load` this same file; loading it here also gives the local engine the image.
        run([DOCKER, "load", "--input", str(plan.archive_path)], capture=True)
        record = {
            "fingerprint": result.fingerprint,
            "digest": digest,
            "platforms": [vars(p) for p in result.platforms],
            "refs": result.refs,
        }
        record_path.write_text(json.dumps(record, indent=2) + "\n")
        return
    with ci.group(f"push {plan.image_repo}@{digest}"):
        push_layout(partial, plan.image_repo, plan.tags, progress=lambda m: say(f"[{plan.target.name}] {m}"))
        _attach_sboms(plan, result)
    result.refs = list(plan.refs)
    if plan.output == "push-by-digest":
        platform = plan.platforms[0]
        out = plan.archive_dir_for_digests()
        out.mkdir(parents=True, exist_ok=True)
        record = {"target": plan.target.name, "platform": platform, "repo": plan.image_repo, "digest": digest}
        (out / f"{plan.target.name}-{platform.split('/')[1]}.json").write_text(json.dumps(record) + "\n")


def _attach_sboms(plan: BuildPlan, result: BuildResult) -> None:
    """The raw SBOM next to each platform manifest (`sha256-<hex>.sbom`); signed at the sign step."""
    from signing.attest import attach_sbom

    ref = parse_reference(plan.image_repo)
    client = RegistryClient(ref.registry)
    for entry in result.attestations:
        data = Path(entry["sbom"]).read_bytes()
        subject = {"mediaType": entry["media_type"], "size": entry["size"], "digest": entry["digest"]}
        entry["sbom_ref"] = attach_sbom(client, ref.repository, subject, data, sbom.MEDIA_TYPE)
        say(f"[{plan.target.name}] SBOM {entry['platform']} attached: {entry['sbom_ref']}")


def _attach_tags(plan: BuildPlan, digest: str, sources: list[str] | None = None, annotate: bool = False) -> None:
    """Phase two of publishing: point every final tag at the pushed digest(s), with retries."""
    cmd = [DOCKER, "buildx", "imagetools", "create"]
    for ref in plan.refs:
        cmd += ["--tag", ref]
    if annotate:
        for key, value in annotations(plan, plan.build_args).items():
            cmd += ["--annotation", f"index:{key}={value}"]
    cmd += sources or [f"{plan.image_repo}@{digest}"]
    for attempt in range(1, REGISTRY_RETRIES + 1):
        proc = run(cmd, capture=True, check=False)
        if proc.returncode == 0:
            return
        message = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        if attempt == REGISTRY_RETRIES or not RETRYABLE.search(message):
            raise RegistryError(f"{plan.target.name}: tagging {plan.image_repo} failed: {message}")
        time.sleep(5 * 3 ** (attempt - 1))


# --------------------------------------------------------------------------- many targets


def _prepare_contexts(matrix: Matrix, plans: list[BuildPlan]) -> tuple[Path, str]:
    engine_dir = plans[0].named_contexts["engine"]
    _, engine_hash = ensure_engine_wheel(engine_dir, matrix.images_dir / "engine")
    for plan in plans:
        wheels = plan.named_contexts["wheels"]
        if not wheels.exists():
            wheels.mkdir(parents=True, exist_ok=True)
        _prepare_sdists(matrix, plan)
    return engine_dir, engine_hash


def _prepare_sdists(matrix: Matrix, plan: BuildPlan) -> None:
    """The engine sdist of a source-empty target into its build context (hash-checked against the
    lock), so the image installs it by path: pip checks a requirement's version against the
    metadata, which vLLM releases before 0.23 suffix with `+empty`."""
    target = plan.target
    work = plan.named_contexts["sdists"]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    if target.engine.install not in deps.SOURCE_BUILDS or plan.engine_install == "skip":
        return
    pin = deps.engine_sdist_pin(matrix, target)  # without a lock: the index's file and hash
    version, sha256 = pin or (plan.engine_version, None)
    index = deps.index_of(plan.site)
    path, sha256 = deps.fetch_sdist(plan.site, index, target.engine.package, version, sha256)
    shutil.copyfile(path, work / path.name)
    (work / "SHA256SUMS").write_text(f"{sha256}  {path.name}\n")


def _check_rendered(matrix: Matrix, plans: list[BuildPlan]) -> None:
    for plan in plans:
        committed = plan.dockerfile.read_text(encoding="utf-8") if plan.dockerfile.exists() else None
        if committed != render_target(matrix, plan.target).text:
            raise RenderError(
                f"{plan.dockerfile}: out of date with templates/ and matrix.yaml for target '{plan.target.name}'; "
                "run `python build.py render --all` (and commit) before building"
            )


def run_builds(request: BuildRequest) -> int:
    plans = request.plans
    for plan in plans:
        if plan.blockers:
            raise ConfigError("\n".join(plan.blockers))
    _check_rendered(request.matrix, plans)
    env = check_docker()
    say(f"docker {env.server_version}, buildx {'.'.join(map(str, env.buildx_version))}, native {env.native_platform}")
    engine_dir, engine_hash = _prepare_contexts(request.matrix, plans)

    results: list[BuildResult] = []
    failed = False

    def one(plan: BuildPlan) -> BuildResult:
        try:
            return build_one(plan, env, engine_dir, engine_hash, request.options.force)
        except XcforgeError as exc:
            result = _result(plan, "failed")
            result.error, result.error_code = exc.message, exc.exit_code
            return result

    if request.jobs == 1 or len(plans) == 1:
        for plan in plans:
            result = one(plan)
            results.append(result)
            if result.error:
                failed = True
                ci.annotate_error(result.error)
                if not request.keep_going:
                    break
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=request.jobs) as pool:
            futures = {pool.submit(one, plan): plan for plan in plans}
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                results.append(result)
                if result.error:
                    failed = True
                    ci.annotate_error(result.error)
                    if not request.keep_going:
                        for other in futures:
                            other.cancel()
        order = {plan.target.name: i for i, plan in enumerate(plans)}
        results.sort(key=lambda r: order[r.target])

    from xcforge.publish import record_builds, sign_results

    record_builds(results, request.options.dist_dir)
    if request.sign and not failed:
        failed |= not sign_results(results, request)
    if request.smoke and not failed:
        from xcforge.smoke import smoke_results

        failed |= not smoke_results(results, request)

    all_results = merge_into_report(results, request.options.dist_dir)
    json_path, md_path = write_reports(all_results, request.options.dist_dir)
    print_table(results)
    say(f"report: {json_path} and {md_path}")
    for result in results:
        if result.digest:
            print(f"{result.target} {result.image_repo}@{result.digest}")
    if any(r.error for r in results):
        first = next(r for r in results if r.error)
        count = sum(1 for r in results if r.error)
        error = BuildFailed(f"{count} of {len(plans)} target(s) failed; first: {first.error.splitlines()[0]}")
        # The first failure's own exit code (6 for a registry, 7 for signing...) tells CI what broke.
        error.exit_code = first.error_code or BuildFailed.exit_code
        raise error
    if failed:
        return 9
    return 0


def merge_digests(plan: BuildPlan, digests: list[str]) -> int:
    """Split CI mode, second half: assemble the index from per-platform digests, then tag it."""
    for digest in digests:
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ConfigError(f"--digest {digest!r} is not a digest (sha256:<64 hex>)")
    started = time.monotonic()
    sources = [f"{plan.image_repo}@{d}" for d in digests]
    _attach_tags(plan, digests[0], sources=sources, annotate=True)
    digest = image_inspect.resolve_digest(plan.refs[0])
    result = _result(plan, "built", digest=digest)
    result.refs = list(plan.refs)
    platforms = image_inspect.registry_platforms(plan.image_repo, digest)
    result.platforms = [PlatformResult(p, d, s) for p, (d, s) in sorted(platforms.items())]
    result.duration_s = time.monotonic() - started
    result.notes.append(f"index assembled from {len(digests)} platform digest(s)")
    write_reports(merge_into_report([result], plan.dist_dir), plan.dist_dir)
    print_table([result])
    print(f"{plan.target.name} {plan.image_repo}@{digest}")
    return 0


__all__ = ["BuildRequest", "build_one", "merge_digests", "run_builds"]
