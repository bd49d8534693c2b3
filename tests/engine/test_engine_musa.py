"""The musa backend (Moore Threads GPUs) on fake containers: a /dev tree and driver files under
tmp_path, read by the real launcher (doctor, backend resolution, presets), no mocks of our code."""

from __future__ import annotations

import json
import os

import pytest
from engine_fakes import CPUINFO_X86_AVX2, ENGINE, NO_ENGINE, FakeMachine
from xcforge_engine.backends import BACKENDS
from xcforge_engine.cli import main


@pytest.fixture
def musa_machine(tmp_path):
    """A healthy container of the musa target: two GPUs, their DRM nodes, mthreads-gmi, the runtime."""

    def build(*, gpus: int = 2) -> FakeMachine:
        fake = FakeMachine(tmp_path / "root-musa")
        fake.root.mkdir()
        fake.write("/proc/cpuinfo", CPUINFO_X86_AVX2)
        fake.meminfo()
        fake.cgroup_v2()
        fake.shm()
        fake.devices(*(f"/dev/mtgpu.{i}" for i in range(gpus)))
        fake.devices(*(f"/dev/dri/card{i}" for i in range(gpus)), *(f"/dev/dri/renderD{128 + i}" for i in range(gpus)))
        fake.write("/usr/bin/mthreads-gmi")
        fake.write("/sys/module/mtgpu/version", "5.2.0-server\n")
        fake.write("/usr/local/musa/lib/libmusart.so.5.2.0")
        return fake

    return build


def musa_env(tmp_path, **extra: str) -> dict[str, str]:
    env = {
        "XCFORGE_TARGET": "musa",
        "XCFORGE_BACKEND": "musa",
        "XCFORGE_ENGINE_INSTALL": "full",
        "XCFORGE_STATE_DIR": str(tmp_path / "state"),
        "PATH": "/usr/bin:/bin",
        "MUSA_HOME": "/usr/local/musa",
    }
    env.update(extra)
    return env


def doctor(capsys, fake, env, software=ENGINE):
    code = main(["doctor", "--json"], env=env, host=fake.host, software=software)
    report = json.loads(capsys.readouterr().out)
    assert report["exit_code"] == code
    return code, report


def by_status(report, status):
    return sorted(c["id"] for c in report["checks"] if c["status"] == status)


def test_the_backend_is_discovered_from_its_module():
    assert "musa" in BACKENDS
    assert BACKENDS["musa"].visible_env == ("MUSA_VISIBLE_DEVICES", "MTHREADS_VISIBLE_DEVICES")


def test_healthy_musa_container_is_ok(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    code, report = doctor(capsys, fake, musa_env(tmp_path))
    assert code == 0, [c for c in report["checks"] if c["status"] != "ok"]
    assert report["verdict"] == "ok"
    assert report["backend"]["name"] == "musa"
    assert report["devices"] == ["/dev/mtgpu.0", "/dev/mtgpu.1"]
    assert report["versions"] == {"driver": "5.2.0", "musa": "5.2.0"}
    ids = {c["id"] for c in report["checks"]}
    assert {"musa.device.mtgpu", "musa.device.dri", "musa.tool.mthreads-gmi", "musa.runtime"} <= ids


def test_container_without_the_gpus_names_exactly_the_missing_devices(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    for node in ("/dev/mtgpu.0", "/dev/mtgpu.1", "/dev/dri"):
        fake.remove(node)
    code, report = doctor(capsys, fake, musa_env(tmp_path))
    assert code == 3
    assert by_status(report, "error") == ["musa.device.dri", "musa.device.mtgpu"]
    flags = {c["id"]: c["flags"] for c in report["checks"] if c["status"] == "error"}
    assert flags == {"musa.device.mtgpu": ["--device /dev/mtgpu.0"], "musa.device.dri": ["--device /dev/dri"]}
    assert report["devices"] == []


def test_mtgpu_without_dri_is_the_only_error(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    fake.remove("/dev/dri")
    code, report = doctor(capsys, fake, musa_env(tmp_path))
    assert code == 3
    assert by_status(report, "error") == ["musa.device.dri"]


def test_missing_mthreads_gmi_is_a_warning_not_an_error(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    fake.remove("/usr/bin/mthreads-gmi")
    code, report = doctor(capsys, fake, musa_env(tmp_path))
    assert by_status(report, "error") == []
    assert "musa.tool.mthreads-gmi" in by_status(report, "warning")
    (gmi,) = [c for c in report["checks"] if c["id"] == "musa.tool.mthreads-gmi"]
    assert gmi["flags"] == ["-v /usr/bin/mthreads-gmi:/usr/bin/mthreads-gmi:ro"]
    assert report["verdict"] == "warning" and code != 3


def test_runtime_missing_is_a_packaging_error_but_expected_in_a_stand_in(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    fake.remove("/usr/local/musa")
    _, report = doctor(capsys, fake, musa_env(tmp_path))
    assert "musa.runtime" in by_status(report, "error")
    assert report["versions"]["musa"] is None
    _, report = doctor(capsys, fake, musa_env(tmp_path, XCFORGE_ENGINE_INSTALL="skip"), NO_ENGINE)
    assert "musa.runtime" not in by_status(report, "error")
    assert "musa.runtime" in by_status(report, "warning")


def test_runtime_version_from_the_toolkit_file_and_no_driver_file(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    fake.write("/usr/local/musa/version.txt", "MUSA Toolkit 5.2.1\n")
    fake.remove("/sys/module/mtgpu/version")
    _, report = doctor(capsys, fake, musa_env(tmp_path))
    assert report["versions"] == {"driver": None, "musa": "5.2.1"}
    assert not [c for c in report["checks"] if c["id"].startswith("musa.compat")]  # no vendor table to judge by


def test_no_backend_declared_and_mtgpu_present_resolves_to_musa(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    env = musa_env(tmp_path)
    del env["XCFORGE_BACKEND"], env["XCFORGE_TARGET"]
    _, report = doctor(capsys, fake, env)
    assert report["backend"]["name"] == "musa"


def test_unreadable_render_node_asks_for_its_group(musa_machine, tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root opens any file; permissions cannot be tested as root")
    fake = musa_machine()
    fake.path("/dev/dri/renderD128").chmod(0)
    _, report = doctor(capsys, fake, musa_env(tmp_path))
    (dri,) = [c for c in report["checks"] if c["id"] == "musa.device.dri"]
    assert dri["status"] == "error" and dri["flags"][0].startswith("--group-add ")


def test_visible_devices_are_passed_through_and_the_gpus_named(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    _, report = doctor(capsys, fake, musa_env(tmp_path, MUSA_VISIBLE_DEVICES="1"))
    settings = {s["name"]: s for s in report["serve_defaults"]}
    assert settings["MUSA_VISIBLE_DEVICES"]["value"] == "1" and settings["MUSA_VISIBLE_DEVICES"]["kept"] is True
    left = settings["MTHREADS_VISIBLE_DEVICES"]
    assert left["value"] is None and "/dev/mtgpu.0, /dev/mtgpu.1" in left["why"]


def test_presets_size_musa_like_cuda_and_its_quantization_is_unverified(musa_machine, tmp_path, capsys):
    fake = musa_machine()
    code = main(["presets", "--json", "--backend", "musa"], env=musa_env(tmp_path), host=fake.host, software=ENGINE)
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["reference_devices"]["musa"] == "MTT S5000, 80 GB per GPU"
    presets = {p["name"]: p["backends"]["musa"] for p in data["presets"]}
    big = presets["qwen2.5-72b-instruct"]
    assert big["status"] == "ok" and big["tensor_parallel_size"] == 4
    assert big["args"][:2] == ["--dtype", "bfloat16"]
    awq = presets["qwen2.5-7b-instruct-awq"]
    assert awq["status"] == "unverified" and "--quantization" in awq["args"]
    assert presets["qwen2.5-0.5b-instruct-gguf-q4_k_m"]["status"] == "unsupported"  # GGUF: llama.cpp only
