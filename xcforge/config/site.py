"""Site configuration: how this network reaches the outside (mirrors, indexes, proxies, CAs).

Restricted networks are the normal case for our users, so this is first-class: a YAML file
(`--site FILE` or $XCFORGE_SITE) and a few flags. Secrets never live in the file itself: it names
an environment variable (`token_env`) or a file (`ca_bundle`), and xcforge/plan/build_plan.py turns them
into BuildKit secrets, never build args, so they cannot reach a layer or the history.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ocicore.digest import is_sha256
from xcforge.config.matrix import EnvName, HostName, Matrix, NoProxy, Url, _format_errors, _shown, _suggest
from xcforge.config.yaml_source import load_yaml
from xcforge.errors import ConfigError
from xcforge.paths import REPO_ROOT

# Written by scripts/provision.sh on machines that cannot pull vendor bases (git-ignored): used when
# neither --site nor $XCFORGE_SITE is given, so `python build.py --target cpu` works there as is.
MACHINE_DEFAULT = REPO_ROOT / ".xcforge" / "site.yaml"
STANDIN_SITE = REPO_ROOT / "sites" / "standin.yaml"


SKIPPABLE_STEPS = ("plugin", "vendor-packages")
# HOST[:PORT][/path]: what docker and the registry client accept as a repository prefix (a registry
# to push to, a mirror's source or replacement prefix).
BUILDER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
REGISTRY_PREFIX_RE = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PipSettings(_Frozen):
    index_url: Url | None = None
    # None keeps each target's own extra indexes from the matrix; a list (even empty) replaces them.
    extra_index_urls: tuple[Url, ...] | None = None
    trusted_hosts: tuple[HostName, ...] = ()
    # Name of an environment variable holding an index credential ("user:token" or a token);
    # it is written into the pip.conf secret, never into the Dockerfile, args or logs.
    token_env: EnvName | None = None


class ProxySettings(_Frozen):
    http: Url | None = None
    https: Url | None = None
    no_proxy: NoProxy | None = None


# `skip_steps: ["*:plugin"]`: that step of every target; `mirrors: {"*": PREFIX}`: every other base.
ANY_TARGET = "*"
ANY_BASE = "*"


class SiteConfig(_Frozen):
    path: Path | None = None
    # Base-image prefix → replacement prefix, e.g. quay.io/ascend → harbor.corp.example/ascend.
    # The source "*" catches every base no other prefix matches: it is pulled as <replacement>/<ref>
    # (stand-in registries mirror whatever the matrix names, so a new vendor base needs no line).
    mirrors: dict[str, str] = Field(default_factory=dict)
    pip: PipSettings = PipSettings()
    apt_mirror: Url | None = None
    proxy: ProxySettings = ProxySettings()
    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    # Default push target (registry host + repository prefix) when --registry is not given.
    registry: str | None = None
    # Base image (as matrix.yaml names it) → the digest this site pins it to, e.g. a vendor's vLLM image
    # loaded from a tarball and pushed to the site's registry: FROM pulls the mirrored name @ that digest.
    base_digests: dict[str, str] = Field(default_factory=dict)
    # Targets (or target:platform) whose vendor engine cannot be installed here, e.g. on stand-in
    # bases without CANN/Neuware: their images are built with ENGINE_INSTALL=skip and say so.
    skip_engine_install: tuple[str, ...] = ()
    # Other steps a stand-in cannot run, as target:step[:platform] with step plugin or
    # vendor-packages (the reason comes from the matrix: plugin.needs_vendor, the vendor's apt repo).
    # The target "*" means every target that has such a step.
    skip_steps: tuple[str, ...] = ()
    # target:platform entries built with the matrix's engine.fallback (the newest pairing PyPI alone
    # serves) because this site cannot reach the engine's extra index; reports call it a stand-in.
    engine_fallback: tuple[str, ...] = ()
    # Import/export BuildKit's layer cache from the registry (`<repo>:buildcache-<arch>`) when pushing.
    registry_cache: bool = True
    # Registry hosts reached over plain HTTP (127.0.0.0/8 always is).
    insecure_registries: tuple[str, ...] = ()
    # platform → buildx builder, e.g. `linux/arm64: kunpeng-buildkit` (a native arm64 node); a
    # platform not named is built by the current builder (QEMU where it is not native). One
    # builder for several platforms may be a multi-node builder: buildx picks the node by platform.
    builders: dict[str, str] = Field(default_factory=dict)

    @field_validator("skip_steps")
    @classmethod
    def _steps(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for entry in v:
            parts = entry.split(":")
            if len(parts) < 2 or parts[1] not in SKIPPABLE_STEPS:
                raise ValueError(
                    f"{_shown(entry)}: write target:step[:platform] with step one of {', '.join(SKIPPABLE_STEPS)}"
                )
        return v

    @field_validator("base_digests")
    @classmethod
    def _base_digests(cls, v: dict[str, str]) -> dict[str, str]:
        for image, digest in v.items():
            if not is_sha256(digest):
                raise ValueError(
                    f"{_shown(image)}: {_shown(digest)} is not a digest; write sha256:<64 hex digits> "
                    f"(`docker buildx imagetools inspect IMAGE` shows it)"
                )
        return v

    @field_validator("builders")
    @classmethod
    def _builders(cls, v: dict[str, str]) -> dict[str, str]:
        for platform, builder in v.items():
            if not re.fullmatch(r"linux/(amd64|arm64)", platform):
                raise ValueError(f"{_shown(platform)}: write a platform, linux/amd64 or linux/arm64")
            if not BUILDER_NAME_RE.fullmatch(builder):
                raise ValueError(
                    f"{platform}: {_shown(builder)} is not a buildx builder name (letters, digits, . _ -); "
                    "see `docker buildx ls`"
                )
        return v

    @field_validator("engine_fallback")
    @classmethod
    def _fallbacks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for entry in v:
            name, _, platform = entry.partition(":")
            if not name or not platform.startswith("linux/"):
                raise ValueError(f"{_shown(entry)}: write target:platform, e.g. cpu:linux/arm64")
        return v

    def fallback_platforms(self, target: str) -> tuple[str, ...]:
        return tuple(e.partition(":")[2] for e in self.engine_fallback if e.partition(":")[0] == target)

    def skipped(self, target: str, step: str) -> tuple[str, ...]:
        """The platforms (or '*') on which `step` (engine, plugin, vendor-packages) of `target` is skipped."""
        entries = (f"{e.partition(':')[0]}:engine:{e.partition(':')[2]}" for e in self.skip_engine_install)
        found = []
        for entry in (*entries, *self.skip_steps) if step == "engine" else self.skip_steps:
            name, entry_step, *platform = entry.split(":", 2)
            if name in (target, ANY_TARGET) and entry_step == step:
                found.append(platform[0] if platform and platform[0] else "*")
        return tuple(found)

    @field_validator("mirrors")
    @classmethod
    def _mirrors(cls, v: dict[str, str]) -> dict[str, str]:
        for src, dst in v.items():
            if src == ANY_BASE:
                src = dst  # only the replacement needs checking
            if "://" in src or "://" in dst:
                raise ValueError(f"mirror '{src}: {dst}': write registry prefixes without a scheme")
            for which, prefix in (("source", src), ("replacement", dst)):
                if not REGISTRY_PREFIX_RE.fullmatch(prefix):
                    raise ValueError(
                        f"mirror {_shown(src)}: the {which} {_shown(prefix)} is not a registry prefix; write "
                        "HOST[:PORT][/PATH] in lower case, e.g. harbor.corp.example/dockerhub"
                    )
        return v

    def check_targets(self, matrix: Matrix) -> None:
        """Every target (and platform) the site names must be in the matrix: a typo would silently
        leave the step in (or the fallback out) and the build would fail far from the cause."""
        where = f"{self.path}: " if self.path else ""
        bases = sorted({t.base.image for t in matrix.targets.values()})
        for image in self.base_digests:
            if image not in bases:
                raise ConfigError(
                    f"{where}base_digests: {_shown(image)} is not a base image of {matrix.path}"
                    f"{_suggest(image, bases)}; write the base exactly as matrix.yaml names it (one of: "
                    f"{', '.join(bases)})"
                )
        lists = (("skip_engine_install", 1), ("skip_steps", 2), ("engine_fallback", 1))
        for key, platform_at in lists:
            for index, entry in enumerate(getattr(self, key)):
                parts = entry.split(":", platform_at)
                name, platform = parts[0], (parts[platform_at] if len(parts) > platform_at else "")
                if name == ANY_TARGET and key == "skip_steps" and not platform:
                    continue
                if name not in matrix.targets:
                    raise ConfigError(
                        f"{where}{key}[{index}]: {_shown(entry)}: {matrix.path} has no target named "
                        f"'{name}'{_suggest(name, matrix.targets)}; valid targets: {', '.join(matrix.targets)}"
                    )
                target = matrix.targets[name]
                if platform and platform not in target.platforms:
                    raise ConfigError(
                        f"{where}{key}[{index}]: {_shown(entry)}: '{platform}' is not a platform of target "
                        f"'{name}'; write one of {', '.join(target.platforms)} (or leave it out for all)"
                    )

    def map_image(self, ref: str) -> str:
        """Apply the longest matching mirror prefix (matching whole path segments)."""
        best = ""
        for prefix in self.mirrors:
            if prefix == ANY_BASE:
                continue
            if (ref == prefix or ref.startswith(prefix.rstrip("/") + "/") or ref.startswith(prefix + ":")) and len(
                prefix
            ) > len(best):
                best = prefix
        if not best:
            return f"{self.mirrors[ANY_BASE].rstrip('/')}/{ref}" if ANY_BASE in self.mirrors else ref
        return self.mirrors[best].rstrip("/") + ref[len(best.rstrip("/")) :]


def load_site(path: Path | str | None) -> SiteConfig:
    """Read a site file; None means $XCFORGE_SITE or an empty site (direct internet)."""
    if path is None:
        env_path = os.environ.get("XCFORGE_SITE")
        if env_path:
            path = env_path
        elif MACHINE_DEFAULT.exists():
            path = MACHINE_DEFAULT
        else:
            return SiteConfig()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: site config not found; check --site or $XCFORGE_SITE") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save the site config as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the site config ({exc.strerror}); pass a file to --site") from None
    raw, lines = load_yaml(text, path)
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path}: the site config must be a mapping; write `key: value` lines (see sites/standin.yaml)"
        )
    try:
        site = SiteConfig.model_validate({**raw, "path": path})
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, exc, prefix=(), model=SiteConfig, lines=lines)) from None
    base = path.parent
    updates: dict[str, Path] = {}
    for key in ("ca_bundle", "wheelhouse"):
        value = getattr(site, key)
        if value is not None:
            resolved = value if value.is_absolute() else (base / value)
            if not resolved.exists():
                raise ConfigError(f"{path}: {key}: '{value}' does not exist; fix the path or remove the key")
            updates[key] = resolved
    if site.wheelhouse is not None and not updates["wheelhouse"].is_dir():
        raise ConfigError(f"{path}: wheelhouse: '{site.wheelhouse}' is not a directory; name the directory of wheels")
    if site.ca_bundle is not None:
        _check_ca_bundle(path, site.ca_bundle, updates["ca_bundle"])
    if site.pip.token_env and site.pip.token_env not in os.environ:
        raise ConfigError(
            f"{path}: pip.token_env: environment variable {site.pip.token_env} is not set; export it "
            "(CI: from a secret) or remove the key"
        )
    return site.model_copy(update=updates)


def _check_ca_bundle(path: Path, value: Path, resolved: Path) -> None:
    """The CA bundle is handed to pip, apt and curl in the build: it must be PEM certificates."""
    if not resolved.is_file():
        raise ConfigError(f"{path}: ca_bundle: '{value}' is not a file; name a PEM file of CA certificates")
    try:
        data = resolved.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path}: ca_bundle: cannot read '{value}' ({exc.strerror}); make it readable by this user "
            "(chmod a+r) or point ca_bundle at a readable copy"
        ) from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ConfigError(
            f"{path}: ca_bundle: '{value}' holds no PEM certificate (-----BEGIN CERTIFICATE-----); point "
            "ca_bundle at your CA's certificates in PEM (a DER file converts with "
            "`openssl x509 -inform der -in CA.cer -out ca.pem`)"
        )


def write_machine_default(target: Path = MACHINE_DEFAULT, template: Path = STANDIN_SITE) -> Path:
    """This machine's default site: the stand-in site, minus a wheelhouse the machine does not have
    (then PyTorch's index from the matrix stays in force)."""
    raw = yaml.safe_load(template.read_text(encoding="utf-8"))
    wheelhouse = raw.get("wheelhouse")
    if wheelhouse and not Path(wheelhouse).is_dir():
        del raw["wheelhouse"]
        raw.get("pip", {}).pop("extra_index_urls", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Machine default written by scripts/provision.sh from {template.relative_to(REPO_ROOT)}: vendor bases\n"
        "# are served by local stand-ins here. Used when neither --site nor $XCFORGE_SITE is given.\n"
    )
    target.write_text(header + yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return target


if __name__ == "__main__":  # python -m xcforge.config.site: (re)write the machine default
    print(write_machine_default())
