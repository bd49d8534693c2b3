"""Containers of the smoke tests, through the Docker SDK: start, wait, read logs, always remove.

Each start is echoed first as the `docker run` line it means (house rule: a log can be replayed by
hand); a missing image is fetched with an echoed `docker pull`, as `docker run` would. The SDK is
used instead of CLI calls so that state, health and logs are read as data, and a container is
removed in a `finally` whatever happened, with no second process to time out.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from xcforge.console import echo
from xcforge.errors import ConfigError, EnvironmentProblem
from xcforge.shell import DOCKER, run

REMEDY = "run `scripts/provision.sh` (installs and starts the Docker engine)"

if TYPE_CHECKING:  # the SDK is imported when a container is started
    from docker import DockerClient
    from docker.models.containers import Container


@dataclass(frozen=True)
class RunSpec:
    """One `docker run`: what the SDK is asked for, and the CLI line that means the same."""

    image: str
    command: tuple[str, ...] = ()
    name: str | None = None
    platform: str | None = None
    entrypoint: str | None = None
    env: tuple[str, ...] = ()  # KEY=VALUE
    volumes: tuple[str, ...] = ()  # HOST:CONTAINER[:ro]
    devices: tuple[str, ...] = ()
    ports: tuple[tuple[str, int, int], ...] = ()  # (host ip, host port, container port)
    shm_size: str | None = None
    memory: str | None = None
    cpus: str | None = None
    user: str | None = None
    group_add: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc: str | None = None
    gpus: str | None = None
    # Flags in the order they were given, for the echoed line.
    _shown: tuple[str, ...] = field(default=(), repr=False)

    def with_flags(self, flags: Sequence[str]) -> RunSpec:
        """This spec plus `docker run` flags (the matrix's docker_flags, device flags, `-e`, `-v`)."""
        spec = self
        args = list(flags)
        while args:
            arg = args.pop(0)
            flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            if flag not in _FLAGS:
                known = ", ".join(sorted(_FLAGS))
                raise ConfigError(f"docker run flag '{arg}' is not one xcforge passes to containers (known: {known})")
            if not eq:
                if not args:
                    raise ConfigError(f"docker run flag '{flag}' needs a value")
                value = args.pop(0)
            attr = _FLAGS[flag]
            current = getattr(spec, attr)
            new = (*current, value) if isinstance(current, tuple) else value
            changes: dict[str, Any] = {attr: new, "_shown": (*spec._shown, flag, value)}  # the field _FLAGS names
            spec = replace(spec, **changes)
        return spec

    def argv(self, *, detach: bool) -> list[str]:
        line = [DOCKER, "run", "-d" if detach else "--rm"]
        if self.name:
            line += ["--name", self.name]
        if self.platform:
            line += ["--platform", self.platform]
        for host_ip, host_port, port in self.ports:
            line += ["-p", f"{host_ip}:{host_port}:{port}"]
        if self.shm_size:
            line += ["--shm-size", self.shm_size]
        line += list(self._shown)
        if self.memory:
            line += ["--memory", self.memory]
        if self.cpus:
            line += ["--cpus", self.cpus]
        if self.user:
            line += ["--user", self.user]
        if self.entrypoint:
            line += ["--entrypoint", self.entrypoint]
        return [*line, self.image, *self.command]

    def sdk_kwargs(self) -> dict[str, Any]:
        import docker

        kwargs: dict[str, Any] = {"command": list(self.command) or None}
        optional: dict[str, object] = {
            "name": self.name,
            "platform": self.platform,
            "entrypoint": [self.entrypoint] if self.entrypoint else None,
            "environment": list(self.env) or None,
            "volumes": list(self.volumes) or None,
            "devices": [d if ":" in d else f"{d}:{d}:rwm" for d in self.devices] or None,
            "ports": {f"{port}/tcp": (ip, host_port) for ip, host_port, port in self.ports} or None,
            "shm_size": self.shm_size,
            "mem_limit": self.memory,
            "nano_cpus": int(float(self.cpus) * 1e9) if self.cpus else None,
            "user": self.user,
            "group_add": list(self.group_add) or None,
            "cap_add": list(self.cap_add) or None,
            "security_opt": list(self.security_opt) or None,
            "ipc_mode": self.ipc,
        }
        if self.gpus:
            count = -1 if self.gpus == "all" else int(self.gpus)
            optional["device_requests"] = [docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])]
        kwargs.update({k: v for k, v in optional.items() if v is not None})
        return kwargs


# `docker run` flag → RunSpec field; tuples collect repeated flags.
_FLAGS = {
    "-e": "env",
    "--env": "env",
    "-v": "volumes",
    "--volume": "volumes",
    "--device": "devices",
    "--group-add": "group_add",
    "--cap-add": "cap_add",
    "--security-opt": "security_opt",
    "--ipc": "ipc",
    "--gpus": "gpus",
    "--user": "user",
}


@functools.cache
def client() -> DockerClient:
    import docker

    try:
        return docker.from_env(timeout=120)
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"the Docker engine is not reachable ({exc}); {REMEDY}") from None


def _start(spec: RunSpec, *, detach: bool) -> Container:
    """Echo the `docker run` line, then create and start the container (pulling it as docker run would).

    What the engine refuses (no such image, a bad device) is subprocess.CalledProcessError with exit
    125 and the engine's message as stderr, as `docker run` itself would fail.
    """
    import docker

    argv = spec.argv(detach=detach)
    echo(argv)
    containers = client().containers
    try:
        # create + start is what containers.run(detach=True) does; done here so that a pull is echoed.
        try:
            container = containers.create(spec.image, **spec.sdk_kwargs())
        except docker.errors.ImageNotFound:
            pull = [DOCKER, "pull", *(["--platform", spec.platform] if spec.platform else []), "--quiet", spec.image]
            pulled = run(pull, capture=True, check=False)
            if pulled.returncode != 0:
                raise subprocess.CalledProcessError(125, argv, b"", pulled.stderr) from None
            container = containers.create(spec.image, **spec.sdk_kwargs())
    except docker.errors.APIError as exc:
        raise subprocess.CalledProcessError(125, argv, b"", str(exc.explanation or exc).encode()) from None
    try:
        container.start()
    except docker.errors.APIError as exc:
        _remove(container)
        raise subprocess.CalledProcessError(125, argv, b"", str(exc.explanation or exc).encode()) from None
    except BaseException:
        _remove(container)
        raise
    return container


def _remove(container: Container) -> None:
    import docker

    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        container.remove(force=True)


def run_to_exit(spec: RunSpec, *, timeout: float = 600, check: bool = False) -> subprocess.CompletedProcess[bytes]:
    """`docker run --rm`: run until it exits, return its exit code, stdout and stderr (bytes).

    Past timeout the container is removed and subprocess.TimeoutExpired raised, as for a process.
    """
    import requests

    argv = spec.argv(detach=False)
    try:
        container = _start(spec, detach=False)
    except subprocess.CalledProcessError as exc:
        if check:
            raise
        return subprocess.CompletedProcess(argv, exc.returncode, exc.stdout, exc.stderr)
    try:
        try:
            status = container.wait(timeout=timeout)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            raise subprocess.TimeoutExpired(argv, timeout) from exc
        stdout = container.logs(stdout=True, stderr=False)
        stderr = container.logs(stdout=False, stderr=True)
    finally:
        _remove(container)
    code = int(status.get("StatusCode", -1))
    if check and code != 0:
        raise subprocess.CalledProcessError(code, argv, stdout, stderr)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


@contextlib.contextmanager
def detached(spec: RunSpec) -> Iterator[str]:
    """`docker run -d`, yielding the container's name; force-removed on the way out, whatever happened."""
    container = _start(spec, detach=True)
    try:
        assert container.name is not None  # the engine names every container it creates
        yield container.name
    finally:
        echo([DOCKER, "rm", "-f", container.name or container.short_id])
        _remove(container)


def state(name: str) -> dict[str, Any]:
    """The container's State (Running, ExitCode, OOMKilled, Health); {} when it is gone."""
    import docker

    # Polled every few seconds while waiting, so not echoed (`docker inspect --format '{{json .State}}'`).
    try:
        return client().containers.get(name).attrs.get("State") or {}
    except docker.errors.NotFound:
        return {}


def logs(name: str, tail: int) -> str:
    """The last `tail` lines of the container's stdout and stderr; "" when it is gone."""
    import docker

    try:
        return client().containers.get(name).logs(tail=tail).decode(errors="replace")
    except docker.errors.NotFound:
        return ""


def stop(name: str, grace: int) -> None:
    """`docker stop --time grace`: SIGTERM, then SIGKILL after grace seconds."""
    import docker

    echo([DOCKER, "stop", "--time", str(grace), name])
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        client().containers.get(name).stop(timeout=grace)
