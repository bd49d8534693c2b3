"""The cuda engine installed for real on its stand-in (docker + heavy: a multi-GB wheel set).

PyPI's vLLM 0.33.0 CUDA wheel with torch 2.14.0 and the CUDA 13 runtime wheels, from the committed
lock, on the stand-in for nvidia/cuda:13.0.3-base-ubuntu24.04 (NVIDIA's apt packages are skipped
there, named in the report). No GPU is needed to prove the install: vLLM imports, pip check is
clean, and doctor reports the CUDA torch was built for, which is what the host driver must support.
Run on demand: `pytest --docker --heavy tests/builds/test_cuda_engine.py` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.builds.conftest import SITE, cli

pytestmark = [pytest.mark.docker, pytest.mark.heavy]


@pytest.fixture(scope="module")
def cuda(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist-cuda")
    proc = cli("--target", "cuda", "--site", str(SITE), "--dist", str(dist), timeout=5400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((dist / "report.json").read_text())["results"][0]


def _run(ref: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/bin/docker", "run", "--rm", ref, *argv], capture_output=True, text=True, timeout=900)


def test_cuda_engine_installed_and_proven(cuda):
    (level,) = cuda["verification"]
    assert level["level"] == "engine-installed"  # no plugin: the top build-time rung, never plugin-installed
    assert any(s.startswith("vendor apt packages: skipped") for s in level["skipped"])
    proof = json.loads(_run(cuda["refs"][0], "cat", "/etc/xcforge/verification.json").stdout)
    checks = {c["name"]: c for c in proof["checks"]}
    assert checks["import"]["status"] == "ok" and "vllm 0.33.0 imports" in checks["import"]["detail"]
    assert checks["pip-check"]["status"] == "ok"


def test_doctor_reports_torch_cuda_not_the_base_cuda(cuda):
    report = json.loads(_run(cuda["refs"][0], "doctor", "--json").stdout)
    assert report["software"]["torch"] == "2.14.0" and report["software"]["torch_cuda"] == "13.0"
    assert report["versions"]["cuda_runtime"] == "13.0"
