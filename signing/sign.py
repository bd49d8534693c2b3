"""Sign an image digest with SM2 and/or cosign keys, and attest its SBOM and provenance, into a
SignatureStore (the registry, or the files beside an OCI archive); every operation audited."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ocicore.errors import OciError
from ocicore.registry import Reference, RegistryClient, is_digest
from signing import sm2
from signing.audit import AuditLog
from signing.cosign_keys import CosignPrivateKey
from signing.errors import InvalidSigningRequest, SignatureToolError, SigningError
from signing.payload import simple_signing_payload
from signing.signers import CosignSigner, Signer, Sm2Signer
from signing.sm2_keys import Sm2PrivateKey
from signing.store import AttachResult, OciArchiveStore, RegistryStore, SignatureStore


@dataclass(frozen=True)
class SignatureRecord:
    scheme: str  # "sm2" | "cosign"
    key_id: str
    repository: str  # the identity signed (docker-reference)
    digest: str
    location: str  # registry tag or file
    added: bool  # False when this key had already signed this digest there

    def audit_details(self) -> dict[str, str]:
        return {"scheme": self.scheme, "location": self.location}

    def line(self) -> str:
        state = "signed" if self.added else "already signed"
        return f"{state}: {self.scheme:<6} key {self.key_id[:16]}  {self.repository}@{self.digest}  -> {self.location}"


def make_signers(
    *,
    sm2_key: Sm2PrivateKey | None = None,
    cosign_key: CosignPrivateKey | None = None,
    sm2_dist_id: bytes = sm2.DEFAULT_DIST_ID,
) -> list[Signer]:
    signers: list[Signer] = []
    if sm2_key is not None:
        signers.append(Sm2Signer(sm2_key, sm2_dist_id))
    if cosign_key is not None:
        signers.append(CosignSigner(cosign_key))
    if not signers:
        raise InvalidSigningRequest("nothing to sign with: give an SM2 key and/or a cosign key")
    return signers


def _records(results: Sequence[AttachResult], repository: str, digest: str) -> list[SignatureRecord]:
    return [SignatureRecord(r.scheme, r.key_id, repository, digest, r.location, r.added) for r in results]


class _Auditable(Protocol):
    """What _audited writes an entry for: a SignatureRecord or an AttestationRecord."""

    @property
    def key_id(self) -> str: ...

    @property
    def added(self) -> bool: ...

    def audit_details(self) -> dict[str, str]: ...


_Record = TypeVar("_Record", bound=_Auditable)


def _audited(
    audit: AuditLog | None,
    signers: Sequence[Signer],
    digest: str,
    subject: str,
    work: Callable[[], list[_Record]],
    action: str = "sign",
) -> list[_Record]:
    """Run `work` and write one audit entry per record it returns, or per signer when it fails."""
    try:
        records = work()
    except (OciError, SignatureToolError) as exc:
        if audit is not None:
            for signer in signers:
                audit.record(
                    action, digest=digest, key_id=signer.key_id, subject=subject, result=f"error: {exc.message[:200]}"
                )
        raise
    if audit is not None:
        for record in records:
            audit.record(
                action,
                digest=digest,
                key_id=record.key_id,
                subject=subject,
                result="ok" if record.added else f"ok (already {action}ed)",
                details=record.audit_details(),
            )
    return records


def _require_digest(digest: str, operation: str) -> None:
    if not is_digest(digest):
        raise InvalidSigningRequest(f"{operation} needs a manifest digest (sha256:<64 hex>), got {digest!r}")


def sign(
    store: SignatureStore,
    digest: str,
    *,
    sm2_key: Sm2PrivateKey | None = None,
    cosign_key: CosignPrivateKey | None = None,
    sm2_dist_id: bytes = sm2.DEFAULT_DIST_ID,
    annotations: Mapping[str, str] | None = None,
    audit: AuditLog | None = None,
) -> list[SignatureRecord]:
    """Sign `digest` for the store's repository name; the signatures go into the store.

    Returns one record per key; signing again with the same key is a no-op (`added=False`).
    """
    _require_digest(digest, "sign")
    signers = make_signers(sm2_key=sm2_key, cosign_key=cosign_key, sm2_dist_id=sm2_dist_id)

    def work() -> list[SignatureRecord]:
        if not store.has_subject(digest):
            raise SigningError(f"{store.name}@{digest} is not in the registry: push the image before signing it")
        payload = simple_signing_payload(store.name, digest, annotations)
        return _records(store.write_signatures(digest, payload, signers), store.name, digest)

    return _audited(audit, signers, digest, store.describe(digest), work)


def sign_digest(
    repo: str | Reference,
    digest: str,
    *,
    client: RegistryClient | None = None,
    insecure: bool = False,
    **keys: Any,
) -> list[SignatureRecord]:
    """Sign `repo@digest` after a push; signatures go next to the image in its registry.

    `repo` is `host[:port]/path` (a tag on it is ignored: the digest is what is signed). The
    payload names that repository as identity. `keys`: sign()'s keyword arguments.
    """
    ref = repo if isinstance(repo, Reference) else Reference.parse(repo)
    _require_digest(digest, "sign")
    if ref.digest and ref.digest != digest:
        raise InvalidSigningRequest(f"{ref} and digest {digest} disagree")
    return sign(RegistryStore(ref, client, insecure=insecure), digest, **keys)


def sign_archive(archive: os.PathLike[str] | str, repository: str, digest: str, **keys: Any) -> list[SignatureRecord]:
    """Sign an image written as an OCI-layout archive: files in `<archive>.signatures/`.

    `repository` is the name the image will be published under (the payload's identity).
    """
    _require_digest(digest, "sign")
    return sign(OciArchiveStore(archive, Reference.parse(repository).name), digest, **keys)


@dataclass(frozen=True)
class AttestationRecord:
    scheme: str
    key_id: str
    predicate_type: str
    digest: str
    location: str
    added: bool

    def audit_details(self) -> dict[str, str]:
        return {"scheme": self.scheme, "predicate": self.predicate_type, "location": self.location}

    def line(self) -> str:
        state = "attested" if self.added else "already attested"
        return (
            f"{state}: {self.scheme:<6} key {self.key_id[:16]}  {self.predicate_type}  {self.digest} -> {self.location}"
        )


def attest(
    statements: Sequence[tuple[str, bytes]],
    digest: str,
    *,
    store: SignatureStore | None = None,
    repo: str | Reference | None = None,
    archive: os.PathLike[str] | str | None = None,
    sm2_key: Sm2PrivateKey | None = None,
    cosign_key: CosignPrivateKey | None = None,
    sm2_dist_id: bytes = sm2.DEFAULT_DIST_ID,
    audit: AuditLog | None = None,
    client: RegistryClient | None = None,
    insecure: bool = False,
) -> list[AttestationRecord]:
    """Sign in-toto statements about `digest` (SBOM, provenance) as DSSE attestations.

    Into `store`; without one, the files beside `archive` when given, else the registry next to
    `repo` (`.att` for cosign, `.sm2att` for SM2). Every attestation made or refused is an audit entry.
    """
    _require_digest(digest, "attest")
    signers = make_signers(sm2_key=sm2_key, cosign_key=cosign_key, sm2_dist_id=sm2_dist_id)
    if store is None:
        store = (
            OciArchiveStore(archive)
            if archive is not None
            else RegistryStore.open(repo or "", client, insecure=insecure)
        )
    into = store

    def work() -> list[AttestationRecord]:
        return [
            AttestationRecord(r.scheme, r.key_id, r.predicate_type, digest, r.location, r.added)
            for r in into.write_attestations(digest, statements, signers)
        ]

    return _audited(audit, signers, digest, f"{store.where}@{digest}", work, action="attest")
