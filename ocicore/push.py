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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ocicore.layout import OciArchive
from ocicore.media import MANIFEST_MEDIA_TYPES
from ocicore.registry import RegistryClient, parse_reference


def push_layout(
    archive: Path, repository: str, tags: Iterable[str] = (), *, progress: Callable[[str], None] | None = None
) -> str:
    """Upload the archive's image to `repository` (host/path); returns the top digest."""
    ref = parse_reference(repository)
    client = RegistryClient(ref.registry)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    reader = OciArchive(archive)
    with tarfile.open(archive) as tar:
        top = reader.top_descriptor(tar)

        def read_blob(digest: str) -> bytes:
            return reader.open_blob(tar, digest).read()

        uploaded = {"blobs": 0, "bytes": 0, "present": 0}

        def push_manifest(descriptor: dict[str, Any]) -> None:
            data = read_blob(descriptor["digest"])
            doc = json.loads(data)
            children = doc.get("manifests") or [doc.get("config"), *(doc.get("layers") or [])]
            for child in children:
                if not child or "urls" in child:
                    continue
                if child.get("mediaType") in MANIFEST_MEDIA_TYPES:
                    push_manifest(child)
                    continue
                if client.blob_exists(ref.repository, child["digest"]):
                    uploaded["present"] += 1
                    continue
                client.push_blob(ref.repository, reader.open_blob(tar, child["digest"]), child["digest"])
                uploaded["blobs"] += 1
                uploaded["bytes"] += int(child.get("size", 0))
            media_type: str = descriptor.get("mediaType") or doc.get("mediaType")
            client.put_manifest(ref.repository, descriptor["digest"], data, media_type)

        push_manifest(top)
        say(
            f"pushed {ref.registry}/{ref.repository}@{top['digest']}: {uploaded['blobs']} blobs "
            f"({uploaded['bytes'] / 2**20:.1f} MiB) uploaded, {uploaded['present']} already there"
        )
        data = read_blob(top["digest"])
        for tag in tags:
            client.put_manifest(ref.repository, tag, data, top.get("mediaType") or json.loads(data)["mediaType"])
            say(f"tagged {ref.registry}/{ref.repository}:{tag}")
    digest: str = top["digest"]
    return digest
