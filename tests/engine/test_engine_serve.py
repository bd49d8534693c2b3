"""serve's final command and environment: presets, derived CPU defaults, explicit values winning, exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from engine_fakes import CPUINFO_PHYTIUM, CPUINFO_X86_AMX, ENGINE, GIB
from xcforge_engine.backends.cpu import compile_toolchain
from xcforge_engine.cli import main
from xcforge_engine.errors import PreflightFailed, UsageError
from xcforge_engine.health import health_url
from xcforge_engine.host import Host
from xcforge_engine.image import load_image_facts
from xcforge_engine.modelinfo import LocalModel, weight_bytes
from xcforge_engine.serve import API_SERVER_MODULE, parse_serve_args, plan_serve, write_state

REPO = Path(__file__).resolve().parents[2]
BIG_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "hidden_size": 3584,
    "max_position_embeddings": 32768,
}


def plan(fake, env, *args, python="python3"):
    return plan_serve(
        parse_serve_args(list(args), env), env, fake.host, load_image_facts(fake.host, env), ENGINE, python=python
    )


def by_name(p):
    return {s.name: s for s in p.settings}


@pytest.fixture
def cpu_box(machine):
    """A Phytium container limited to 8 GiB and 4 of 16 CPUs, with a small local model."""
    fake = machine("cpu", cpuinfo=CPUINFO_PHYTIUM)
    fake.cgroup_v2(memory_max=str(8 * GIB), cpu_max="400000 100000", cpuset="0-15")
    fake.write(
        "/models/m/config.json", json.dumps({"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4})
    )
    return fake


def test_cpu_plan_argv_and_env(cpu_box, env_for):
    p = plan(cpu_box, env_for("cpu"), "--model", "/models/m", "--max-num-seqs", "8")
    assert p.argv == [
        "python3", "-m", API_SERVER_MODULE,
        "--dtype", "float32", "--enforce-eager",
        "--model", "/models/m", "--max-num-seqs", "8",
    ]  # fmt: skip
    assert p.env_changes == {
        "TORCHDYNAMO_DISABLE": "1",  # no compiler in the image: the sampler runs eagerly too
        "VLLM_CPU_KVCACHE_SPACE": "2",  # floor(0.4 × (8 − 0 − 1.5)) = 2
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "0-2",  # quota of 4 CPUs, one left to the API server
    }
    assert all(p.env[k] == v for k, v in p.env_changes.items())
    assert p.env["XCFORGE_BACKEND"] == "cpu"  # the rest of the environment is passed through
    settings = by_name(p)
    assert "memory limit 8.0 GiB from cgroup v2 memory.max" in settings["VLLM_CPU_KVCACHE_SPACE"].why
    assert "cut to 4 by the CPU quota of 4 CPUs from cgroup v2 cpu.max (400000 100000)" in (
        settings["VLLM_CPU_OMP_THREADS_BIND"].why
    )
    assert "ARMv8.6" in settings["--dtype"].why


def test_every_derived_value_is_logged_once_with_its_reason(cpu_box, env_for, capsys):
    code = main(["--dry-run", "--model", "/models/m"], env=env_for("cpu"), host=cpu_box.host, software=ENGINE)
    err = capsys.readouterr().err
    assert code == 0
    for name in ("VLLM_CPU_KVCACHE_SPACE=2 (why:", "VLLM_CPU_OMP_THREADS_BIND=0-2 (why:", "--dtype float32 (why:"):
        assert err.count(name) == 1, err


def test_explicit_environment_always_wins(cpu_box, env_for, capsys):
    env = env_for(
        "cpu",
        VLLM_CPU_KVCACHE_SPACE="7",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_CPU_NUM_OF_RESERVED_CPU="0",
        TORCHDYNAMO_DISABLE="0",
    )
    code = main(["--dry-run", "--model", "/models/m"], env=env, host=cpu_box.host, software=ENGINE)
    out, err = capsys.readouterr()
    assert code == 0
    result = json.loads(out)
    assert result["env"] == {}  # nothing changed
    for line in (
        "VLLM_CPU_KVCACHE_SPACE=7",
        "VLLM_CPU_OMP_THREADS_BIND=nobind",
        "VLLM_CPU_NUM_OF_RESERVED_CPU=0",
        "TORCHDYNAMO_DISABLE=0",
    ):
        assert f"[xcforge] {line} (kept from environment)" in err


def test_kv_cache_flag_leaves_the_variable_unset(cpu_box, env_for):
    p = plan(cpu_box, env_for("cpu"), "--model", "/models/m", "--kv-cache-memory-bytes", str(GIB))
    assert "VLLM_CPU_KVCACHE_SPACE" not in p.env
    assert by_name(p)["VLLM_CPU_KVCACHE_SPACE"].log_line() == (
        "VLLM_CPU_KVCACHE_SPACE unset (why: --kv-cache-memory-bytes sizes the KV cache)"
    )


def test_reserved_cpus_from_environment_shape_the_binding(cpu_box, env_for):
    cpu_box.cgroup_v2(memory_max=str(8 * GIB), cpu_max="max 100000", cpuset="0-7")
    p = plan(cpu_box, env_for("cpu", VLLM_CPU_NUM_OF_RESERVED_CPU="2"), "--model", "/models/m")
    assert p.env_changes["VLLM_CPU_OMP_THREADS_BIND"] == "0-5"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in p.env_changes


def test_cpu_tensor_parallel_splits_threads(cpu_box, env_for):
    cpu_box.cgroup_v1(limit=16 * GIB, quota=-1, cpuset="0-8")
    p = plan(cpu_box, env_for("cpu"), "--model", "/models/m", "-tp", "2")
    assert p.env_changes["VLLM_CPU_OMP_THREADS_BIND"] == "0-3|4-7"
    assert "split across 2 tensor-parallel ranks" in by_name(p)["VLLM_CPU_OMP_THREADS_BIND"].why


def test_cpu_tensor_parallel_larger_than_cpus_fails_preflight(cpu_box, env_for):
    cpu_box.cgroup_v2(memory_max=str(8 * GIB), cpu_max="100000 100000", cpuset="0-15")
    with pytest.raises(PreflightFailed) as failure:
        plan(cpu_box, env_for("cpu"), "--model", "/models/m", "--tensor-parallel-size", "2")
    assert "needs at least 2 CPUs" in failure.value.lines[0]


def test_bad_kv_cache_env_is_a_usage_error(cpu_box, env_for):
    with pytest.raises(UsageError):
        plan(cpu_box, env_for("cpu", VLLM_CPU_KVCACHE_SPACE="4GiB"), "--model", "/models/m")


@pytest.mark.parametrize(
    "flags", [["-O3"], ["--compilation-config", "{}"], ["--no-enforce-eager"], ["--enforce-eager"]]
)
def test_compilation_flags_replace_enforce_eager(cpu_box, env_for, flags):
    p = plan(cpu_box, env_for("cpu"), "--model", "/models/m", *flags)
    assert p.argv.count("--enforce-eager") == flags.count("--enforce-eager")
    assert p.argv[-len(flags) :] == flags


def test_with_a_compiler_and_python_headers_vllm_compiles_as_it_does_by_default(cpu_box, env_for, capsys):
    """vLLM's CPU default is torch.compile; eager only costs throughput (docs/benchmarks.md §8)."""
    cpu_box.write("/usr/bin/g++", "")
    cpu_box.write(sysconfig.get_path("include") + "/Python.h", "")
    p = plan(cpu_box, env_for("cpu", PATH="/usr/local/bin:/usr/bin"), "--model", "/models/m")
    assert "--enforce-eager" not in p.argv and "TORCHDYNAMO_DISABLE" not in p.env_changes
    assert by_name(p)["torch.compile"].log_line().startswith("torch.compile=/usr/bin/g++ (why: vLLM's default")
    # a compiler alone is not enough: inductor's kernels include Python.h
    cpu_box.path(sysconfig.get_path("include") + "/Python.h").unlink()
    p = plan(cpu_box, env_for("cpu", PATH="/usr/bin"), "--model", "/models/m")
    assert "--enforce-eager" in p.argv and p.env_changes["TORCHDYNAMO_DISABLE"] == "1"
    assert "no Python.h in" in by_name(p)["--enforce-eager"].why
    # CXX names the compiler torch uses
    cpu_box.write(sysconfig.get_path("include") + "/Python.h", "")
    p = plan(cpu_box, env_for("cpu", PATH="/usr/bin", CXX="/opt/gcc/bin/g++"), "--model", "/models/m")
    assert "no C++ compiler (/opt/gcc/bin/g++) in the image" in by_name(p)["--enforce-eager"].why


def test_operator_dtype_wins_over_cpu_features(machine, env_for):
    fake = machine("cpu", cpuinfo=CPUINFO_X86_AMX)
    fake.write("/models/m/config.json", "{}")
    assert "bfloat16" in plan(fake, env_for("cpu"), "--model", "/models/m").argv
    p = plan(fake, env_for("cpu"), "--model", "/models/m", "--dtype=float32")
    assert "--dtype" not in p.argv and p.argv[-1] == "--dtype=float32"


def test_kv_cache_counts_the_model_weights(cpu_box, env_for):
    weights = cpu_box.write("/models/m/model.safetensors")
    # A safetensors file of 2 GiB of BF16 weights, header only: served as float32 that is 4 GiB.
    header = json.dumps({"w": {"dtype": "BF16", "shape": [GIB], "data_offsets": [0, 2 * GIB]}}).encode()
    weights.write_bytes(len(header).to_bytes(8, "little") + header)
    p = plan(cpu_box, env_for("cpu"), "--model", "/models/m")
    kv = by_name(p)["VLLM_CPU_KVCACHE_SPACE"]
    assert kv.value == "1"  # floor(0.4 × (8 − 4 − 1.5)) = 1
    assert "weights 4.0 GiB as float32 from 1 safetensors file(s) in /models/m" in kv.why


def test_kv_cache_from_preset_size_when_the_model_is_remote(cpu_box, env_for):
    cpu_box.cgroup_v2(memory_max=str(16 * GIB), cpu_max="max 100000", cpuset="0-3")
    p = plan(cpu_box, env_for("cpu"), "--preset", "qwen2.5-1.5b-instruct")
    # 1.54e9 parameters × 4 bytes (float32 on Phytium) = 5.74 GiB; 0.4 × (16 − 5.74 − 1.5) = 3.5
    assert p.env_changes["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert "1.54B parameters" in by_name(p)["VLLM_CPU_KVCACHE_SPACE"].why


def test_too_little_memory_warns(cpu_box, env_for):
    cpu_box.cgroup_v2(memory_max=str(4 * GIB), cpu_max="max 100000", cpuset="0-3")
    p = plan(cpu_box, env_for("cpu"), "--preset", "qwen2.5-7b-instruct")
    kv = by_name(p)["VLLM_CPU_KVCACHE_SPACE"]
    assert kv.value == "1"
    assert "too small" in kv.warning


def test_max_model_len_shrinks_to_what_the_kv_cache_holds(cpu_box, env_for):
    cpu_box.write("/models/m/config.json", json.dumps(BIG_CONFIG))
    p = plan(cpu_box, env_for("cpu", VLLM_CPU_KVCACHE_SPACE="1"), "--model", "/models/m")
    # 2 × 28 layers × 4 KV heads × 128 head dim × 4 bytes = 114688 bytes/token → 9362 tokens in 1 GiB
    assert p.argv[p.argv.index("--max-model-len") + 1] == "9216"
    assert "holds 9362 tokens" in by_name(p)["--max-model-len"].why
    p = plan(cpu_box, env_for("cpu", VLLM_CPU_KVCACHE_SPACE="1"), "--model", "/models/m", "--max-model-len", "2048")
    assert p.argv.count("--max-model-len") == 1 and p.argv[-1] == "2048"


def test_preset_expands_and_operator_flags_override(machine, env_for):
    fake = machine("cuda")
    p = plan(fake, env_for("cuda"), "--preset", "qwen2.5-7b-instruct", "--max-model-len=4096", "--seed", "1")
    assert p.argv[3:] == [
        "--model", "Qwen/Qwen2.5-7B-Instruct",
        "--dtype", "bfloat16",
        "--max-model-len=4096", "--seed", "1",
    ]  # fmt: skip
    assert p.preset == "qwen2.5-7b-instruct"
    assert any("override preset qwen2.5-7b-instruct for: --max-model-len" in n for n in p.notes)


def test_preset_model_replaced_by_operator_model(machine, env_for):
    fake = machine("ascend")
    fake.write("/models/q/config.json", "{}")
    p = plan(fake, env_for("ascend"), "--preset=qwen2.5-32b-instruct", "/models/q", "-tp", "1")
    assert "Qwen/Qwen2.5-32B-Instruct" not in p.argv
    assert p.argv[3:] == ["--dtype", "bfloat16", "--max-model-len", "32768", "--model", "/models/q", "-tp", "1"]


def test_preset_from_environment_and_model_from_environment(machine, env_for):
    fake = machine("mlu")
    fake.write("/models/g/config.json", "{}")
    env = env_for("mlu", XCFORGE_PRESET="glm-4-9b-chat", XCFORGE_MODEL="/models/g")
    p = plan(fake, env)
    assert p.argv[3:7] == ["--model", "/models/g", "--trust-remote-code", "--dtype"]


def test_unsupported_preset_combination_is_refused(machine, env_for, capsys):
    fake = machine("ascend")
    code = main(["--preset", "qwen2.5-7b-instruct-gptq-int4"], env=env_for("ascend"), host=fake.host, software=ENGINE)
    err = capsys.readouterr().err
    assert code == 2
    assert "preset qwen2.5-7b-instruct-gptq-int4 cannot run on Huawei Ascend NPU" in err
    assert "not GPTQ" in err


def test_unverified_preset_warns(machine, env_for):
    p = plan(machine("mlu"), env_for("mlu"), "--preset", "qwen2.5-7b-instruct-awq")
    assert any("unverified" in w for w in p.warnings)
    assert p.argv[p.argv.index("--quantization") : p.argv.index("--quantization") + 2] == ["--quantization", "awq"]


def test_preset_without_hub_model_needs_model(machine, env_for):
    with pytest.raises(UsageError) as failure:
        plan(machine("ascend"), env_for("ascend"), "--preset", "qwen2.5-7b-instruct-w8a8")
    assert "msmodelslim" in failure.value.lines[0]


def test_unknown_preset_suggests(machine, env_for):
    with pytest.raises(UsageError) as failure:
        plan(machine("cuda"), env_for("cuda"), "--preset", "qwen2.5-7b-instrct")
    assert "Perhaps you meant qwen2.5-7b-instruct" in failure.value.lines[0]


def test_visible_devices_are_passed_through_and_logged(machine, env_for):
    p = plan(
        machine("ascend"), env_for("ascend", ASCEND_RT_VISIBLE_DEVICES="1"), "--model", "Qwen/Qwen2.5-0.5B-Instruct"
    )
    (setting,) = p.settings
    assert setting.log_line() == "ASCEND_RT_VISIBLE_DEVICES=1 (kept from environment)"
    assert p.env["ASCEND_RT_VISIBLE_DEVICES"] == "1" and p.env_changes == {}
    p = plan(machine("cuda"), env_for("cuda"), "--model", "x/y")
    assert p.settings[0].log_line() == (
        "CUDA_VISIBLE_DEVICES unset (why: the engine uses every GPU the container sees (/dev/nvidia0, /dev/nvidia1))"
    )


def test_cann_newer_than_driver_refuses_unless_skipped(machine, env_for, capsys):
    fake = machine("ascend")
    fake.write("/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", "version=8.3.RC1\n")
    code = main(["--dry-run", "--model", "x/y"], env=env_for("ascend"), host=fake.host, software=ENGINE)
    err = capsys.readouterr().err
    assert code == 3
    assert "CANN 8.3.RC1 in the image is newer than the host's Ascend driver 24.1.rc2" in err
    assert "XCFORGE_SKIP_COMPAT_CHECK=1" in err
    env = env_for("ascend", XCFORGE_SKIP_COMPAT_CHECK="1")
    assert main(["--dry-run", "--model", "x/y"], env=env, host=fake.host, software=ENGINE) == 0
    assert "starting anyway" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "extra_env", "url", "port_argv"),
    [
        ([], {}, "http://127.0.0.1:8000/health", False),
        ([], {"XCFORGE_PORT": "9000"}, "http://127.0.0.1:9000/health", True),
        (["--port", "8100"], {"XCFORGE_PORT": "9000"}, "http://127.0.0.1:8100/health", False),
        (["--host", "::", "--port=8200"], {}, "http://127.0.0.1:8200/health", False),
        (["--host", "10.1.2.3"], {}, "http://10.1.2.3:8000/health", False),
        (["--ssl-keyfile", "/k", "--ssl-certfile", "/c"], {}, "https://127.0.0.1:8000/health", False),
    ],
)
def test_port_and_health_url(machine, env_for, args, extra_env, url, port_argv):
    p = plan(machine("cuda"), env_for("cuda", **extra_env), "--model", "x/y", *args)
    assert p.health_url == url
    assert ("9000" in p.argv) is port_argv  # XCFORGE_PORT becomes --port only when the operator gave none


def test_serve_records_its_address_for_healthcheck(machine, env_for):
    env = env_for("cuda")
    p = plan(machine("cuda"), env, "--model", "x/y", "--port", "8123")
    assert health_url(env)[0] == "http://127.0.0.1:8000/health"  # nothing recorded yet
    write_state(p, env)
    assert health_url(env) == ("http://127.0.0.1:8123/health", str(Path(env["XCFORGE_STATE_DIR"]) / "serve.json"))


def test_two_different_models_are_refused(machine, env_for):
    with pytest.raises(UsageError):
        plan(machine("cuda"), env_for("cuda"), "a/b", "--model", "c/d")


def test_serve_execs_the_api_server_in_place(tmp_path):
    """The launcher replaces itself with `python -m vllm.entrypoints.openai.api_server` (same pid)."""
    engine = tmp_path / "site" / "vllm" / "entrypoints" / "openai"
    engine.mkdir(parents=True)
    for package in (engine.parents[1], engine.parent, engine):
        (package / "__init__.py").write_text("")
    (engine / "api_server.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'pid': os.getpid(), 'argv': sys.argv[1:],"
        " 'kv': os.environ.get('VLLM_CPU_KVCACHE_SPACE'), 'bind': os.environ.get('VLLM_CPU_OMP_THREADS_BIND')}))\n"
    )
    subprocess.run(
        [sys.executable, str(REPO / "tools" / "make_tiny_model.py"), str(tmp_path / "tiny")],
        check=True,
        capture_output=True,
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
        "XCFORGE_BACKEND": "cpu",
        "XCFORGE_ENGINE_INSTALL": "full",
        "XCFORGE_STATE_DIR": str(tmp_path / "state"),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # This fake engine has no torch to probe with (test_engine_dtype_probe.py covers the probe).
        "XCFORGE_DTYPE_PROBE": "0",
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "xcforge_engine", "--model", str(tmp_path / "tiny"), "--max-num-seqs", "4"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    served = json.loads(out)
    assert served["pid"] == child.pid  # exec, not a child process: signals reach the server
    assert served["argv"][-4:] == ["--model", str(tmp_path / "tiny"), "--max-num-seqs", "4"]
    # eager only where this machine lacks torch.compile's toolchain (g++ and Python.h)
    compiler, _ = compile_toolchain(Host.real(), env)
    assert ("--enforce-eager" in served["argv"]) == (compiler is None)
    assert served["kv"] == "1" and served["bind"]
    assert "[xcforge] exec: " in err
    assert json.loads((tmp_path / "state" / "serve.json").read_text())["pid"] == child.pid


def test_weight_estimate_from_real_safetensors(tmp_path):
    subprocess.run(
        [sys.executable, str(REPO / "tools" / "make_tiny_model.py"), str(tmp_path / "tiny")],
        check=True,
        capture_output=True,
    )
    model = LocalModel("/models/tiny", tmp_path / "tiny")
    stored, _ = weight_bytes(model, None, None, None)
    assert 0 < stored < (tmp_path / "tiny" / "model.safetensors").stat().st_size
    halved, why = weight_bytes(model, "bfloat16", None, None)
    assert halved == stored // 2 and "as bfloat16" in why
