"""The signature gates end to end with real SM2 signatures, on the signing tests' in-process registry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "signing"))
from tests.registry_process import RegistryProcess  # noqa: E402

signing_helpers = pytest.importorskip("signing_helpers", reason="tests/signing's helpers are not there")

from ocicore.registry import RegistryClient  # noqa: E402
from xcforge.cli import main  # noqa: E402

MATRIX = str(REPO_ROOT / "matrix.yaml")


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """An image in a loopback registry, SM2-signed with one key; a second key that did not sign it."""
    monkeypatch.setenv("XCFORGE_AUDIT_LOG", str(tmp_path / "audit.log.jsonl"))
    for name in ("XCFORGE_SM2_KEY", "XCFORGE_COSIGN_KEY", "XCFORGE_SM2_PASSWORD", "XCFORGE_COSIGN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    assert main(["keygen", "--sm2", "--no-password", "--out", str(tmp_path / "good")]) == 0
    assert main(["keygen", "--sm2", "--no-password", "--out", str(tmp_path / "other")]) == 0
    with RegistryProcess() as registry:
        image = signing_helpers.push_synthetic_image(RegistryClient(registry.address), "xcforge/vllm-cpu", index=True)
        assert main(["sign", image.ref, "--sm2-key", str(tmp_path / "good" / "sm2.key")]) == 0
        yield image.ref, tmp_path / "good" / "sm2.pub", tmp_path / "other" / "sm2.pub"


def _deploy(ref: str, out: Path, *extra: str) -> int:
    args = ["deploy", "--target", "cpu", "--model", "/models/qwen", "--image", ref, "--out", str(out), *extra]
    return main([*args, "--matrix", MATRIX])


def test_deploy_writes_manifests_only_for_a_valid_sm2_signature(signed, tmp_path, capsys):
    ref, good, other = signed
    capsys.readouterr()
    assert _deploy(ref, tmp_path / "bad", "--verify-sm2-key", str(other)) == 8
    err = capsys.readouterr().err
    assert "refusing to deploy" in err
    assert not (tmp_path / "bad").exists()

    assert _deploy(ref, tmp_path / "ok", "--verify-sm2-key", str(good)) == 0
    assert "VALID" in capsys.readouterr().err
    assert ref in (tmp_path / "ok" / "vllm-cpu.yaml").read_text()


def test_pre_deploy_gate_script_with_the_real_cli(signed, tmp_path, capsys):
    ref, good, other = signed
    assert _deploy(ref, tmp_path / "k8s") == 0
    manifest = tmp_path / "k8s" / "vllm-cpu.yaml"
    env = {**os.environ, "PYTHON": sys.executable}
    gate = [str(REPO_ROOT / "deploy" / "policy" / "verify-before-deploy.sh")]
    ok = subprocess.run(["bash", *gate, "--sm2-key", str(good), str(manifest)], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"VERIFIED {ref}" in ok.stdout
    bad = subprocess.run(
        ["bash", *gate, "--sm2-key", str(other), str(manifest)], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 1 and "REFUSED" in bad.stderr
