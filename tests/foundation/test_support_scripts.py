"""The build helpers that run inside every image (images/support), run here with bash as the image runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
XCFORGE_ENV = ROOT / "images" / "support" / "xcforge-env"


def _run_env(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    return subprocess.run(
        ["bash", str(XCFORGE_ENV), *argv], capture_output=True, text=True, env={**base, **(env or {})}, check=False
    )


def test_env_scripts_get_their_own_arguments_not_the_launchers(tmp_path: Path) -> None:
    # CANN's set_env.sh parses its arguments: with a bare `. script` it would get `serve --port 8000`.
    seen = tmp_path / "seen"
    script = tmp_path / "set_env.sh"
    script.write_text(f'echo "$#:$*" >> {seen}\n')
    listing = tmp_path / "env-scripts"
    listing.write_text(f"{script}\n{script} --cxx_abi=1\n{tmp_path / 'absent.sh'}\n")
    proc = _run_env(
        tmp_path, "sh", "-c", 'echo "$XCFORGE_ENV_SOURCED|$XCFORGE_ENV_MISSING"', "serve", "--port", "8000",
        env={"XCFORGE_ENV_SCRIPTS": str(listing)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert seen.read_text().splitlines() == ["0:", "1:--cxx_abi=1"]
    assert proc.stdout.strip() == f"{script}:{script}|{tmp_path / 'absent.sh'}"


def test_platform_preload_goes_ahead_of_the_images_own(tmp_path: Path) -> None:
    preload = tmp_path / "preload"
    preload.write_text("/opt/venv/lib/libiomp5.so\n")
    proc = _run_env(
        tmp_path, "sh", "-c", 'echo "$LD_PRELOAD"',
        env={"XCFORGE_PRELOAD_FILE": str(preload), "LD_PRELOAD": "/usr/local/lib/libtcmalloc_minimal.so.4",
             "XCFORGE_ENV_SCRIPTS": str(tmp_path / "none")},
    )  # fmt: skip
    # (the preloaded path does not exist here: the dynamic loader only warns, and sh still runs)
    assert proc.stdout.strip().endswith("/opt/venv/lib/libiomp5.so:/usr/local/lib/libtcmalloc_minimal.so.4")


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to take an unknown UID"
)
def test_an_arbitrary_uid_gets_a_home_and_a_user_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    tmp_path.chmod(0o755)
    proc = subprocess.run(
        ["setpriv", "--reuid", "54321", "--regid", "0", "--clear-groups",
         "env", "-i", f"PATH={os.environ['PATH']}", "HOME=/", f"XCFORGE_HOME={home}",
         f"XCFORGE_ENV_SCRIPTS={tmp_path / 'none'}", "bash", str(XCFORGE_ENV),
         "python3", "-c", "import getpass, os; print(getpass.getuser(), os.path.expanduser('~'))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["xcforge-54321", str(home)]


def _apt_mirror_sed(dockerfile: Path) -> str:
    for line in dockerfile.read_text().splitlines():
        if line.strip().startswith('sed -Ei "s#'):
            return line.strip().removeprefix("sed -Ei ").rsplit(" \\", 1)[0].strip('"')
    raise AssertionError(f"{dockerfile}: no APT_MIRROR sed")


NVIDIA_LINE = "deb [signed-by=/k.gpg] https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /"


def test_apt_mirror_rewrites_the_distribution_and_keeps_vendor_repositories(tmp_path: Path) -> None:
    # vLLM's CUDA base lists NVIDIA's repository in sources.list.d; a mirror of Ubuntu does not carry it.
    sources = tmp_path / "sources"
    sources.write_text(
        "deb http://archive.ubuntu.com/ubuntu jammy main\n"
        "deb [signed-by=/k.gpg] http://cn.archive.ubuntu.com/ubuntu jammy-updates main\n"
        "URIs: http://deb.debian.org/debian\n"
        f"{NVIDIA_LINE}\n"
        "deb https://dl.mthreads.com/repo/repository/ubuntu2204/ ./\n"
    )
    expression = _apt_mirror_sed(ROOT / "images" / "cuda" / "Dockerfile").replace(
        "${APT_MIRROR}", "http://mirror.example"
    )
    subprocess.run(["sed", "-Ei", expression, str(sources)], check=True)
    assert sources.read_text().splitlines() == [
        "deb http://mirror.example/ubuntu jammy main",
        "deb [signed-by=/k.gpg] http://mirror.example/ubuntu jammy-updates main",
        "URIs: http://mirror.example/debian",
        NVIDIA_LINE,
        "deb https://dl.mthreads.com/repo/repository/ubuntu2204/ ./",
    ]
