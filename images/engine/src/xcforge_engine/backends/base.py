"""What every backend module provides, and the checks they share.

A backend is a small object behind the `Backend` protocol: which device nodes it needs (with the
`docker run` flag that provides each), which versions it can read, and which defaults it derives.
Adding hardware is adding a module (backends/__init__.py discovers it by its `BACKEND`), not
branches elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypedDict

from xcforge_engine.compat import Verdict
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.limits import GIB, shm_size, size_text
from xcforge_engine.modelinfo import LocalModel
from xcforge_engine.presets import Preset
from xcforge_engine.software import Software

OK, WARNING, ERROR = "ok", "warning", "error"
SEVERITY = {OK: 0, WARNING: 1, ERROR: 2}

# Where container runtimes and base images put driver libraries.
LIBRARY_DIRS = (
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib64",
)


class FindingDict(TypedDict):
    """A Finding in doctor's JSON (`checks`)."""

    id: str
    status: str
    message: str
    remedy: str
    flags: list[str]


class SettingDict(TypedDict):
    """A Setting in doctor's and serve's JSON; `Setting(**d)` reads it back."""

    name: str
    value: str | None
    why: str
    kept: bool
    kind: str
    warning: str


@dataclass(frozen=True)
class Finding:
    """One verdict of doctor (and of serve's preflight). `id` is stable: scripts match on it."""

    id: str
    status: str  # ok | warning | error
    message: str
    remedy: str = ""
    flags: tuple[str, ...] = ()  # docker run flags that provide what is missing
    subject: str = ""  # the missing thing, for serve's one-line summary

    def as_dict(self) -> FindingDict:
        return {
            "id": self.id,
            "status": self.status,
            "message": self.message,
            "remedy": self.remedy,
            "flags": list(self.flags),
        }


@dataclass(frozen=True)
class Setting:
    """A value serve sets (or leaves) for vLLM, logged once as `name=value (why: ...)`."""

    name: str  # an env var (VLLM_CPU_KVCACHE_SPACE) or a flag (--dtype)
    value: str | None  # None: deliberately left unset
    why: str
    kept: bool = False  # given by the operator; the launcher changed nothing
    kind: str = "env"  # env | arg | note (logged only: what the engine will do by itself, and why)
    warning: str = ""  # logged after the setting when the value is a poor fit

    def log_line(self) -> str:
        if self.kind == "arg":
            shown = f"{self.name} {self.value}" if self.value else self.name
        else:
            shown = f"{self.name}={self.value}" if self.value is not None else f"{self.name} unset"
        if self.kept:
            source = "environment" if self.kind == "env" else "operator arguments"
            return f"{shown} (kept from {source})"
        return f"{shown} (why: {self.why})"

    def argv(self) -> list[str]:
        if self.kind != "arg" or self.kept:
            return []
        return [self.name, self.value] if self.value else [self.name]

    def as_dict(self) -> SettingDict:
        return {
            "name": self.name,
            "value": self.value,
            "why": self.why,
            "kept": self.kept,
            "kind": self.kind,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class DeriveInput:
    host: Host
    env: Mapping[str, str]
    given: set[str]  # flag keys already set by the operator or the preset
    args: list[str]  # preset argv + operator argv, to read values from
    model: LocalModel | None = None
    preset: Preset | None = None
    tp: int = 1


class Backend(Protocol):
    # Read-only (properties here, plain class attributes in the modules): a backend that names
    # one variable (`visible_env = ("CUDA_VISIBLE_DEVICES",)`) or always probes is one all the same.
    @property
    def name(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def device_word(self) -> str: ...  # "GPU", "NPU", "MLU", "CPU"
    @property
    def hint(self) -> str: ...  # one clause added to serve's "not usable" line: alternatives to the flags
    @property
    def visible_env(self) -> tuple[str, ...]: ...  # device-selection variables passed through to the engine
    @property
    def rank(self) -> int: ...  # listing order: accelerators (10-49) before the CPU engines (80-99)
    @property
    def probe(self) -> str | None: ...  # a control node present only when the vendor's devices were passed in
    @property
    def distributions(self) -> tuple[str, ...]: ...  # Python distributions the backend adds beside vLLM and torch

    # Optional: `presets`, a PresetSizing for a backend that data/presets.json has no column for;
    # `shm_minimum` (bytes of /dev/shm the engine needs, default SHM_MINIMUM; None: not used) and
    # `shm_note` (what doctor says instead when it is None).

    def device_nodes(self, host: Host) -> list[str]: ...

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]: ...

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]: ...

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]: ...

    def derive(self, given: DeriveInput) -> list[Setting]: ...


def access_finding(host: Host, check_id: str, nodes: list[str]) -> Finding | None:
    """Device nodes that exist but this uid cannot open: vendor nodes are often 0660 to a group
    (Ascend's HwHiAiUser), which a non-root image user must be added to."""
    closed = [node for node in nodes if not host.openable(node)]
    if not closed:
        return None
    groups = sorted({host.group_of(node) for node in closed})
    return Finding(
        check_id,
        ERROR,
        f"{', '.join(closed)} present but uid {os.geteuid()} cannot open it",
        "or run the container as root",
        tuple(f"--group-add {gid}" for gid in groups),
        subject=f"access to {', '.join(closed)}",
    )


def device_finding(host: Host, check_id: str, path: str, flags: tuple[str, ...], remedy: str = "") -> Finding:
    if host.is_device(path):
        return access_finding(host, check_id, [path]) or Finding(check_id, OK, f"{path} present")
    return Finding(check_id, ERROR, f"{path} is missing", remedy, flags, subject=path)


def numbered_finding(
    host: Host, check_id: str, prefix: str, flags: tuple[str, ...], remedy: str = "", missing: str = ERROR
) -> Finding:
    nodes = host.numbered(prefix)
    if nodes:
        return access_finding(host, check_id, nodes) or Finding(
            check_id, OK, f"{len(nodes)} present: {', '.join(nodes)}"
        )
    return Finding(check_id, missing, f"no {prefix}<N> device", remedy, flags, subject=f"{prefix}<N>")


def file_finding(
    host: Host, check_id: str, path: str, flags: tuple[str, ...], status: str = ERROR, remedy: str = ""
) -> Finding:
    if host.exists(path):
        return Finding(check_id, OK, f"{path} present")
    return Finding(check_id, status, f"{path} is missing", remedy, flags, subject=path)


def image_part_finding(image: ImageFacts, check_id: str, present: bool, what: str, where: str) -> Finding:
    """A part the image itself must hold (a toolkit, a library): an error in a full build, expected
    to be absent in a stand-in build."""
    if present:
        return Finding(check_id, OK, f"{what} found at {where}")
    if image.stand_in:
        return Finding(check_id, WARNING, f"{what} not in this stand-in build (expected at {where})")
    return Finding(
        check_id,
        ERROR,
        f"{what} is missing from the image (expected at {where})",
        "rebuild the image; this is a packaging fault, no docker run flag provides it",
        subject=what,
    )


def compat_findings(
    check_id: str, judge: Callable[[str, str], Verdict], toolkit: str | None, driver: str | None
) -> list[Finding]:
    """The toolkit-versus-driver verdict, when both versions could be read."""
    if not toolkit or not driver:
        return []
    verdict = judge(toolkit, driver)
    return [Finding(check_id, verdict.status, verdict.message, verdict.remedy)]


def library_dirs(env: Mapping[str, str]) -> list[str]:
    extra = [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    return [*extra, *LIBRARY_DIRS]


def engine_finding(image: ImageFacts, software: Software) -> Finding:
    if image.stand_in:
        return Finding(
            "engine.installed",
            WARNING,
            "stand-in build without the vendor engine (XCFORGE_ENGINE_INSTALL=skip): serve refuses to "
            "start; doctor, version, presets and serve --dry-run work",
        )
    if software.server:
        return Finding("engine.installed", OK, f"{software.server} installed")
    if not software.vllm_importable:
        return Finding(
            "engine.installed",
            ERROR,
            "vLLM is not installed in this image (no importable vllm module)",
            "rebuild the image with the engine (XCFORGE_ENGINE_INSTALL=full)",
            subject="vLLM",
        )
    name = software.vllm_distribution or "vllm"
    return Finding("engine.installed", OK, f"{name} {software.vllm or '(version unknown)'} installed")


SHM_MINIMUM = GIB


def shm_finding(host: Host, backend: Backend | None = None) -> Finding:
    """/dev/shm against what the backend's engine needs of it: `shm_minimum` on the backend class
    (default SHM_MINIMUM, for vLLM's worker processes); None for an engine that does not use it,
    whose `shm_note` then says what matters instead."""
    size, source = shm_size(host)
    if getattr(backend, "shm_minimum", SHM_MINIMUM) is None:
        shown = f"/dev/shm is {size_text(size)} ({source})" if size is not None else f"/dev/shm: {source}"
        return Finding("shm.size", OK, f"{shown}; {getattr(backend, 'shm_note', 'not used by this engine')}")
    if size is None:
        return Finding("shm.size", WARNING, f"cannot tell the size of /dev/shm ({source})")
    if size < SHM_MINIMUM:
        return Finding(
            "shm.size",
            WARNING,
            f"/dev/shm is {size_text(size)} ({source}); vLLM's worker processes exchange tensors "
            "through it and Docker's 64 MiB default fails",
            "or share the host's IPC namespace with --ipc=host",
            ("--shm-size=4g",),
        )
    return Finding("shm.size", OK, f"/dev/shm is {size_text(size)} ({source})")


def visible_settings(backend: Backend, given: DeriveInput) -> list[Setting]:
    """Device-selection variables are passed through untouched; log what the engine will see."""
    nodes = backend.device_nodes(given.host)
    settings = []
    for var in backend.visible_env:
        if var in given.env:
            settings.append(Setting(var, given.env[var], "", kept=True))
        else:
            seen = ", ".join(nodes) if nodes else "none"
            why = f"the engine uses every {backend.device_word} the container sees ({seen})"
            settings.append(Setting(var, None, why))
    return settings


def visible_count(backend: Backend, host: Host, env: Mapping[str, str]) -> tuple[int, str]:
    """How many devices the engine may use, and the sentence that says so."""
    for var in backend.visible_env:
        value = env.get(var, "").strip()
        if value:
            entries = [e for e in value.split(",") if e.strip()]
            return len(entries), f"{var}={value}"
    nodes = backend.device_nodes(host)
    return len(nodes), "the container sees " + (", ".join(nodes) if nodes else f"no {backend.device_word}")
