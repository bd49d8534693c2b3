"""Keyless Sigstore signing in CI (GitHub Actions OIDC → Fulcio certificate → Rekor), cosign v3 layout.

What is signed: a DSSE envelope over an in-toto statement, exactly what `cosign sign` (v3, new bundle
format) signs for an image (cosign cmd/cosign/cli/sign: `intotov1.Statement` with subject digest,
predicateType `https://sigstore.dev/cosign/sign/v1`, empty predicate). The statement also names the
repository in `subject[0].name` (sigstore-python's Subject model requires the field).

Where it is stored (cosign specs/BUNDLE_SPEC.md): the bundle JSON as a blob; an OCI 1.1 manifest
with `artifactType` = bundle media type, the empty config, one layer (the bundle) and `subject` =
the image; and, because distribution 2.8 has no referrers API, the referrers tag schema
(distribution-spec "Referrers Tag Schema"): an image index at tag `sha256-<hex>` listing that
manifest, merged with what is already there.

Signing needs an OIDC token (GitHub: `permissions: id-token: write`) and network access to
Fulcio/Rekor; nothing here runs offline except building the statement and manifests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ocicore.digest import is_sha256
from ocicore.registry import (
    OCI_EMPTY,
    OCI_EMPTY_BLOB,
    OCI_INDEX,
    OCI_MANIFEST,
    Reference,
    RegistryClient,
    RegistryNotFound,
    canonical_json,
    sha256_digest,
)
from signing.errors import InvalidSigningRequest, SigningError, VerificationFailed

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://sigstore.dev/cosign/sign/v1"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
DSSE_PAYLOAD_TYPE = "application/vnd.in-toto+json"


@dataclass(frozen=True)
class KeylessRecord:
    repository: str
    digest: str
    bundle_manifest: str  # digest of the bundle manifest (the referrer)
    index_tag: str
    identity: str  # certificate identity (SAN) Fulcio issued

    def line(self) -> str:
        where = f"{self.index_tag} ({self.bundle_manifest})"
        return f"signed: keyless {self.identity}  {self.repository}@{self.digest}  -> {where}"


def build_statement(repository: str, digest: str) -> bytes:
    """The in-toto statement cosign v3 signs for `repository@digest` (compact JSON)."""
    if not is_sha256(digest):
        raise InvalidSigningRequest(f"keyless signing needs a sha256 digest, got {digest!r}")
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": repository, "digest": {"sha256": digest.split(":", 1)[1]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {},
    }
    return canonical_json(statement)


def bundle_manifest(bundle: bytes, subject: Mapping[str, Any], *, created: datetime | None = None) -> bytes:
    """OCI 1.1 artifact manifest for one bundle whose `subject` is the image's descriptor."""
    digest = sha256_digest(bundle)
    when = (created or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": BUNDLE_MEDIA_TYPE,
        "config": {"mediaType": OCI_EMPTY, "digest": sha256_digest(OCI_EMPTY_BLOB), "size": len(OCI_EMPTY_BLOB)},
        "layers": [
            {
                "mediaType": BUNDLE_MEDIA_TYPE,
                "digest": digest,
                "size": len(bundle),
                "annotations": {"org.opencontainers.image.title": digest.replace(":", "-") + ".sigstore.json"},
            }
        ],
        "subject": {"mediaType": subject["mediaType"], "digest": subject["digest"], "size": subject["size"]},
        "annotations": _descriptor_annotations(when),
    }
    return canonical_json(doc)


def _descriptor_annotations(created: str) -> dict[str, str]:
    return {
        "dev.sigstore.bundle.content": "dsse-envelope",
        "dev.sigstore.bundle.predicateType": PREDICATE_TYPE,
        "org.opencontainers.image.created": created,
    }


def referrers_index(existing: Mapping[str, Any] | None, manifest: bytes) -> bytes:
    """The referrers-tag index with `manifest` added (entries already present are kept)."""
    doc = json.loads(manifest)
    entry = {
        "mediaType": OCI_MANIFEST,
        "digest": sha256_digest(manifest),
        "size": len(manifest),
        "artifactType": doc["artifactType"],
        "annotations": doc.get("annotations", {}),
    }
    manifests = [m for m in (existing or {}).get("manifests", []) if m.get("digest") != entry["digest"]]
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*manifests, entry]})


def referrers_tag(digest: str) -> str:
    return digest.replace(":", "-", 1)


def detect_identity_token() -> str | None:
    """The ambient OIDC token (GitHub Actions with `id-token: write`, and the other CI providers the
    `id` package knows), or None."""
    from sigstore.oidc import IdentityError, detect_credential

    try:
        return detect_credential()
    except IdentityError:
        return None


def sign_keyless(
    repo: str | Reference,
    digest: str,
    *,
    identity_token: str | None = None,
    client: RegistryClient | None = None,
    insecure: bool = False,
) -> KeylessRecord:
    """Sign with Sigstore's public-good instance and attach the bundle for cosign v3 to find."""
    from sigstore.dsse import Statement
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken
    from sigstore.sign import SigningContext

    ref = repo if isinstance(repo, Reference) else Reference.parse(repo)
    raw_token = identity_token or detect_identity_token()
    if not raw_token:
        raise SigningError(
            "keyless signing needs an OIDC identity token: in GitHub Actions give the job "
            "`permissions: id-token: write`; elsewhere use key-based signing"
        )
    client = client or RegistryClient(ref.registry, insecure=insecure)
    found = client.head_manifest(ref.repository, digest)
    if found is None:
        raise SigningError(f"{ref.name}@{digest} is not in the registry: push the image before signing it")
    statement = Statement(build_statement(ref.name, digest))
    token = IdentityToken(raw_token)
    context = SigningContext.from_trust_config(ClientTrustConfig.production())
    try:
        with context.signer(token) as signer:
            bundle = signer.sign_dsse(statement)
    except Exception as exc:  # network, Fulcio or Rekor refusals all end here
        raise SigningError(f"keyless signing failed: {exc}") from exc
    bundle_bytes = bundle.to_json().encode("utf-8")
    subject = {"mediaType": found[1], "digest": digest, "size": len(client.get_manifest(ref.repository, digest).data)}
    return attach_bundle(client, ref, digest, bundle_bytes, subject, identity=str(token.identity))


def attach_bundle(
    client: RegistryClient,
    ref: Reference,
    digest: str,
    bundle: bytes,
    subject: Mapping[str, Any],
    *,
    identity: str = "",
) -> KeylessRecord:
    """Store a bundle as a referrer of `digest`, plus the referrers-tag index (no referrers API)."""
    client.push_blob(ref.repository, OCI_EMPTY_BLOB)
    client.push_blob(ref.repository, bundle)
    manifest = bundle_manifest(bundle, subject)
    manifest_digest = client.put_manifest(ref.repository, sha256_digest(manifest), manifest, OCI_MANIFEST)
    tag = referrers_tag(digest)
    try:
        existing = client.get_manifest(ref.repository, tag, accept=(OCI_INDEX,)).json()
    except RegistryNotFound:
        existing = None
    client.put_manifest(ref.repository, tag, referrers_index(existing, manifest), OCI_INDEX)
    return KeylessRecord(ref.name, digest, manifest_digest, f"{ref.name}:{tag}", identity)


def read_bundles(client: RegistryClient, ref: Reference, digest: str) -> list[bytes]:
    """Every Sigstore bundle the referrers tag lists for `digest`."""
    try:
        index = client.get_manifest(ref.repository, referrers_tag(digest), accept=(OCI_INDEX,)).json()
    except RegistryNotFound:
        return []
    bundles = []
    for entry in index.get("manifests", []):
        if entry.get("artifactType") != BUNDLE_MEDIA_TYPE:
            continue
        manifest = client.get_manifest(ref.repository, entry["digest"]).json()
        for layer in manifest.get("layers", []):
            if layer.get("mediaType") == BUNDLE_MEDIA_TYPE:
                bundles.append(client.get_blob(ref.repository, layer["digest"]))
    return bundles


def verify_keyless(bundle: bytes, digest: str, *, identity: str, issuer: str, offline: bool = True) -> str:
    """Verify one bundle against Sigstore's trusted root (shipped in the wheel when offline): the
    certificate chain, the transparency-log proof, the identity/issuer policy and the statement's
    subject digest. Returns the signed statement type; raises VerificationFailed."""
    from sigstore.models import Bundle
    from sigstore.verify import Verifier
    from sigstore.verify.policy import Identity

    try:
        verifier = Verifier.production(offline=offline)
        payload_type, payload = verifier.verify_dsse(
            Bundle.from_json(bundle), Identity(identity=identity, issuer=issuer)
        )
    except Exception as exc:
        raise VerificationFailed(f"keyless bundle does not verify: {exc}") from exc
    if payload_type != DSSE_PAYLOAD_TYPE:
        raise VerificationFailed(f"keyless bundle holds {payload_type}, not an in-toto statement")
    statement = json.loads(payload)
    subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject", [])]
    if digest.split(":", 1)[1] not in subjects:
        raise VerificationFailed(f"keyless bundle is for another digest ({subjects})")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise VerificationFailed(f"keyless bundle has predicate type {statement.get('predicateType')}")
    return PREDICATE_TYPE
