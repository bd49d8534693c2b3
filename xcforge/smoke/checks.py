"""Smoke tests of a built image, by digest, for every platform: the last arrow before the report.

What is checked comes from the target's `smoke` spec and runtime contract in matrix.yaml:
image metadata (read from the artifact itself: registry or OCI archive), files that must exist,
commands with expected output, `doctor --json` reporting exactly the target's missing devices on a
machine without them, and, where the image can serve here, a real OpenAI-API serve test. Every
container is removed, whatever happens. arm64 runs under QEMU; checks that cannot work there are
skipped with the reason in the report.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ocicore import layout, registry
from xcforge.config.matrix import EmulatedCpu, Target, is_arch
from xcforge.console import say
from xcforge.errors import SmokeFailed
from xcforge.paths import REPO_ROOT
from xcforge.records import SmokeCheck
from xcforge.shell import run
from xcforge.smoke import containers
from xcforge.smoke.containers import RunSpec
from xcforge.smoke.options import SmokeOptions

if TYPE_CHECKING:
    from openai import OpenAI

    from xcforge.bake.result import BuildResult

PASS, FAIL, SKIP = "pass", "fail", "skip"
TINY_MODEL_SCRIPT = REPO_ROOT / "tools" / "make_tiny_model.py"


@dataclass(frozen=True)
class SmokeSubject:
    """The image under test: a registry reference by digest, or a loaded archive's tag + its file."""

    target: Target
    ref: str  # what `docker run` takes (repo@digest, or a tag of a loaded archive)
    platforms: tuple[str, ...]
    native_platform: str
    engine_install: str = "full"
    archive: Path | None = None
    # `--device` runs on a machine with the hardware: the target's devices and driver mounts.
    device_flags: tuple[str, ...] = ()

    @property
    def on_device(self) -> bool:
        return bool(self.device_flags)


def device_flags(target: Target, root: Path = Path("/")) -> tuple[str, ...]:
    """The `docker run` flags that hand this host's devices and driver mounts to a container,
    from the target's runtime contract (only what exists here)."""
    import glob
    import shlex

    flags: list[str] = []
    for pattern in target.runtime.devices:
        for path in sorted(glob.glob(str(root / pattern.lstrip("/")))):
            flags += ["--device", path]
    for mount in target.runtime.mounts:
        if Path(mount.host).exists():
            flags += ["-v", f"{mount.host}:{mount.container}{':ro' if mount.readonly else ''}"]
    for flag in target.runtime.docker_flags:
        flags += shlex.split(flag)
    for group in target.runtime.user.groups:
        flags += ["--group-add", str(group.gid)]
    return tuple(flags)


def _say(message: str) -> None:
    say(message, prefix="smoke")


# --------------------------------------------------------------------------- metadata


def _configs(subject: SmokeSubject) -> dict[str, dict[str, Any]]:
    if subject.archive:
        return layout.OciArchive(subject.archive).configs()
    return registry.image_configs(subject.ref)


def check_metadata(subject: SmokeSubject, config: dict[str, Any], platform: str) -> list[SmokeCheck]:
    target = subject.target
    cfg = config.get("config") or {}
    user = f"{target.runtime.user.uid}:{target.runtime.user.gid}"
    expectations = {
        "metadata.user": (cfg.get("User"), user),
        "metadata.entrypoint": (cfg.get("Entrypoint"), ["/usr/bin/tini", "--", "xcforge-env", "xcforge-engine"]),
        "metadata.cmd": (cfg.get("Cmd"), ["serve"]),
        "metadata.exposed_port": (sorted(cfg.get("ExposedPorts") or {}), [f"{target.runtime.port}/tcp"]),
        "metadata.healthcheck": (
            (cfg.get("Healthcheck") or {}).get("Test"),
            ["CMD", "xcforge-engine", "healthcheck"],
        ),
    }
    labels = cfg.get("Labels") or {}
    checks = []
    for name, (have, want) in expectations.items():
        ok = have == want
        checks.append(SmokeCheck(name, platform, PASS if ok else FAIL, "" if ok else f"got {have!r}, want {want!r}"))
    for key, want in (("io.xcforge.target", target.name), ("io.xcforge.backend", target.backend)):
        have = labels.get(key)
        checks.append(SmokeCheck(f"metadata.label.{key}", platform, PASS if have == want else FAIL, f"{have!r}"))
    for key in ("org.opencontainers.image.revision", "org.opencontainers.image.base.digest", "io.xcforge.fingerprint"):
        have = labels.get(key) or ""
        checks.append(SmokeCheck(f"metadata.label.{key}", platform, PASS if have else FAIL, have[:32] or "empty"))
    arch = platform.split("/")[1]
    have_arch = config.get("architecture")
    checks.append(SmokeCheck("metadata.architecture", platform, PASS if have_arch == arch else FAIL, str(have_arch)))
    return checks


# --------------------------------------------------------------------------- containers


def _docker_run(
    subject: SmokeSubject,
    platform: str,
    args: list[str],
    *,
    timeout: int = 600,
    entrypoint: str | None = None,
    extra: Sequence[str] = (),
) -> subprocess.CompletedProcess[bytes]:
    """`docker run --rm` of the image (through the SDK): exit code, stdout and stderr as bytes."""
    spec = RunSpec(
        image=subject.ref,
        command=tuple(args),
        name=f"xcforge-smoke-{uuid.uuid4().hex[:10]}",
        platform=platform,
        shm_size="1g",
        entrypoint=entrypoint,
    ).with_flags([*subject.device_flags, *extra])
    return containers.run_to_exit(spec, timeout=timeout)


def check_files(subject: SmokeSubject, platform: str) -> list[SmokeCheck]:
    files = subject.target.smoke.files
    if not files:
        return []
    script = 'for f in "$@"; do [ -e "$f" ] || echo "missing: $f"; done'
    proc = _docker_run(subject, platform, ["-c", script, "sh", *files], entrypoint="/bin/sh")
    missing = [line.split(": ", 1)[1] for line in proc.stdout.decode().splitlines() if line.startswith("missing: ")]
    return [
        SmokeCheck(f"file {path}", platform, FAIL if path in missing else PASS, "missing" if path in missing else "")
        for path in files
    ]


def check_commands(subject: SmokeSubject, platform: str) -> list[SmokeCheck]:
    checks = []
    for command in subject.target.smoke.commands:
        proc = _docker_run(subject, platform, list(command.run[1:]), entrypoint=command.run[0])
        output = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
        problems = []
        if proc.returncode != command.expect_exit:
            problems.append(f"exit {proc.returncode}, want {command.expect_exit}")
        if command.expect_output and not re.search(command.expect_output, output):
            problems.append(f"output does not match /{command.expect_output}/")
        detail = "; ".join(problems) + (f": {output.strip()[-300:]}" if problems else "")
        checks.append(SmokeCheck(f"command {command.name}", platform, FAIL if problems else PASS, detail))
    return checks


def _pattern_base(pattern: str) -> str:
    return re.split(r"[\[*<]", pattern, maxsplit=1)[0]


def check_doctor(subject: SmokeSubject, platform: str) -> list[SmokeCheck]:
    """On a machine without the hardware, doctor must name exactly the target's devices, and fail."""
    proc = _docker_run(subject, platform, ["doctor", "--json"])
    try:
        report = json.loads(proc.stdout.decode())
    except json.JSONDecodeError:
        tail = (proc.stdout + proc.stderr).decode(errors="replace").strip()[-300:]
        return [SmokeCheck("doctor --json", platform, FAIL, f"not JSON (exit {proc.returncode}): {tail}")]
    errors = [c for c in report.get("checks", []) if c.get("status") == "error"]
    if platform != subject.native_platform:
        # Under QEMU user emulation /proc/cpuinfo is the x86 host's: doctor rightly says so, and the
        # emulated serve check mounts a matching one. Not a fault of the image.
        errors = [c for c in errors if c.get("id") != "cpu.cpuinfo"]
    if subject.on_device:
        ok = not errors and proc.returncode == 0
        detail = f"verdict {report.get('verdict')}" + "".join(f"; {c.get('id')}: {c.get('message')}" for c in errors)
        return [SmokeCheck("doctor with the devices", platform, PASS if ok else FAIL, detail)]
    reported = set()
    for check in errors:
        if ".device" in check.get("id", ""):
            reported.update(re.findall(r"/dev/[\w<>\[\]*-]+", check.get("message", "")))
    wanted = subject.target.runtime.devices
    missing_from_report = [
        p for p in wanted if not any(fnmatch.fnmatch(r, p) or _pattern_base(r) == _pattern_base(p) for r in reported)
    ]
    unexpected = sorted(
        r for r in reported if not any(fnmatch.fnmatch(r, p) or _pattern_base(r) == _pattern_base(p) for p in wanted)
    )
    checks = []
    if wanted:
        ok = not missing_from_report and not unexpected and proc.returncode != 0
        detail = f"exit {proc.returncode}; reported {sorted(reported)}"
        if missing_from_report:
            detail += f"; not reported: {missing_from_report}"
        if unexpected:
            detail += f"; unexpected: {unexpected}"
        checks.append(SmokeCheck("doctor reports the missing devices", platform, PASS if ok else FAIL, detail))
    else:
        ok = not reported and not errors
        checks.append(
            SmokeCheck(
                "doctor without devices",
                platform,
                PASS if ok else FAIL,
                f"verdict {report.get('verdict')}, exit {proc.returncode}",
            )
        )
    return checks


# --------------------------------------------------------------------------- serve


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def tiny_model(directory: Path | None = None) -> Iterator[Path]:
    """A random-weight Llama model made by tools/make_tiny_model.py (never committed)."""
    if directory and (directory / "config.json").exists():
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="xcforge-tiny-model-") as tmp:
        out = directory or Path(tmp) / "tiny-llama"
        run([sys.executable, str(TINY_MODEL_SCRIPT), str(out)], capture=True)
        out.chmod(0o755)
        for path in out.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield out


@contextlib.contextmanager
def model_for(subject: SmokeSubject, model: Path, platform: str) -> Iterator[Path]:
    """The tiny model in the format the target serves: as it is, or converted to GGUF."""
    if subject.target.smoke.model_format != "gguf":
        yield model
        return
    from xcforge.config.matrix import load_matrix
    from xcforge.smoke import gguf

    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    with tempfile.TemporaryDirectory(prefix="xcforge-tiny-gguf-") as tmp:
        yield gguf.tiny_gguf(matrix, subject.target, subject.ref, platform, model, Path(tmp) / "gguf")


@dataclass
class ServedContainer:
    name: str
    port: int
    model: str


@dataclass(frozen=True)
class Emulation:
    """A platform run under QEMU user emulation as one CPU model, with a matching /proc/cpuinfo."""

    cpu: str
    cpuinfo: Path
    serve_args: tuple[str, ...] = ()

    def docker_flags(self) -> list[str]:
        return ["-e", f"QEMU_CPU={self.cpu}", "-v", f"{self.cpuinfo}:/proc/cpuinfo:ro"]


def emulated_cpuinfo(subject: SmokeSubject, platform: str, cpu: str, directory: Path) -> Path:
    """An aarch64 /proc/cpuinfo for QEMU_CPU=cpu, with the features that emulated CPU reports.

    Under user emulation /proc/cpuinfo is the x86 host's, and oneDNN (inside torch) reads it and
    fails; the features come from the launcher's own reading of AT_HWCAP in that emulated process.
    """
    proc = _docker_run(subject, platform, ["doctor", "--json"], extra=["-e", f"QEMU_CPU={cpu}"])
    try:
        features = json.loads(proc.stdout.decode())["host"]["cpu"]["isa"]["features"]
    except (json.JSONDecodeError, KeyError, TypeError):
        features = ["fp", "asimd"]
    block = (
        "processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: " + " ".join(features) + "\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0x000\nCPU revision\t: 0\n"
    )
    path = directory / f"cpuinfo-{cpu}"
    path.write_text("\n".join(block.format(n=n) for n in range(os.cpu_count() or 1)))
    path.chmod(0o644)
    return path


@contextlib.contextmanager
def served(subject: SmokeSubject, model_dir: Path, *, extra_env: dict[str, str] | None = None,
           memory: str | None = None, cpus: str | None = None, platform: str | None = None,
           emulation: Emulation | None = None) -> Iterator[ServedContainer]:  # fmt: skip
    """`docker run -d` the image serving model_dir (through the SDK); always removed afterwards."""
    port = _free_port()
    target = subject.target
    command = ("--model", "/models/tiny", "--served-model-name", "tiny", "--max-model-len", "512")
    spec = RunSpec(
        image=subject.ref,
        command=command + (emulation.serve_args if emulation else ()),
        name=f"xcforge-serve-{uuid.uuid4().hex[:10]}",
        platform=platform or subject.native_platform,
        ports=(("127.0.0.1", port, target.runtime.port),),
        shm_size=target.runtime.shm_size,
        memory=memory,
        cpus=cpus,
    )
    flags = ["-v", f"{model_dir}:/models/tiny:ro", *subject.device_flags]
    flags += emulation.docker_flags() if emulation else []
    for key, value in (extra_env or {}).items():
        flags += ["-e", f"{key}={value}"]
    with containers.detached(spec.with_flags(flags)) as name:
        yield ServedContainer(name=name, port=port, model="tiny")


def container_state(name: str) -> dict[str, Any]:
    return containers.state(name)


def wait_healthy(container: ServedContainer, timeout: float = 420) -> tuple[bool, str]:
    """Until /health answers 200; a container that exits on the way says so, with its log's end."""
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = container_state(container.name)
        if state and not state.get("Running"):
            logs = containers.logs(container.name, tail=30)
            return False, f"container exited ({state.get('ExitCode')}): {logs[-800:]}"
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"http://127.0.0.1:{container.port}/health", timeout=5).status_code == 200:
                return True, ""
        time.sleep(2)
    return False, f"/health did not answer 200 within {timeout:.0f} s"


def _talk(
    client: OpenAI, base: str, subject: SmokeSubject, record: Callable[[str, bool, str], bool], step: list[str]
) -> None:
    """The requests an application makes, each recorded; `step` names the one in progress."""
    import requests

    models = [m.id for m in client.models.list().data]
    record("/v1/models", models == ["tiny"], str(models))
    step[0] = "completion"
    asked = time.monotonic()
    completion = client.completions.create(model="tiny", prompt="Hello", max_tokens=16, temperature=0)
    took = time.monotonic() - asked
    tokens = completion.usage.completion_tokens if completion.usage else 0
    record(
        "completion",
        bool(completion.choices) and tokens > 0,
        f"{completion.choices[0].text!r}: {tokens} tokens in {took:.2f} s ({tokens / max(took, 1e-6):.1f} tokens/s)",
    )
    step[0] = "chat completion"
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0
    )
    chat_tokens = chat.usage.completion_tokens if chat.usage else 0  # a server may leave usage out
    record("chat completion", bool(chat.choices) and chat_tokens > 0, repr(chat.choices[0].message.content))
    step[0] = "streamed chat"
    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, stream=True
    )
    chunks = [chunk for chunk in stream]
    record("streamed chat", len(chunks) >= 2, f"{len(chunks)} chunks")
    step[0] = "/metrics"
    metrics = requests.get(f"{base}/metrics", timeout=30).text
    prefix = subject.target.smoke.metrics_prefix
    record("/metrics", prefix in metrics, f"{len(metrics.splitlines())} lines, {prefix}* present")


def what_happened(name: str, exc: Exception) -> str:
    """One line: the request's error, the container's state, the worker's fatal signal, the log's end."""
    return describe_failure(exc, container_state(name), containers.logs(name, tail=2000))


def describe_failure(exc: Exception, state: dict[str, Any], logs: str) -> str:
    if not state:
        where = "container gone"
    elif state.get("Running"):
        where = "container still running"
    else:
        where = f"container exited {state.get('ExitCode')}" + (" (OOM-killed)" if state.get("OOMKilled") else "")
    died = re.findall(r"(?:exit code|exitcode|died with|killed by)[\s:=]+(-?\d+|SIG[A-Z]+)", logs, re.I)
    signal_note = ""
    if died:
        code = died[-1]
        if code.lstrip("-").isdigit() and int(code) < 0:
            with contextlib.suppress(ValueError):
                code = f"{code} ({signal.Signals(-int(code)).name})"
        signal_note = f"; worker died: {code}"
    tail = " | ".join(line.strip() for line in logs.strip().splitlines()[-3:])[-400:]
    return f"{type(exc).__name__}: {str(exc)[:160]}; {where}{signal_note}; log: {tail}"


# Seconds to /health: natively the tiny model is up in under a minute; under QEMU emulation vLLM's
# imports alone take minutes (measured: 201 s on this 2-core machine).
HEALTH_TIMEOUT = {False: 420.0, True: 1200.0}


def check_serve(
    subject: SmokeSubject,
    model_dir: Path | None = None,
    platform: str | None = None,
    emulation: Emulation | None = None,
) -> list[SmokeCheck]:
    """Serve a model (the generated tiny one unless given) and talk to it as an application would."""
    import requests
    from openai import OpenAI, OpenAIError

    platform = platform or subject.native_platform
    checks: list[SmokeCheck] = []
    where = f" (QEMU_CPU={emulation.cpu})" if emulation else ""

    def record(name: str, ok: bool, detail: str = "") -> bool:
        checks.append(SmokeCheck(f"serve {name}", platform, PASS if ok else FAIL, detail + (where if ok else "")))
        return ok

    env = dict(subject.target.smoke.serve_env)
    with contextlib.ExitStack() as stack:
        tiny = stack.enter_context(tiny_model(model_dir))
        try:
            model = stack.enter_context(model_for(subject, tiny, platform))
        except subprocess.CalledProcessError as exc:
            tail = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
            record(
                f"model ({subject.target.smoke.model_format})", False, f"exit {exc.returncode}: {tail.strip()[-300:]}"
            )
            return checks
        c = stack.enter_context(served(subject, model, extra_env=env, platform=platform, emulation=emulation))
        started = time.monotonic()
        ok, detail = wait_healthy(c, timeout=HEALTH_TIMEOUT[emulation is not None])
        if not record("/health", ok, detail or f"200 after {time.monotonic() - started:.0f} s"):
            return checks
        base = f"http://127.0.0.1:{c.port}"
        client = OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=300 if emulation else 120, max_retries=0)
        step = ["/v1/models"]  # the check in progress, for the failure line
        try:
            _talk(client, base, subject, record, step)
        except (OpenAIError, requests.RequestException) as exc:
            # The server died or stopped answering: say what happened, never an internal error.
            record(step[0], False, what_happened(c.name, exc))
            return checks
        deadline = time.monotonic() + 90
        status = ""
        while time.monotonic() < deadline:
            # The image's own HEALTHCHECK (xcforge-engine healthcheck), as the engine records it.
            status = (container_state(c.name).get("Health") or {}).get("Status", "")
            if status == "healthy":
                break
            time.sleep(2)
        record("docker health", status == "healthy", status)
        stop_started = time.monotonic()
        containers.stop(c.name, grace=30)
        state = container_state(c.name)
        took = time.monotonic() - stop_started
        exit_code = state.get("ExitCode")
        # 137 would mean Docker had to SIGKILL it after the timeout: not a clean shutdown.
        record("graceful stop", exit_code in (0, 143) and took < 30, f"exit {exit_code} after {took:.1f} s")
    return checks


# --------------------------------------------------------------------------- orchestration


def run_smoke(subject: SmokeSubject, *, serve: bool | None = None, model_dir: Path | None = None) -> list[SmokeCheck]:
    checks: list[SmokeCheck] = []
    configs = _configs(subject)
    for platform in subject.platforms:
        _say(f"{subject.target.name} {platform}: {subject.ref}")
        config = configs.get(platform)
        if config is None:
            checks.append(SmokeCheck("metadata", platform, FAIL, f"no {platform} image in {subject.ref}"))
            continue
        checks += check_metadata(subject, config, platform)
        checks += check_files(subject, platform)
        checks += check_commands(subject, platform)
        checks += check_doctor(subject, platform)
    want_serve = subject.target.smoke.serve if serve is None else serve
    if want_serve:
        checks += _serve_or_skip(subject, model_dir)
    for check in checks:
        _say(f"{check.status:4} {check.platform:12} {check.check} {check.detail}".rstrip())
    return checks


def check_isa_refusal(subject: SmokeSubject, platform: str, cpu: str, model_dir: Path) -> SmokeCheck:
    """On a CPU the image cannot run on, serve must refuse in one line (exit 3), never crash."""
    started = time.monotonic()
    proc = _docker_run(
        subject,
        platform,
        ["serve", "--model", "/models/tiny"],
        timeout=300,
        extra=["-e", f"QEMU_CPU={cpu}", "-v", f"{model_dir}:/models/tiny:ro"],
    )
    err = proc.stderr.decode(errors="replace")
    errors = [line for line in err.splitlines() if line.startswith("[xcforge] error:")]
    ok = proc.returncode == 3 and len(errors) == 1 and "lacks" in errors[0] and "Illegal instruction" not in err
    detail = f"exit {proc.returncode} in {time.monotonic() - started:.0f} s: " + (errors[0] if errors else err[-300:])
    return SmokeCheck(f"isa gate refuses QEMU_CPU={cpu}", platform, PASS if ok else FAIL, detail)


def _emulated(subject: SmokeSubject, platform: str, spec: EmulatedCpu, model_dir: Path | None) -> list[SmokeCheck]:
    with tiny_model(model_dir) as model, tempfile.TemporaryDirectory(prefix="xcforge-cpuinfo-") as tmp:
        checks = [check_isa_refusal(subject, platform, cpu, model) for cpu in spec.refuses]
        cpuinfo = emulated_cpuinfo(subject, platform, spec.serves_on, Path(tmp))
        _say(f"{subject.target.name} {platform}: serving under QEMU_CPU={spec.serves_on} (emulated: minutes)")
        return checks + check_serve(subject, model, platform, Emulation(spec.serves_on, cpuinfo, spec.serve_args))


def _serve_or_skip(subject: SmokeSubject, model_dir: Path | None) -> list[SmokeCheck]:
    checks = []
    for platform in subject.platforms:
        arch = platform.split("/")[1]
        skipped = subject.engine_install in ("skip", f"skip-{arch}")
        emulated = subject.target.smoke.emulated.get(arch) if is_arch(arch) else None
        if platform != subject.native_platform and emulated is not None and not skipped:
            checks += _emulated(subject, platform, emulated, model_dir)
        elif platform != subject.native_platform:
            checks.append(
                SmokeCheck(
                    "serve",
                    platform,
                    SKIP,
                    "needs a native runner (runs on [self-hosted, arm64] or ubuntu-24.04-arm) or the matrix's "
                    "smoke.emulated for this arch (QEMU with a chosen CPU model)",
                )
            )
    if subject.native_platform not in subject.platforms:
        return checks
    # A target without device nodes serves on the CPU (cpu, feiteng): here, on every machine.
    if subject.target.runtime.devices and not subject.on_device:
        checks.append(
            SmokeCheck(
                "serve",
                subject.native_platform,
                SKIP,
                f"needs {subject.target.backend} hardware: runs with `smoke --device` on [self-hosted, "
                f"{subject.target.backend}] runners",
            )
        )
        return checks
    arch = subject.native_platform.split("/")[1]
    if subject.engine_install in ("skip", f"skip-{arch}"):
        checks.append(
            SmokeCheck("serve", subject.native_platform, SKIP, "stand-in build without the engine on this platform")
        )
        return checks
    return checks + check_serve(subject, model_dir)


@dataclass(frozen=True)
class SmokeOutcome:
    """The smoke stage's result for one image: its checks (as the report lists them), the
    verification level each served platform reached, and the error when a check failed. The build
    record is not touched: the report stage puts the two together (xcforge/report/results.py)."""

    target: str
    checks: tuple[SmokeCheck, ...]
    levels: tuple[tuple[str, str], ...] = ()  # (platform, level) proven by a served completion
    error: str | None = None
    error_code: int = 0

    @property
    def failed(self) -> list[SmokeCheck]:
        return [c for c in self.checks if c.status == FAIL]


def smoke_outcome(target: str, checks: list[SmokeCheck], *, device: bool) -> SmokeOutcome:
    """Checks → outcome: a served completion raises its platform to served-cpu (device-tested on
    the device runner); a failed check is the outcome's error (exit code 9, as SmokeFailed)."""
    level = "device-tested" if device else "served-cpu"
    levels = tuple((c.platform, level) for c in checks if c.check.startswith("serve") and c.status == PASS)
    failed = [c for c in checks if c.status == FAIL]
    error = None
    if failed:
        error = f"{len(failed)} smoke check(s) failed: " + ", ".join(f"{c.check} ({c.platform})" for c in failed[:5])
    return SmokeOutcome(target, tuple(checks), levels, error, SmokeFailed.exit_code if failed else 0)


def smoke_results(results: Iterable[BuildResult], options: SmokeOptions) -> list[SmokeOutcome]:
    """The smoke stage of `build --smoke`: every built or skipped result, one outcome each."""
    from xcforge.bake.docker_env import check_docker

    native = check_docker().native_platform
    outcomes = []
    for result in results:
        if result.error or not result.digest:
            continue
        target = options.matrix.targets[result.target]
        ref = f"{result.image_repo}@{result.digest}" if result.output.pushes else result.refs[0]
        subject = SmokeSubject(
            target=target,
            ref=ref,
            platforms=tuple(p.platform for p in result.platforms),
            native_platform=native,
            engine_install=result.engine_install,
            archive=Path(result.archive) if result.archive else None,
        )
        outcomes.append(smoke_outcome(result.target, run_smoke(subject), device=bool(subject.device_flags)))
    return outcomes
