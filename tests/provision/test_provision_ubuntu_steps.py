"""The decisions of provision.sh's Ubuntu steps, run against stub apt/dpkg/systemctl/docker/gpg commands.

provision.sh is sourced (it then only defines its functions) in a bash harness whose PATH starts with
one stub script that plays apt-get, apt-cache, dpkg-query, systemctl, docker, dockerd and gpg, keeping
its state (installed and available packages, engine up/down, image store, ...) in files under tmp_path
and logging every call. Nothing on the machine is touched. This checks the logic only: what real
Ubuntu packages, systemd and Docker CE do was never run here (docs/provisioning.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

STUB = r"""#!/usr/bin/env bash
name=$(basename "$0")
state=$STUB_DIR
echo "$name $*" >>"$state/calls"
has() { grep -qx -- "$1" "$state/$2" 2>/dev/null; }
up() { [[ $(cat "$state/docker_state" 2>/dev/null) == up ]]; }
case $name in
    dpkg-query)
        pkg=${!#}
        if [[ $* == *Status-Abbrev* ]]; then
            if has "$pkg" installed; then echo "ii "; fi
            exit 0
        fi
        if has "$pkg" installed; then echo "1.0-stub"; else exit 1; fi
        ;;
    apt-cache)
        if has "$2" available; then cand=1.0-stub; else cand='(none)'; fi
        printf '%s:\n  Installed: (none)\n  Candidate: %s\n' "$2" "$cand"
        ;;
    apt-get)
        [[ $1 == install ]] || exit 0
        [[ -x $state/policy-rc.d ]] && echo "policy-rc.d in place" >>"$state/calls"
        shift
        skip=0
        for arg; do
            if ((skip)); then skip=0; continue; fi
            case $arg in
                -o) skip=1 ;;
                -*) ;;
                *)
                    echo "$arg" >>"$state/installed"
                    case $arg in
                        docker.io) echo 26.1.3 >"$state/docker_version" ;;
                        docker-buildx) echo yes >"$state/buildx" ;;
                    esac
                    ;;
            esac
        done
        ;;
    systemctl)
        if [[ $2 == docker && ($1 == start || $1 == restart) ]]; then
            echo up >"$state/docker_state"
            if [[ -f $state/store_stuck ]]; then
                :
            elif grep -q '"containerd-snapshotter": true' "$state/daemon.json" 2>/dev/null; then
                echo containerd >"$state/store"
            else
                echo overlay2 >"$state/store"
            fi
        fi
        ;;
    docker)
        case "$1 $2" in
            "buildx version")
                [[ $(cat "$state/buildx" 2>/dev/null) == yes ]] || exit 1
                echo "github.com/docker/buildx v0.20.1 stub"
                ;;
            "buildx inspect") echo "Platforms: linux/amd64, linux/amd64/v2, linux/arm64" ;;
            "version -f") up && cat "$state/docker_version" ;;
            "info -f")
                up || exit 1
                store=$(cat "$state/store" 2>/dev/null)
                if [[ $3 == *DriverStatus* ]]; then
                    if [[ $store == containerd ]]; then
                        echo '[["driver-type","io.containerd.snapshotter.v1"]]'
                    else
                        echo '[["Backing Filesystem","extfs"]]'
                    fi
                else
                    echo "${store:-overlay2}"
                fi
                ;;
            "info "*) up ;;
            *) exit 0 ;;
        esac
        ;;
    dockerd) echo "Docker version $(cat "$state/docker_version"), build stub" ;;
    gpg)
        while read -r uid; do printf 'uid:-::::::::%s:\n' "$uid"; done <"$state/keys"
        ;;
esac
"""

HARNESS = r"""set -euo pipefail
fn=("$@")
set --
source "$REPO_ROOT/scripts/provision.sh"
OS_FAMILY=ubuntu OS_ID=ubuntu OS_VERSION_ID=24.04 OS_PRETTY="Ubuntu 24.04.2 LTS"
HOST_ARCH=amd64 FOREIGN_ARCH=arm64 PYTHON=python3
PROVISION_LOG=$STUB_DIR/provision.log
DAEMON_JSON=$STUB_DIR/daemon.json
DOCKER=$STUB_BIN/docker
POLICY_RC_D=$STUB_DIR/policy-rc.d
DEBIAN_KEYRING=$STUB_DIR/debian-archive-keyring.gpg
systemd_running() { [[ $STUB_SYSTEMD == 1 ]]; }
"${fn[@]}"
"""

REQUIRED = [
    "ca-certificates",
    "curl",
    "gpg",
    "jq",
    "iptables",
    "qemu-user-static",
    "binfmt-support",
    "docker-registry",
    "mmdebstrap",
    "debian-archive-keyring",
    "skopeo",
    "python3",
    "python3-venv",
]


@dataclass
class Ubuntu:
    """A stub Ubuntu 24.04 machine."""

    dir: Path
    bin: Path

    def set(self, name: str, value: str | list[str]) -> None:
        text = "\n".join(value) + "\n" if isinstance(value, list) else value + "\n"
        (self.dir / name).write_text(text)

    def run(self, *function: str, systemd: bool = True) -> subprocess.CompletedProcess[str]:
        (self.dir / "calls").write_text("")
        env = dict(os.environ)
        env.update(
            {
                "PATH": f"{self.bin}:{os.environ['PATH']}",
                "STUB_DIR": str(self.dir),
                "STUB_BIN": str(self.bin),
                "STUB_SYSTEMD": "1" if systemd else "0",
                "REPO_ROOT": str(REPO_ROOT),
            }
        )
        return subprocess.run(
            ["bash", str(self.dir / "harness.sh"), *function], capture_output=True, text=True, env=env, timeout=60
        )

    @property
    def calls(self) -> list[str]:
        return (self.dir / "calls").read_text().splitlines()

    def apt_calls(self) -> list[str]:
        return [c for c in self.calls if c.startswith("apt-get ")]

    def installed(self) -> list[str]:
        path = self.dir / "installed"
        return path.read_text().split() if path.exists() else []


@pytest.fixture
def ubuntu(tmp_path: Path) -> Ubuntu:
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    stub = bin_dir / "stub"
    stub.write_text(STUB)
    stub.chmod(0o755)
    for name in ("apt-get", "apt-cache", "dpkg-query", "systemctl", "docker", "dockerd", "gpg"):
        (bin_dir / name).symlink_to(stub)
    (state / "harness.sh").write_text(HARNESS)
    (state / "debian-archive-keyring.gpg").write_bytes(b"stub")
    machine = Ubuntu(state, bin_dir)
    # GitHub's runner: Docker CE 28 with buildx, running, classic store; universe enabled, no cosign.
    machine.set("available", [*REQUIRED, "arch-test", "docker.io", "docker-buildx"])
    machine.set("docker_state", "up")
    machine.set("docker_version", "28.0.4")
    machine.set("buildx", "yes")
    machine.set("store", "overlay2")
    return machine


# ---------------------------------------------------------------------------------------- apt


def test_fresh_install_takes_everything_from_ubuntu(ubuntu: Ubuntu) -> None:
    result = ubuntu.run("ubuntu_install_packages")
    assert result.returncode == 0, result.stderr
    update, install = ubuntu.apt_calls()
    assert update == "apt-get update -q"
    assert install.startswith("apt-get install -y -q --no-install-recommends ")
    assert sorted(ubuntu.installed()) == sorted([*REQUIRED, "arch-test"])
    assert "policy-rc.d in place" in ubuntu.calls  # the package's own registry must not start
    assert not (ubuntu.dir / "policy-rc.d").exists()  # and it is gone afterwards
    lines = result.stdout.splitlines()
    assert lines[0].startswith("apt packages:    installed ca-certificates ")
    assert lines[1].startswith("cosign:          skipped: no apt source of this machine offers cosign")


def test_second_run_calls_no_apt_get(ubuntu: Ubuntu) -> None:
    ubuntu.set("installed", [*REQUIRED, "arch-test"])
    result = ubuntu.run("ubuntu_install_packages")
    assert result.returncode == 0, result.stderr
    assert ubuntu.apt_calls() == []
    assert result.stdout.splitlines()[0] == "apt packages:    installed"


def test_cosign_is_installed_where_the_release_has_it(ubuntu: Ubuntu) -> None:
    ubuntu.set("installed", [*REQUIRED, "arch-test"])
    ubuntu.set("available", [*REQUIRED, "arch-test", "cosign"])
    result = ubuntu.run("ubuntu_install_packages")
    assert result.returncode == 0, result.stderr
    assert ubuntu.apt_calls()[0] == "apt-get update -q"
    assert ubuntu.apt_calls()[1].endswith(" cosign")
    assert "cosign:          1.0-stub" in result.stdout


def test_missing_optional_arch_test_is_a_note(ubuntu: Ubuntu) -> None:
    ubuntu.set("available", REQUIRED)
    result = ubuntu.run("ubuntu_install_packages")
    assert result.returncode == 0, result.stderr
    assert "arch-test" not in ubuntu.installed()
    assert "arch-test:       skipped: no apt source of this machine offers it" in result.stdout


def test_no_universe_is_a_clear_error(ubuntu: Ubuntu) -> None:
    ubuntu.set("available", [p for p in REQUIRED if p not in ("docker-registry", "mmdebstrap")])
    result = ubuntu.run("ubuntu_install_packages")
    assert result.returncode == 1
    assert result.stderr.startswith("provision: error: no apt source of this machine offers docker-registry mmdebstrap")
    assert "universe" in result.stderr
    assert ubuntu.apt_calls() == ["apt-get update -q"]


# ------------------------------------------------------------------------------------- docker


def test_preinstalled_docker_is_reused(ubuntu: Ubuntu) -> None:
    result = ubuntu.run("ubuntu_docker")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "docker:          reusing the installed Docker 28.0.4 (buildx v0.20.1)\n"
    assert ubuntu.apt_calls() == []


def test_stopped_docker_is_started_by_systemd_then_reused(ubuntu: Ubuntu) -> None:
    ubuntu.set("docker_state", "down")
    result = ubuntu.run("ubuntu_docker")
    assert result.returncode == 0, result.stderr
    assert "systemctl start docker" in ubuntu.calls
    assert "reusing the installed Docker 28.0.4" in result.stdout


@pytest.mark.parametrize(
    ("version", "buildx", "reason"),
    [("20.10.25", "yes", "engine 20.10.25 < 24"), ("28.0.4", "no", "no buildx plugin")],
)
def test_unusable_docker_is_replaced_by_ubuntus(ubuntu: Ubuntu, version: str, buildx: str, reason: str) -> None:
    ubuntu.set("docker_version", version)
    ubuntu.set("buildx", buildx)
    result = ubuntu.run("ubuntu_docker")
    assert result.returncode == 0, result.stderr
    assert ubuntu.apt_calls()[0] == "apt-get update -q"
    assert ubuntu.apt_calls()[1].endswith(" docker.io docker-buildx")
    assert "systemctl restart docker" in ubuntu.calls
    assert result.stdout.startswith(f"docker:          installed docker.io docker-buildx ({reason} before)")


def test_docker_that_stays_unusable_fails(ubuntu: Ubuntu) -> None:
    ubuntu.set("buildx", "no")
    ubuntu.set("available", [*REQUIRED, "docker.io"])
    result = ubuntu.run("ubuntu_docker")
    assert result.returncode == 1
    assert "no apt source of this machine offers docker-buildx" in result.stderr


# ------------------------------------------------------------------------------------- engine


# What provisioning leaves: the containerd store and an operator's (here: our) builder settings.
DAEMON_JSON_DONE = '{"features": {"containerd-snapshotter": true}, "builder": {"gc": {"enabled": true}}}\n'


def test_engine_gets_the_containerd_store_with_systemd(ubuntu: Ubuntu) -> None:
    (ubuntu.dir / "daemon.json").write_text('{"exec-opts": ["native.cgroupdriver=cgroupfs"]}\n')
    result = ubuntu.run("ubuntu_engine")
    assert result.returncode == 0, result.stderr
    assert "systemctl restart docker" in ubuntu.calls
    assert json.loads((ubuntu.dir / "daemon.json").read_text()) == {
        "exec-opts": ["native.cgroupdriver=cgroupfs"],
        "features": {"containerd-snapshotter": True},
        "builder": {"gc": {"enabled": True, "defaultKeepStorage": "40GB"}},  # BuildKit's cache, bounded
    }
    assert result.stdout.startswith("docker engine:   restarted by systemctl (")
    assert "containerd image store" in result.stdout

    again = ubuntu.run("ubuntu_engine")
    assert again.returncode == 0, again.stderr
    assert not any(c.startswith("systemctl") for c in ubuntu.calls)
    assert again.stdout == "docker engine:   running (28.0.4, containerd image store, systemd)\n"


def test_engine_restarts_when_the_store_is_classic_despite_daemon_json(ubuntu: Ubuntu) -> None:
    (ubuntu.dir / "daemon.json").write_text(DAEMON_JSON_DONE)
    result = ubuntu.run("ubuntu_engine")
    assert result.returncode == 0, result.stderr
    assert "systemctl restart docker" in ubuntu.calls
    assert "(classic image store)" in result.stdout


def test_engine_without_the_containerd_snapshotter_fails(ubuntu: Ubuntu) -> None:
    (ubuntu.dir / "store_stuck").write_text("")
    result = ubuntu.run("ubuntu_engine")
    assert result.returncode == 1
    assert "docker info shows no containerd snapshotter after systemctl restart docker" in result.stderr


def test_engine_without_systemd_takes_the_debian_background_path(ubuntu: Ubuntu) -> None:
    (ubuntu.dir / "daemon.json").write_text(DAEMON_JSON_DONE)
    ubuntu.set("store", "containerd")
    result = ubuntu.run("ubuntu_engine", systemd=False)
    assert result.returncode == 0, result.stderr
    assert not any(c.startswith("systemctl") for c in ubuntu.calls)
    assert result.stdout == "docker engine:   running (28.0.4, containerd image store)\n"


# ------------------------------------------------------------------------------------ keyring


def test_keyring_without_debian12_keys_is_refused(ubuntu: Ubuntu) -> None:
    ubuntu.set(
        "keys",
        [
            "Debian Archive Automatic Signing Key (11/bullseye) <ftpmaster@debian.org>",
            "Debian Stable Release Key (11/bullseye) <debian-release@lists.debian.org>",
        ],
    )
    result = ubuntu.run("ubuntu_check_keyring")
    assert result.returncode == 1
    assert "has no Debian 12 (or later) archive key" in result.stderr


def test_keyring_with_debian12_keys(ubuntu: Ubuntu) -> None:
    ubuntu.set("installed", ["debian-archive-keyring"])
    ubuntu.set(
        "keys",
        [
            "Debian Archive Automatic Signing Key (11/bullseye) <ftpmaster@debian.org>",
            "Debian Archive Automatic Signing Key (12/bookworm) <ftpmaster@debian.org>",
        ],
    )
    result = ubuntu.run("ubuntu_check_keyring")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "debian keyring:  debian-archive-keyring 1.0-stub (has Debian 12+ archive keys)\n"
