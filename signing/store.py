"""Where signatures live: tags next to the image in its registry, or files next to an OCI archive.

Registry (tag scheme — distribution 2.8 has no referrers API): `sha256-<hex>.sig` for cosign,
`sha256-<hex>.sm2` for SM2, each an OCI image manifest with one layer per signature (see
cosign_format.py and sm2_format.py). Signatures accumulate: a new one is appended as a layer, and
signing the same payload again with the same key changes nothing. Two writers racing on one tag
could drop each other's layer (cosign has the same read-modify-write); every write is read back and
retried until our layer is present.

Archive: `<archive>.signatures/sha256-<hex>.<scheme suffix>.json`, a JSON document holding the same
payloads and layer annotations (`DETACHED_MEDIA_TYPE`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ocicore.registry import (
    OCI_CONFIG,
    OCI_MANIFEST,
    RegistryClient,
    RegistryError,
    RegistryNotFound,
    canonical_json,
    is_digest,
    sha256_digest,
)
from signing import cosign_format, sm2_format
from signing.errors import SigningError
from signing.payload import SIMPLE_SIGNING_MEDIA_TYPE
from signing.signers import Signer

FORMATS: dict[str, ModuleType] = {cosign_format.SCHEME: cosign_format, sm2_format.SCHEME: sm2_format}
DETACHED_MEDIA_TYPE = "application/vnd.xcforge.detached-signatures.v1+json"
_MAX_PAYLOAD = 64 * 1024
_ZERO_TIME = "0001-01-01T00:00:00Z"  # what go-containerregistry writes into cosign's config


@dataclass(frozen=True)
class StoredSignature:
    """One signature layer as found: payload bytes and the layer's annotations."""

    scheme: str
    payload: bytes | None
    annotations: Mapping[str, str]
    location: str
    problem: str | None = None  # why the layer could not be read (then payload is None)


@dataclass(frozen=True)
class AttachResult:
    scheme: str
    key_id: str
    location: str
    added: bool  # False: this key had already signed this payload here


@dataclass
class SignatureManifest:
    layers: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


def format_for(scheme: str) -> ModuleType:
    try:
        return FORMATS[scheme]
    except KeyError:
        raise SigningError(f"unknown signature scheme {scheme!r} (known: {', '.join(FORMATS)})") from None


def digest_tag(digest: str, suffix: str) -> str:
    """`sha256:<hex>` → `sha256-<hex><suffix>`: cosign's tag-based discovery (SIGNATURE_SPEC), used for
    signatures, attestations and SBOMs alike."""
    if not is_digest(digest):
        raise SigningError(f"not a manifest digest: {digest!r}")
    return digest.replace(":", "-", 1) + suffix


def signature_tag(digest: str, scheme: str) -> str:
    """`sha256:<hex>` → `sha256-<hex>.sig` / `.sm2`."""
    return digest_tag(digest, format_for(scheme).TAG_SUFFIX)


def signature_config_blob(layer_digests: Sequence[str]) -> bytes:
    # The layout go-containerregistry's empty image gets once layers are appended (cosign's .sig).
    return canonical_json(
        {
            "architecture": "",
            "created": _ZERO_TIME,
            "history": [{"created": _ZERO_TIME} for _ in layer_digests],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": list(layer_digests)},
            "config": {},
        }
    )


def manifest_bytes(manifest: SignatureManifest, config: bytes) -> bytes:
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256_digest(config)},
        "layers": manifest.layers,
    }
    if manifest.annotations:
        doc["annotations"] = manifest.annotations
    return canonical_json(doc)


# ------------------------------------------------------------------------------------------ registry


def read_manifest(client: RegistryClient, repository: str, tag: str) -> SignatureManifest | None:
    try:
        doc = client.get_manifest(repository, tag, accept=(OCI_MANIFEST,)).json()
    except RegistryNotFound:
        return None
    except ValueError as exc:
        raise RegistryError(f"{client.registry}/{repository}:{tag} is not JSON ({exc})") from exc
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise RegistryError(f"{client.registry}/{repository}:{tag} is not an image manifest")
    return SignatureManifest(list(layers), dict(doc.get("annotations") or {}))


def read_signatures(client: RegistryClient, repository: str, digest: str, scheme: str) -> list[StoredSignature] | None:
    """Every signature layer under the scheme's tag; None when the tag does not exist."""
    tag = signature_tag(digest, scheme)
    manifest = read_manifest(client, repository, tag)
    if manifest is None:
        return None
    found = []
    for index, layer in enumerate(manifest.layers):
        location = f"{client.registry}/{repository}:{tag}#{index}"
        annotations = layer.get("annotations") if isinstance(layer, dict) else None
        annotations = {k: v for k, v in (annotations or {}).items() if isinstance(v, str)}
        payload, problem = None, None
        layer_digest = layer.get("digest") if isinstance(layer, dict) else None
        if not isinstance(layer_digest, str) or not is_digest(layer_digest):
            problem = "layer has no valid digest"
        elif layer.get("mediaType") != SIMPLE_SIGNING_MEDIA_TYPE:
            problem = f"layer media type {layer.get('mediaType')!r} is not a simple-signing payload"
        else:
            try:
                payload = client.get_blob(repository, layer_digest, max_size=_MAX_PAYLOAD)
            except RegistryError as exc:
                problem = f"payload blob unreadable: {exc.message}"
        found.append(StoredSignature(scheme, payload, annotations, location, problem))
    return found


def attach_signatures(
    client: RegistryClient,
    repository: str,
    digest: str,
    payload: bytes,
    signers: Sequence[Signer],
    *,
    attempts: int = 3,
) -> list[AttachResult]:
    """Sign `payload` with each signer and append the layers under each scheme's tag."""
    results: list[AttachResult] = []
    for scheme in dict.fromkeys(s.scheme for s in signers):
        scheme_signers = [s for s in signers if s.scheme == scheme]
        results.extend(_attach_one_scheme(client, repository, digest, payload, scheme, scheme_signers, attempts))
    return results


def _attach_one_scheme(
    client: RegistryClient,
    repository: str,
    digest: str,
    payload: bytes,
    scheme: str,
    signers: Sequence[Signer],
    attempts: int,
) -> list[AttachResult]:
    """Read-modify-write of one signature tag until a read-back shows our layers. The loop is
    optimistic concurrency against other signers, not HTTP retries (each request is retried by the
    client's urllib3 Retry already), so it stays a loop."""
    fmt = format_for(scheme)
    tag = signature_tag(digest, scheme)
    location = f"{client.registry}/{repository}:{tag}"
    payload_digest = sha256_digest(payload)
    client.push_blob(repository, payload, payload_digest)
    new_layers: dict[str, dict[str, Any]] = {}  # key id → the layer we add
    for _attempt in range(attempts):
        manifest = read_manifest(client, repository, tag) or SignatureManifest()
        results: list[AttachResult] = []
        appended = False
        for signer in signers:
            existing = [
                layer for layer in manifest.layers if isinstance(layer, dict) and layer.get("digest") == payload_digest
            ]
            if any(signer.has_signed(payload, layer.get("annotations") or {}) for layer in existing):
                results.append(AttachResult(scheme, signer.key_id, location, added=signer.key_id in new_layers))
                continue
            layer = new_layers.get(signer.key_id) or {
                "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                "size": len(payload),
                "digest": payload_digest,
                "annotations": signer.sign(payload),
            }
            new_layers[signer.key_id] = layer
            manifest.layers.append(layer)
            appended = True
            results.append(AttachResult(scheme, signer.key_id, location, added=True))
        if not appended:
            return results
        manifest.annotations = {**manifest.annotations, **fmt.MANIFEST_ANNOTATIONS}
        config = signature_config_blob([layer.get("digest", "") for layer in manifest.layers])
        client.push_blob(repository, config)
        client.put_manifest(repository, tag, manifest_bytes(manifest, config), OCI_MANIFEST)
        # Read back: a concurrent writer may have replaced the tag between our read and write.
        stored = read_manifest(client, repository, tag) or SignatureManifest()
        if all(layer in stored.layers for layer in new_layers.values()):
            return results
    raise SigningError(f"{location}: the signature tag kept changing under us (concurrent signers?); retry")


# ------------------------------------------------------------------------------------------ archive


def detached_dir(archive: os.PathLike[str] | str) -> Path:
    archive = Path(archive)
    return archive.with_name(archive.name + ".signatures")


def detached_path(archive: os.PathLike[str] | str, digest: str, scheme: str) -> Path:
    return detached_dir(archive) / f"{signature_tag(digest, scheme)}.json"


def read_detached_doc(
    path: Path, digest: str, scheme: str, *, media_type: str = DETACHED_MEDIA_TYPE, what: str = "signature"
) -> dict[str, Any] | None:
    """A detached signature (or attestation) file for `digest`/`scheme`; None when there is none."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SigningError(f"{path}: unreadable {what} file ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("mediaType") != media_type:
        raise SigningError(f"{path}: not an xcforge {what} file")
    if doc.get("subject") != digest or doc.get("scheme") != scheme:
        found = f"{doc.get('subject')} ({doc.get('scheme')})"
        raise SigningError(f"{path}: {what}s for {found}, expected {digest} ({scheme})")
    return doc


def write_detached_doc(path: Path, doc: Mapping[str, Any]) -> None:
    """Replace the file atomically: a reader never sees half a signature file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_detached_signatures(archive: os.PathLike[str] | str, digest: str, scheme: str) -> list[StoredSignature] | None:
    path = detached_path(archive, digest, scheme)
    doc = read_detached_doc(path, digest, scheme)
    if doc is None:
        return None
    found = []
    for index, entry in enumerate(doc.get("signatures") or []):
        location = f"{path}#{index}"
        annotations = entry.get("annotations") if isinstance(entry, dict) else None
        annotations = {k: v for k, v in (annotations or {}).items() if isinstance(v, str)}
        try:
            payload = base64.b64decode(entry["payload"], validate=True)
            found.append(StoredSignature(scheme, payload, annotations, location))
        except (KeyError, TypeError, binascii.Error, ValueError):
            found.append(StoredSignature(scheme, None, annotations, location, "payload missing or not base64"))
    return found


def write_detached_signatures(
    archive: os.PathLike[str] | str, digest: str, payload: bytes, signers: Sequence[Signer]
) -> list[AttachResult]:
    """Add signatures of `payload` to the files beside `archive` (same accumulation rules)."""
    results: list[AttachResult] = []
    for scheme in dict.fromkeys(s.scheme for s in signers):
        path = detached_path(archive, digest, scheme)
        doc = read_detached_doc(path, digest, scheme) or {
            "mediaType": DETACHED_MEDIA_TYPE,
            "subject": digest,
            "scheme": scheme,
            "signatures": [],
        }
        entries = doc["signatures"]
        encoded = base64.b64encode(payload).decode("ascii")
        changed = False
        for signer in (s for s in signers if s.scheme == scheme):
            same_payload = [e for e in entries if isinstance(e, dict) and e.get("payload") == encoded]
            if any(signer.has_signed(payload, e.get("annotations") or {}) for e in same_payload):
                results.append(AttachResult(scheme, signer.key_id, str(path), added=False))
                continue
            entries.append({"payload": encoded, "annotations": signer.sign(payload)})
            changed = True
            results.append(AttachResult(scheme, signer.key_id, str(path), added=True))
        if changed:
            write_detached_doc(path, doc)
    return results
