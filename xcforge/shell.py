"""Run external commands the house way: echo each one first, so a log can be replayed by hand."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from xcforge.console import echo
from xcforge.errors import EnvironmentProblem

# /usr/local/bin/docker on some machines is a client without the buildx plugin; the engine's own
# client in /usr/bin is the one provisioning installs (docs/provisioning.md).
DOCKER = os.environ.get("XCFORGE_DOCKER", "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else "docker")


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    capture: bool = False,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    quiet: bool = False,
    cwd: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Echo and run argv. A missing executable becomes EnvironmentProblem with a remedy."""
    if not quiet:
        echo(argv)
    full_env = None
    if env is not None:
        full_env = {**os.environ, **env}
    try:
        return subprocess.run(
            list(argv),
            check=check,
            capture_output=capture,
            env=full_env,
            input=input,
            cwd=cwd,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise EnvironmentProblem(
            f"'{argv[0]}' is not installed or not on PATH; run `scripts/provision.sh` to install it"
        ) from exc
