"""doctor --json on fake hosts of each backend: the schema, exact missing devices, version verdicts."""

from __future__ import annotations

import json

import pytest
from engine_fakes import ENGINE, GIB, NO_ENGINE, Software
from xcforge_engine.cli import main
from xcforge_engine.compat import judge_cann, judge_cuda, version_tuple

TOP_LEVEL = {
    "schema_version",
    "xcforge_engine",
    "verdict",
    "exit_code",
    "image",
    "software",
    "backend",
    "host",
    "devices",
    "versions",
    "serve_defaults",
    "checks",
}


def doctor(capsys, fake, env, software=ENGINE, *args):
    code = main(["doctor", "--json", *args], env=env, host=fake.host, software=software)
    report = json.loads(capsys.readouterr().out)
    assert report["exit_code"] == code
    return code, report


def errors(report):
    return sorted(c["id"] for c in report["checks"] if c["status"] == "error")


@pytest.mark.parametrize("backend", ["cuda", "ascend", "mlu", "cpu"])
def test_healthy_host_reports_ok_and_a_stable_schema(backend, machine, env_for, capsys):
    fake = machine(backend)
    fake.image_json(target=backend, backend=backend, engine_version="0.11.0", base_image="b", base_digest="sha256:x")
    code, report = doctor(capsys, fake, env_for(backend))
    assert code == 0
    assert set(report) == TOP_LEVEL
    assert report["schema_version"] == 1
    assert report["verdict"] == "ok", [c for c in report["checks"] if c["status"] != "ok"]
    assert report["image"]["base_digest"] == "sha256:x"
    assert report["image"]["sources"]["engine_version"] == "/etc/xcforge/image.json"
    assert report["backend"]["name"] == backend
    assert set(report["host"]) == {
        "arch", "cpu", "cgroup_version", "memory", "cpus", "shm_bytes", "shm_source", "numa_nodes",
    }  # fmt: skip
    assert report["host"]["shm_bytes"] == GIB
    for check in report["checks"]:
        assert set(check) == {"id", "status", "message", "remedy", "flags"}


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (
            "cuda",
            ["cuda.device.nvidia", "cuda.device.nvidia-uvm", "cuda.device.nvidiactl", "cuda.driver.libcuda"],
        ),
        (
            "ascend",
            [
                "ascend.device.davinci",
                "ascend.device.davinci_manager",
                "ascend.device.devmm_svm",
                "ascend.device.hisi_hdc",
                "ascend.driver.lib64",
                "ascend.driver.version",
            ],
        ),
        # /dev/cambricon_ipcmN is optional (multi-process serving only): a warning, not an error.
        ("mlu", ["mlu.device.cambricon_ctl", "mlu.device.cambricon_dev"]),
    ],
)
def test_host_without_the_device_reports_exactly_the_missing_devices(backend, expected, machine, env_for, capsys):
    """A container started without the vendor's devices and driver mounts, in a stand-in image."""
    fake = machine("cpu")  # a plain container: nothing of any vendor
    code, report = doctor(capsys, fake, env_for(backend, XCFORGE_ENGINE_INSTALL="skip"), NO_ENGINE)
    assert code == 3
    assert report["verdict"] == "error"
    assert errors(report) == expected
    assert report["devices"] == []
    flags = {f for c in report["checks"] if c["status"] == "error" for f in c["flags"]}
    assert flags, "every missing device names the docker run flag that provides it"


def test_cpu_host_has_no_devices_to_miss(machine, env_for, capsys):
    code, report = doctor(capsys, machine("cpu"), env_for("cpu", XCFORGE_ENGINE_INSTALL="skip"), NO_ENGINE)
    assert code == 0
    assert errors(report) == []
    assert report["verdict"] == "warning"  # the stand-in build is said, not an error
    (engine,) = [c for c in report["checks"] if c["id"] == "engine.installed"]
    assert "stand-in build" in engine["message"]


def test_one_missing_ascend_node_is_the_only_error(machine, env_for, capsys):
    fake = machine("ascend")
    fake.remove("/dev/devmm_svm")
    code, report = doctor(capsys, fake, env_for("ascend"))
    assert code == 3
    assert errors(report) == ["ascend.device.devmm_svm"]
    (check,) = [c for c in report["checks"] if c["status"] == "error"]
    assert check["flags"] == ["--device /dev/devmm_svm"]


def test_cann_driver_mismatch_is_flagged_with_both_ways_out(machine, env_for, capsys):
    fake = machine("ascend")
    fake.write("/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", "version=8.3.RC1\n")
    code, report = doctor(capsys, fake, env_for("ascend"))
    assert code == 3
    assert report["versions"] == {"driver": "24.1.rc2", "cann": "8.3.RC1"}
    assert errors(report) == ["ascend.compat.driver"]
    (check,) = [c for c in report["checks"] if c["id"] == "ascend.compat.driver"]
    assert "CANN 8.3.RC1 in the image is newer than the host's Ascend driver 24.1.rc2" in check["message"]
    assert "upgrade the host driver to ≥ 25.3 or use an image built for CANN ≤ 8.0" in check["remedy"]


def test_cann_version_from_version_cfg(machine, env_for, capsys):
    fake = machine("ascend")
    fake.remove("/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux")
    fake.write("/usr/local/Ascend/ascend-toolkit/latest/version.cfg", "runtime_running_version=[7.5.0.1.129:8.0.RC3]\n")
    _, report = doctor(capsys, fake, env_for("ascend"))
    assert report["versions"]["cann"] == "8.0.RC3"
    assert [c["status"] for c in report["checks"] if c["id"] == "ascend.compat.driver"] == ["ok"]


def test_cuda_driver_versus_runtime(machine, env_for, capsys):
    fake = machine("cuda")
    software = Software(python="3.11", vllm="0.11.0", vllm_importable=True, torch="2.9.0+cu130")
    code, report = doctor(capsys, fake, env_for("cuda"), software)
    assert report["versions"] == {"driver": "570.86.15", "cuda_runtime": "13.0"}
    assert code == 3 and errors(report) == ["cuda.compat.driver"]
    # The base's CUDA_VERSION does not hide the CUDA torch was built for (PyPI's torch brings its own).
    code, report = doctor(capsys, fake, env_for("cuda", CUDA_VERSION="12.8.1"), software)
    assert code == 3 and report["versions"]["cuda_runtime"] == "13.0"
    built_for_12_8 = Software(python="3.11", vllm="0.11.0", vllm_importable=True, torch="2.9.0", torch_cuda="12.8")
    code, report = doctor(capsys, fake, env_for("cuda", CUDA_VERSION="13.0.3"), built_for_12_8)
    assert code == 0 and report["versions"]["cuda_runtime"] == "12.8"
    assert [c["status"] for c in report["checks"] if c["id"] == "cuda.compat.driver"] == ["ok"]


def test_mlu_versions(machine, env_for, capsys):
    fake = machine("mlu")
    fake.write(
        "/proc/driver/cambricon/mlus/0000:01:00.0/information", "Device name: MLU370-X8\nDriver Version: v5.10.22\n"
    )
    _, report = doctor(capsys, fake, env_for("mlu"))
    assert report["versions"] == {"driver": "5.10.22", "neuware": "3.10.2"}
    assert report["devices"] == ["/dev/cambricon_dev0", "/dev/cambricon_dev1"]


def test_cpu_report_shows_limits_features_and_serve_defaults(machine, env_for, capsys):
    fake = machine("cpu")
    fake.cgroup_v1(limit=8 * GIB, quota=200000, period=100000, cpuset="0-3,8")
    fake.shm("65536k")
    code, report = doctor(capsys, fake, env_for("cpu"))
    assert code == 0 and report["verdict"] == "warning"
    host = report["host"]
    assert host["cgroup_version"] == 1
    assert host["memory"]["limit_bytes"] == 8 * GIB
    assert host["cpus"] == {
        "allowed": "0-3,8",
        "count": 5,
        "source": "cgroup v1 cpuset.cpus (0-3,8)",
        "quota": 2.0,
        "quota_source": "cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us (200000/100000)",
    }
    assert host["cpu"]["features"] == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx": False}
    defaults = {s["name"]: s["value"] for s in report["serve_defaults"]}
    assert defaults["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert defaults["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert [c["flags"] for c in report["checks"] if c["id"] == "shm.size"] == [["--shm-size=4g"]]


def test_full_image_without_vllm_is_an_error(machine, env_for, capsys):
    code, report = doctor(capsys, machine("cpu"), env_for("cpu"), NO_ENGINE)
    assert code == 3 and errors(report) == ["engine.installed"]


def test_model_is_checked_when_named(machine, env_for, capsys):
    fake = machine("cpu")
    code, report = doctor(capsys, fake, env_for("cpu"), ENGINE, "--model", "/models/absent")
    assert code == 3 and errors(report) == ["model.path"]


def test_text_report(machine, env_for, capsys):
    fake = machine("ascend")
    fake.remove("/dev/hisi_hdc")
    code = main(["doctor"], env=env_for("ascend"), host=fake.host, software=ENGINE)
    out = capsys.readouterr().out
    assert code == 3
    assert "error    ascend.device.hisi_hdc" in out and "→ --device /dev/hisi_hdc" in out
    assert out.rstrip().endswith("verdict   error (exit 3)")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("24.1.rc2", (24, 1)), ("8.0.RC3", (8, 0)), ("550.54.15", (550, 54, 15)), ("25.0.rc1.1", (25, 0)), ("x", ())],
)
def test_version_tuple(text, parsed):
    assert version_tuple(text) == parsed


@pytest.mark.parametrize(
    ("cann", "driver", "status"),
    [
        ("8.0.RC3", "24.1.rc2", "ok"),
        ("8.0.0", "23.0.3", "error"),
        ("8.3.RC1", "24.1.rc2", "error"),
        ("8.5.0", "25.2.0", "warning"),
        ("8.5.0", "25.5.0", "ok"),
        ("9.1.0", "25.5.1", "ok"),  # newer than the table: judged by its last row
        ("6.3.RC1", "23.0.0", "warning"),  # older than the table: no verdict
    ],
)
def test_cann_table(cann, driver, status):
    assert judge_cann(cann, driver).status == status


@pytest.mark.parametrize(
    ("cuda", "driver", "status"),
    [
        ("12.8", "570.86.15", "ok"),
        ("12.8", "535.104.05", "warning"),
        ("12.4", "470.82.01", "error"),
        ("13.0", "575.51.03", "error"),
    ],
)
def test_cuda_table(cuda, driver, status):
    assert judge_cuda(cuda, driver).status == status


def test_mlu_without_ipcm_nodes_serves_with_a_warning(machine, env_for, capsys):
    """Cambricon's device plugin treats /dev/cambricon_ipcmN as optional: single-process serving runs."""
    fake = machine("mlu")
    for path in ("/dev/cambricon_ipcm0", "/dev/cambricon_ipcm1"):
        fake.remove(path)
    _, report = doctor(capsys, fake, env_for("mlu"))
    (ipcm,) = [c for c in report["checks"] if c["id"] == "mlu.device.cambricon_ipcm"]
    assert ipcm["status"] == "warning" and "--device /dev/cambricon_ipcm0" in ipcm["flags"]
    assert "mlu.device.cambricon_ipcm" not in [c["id"] for c in report["checks"] if c["status"] == "error"]


def test_llamacpp_shm_check_is_llama_servers_not_vllms(machine, env_for, capsys):
    """llama-server is one process: Docker's 64 MiB /dev/shm is no problem for it (issue 22, item 5)."""
    fake = machine("llamacpp")
    fake.shm("65536k")
    fake.write("/models/q.gguf", "GGUF")
    env = env_for("llamacpp")
    server = Software(python="3.11.2", server="/usr/local/bin/llama-server")
    _, report = doctor(capsys, fake, env, server)
    (shm,) = [c for c in report["checks"] if c["id"] == "shm.size"]
    assert shm["status"] == "ok" and shm["flags"] == [] and shm["message"].startswith("/dev/shm is 64 MiB")
    assert "llama-server does not use /dev/shm" in shm["message"] and "memory limit" in shm["message"]
    assert not any("vLLM" in c["message"] or "--shm-size" in c["flags"] for c in report["checks"])
    assert main(["--dry-run", "--model", "/models/q.gguf"], env=env, host=fake.host, software=server) == 0
    assert "/dev/shm" not in capsys.readouterr().err  # serve's preflight: no shm warning either
    # vLLM's backends keep theirs (test_cpu_report_shows_limits_features_and_serve_defaults).
    cpu = machine("cpu")
    cpu.shm("65536k")
    _, report = doctor(capsys, cpu, env_for("cpu"))
    (shm,) = [c for c in report["checks"] if c["id"] == "shm.size"]
    assert shm["status"] == "warning" and "vLLM's worker processes" in shm["message"]
