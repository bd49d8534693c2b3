"""The feiteng image's llama.cpp CPU variants (issue 32 items 1-2): one image, one CPU backend per CPU
generation, the best one loaded at start, proven per emulated CPU model and on this amd64 host.

Each case serves the tiny GGUF model and answers an OpenAI completion (the official `openai`
client). What loaded is read twice, independently: the launcher's start line and `doctor` (its
prediction from the CPU's features, cpu_variants.py) and llama-server's own report under the same
QEMU_CPU (`llama-server -lv 4 --list-devices` logs "load_backend: loaded CPU backend from
.../libggml-cpu-<name>.so"; at the default verbosity the server does not print it); they must
agree, and the variant must carry the features the CPU model is known for. Slow and
docker-marked: both platforms are compiled (a cold build is about 20 minutes on 2 cores; BuildKit
and ccache keep later ones short).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import openai
import pytest

from tests.builds.conftest import REGISTRY, SITE, cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker"
LOADED = re.compile(r"load_backend: loaded CPU backend from \S*/libggml-cpu-([a-z0-9_.]+)\.so")

# QEMU_CPU model → the llama.cpp feature words its variant must carry (and no others it lacks).
# Every model QEMU 7.2 (Debian 12) emulates.
ARM_CASES = {
    "cortex-a35": set(),  # ARMv8.0 (Phytium FT-2000+/64 class): the baseline NEON backend
    "cortex-a53": set(),
    "cortex-a72": set(),
    "cortex-a76": {"DOTPROD", "FP16_VECTOR_ARITHMETIC"},  # ARMv8.2
    "neoverse-n1": {"DOTPROD", "FP16_VECTOR_ARITHMETIC"},  # ARMv8.2 (Kunpeng 920 class)
    "a64fx": {"SVE", "FP16_VECTOR_ARITHMETIC"},  # ARMv8.2 + 512-bit SVE, no dotprod
    "max": {"DOTPROD", "FP16_VECTOR_ARITHMETIC", "SVE", "MATMUL_INT8", "SVE2"},  # everything QEMU has
}


@pytest.fixture(scope="module")
def feiteng(tmp_path_factory):
    from xcforge.config.matrix import load_matrix
    from xcforge.paths import REPO_ROOT

    dist = tmp_path_factory.mktemp("variants") / "dist"
    registry = f"{REGISTRY}/xcforge-test-variants"
    proc = cli("--target", "feiteng", "--site", str(SITE), "--registry", registry, "--push", "--dist", str(dist),
               timeout=5400)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = {r["target"]: r for r in json.loads((dist / "report.json").read_text())["results"]}["feiteng"]
    image = report["refs"][0]
    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    yield {"image": image, "matrix": matrix, "target": matrix.targets["feiteng"]}
    subprocess.run([DOCKER, "image", "rm", "-f", image], capture_output=True)


@pytest.fixture(scope="module")
def gguf_dir(feiteng, tmp_path_factory):
    from xcforge.config.site import load_site
    from xcforge.smoke import gguf
    from xcforge.smoke.checks import tiny_model

    tmp = tmp_path_factory.mktemp("gguf")
    with tiny_model(tmp / "tiny") as tiny:
        matrix, target = feiteng["matrix"], feiteng["target"]
        # The stand-in site the image was built with: the converter's base is its mirror too.
        site = load_site(SITE)
        return gguf.tiny_gguf(matrix, target, feiteng["image"], "linux/arm64", tiny, tmp / "out", site=site)


def serve_and_complete(image: str, platform: str, gguf_dir, port: int, extra: list[str]) -> tuple[str, str]:
    """docker run the image as an operator would, one completion; (the container's log, the text)."""
    from xcforge.smoke.checks import ServedContainer, wait_healthy

    name = f"xcforge-variants-{port}"
    subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
    subprocess.run(
        [DOCKER, "run", "-d", "--name", name, "--platform", platform, *extra, "-p", f"127.0.0.1:{port}:8000",
         "-v", f"{gguf_dir}:/models/tiny:ro", image, "--model", "/models/tiny", "--served-model-name", "tiny",
         "--max-model-len", "256"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        ok, detail = wait_healthy(ServedContainer(name, port, "tiny"), timeout=300)
        logs = subprocess.run([DOCKER, "logs", name], capture_output=True, text=True)
        assert ok, detail + (logs.stdout + logs.stderr)[-3000:]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", timeout=120)
        done = client.completions.create(model="tiny", prompt="Hello", max_tokens=4, temperature=0)
        assert done.usage.completion_tokens > 0 and done.choices[0].text is not None
        logs = subprocess.run([DOCKER, "logs", name], capture_output=True, text=True)
        return logs.stdout + logs.stderr, done.choices[0].text
    finally:
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)


def loaded_and_predicted(image: str, platform: str, extra: list[str], log: str) -> tuple[str, str]:
    """(what llama-server loads on this CPU, by its own log; what the served container's start line said)."""
    proc = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", platform, *extra, "--entrypoint", "llama-server", image, "-lv", "4",
         "--list-devices"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    loaded = LOADED.findall(proc.stdout + proc.stderr)
    assert len(loaded) == 1, (proc.stdout + proc.stderr)[-3000:]  # exactly one CPU backend
    start = next(line for line in log.splitlines() if "xcforge-engine" in line and "target feiteng" in line)
    predicted = re.search(r"llama\.cpp CPU backend (\S+) \(", start)
    assert predicted, start
    return loaded[0], predicted.group(1)


def features_of(target, arch: str, name: str) -> set[str]:
    (variant,) = [v for v in target.engine.llama_cpp.cpu_variants[arch] if v.name == name]
    return set(variant.features)


@pytest.mark.parametrize("cpu", sorted(ARM_CASES))
def test_each_emulated_arm_cpu_loads_its_variant_and_serves(feiteng, gguf_dir, cpu):
    port = 18200 + sorted(ARM_CASES).index(cpu)
    extra = ["-e", f"QEMU_CPU={cpu}"]
    log, _ = serve_and_complete(feiteng["image"], "linux/arm64", gguf_dir, port, extra)
    loaded, predicted = loaded_and_predicted(feiteng["image"], "linux/arm64", extra, log)
    assert loaded == predicted, (cpu, loaded, predicted)  # the launcher's start line names what the server loaded
    features = features_of(feiteng["target"], "arm64", loaded)
    assert features == ARM_CASES[cpu], (cpu, loaded, features)
    doctor = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", "linux/arm64", "-e", f"QEMU_CPU={cpu}", feiteng["image"], "doctor",
         "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    variant = json.loads(doctor.stdout)["host"]["cpu"]["isa"]["variant"]
    assert variant["loads"] == loaded and "CPU features seen" in variant["summary"], variant
    assert variant["carried"] == [v.name for v in feiteng["target"].engine.llama_cpp.cpu_variants["arm64"]]


def test_this_amd64_host_loads_the_best_x86_variant_its_cpu_reports(feiteng, gguf_dir):
    cpuinfo = Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M).group(1).split())
    log, _ = serve_and_complete(feiteng["image"], "linux/amd64", gguf_dir, 18210, [])
    loaded, predicted = loaded_and_predicted(feiteng["image"], "linux/amd64", [], log)
    assert loaded == predicted, (loaded, predicted)
    target = feiteng["target"]
    from xcforge_engine.cpu_variants import X86_FEATURES

    def runs_here(words: set[str]) -> bool:
        return all(name in flags for word in words for name in X86_FEATURES[word][1])

    carried = target.engine.llama_cpp.cpu_variants["amd64"]
    # llama.cpp's own rule (arch/x86/cpu-feats.cpp): the loadable variant with the highest feature weights.
    best_here = max(
        (v for v in carried if runs_here(set(v.features))), key=lambda v: sum(X86_FEATURES[w][0] for w in v.features)
    )
    assert loaded == best_here.name, (loaded, sorted(flags & {"avx512_vnni", "avx512_bf16", "amx_int8"}))
    if {"avx512_vnni", "avx512_bf16"} <= flags:  # this machine (issue 32): AVX-512 VNNI and BF16 kernels
        assert {"AVX512_VNNI", "AVX512_BF16"} <= features_of(target, "amd64", loaded)
    # The start line names it with the features that chose it; doctor agrees.
    doctor = subprocess.run([DOCKER, "run", "--rm", "--platform", "linux/amd64", feiteng["image"], "doctor", "--json"],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    variant = json.loads(doctor.stdout)["host"]["cpu"]["isa"]["variant"]
    assert variant["loads"] == loaded and "avx512_vnni" in variant["seen"], variant


def test_image_json_lists_the_variants_per_platform(feiteng):
    target = feiteng["target"]
    for platform, arch in (("linux/arm64", "arm64"), ("linux/amd64", "amd64")):
        out = subprocess.run(
            [DOCKER, "run", "--rm", "--platform", platform, "--entrypoint", "cat", feiteng["image"],
             "/etc/xcforge/image.json"],
            capture_output=True, text=True, timeout=300, check=True,
        ).stdout  # fmt: skip
        carried = json.loads(out)["cpu_variants"].split()
        assert [c.split(":")[0] for c in carried] == [v.name for v in target.engine.llama_cpp.cpu_variants[arch]]
