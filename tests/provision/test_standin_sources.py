"""Which Debian apt sources the stand-in rootfs is built from: the machine's own on Debian,
$XCFORGE_DEBIAN_MIRROR elsewhere (GitHub's Ubuntu runners). No mmdebstrap, no network."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from xcforge.errors import ConfigError, EnvironmentProblem
from xcforge.provision import standin

MIRROR = "http://mirror.example/debian"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
UBUNTU = 'PRETTY_NAME="Ubuntu 24.04.2 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A fake machine: os-release, apt sources files and Debian's keyring under tmp_path."""
    monkeypatch.delenv(standin.MIRROR_ENV, raising=False)
    monkeypatch.setattr(standin, "_generated_sources", {})
    keyring = tmp_path / "debian-archive-keyring.gpg"
    keyring.write_bytes(b"keys")
    monkeypatch.setattr(standin, "DEBIAN_KEYRING", keyring)
    sources_d = tmp_path / "debian.sources"
    sources_list = tmp_path / "sources.list"
    monkeypatch.setattr(standin, "HOST_SOURCES", (sources_d, sources_list))
    os_release = tmp_path / "os-release"
    monkeypatch.setenv("XCFORGE_OS_RELEASE", str(os_release))

    return SimpleNamespace(keyring=keyring, sources_d=sources_d, sources_list=sources_list, os_release=os_release)


def test_debian_uses_its_own_sources(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.os_release.write_text(DEBIAN)
    machine.sources_d.write_text("Types: deb\nURIs: http://own.example/debian\nSuites: bookworm\n")
    assert standin.host_sources() == machine.sources_d
    # The variable is a fallback only: a Debian machine keeps its own mirror (and its stand-in recipe).
    monkeypatch.setenv(standin.MIRROR_ENV, MIRROR)
    assert standin.host_sources() == machine.sources_d


def test_unreadable_os_release_keeps_the_debian_behaviour(machine) -> None:
    machine.sources_list.write_text("deb http://own.example/debian bookworm main\n")
    assert standin.host_sources() == machine.sources_list


def test_debian_without_sources(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.os_release.write_text(DEBIAN)
    with pytest.raises(EnvironmentProblem, match=r"no Debian apt sources on this machine.*XCFORGE_DEBIAN_MIRROR"):
        standin.host_sources()
    monkeypatch.setenv(standin.MIRROR_ENV, MIRROR)
    assert standin.host_sources().name == "debian.sources"
    assert f"URIs: {MIRROR}\n" in standin.host_sources().read_text()


def test_ubuntu_needs_the_mirror_variable(machine) -> None:
    machine.os_release.write_text(UBUNTU)
    # Ubuntu's own sources must never be used for a Debian rootfs.
    machine.sources_list.write_text("deb http://ubuntu.example/ubuntu noble main universe\n")
    with pytest.raises(EnvironmentProblem) as info:
        standin.host_sources()
    assert "Ubuntu 24.04.2 LTS, not Debian" in info.value.message
    assert "set XCFORGE_DEBIAN_MIRROR" in info.value.message


def test_ubuntu_sources_from_the_mirror(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.os_release.write_text(UBUNTU)
    machine.sources_list.write_text("deb http://ubuntu.example/ubuntu noble main universe\n")
    monkeypatch.setenv(standin.MIRROR_ENV, MIRROR + "/")
    sources = standin.host_sources()
    # mmdebstrap names the file in the rootfs after this one: 0000debian.sources, as on Debian.
    assert sources.name == "debian.sources"
    lines = sources.read_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == [
        "Types: deb",
        f"URIs: {MIRROR}",
        "Suites: bookworm bookworm-updates",
        "Components: main",
        f"Signed-By: {machine.keyring}",
    ]
    assert standin.host_sources() == sources  # one file per process
    key = standin.recipe_key(["amd64", "arm64"], sources)
    monkeypatch.setenv(standin.MIRROR_ENV, "https://other.example/debian")
    assert standin.recipe_key(["amd64", "arm64"], standin.host_sources()) != key


@pytest.mark.parametrize("mirror", ["mirror.example/debian", "ftp://mirror.example/debian", "http://a b"])
def test_ubuntu_rejects_a_bad_mirror(machine, monkeypatch: pytest.MonkeyPatch, mirror: str) -> None:
    machine.os_release.write_text(UBUNTU)
    monkeypatch.setenv(standin.MIRROR_ENV, mirror)
    with pytest.raises(ConfigError, match="XCFORGE_DEBIAN_MIRROR"):
        standin.host_sources()


def test_ubuntu_needs_debian_keyring(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine.os_release.write_text(UBUNTU)
    monkeypatch.setenv(standin.MIRROR_ENV, MIRROR)
    machine.keyring.unlink()
    with pytest.raises(EnvironmentProblem, match="install debian-archive-keyring"):
        standin.host_sources()
