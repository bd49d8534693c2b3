"""The llamacpp backend: the same launcher in front of llama.cpp's llama-server (feiteng image)."""

from __future__ import annotations

import json

import pytest
from engine_fakes import CPUINFO_PHYTIUM, GIB
from xcforge_engine.cli import main
from xcforge_engine.errors import UsageError
from xcforge_engine.image import load_image_facts
from xcforge_engine.serve import parse_serve_args, plan_serve
from xcforge_engine.software import Software

SERVER = Software(python="3.11.2", server="/usr/local/bin/llama-server")


def plan(fake, env, *args):
    return plan_serve(parse_serve_args(list(args), env), env, fake.host, load_image_facts(fake.host, env), SERVER)


@pytest.fixture
def phytium(machine):
    """A Phytium container limited to 3 CPUs and 1.5 GiB, with one GGUF model mounted."""
    fake = machine("llamacpp", cpuinfo=CPUINFO_PHYTIUM)
    fake.cgroup_v2(memory_max=str(int(1.5 * GIB)), cpu_max="300000 100000", cpuset="0-63")
    fake.write("/models/qwen/qwen2.5-0.5b-instruct-q4_k_m.gguf", "GGUF")
    return fake


def test_argv_is_llama_server_with_derived_and_translated_flags(phytium, env_for):
    p = plan(phytium, env_for("llamacpp"), "--model", "/models/qwen", "--served-model-name", "qwen",
             "--max-model-len", "1024", "--dtype", "float32", "--n-gpu-layers", "0")  # fmt: skip
    argv = p.argv
    assert argv[0] == "llama-server"
    assert argv[argv.index("--model") + 1] == "/models/qwen/qwen2.5-0.5b-instruct-q4_k_m.gguf"  # the only .gguf
    assert argv[argv.index("--alias") + 1] == "qwen" and "--served-model-name" not in argv
    assert argv[argv.index("--ctx-size") + 1] == "1024" and "--max-model-len" not in argv
    assert "--dtype" not in argv and "float32" not in argv  # vLLM-only: dropped, with a note
    assert any("--dtype float32 dropped" in n for n in p.notes)
    assert argv[argv.index("--n-gpu-layers") + 1] == "0"  # llama-server's own flags pass through
    assert argv[argv.index("--threads") + 1] == "3"  # the CPU quota, not the 64 CPUs of the cpuset
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8000"
    assert "--metrics" in argv and "--jinja" in argv
    assert argv.count("--ctx-size") == 1  # the operator's context replaced the derived one
    assert p.health_url.endswith(":8000/health")


def test_context_follows_memory(phytium, env_for):
    p = plan(phytium, env_for("llamacpp"), "--model", "/models/qwen")
    assert p.argv[p.argv.index("--ctx-size") + 1] == "2048"  # 1.5 GiB < 2 GiB
    setting = next(s for s in p.settings if s.name == "--ctx-size")
    assert "cgroup v2 memory.max" in setting.why


@pytest.mark.parametrize(
    ("thp", "expected"),
    [("always madvise [never]\n", None), ("always [madvise] never\n", "glibc.malloc.hugetlb=1"),
     ("[always] madvise never\n", "glibc.malloc.hugetlb=1"), (None, None)],
)  # fmt: skip
def test_malloc_goes_on_huge_pages_where_the_kernel_offers_them(phytium, env_for, thp, expected):
    if thp is not None:
        phytium.write("/sys/kernel/mm/transparent_hugepage/enabled", thp)
    p = plan(phytium, env_for("llamacpp"), "--model", "/models/qwen")
    setting = next(s for s in p.settings if s.name == "GLIBC_TUNABLES")
    assert setting.value == expected and p.env.get("GLIBC_TUNABLES") == expected
    assert p.env_changes.get("GLIBC_TUNABLES") == expected
    assert ("huge pages are 'madvise'" in setting.why or "huge pages are 'always'" in setting.why) == bool(expected)
    if thp is None:
        assert "not offered" in setting.log_line()


def test_the_operators_glibc_tunables_are_kept(phytium, env_for):
    phytium.write("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    env = env_for("llamacpp", GLIBC_TUNABLES="glibc.malloc.arena_max=2")
    p = plan(phytium, env, "--model", "/models/qwen")
    assert p.env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2" and "GLIBC_TUNABLES" not in p.env_changes
    assert "kept from environment" in next(s for s in p.settings if s.name == "GLIBC_TUNABLES").log_line()


def test_models_that_are_not_one_gguf_file_are_refused(phytium, env_for):
    phytium.write("/models/hf/config.json", "{}")
    with pytest.raises(UsageError, match=r"holds no \.gguf file: llama\.cpp serves GGUF"):
        plan(phytium, env_for("llamacpp"), "--model", "/models/hf")
    phytium.write("/models/qwen/qwen2.5-0.5b-instruct-q8_0.gguf", "GGUF")
    with pytest.raises(UsageError, match=r"holds 2 .gguf files .*: pass --model /models/qwen/"):
        plan(phytium, env_for("llamacpp"), "--model", "/models/qwen")
    with pytest.raises(UsageError, match="does not exist in the container"):
        plan(phytium, env_for("llamacpp"), "--model", "/models/none.gguf")


def test_gguf_preset_needs_a_mounted_file_and_safetensors_presets_are_refused(phytium, env_for, capsys):
    env = env_for("llamacpp")
    with pytest.raises(UsageError, match=r"q4_k_m\.gguf from Qwen/Qwen2\.5-0\.5B-Instruct-GGUF"):
        plan(phytium, env, "--preset", "qwen2.5-0.5b-instruct-gguf-q4_k_m")
    p = plan(phytium, env, "--preset", "qwen2.5-0.5b-instruct-gguf-q4_k_m", "--model", "/models/qwen")
    assert p.argv[p.argv.index("--ctx-size") + 1] == "8192"  # the family's context, translated
    code = main(["--dry-run", "--preset", "qwen2.5-0.5b-instruct", "--model", "/models/qwen"],
                env=env, host=phytium.host, software=SERVER)  # fmt: skip
    assert code != 0 and "llamacpp serves gguf weights" in capsys.readouterr().err


def test_doctor_on_phytium_reports_the_server_and_no_engine_error(phytium, env_for, capsys):
    env = env_for("llamacpp")
    main(["doctor", "--json"], env=env, host=phytium.host, software=SERVER)
    report = json.loads(capsys.readouterr().out)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["engine.installed"]["status"] == "ok" and "llama-server" in checks["engine.installed"]["message"]
    assert checks["llamacpp.server"]["status"] == "ok"
    assert {d["name"] for d in report["serve_defaults"]} >= {"--threads", "--ctx-size", "--host", "--port"}
