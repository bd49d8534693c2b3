"""What a bundle carries, read from the registry: each image's manifest tree and every tag that
belongs to a digest of it (signatures `.sig`/`.sm2`, attestations `.att`/`.sm2att`, SBOMs `.sbom`,
the referrers fallback index) with their own trees — the same set `promote` copies.

Manifests are read into memory (they are small and the bundle manifest must list them before the
first blob is written); blobs are only listed here, with where to download them from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ocicore.registry import (
    Manifest,
    Reference,
    RegistryClient,
    RegistryNotFound,
    blob_descriptors,
    manifest_children,
)
from signing.promote import related_tags
from xcforge.errors import ConfigError


@dataclass(frozen=True)
class Source:
    """One image to carry: `repository` is host/path, `tags` the names it is published under."""

    reference: Reference
    tags: tuple[str, ...] = ()
    target: str = ""

    @property
    def repository(self) -> str:
        return self.reference.name


@dataclass
class Collected:
    images: list[dict[str, Any]] = field(default_factory=list)
    tags: list[dict[str, Any]] = field(default_factory=list)
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)  # digest → descriptor + repositories
    manifest_data: dict[str, bytes] = field(default_factory=dict)
    manifest_objects: dict[str, Manifest] = field(default_factory=dict)
    blobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # digest → size + repositories
    origin: dict[str, tuple[RegistryClient, str]] = field(default_factory=dict)  # blob → where to read it

    def _note(self, table: dict[str, dict[str, Any]], digest: str, repository: str, **fields: Any) -> None:
        entry = table.setdefault(digest, {"digest": digest, **fields, "repositories": []})
        if repository not in entry["repositories"]:
            entry["repositories"].append(repository)


def collect(sources: list[Source], *, insecure: bool = False) -> Collected:
    out = Collected()
    clients: dict[str, RegistryClient] = {}
    for source in sources:
        ref = source.reference
        if ref.digest is None:
            raise ConfigError(f"bundle carries digests: {ref} has none; use {ref.name}@sha256:...")
        client = clients.setdefault(ref.registry, RegistryClient(ref.registry, insecure=insecure))
        try:
            top = _tree(out, client, ref.repository, source.repository, ref.digest)
        except RegistryNotFound:
            raise ConfigError(
                f"{ref}: not in the registry; push it first (build with --push) or name an image that is there"
            ) from None
        out.images.append(
            {
                "repository": source.repository,
                "tags": list(source.tags),
                "digest": ref.digest,
                "mediaType": top["mediaType"],
                "size": top["size"],
                "target": source.target,
            }
        )
        digests = _digests_in_tree(out, ref.digest)
        for tag in related_tags(client.list_tags(ref.repository), digests):
            digest = client.resolve(ref.repository, tag)
            entry = _tree(out, client, ref.repository, source.repository, digest)
            out.tags.append({"repository": source.repository, "tag": tag, **entry})
    return out


def _tree(out: Collected, client: RegistryClient, repository: str, name: str, digest: str) -> dict[str, Any]:
    """Read one manifest and everything below it into `out` (once per repository: the far side needs
    each blob in every repository that references it); its descriptor."""
    manifest = out.manifest_objects.get(digest) or client.get_manifest(repository, digest)
    out.manifest_objects[digest] = manifest
    out.manifest_data[digest] = manifest.data
    descriptor = manifest.descriptor()
    entry = out.manifests.get(digest)
    if entry is not None and name in entry["repositories"]:
        return descriptor
    out._note(out.manifests, digest, name, mediaType=manifest.media_type, size=len(manifest.data))
    if manifest.is_index:
        for child in manifest_children(manifest):
            _tree(out, client, repository, name, child["digest"])
    for blob in blob_descriptors(manifest):
        out._note(out.blobs, blob["digest"], name, size=int(blob["size"]))
        out.origin.setdefault(blob["digest"], (client, repository))
    return descriptor


def _digests_in_tree(out: Collected, digest: str) -> list[str]:
    found = [digest]
    manifest = out.manifest_objects[digest]
    if manifest.is_index:
        for child in manifest_children(manifest):
            found += _digests_in_tree(out, child["digest"])
    return found
