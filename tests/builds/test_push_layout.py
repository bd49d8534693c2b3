"""Publishing an OCI archive: blobs and manifests first, tags last — so a registry that dies in the
middle of a push leaves no tag behind, and the next push resumes where it stopped.

Runs against a real registry process (no docker engine needed)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest
import requests

from ocicore.errors import RegistryError
from ocicore.push import push_layout
from tests.registry_process import RegistryProcess

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_layout(path: Path, layers: int = 8, layer_size: int = 2 * 2**20) -> str:
    """A one-platform OCI image layout archive with random layers; returns the index digest."""
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> dict:
        digest = _digest(data)
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    config = add(json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode())
    layer_descs = [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **add(os.urandom(layer_size))}
        for _ in range(layers)
    ]
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": layer_descs,
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                {"mediaType": MANIFEST, **add(manifest), "platform": {"os": "linux", "architecture": "amd64"}}
            ],
        }
    ).encode()
    top = add(index)
    with tarfile.open(path, "w") as tar:

        def put(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        put("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        put("index.json", json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": INDEX, **top}]}).encode())
        for digest, data in blobs.items():
            put(f"blobs/sha256/{digest.split(':')[1]}", data)
    return top["digest"]


def _tags(address: str, repo: str) -> list[str]:
    response = requests.get(f"http://{address}/v2/{repo}/tags/list", timeout=10)
    return [] if response.status_code == 404 else (response.json().get("tags") or [])


def test_push_then_tags(tmp_path):
    archive = tmp_path / "image.oci.tar"
    digest = write_layout(archive, layers=3, layer_size=1024)
    with RegistryProcess() as registry:
        pushed = push_layout(archive, f"{registry.address}/team/app", ["1.0", "1.0-abc"])
        assert pushed == digest
        assert sorted(_tags(registry.address, "team/app")) == ["1.0", "1.0-abc"]
        response = requests.get(
            f"http://{registry.address}/v2/team/app/manifests/1.0", headers={"Accept": INDEX}, timeout=10
        )
        assert _digest(response.content) == digest


def test_registry_dying_mid_push_leaves_no_tag_and_the_next_push_resumes(tmp_path):
    archive = tmp_path / "image.oci.tar"
    write_layout(archive)
    registry = RegistryProcess(access_log=True).start()
    try:
        uploads = threading.Event()

        def kill_after_three_blob_uploads() -> None:
            seen = 0
            for line in registry.process.stdout:  # the registry's access log
                if "PUT /v2/team/app/blobs/uploads/" in line:
                    seen += 1
                    if seen == 3:
                        registry.kill()
                        uploads.set()
                        return

        watcher = threading.Thread(target=kill_after_three_blob_uploads, daemon=True)
        watcher.start()
        with pytest.raises(RegistryError) as info:
            push_layout(archive, f"{registry.address}/team/app", ["1.0"])
        assert uploads.is_set()
        assert registry.address in info.value.message and "attempts" in info.value.message

        # The same storage, back up: blobs that made it are there, but no tag points anywhere.
        registry.start()
        assert _tags(registry.address, "team/app") == []
        messages: list[str] = []
        push_layout(archive, f"{registry.address}/team/app", ["1.0"], progress=messages.append)
        assert _tags(registry.address, "team/app") == ["1.0"]
        assert "3 already there" in messages[0] or "already there" in messages[0], messages
    finally:
        registry.stop()
