"""The feiteng image: llama.cpp's server (cross-compiled, one CPU backend per CPU generation), served
under QEMU as the Phytium generation it claims (cortex-a57: FT-2000+/64 class, its ARMv8.0 backend),
through the same launcher. Which backend loads on which CPU: test_feiteng_variants.py.

Slow and docker-marked: the cross-compile takes minutes on 2 cores (cached afterwards). The smoke
test makes a tiny GGUF with llama.cpp's own converter and the image's llama-quantize, serves it
under QEMU_CPU=cortex-a57 and talks to it with the official `openai` client.
"""

from __future__ import annotations

import json
import subprocess

import openai
import pytest
import requests

from tests.builds.conftest import cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker"


@pytest.fixture(scope="module")
def feiteng(tmp_path_factory):
    dist = tmp_path_factory.mktemp("feiteng") / "dist"
    proc = cli("--target", "feiteng", "--platform", "linux/arm64", "--smoke", "--dist", str(dist), timeout=3600)
    report = {r["target"]: r for r in json.loads((dist / "report.json").read_text())["results"]}["feiteng"]
    assert proc.returncode == 0, proc.stderr[-4000:] + json.dumps(report.get("smoke"), indent=1)[-3000:]
    return {"report": report, "image": report["refs"][0], "dist": dist}


def test_smoke_serves_a_gguf_model_on_armv8_0(feiteng):
    results = {c["check"]: c for c in feiteng["report"]["smoke"] if c["platform"] == "linux/arm64"}
    for check in ("/health", "/v1/models", "completion", "chat completion", "streamed chat", "/metrics",
                  "docker health", "graceful stop"):  # fmt: skip
        assert results[f"serve {check}"]["status"] == "pass", results
        assert "QEMU_CPU=cortex-a57" in results[f"serve {check}"]["detail"]
    assert results["command check-install"]["status"] == "pass"
    assert results["doctor without devices"]["status"] == "pass"


def test_report_names_the_sources_and_the_level(feiteng):
    report = feiteng["report"]
    assert report["engine_install"] == "full" and report["base_kind"] == "stand-in"
    (arm64,) = [v for v in report["verification"] if v["platform"] == "linux/arm64"]
    assert arm64["level"] == "served-cpu" and arm64["lock"] == "locked"  # hash-pinned sources


@pytest.mark.parametrize("cpu", ["cortex-a53", "cortex-a72"])
def test_other_armv8_0_cores_pass_the_gate_and_run_the_server(feiteng, cpu):
    """Not only the smoke's model: every ARMv8.0 core QEMU emulates runs the binary and the launcher."""
    image = feiteng["image"]
    run = [DOCKER, "run", "--rm", "--platform", "linux/arm64", "-e", f"QEMU_CPU={cpu}"]
    doctor = subprocess.run([*run, image, "doctor", "--json"], capture_output=True, text=True, timeout=300)
    report = json.loads(doctor.stdout)
    isa = report["host"]["cpu"]["isa"]
    assert isa["level"] == "armv8.0-a" and isa["missing"] == [], isa
    assert [c["status"] for c in report["checks"] if c["id"] == "cpu.isa"] == ["ok"]
    version = subprocess.run([*run, "--entrypoint", "llama-server", image, "--version"],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert version.returncode == 0 and "version:" in version.stdout + version.stderr


def test_launcher_takes_vllm_style_flags_and_explains_bad_models(feiteng, tmp_path):
    image = feiteng["image"]
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    tmp_path.chmod(0o755)
    proc = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", "linux/arm64", "-v", f"{tmp_path / 'hf'}:/models/hf:ro", image,
         "--model", "/models/hf", "--served-model-name", "x"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("[xcforge] error:")]
    assert len(errors) == 1 and "holds no .gguf file" in errors[0], proc.stderr[-1000:]
    assert "Traceback" not in proc.stderr


def test_openai_client_against_a_fresh_server(feiteng, tmp_path):
    """Started as an operator would (docker run -d, the GGUF mounted), stopped by docker stop."""
    from xcforge.config.matrix import load_matrix
    from xcforge.paths import REPO_ROOT
    from xcforge.smoke import gguf
    from xcforge.smoke.checks import tiny_model

    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    with tiny_model(tmp_path / "tiny") as tiny:
        gguf_dir = gguf.tiny_gguf(
            matrix, matrix.targets["feiteng"], feiteng["image"], "linux/arm64", tiny, tmp_path / "gguf"
        )
    name = "xcforge-feiteng-openai"
    subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
    subprocess.run(
        [DOCKER, "run", "-d", "--name", name, "--platform", "linux/arm64", "-e", "QEMU_CPU=cortex-a57",
         "-p", "127.0.0.1:18123:8000", "-v", f"{gguf_dir}:/models/tiny:ro", "--memory", "1g", "--cpus", "2",
         feiteng["image"], "--model", "/models/tiny", "--served-model-name", "tiny", "--max-model-len", "512"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        from xcforge.smoke.checks import ServedContainer, wait_healthy

        ok, detail = wait_healthy(ServedContainer(name, 18123, "tiny"), timeout=300)
        assert ok, detail
        client = openai.OpenAI(base_url="http://127.0.0.1:18123/v1", api_key="x", timeout=120)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        done = client.completions.create(model="tiny", prompt="Hello", max_tokens=8, temperature=0)
        assert done.usage.completion_tokens > 0
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}],
                                              max_tokens=8)  # fmt: skip
        assert chat.choices[0].message.content is not None
        # deploy/monitoring/ (the llama.cpp dashboard, feiteng.yaml's rules and HPA) reads only series this
        # server's /metrics serves: the launcher passes --metrics (without it llama-server answers 501).
        from tests.deploy.monitoring_refs import missing_series

        metrics = requests.get("http://127.0.0.1:18123/metrics", timeout=60)
        assert metrics.status_code == 200, metrics.text[:300]
        assert not missing_series("feiteng", metrics.text), missing_series("feiteng", metrics.text)
        logs = subprocess.run([DOCKER, "logs", name], capture_output=True, text=True).stderr
        assert "--threads 2" in logs or "--threads=2" in logs  # the CPU quota, logged with its reason
        assert "--ctx-size 512" in logs  # --max-model-len translated
        stop = subprocess.run([DOCKER, "stop", "--time", "20", name], capture_output=True, timeout=60)
        state = json.loads(subprocess.run([DOCKER, "inspect", "--format", "{{json .State}}", name],
                                          capture_output=True, text=True).stdout)  # fmt: skip
        assert stop.returncode == 0 and state["ExitCode"] in (0, 143), state
    finally:
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)
