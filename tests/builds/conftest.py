"""Fixtures for build integration tests: a real engine, buildx, QEMU and the local registry.

These tests are marked `docker`; scripts/provision.sh must have run (it starts the engine and the
registry on 127.0.0.1:5000 and pushes the stand-in bases the site config sites/standin.yaml maps).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
REGISTRY = os.environ.get("XCFORGE_TEST_REGISTRY", "127.0.0.1:5000")
SITE = REPO / "sites" / "standin.yaml"
# The stand-in site with every engine step skipped: for the build/push/sign/merge machinery, which
# does not need minutes of pip per build. Real installs: test_engine_installs.py, test_cpu_engine.py.
SKELETON_SITE = REPO / "sites" / "skeleton.yaml"


def cli(*args: str, env: dict | None = None, cwd: Path = REPO, timeout: int = 3600) -> subprocess.CompletedProcess:
    """Run build.py as a user does; output is kept for assertions and shown on failure."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    sys.stderr.write(proc.stderr[-4000:])
    return proc


def registry_get(path: str, accept: str | None = None) -> requests.Response:
    headers = {"Accept": accept} if accept else {}
    return requests.get(f"http://{REGISTRY}/v2/{path}", headers=headers, timeout=30)


INDEX_ACCEPT = "application/vnd.oci.image.index.v1+json,application/vnd.oci.image.manifest.v1+json"


def manifest(repo: str, reference: str) -> dict:
    response = registry_get(f"{repo}/manifests/{reference}", INDEX_ACCEPT)
    response.raise_for_status()
    return response.json()


def tags(repo: str) -> list[str]:
    response = registry_get(f"{repo}/tags/list")
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return response.json().get("tags") or []


@pytest.fixture(scope="session")
def registry() -> str:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5).raise_for_status()
    except requests.RequestException as exc:
        pytest.fail(f"no registry at {REGISTRY} ({exc}); run `scripts/provision.sh` first")
    return REGISTRY


@pytest.fixture(scope="session")
def prefix(registry: str) -> str:
    """A fresh repository prefix per test session, so runs never see each other's images."""
    return f"{registry}/xcforge-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def no_container_left_behind(request):
    """Every container a test starts (smoke and serve checks name theirs xcforge-*) must be gone when
    it ends, pass or fail. Checked through the docker SDK, independently of the code under test."""
    if "docker" not in request.keywords:
        yield
        return
    import docker

    client = docker.from_env()

    def ours() -> set[str]:
        return {c.name for c in client.containers.list(all=True) if c.name.startswith("xcforge-")}

    before = ours()
    yield
    leaked = ours() - before
    for name in leaked:  # clean up so one leak does not cascade into other tests
        client.containers.get(name).remove(force=True)
    assert not leaked, f"containers left behind: {sorted(leaked)}"
