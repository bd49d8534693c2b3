"""serve's preflight on fake containers: what is missing is named, with the docker run flag that fixes it."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from engine_fakes import ENGINE, FakeMachine
from xcforge_engine.cli import main
from xcforge_engine.host import Host

MODEL = "/models/m"


def serve(capsys, fake, env, *args):
    fake.write(f"{MODEL}/config.json", "{}")
    code = main(["serve", "--dry-run", "--model", MODEL, *args], env=env, host=fake.host, software=ENGINE)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("backend", ["cuda", "ascend", "mlu", "cpu"])
def test_healthy_container_passes(backend, machine, env_for, capsys):
    code, out, err = serve(capsys, machine(backend), env_for(backend))
    assert code == 0, err
    assert json.loads(out)["backend"] == backend
    assert "error" not in err


MISSING = [
    ("ascend", "/dev/davinci_manager", "--device /dev/davinci_manager"),
    ("ascend", "/dev/devmm_svm", "--device /dev/devmm_svm"),
    ("ascend", "/dev/hisi_hdc", "--device /dev/hisi_hdc"),
    ("ascend", "/dev/davinci0 /dev/davinci1", "--device /dev/davinci0"),
    (
        "ascend",
        "/usr/local/Ascend/driver/lib64",
        "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
    ),
    (
        "ascend",
        "/usr/local/Ascend/driver/version.info",
        "-v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    ),
    ("mlu", "/dev/cambricon_ctl", "--device /dev/cambricon_ctl"),
    ("mlu", "/dev/cambricon_dev0 /dev/cambricon_dev1", "--device /dev/cambricon_dev0"),
    ("cuda", "/dev/nvidiactl", "--gpus all"),
    ("cuda", "/dev/nvidia0 /dev/nvidia1", "--gpus all"),
    ("cuda", "/dev/nvidia-uvm", "--gpus all"),
    ("cuda", "/usr/local/nvidia/lib64/libcuda.so.1", "--gpus all"),
]


@pytest.mark.parametrize(("backend", "remove", "flag"), MISSING)
def test_missing_device_or_mount_names_it_and_the_flag(backend, remove, flag, machine, env_for, capsys):
    fake = machine(backend)
    for path in remove.split():
        fake.remove(path)
    code, out, err = serve(capsys, fake, env_for(backend))
    assert code == 3
    assert out == ""
    errors = [line for line in err.splitlines() if line.startswith("[xcforge] error:")]
    assert len(errors) == 1, err  # one message, not a cascade
    shown = "/dev/davinci<N>" if "davinci0" in remove else remove.split()[0]
    numbered = {"/dev/cambricon_dev0", "/dev/cambricon_ipcm0", "/dev/nvidia0"}
    shown = shown[:-1] + "<N>" if shown in numbered else shown
    if shown.endswith("libcuda.so.1"):
        shown = "libcuda.so.1"
    assert shown in errors[0]
    assert f"Add to docker run: {flag}" in errors[0]
    assert "Traceback" not in err


def test_all_missing_ascend_pieces_in_one_line_with_every_flag(machine, env_for, capsys):
    fake = machine("ascend")
    for path in ("/dev/hisi_hdc", "/dev/devmm_svm", "/usr/local/Ascend/driver"):
        fake.remove(path)
    code, _, err = serve(capsys, fake, env_for("ascend"))
    assert code == 3
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "Huawei Ascend NPU not usable in this container: missing /dev/devmm_svm, /dev/hisi_hdc" in line
    for flag in (
        "--device /dev/devmm_svm",
        "--device /dev/hisi_hdc",
        "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/",
        "-v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info",
    ):
        assert flag in line


def test_optional_ascend_mounts_only_warn(machine, env_for, capsys):
    fake = machine("ascend")
    fake.remove("/usr/local/bin/npu-smi")
    code, _, err = serve(capsys, fake, env_for("ascend"))
    assert code == 0
    assert "warning: /usr/local/bin/npu-smi is missing: -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi" in err


def test_mlu_without_cnmon_warns_with_the_mount(machine, env_for, capsys):
    fake = machine("mlu")
    fake.remove("/usr/bin/cnmon")
    code, _, err = serve(capsys, fake, env_for("mlu"))
    assert code == 0
    assert "-v /usr/bin/cnmon:/usr/bin/cnmon" in err


def test_nvidia_visible_devices_none_is_explained(machine, env_for, capsys):
    fake = machine("cuda")
    for path in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm"):
        fake.remove(path)
    code, _, err = serve(capsys, fake, env_for("cuda", NVIDIA_VISIBLE_DEVICES="none"))
    assert code == 3
    assert "NVIDIA_VISIBLE_DEVICES=none hides every GPU" in err


def test_libcuda_found_through_ld_library_path(machine, env_for, capsys):
    fake = machine("cuda")
    fake.remove("/usr/local/nvidia/lib64/libcuda.so.1")
    fake.write("/opt/driver/libcuda.so.1")
    code, _, _ = serve(capsys, fake, env_for("cuda", LD_LIBRARY_PATH="/opt/driver"))
    assert code == 0


def test_toolkit_missing_from_a_full_image_is_a_packaging_error(machine, env_for, capsys):
    fake = machine("ascend")
    fake.remove("/usr/local/Ascend/ascend-toolkit")
    code, _, err = serve(capsys, fake, env_for("ascend"))
    assert code == 3
    assert "CANN toolkit is missing from the image" in err and "rebuild the image" in err


def test_cpu_small_shm_warns_and_suggests_shm_size(machine, env_for, capsys):
    fake = machine("cpu")
    fake.shm("65536k")
    code, _, err = serve(capsys, fake, env_for("cpu"))
    assert code == 0
    assert "warning: /dev/shm is 64 MiB" in err and "--shm-size=4g" in err


def test_cpu_multi_numa_without_sys_nice_warns(machine, env_for, capsys):
    fake = machine("cpu")
    fake.mkdir("/sys/devices/system/node/node0")
    fake.mkdir("/sys/devices/system/node/node1")
    fake.write("/proc/self/status", "Name:\tpython\nCapEff:\t00000000a80425fb\nCpus_allowed_list:\t0-7\n")
    code, _, err = serve(capsys, fake, env_for("cpu"))
    assert code == 0
    assert "2 NUMA nodes but no CAP_SYS_NICE" in err and "--cap-add SYS_NICE" in err


def test_missing_local_model_names_the_volume_flag(machine, env_for, capsys):
    fake = machine("cpu")
    code = main(["--dry-run", "--model", "/models/qwen"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    err = capsys.readouterr().err
    assert code == 3
    assert "model path /models/qwen does not exist in the container" in err
    assert "-v /path/on/host:/models/qwen:ro" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file; permissions cannot be tested as root")
def test_unreadable_model_is_refused(machine, env_for, capsys):
    fake = machine("cpu")
    fake.write("/models/secret/config.json", "{}")
    fake.path("/models/secret").chmod(0o000)
    try:
        code = main(["--dry-run", "--model", "/models/secret"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    finally:
        fake.path("/models/secret").chmod(0o755)
    assert code == 3
    assert "is not readable by uid" in capsys.readouterr().err


NON_ROOT_CHECK = """
import json, os, sys
from pathlib import Path
from xcforge_engine.backends import BACKENDS
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.modelinfo import model_problems
host = Host(Path(sys.argv[1]), strict_devices=False)
checks = BACKENDS["ascend"].checks(host, {}, ImageFacts(engine_install="full"))
closed = [c.__dict__ for c in checks if c.id == "ascend.device.davinci"]
print(json.dumps({"uid": os.geteuid(), "davinci": closed, "model": model_problems(host, "/models/private")[0]}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root to switch uid")
def test_non_root_user_is_told_which_group_opens_the_device():
    """Vendor nodes are 0660 to a group (Ascend: HwHiAiUser); a non-root image user must join it."""
    with tempfile.TemporaryDirectory() as top:  # pytest's tmp_path is private to root
        os.chmod(top, 0o755)
        seen = _check_as_nobody(FakeMachine(Path(top)))
    assert seen["uid"] == 65534
    (davinci,) = seen["davinci"]
    assert davinci["status"] == "error"
    assert davinci["flags"] == ["--group-add 1234"]
    assert davinci["message"] == "/dev/davinci0, /dev/davinci1 present but uid 65534 cannot open it"
    assert "is not readable by uid 65534" in seen["model"][0]


def _check_as_nobody(fake):
    fake.ascend()
    for node in ("/dev/davinci0", "/dev/davinci1"):
        fake.path(node).chmod(0o660)
        os.chown(fake.path(node), 0, 1234)
    fake.write("/models/private/config.json", "{}")
    fake.path("/models/private").chmod(0o700)
    src = Path(__file__).resolve().parents[2] / "images" / "engine" / "src"
    result = subprocess.run(
        ["/usr/bin/python3", "-c", NON_ROOT_CHECK, str(fake.root)],
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        user=65534,
        group=65534,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_model_dir_without_config_warns(machine, env_for, capsys):
    fake = machine("cpu")
    fake.write("/models/x/weights.bin")
    code = main(["--dry-run", "--model", "/models/x"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    assert code == 0
    assert "model directory /models/x has no config.json" in capsys.readouterr().err


def test_missing_model_and_device_are_both_reported(machine, env_for, capsys):
    fake = machine("mlu")
    fake.remove("/dev/cambricon_ctl")
    code = main(["--dry-run", "--model", "/models/none"], env=env_for("mlu"), host=fake.host, software=ENGINE)
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert code == 3
    assert len(errors) == 2
    assert "--device /dev/cambricon_ctl" in errors[0] and "/models/none" in errors[1]


@pytest.mark.parametrize(
    ("backend", "visible", "tp", "ok"),
    [
        ("ascend", {}, "2", True),
        ("ascend", {}, "4", False),
        ("cuda", {"CUDA_VISIBLE_DEVICES": "1"}, "2", False),
        ("mlu", {"MLU_VISIBLE_DEVICES": "0,1"}, "2", True),
    ],
)
def test_tensor_parallel_needs_enough_visible_devices(backend, visible, tp, ok, machine, env_for, capsys):
    code, _, err = serve(capsys, machine(backend), env_for(backend, **visible), "--tensor-parallel-size", tp)
    assert (code == 0) is ok, err
    if not ok:
        assert f"tensor-parallel-size {tp}" in err and "lower -tp/-pp" in err


def test_real_host_requires_character_devices(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").write_text("")
    assert Host(tmp_path, strict_devices=False).is_device("/dev/nvidiactl")
    assert not Host(tmp_path, strict_devices=True).is_device("/dev/nvidiactl")
    assert Host(strict_devices=True).is_device("/dev/null")  # a real character device
