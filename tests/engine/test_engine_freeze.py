"""check-install's freeze check: the image's final set is the lock, and placeholders say what they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from xcforge_engine import install_check

from xcforge.lock.placeholders import Placeholder, write

LOCK = """# xcforge-status: locked
fastapi==0.123.10 \\
    --hash=sha256:aa
    # via vllm
transformers==5.5.4 \\
    --hash=sha256:bb
torch-npu==2.10.0.post4 \\
    --hash=sha256:cc
"""


def test_lock_pins_reads_requirement_lines_only() -> None:
    assert install_check.lock_pins(LOCK) == {
        "fastapi": "0.123.10",
        "transformers": "5.5.4",
        "torch-npu": "2.10.0.post4",
    }


def _drift(
    installed: dict[str, str], base: dict[str, str] | None = None, removed: list[str] | None = None
) -> list[str]:
    return install_check.freeze_drift(
        install_check.lock_pins(LOCK),
        installed,
        base or {},
        {"vllm": "0.23.0", "vllm-ascend": "0.23.0.post1", "xcforge-engine": ""},
        removed or [],
    )


CLEAN = {"fastapi": "0.123.10", "transformers": "5.5.4", "torch-npu": "2.10.0.post4", "vllm": "0.23.0",
         "vllm-ascend": "0.23.0.post1", "xcforge-engine": "0.9.0"}  # fmt: skip


def test_the_lock_and_its_extras_installed_is_no_drift() -> None:
    assert _drift(CLEAN, base={"pip": "23.0.1"} | {"pip": "23.0.1"}) == []
    assert _drift({**CLEAN, "pip": "23.0.1"}, base={"pip": "23.0.1"}) == []


def test_every_kind_of_drift_names_the_package() -> None:
    # What an unlocked plugin install did to the ascend image: fastapi/starlette downgraded, transformers moved.
    installed = {**CLEAN, "fastapi": "0.115.0", "starlette": "0.46.0", "pip": "26.0", "triton": "3.5.0"}
    del installed["transformers"]
    assert _drift(installed, base={"pip": "23.0.1"}, removed=["triton"]) == [
        "fastapi 0.115.0 is installed, the lock says 0.123.10",
        "transformers==5.5.4 is in the lock but not installed",
        "pip 26.0 is installed over the base's 23.0.1 (not in the lock)",
        "starlette 0.46.0 is installed but is not in the lock",
        "triton 3.5.0 is installed but is not in the lock",
        "triton is installed although the matrix removes it",
    ]
    assert _drift({**CLEAN, "vllm": "0.22.0"}) == ["vllm 0.22.0 is installed, the build installs 0.23.0"]


def test_a_placeholder_installs_with_pip_and_is_recognised(tmp_path: Path) -> None:
    # The real wheel xcforge writes, installed by the real pip: resolution metadata and the marker both hold.
    wheel = write(
        [Placeholder("triton-ascend", "3.2.2", ("numpy>=1.0",), "vendor-only: Huawei's index")], tmp_path / "w"
    )[0]
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = install_check.installed_distributions([str(target)])
    assert seen == {"triton-ascend": ("3.2.2", True)}
    metadata = next(target.glob("triton_ascend-3.2.2.dist-info")) / "METADATA"
    assert "Requires-Dist: numpy>=1.0" in metadata.read_text()
    assert "xcforge placeholder" in metadata.read_text()


def test_placeholder_wheels_are_reproducible(tmp_path: Path) -> None:
    p = Placeholder("vllm-ascend", "0.23.0.post1", ("transformers==5.5.4",), "needs CANN")
    first = write([p], tmp_path / "a")[0].read_bytes()
    second = write([p], tmp_path / "b")[0].read_bytes()
    assert first == second and p.filename == "vllm_ascend-0.23.0.post1-py3-none-any.whl"


def test_the_base_packages_the_lock_replaces_are_listed() -> None:
    lock = {"pip": "26.3", "numpy": "2.2.6", "torch": "2.10.0"}
    assert install_check.base_replaced(lock, {"pip": "23.0.1", "numpy": "2.2.6", "te": "0.4.0"}) == [
        "pip 23.0.1 → 26.3"
    ]
