"""Real engine installs on stand-in bases (docker + slow): the ascend engine side on arm64.

The stand-in replaces CANN's base, never our install steps: vLLM 0.23.0 is built from its sdist for
the empty device (VLLM_VERSION_OVERRIDE, no `+empty`), torch 2.10.0 and torch-npu 2.10.0.post4 come
from the committed lock under emulation, check-install proves them at build time, and the image's
entrypoint sources the (stand-in) CANN environment scripts. What needs CANN itself (vllm-ascend's
kernel build, `import torch_npu`) is skipped by the site and named in the report.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.builds.conftest import REPO, SITE, cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker"


def _run(ref: str, *argv: str, platform: str = "linux/arm64", timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [DOCKER, "run", "--rm", "--init", "--platform", platform, ref, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def ascend(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist-ascend")
    proc = cli("--target", "ascend", "--site", str(SITE), "--dist", str(dist), timeout=5400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((dist / "report.json").read_text())["results"][0]
    return {"report": report, "ref": report["refs"][0], "dist": dist, "log": proc.stderr}


def test_report_levels_are_honest(ascend):
    levels = {v["platform"]: v for v in ascend["report"]["verification"]}
    assert levels["linux/arm64"]["level"] == "engine-installed"
    # The plugin step ran with placeholders: named, with the vendor's reason, never a pass.
    assert any(
        s.startswith("plugin: stand-in placeholders for vllm-ascend 0.23.0.post1, triton-ascend 3.2.2")
        and "arctic-inference" in s
        for s in levels["linux/arm64"]["skipped"]
    ), levels["linux/arm64"]["skipped"]
    assert levels["linux/amd64"]["level"] == "rendered"
    assert any("needs https://download.pytorch.org/whl/cpu" in s for s in levels["linux/amd64"]["skipped"])
    markdown = (ascend["dist"] / "report.md").read_text()
    assert "arm64: engine-installed" in markdown and "stand-in" in markdown


def test_build_time_proof_is_in_the_image(ascend):
    proc = _run(ascend["ref"], "cat", "/etc/xcforge/verification.json")
    assert proc.returncode == 0, proc.stderr
    verification = json.loads(proc.stdout)
    assert verification["level"] == "engine-installed"
    checks = {c["name"]: c for c in verification["checks"]}
    assert checks["import"]["status"] == "ok" and "vllm 0.23.0 imports" in checks["import"]["detail"]
    # pip check judged the real closure against the placeholders' real requirements (vllm-ascend's
    # transformers==5.5.4, fastapi<0.124.0 ...), and the final set is the lock, package for package.
    assert checks["pip-check"]["status"] == "ok", checks["pip-check"]
    assert checks["freeze"]["status"] == "ok", checks["freeze"]
    assert checks["placeholders"]["status"] == "stand-in"
    for name in ("vllm-ascend 0.23.0.post1", "triton-ascend 3.2.2", "arctic-inference 0.1.1"):
        assert name in checks["placeholders"]["detail"]
    assert checks["plugin"]["status"] == "skipped"
    # the stand-in's Python is Debian's 3.11 (CANN's is 3.12.13): its own committed lock was used
    assert verification["lock"] == "arm64-py311.txt" and verification["python"].startswith("3.11")


def test_installed_set_is_exactly_the_lock(ascend):
    lock = (REPO / "images" / "ascend" / "locks" / "arm64-py311.txt").read_text()
    pinned = dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", lock, re.M))
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    proc = _run(ascend["ref"], "python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    installed = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in json.loads(proc.stdout).items()}
    wrong = {n: (v, installed.get(re.sub(r"[-_.]+", "-", n).lower())) for n, v in pinned.items()
             if installed.get(re.sub(r"[-_.]+", "-", n).lower()) != v}  # fmt: skip
    assert not wrong, wrong
    assert installed["vllm"] == "0.23.0"  # the release's own version, not 0.23.0+empty
    assert installed["torch"] == "2.10.0" and installed["torch-npu"] == "2.10.0.post4"
    assert "triton" not in installed  # vllm-ascend's Dockerfile removes it; the lock never had it


def test_entrypoint_sources_the_vendor_environment(ascend):
    proc = _run(ascend["ref"], "bash", "-c", 'echo "$XCFORGE_ENV_SOURCED|$XCFORGE_STANDIN_SOURCED"')
    assert proc.returncode == 0, proc.stderr
    sourced, standin = proc.stdout.strip().split("|")
    scripts = [
        "/usr/local/Ascend/ascend-toolkit/set_env.sh",
        "/usr/local/Ascend/cann-9.1.0/share/info/ascendnpu-ir/bin/set_env.sh",
        "/usr/local/Ascend/nnal/atb/set_env.sh",
    ]
    assert sourced.split(":") == scripts and standin.split(":") == scripts


def test_doctor_reports_the_real_versions(ascend):
    proc = _run(ascend["ref"], "doctor", "--json")
    report = json.loads(proc.stdout)
    assert report["software"]["torch"] == "2.10.0" and report["software"]["torch-npu"] == "2.10.0.post4"
    assert report["software"]["vllm"] == "0.23.0"


def test_an_arbitrary_uid_gets_a_home_and_a_name(ascend):
    """OpenShift-style `--user 12345`: no passwd entry, yet ~ is writable and getpass works (inductor)."""
    code = (
        "import getpass, pathlib; p = pathlib.Path('~/.cache/vllm').expanduser(); p.mkdir(parents=True); "
        "print(getpass.getuser(), p)"
    )
    proc = subprocess.run(
        [DOCKER, "run", "--rm", "--platform", "linux/arm64", "--user", "12345:0", ascend["ref"], "python", "-c", code],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["xcforge-12345", "/home/xcforge/.cache/vllm"]
