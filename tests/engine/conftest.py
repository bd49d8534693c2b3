"""Fixtures for the launcher's tests: fake containers of each backend under tmp_path.

`machine(backend)` returns a complete, healthy container of that kind (cgroup v2, 1 GiB shm, the
vendor's devices and driver files); tests then remove or change what they are about.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

try:
    import xcforge_engine  # noqa: F401  (installed: pip install -e images/engine)
except ModuleNotFoundError:  # a checkout not yet provisioned: test the source tree all the same
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "engine" / "src"))

from engine_fakes import CPUINFO_FOR, FakeMachine


@pytest.fixture
def machine(tmp_path: Path):
    """machine("ascend") → a healthy fake container of that backend (cgroup v2, 1 GiB shm)."""

    counter = itertools.count()

    def build(backend: str, cpuinfo: str | None = None) -> FakeMachine:
        fake = FakeMachine(tmp_path / f"root-{backend}-{next(counter)}")
        fake.root.mkdir()
        fake.write("/proc/cpuinfo", cpuinfo or CPUINFO_FOR[backend])
        fake.meminfo()
        fake.cgroup_v2()
        fake.shm()
        getattr(fake, backend)()
        return fake

    return build


@pytest.fixture
def env_for(tmp_path: Path):
    """env_for("cuda", XCFORGE_ENGINE_INSTALL="skip") → the environment of such an image."""

    def build(backend: str, **extra: str) -> dict[str, str]:
        env = {
            "XCFORGE_TARGET": backend,
            "XCFORGE_BACKEND": backend,
            "XCFORGE_ENGINE_INSTALL": "full",
            "XCFORGE_STATE_DIR": str(tmp_path / "state"),
            "PATH": "/usr/bin:/bin",
        }
        env.update(extra)
        return env

    return build
