"""Typed matrix + site + CLI options → one BuildPlan per target.

A plan is everything the builder needs and nothing it has to look up again: the platforms, the
base as it will be pulled (after mirrors), tags, build args, named contexts and secret *sources*
(paths and env-var names, never their contents). `--dry-run` prints it.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal

from packaging.version import Version

from xcforge.config.matrix import Matrix, Target
from xcforge.config.site import REGISTRY_PREFIX_RE, SiteConfig
from xcforge.errors import ConfigError
from xcforge.lock import locks
from xcforge.paths import DIST_DIR, REPO_ROOT
from xcforge.plan.verification import PlatformVerification, label_value, planned
from xcforge.render import dockerfile


class OutputMode(StrEnum):
    """Where a build's image goes. Every mode writes the OCI archive first; the pushing modes then
    upload it (tags last), and the split CI mode pushes by digest only, for `merge` to tag."""

    ARCHIVE = "archive"  # dist/<target>-<version>-<variant>.oci.tar, loaded into the local engine
    PUSH = "push"  # the archive pushed by digest to --registry, then tagged
    PUSH_BY_DIGEST = "push-by-digest"  # one platform, untagged; `merge` assembles the index

    @property
    def pushes(self) -> bool:
        return self is not OutputMode.ARCHIVE

    @property
    def tagged(self) -> bool:
        return self is not OutputMode.PUSH_BY_DIGEST


EngineInstall = Literal["full", "skip"]


@dataclass(frozen=True)
class BuildOptions:
    registry: str | None = None
    push: bool = False
    platforms: tuple[str, ...] = ()  # empty: all of the target's
    push_by_digest: bool = False  # split mode: one platform, pushed without tags, merged later
    wheelhouse: Path | None = None
    force: bool = False
    dist_dir: Path = DIST_DIR
    revision: str | None = None


@dataclass(frozen=True)
class SecretSource:
    """A BuildKit secret: `id` as the Dockerfile mounts it, filled from a file or an env var."""

    id: str
    kind: Literal["file", "generated"]
    path: Path | None = None
    description: str = ""


@dataclass(frozen=True)
class BuildPlan:
    target: Target
    engine_version: str
    platforms: tuple[str, ...]
    base_original: str
    base_ref: str  # what FROM pulls: mirrored, pinned by digest where the matrix pins one
    image_repo: str  # registry repository, or a local name for archive output
    tags: tuple[str, ...]
    output: OutputMode
    dockerfile: Path
    context: Path
    named_contexts: dict[str, Path]
    build_args: dict[str, str]
    secrets: tuple[SecretSource, ...]
    engine_install: str  # full | skip | skip-<arch>
    revision: str
    archive_path: Path | None
    site: SiteConfig = field(repr=False)
    # Problems that stop a real build but not a dry run (which shows them).
    blockers: tuple[str, ...] = ()
    dist_dir: Path = DIST_DIR
    plugin_install: str = "full"  # full | skip | skip-<arch>
    omitted: tuple[str, ...] = ()  # index-only packages this site cannot serve
    fallback: tuple[str, ...] = ()  # platforms built with the matrix's engine.fallback pairing
    verification: tuple[PlatformVerification, ...] = ()  # what a successful build proves, per platform

    @property
    def built_archive(self) -> Path:
        """The OCI archive the bake leaves: archive_path for archive output; for a push, a work file
        under dist/.work that the publish stage pushes and then deletes."""
        if self.archive_path:
            return self.archive_path
        archs = "-".join(a for a in self.target.archs if f"linux/{a}" in self.platforms)
        return self.dist_dir / ".work" / f"{self.target.name}-{archs}.oci.tar"

    def archive_dir_for_digests(self) -> Path:
        """Where split builds leave their per-platform digest records for `merge`."""
        return self.dist_dir / "digests"

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(f"{self.image_repo}:{tag}" for tag in self.tags)

    @property
    def base_pin(self) -> str:
        """How the base is pinned: by digest in the pulled reference (matrix base.digest, or a site
        mirror to REF@sha256:…), else resolved at build time and recorded."""
        if "@sha256:" in self.base_ref:
            where = "the site's base_digests" if self.target.base.image in self.site.base_digests else "base.digest"
            return f"{self.base_ref.rsplit('@', 1)[1]} (pinned by {where})"
        return (
            "not pinned: the build resolves it and records it (label org.opencontainers.image.base.digest, "
            "report.json); pin it with base_digests in the site file (or base.digest in matrix.yaml)"
        )

    def describe(self) -> str:
        lines = [
            f"target:        {self.target.name} ({self.target.description})",
            f"platforms:     {', '.join(self.platforms)}",
            f"site:          {_rel(self.site.path) if self.site.path else 'none (direct access to registries)'}",
            f"base:          {self.base_original}",
        ]
        if self.base_ref != self.base_original:
            lines.append(f"  pulled as:   {self.base_ref}  (site mirror)")
        lines.append(f"  digest:      {self.base_pin}")
        vendor = self.target.vendor_image
        if vendor:
            lines.append(
                "  mode:        vendor-image: the vendor's own vLLM image; xcforge installs only its launcher "
                f"and replaces its entrypoint ({' '.join(vendor.entrypoint) or 'none'})"
            )
            asserted = self.target.vendor_assertions(self.engine_version)
            lines.append("  asserts:     " + " ".join(f"{name}{spec}" for name, spec in asserted.items()))
            for group, names in vendor.entry_points.items():
                lines.append(f"               entry points {group}: {', '.join(names)}")
            for f in vendor.files:
                lines.append(f"               file {f.path} ({f.why})")
        lines += [
            f"engine:        {self.target.engine.package} {self.engine_version}"
            + (f" + {self.target.plugin.name} {self.target.plugin.version}" if self.target.plugin else "")
            + ("" if self.engine_install == "full" else f"  [engine install: {self.engine_install}]")
            + "".join(
                f"\n  {p}: engine.fallback {self.target.engine.fallback.version} (stand-in pairing)"
                for p in self.fallback
                if self.target.engine.fallback
            ),
            f"output:        {self.output}" + (f" → {self.archive_path}" if self.archive_path else ""),
            "tags:" + "".join(f"\n  {ref}" for ref in self.refs),
            f"dockerfile:    {_rel(self.dockerfile)}",
            f"context:       {_rel(self.context)}",
            "named contexts:" + "".join(f"\n  {k}={_rel(v)}" for k, v in sorted(self.named_contexts.items())),
            "build args:" + "".join(f"\n  {k}={v}" for k, v in sorted(self.build_args.items())),
            "secrets:" + ("".join(f"\n  {s.id}: {s.description}" for s in self.secrets) or " none"),
        ]
        lines += ["verification:"] + [
            f"  {v.platform}: {v.level}" + "".join(f"\n    {s}" for s in v.skipped) for v in self.verification
        ]
        lines += [f"BLOCKED:       {b}" for b in self.blockers]
        return "\n".join(lines)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def named_contexts_for(matrix: Matrix, target: Target, work: Path) -> dict[str, Path]:
    """The named build contexts every Dockerfile mounts (the committed docker-bake.hcl names the
    same ones under dist/.contexts; a site's wheelhouse replaces `wheels`)."""
    return {
        "engine": work / "engine",  # the xcforge-engine wheel (xcforge/bake/engine_wheel.py)
        "support": matrix.images_dir / "support",
        "wheels": work / "empty-wheelhouse",
        "sdists": work / "sdists" / target.name,  # the engine sdist of a source-empty target
    }


def git_revision(root: Path = REPO_ROOT) -> str:
    """Short commit id, with -dirty when the tree has uncommitted changes; 'unknown' outside git."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{rev}-dirty" if dirty else rev


def git_commit_time(root: Path = REPO_ROOT) -> str:
    try:
        stamp = subprocess.run(
            ["git", "log", "-1", "--format=%ct"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        return dt.datetime.fromtimestamp(int(stamp), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OSError, subprocess.CalledProcessError, ValueError):
        return ""


def is_prerelease(version: str) -> bool:
    return Version(version).is_prerelease or Version(version).is_devrelease


def image_name(target: Target) -> str:
    """`vllm-<target>` or `llamacpp-<target>`: the repository name under any registry prefix."""
    return f"{'vllm' if target.engine.is_vllm else 'llamacpp'}-{target.name}"


def image_repository(target: Target, registry: str | None) -> str:
    name = image_name(target)
    return f"{registry.rstrip('/')}/{name}" if registry else f"xcforge/{name}"


def cache_tag(platforms: tuple[str, ...]) -> str:
    """The registry-cache tag of a platform set (split builds must not share one)."""
    return f"buildcache-{'-'.join(p.split('/')[1] for p in platforms)}"


def tags_for(matrix: Matrix, target: Target, revision: str, fallback: tuple[str, ...] = ()) -> tuple[str, ...]:
    """`<engine>-<variant>` moves with rebuilds; `<engine>-<variant>-<revision>` never does.
    There is no `latest`: operators pin a version, and pre-releases must never look current.
    A tag never names an engine a platform under it does not carry: platforms built with the
    engine.fallback pairing add `-<arch>-<fallback version>` (`0.32.0-cpu-arm64-0.19.1`)."""
    base = f"{matrix.engine_version(target)}-{target.variant}"
    if fallback and target.engine.fallback:
        base += "".join(f"-{p.split('/', 1)[1]}-{target.engine.fallback.version}" for p in fallback)
    return (base, f"{base}-{revision.replace('+', '-')}")


def engine_install_mode(target: Target, site: SiteConfig, platforms: tuple[str, ...]) -> str:
    """`skip` where the site cannot install the vendor engine (stand-in bases without the SDK), and
    where the engine builds against a plugin stack whose step the site skips."""
    skipped = set(site.skipped(target.name, "engine"))
    if target.engine_needs_plugin_stack or target.refused:
        # (a refused target on a site that skips the vendor's step, a stand-in, builds its machinery only)
        skipped |= set(site.skipped(target.name, "plugin"))
    return step_mode(skipped, platforms)


def _refuse_engine_install(matrix: Matrix, target: Target, install_mode: str) -> None:
    """A refused target builds only with every engine step skipped (the machinery, not an engine)."""
    if target.refused and install_mode != "skip":
        raise ConfigError(
            f"{matrix.path}: targets.{target.name}.refused: {target.refused}; xcforge builds this target only "
            f"with its engine skipped on every platform (a site that skips its engine or plugin step: "
            f"skip_engine_install: [{target.name}], or skip_steps: ['{target.name}:plugin'], as the stand-in sites do)"
        )


def step_mode(skipped: set[str] | tuple[str, ...], platforms: tuple[str, ...]) -> str:
    """full, skip (every platform built here) or skip-<arch> (one of them)."""
    skipped = set(skipped)
    if not skipped:
        return "full"
    if "*" in skipped or set(platforms) <= skipped:
        return "skip"
    if len(skipped) == 1:
        return f"skip-{next(iter(skipped)).split('/', 1)[1]}"
    return "skip"


def engine_fallback(matrix: Matrix, target: Target, site: SiteConfig, platforms: tuple[str, ...]) -> tuple[str, ...]:
    """The platforms built here with the matrix's engine.fallback, as the site asks."""
    wanted = site.fallback_platforms(target.name)
    declared = target.engine.fallback.platforms if target.engine.fallback else ()
    for platform in wanted:
        if platform not in declared:
            where = f"{site.path}: " if site.path else ""
            raise ConfigError(
                f"{where}engine_fallback: '{target.name}:{platform}': {matrix.path} declares no "
                f"targets.{target.name}.engine.fallback for {platform}"
                + (f" (it covers {', '.join(declared)})" if declared else "")
                + "; remove the entry or add the pairing to the matrix"
            )
    return tuple(p for p in platforms if p in wanted)


def make_plan(matrix: Matrix, target: Target, site: SiteConfig, options: BuildOptions) -> BuildPlan:
    site.check_targets(matrix)
    platforms = _platforms(matrix, target, options)
    registry = _registry(site, options)
    engine_version = matrix.engine_version(target)
    revision = options.revision or git_revision()
    output = _output_mode(options)
    repo = image_repository(target, registry if output.pushes else None)
    base_ref = _base_ref(target, site)
    extra_urls = site.pip.extra_index_urls if site.pip.extra_index_urls is not None else target.engine.extra_index_urls
    install_mode, plugin_mode = _install_modes(matrix, target, site, platforms)
    fallback = engine_fallback(matrix, target, site, platforms)
    tags = tags_for(matrix, target, revision, fallback) if output.tagged else ()
    omitted = _omitted(target, extra_urls)
    build_args = _build_args(
        target,
        site,
        platforms,
        base_ref=base_ref,
        install_mode=install_mode,
        plugin_mode=plugin_mode,
        extra_urls=extra_urls,
        omitted=omitted,
        fallback=fallback,
        revision=revision,
    )
    build_args |= _platform_label_args(matrix, target, platforms, install_mode, omitted, fallback)
    wheelhouse = _wheelhouse(site, options)
    blockers = _blockers(matrix, target, wheelhouse, plugin_mode)
    verification = planned(
        matrix,
        target,
        platforms,
        engine_install=install_mode,
        plugin_install=plugin_mode,
        vendor_packages=build_args.get("VENDOR_PACKAGES", "full"),
        omitted=omitted,
        fallback=fallback,
    )
    build_args["XCFORGE_VERIFICATION"] = label_value(verification)
    return BuildPlan(
        target=target,
        engine_version=engine_version,
        platforms=platforms,
        base_original=target.base.pinned_ref,
        base_ref=base_ref,
        image_repo=repo,
        tags=tags,
        output=output,
        dockerfile=matrix.images_dir / target.name / "Dockerfile",
        context=matrix.images_dir / target.name,
        named_contexts=_named_contexts(matrix, target, options, wheelhouse),
        build_args=build_args,
        secrets=_secrets(site),
        engine_install=install_mode,
        plugin_install=plugin_mode,
        omitted=omitted,
        fallback=fallback,
        verification=tuple(verification),
        revision=revision,
        archive_path=_archive_path(target, engine_version, output, options),
        site=site,
        blockers=blockers,
        dist_dir=options.dist_dir,
    )


def _platforms(matrix: Matrix, target: Target, options: BuildOptions) -> tuple[str, ...]:
    """The platforms asked for (all of the target's by default), each one the target builds."""
    platforms = tuple(options.platforms or target.platforms)
    for platform in platforms:
        if platform not in target.platforms:
            raise ConfigError(
                f"{matrix.path}: targets.{target.name}.platforms: '{platform}' is not built for this target; "
                f"choose from {', '.join(target.platforms)}"
            )
    if options.push_by_digest and len(platforms) != 1:
        raise ConfigError("--push-by-digest builds exactly one platform: add --platform linux/amd64 (or arm64)")
    return platforms


def _registry(site: SiteConfig, options: BuildOptions) -> str | None:
    """--registry or the site's, checked as HOST[:PORT]/PREFIX; required when pushing."""
    registry = options.registry or site.registry
    if registry:
        _check_registry(registry, "--registry" if options.registry else f"{site.path}: registry")
    elif options.push or options.push_by_digest:
        raise ConfigError("--push needs a registry: pass --registry HOST[:PORT]/PREFIX or set `registry` in --site")
    return registry


def _check_registry(registry: str, where: str) -> None:
    port = re.match(r"[^/:]+:([0-9]+)", registry)
    if port and not 0 < int(port.group(1)) < 65536:
        raise ConfigError(f"{where}: port {port.group(1)} in '{registry}' is out of range (1-65535)")
    if not REGISTRY_PREFIX_RE.fullmatch(registry):
        raise ConfigError(
            f"{where}: '{registry}' is not a registry and repository prefix; write HOST[:PORT]/PREFIX, "
            "e.g. 127.0.0.1:5000/xcforge (lower case, no scheme)"
        )


def _output_mode(options: BuildOptions) -> OutputMode:
    if options.push_by_digest:
        return OutputMode.PUSH_BY_DIGEST
    return OutputMode.PUSH if options.push else OutputMode.ARCHIVE


def _base_ref(target: Target, site: SiteConfig) -> str:
    """The base as FROM pulls it: through the site's mirrors, pinned by digest where the site (base_digests)
    or the matrix (base.digest) pins one; the site's pin wins (it holds the copy the site pushed)."""
    base_ref = site.map_image(target.base.image)
    digest = site.base_digests.get(target.base.image) or target.base.digest
    return f"{base_ref}@{digest}" if digest else base_ref


def _install_modes(matrix: Matrix, target: Target, site: SiteConfig, platforms: tuple[str, ...]) -> tuple[str, str]:
    """(engine install, plugin install), each full, skip or skip-<arch>; no engine means no plugin."""
    install_mode = engine_install_mode(target, site, platforms)
    _refuse_engine_install(matrix, target, install_mode)
    if install_mode == "skip":
        return install_mode, "skip"
    plugin_mode = step_mode(site.skipped(target.name, "plugin"), platforms) if target.plugin else "full"
    return install_mode, plugin_mode


def _omitted(target: Target, extra_urls: tuple[str, ...]) -> tuple[str, ...]:
    """Index-only packages (torchvision's CPU build) are left out where the site drops their index."""
    if set(target.engine.extra_index_urls) <= set(extra_urls):
        return ()
    return tuple(target.engine.index_only)


def _build_args(
    target: Target,
    site: SiteConfig,
    platforms: tuple[str, ...],
    *,
    base_ref: str,
    install_mode: str,
    plugin_mode: str,
    extra_urls: tuple[str, ...],
    omitted: tuple[str, ...],
    fallback: tuple[str, ...],
    revision: str,
) -> dict[str, str]:
    """The Dockerfile's build args, all but XCFORGE_VERIFICATION (which the verification plan fills)."""
    build_args = {
        "BASE_IMAGE": base_ref,
        "ENGINE_INSTALL": install_mode,
        "PLUGIN_INSTALL": plugin_mode,
        "EXTRA_INDEX_URLS": " ".join(extra_urls),
        "OMIT_PACKAGES": " ".join((*target.engine.remove_packages, *omitted)),
        "OMIT_INDEX_ONLY": " ".join(omitted),
        "ENGINE_FALLBACK": _fallback_arg(target, fallback),
        "BUILD_REVISION": revision,
        "BUILD_CREATED": git_commit_time(),
        "BUILD_SOURCE": "https://github.com/xcforge/xcforge",
    }
    if target.vendor_system_packages or target.engine.kernel_wheels:
        build_args["VENDOR_PACKAGES"] = step_mode(site.skipped(target.name, "vendor-packages"), platforms)
    return build_args | _site_build_args(site)


def _platform_label_args(
    matrix: Matrix,
    target: Target,
    platforms: tuple[str, ...],
    install_mode: str,
    omitted: tuple[str, ...],
    fallback: tuple[str, ...],
) -> dict[str, str]:
    """ENGINE_VERSION_<ARCH> / UNAVAILABLE_<ARCH>: what each platform's own labels say it carries, from
    the same decisions its install takes (engine.fallback, the site's and the lock's left-out packages);
    the image-facts step compares them with what the install recorded and fails the build on a mismatch."""
    arches = dockerfile.platform_labels(target)
    if not arches:
        return {}
    matrix_version = matrix.engine_version(target)
    args: dict[str, str] = {}
    for platform in platforms:
        arch = platform.split("/", 1)[1]
        if arch not in arches:
            continue
        skipped = install_mode in ("skip", f"skip-{arch}")
        version = matrix_version
        left_out: tuple[str, ...] = ()
        if not skipped and platform in fallback and target.engine.fallback:
            version = target.engine.fallback.version
            left_out = omitted
        elif not skipped:
            left_out = tuple(dict.fromkeys((*omitted, *locks.lock_omitted(matrix, target, platform))))
        args[f"ENGINE_VERSION_{arch.upper()}"] = version
        args[f"UNAVAILABLE_{arch.upper()}"] = dockerfile.unavailable_statement(target, left_out)
    return args


def _fallback_arg(target: Target, fallback: tuple[str, ...]) -> str:
    """arch=version per platform built with the fallback pairing; its lock is <arch>-py<XY>-pypi.txt."""
    if not target.engine.fallback:
        return ""
    return " ".join(f"{p.split('/', 1)[1]}={target.engine.fallback.version}" for p in fallback)


def _site_build_args(site: SiteConfig) -> dict[str, str]:
    """The site's apt mirror and Docker's predefined proxy args (BuildKit keeps those out of the image history)."""
    args = {"APT_MIRROR": site.apt_mirror} if site.apt_mirror else {}
    proxies = (("HTTP_PROXY", site.proxy.http), ("HTTPS_PROXY", site.proxy.https), ("NO_PROXY", site.proxy.no_proxy))
    return args | {name: value for name, value in proxies if value}


def _wheelhouse(site: SiteConfig, options: BuildOptions) -> Path | None:
    if options.wheelhouse is not None and not options.wheelhouse.is_dir():
        raise ConfigError(f"--wheelhouse: '{options.wheelhouse}' is not a directory")
    return options.wheelhouse or site.wheelhouse


def _blockers(matrix: Matrix, target: Target, wheelhouse: Path | None, plugin_mode: str) -> tuple[str, ...]:
    """Problems that stop a real build but not a dry run: a wheelhouse plugin with no wheelhouse."""
    if target.plugin and target.plugin.source == "wheelhouse" and wheelhouse is None and plugin_mode != "skip":
        return (
            f"{matrix.path}: targets.{target.name}.plugin.source: {target.plugin.name} comes from a wheelhouse; "
            "pass --wheelhouse DIR (the vendor SDK's wheels) or set `wheelhouse` in --site",
        )
    return ()


def _named_contexts(matrix: Matrix, target: Target, options: BuildOptions, wheelhouse: Path | None) -> dict[str, Path]:
    """The contexts docker-bake.hcl names (bake.named_contexts), with the site's wheelhouse if any."""
    named_contexts = named_contexts_for(matrix, target, options.dist_dir / ".contexts")
    if wheelhouse:
        named_contexts["wheels"] = wheelhouse
    return named_contexts


def _secrets(site: SiteConfig) -> tuple[SecretSource, ...]:
    secrets: list[SecretSource] = []
    if site.ca_bundle:
        secrets.append(SecretSource("ca.pem", "file", site.ca_bundle, f"extra CA bundle from {site.ca_bundle}"))
    if site.pip.index_url or site.pip.token_env or site.pip.trusted_hosts:
        secrets.append(SecretSource("pip.conf", "generated", None, "pip.conf generated from the site's pip settings"))
    return tuple(secrets)


def _archive_path(target: Target, engine_version: str, output: OutputMode, options: BuildOptions) -> Path | None:
    if output is not OutputMode.ARCHIVE:
        return None
    return options.dist_dir / f"{target.name}-{engine_version}-{target.variant}.oci.tar"
