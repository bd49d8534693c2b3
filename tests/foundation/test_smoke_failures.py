"""When the server dies mid-smoke, the check says what happened, in one line (issue 11, item 7)."""

from __future__ import annotations

import subprocess
import uuid
from types import SimpleNamespace

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


def test_a_chat_completion_without_usage_is_a_failed_check_not_a_crash():
    """A server that leaves `usage` out of a chat completion fails that check; it used to raise
    AttributeError (None.completion_tokens), which the serve check does not catch (found by mypy)."""

    class Stop(Exception):
        pass

    def chat(**kw):
        if kw.get("stream"):
            raise Stop  # the checks after the chat completion are not this test's
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="hi"))], usage=None)

    client = SimpleNamespace(
        models=SimpleNamespace(list=lambda: SimpleNamespace(data=[SimpleNamespace(id="tiny")])),
        completions=SimpleNamespace(
            create=lambda **kw: SimpleNamespace(
                choices=[SimpleNamespace(text="x")], usage=SimpleNamespace(completion_tokens=3)
            )
        ),
        chat=SimpleNamespace(completions=SimpleNamespace(create=chat)),
    )
    recorded = []
    step = ["/v1/models"]
    with pytest.raises(Stop):
        smoke._talk(client, "http://unused", None, lambda name, ok, detail: recorded.append((name, ok)) or ok, step)
    assert recorded == [("/v1/models", True), ("completion", True), ("chat completion", False)]
    assert step == ["streamed chat"]


def test_a_gguf_smoke_model_for_an_engine_that_is_not_llama_cpp_is_a_config_error(monkeypatch, tmp_path):
    """llama.cpp's converter comes from a llama.cpp engine's sdist: for another engine (smoke.model_format
    gguf is not tied to engine.llama_cpp) this is the config's mistake, not an AttributeError (found by mypy)."""
    from xcforge.config.matrix import load_matrix
    from xcforge.config.site import SiteConfig
    from xcforge.errors import ConfigError
    from xcforge.lock import locks
    from xcforge.paths import REPO_ROOT
    from xcforge.smoke import gguf

    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    target = matrix.targets["cpu"]
    assert target.engine.llama_cpp is None
    monkeypatch.setattr(locks, "engine_sdist_pin", lambda matrix, target: ("0.1.0", "0" * 64))
    with pytest.raises(ConfigError, match=r"its engine is not llama\.cpp"):
        gguf.llama_sources(matrix, target, SiteConfig(), tmp_path)


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
