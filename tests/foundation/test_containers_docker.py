"""The smoke tests' containers with a real engine: exit codes and output, timeouts, arm64 under QEMU,
a container that dies while waited on, and no container left behind in any of these cases."""

from __future__ import annotations

import subprocess
import uuid

import docker
import pytest

from xcforge.smoke import checks as smoke
from xcforge.smoke import containers
from xcforge.smoke.containers import RunSpec

pytestmark = pytest.mark.docker

BASE = "127.0.0.1:5000/standin/docker.io/library/python:3.11-slim-bookworm"


def _name() -> str:
    return f"xcforge-test-{uuid.uuid4().hex[:8]}"


def _exists(name: str) -> bool:
    try:
        docker.from_env().containers.get(name)
    except docker.errors.NotFound:
        return False
    return True


def test_run_to_exit_returns_code_and_both_streams_and_removes_it(capfd):
    name = _name()
    spec = RunSpec(BASE, ("-c", "echo out; echo err >&2; exit 3"), name=name, entrypoint="/bin/sh", shm_size="1g")
    proc = containers.run_to_exit(spec.with_flags(["-e", "X=1"]), timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, b"out\n", b"err\n")
    assert not _exists(name)
    assert f"+ /usr/bin/docker run --rm --name {name} --shm-size 1g -e X=1 --entrypoint /bin/sh {BASE}" in (
        capfd.readouterr().err
    )


def test_arm64_runs_under_qemu_as_the_chosen_cpu():
    spec = RunSpec(BASE, ("-c", "uname -m; echo $QEMU_CPU"), platform="linux/arm64", entrypoint="/bin/sh")
    proc = containers.run_to_exit(spec.with_flags(["-e", "QEMU_CPU=cortex-a72"]), timeout=300)
    assert (proc.returncode, proc.stdout) == (0, b"aarch64\ncortex-a72\n"), proc.stderr


def test_past_the_timeout_it_is_removed_and_says_so():
    name = _name()
    with pytest.raises(subprocess.TimeoutExpired):
        containers.run_to_exit(RunSpec(BASE, ("300",), name=name, entrypoint="sleep"), timeout=3)
    assert not _exists(name)


def test_an_image_that_is_nowhere_is_exit_125_with_the_engines_message():
    proc = containers.run_to_exit(RunSpec("127.0.0.1:5000/xcforge/no-such-image:0", ("true",)), timeout=60)
    assert proc.returncode == 125 and proc.stderr


def test_detached_is_removed_even_when_the_body_fails():
    with pytest.raises(RuntimeError), containers.detached(RunSpec(BASE, ("300",), name=_name(),
                                                                  entrypoint="sleep")) as name:  # fmt: skip
        assert containers.state(name)["Running"]
        raise RuntimeError("the check failed")
    assert not _exists(name) and containers.state(name) == {}


def test_wait_healthy_names_a_container_that_exited_with_its_log():
    spec = RunSpec(BASE, ("-c", "echo worker died with exit code -4; exit 7"), name=_name(), entrypoint="/bin/sh")
    with containers.detached(spec) as name:
        ok, detail = smoke.wait_healthy(smoke.ServedContainer(name, 1, "tiny"), timeout=60)
        assert not ok and detail.startswith("container exited (7): worker died with exit code -4"), detail
        line = smoke.what_happened(name, ConnectionError("Connection error."))
        assert "container exited 7" in line and "worker died: -4 (SIGILL)" in line
