"""Device-level checks: a real `serve` of each image on its hardware.

These run on self-hosted runners that have the accelerator (`[self-hosted, ascend|mlu|gpu|arm64]`,
see docs/ci.md) with `pytest -m device --device`, the image under test in $XCFORGE_DEVICE_IMAGE
(REPO@sha256:...) and a small model directory in $XCFORGE_DEVICE_MODEL. Everywhere else they are
skipped with the reason in the summary; nothing here is simulated.
"""

from __future__ import annotations

import glob
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from xcforge.config.matrix import load_matrix

REPO = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "matrix.yaml")

pytestmark = [pytest.mark.device, pytest.mark.docker]


def _hardware_present(target) -> bool:
    if target.backend == "cpu":
        return platform.machine() in {"aarch64", "arm64"}  # the native arm64 serve QEMU cannot do
    return any(glob.glob(pattern) for pattern in target.runtime.devices)


@pytest.mark.parametrize("name", list(MATRIX.targets))
def test_serve_on_hardware(name, tmp_path):
    target = MATRIX.targets[name]
    if not _hardware_present(target):
        pytest.skip(
            f"no {target.backend} hardware on this machine ({', '.join(target.runtime.devices) or 'arm64 CPU'})"
        )
    image = os.environ.get("XCFORGE_DEVICE_IMAGE")
    if not image:
        pytest.skip("set XCFORGE_DEVICE_IMAGE=REPO@sha256:... (the release workflow does)")
    args = ["smoke", "--target", name, "--image", image, "--dist", str(tmp_path), "--serve"]
    if target.backend != "cpu":
        model = os.environ.get("XCFORGE_DEVICE_MODEL")
        if not model:
            pytest.skip("set XCFORGE_DEVICE_MODEL to a small model directory on this runner")
        args += ["--device", "--model", model]
    proc = subprocess.run([sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert " 0 failed" in proc.stdout
