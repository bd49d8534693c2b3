"""Fixtures for the signing tests: keys, a fake registry, the real registry and cosign when asked."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from oci_fake_registry import FakeRegistry

from ocicore.registry import RegistryClient
from signing.cosign_keys import CosignPrivateKey
from signing.sm2_keys import Sm2PrivateKey
from tests.registry_process import RegistryProcess

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def sm2_key() -> Sm2PrivateKey:
    return Sm2PrivateKey.generate()


@pytest.fixture(scope="session")
def other_sm2_key() -> Sm2PrivateKey:
    return Sm2PrivateKey.generate()


@pytest.fixture(scope="session")
def cosign_key() -> CosignPrivateKey:
    return CosignPrivateKey.generate()


@pytest.fixture(scope="session")
def other_cosign_key() -> CosignPrivateKey:
    return CosignPrivateKey.generate()


@pytest.fixture
def registry() -> Iterator[RegistryProcess]:
    """A real registry process (distribution 2.8), empty for each test."""
    with RegistryProcess() as process:
        yield process


@pytest.fixture
def fault_registry() -> Iterator[FakeRegistry]:
    """A fault-injecting test double, only for what a real registry cannot be made to do on demand:
    answer 5xx/429, paginate tags after 3, serve a blob whose bytes do not match its digest."""
    with FakeRegistry() as double:
        yield double


# ---------------------------------------------------------------------------------- real registry


@pytest.fixture(scope="session")
def real_registry() -> str:
    """Address of the real registry (XCFORGE_TEST_REGISTRY, default 127.0.0.1:5000), or skip."""
    address = os.environ.get("XCFORGE_TEST_REGISTRY", "127.0.0.1:5000")
    client = RegistryClient(address, retries=0, timeout=5)
    try:
        response = client.request("GET", "", scope="")
    except Exception as exc:
        pytest.fail(f"no registry at {address} ({exc}); run scripts/provision.sh or set XCFORGE_TEST_REGISTRY")
    assert response.status_code in (200, 401), response.status_code
    return address


@pytest.fixture(scope="session")
def cosign_bin() -> str:
    path = shutil.which("cosign")
    if path is None:
        # provision.sh installs cosign on Debian, so its absence there is a broken machine; on other
        # systems (Ubuntu runners without a cosign package) the independent check is skipped, visibly.
        if Path("/etc/debian_version").exists() and "ID=debian" in Path("/etc/os-release").read_text():
            pytest.fail("the cosign binary is missing; scripts/provision.sh installs it (Debian trixie's cosign)")
        pytest.skip("no cosign binary on this system (install cosign to run the independent verification)")
    return path
