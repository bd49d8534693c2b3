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
`.sm2att.json`: both places are store.py's (SignatureStore.write_attestations / read_attestations);
this module checks what an envelope says (dsse.py makes and opens them). The raw SBOM is also
attached unsigned under `sha256-<hex>.sbom` (what `cosign download sbom` reads) with an OCI 1.1
`subject`, so a registry with the referrers API lists it; its signature is the attestation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ocicore.registry import OCI_EMPTY, OCI_EMPTY_BLOB, OCI_MANIFEST, RegistryClient, canonical_json, sha256_digest
from signing import sm2, sm2_format
from signing.cosign_keys import CosignPublicKey

# `X as X`: the envelope, the statement, the predicates and the tags, re-exported for callers.
from signing.dsse import DSSE_MEDIA_TYPE as DSSE_MEDIA_TYPE
from signing.dsse import PREDICATE_ANNOTATION as PREDICATE_ANNOTATION
from signing.dsse import AttestResult as AttestResult
from signing.dsse import Opened as Opened
from signing.dsse import StoredAttestation as StoredAttestation
from signing.dsse import envelope as envelope
from signing.dsse import layer_annotations as layer_annotations
from signing.dsse import open_envelope as open_envelope
from signing.dsse import signed_by as signed_by
from signing.intoto import IN_TOTO_PAYLOAD_TYPE as IN_TOTO_PAYLOAD_TYPE
from signing.intoto import PROVENANCE_PREDICATES as PROVENANCE_PREDICATES
from signing.intoto import SBOM_PREDICATE as SBOM_PREDICATE
from signing.intoto import STATEMENT_TYPE as STATEMENT_TYPE
from signing.intoto import pae as pae
from signing.intoto import statement as statement
from signing.sm2_keys import Sm2PublicKey
from signing.store import attestation_tag as attestation_tag
from signing.store import read_sbom as read_sbom
from signing.store import sbom_tag as sbom_tag


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
