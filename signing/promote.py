"""Copy an image and its signatures from one repository to another (same or another registry).

Copied: the manifest tree by digest (index → manifests → config and layers, byte for byte, so the
digest is unchanged) and every tag that belongs to a digest of that tree: `sha256-<hex>.sig`,
`.sm2`, `.sm2att`, cosign's `.att`/`.sbom`, and the referrers fallback index `sha256-<hex>` with the bundles
it lists. Signature manifests already at the destination are merged, not overwritten.

Identity: copied signatures still name the *source* repository. verify.py rejects them under the
destination name unless the destination is re-signed (pass keys: promotion then signs the digest
for the destination's name) or the verifier allows the source name explicitly. See docs/signing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ocicore.registry import (
    INDEX_MEDIA_TYPES,
    OCI_MANIFEST,
    Manifest,
    Reference,
    RegistryClient,
    blob_descriptors,
    canonical_json,
    copy_blob,
    manifest_children,
    sha256_digest,
)
from signing.audit import AuditLog
from signing.cosign_keys import CosignPrivateKey
from signing.errors import InvalidSigningRequest
from signing.sign import SignatureRecord, sign
from signing.sm2_keys import Sm2PrivateKey
from signing.store import RegistryStore, signature_config_blob

_SIGNATURE_SUFFIXES = (".sig", ".sm2")
_RELATED_SUFFIXES = (*_SIGNATURE_SUFFIXES, ".att", ".sm2att", ".sbom")


@dataclass
class PromotionResult:
    source: str
    target: str
    digest: str
    manifests: int = 0
    blobs: int = 0
    tags: list[str] = field(default_factory=list)
    signatures: list[SignatureRecord] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"copied {self.source} -> {self.target}: {self.manifests} manifest(s), {self.blobs} blob(s)"]
        out += [f"copied tag {tag}" for tag in self.tags]
        out += [record.line() for record in self.signatures]
        return out


class _Copier:
    def __init__(self, source: RegistryClient, src_repo: str, target: RegistryClient, dst_repo: str) -> None:
        self.source, self.src_repo, self.target, self.dst_repo = source, src_repo, target, dst_repo
        self.copied: set[str] = set()
        self.blobs = 0

    def manifest_tree(self, digest: str) -> Manifest:
        """Copy one manifest and everything below it; returns the manifest."""
        manifest = self.source.get_manifest(self.src_repo, digest)
        if digest in self.copied:
            return manifest
        for child in manifest_children(manifest) if manifest.is_index else []:
            self.manifest_tree(child["digest"])
        for blob in blob_descriptors(manifest):
            copy_blob(self.source, self.src_repo, self.target, self.dst_repo, blob["digest"])
            self.blobs += 1
        if self.target.head_manifest(self.dst_repo, digest) is None:
            self.target.put_manifest(self.dst_repo, digest, manifest.data, manifest.media_type)
        self.copied.add(digest)
        return manifest

    def digests_in_tree(self, digest: str) -> list[str]:
        manifest = self.source.get_manifest(self.src_repo, digest)
        found = [digest]
        if manifest.is_index:
            for child in manifest_children(manifest):
                found += self.digests_in_tree(child["digest"])
        return found

    def tag(self, tag: str) -> None:
        """Copy a tag, merging signature manifests and referrers indexes already at the target."""
        manifest = self.manifest_tree(self.source.resolve(self.src_repo, tag))
        existing = self.target.head_manifest(self.dst_repo, tag)
        if existing is not None and existing[0] != manifest.digest:
            merged = _merge(manifest, self.target.get_manifest(self.dst_repo, tag))
            if merged is not None:
                data, media_type, config = merged
                if config is not None:
                    self.target.push_blob(self.dst_repo, config)
                self.target.put_manifest(self.dst_repo, tag, data, media_type)
                return
        self.target.put_manifest(self.dst_repo, tag, manifest.data, manifest.media_type)


def related_tags(tags: list[str], digests: list[str]) -> list[str]:
    """The tags that belong to these digests: signatures, attestations, SBOMs, the referrers fallback."""
    prefixes = {d.replace(":", "-", 1) for d in digests}
    out = []
    for tag in sorted(tags):
        base, _, suffix = tag.partition(".")
        if base in prefixes and (not suffix or f".{suffix}" in _RELATED_SUFFIXES):
            out.append(tag)
    return out


def merge_manifests(incoming: Manifest, present: Manifest) -> tuple[bytes, str, bytes | None] | None:
    """Public name of the union used when a copied signature tag meets one already there."""
    return _merge(incoming, present)


def _merge(incoming: Manifest, present: Manifest) -> tuple[bytes, str, bytes | None] | None:
    """Union of two signature manifests (layers) or two referrers indexes (entries).

    Returns (manifest bytes, media type, new config blob or None); None when they are neither.
    Every blob the union names is already at the target: its own, or copied with `incoming`.
    """
    new, old = incoming.json(), present.json()
    if incoming.media_type == OCI_MANIFEST and present.media_type == OCI_MANIFEST:
        key = "layers"
    elif incoming.media_type in INDEX_MEDIA_TYPES and present.media_type in INDEX_MEDIA_TYPES:
        key = "manifests"
    else:
        return None

    def ident(d: dict[str, Any]) -> tuple[str, str]:
        return d.get("digest", ""), canonical_json(d.get("annotations") or {}).decode()

    items = list(old.get(key) or [])
    seen = {ident(d) for d in items}
    items += [d for d in new.get(key) or [] if ident(d) not in seen]
    doc = {**old, key: items}
    if key == "manifests":
        return canonical_json(doc), present.media_type, None
    # A signature manifest's config lists its layers (store.py); rebuild it for the union.
    config = signature_config_blob([d.get("digest", "") for d in items])
    doc["config"] = {**doc.get("config", {}), "size": len(config), "digest": sha256_digest(config)}
    return canonical_json(doc), OCI_MANIFEST, config


def promote(
    source: str | Reference,
    target: str | Reference,
    *,
    sm2_key: Sm2PrivateKey | None = None,
    cosign_key: CosignPrivateKey | None = None,
    audit: AuditLog | None = None,
    source_client: RegistryClient | None = None,
    target_client: RegistryClient | None = None,
    insecure: bool = False,
) -> PromotionResult:
    """Copy `source` (`host/repo@sha256:...`) and its signature tags to `target` (`host/repo[:tag]`).

    With keys, the digest is then signed for the target's name as well.
    """
    src = source if isinstance(source, Reference) else Reference.parse(source)
    dst = target if isinstance(target, Reference) else Reference.parse(target)
    if src.digest is None:
        raise InvalidSigningRequest(f"promote copies a digest: use {src.name}@sha256:..., not a tag")
    if dst.digest is not None and dst.digest != src.digest:
        raise InvalidSigningRequest("the target cannot name a different digest")
    if src.name == dst.name:
        raise InvalidSigningRequest("source and target are the same repository")
    source_client = source_client or RegistryClient(src.registry, insecure=insecure)
    target_client = target_client or (
        source_client if dst.registry == src.registry else RegistryClient(dst.registry, insecure=insecure)
    )
    copier = _Copier(source_client, src.repository, target_client, dst.repository)
    top = copier.manifest_tree(src.digest)
    result = PromotionResult(str(src), dst.name + (f":{dst.tag}" if dst.tag else "") + f"@{src.digest}", src.digest)
    if dst.tag:
        target_client.put_manifest(dst.repository, dst.tag, top.data, top.media_type)
    result.manifests, result.blobs = len(copier.copied), copier.blobs  # the image itself; tags follow

    for tag in related_tags(source_client.list_tags(src.repository), copier.digests_in_tree(src.digest)):
        copier.tag(tag)
        result.tags.append(tag)

    if audit is not None:
        audit.record(
            "promote", digest=src.digest, subject=f"{src.name} -> {dst.name}", details={"tags": str(len(result.tags))}
        )
    if sm2_key is not None or cosign_key is not None:
        destination = RegistryStore(dst.with_tag(None).with_digest(None), target_client)
        result.signatures = sign(destination, src.digest, sm2_key=sm2_key, cosign_key=cosign_key, audit=audit)
    return result
