"""Fixtures for the transfer tests: a real registry holding a signed, multi-platform image with real
(gzip tar) layers, SM2 and cosign keys written as files, and a second, empty registry to import into."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ocicore.registry import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, RegistryClient, canonical_json, sha256_digest
from signing.cosign_keys import CosignPrivateKey
from signing.sign import sign_digest
from signing.sm2_keys import Sm2PrivateKey
from tests.registry_process import RegistryProcess

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class Keys:
    sm2: Sm2PrivateKey
    cosign: CosignPrivateKey
    sm2_key: Path  # private key files (unencrypted: tests only) and public ones
    cosign_key: Path
    sm2_pub: Path
    cosign_pub: Path


def write_keys(folder: Path) -> Keys:
    """A fresh SM2 and cosign key pair, written as files into folder (tests elsewhere use it too)."""
    sm2, cosign = Sm2PrivateKey.generate(), CosignPrivateKey.generate()
    files = {
        "sm2.key": sm2.to_pem(None),
        "sm2.pub": sm2.public_key.to_pem(),
        "cosign.key": cosign.to_cosign_pem(""),
        "cosign.pub": cosign.public_key.to_pem(),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return Keys(sm2, cosign, folder / "sm2.key", folder / "cosign.key", folder / "sm2.pub", folder / "cosign.pub")


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> Keys:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def other_keys(tmp_path_factory) -> Keys:
    return write_keys(tmp_path_factory.mktemp("other-keys"))


def real_layer(files: dict[str, bytes]) -> tuple[bytes, str]:
    """A gzip'd tar layer and its diff_id (what docker load checks against the config)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    plain = raw.getvalue()
    return gzip.compress(plain, mtime=0), sha256_digest(plain)


@dataclass(frozen=True)
class Published:
    registry: str
    repository: str
    digest: str
    children: tuple[str, ...]
    shared_layer: str

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.digest}"


def push_image(client: RegistryClient, repository: str, tag: str, *, extra: bytes = b"", size: int = 4096) -> Published:
    """An index over linux/amd64 and linux/arm64 whose manifests share one base layer (as our targets
    share the engine's) plus a layer of their own; `extra` changes the own layers (a new build)."""
    base_layer, base_diff = real_layer({"etc/xcforge-base": b"base\n" * (size // 5)})
    base_digest = client.push_blob(repository, base_layer)
    children = []
    for arch in ("amd64", "arm64"):
        own, own_diff = real_layer({f"opt/{arch}": os.urandom(size) + extra})
        config = canonical_json(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Cmd": ["/bin/true"]},
                "rootfs": {"type": "layers", "diff_ids": [base_diff, own_diff]},
            }
        )
        manifest = canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": OCI_CONFIG,
                    "digest": client.push_blob(repository, config),
                    "size": len(config),
                },
                "layers": [
                    {"mediaType": LAYER_GZIP, "digest": base_digest, "size": len(base_layer)},
                    {"mediaType": LAYER_GZIP, "digest": client.push_blob(repository, own), "size": len(own)},
                ],
            }
        )
        digest = client.put_manifest(repository, sha256_digest(manifest), manifest, OCI_MANIFEST)
        children.append(({"os": "linux", "architecture": arch}, digest, len(manifest)))
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": d, "size": n, "platform": platform} for platform, d, n in children
            ],
        }
    )
    digest = client.put_manifest(repository, tag, index, OCI_INDEX)
    return Published(client.registry, repository, digest, tuple(d for _, d, _ in children), base_digest)


@pytest.fixture
def source() -> Iterator[RegistryProcess]:
    with RegistryProcess() as process:
        yield process


@pytest.fixture
def inner() -> Iterator[RegistryProcess]:
    """The registry inside the air-gapped network."""
    with RegistryProcess() as process:
        yield process


@pytest.fixture
def signed(source, keys) -> Published:
    client = RegistryClient(source.address)
    image = push_image(client, "xcforge/vllm-cpu", "0.32.0-cpu")
    sign_digest(image.name, image.digest, sm2_key=keys.sm2, cosign_key=keys.cosign, client=client)
    sign_digest(image.name, image.children[0], sm2_key=keys.sm2, client=client)
    return image


@pytest.fixture(scope="session")
def cosign_bin() -> str:
    """The cosign binary (provision.sh installs it on Debian), or a visible skip elsewhere."""
    import shutil

    path = shutil.which("cosign")
    if path is None:
        if Path("/etc/debian_version").exists():
            pytest.fail("the cosign binary is missing; scripts/provision.sh installs it (Debian trixie's cosign)")
        pytest.skip("no cosign binary on this system (install cosign to run the independent verification)")
    return path


def tags_of(client: RegistryClient, repository: str) -> list[str]:
    try:
        return client.list_tags(repository)
    except Exception:
        return []


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
