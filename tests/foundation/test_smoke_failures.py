"""When the server dies mid-smoke, the check says what happened, in one line (issue 11, item 7)."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from xcforge.smoke import checks as smoke

DOCKER = "/usr/bin/docker"


def test_what_happened_names_state_signal_and_log():
    logs = "INFO starting\nERROR Engine core proc EngineCore_0 died with exit code -4\nERROR shutting down\n"
    state = {"Running": False, "ExitCode": 1, "OOMKilled": False}
    line = smoke.describe_failure(ConnectionError("Connection error."), state, logs)
    assert "\n" not in line
    assert line.startswith("ConnectionError: Connection error.; container exited 1")
    assert "worker died: -4 (SIGILL)" in line and "ERROR shutting down" in line


def test_a_container_that_is_gone_is_named_so():
    line = smoke.describe_failure(TimeoutError("timed out"), {}, "")
    assert line == "TimeoutError: timed out; container gone; log: "


@pytest.mark.docker
def test_what_happened_with_a_real_container_that_was_killed():
    name = f"xcforge-died-{uuid.uuid4().hex[:6]}"
    subprocess.run([DOCKER, "run", "--name", name, "127.0.0.1:5000/standin/docker.io/library/python:3.11-slim-bookworm",
                    "sh", "-c", "echo worker died with exit code -4; exit 137"], capture_output=True)  # fmt: skip
    try:
        line = smoke.what_happened(name, TimeoutError("timed out"))
        assert "container exited 137" in line and "worker died: -4 (SIGILL)" in line
    finally:
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True)


@pytest.mark.docker
def test_what_happened_when_the_container_is_gone():
    line = smoke.what_happened(f"xcforge-never-{uuid.uuid4().hex[:6]}", TimeoutError("timed out"))
    assert line == "TimeoutError: timed out; container gone; log: "
