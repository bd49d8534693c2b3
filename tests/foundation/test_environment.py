"""A machine that cannot build gets one line with the remedy, exit 3, and no traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _build(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "--target", "cuda", "--site", str(REPO / "sites/standin.yaml"),
         "--dist", str(tmp_path / "dist")],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
    )  # fmt: skip


def _fake_docker(tmp_path: Path, buildx_version: str, info: str) -> Path:
    """A docker client that answers `info` and `buildx version` like an old installation would."""
    script = tmp_path / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f"if [ \"$1\" = info ]; then echo '{info}'; exit 0; fi\n"
        'if [ "$1" = buildx ] && [ "$2" = version ]; then\n'
        f'  echo "github.com/docker/buildx {buildx_version} abc"; exit 0\n'
        "fi\n"
        "exit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_missing_docker_names_the_remedy(tmp_path):
    proc = _build({"XCFORGE_DOCKER": str(tmp_path / "no-such-docker")}, tmp_path)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "scripts/provision.sh" in errors[0]


def test_old_buildx_is_refused_with_versions(tmp_path):
    info = '{"ServerVersion": "20.10.24", "Driver": "overlay2", "DriverStatus": [], "Architecture": "x86_64"}'
    docker = _fake_docker(tmp_path, "v0.9.1", info)
    proc = _build({"XCFORGE_DOCKER": str(docker)}, tmp_path)
    assert proc.returncode == 3
    assert "buildx 0.9.1 is too old (need >= 0.11)" in proc.stderr


def test_engine_without_containerd_store_is_refused(tmp_path):
    info = '{"ServerVersion": "26.1.5", "Driver": "overlay2", "DriverStatus": [], "Architecture": "x86_64"}'
    docker = _fake_docker(tmp_path, "v0.13.1", info)
    proc = _build({"XCFORGE_DOCKER": str(docker)}, tmp_path)
    assert proc.returncode == 3
    assert "containerd-snapshotter" in proc.stderr and "Traceback" not in proc.stderr


def _plugins(*plugins: dict) -> str:
    base = {"ServerVersion": "26.1.5", "Driver": "overlayfs", "DriverStatus": [], "Architecture": "x86_64"}
    return json.dumps({**base, "ClientInfo": {"Plugins": list(plugins)}})


def test_buildx_version_is_read_from_the_plugins_docker_info_lists(tmp_path):
    """No second CLI start-up for `buildx version` when `docker info` names the plugin (the fake
    client fails `buildx version`: it must not be asked)."""
    info = _plugins({"Name": "compose", "Version": "v2.27.0"}, {"Name": "buildx", "Version": "v0.10.4"})
    docker = _fake_docker(tmp_path, "(must not be asked)", info)
    docker.write_text(docker.read_text().replace('if [ "$1" = buildx ]', "if false"))
    proc = _build({"XCFORGE_DOCKER": str(docker)}, tmp_path)
    assert proc.returncode == 3
    assert "buildx 0.10.4 is too old (need >= 0.11)" in proc.stderr, proc.stderr[-500:]


@pytest.mark.parametrize(
    "plugins",
    [(), ({"Name": "buildx", "Err": "invalid plugin: not executable"},)],
    ids=["not-listed", "broken"],
)
def test_a_client_without_a_working_buildx_plugin_is_refused(tmp_path, plugins):
    docker = _fake_docker(tmp_path, "v0.13.1", _plugins(*plugins))
    proc = _build({"XCFORGE_DOCKER": str(docker)}, tmp_path)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "docker buildx is missing" in proc.stderr and "scripts/provision.sh" in proc.stderr
