"""serve proves the --dtype it derived with a short torch run in a subprocess, and falls back."""

from __future__ import annotations

import os
import stat

import pytest
from engine_fakes import CPUINFO_X86_AMX, ENGINE
from xcforge_engine.dtype_probe import ProbeResult, choose, subprocess_runner
from xcforge_engine.errors import PreflightFailed
from xcforge_engine.image import load_image_facts
from xcforge_engine.serve import parse_serve_args, plan_serve, prove_dtype


def plan(fake, env, *args):
    return plan_serve(parse_serve_args(list(args), env), env, fake.host, load_image_facts(fake.host, env), ENGINE)


def recording(outcomes: dict[str, ProbeResult]):
    calls: list[str] = []

    def run(dtype: str) -> ProbeResult:
        calls.append(dtype)
        return outcomes[dtype]

    return run, calls


@pytest.fixture
def amx_box(machine):
    """A VM whose /proc/cpuinfo advertises AMX and avx512_bf16 (the Sapphire Rapids guest)."""
    fake = machine("cpu", cpuinfo=CPUINFO_X86_AMX)
    fake.write("/models/m/config.json", "{}")
    return fake


def test_a_dtype_that_dies_falls_back_with_the_reason(amx_box, env_for, capsys):
    env = env_for("cpu")
    p = plan(amx_box, env, "--model", "/models/m")
    assert p.argv[p.argv.index("--dtype") + 1] == "bfloat16"  # what the flags suggest
    run, calls = recording(
        {"bfloat16": ProbeResult("bfloat16", False, "killed by SIGILL"), "float32": ProbeResult("float32", True, "ok")}
    )
    proven = prove_dtype(p, run, "x86_64", env)
    assert calls == ["bfloat16", "float32"]  # x86: no float16 step
    assert proven.argv[proven.argv.index("--dtype") + 1] == "float32"
    assert proven.argv.count("--dtype") == 1
    setting = next(s for s in proven.settings if s.name == "--dtype")
    assert "bfloat16 killed by SIGILL" in setting.why and "float32 ok" in setting.why
    assert "falling back to --dtype float32" in capsys.readouterr().err


def test_aarch64_tries_float16_before_float32():
    run, calls = recording(
        {
            "bfloat16": ProbeResult("bfloat16", False, "killed by SIGILL"),
            "float16": ProbeResult("float16", False, "exit 1: RuntimeError: no kernel"),
            "float32": ProbeResult("float32", True, "ok"),
        }
    )
    assert choose("bfloat16", ("float16", "float32"), run)[0] == "float32"
    assert calls == ["bfloat16", "float16", "float32"]


def test_a_passing_probe_changes_nothing(amx_box, env_for):
    env = env_for("cpu")
    p = plan(amx_box, env, "--model", "/models/m")
    run, calls = recording({"bfloat16": ProbeResult("bfloat16", True, "ok")})
    assert prove_dtype(p, run, "x86_64", env).argv == p.argv
    assert calls == ["bfloat16"]


def test_operator_dtype_and_disabled_probe_are_not_probed(amx_box, env_for):
    env = env_for("cpu")
    run, calls = recording({})
    p = plan(amx_box, env, "--model", "/models/m", "--dtype", "bfloat16")
    assert prove_dtype(p, run, "x86_64", env).argv == p.argv
    env_off = {**env, "XCFORGE_DTYPE_PROBE": "0"}
    p = plan(amx_box, env_off, "--model", "/models/m")
    assert prove_dtype(p, run, "x86_64", env_off).argv == p.argv
    assert calls == []


def test_nothing_works_is_a_preflight_failure(amx_box, env_for):
    env = env_for("cpu")
    p = plan(amx_box, env, "--model", "/models/m")
    run, _ = recording(
        {"bfloat16": ProbeResult("bfloat16", False, "killed by SIGILL"), "float32": ProbeResult("float32", False, "x")}
    )
    with pytest.raises(PreflightFailed, match="no dtype works on this CPU"):
        prove_dtype(p, run, "x86_64", env)


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_real_subprocess_signals_exits_and_timeouts(tmp_path):
    """The runner reads a real child's fate: a signal by name, an exit with its last line, a hang."""
    env = dict(os.environ)
    assert subprocess_runner(_script(tmp_path, "ill", "kill -ILL $$"), env)("bfloat16").detail == "killed by SIGILL"
    failed = subprocess_runner(_script(tmp_path, "err", "echo 'RuntimeError: no bf16' >&2; exit 3"), env)("float16")
    assert not failed.ok and failed.detail == "exit 3: RuntimeError: no bf16"
    assert subprocess_runner(_script(tmp_path, "ok", "echo ok"), env)("float32").ok
    hung = subprocess_runner(_script(tmp_path, "hang", "sleep 5"), env, timeout=0.5)("float32")
    assert hung.detail == "timed out after 0.5 s"


def test_thread_binding_is_proven_and_dropped_when_the_kernel_refuses(amx_box, env_for, capsys):
    from xcforge_engine.serve import prove_binding

    env = env_for("cpu")
    amx_box.cgroup_v2(cpuset="2-5")
    p = plan(amx_box, env, "--model", "/models/m")
    bind = next(s for s in p.settings if s.name == "VLLM_CPU_OMP_THREADS_BIND")
    pinned = []
    assert prove_binding(p, lambda cpus: pinned.append(cpus) or "ok") == p
    assert pinned == [[2, 3, 4]] and bind.value == "2-4"  # 5 is left to the API server
    refused = prove_binding(p, lambda cpus: "OSError: [Errno 22] Invalid argument")
    assert refused.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" == refused.env_changes["VLLM_CPU_OMP_THREADS_BIND"]
    assert "Invalid argument" in capsys.readouterr().err


def test_real_affinity_probe_on_this_machine():
    import sys

    from xcforge_engine.dtype_probe import affinity_runner

    run = affinity_runner(sys.executable, dict(os.environ))
    assert run(sorted(os.sched_getaffinity(0))[:1]) == "ok"
    assert "Invalid argument" in run([4095])  # a CPU this machine does not have
