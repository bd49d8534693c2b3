"""Shared pytest wiring.

Markers (see pyproject.toml): `docker` tests need the engine, buildx and the local registry that
scripts/provision.sh starts; `slow` tests take minutes; `device` tests need real accelerators.
Docker and slow tests run only when asked for (`--docker`, `--slow`, or XCFORGE_TESTS=all) and are
skipped *visibly* otherwise, with the reason in the summary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--docker", action="store_true", help="run tests marked docker")
    parser.addoption("--slow", action="store_true", help="run tests marked slow")
    parser.addoption("--heavy", action="store_true", help="run tests marked heavy (multi-GB installs)")
    parser.addoption("--device", action="store_true", help="run tests marked device (this machine has the accelerator)")


def _wanted(config: pytest.Config, name: str) -> bool:
    everything = os.environ.get("XCFORGE_TESTS", "") == "all"
    return everything or bool(config.getoption(f"--{name}"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = {
        "device": "marked device: needs the accelerator; runs with --device on a [self-hosted, <backend>] runner",
        "docker": "marked docker: run with --docker (or XCFORGE_TESTS=all) after scripts/provision.sh",
        "slow": "marked slow: run with --slow (or XCFORGE_TESTS=all)",
        "heavy": "marked heavy: multi-GB install, run on demand with --heavy (docs/benchmarks.md has its numbers)",
    }
    for name, reason in reasons.items():
        # XCFORGE_TESTS=all means everything this machine can run: never the hardware tests.
        if bool(config.getoption(f"--{name}")) or (name not in ("device", "heavy") and _wanted(config, name)):
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if name in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A copy of the project layout (matrix, templates, images) that a test may change."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO_ROOT / "matrix.yaml", root / "matrix.yaml")
    shutil.copy(REPO_ROOT / "docker-bake.hcl", root / "docker-bake.hcl")
    shutil.copytree(REPO_ROOT / "templates", root / "templates")
    shutil.copytree(
        REPO_ROOT / "images", root / "images", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    return root
