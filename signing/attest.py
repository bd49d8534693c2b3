"""Signed in-toto attestations (SBOM, SLSA provenance) in DSSE envelopes, the way cosign stores them.

A statement (in-toto v0.1, as `cosign attest` and BuildKit write it) names the platform manifest
digest as its subject. It is wrapped in a DSSE envelope whose signature covers
PAE("application/vnd.in-toto+json", statement) (DSSE v1 §"Signature definition"):

- cosign: ECDSA P-256/SHA-256, stored under tag `sha256-<hex>.att` as cosign's ATTESTATION_SPEC
  lays it out (one layer per envelope, media type `application/vnd.dsse.envelope.v1+json`,
  annotations `dev.cosignproject.cosign/signature: ""` and `predicateType`), so
  `cosign verify-attestation --type cyclonedx|slsaprovenance --key cosign.pub` accepts it;
- SM2: SM2-with-SM3 over the same PAE bytes, the envelope's `keyid` our SM2 key id, under tag
  `sha256-<hex>.sm2att` (never `.att`: cosign fails on envelopes it cannot verify).

Beside an OCI archive the same envelopes go to `<archive>.signatures/sha256-<hex>.att.json` and
`.sm2att.json`. The raw SBOM is also attached unsigned under `sha256-<hex>.sbom` (what
`cosign download sbom` reads) with an OCI 1.1 `subject`, so a registry with the referrers API
lists it; its signature is the attestation.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ocicore.registry import (
    OCI_EMPTY,
    OCI_EMPTY_BLOB,
    OCI_MANIFEST,
    RegistryClient,
    RegistryError,
    canonical_json,
    is_digest,
    sha256_digest,
)
from signing import cosign_format, sm2, sm2_format
from signing.cosign_keys import CosignPublicKey

# `X as X`: the statement and the predicates, re-exported for callers.
from signing.intoto import IN_TOTO_PAYLOAD_TYPE as IN_TOTO_PAYLOAD_TYPE
from signing.intoto import PROVENANCE_PREDICATES as PROVENANCE_PREDICATES
from signing.intoto import SBOM_PREDICATE as SBOM_PREDICATE
from signing.intoto import STATEMENT_TYPE as STATEMENT_TYPE
from signing.intoto import pae as pae
from signing.intoto import statement as statement
from signing.signers import Signer
from signing.sm2_keys import Sm2PublicKey
from signing.store import (
    SignatureManifest,
    detached_dir,
    digest_tag,
    manifest_bytes,
    read_detached_doc,
    read_manifest,
    signature_config_blob,
    write_detached_doc,
)

DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
PREDICATE_ANNOTATION = "predicateType"
TAG_SUFFIXES = {cosign_format.SCHEME: ".att", sm2_format.SCHEME: ".sm2att"}
DETACHED_MEDIA_TYPE = "application/vnd.xcforge.detached-attestations.v1+json"
SBOM_TAG_SUFFIX = ".sbom"
_MAX_ENVELOPE = 32 * 1024 * 1024


def attestation_tag(digest: str, scheme: str) -> str:
    return digest_tag(digest, TAG_SUFFIXES[scheme])


def sbom_tag(digest: str) -> str:
    return digest_tag(digest, SBOM_TAG_SUFFIX)


# ------------------------------------------------------------------------------------------ envelopes


def envelope(payload: bytes, signer: Signer) -> bytes:
    signature = signer.signature(pae(IN_TOTO_PAYLOAD_TYPE, payload))
    key_id = signer.key_id if signer.scheme == sm2_format.SCHEME else ""  # cosign writes an empty keyid
    return canonical_json(
        {
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode("ascii"),
            "signatures": [{"keyid": key_id, "sig": base64.b64encode(signature).decode("ascii")}],
        }
    )


def layer_annotations(signer: Signer, predicate_type: str) -> dict[str, str]:
    if signer.scheme == sm2_format.SCHEME:
        return {
            PREDICATE_ANNOTATION: predicate_type,
            sm2_format.KEYID_ANNOTATION: signer.key_id,
            sm2_format.DISTID_ANNOTATION: getattr(signer, "dist_id", sm2.DEFAULT_DIST_ID).decode("utf-8"),
            sm2_format.ALGORITHM_ANNOTATION: sm2_format.ALGORITHM,
        }
    return {cosign_format.SIGNATURE_ANNOTATION: "", PREDICATE_ANNOTATION: predicate_type}


@dataclass(frozen=True)
class Opened:
    """A parsed envelope: the statement and its signatures, or why it is unusable."""

    payload: bytes | None
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, signature)
    problem: str | None = None


def open_envelope(data: bytes) -> Opened:
    try:
        doc = json.loads(data)
        if doc.get("payloadType") != IN_TOTO_PAYLOAD_TYPE:
            return Opened(None, (), f"payloadType {doc.get('payloadType')!r} is not in-toto")
        payload = base64.b64decode(doc["payload"], validate=True)
        signatures = tuple(
            (str(s.get("keyid") or ""), base64.b64decode(s["sig"], validate=True)) for s in doc.get("signatures") or []
        )
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        return Opened(None, (), f"not a DSSE envelope ({type(exc).__name__})")
    return Opened(payload, signatures)


def signed_by(
    opened: Opened, scheme: str, key: Sm2PublicKey | CosignPublicKey, dist_id: bytes = sm2.DEFAULT_DIST_ID
) -> bool:
    """True when one of the envelope's signatures is `key`'s (a key of the `scheme` named)."""
    if opened.payload is None:
        return False
    message = pae(IN_TOTO_PAYLOAD_TYPE, opened.payload)
    for _key_id, signature in opened.signatures:
        if scheme == sm2_format.SCHEME and isinstance(key, Sm2PublicKey):
            if key.verify(message, signature, dist_id=dist_id):
                return True
        elif scheme == cosign_format.SCHEME and isinstance(key, CosignPublicKey) and key.verify(message, signature):
            return True
    return False


# ------------------------------------------------------------------------------------------ storage


@dataclass(frozen=True)
class StoredAttestation:
    scheme: str
    predicate_type: str  # from the layer annotation
    envelope: bytes | None
    location: str
    problem: str | None = None


@dataclass(frozen=True)
class AttestResult:
    scheme: str
    key_id: str
    predicate_type: str
    location: str
    added: bool


def _already(signer: Signer, payload: bytes, envelopes: Iterable[bytes]) -> bool:
    """This signer has already attested exactly this statement (signing again would only add noise)."""
    message = pae(IN_TOTO_PAYLOAD_TYPE, payload)
    for data in envelopes:
        opened = open_envelope(data)
        if opened.payload == payload and any(signer.verifies(message, sig) for _key_id, sig in opened.signatures):
            return True
    return False


def attach_attestations(
    client: RegistryClient,
    repository: str,
    digest: str,
    statements: Sequence[tuple[str, bytes]],
    signers: Sequence[Signer],
) -> list[AttestResult]:
    """Sign each (predicate type, statement) with each signer, append under the scheme's tag."""
    results: list[AttestResult] = []
    for scheme in dict.fromkeys(s.scheme for s in signers):
        tag = attestation_tag(digest, scheme)
        location = f"{client.registry}/{repository}:{tag}"
        manifest = read_manifest(client, repository, tag) or SignatureManifest()
        existing = [s.envelope for s in _stored(client, repository, tag, manifest, scheme) if s.envelope]
        changed = False
        for signer in (s for s in signers if s.scheme == scheme):
            for predicate_type, payload in statements:
                if _already(signer, payload, existing):
                    results.append(AttestResult(scheme, signer.key_id, predicate_type, location, False))
                    continue
                data = envelope(payload, signer)
                client.push_blob(repository, data)
                manifest.layers.append(
                    {
                        "mediaType": DSSE_MEDIA_TYPE,
                        "size": len(data),
                        "digest": sha256_digest(data),
                        "annotations": layer_annotations(signer, predicate_type),
                    }
                )
                existing.append(data)
                changed = True
                results.append(AttestResult(scheme, signer.key_id, predicate_type, location, True))
        if changed:
            config = signature_config_blob([layer.get("digest", "") for layer in manifest.layers])
            client.push_blob(repository, config)
            client.put_manifest(repository, tag, manifest_bytes(manifest, config), OCI_MANIFEST)
    return results


def read_attestations(
    client: RegistryClient, repository: str, digest: str, scheme: str
) -> list[StoredAttestation] | None:
    tag = attestation_tag(digest, scheme)
    manifest = read_manifest(client, repository, tag)
    return None if manifest is None else _stored(client, repository, tag, manifest, scheme)


def _stored(
    client: RegistryClient, repository: str, tag: str, manifest: SignatureManifest, scheme: str
) -> list[StoredAttestation]:
    """Each layer of an attestation manifest with its envelope fetched (or why it could not be)."""
    found = []
    for index, layer in enumerate(manifest.layers):
        location = f"{client.registry}/{repository}:{tag}#{index}"
        annotations = (layer.get("annotations") if isinstance(layer, dict) else None) or {}
        predicate_type = str(annotations.get(PREDICATE_ANNOTATION, ""))
        layer_digest = layer.get("digest") if isinstance(layer, dict) else None
        if not isinstance(layer_digest, str) or not is_digest(layer_digest):
            found.append(StoredAttestation(scheme, predicate_type, None, location, "layer has no valid digest"))
            continue
        try:
            data = client.get_blob(repository, layer_digest, max_size=_MAX_ENVELOPE)
        except RegistryError as exc:
            found.append(StoredAttestation(scheme, predicate_type, None, location, f"unreadable: {exc.message}"))
            continue
        found.append(StoredAttestation(scheme, predicate_type, data, location))
    return found


def attach_sbom(
    client: RegistryClient, repository: str, subject: Mapping[str, Any], sbom: bytes, media_type: str
) -> str:
    """The raw SBOM under `sha256-<hex>.sbom`, an OCI 1.1 artifact whose subject is the image."""
    tag = sbom_tag(subject["digest"])
    client.push_blob(repository, OCI_EMPTY_BLOB)
    client.push_blob(repository, sbom)
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": media_type,
            "config": {"mediaType": OCI_EMPTY, "size": len(OCI_EMPTY_BLOB), "digest": sha256_digest(OCI_EMPTY_BLOB)},
            "layers": [{"mediaType": media_type, "size": len(sbom), "digest": sha256_digest(sbom)}],
            "subject": {k: subject[k] for k in ("mediaType", "size", "digest")},
        }
    )
    client.put_manifest(repository, tag, manifest, OCI_MANIFEST)
    return f"{client.registry}/{repository}:{tag}"


def read_sbom(client: RegistryClient, repository: str, digest: str) -> bytes | None:
    manifest = read_manifest(client, repository, sbom_tag(digest))
    if manifest is None or not manifest.layers:
        return None
    layer = manifest.layers[0]
    return client.get_blob(repository, layer["digest"], max_size=_MAX_ENVELOPE)


# ------------------------------------------------------------------------------------------ archive


def detached_path(archive: os.PathLike[str] | str, digest: str, scheme: str) -> Path:
    return detached_dir(archive) / f"{attestation_tag(digest, scheme)}.json"


def _read_detached(path: Path, digest: str, scheme: str) -> dict[str, Any] | None:
    return read_detached_doc(path, digest, scheme, media_type=DETACHED_MEDIA_TYPE, what="attestation")


def write_detached_attestations(
    archive: os.PathLike[str] | str, digest: str, statements: Sequence[tuple[str, bytes]], signers: Sequence[Signer]
) -> list[AttestResult]:
    results: list[AttestResult] = []
    for scheme in dict.fromkeys(s.scheme for s in signers):
        path = detached_path(archive, digest, scheme)
        doc = _read_detached(path, digest, scheme) or {
            "mediaType": DETACHED_MEDIA_TYPE,
            "subject": digest,
            "scheme": scheme,
            "attestations": [],
        }
        entries = doc["attestations"]
        existing = [canonical_json(e["envelope"]) for e in entries if isinstance(e, dict) and "envelope" in e]
        changed = False
        for signer in (s for s in signers if s.scheme == scheme):
            for predicate_type, payload in statements:
                if _already(signer, payload, existing):
                    results.append(AttestResult(scheme, signer.key_id, predicate_type, str(path), False))
                    continue
                data = envelope(payload, signer)
                entries.append({"envelope": json.loads(data), "annotations": layer_annotations(signer, predicate_type)})
                existing.append(data)
                changed = True
                results.append(AttestResult(scheme, signer.key_id, predicate_type, str(path), True))
        if changed:
            write_detached_doc(path, doc)
    return results


def read_detached_attestations(
    archive: os.PathLike[str] | str, digest: str, scheme: str
) -> list[StoredAttestation] | None:
    path = detached_path(archive, digest, scheme)
    doc = _read_detached(path, digest, scheme)
    if doc is None:
        return None
    found = []
    for index, entry in enumerate(doc.get("attestations") or []):
        location = f"{path}#{index}"
        if not isinstance(entry, dict) or not isinstance(entry.get("envelope"), dict):
            found.append(StoredAttestation(scheme, "", None, location, "entry has no envelope"))
            continue
        predicate_type = str((entry.get("annotations") or {}).get(PREDICATE_ANNOTATION, ""))
        found.append(StoredAttestation(scheme, predicate_type, canonical_json(entry["envelope"]), location))
    return found


# ------------------------------------------------------------------------------------------ verify


@dataclass(frozen=True)
class AttestationCheck:
    scheme: str
    predicate_type: str
    subject: str  # the platform manifest digest
    valid: bool
    reason: str
    location: str
    key_id: str | None = None
    statement: bytes | None = None  # the verified statement (valid checks only)

    def line(self) -> str:
        verdict = "VALID  " if self.valid else "INVALID"
        key = (self.key_id or "-")[:16]
        what = f"attestation {self.predicate_type}: {self.reason}"
        return f"{verdict} {self.scheme:<7} key {key:<16} {what}  [{self.location}]"


def check_attestation(
    stored: StoredAttestation,
    digest: str,
    sm2_keys: Sequence[Sm2PublicKey],
    cosign_keys: Sequence[CosignPublicKey],
    dist_id: bytes = sm2.DEFAULT_DIST_ID,
) -> AttestationCheck:
    def result(valid: bool, reason: str, key_id: str | None = None, payload: bytes | None = None) -> AttestationCheck:
        return AttestationCheck(
            stored.scheme, stored.predicate_type, digest, valid, reason, stored.location, key_id, payload
        )

    if stored.envelope is None:
        return result(False, stored.problem or "envelope missing")
    opened = open_envelope(stored.envelope)
    if opened.problem or opened.payload is None:
        return result(False, opened.problem or "no payload")
    keys = sm2_keys if stored.scheme == sm2_format.SCHEME else cosign_keys
    verified = next((k for k in keys if signed_by(opened, stored.scheme, k, dist_id)), None)
    if verified is None:
        return result(False, "no trusted key verifies this envelope (other key, or modified statement)")
    try:
        doc = json.loads(opened.payload)
        subjects = {f"sha256:{s['digest']['sha256']}" for s in doc.get("subject") or []}
        predicate_type = doc.get("predicateType")
    except (ValueError, KeyError, TypeError, AttributeError):
        return result(False, "signed statement is not in-toto JSON", verified.key_id)
    if digest not in subjects:
        return result(False, f"statement is about {sorted(subjects) or 'nothing'}, not {digest}", verified.key_id)
    if predicate_type != stored.predicate_type:
        return result(
            False, f"annotation says {stored.predicate_type}, statement says {predicate_type}", verified.key_id
        )
    return result(True, "signed statement about this image", verified.key_id, opened.payload)


def predicate_of(statement_bytes: bytes) -> Any:
    return json.loads(statement_bytes).get("predicate")
