"""The local registry holds a stand-in for every base in matrix.yaml (scripts/provision.sh builds them).

Checked with docker's own tools, not with xcforge.provision.standin's registry reader.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from xcforge.provision.standin import LABEL_OF, PLATFORMS, default_registry, matrix_bases, normalize_ref, standin_ref
from xcforge.shell import DOCKER

pytestmark = pytest.mark.docker


def _bases(repo_root: Path) -> list[str]:
    pytest.importorskip("xcforge.config.matrix")
    return sorted({normalize_ref(ref) for ref in matrix_bases(repo_root / "matrix.yaml")})


def _docker(*args: str) -> str:
    result = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"docker {' '.join(args)} failed: {result.stderr.strip()}"
    return result.stdout


def test_registry_has_every_standin_for_both_platforms(repo_root: Path) -> None:
    registry = default_registry()
    for original in _bases(repo_root):
        ref = standin_ref(original, registry)
        result = subprocess.run(
            [DOCKER, "buildx", "imagetools", "inspect", "--raw", ref], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, (
            f"{ref} is not in the registry (run scripts/provision.sh): {result.stderr.strip()}"
        )
        index = json.loads(result.stdout)
        platforms = {
            f"{m['platform']['os']}/{m['platform']['architecture']}"
            for m in index.get("manifests", [])
            if "platform" in m
        }
        assert set(PLATFORMS) <= platforms, f"{ref} has {sorted(platforms)}"

        configs = json.loads(_docker("buildx", "imagetools", "inspect", "--format", "{{json .Image}}", ref))
        for platform in PLATFORMS:
            labels = configs[platform]["config"]["Labels"]
            assert labels[LABEL_OF] == original, f"{ref} ({platform}) stands in for {labels.get(LABEL_OF)!r}"


def test_standin_says_what_it_stands_for_and_runs_arm64(repo_root: Path) -> None:
    original = _bases(repo_root)[0]
    ref = standin_ref(original, default_registry())
    assert _docker("run", "--rm", "--platform", "linux/amd64", ref, "cat", "/etc/xcforge-stand-in").strip() == original
    out = _docker("run", "--rm", "--platform", "linux/arm64", ref, "sh", "-c", "uname -m; python3 --version")
    assert out.split()[:2] == ["aarch64", "Python"]
