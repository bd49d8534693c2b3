"""Is this machine able to build? Checked once before any build, with a one-line remedy each."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from xcforge.console import echo
from xcforge.errors import EnvironmentProblem
from xcforge.shell import DOCKER

MIN_BUILDX = (0, 11)
REMEDY = "run `scripts/provision.sh` (installs and starts Docker with buildx and the containerd image store)"


@dataclass(frozen=True)
class DockerEnvironment:
    server_version: str
    buildx_version: tuple[int, ...]
    containerd_store: bool
    native_platform: str


def _start(argv: list[str]) -> subprocess.Popen[str]:
    echo(argv)
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise EnvironmentProblem(f"'{argv[0]}' is not installed; {REMEDY}") from None


def _wait(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        assert isinstance(proc.args, list)  # _start's argv
        raise EnvironmentProblem(
            f"`{' '.join(proc.args[:3])}` did not answer within 60 s; is dockerd hung? {REMEDY}"
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


class _DockerCheck:
    """`docker info`, asked now and answered when first read. It names the engine and the CLI's
    plugins with their versions, buildx among them: one CLI start-up (0.1 s of CPU) instead of a
    second one for `docker buildx version`, which is asked only of a client too old to list them."""

    def __init__(self) -> None:
        self._info = _start([DOCKER, "info", "--format", "{{json .}}"])
        self._answer: DockerEnvironment | None = None

    def result(self) -> DockerEnvironment:
        if self._answer is None:
            info = _wait(self._info)
            if info.returncode != 0:
                detail = (info.stderr.strip().splitlines() or ["no output"])[-1]
                raise EnvironmentProblem(f"the Docker engine is not reachable ({detail}); {REMEDY}")
            data = json.loads(info.stdout or "{}")
            self._answer = _environment(data, _buildx_version(data))
        return self._answer


def _buildx_version(info: dict[str, Any]) -> str | None:
    """buildx's version as `docker info` lists it (ClientInfo.Plugins), None when it is missing."""
    plugins = (info.get("ClientInfo") or {}).get("Plugins")
    if plugins is None:  # a client that lists no plugins: ask buildx itself
        buildx = _wait(_start([DOCKER, "buildx", "version"]))
        return buildx.stdout if buildx.returncode == 0 else None
    for plugin in plugins:
        if plugin.get("Name") == "buildx" and not plugin.get("Err"):
            return str(plugin.get("Version", ""))
    return None


_check: _DockerCheck | None = None


def start_docker_check() -> None:
    """Ask now, read later: the question is a tenth of a second or two of CLI start-up, so a build
    asks it as soon as it has a plan and reads the answer once its own checks are done."""
    global _check
    if _check is None:
        _check = _DockerCheck()


def check_docker() -> DockerEnvironment:
    start_docker_check()
    assert _check is not None
    return _check.result()


def _environment(data: dict[str, Any], buildx: str | None) -> DockerEnvironment:
    driver_status = json.dumps(data.get("DriverStatus") or [])
    containerd_store = "io.containerd.snapshotter" in driver_status or data.get("Driver") in {"overlayfs", "stargz"}
    if buildx is None:
        raise EnvironmentProblem(f"docker buildx is missing ({DOCKER} has no buildx plugin); {REMEDY}")
    match = re.search(r"v?(\d+)\.(\d+)(?:\.(\d+))?", buildx)
    version = tuple(int(x) for x in match.groups() if x is not None) if match else (0, 0)
    if version < MIN_BUILDX:
        have, need = ".".join(map(str, version)), ".".join(map(str, MIN_BUILDX))
        raise EnvironmentProblem(f"docker buildx {have} is too old (need >= {need}); {REMEDY}")
    if not containerd_store:
        raise EnvironmentProblem(
            "the Docker engine does not use the containerd image store, so it cannot build multi-platform "
            'images; set {"features": {"containerd-snapshotter": true}} in /etc/docker/daemon.json and restart '
            "dockerd (scripts/provision.sh does this)"
        )
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(data.get("Architecture", ""), data.get("Architecture", ""))
    return DockerEnvironment(
        server_version=str(data.get("ServerVersion", "?")),
        buildx_version=version,
        containerd_store=containerd_store,
        native_platform=f"linux/{arch}",
    )
