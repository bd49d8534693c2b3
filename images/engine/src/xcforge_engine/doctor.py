"""doctor: what the image is, what it sees, and a verdict per check with its remedy.

The JSON form is a stable interface (schema_version 1, fields in docs/engine.md); smoke tests and
operators' scripts read it. Exit code: 0 when nothing is an error (warnings allowed), 3 otherwise,
the same code serve's preflight uses, so "doctor passes" means "serve's preflight passes".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from xcforge_engine import __version__
from xcforge_engine.backends import resolve_backend
from xcforge_engine.backends.base import (
    ERROR,
    OK,
    SEVERITY,
    WARNING,
    DeriveInput,
    Finding,
    FindingDict,
    Setting,
    SettingDict,
    engine_finding,
    shm_finding,
)
from xcforge_engine.cpuinfo import read_cpuinfo
from xcforge_engine.errors import EngineError, PreflightFailed
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.isa import IsaBlock, cpuinfo_finding, isa_finding
from xcforge_engine.limits import format_cpulist, numa_nodes, read_limits, shm_size, size_text
from xcforge_engine.modelinfo import local_model, model_problems
from xcforge_engine.software import Software

SCHEMA_VERSION = 1
EXIT_OK = 0
EXIT_ERROR = PreflightFailed.exit_code


# The JSON report, as docs/engine.md documents it.
class BackendBlock(TypedDict):
    name: str
    title: str
    why: str


class CpuBlock(TypedDict):
    vendor: str | None
    model: str | None
    features: dict[str, bool]
    isa: IsaBlock


class MemoryBlock(TypedDict):
    limit_bytes: int | None
    limit_source: str
    total_bytes: int | None
    available_bytes: int | None


class CpusBlock(TypedDict):
    allowed: str
    count: int
    source: str
    quota: float | None
    quota_source: str


class HostBlock(TypedDict):
    arch: str
    cpu: CpuBlock
    cgroup_version: int | None
    memory: MemoryBlock
    cpus: CpusBlock
    shm_bytes: int | None
    shm_source: str
    numa_nodes: int


class Report(TypedDict):
    schema_version: int
    xcforge_engine: str
    verdict: str
    exit_code: int
    image: dict[str, object]  # ImageFacts.as_dict() (str | None each) and "sources"
    software: dict[str, object]  # Software.as_dict(): its fields and the backend's extras
    backend: BackendBlock
    host: HostBlock
    devices: list[str]
    versions: dict[str, str | None]
    serve_defaults: list[SettingDict]
    checks: list[FindingDict]


def build_report(
    host: Host, env: Mapping[str, str], image: ImageFacts, software: Software, model: str | None = None
) -> Report:
    backend, backend_why = resolve_backend(image, env, host)
    limits = read_limits(host)
    cpu = read_cpuinfo(host)
    shm_bytes, shm_source = shm_size(host)
    versions = backend.versions(host, env, software)

    isa_check, isa_block = isa_finding(host, image)
    findings: list[Finding] = [
        isa_check,
        cpuinfo_finding(host, image),
        engine_finding(image, software),
        *image_findings(image),
        *backend.checks(host, env, image),
        *backend.compat(versions),
        shm_finding(host, backend),
    ]
    if model:
        errors, warnings = model_problems(host, model)
        findings += [Finding("model.path", ERROR, e, subject=model) for e in errors]
        findings += [Finding("model.path", WARNING, w) for w in warnings]
        if not errors and not warnings:
            findings.append(Finding("model.path", OK, f"model {model} is usable"))

    # What serve would derive with no operator arguments (the cgroup-based defaults).
    serve_defaults: list[SettingDict] = []
    try:
        given = DeriveInput(host=host, env=env, given=set(), args=[], model=local_model(host, model))
        serve_defaults = [s.as_dict() for s in backend.derive(given)]
    except EngineError as exc:
        findings.append(Finding("serve.defaults", WARNING, f"cannot derive serve's defaults: {exc.lines[0]}"))

    worst = max((SEVERITY[f.status] for f in findings), default=0)
    verdict = {0: OK, 1: WARNING, 2: ERROR}[worst]
    memory, cpus = limits.memory, limits.cpu
    return {
        "schema_version": SCHEMA_VERSION,
        "xcforge_engine": __version__,
        "verdict": verdict,
        "exit_code": EXIT_ERROR if verdict == ERROR else EXIT_OK,
        "image": {**image.as_dict(), "sources": dict(image.sources)},
        "software": software.as_dict(),
        "backend": {"name": backend.name, "title": backend.title, "why": backend_why},
        "host": {
            "arch": host.arch(),
            "cpu": {"vendor": cpu.vendor, "model": cpu.model, "features": cpu.features(), "isa": isa_block},
            "cgroup_version": limits.cgroup_version,
            "memory": {
                "limit_bytes": memory.limit_bytes,
                "limit_source": memory.source,
                "total_bytes": memory.total_bytes,
                "available_bytes": memory.available_bytes,
            },
            "cpus": {
                "allowed": format_cpulist(list(cpus.cpus)),
                "count": len(cpus.cpus),
                "source": cpus.cpus_source,
                "quota": cpus.quota,
                "quota_source": cpus.quota_source,
            },
            "shm_bytes": shm_bytes,
            "shm_source": shm_source,
            "numa_nodes": len(numa_nodes(host)) or 1,
        },
        "devices": backend.device_nodes(host),
        "versions": versions,
        "serve_defaults": serve_defaults,
        "checks": [f.as_dict() for f in findings],
    }


def image_findings(image: ImageFacts) -> list[Finding]:
    """What the image lacks on purpose and whose engine build it carries, where an operator looks."""
    findings = []
    if image.unavailable:
        findings.append(Finding("image.inputs", WARNING, image.unavailable))
    if image.removed:
        findings.append(Finding("image.removed", OK, image.removed))
    if image.engine_packager:
        findings.append(Finding("engine.packager", OK, image.packager_note))
    return findings


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def render_text(report: Report) -> str:
    image = report["image"]
    host = report["host"]
    software = report["software"]
    backend = report["backend"]
    memory, cpus, cpu = host["memory"], host["cpus"], host["cpu"]
    lines = [f"xcforge-engine {report['xcforge_engine']} doctor"]

    shown = [f"{k}={image[k]}" for k in ("target", "engine_version", "plugin", "plugin_version") if image.get(k)]
    shown += [f"revision={image['build_revision']}"] if image.get("build_revision") else []
    shown += [f"engine_install={image['engine_install']}"] if image.get("engine_install") else []
    lines.append(f"image     {' '.join(shown) or '(no XCFORGE_* facts: not an xcforge image?)'}")
    if image.get("engine_fallback"):
        lines.append(f"pins      {image['engine_fallback']}")
    if image.get("unavailable"):
        lines.append(f"inputs    {image['unavailable']}")
    if image.get("base_image"):
        at_digest = f"@{image['base_digest']}" if image.get("base_digest") else ""
        lines.append(f"base      {image['base_image']}{at_digest}")
    installed = [f"python {software['python']}"]
    installed += [
        f"{name} {version}"
        for name, version in software.items()
        if name not in ("python", "vllm_distribution", "vllm_importable") and version
    ]
    lines.append(f"software  {', '.join(installed)}")
    lines.append(f"backend   {backend['name']} ({backend['why']})")
    features = ", ".join(f"{name} {_yes(v)}" for name, v in cpu["features"].items())
    described = " ".join(part for part in (host["arch"], cpu["vendor"], cpu["model"]) if part)
    lines.append(f"cpu       {described} — {features}")
    variant = cpu["isa"].get("variant")
    if variant:
        lines.append(f"variant   {variant['summary']}")
    if memory["limit_bytes"] is not None:
        mem = f"limit {size_text(memory['limit_bytes'])} ({memory['limit_source']})"
    else:
        mem = memory["limit_source"]
    if memory["total_bytes"]:
        mem += f"; host total {size_text(memory['total_bytes'])}"
    lines.append(f"memory    {mem}")
    quota = f"quota {cpus['quota']:g} CPUs" if cpus["quota"] is not None else cpus["quota_source"]
    lines.append(f"cpus      {cpus['allowed']} ({cpus['count']}) from {cpus['source']}; {quota}")
    shm = size_text(host["shm_bytes"]) if host["shm_bytes"] is not None else "unknown"
    lines.append(f"shm       {shm} ({host['shm_source']})")
    lines.append(f"devices   {', '.join(report['devices']) or 'none'}")
    if report["versions"]:
        lines.append("versions  " + ", ".join(f"{k} {v or 'unknown'}" for k, v in report["versions"].items()))
    for setting in report["serve_defaults"]:
        lines.append(f"default   {Setting(**setting).log_line()}")
    lines.append("checks")
    width = max((len(c["id"]) for c in report["checks"]), default=10)
    for check in report["checks"]:
        fix = " ".join(check["flags"])
        if check["remedy"]:
            fix = f"{fix} ({check['remedy']})" if fix else check["remedy"]
        suffix = f" → {fix}" if fix and check["status"] != OK else ""
        lines.append(f"  {check['status']:<8} {check['id']:<{width}}  {check['message']}{suffix}")
    lines.append(f"verdict   {report['verdict']} (exit {report['exit_code']})")
    return "\n".join(lines)
