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
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ocicore.layout import OciArchive
from ocicore.media import MANIFEST_MEDIA_TYPES
from ocicore.registry import RegistryClient, parse_reference

_UPLOADS = 3  # concurrent blob uploads
_BLOCK = 1 << 20


class _BlobRange:
    """A blob of the archive as an upload body: its own file handle, 1 MiB blocks, len() for the
    Content-Length (urllib3 would read a file object 16 KiB at a time)."""

    def __init__(self, archive: Path, member: tarfile.TarInfo) -> None:
        self._fh = archive.open("rb")
        self._fh.seek(member.offset_data)
        self.size = member.size

    def __iter__(self) -> Iterator[bytes]:
        left = self.size
        while left > 0:
            block = self._fh.read(min(_BLOCK, left))
            if not block:
                raise OSError(f"{self._fh.name}: ends {left} bytes early")
            left -= len(block)
            yield block

    def __len__(self) -> int:
        return self.size

    def __enter__(self) -> _BlobRange:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


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
        blobs: dict[str, dict[str, Any]] = {}
        manifests: list[tuple[dict[str, Any], bytes, str]] = []  # children before their parents

        def walk(descriptor: dict[str, Any]) -> None:
            data = read_blob(descriptor["digest"])
            doc = json.loads(data)
            children = doc.get("manifests") or [doc.get("config"), *(doc.get("layers") or [])]
            for child in children:
                if not child or "urls" in child:
                    continue
                if child.get("mediaType") in MANIFEST_MEDIA_TYPES:
                    walk(child)
                else:
                    blobs.setdefault(child["digest"], child)
            manifests.append((descriptor, data, descriptor.get("mediaType") or doc.get("mediaType")))

        walk(top)
        members: dict[str, tarfile.TarInfo] = {}
        for blob in blobs:
            try:
                members[blob] = tar.getmember("blobs/" + blob.replace(":", "/", 1))
            except KeyError:
                raise ValueError(f"{archive}: blob {blob} missing") from None
        lock = threading.Lock()

        def upload(child: dict[str, Any]) -> None:
            if client.blob_exists(ref.repository, child["digest"]):
                with lock:
                    uploaded["present"] += 1
                return
            with _BlobRange(archive, members[child["digest"]]) as body:
                client.push_blob(ref.repository, body, child["digest"])
            with lock:
                uploaded["blobs"] += 1
                uploaded["bytes"] += int(child.get("size", 0))

        # A few blobs at once (bounded), each read through its own file handle: while this process reads
        # one, the registry receives, hashes and stores another. Manifests only once every blob is in.
        with ThreadPoolExecutor(max_workers=max(1, min(len(blobs), _UPLOADS))) as pool:
            list(pool.map(upload, blobs.values()))
        for descriptor, data, media_type in manifests:
            client.put_manifest(ref.repository, descriptor["digest"], data, media_type)
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
