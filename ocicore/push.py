"""Push an OCI image layout (the archive buildx wrote) to a registry: by digest first, tags last.

Docker's built-in buildx driver cannot push by digest, and pushing tags straight from buildx would
publish a half-finished set when interrupted. So every build writes an OCI archive, and this module
uploads it: blobs, then child manifests, then the index by digest; only when all of that is in the
registry do the tags move, one small PUT each. The registry client retries 5xx/429/connection
errors with backoff.
"""

from __future__ import annotations

import json
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path

from ocicore.registry import RegistryClient, parse_reference

_MANIFEST_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}


class _Layout:
    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar

    def open_blob(self, digest: str):
        algo, hexdigest = digest.split(":", 1)
        member = self.tar.extractfile(f"blobs/{algo}/{hexdigest}")
        if member is None:
            raise FileNotFoundError(digest)
        return member

    def read_blob(self, digest: str) -> bytes:
        return self.open_blob(digest).read()

    def top(self) -> dict:
        index = self.tar.extractfile("index.json")
        assert index is not None
        return json.loads(index.read())["manifests"][0]


def push_layout(archive: Path, repository: str, tags: Iterable[str] = (), *, progress=None) -> str:
    """Upload the archive's image to `repository` (host/path); returns the top digest."""
    ref = parse_reference(repository)
    client = RegistryClient(ref.registry)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    with tarfile.open(archive) as tar:
        layout = _Layout(tar)
        top = layout.top()
        uploaded = {"blobs": 0, "bytes": 0, "present": 0}

        def push_manifest(descriptor: dict) -> None:
            data = layout.read_blob(descriptor["digest"])
            doc = json.loads(data)
            children = doc.get("manifests") or [doc.get("config"), *(doc.get("layers") or [])]
            for child in children:
                if not child or "urls" in child:
                    continue
                if child.get("mediaType") in _MANIFEST_TYPES:
                    push_manifest(child)
                    continue
                if client.blob_exists(ref.repository, child["digest"]):
                    uploaded["present"] += 1
                    continue
                client.push_blob(ref.repository, layout.open_blob(child["digest"]), child["digest"])
                uploaded["blobs"] += 1
                uploaded["bytes"] += int(child.get("size", 0))
            media_type = descriptor.get("mediaType") or doc.get("mediaType")
            client.put_manifest(ref.repository, descriptor["digest"], data, media_type)

        push_manifest(top)
        say(
            f"pushed {ref.registry}/{ref.repository}@{top['digest']}: {uploaded['blobs']} blobs "
            f"({uploaded['bytes'] / 2**20:.1f} MiB) uploaded, {uploaded['present']} already there"
        )
        data = layout.read_blob(top["digest"])
        for tag in tags:
            client.put_manifest(ref.repository, tag, data, top.get("mediaType") or json.loads(data)["mediaType"])
            say(f"tagged {ref.registry}/{ref.repository}:{tag}")
    return top["digest"]
