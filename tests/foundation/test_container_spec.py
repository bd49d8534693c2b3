"""The smoke tests' `docker run` through the SDK: the echoed line and the SDK's arguments mean the same."""

from __future__ import annotations

import shlex

import pytest

from xcforge.errors import ConfigError
from xcforge.shell import DOCKER
from xcforge.smoke.containers import RunSpec

IMAGE = "127.0.0.1:5000/xcforge/vllm-cpu@sha256:" + "a" * 64


def test_device_and_matrix_flags_become_sdk_arguments():
    spec = RunSpec(IMAGE, ("doctor", "--json"), name="xcforge-smoke-1", platform="linux/arm64", shm_size="1g")
    spec = spec.with_flags(
        ["--device", "/dev/davinci0", "-v", "/usr/local/dcmi:/usr/local/dcmi:ro", "--group-add", "1000",
         "--gpus", "all", "--ipc=host", "--security-opt", "seccomp=unconfined", "--cap-add", "SYS_NICE",
         "-e", "QEMU_CPU=neoverse-n1", "--env=A=b=c"]
    )  # fmt: skip
    kwargs = spec.sdk_kwargs()
    assert kwargs["command"] == ["doctor", "--json"] and kwargs["platform"] == "linux/arm64"
    assert kwargs["devices"] == ["/dev/davinci0:/dev/davinci0:rwm"]
    assert kwargs["volumes"] == ["/usr/local/dcmi:/usr/local/dcmi:ro"]
    assert kwargs["group_add"] == ["1000"] and kwargs["ipc_mode"] == "host"
    assert kwargs["security_opt"] == ["seccomp=unconfined"] and kwargs["cap_add"] == ["SYS_NICE"]
    assert kwargs["environment"] == ["QEMU_CPU=neoverse-n1", "A=b=c"]
    assert kwargs["shm_size"] == "1g"
    (request,) = kwargs["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]


def test_echoed_line_is_the_docker_run_it_means():
    spec = RunSpec(IMAGE, ("--model", "/models/tiny"), name="xcforge-serve-1", platform="linux/amd64",
                   ports=(("127.0.0.1", 18000, 8000),), shm_size="4g", memory="6g", cpus="2")  # fmt: skip
    spec = spec.with_flags(["-v", "/tmp/m:/models/tiny:ro", "-e", "VLLM_CPU_KVCACHE_SPACE=1"])
    assert shlex.join(spec.argv(detach=True)) == shlex.join(
        [DOCKER, "run", "-d", "--name", "xcforge-serve-1", "--platform", "linux/amd64",
         "-p", "127.0.0.1:18000:8000", "--shm-size", "4g", "-v", "/tmp/m:/models/tiny:ro",
         "-e", "VLLM_CPU_KVCACHE_SPACE=1", "--memory", "6g", "--cpus", "2", IMAGE, "--model", "/models/tiny"]
    )  # fmt: skip
    kwargs = spec.sdk_kwargs()
    assert kwargs["ports"] == {"8000/tcp": ("127.0.0.1", 18000)}
    assert kwargs["mem_limit"] == "6g" and kwargs["nano_cpus"] == 2_000_000_000
    quantize = RunSpec(IMAGE, ("x",), entrypoint="llama-quantize")
    assert quantize.argv(detach=False)[1:] == ["run", "--rm", "--entrypoint", "llama-quantize", IMAGE, "x"]
    assert quantize.sdk_kwargs()["entrypoint"] == ["llama-quantize"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--privileged"], "docker run flag '--privileged' is not one xcforge passes"),
        (["--device"], "docker run flag '--device' needs a value"),
    ],
)
def test_a_flag_the_sdk_call_does_not_carry_is_refused(flags, message):
    with pytest.raises(ConfigError, match=message):
        RunSpec(IMAGE).with_flags(flags)
