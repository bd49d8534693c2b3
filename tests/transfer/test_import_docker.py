"""import --docker: a bundle loaded into the real engine, every platform, under its tags.

Docker-marked: it needs the engine scripts/provision.sh starts (containerd image store, which keeps
all platforms of an index and reports the index digest as the image ID).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from ocicore.registry import RegistryClient
from tests.transfer.conftest import push_image
from tests.transfer.test_bundle import bundle, run

pytestmark = pytest.mark.docker


def _docker(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120)


def test_import_into_docker_loads_every_platform_under_its_tag(tmp_path, source, keys, capsys):
    tag = f"airgap-{uuid.uuid4().hex[:8]}"
    image = push_image(RegistryClient(source.address), "xcforge/vllm-cpu", tag)
    out = bundle(tmp_path, keys, f"{image.name}:{tag}@{image.digest}", capsys=capsys)
    name = f"{image.name}:{tag}"
    try:
        code, stdout, err = run(
            "import", str(out.with_name("b.tar")), "--docker", "--sm2-key", str(keys.sm2_pub), "--no-audit",
            capsys=capsys,
        )  # fmt: skip
        assert code == 0, err
        assert f"loaded {name}" in stdout
        inspected = _docker("image", "inspect", name)
        assert inspected.returncode == 0, inspected.stderr
        assert json.loads(inspected.stdout)[0]["Id"] == image.digest  # the signed index itself, not a copy
        # Every platform's manifest and layers are in the engine's content store, not just the host's.
        ctr = shutil.which("ctr")
        if ctr is None:
            pytest.skip("no ctr (containerd's CLI) to look into the engine's content store")
        for child in (*image.children, image.shared_layer):
            held = subprocess.run([ctr, "-n", "moby", "content", "get", child], capture_output=True)
            assert held.returncode == 0, f"{child} was not loaded: {held.stderr}"
    finally:
        _docker("image", "rm", "-f", name)


def test_import_into_docker_refuses_a_tampered_bundle_and_loads_nothing(tmp_path, source, keys, capsys):
    tag = f"airgap-{uuid.uuid4().hex[:8]}"
    image = push_image(RegistryClient(source.address), "xcforge/vllm-cpu", tag)
    out = bundle(tmp_path, keys, f"{image.name}:{tag}@{image.digest}", capsys=capsys)
    tar = out.with_name("b.tar")
    data = bytearray(tar.read_bytes())
    data[-4096] ^= 0xFF  # inside the last blob's data (the tar's end is two zero blocks + padding)
    tar.write_bytes(bytes(data))
    code, _, err = run("import", str(tar), "--docker", "--sm2-key", str(keys.sm2_pub), "--no-audit", capsys=capsys)
    assert code == 11, err
    assert _docker("image", "inspect", f"{image.name}:{tag}").returncode != 0
