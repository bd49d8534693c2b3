"""Helpers shared by the signing tests: OpenSSL as an independent SM2 implementation."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from ocicore.registry import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, RegistryClient, canonical_json

DEFAULT_DISTID = "1234567812345678"


def openssl(*args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    return subprocess.run(["openssl", *args], input=input, capture_output=True, check=check)


def openssl_verify_sm2(
    workdir: Path, public_pem: bytes, message: bytes, signature: bytes, distid: str = DEFAULT_DISTID
) -> bool:
    return openssl_verify_sm2_many(workdir, public_pem, [(message, signature)], distid)[0]


def openssl_verify_sm2_many(
    workdir: Path, public_pem: bytes, items: Sequence[tuple[bytes, bytes]], distid: str = DEFAULT_DISTID
) -> list[bool]:
    """`openssl pkeyutl -verify ... -rawin -digest sm3 -pkeyopt distid:` for many items, one shell."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    pub = workdir / "verify-pub.pem"
    pub.write_bytes(public_pem)
    lines = []
    for i, (message, signature) in enumerate(items):
        (workdir / f"m{i}").write_bytes(message)
        (workdir / f"s{i}").write_bytes(signature)
        cmd = (
            f"openssl pkeyutl -verify -pubin -inkey {shlex.quote(str(pub))} -rawin -digest sm3 "
            f"-pkeyopt distid:{shlex.quote(distid)} -in {workdir}/m{i} -sigfile {workdir}/s{i} >/dev/null 2>&1"
        )
        lines.append(f"if {cmd}; then echo 1; else echo 0; fi")
    out = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True, check=True).stdout
    return [v == "1" for v in out.split()]


def openssl_sign_sm2_many(
    workdir: Path, private_pem: bytes, messages: Sequence[bytes], distid: str = DEFAULT_DISTID
) -> list[bytes]:
    """`openssl pkeyutl -sign -rawin -digest sm3 -pkeyopt distid:` for many messages, one shell."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "sign-key.pem"
    key.write_bytes(private_pem)
    lines = ["set -e"]
    for i, message in enumerate(messages):
        (workdir / f"m{i}").write_bytes(message)
        lines.append(
            f"openssl pkeyutl -sign -inkey {shlex.quote(str(key))} -rawin -digest sm3 "
            f"-pkeyopt distid:{shlex.quote(distid)} -in {workdir}/m{i} -out {workdir}/s{i}"
        )
    subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, check=True)
    return [(workdir / f"s{i}").read_bytes() for i in range(len(messages))]


@dataclass(frozen=True)
class PushedImage:
    registry: str
    repository: str
    digest: str  # the index, or the single manifest
    children: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.digest}"


def push_synthetic_image(
    client: RegistryClient, repository: str, *, index: bool = False, tag: str = "v1"
) -> PushedImage:
    """A small image without docker: config + one layer + manifest; or an index over two of them."""

    def one(platform: str) -> tuple[str, int]:
        config = canonical_json(
            {"architecture": platform, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}, "config": {}}
        )
        layer = f"layer for {platform} {os.urandom(8).hex()}".encode()
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
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": client.push_blob(repository, layer),
                        "size": len(layer),
                    }
                ],
            }
        )
        return client.put_manifest(repository, _digest_of(manifest), manifest, OCI_MANIFEST), len(manifest)

    if not index:
        digest, _ = one("amd64")
        client.put_manifest(repository, tag, client.get_manifest(repository, digest).data, OCI_MANIFEST)
        return PushedImage(client.registry, repository, digest)
    children = [(one(arch), arch) for arch in ("amd64", "arm64")]
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": d, "size": size, "platform": {"os": "linux", "architecture": arch}}
            for (d, size), arch in children
        ],
    }
    data = canonical_json(doc)
    digest = client.put_manifest(repository, tag, data, OCI_INDEX)
    return PushedImage(client.registry, repository, digest, tuple(d for (d, _), _ in children))


def _digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def cosign_verify(cosign_bin: str, public_key: Path, ref: str, *extra: str) -> subprocess.CompletedProcess:
    """The real cosign, offline, as docs/signing.md verifies against a loopback registry."""
    return subprocess.run(
        [
            cosign_bin,
            "verify",
            "--key",
            str(public_key),
            "--insecure-ignore-tlog",
            "--allow-insecure-registry",
            *extra,
            ref,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COSIGN_EXPERIMENTAL": "0"},
        timeout=120,
    )


def cosign_payloads(result: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else []
