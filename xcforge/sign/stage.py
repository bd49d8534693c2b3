"""Build results → signatures: the arrow between the builder and signing/.

Runs only after every target built and pushed; signs the index digest and each platform manifest
digest (never a tag), and the same of every published variant (the zstd index and its platform
manifests, xcforge/publish/zstd.py), records the signatures in the build report and every step in the audit log.
signing/ stays ignorant of builds: this module hands it a repository and a digest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from signing.audit import AuditLog
from xcforge.bake.result import BuildResult
from xcforge.errors import KNOWN_ERRORS, exit_code
from xcforge.records import SignatureRecord, VariantRecord
from xcforge.sign.options import SigningKeys, SignOptions

if TYPE_CHECKING:  # signing's schemes load when something is signed
    from signing.cosign_keys import CosignPrivateKey
    from signing.keyless import KeylessRecord
    from signing.sign import AttestationRecord as SigningAttestation
    from signing.sign import SignatureRecord as SigningSignature
    from signing.sm2_keys import Sm2PrivateKey
    from xcforge.publish.push import PushOutcome
    from xcforge.publish.zstd import PublishOutcome

    # What sign_subject returns, one per signature, attestation or keyless signature made.
    SignedRecord = SigningSignature | SigningAttestation | KeylessRecord

AUDIT_ENV = "XCFORGE_AUDIT_LOG"


def audit_log(dist: Path) -> AuditLog:
    return AuditLog(Path(os.environ.get(AUDIT_ENV, dist / "audit.log.jsonl")))


def record_builds(
    results: list[BuildResult],
    dist: Path,
    pushed: Iterable[PushOutcome] = (),
    published: Iterable[PublishOutcome] = (),
) -> None:
    """One audit entry per build and push: who, when, what digest, result (nothing secret); then
    one per variant the publish stage wrote."""
    log = audit_log(dist)
    outcomes = {o.target: o for o in published}
    push_errors = {o.target: o.error for o in pushed if o.error}
    for result in results:
        action = "push" if result.output.pushes else "build"
        outcome = outcomes.get(result.target)
        error = result.error or push_errors.get(result.target) or (outcome.error if outcome else None)
        log.record(
            action,
            digest=result.digest or "",
            subject=result.pinned_ref or result.image_repo,
            result=result.status if not error else f"error: {error[:200]}",
            details={"target": result.target, "revision": result.revision, "fingerprint": result.fingerprint or ""},
        )
    record_variants([(r, o.variants) for r in results if (o := outcomes.get(r.target))], dist, log)


def record_variants(
    published: Iterable[tuple[BuildResult, Iterable[VariantRecord]]], dist: Path, log: AuditLog | None = None
) -> None:
    """One audit entry per published variant (the zstd image written next to the gzip one): each
    build record with the variants written of it."""
    log = log or audit_log(dist)
    for result, variants in published:
        for variant in variants:
            log.record(
                "push",
                digest=variant.digest,
                subject=f"{result.image_repo}@{variant.digest}",
                result="published",
                details={
                    "target": result.target,
                    "compression": variant.compression,
                    "source_digest": variant.source_digest,
                    "tags": ",".join(variant.refs),
                },
            )


@dataclass
class SignSubject:
    """One image to sign: its repository, the digests to sign (index first), where it lives (an
    archive, or the registry), and the in-toto statements (SBOM, provenance) to attest per platform."""

    repository: str
    digests: list[str]
    archive: Path | None = None
    statements: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    insecure: bool = False


class _KeyArgs(TypedDict):
    """The keyword arguments every signing.sign call of one subject shares."""

    sm2_key: Sm2PrivateKey | None
    cosign_key: CosignPrivateKey | None
    sm2_dist_id: bytes
    audit: AuditLog | None


def sign_subject(subject: SignSubject, keys: SigningKeys, audit: AuditLog | None) -> list[SignedRecord]:
    """Sign every digest with every key, attest every statement, then keyless if asked. Returns the
    records (signing's SignatureRecord / AttestationRecord / keyless record), in that order. The
    one signing stage: `build --sign` and the `sign` command both come here."""
    from signing.sign import attest, sign_archive, sign_digest

    common: _KeyArgs = {"sm2_key": keys.sm2, "cosign_key": keys.cosign, "sm2_dist_id": keys.sm2_dist_id, "audit": audit}
    records: list[SignedRecord] = []
    if keys.any_key:
        for digest in subject.digests:
            if subject.archive is not None:
                records += sign_archive(
                    subject.archive, subject.repository, digest, annotations=subject.annotations, **common
                )
            else:
                records += sign_digest(
                    subject.repository, digest, annotations=subject.annotations, insecure=subject.insecure, **common
                )
        # In the files beside the archive when there is one (attest then ignores `repo`), else the registry.
        for platform_digest, statements in subject.statements.items():
            if statements:
                records += attest(
                    statements,
                    platform_digest,
                    repo=subject.repository,
                    archive=subject.archive,
                    insecure=subject.insecure,
                    **common,
                )
    if keys.keyless and subject.archive is None:
        from signing.keyless import sign_keyless

        keyless = sign_keyless(subject.repository, subject.digests[0], insecure=subject.insecure)
        if audit is not None:
            audit.record(
                "sign",
                digest=subject.digests[0],
                subject=subject.repository,
                details={"scheme": "keyless", "identity": keyless.identity},
            )
        records.append(keyless)
    return records


def as_signature_record(record: SignedRecord, digest: str) -> SignatureRecord:
    """signing's record of what it wrote → the report's (`digest`: the image's, when it names none).
    The one place where signing's types cross into the build's records."""
    if hasattr(record, "identity"):  # keyless
        return SignatureRecord("sigstore", record.digest or digest, record.identity, result="signed")
    common = {"scheme": record.scheme, "digest": record.digest or digest, "key_id": record.key_id[:16]}
    if hasattr(record, "predicate_type"):
        result = "attested" if record.added else "already attested"
        return SignatureRecord(**common, location=record.location, result=result, attestation=record.predicate_type)
    return SignatureRecord(**common, location=record.location, result="signed" if record.added else "already signed")


def signed_digests(result: BuildResult, variants: Iterable[VariantRecord] | None = None) -> list[str]:
    """What the sign stage signs for a pushed result: the index, each platform manifest, then the
    same of each published variant (zstd; the record's own unless `variants` names this run's).
    Its SBOM and provenance are attested for the gzip platform manifests only: their statements
    name those digests, and each variant manifest names its gzip source (io.xcforge.zstd.variant-of)."""
    digests = [result.digest] + [p.digest for p in result.platforms]
    for variant in result.variants if variants is None else variants:
        digests += [variant.digest] + [p.digest for p in variant.platforms]
    return [d for d in dict.fromkeys(digests) if d]


def _build_subject(result: BuildResult, variants: Iterable[VariantRecord] | None) -> SignSubject:
    from xcforge.attest.attestations import statements

    digests = signed_digests(result, variants)
    return SignSubject(
        repository=result.image_repo,
        digests=[d for d in digests if d],
        archive=None if result.output.pushes else Path(result.archive or ""),
        statements={e.digest: statements(e, result.image_repo) for e in result.attestations},
    )


@dataclass(frozen=True)
class SignOutcome:
    """The sign stage's result for one built target: the signatures and attestations it wrote (as
    the report lists them), notes, and the error that stopped it. The build record is not touched:
    the report stage puts the two together (xcforge/report/results.py)."""

    target: str
    signed: tuple[SignatureRecord, ...] = ()
    notes: tuple[str, ...] = ()
    error: str | None = None
    error_code: int = 0

    @property
    def signatures(self) -> tuple[dict[str, Any], ...]:
        """What was signed, as report.json lists it (commands/sign_cmds.py prints these)."""
        return tuple(record.as_dict() for record in self.signed)


def sign_results(
    results: list[BuildResult], options: SignOptions, published: Iterable[PublishOutcome] = ()
) -> list[SignOutcome]:
    """The sign stage of `build --sign`: each built result's digests (and those of the variants the
    publish stage wrote of it), SBOMs and provenance, with the keys the command line resolved
    (sign/options.py) before the first build started."""
    audit = audit_log(options.dist_dir)
    outcomes = {o.target: o for o in published}
    signed = []
    for result in results:
        outcome = outcomes.get(result.target)
        if result.error or not result.digest or (outcome and outcome.error):
            continue
        variants = outcome.variants_over(result.variants) if outcome else None
        signed.append(sign_recorded(result, options.keys, audit, variants))
    return signed


def sign_recorded(
    result: BuildResult, keys: SigningKeys, audit: AuditLog | None, variants: Iterable[VariantRecord] | None = None
) -> SignOutcome:
    """Sign one build record's digests (signed_digests: with `variants`, this run's in place of the
    record's) and attest its SBOMs and provenance: the pipeline's sign stage, and `sign --target`
    on a recorded result."""
    notes = []
    if keys.any_key and not result.attestations:
        notes.append("no SBOM/provenance recorded for this build (rebuild with --force to attest it)")
    signatures: tuple[SignatureRecord, ...] = ()
    error, error_code = None, 0
    try:
        made = sign_subject(_build_subject(result, variants), keys, audit)
        signatures = tuple(as_signature_record(record, result.digest or "") for record in made)
    except KNOWN_ERRORS as exc:
        error, error_code = f"signing failed: {exc.message}", exit_code(exc)
        print(f"error: {result.target}: {error}", file=sys.stderr)
    return SignOutcome(result.target, signatures, tuple(notes), error, error_code)


__all__ = [
    "SignOutcome",
    "SignSubject",
    "SigningKeys",
    "as_signature_record",
    "audit_log",
    "record_builds",
    "record_variants",
    "sign_recorded",
    "sign_results",
    "sign_subject",
    "signed_digests",
]
