"""The packaged presets: coverage, per-backend expansion, support rules, and the presets command."""

from __future__ import annotations

import json

import pytest
from engine_fakes import CPUINFO_PHYTIUM, ENGINE
from xcforge_engine.backends import BACKENDS, preset_book
from xcforge_engine.cli import main

BOOK = preset_book()


def test_required_models_are_there():
    names = set(BOOK.presets)
    for size in ("0.5b", "1.5b", "7b", "14b", "32b", "72b"):
        for variant in ("", "-gptq-int4", "-awq"):
            assert f"qwen2.5-{size}-instruct{variant}" in names
    for family in ("llama3", "llama3.1"):
        for size in ("8b", "70b"):
            assert f"{family}-{size}-instruct" in names and f"{family}-{size}-instruct-awq" in names
    assert {"chatglm3-6b", "glm-4-9b-chat"} <= names


def test_every_preset_expands_on_every_backend():
    for preset in BOOK.presets.values():
        for backend in BACKENDS:
            for arch in ("x86_64", "aarch64"):
                expansion = BOOK.expand(preset, backend, arch)
                assert expansion.support.status in ("ok", "unverified", "unsupported")
                if expansion.support.status != "ok":
                    assert expansion.support.reason
                assert all(token.startswith("--") for token in expansion.argv() if token.startswith("-"))


@pytest.mark.parametrize(
    ("name", "backend", "arch", "args"),
    [
        ("qwen2.5-7b-instruct", "cuda", "x86_64", ["--dtype", "bfloat16", "--max-model-len", "32768"]),
        (
            "qwen2.5-72b-instruct",
            "ascend",
            "aarch64",
            ["--dtype", "bfloat16", "--max-model-len", "32768", "--tensor-parallel-size", "4"],
        ),
        ("qwen2.5-7b-instruct", "cpu", "aarch64", ["--max-model-len", "8192"]),
        (
            "qwen2.5-32b-instruct-gptq-int4",
            "cuda",
            "x86_64",
            ["--dtype", "float16", "--max-model-len", "32768", "--quantization", "gptq_marlin"],
        ),
        (
            "llama3.1-8b-instruct-awq",
            "cuda",
            "x86_64",
            ["--dtype", "float16", "--max-model-len", "32768", "--quantization", "awq_marlin"],
        ),
        ("chatglm3-6b", "ascend", "aarch64", ["--trust-remote-code", "--max-model-len", "8192", "--dtype", "float16"]),
        ("glm-4-9b-chat", "cpu", "x86_64", ["--trust-remote-code", "--max-model-len", "8192"]),
        (
            "qwen2.5-7b-instruct-w8a8",
            "ascend",
            "aarch64",
            ["--dtype", "bfloat16", "--max-model-len", "32768", "--quantization", "ascend"],
        ),
    ],
)
def test_known_good_arguments(name, backend, arch, args):
    expansion = BOOK.expand(BOOK.get(name), backend, arch)
    assert expansion.support.status != "unsupported"
    assert expansion.argv() == args


@pytest.mark.parametrize(
    ("name", "backend", "arch", "status"),
    [
        ("qwen2.5-7b-instruct-gptq-int4", "ascend", "aarch64", "unsupported"),
        ("qwen2.5-7b-instruct-awq", "ascend", "aarch64", "unsupported"),
        ("qwen2.5-7b-instruct-awq", "cpu", "aarch64", "unsupported"),
        ("qwen2.5-7b-instruct-awq", "cpu", "x86_64", "unverified"),
        ("qwen2.5-7b-instruct-gptq-int4", "mlu", "x86_64", "unverified"),
        ("qwen2.5-7b-instruct-w8a8", "cuda", "x86_64", "unsupported"),
        ("qwen2.5-7b-instruct-gptq-int4", "cuda", "x86_64", "ok"),
    ],
)
def test_support_rules(name, backend, arch, status):
    assert BOOK.expand(BOOK.get(name), backend, arch).support.status == status


def test_presets_json_command(capsys, tmp_path):
    code = main(["presets", "--json"], env={"XCFORGE_STATE_DIR": str(tmp_path)})
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(data["presets"]) == len(BOOK.presets)
    entry = next(p for p in data["presets"] if p["name"] == "qwen2.5-72b-instruct")
    assert entry["backends"]["cuda"] == {
        "status": "ok",
        "reason": "",
        "args": ["--dtype", "bfloat16", "--max-model-len", "32768", "--tensor-parallel-size", "4"],
        "tensor_parallel_size": 4,
    }
    assert set(data["reference_devices"]) == set(BACKENDS)


def test_presets_table_uses_the_host_arch(machine, env_for, capsys):
    fake = machine("cpu", cpuinfo=CPUINFO_PHYTIUM)
    code = main(["presets"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    out = capsys.readouterr().out
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "MODEL", "QUANT", *BACKENDS]
    assert list(BACKENDS)[:3] == ["cuda", "ascend", "mlu"] and list(BACKENDS)[-2:] == ["cpu", "llamacpp"]

    def cells(row: str) -> dict[str, str]:
        return dict(zip(BACKENDS, row.split()[-len(BACKENDS) :], strict=True))

    awq = cells(next(r for r in rows if r.startswith("qwen2.5-7b-instruct-awq ")))
    # AWQ on aarch64 CPU and llama.cpp: unsupported
    assert [awq[b] for b in ("cuda", "ascend", "mlu", "cpu", "llamacpp")] == ["tp1", "-", "tp1?", "-", "-"]
    gguf = cells(next(r for r in rows if r.startswith("qwen2.5-0.5b-instruct-gguf-q4_k_m ")))
    assert {b: v for b, v in gguf.items() if v != "-"} == {"llamacpp": "tp1"}  # GGUF: llama.cpp only


def test_gguf_presets_expand_for_llamacpp_only():
    q4 = BOOK.get("qwen2.5-0.5b-instruct-gguf-q4_k_m")
    expansion = BOOK.expand(q4, "llamacpp", "aarch64")
    assert expansion.support.status == "ok" and expansion.argv() == ["--max-model-len", "8192"]
    assert "INT4" in expansion.note
    assert BOOK.expand(q4, "cpu", "aarch64").support.status == "unsupported"
    plain = BOOK.get("qwen2.5-0.5b-instruct")
    refused = BOOK.expand(plain, "llamacpp", "aarch64").support
    assert refused.status == "unsupported" and "gguf" in refused.reason
    assert {p.quantization for p in BOOK.presets.values()} >= {"gguf-q4_k_m", "gguf-q8_0"}


def test_preset_detail(capsys, tmp_path):
    code = main(["presets", "chatglm3-6b", "--backend", "cuda"], env={"XCFORGE_STATE_DIR": str(tmp_path)})
    out = capsys.readouterr().out
    assert code == 0
    assert "chatglm3-6b: ChatGLM3 (remote code)" in out
    assert "cuda    ok           --trust-remote-code --max-model-len 8192 --dtype float16" in out


def test_presets_unknown_name(capsys, tmp_path):
    assert main(["presets", "llama-3-8b"], env={"XCFORGE_STATE_DIR": str(tmp_path)}) == 2
    assert "unknown preset 'llama-3-8b'" in capsys.readouterr().err
