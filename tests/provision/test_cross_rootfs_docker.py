"""The foreign stand-in rootfs derived without emulation (xcforge.provision.cross_rootfs), against the
real Debian archive: dpkg, apt and Python work in it under QEMU, and it equals an emulated mmdebstrap
bootstrap of the same archive file for file."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from xcforge.provision import cross_rootfs, standin
from xcforge.shell import DOCKER

pytestmark = pytest.mark.docker

NATIVE = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
FOREIGN = "arm64" if NATIVE == "amd64" else "amd64"
# What an emulated bootstrap and the derivation may write differently, each for a reason:
KNOWN_DIFFERENCES = {
    "var/lib/dpkg/status-old",  # dpkg's previous status; the derivation writes the current one
    "dev",  # an empty directory the native mmdebstrap output keeps (the runtime mounts /dev)
}


@pytest.fixture(scope="module")
def native_rootfs() -> Path:
    sources = standin.host_sources()
    rootfs = standin.cached_rootfs(NATIVE, standin.CACHE_DIR, standin.recipe(NATIVE, sources)[1])
    if rootfs is None:
        pytest.fail(f"no cached {NATIVE} stand-in rootfs in {standin.CACHE_DIR}: run scripts/provision.sh")
    return rootfs.tarball


@pytest.fixture(scope="module")
def derived(native_rootfs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("derived") / f"rootfs-{FOREIGN}.tar"
    swapped = cross_rootfs.derive_rootfs(native_rootfs, FOREIGN, standin.host_sources(), out)
    assert "libc6" in swapped and "python3.11-minimal" in swapped and "tzdata" not in swapped
    return out


def test_derived_rootfs_runs_dpkg_apt_and_python_under_emulation(derived: Path) -> None:
    image = f"xcforge-test-cross-rootfs:{uuid.uuid4().hex[:8]}"
    subprocess.run([DOCKER, "import", "--platform", f"linux/{FOREIGN}", str(derived), image], check=True, timeout=300)
    script = (
        "set -e; uname -m; dpkg --print-architecture; dpkg --audit; dpkg --verify; echo verified; "
        "python3 -c 'import sysconfig, ssl, sqlite3, venv; print(sysconfig.get_config_var(\"MULTIARCH\"))'; "
        "python3 -m venv /tmp/venv && /tmp/venv/bin/pip --version >/dev/null && echo venv; "
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends libnuma1 >/dev/null && "
        "dpkg-query -W -f '${Architecture}\\n' libnuma1"
    )
    try:
        result = subprocess.run(
            [DOCKER, "run", "--rm", "--platform", f"linux/{FOREIGN}", image, "bash", "-c", script],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
    finally:
        subprocess.run([DOCKER, "image", "rm", "-f", image], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    machine = {"arm64": "aarch64", "amd64": "x86_64"}[FOREIGN]
    assert result.stdout.split() == [machine, FOREIGN, "verified", f"{machine}-linux-gnu", "venv", FOREIGN]


def _index(tarball: Path) -> dict[str, tuple]:
    """Every member: type, mode, owner, link target, and the content's hash (a hard link's: its target's)."""
    entries: dict[str, tuple] = {}
    hashes: dict[str, str] = {}
    with tarfile.open(tarball) as tar:
        for member in tar:
            name = member.name.removeprefix("./").rstrip("/") or "."
            if member.isfile():
                digest = hashlib.sha256(tar.extractfile(member).read()).hexdigest()  # type: ignore[union-attr]
                hashes[name] = digest
                entries[name] = ("file", member.mode, member.uid, member.gid, digest)
            elif member.islnk():
                target = hashes[member.linkname.removeprefix("./")]
                entries[name] = ("file", member.mode, member.uid, member.gid, target)
            else:
                entries[name] = (member.type, member.mode, member.uid, member.gid, member.linkname)
    return entries


@pytest.mark.slow
def test_derived_rootfs_equals_an_emulated_bootstrap(derived: Path, tmp_path: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        pytest.fail("mmdebstrap is not installed: run scripts/provision.sh")
    sources = standin.host_sources()
    args, _ = standin.recipe(FOREIGN, sources)
    emulated = tmp_path / f"emulated-{FOREIGN}.tar"
    subprocess.run([*args, "--quiet", standin.SUITE, str(emulated), str(sources)], check=True, timeout=1800)

    ours, theirs = _index(derived), _index(emulated)
    only_ours = sorted(set(ours) - set(theirs) - KNOWN_DIFFERENCES)
    only_theirs = sorted(set(theirs) - set(ours) - KNOWN_DIFFERENCES)
    differ = sorted(n for n in set(ours) & set(theirs) - KNOWN_DIFFERENCES if ours[n] != theirs[n])
    assert (only_ours, only_theirs, differ) == ([], [], []), (
        f"only derived: {only_ours[:20]}; only emulated: {only_theirs[:20]}; "
        f"differ: {[(n, ours[n], theirs[n]) for n in differ[:10]]}"
    )
    assert len(ours) > 5000  # a whole rootfs was compared, not an empty one
