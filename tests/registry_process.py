"""A real OCI registry (distribution, Debian's `docker-registry`) as a process on a free loopback port.

Tests that need a registry but not the docker engine use this instead of a fake: it starts in a
fraction of a second with its own temporary storage, so every test sees an empty registry.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

BINARY_CANDIDATES = ("docker-registry", "registry")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server started next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bcrypt(password: str) -> str:
    """A bcrypt hash through the C library's crypt(3) (libxcrypt has $2b$), no extra package."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # crypt leaves the standard library in 3.13
        import crypt

    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
    if not hashed or not hashed.startswith("$2"):
        pytest.skip("this C library's crypt(3) has no bcrypt, which distribution's htpasswd needs")
    return hashed


class RegistryProcess:
    def __init__(self, *, access_log: bool = False, htpasswd: dict[str, str] | None = None) -> None:
        """htpasswd: user -> password; the registry then asks for HTTP Basic auth (distribution's
        htpasswd backend, bcrypt entries only), as a site registry that needs a login does."""
        self.access_log = access_log
        self.htpasswd = htpasswd or {}
        binary = next((shutil.which(b) for b in BINARY_CANDIDATES if shutil.which(b)), None)
        if binary is None:
            pytest.skip("no registry binary (Debian's docker-registry); run scripts/provision.sh")
        self.binary = binary
        self.port = free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="xcforge-registry-")
        self._proc: subprocess.Popen[str] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RegistryProcess:
        root = Path(self._tmp.name)
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            f"log: {{level: error, accesslog: {{disabled: {'false' if self.access_log else 'true'}}}}}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: '127.0.0.1:{self.port}'}}\n"
        )
        if self.htpasswd:
            (root / "htpasswd").write_text("".join(f"{user}:{_bcrypt(pw)}\n" for user, pw in self.htpasswd.items()))
            with config.open("a") as fh:
                fh.write(f"auth: {{htpasswd: {{realm: xcforge-test, path: {root / 'htpasswd'}}}}}\n")
        self._proc = subprocess.Popen(
            [self.binary, "serve", str(config)],
            # The access log (one line per request) goes to stdout.
            stdout=subprocess.PIPE if self.access_log else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://{self.address}/v2/", timeout=1).status_code in (200, 401):
                    return self
            except requests.RequestException:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"registry on {self.address} did not start")

    @property
    def process(self) -> subprocess.Popen[str]:
        assert self._proc is not None
        return self._proc

    def kill(self) -> None:
        """SIGKILL, as a crash or a pulled cable would: no graceful shutdown."""
        if self._proc and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def __enter__(self) -> RegistryProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._tmp.cleanup()
