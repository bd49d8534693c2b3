"""Verify an image digest's signatures against trusted keys: one result per signature found.

A signature counts as valid only when all of these hold:
1. it verifies with one of the trusted keys of its scheme (SM2: with the verifier's distinguishing
   ID, default 1234567812345678; cosign: ECDSA P-256/SHA-256) over the exact payload bytes;
2. the payload is simple-signing JSON whose `docker-manifest-digest` is the digest being verified;
3. identity rule: its `docker-reference` names the repository being verified, or one the caller
   allows explicitly (`allowed_identities`).

Rule 3 is stricter than cosign, which ignores `docker-reference` unless asked. A signature says
"this digest, published *as this repository*": an image copied elsewhere without re-signing keeps
the old name, and verifying it under the new name fails until the destination is re-signed
(`promote --sm2-key/--cosign-key` does that) or the verifier names the source it trusts
(`--allow-identity`). `check_identity=False` gives cosign's behaviour.

The report is OK when every required scheme (default: each scheme a key was given for) has at least
one valid signature. Invalid ones are listed with their reason but do not by themselves fail it,
as with cosign; a scheme with no valid signature does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ocicore.registry import Reference, RegistryClient, RegistryError
from signing import cosign_format, sm2, sm2_format
from signing.attest import (
    PROVENANCE_PREDICATES,
    SBOM_PREDICATE,
    AttestationCheck,
    check_attestation,
    predicate_of,
)
from signing.cosign_keys import CosignPublicKey
from signing.errors import InvalidSigningRequest, VerificationFailed
from signing.payload import PayloadError, parse_payload
from signing.sm2_keys import Sm2PublicKey
from signing.store import FORMATS, OciArchiveStore, RegistryStore, SignatureStore, StoredSignature, identity_name

# `X as X`: re-exported for callers (sbom_cmds reads each platform's SBOM).
from signing.store import registry_platform_digests as registry_platform_digests

GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"


@dataclass(frozen=True)
class SignatureCheck:
    scheme: str
    key_id: str | None  # the trusted key that verified it, else the key id the signature claims
    valid: bool
    reason: str
    location: str
    found: bool = True  # False: no signature tag/file at all for this scheme

    def line(self) -> str:
        verdict = "VALID  " if self.valid else ("INVALID" if self.found else "MISSING")
        key = (self.key_id or "-")[:16]
        reason = " ".join(self.reason.split())[:300]  # one line per signature, whatever the cause said
        return f"{verdict} {self.scheme:<7} key {key:<16} {reason}  [{self.location}]"


@dataclass(frozen=True)
class VerificationReport:
    reference: str
    digest: str
    checks: tuple[SignatureCheck, ...]
    required: frozenset[str]
    problems: tuple[str, ...] = field(default=())
    attestations: tuple[AttestationCheck, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())

    @property
    def satisfied(self) -> frozenset[str]:
        return frozenset(c.scheme for c in self.checks if c.valid)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(sorted(self.required - self.satisfied))

    @property
    def ok(self) -> bool:
        return not self.problems and not self.missing

    def lines(self) -> list[str]:
        out = [c.line() for c in self.checks] + [a.line() for a in self.attestations]
        out += [f"ERROR   {p}" for p in self.problems]
        out += [f"NOTE    {n}" for n in self.notes]
        absent = {c.scheme for c in self.checks if not c.found}
        for scheme in (s for s in self.missing if s not in absent):
            out.append(f"MISSING {scheme:<7} no valid {scheme} signature by a trusted key for {self.digest}")
        verdict = "OK" if self.ok else "FAILED"
        required = ", ".join(sorted(self.required)) or "none"
        out.append(f"{verdict}: {self.reference} ({len(self.checks)} signature(s); required: {required})")
        return out


@dataclass(frozen=True)
class _Policy:
    digest: str
    identities: frozenset[str]
    check_identity: bool
    sm2_keys: tuple[Sm2PublicKey, ...]
    cosign_keys: tuple[CosignPublicKey, ...]
    sm2_dist_id: bytes


def _check(stored: StoredSignature, policy: _Policy) -> SignatureCheck:
    fmt = FORMATS[stored.scheme]
    claimed = fmt.key_id_from(stored.annotations)

    def invalid(reason: str, key_id: str | None = claimed) -> SignatureCheck:
        return SignatureCheck(stored.scheme, key_id, False, reason, stored.location)

    if stored.problem or stored.payload is None:
        return invalid(stored.problem or "payload missing")
    signature = fmt.signature_from(stored.annotations)
    if signature is None:
        return invalid(f"no signature annotation ({fmt.SIGNATURE_ANNOTATION}) or it is not base64")

    verified_by: str | None = None
    if stored.scheme == sm2_format.SCHEME:
        # Try the key the layer names first; the annotation is only a hint, so then all of them.
        for sm2_key in sorted(policy.sm2_keys, key=lambda k: k.key_id != claimed):
            if sm2_key.verify(stored.payload, signature, dist_id=policy.sm2_dist_id):
                verified_by = sm2_key.key_id
                break
    elif stored.scheme == cosign_format.SCHEME:
        for cosign_key in policy.cosign_keys:
            if cosign_key.verify(stored.payload, signature):
                verified_by = cosign_key.key_id
                break
    if verified_by is None:
        trusted = {k.key_id for k in policy.sm2_keys} | {k.key_id for k in policy.cosign_keys}
        if stored.scheme == sm2_format.SCHEME:
            dist_id = sm2_format.dist_id_from(stored.annotations)
            if dist_id is not None and dist_id != policy.sm2_dist_id:
                return invalid(
                    f"signed with distinguishing ID {dist_id.decode(errors='replace')!r}; "
                    f"this check uses {policy.sm2_dist_id.decode(errors='replace')!r}"
                )
        if claimed and claimed in trusted:
            return invalid("signature does not verify: the payload or the signature was modified")
        if claimed:
            return invalid(f"signed by key {claimed[:16]}, which is not a trusted key")
        return invalid("no trusted key verifies this signature (other key, or modified payload/signature)")

    try:
        claims = parse_payload(stored.payload)
    except PayloadError as exc:
        return invalid(f"signed payload is unusable: {exc}", verified_by)
    if claims.manifest_digest != policy.digest:
        return invalid(f"payload is for another image: {claims.manifest_digest}", verified_by)
    if policy.check_identity and identity_name(claims.docker_reference) not in policy.identities:
        return invalid(
            f"payload names repository {claims.docker_reference}, not {sorted(policy.identities)[0]} "
            "(copied or retagged without re-signing; re-sign, or allow that identity explicitly)",
            verified_by,
        )
    return SignatureCheck(stored.scheme, verified_by, True, f"signed for {claims.docker_reference}", stored.location)


def _policy(
    digest: str,
    repository_name: str,
    sm2_public_keys: Sequence[Sm2PublicKey],
    cosign_public_keys: Sequence[CosignPublicKey],
    allowed_identities: Iterable[str],
    check_identity: bool,
    sm2_dist_id: bytes,
) -> _Policy:
    identities = frozenset({repository_name, *(identity_name(i) for i in allowed_identities)})
    return _Policy(digest, identities, check_identity, tuple(sm2_public_keys), tuple(cosign_public_keys), sm2_dist_id)


KEYLESS = "keyless"


def _required(
    require: Iterable[str] | None,
    sm2_keys: Sequence[Sm2PublicKey],
    cosign_keys: Sequence[CosignPublicKey],
    keyless: bool = False,
) -> frozenset[str]:
    given = {sm2_format.SCHEME: bool(sm2_keys), cosign_format.SCHEME: bool(cosign_keys), KEYLESS: keyless}
    if require is None:
        required = frozenset(scheme for scheme, has in given.items() if has)
        if not required:
            raise InvalidSigningRequest(
                "no trusted keys given: pass --sm2-key and/or --cosign-key (or --keyless-identity)"
            )
        return required
    required = frozenset(require)
    for scheme in required:
        if scheme not in given:
            raise InvalidSigningRequest(f"unknown scheme {scheme!r} in require (known: {', '.join(given)})")
        if not given[scheme]:
            what = "--keyless-identity" if scheme == KEYLESS else f"{scheme} public key"
            raise InvalidSigningRequest(f"{scheme} signatures are required but no {what} was given")
    return required


def _keyless_checks(store: SignatureStore, digest: str, identity: str, issuer: str) -> list[SignatureCheck]:
    from signing.keyless import read_bundles, referrers_tag, verify_keyless

    if not isinstance(store, RegistryStore):
        raise InvalidSigningRequest("Sigstore bundles live in a registry: --keyless-identity needs IMAGE@DIGEST there")
    client, ref = store.client, store.ref
    where = f"{ref.name}:{referrers_tag(digest)}"
    bundles = read_bundles(client, ref, digest)
    if not bundles:
        return [SignatureCheck(KEYLESS, None, False, "no Sigstore bundles (referrers tag not found)", where, False)]
    checks = []
    for index, bundle in enumerate(bundles):
        try:
            verify_keyless(bundle, digest, identity=identity, issuer=issuer)
        except VerificationFailed as exc:
            first_line = exc.message.splitlines()[0] if exc.message else "does not verify"
            checks.append(SignatureCheck(KEYLESS, identity, False, first_line, f"{where}#{index}"))
            continue
        checks.append(
            SignatureCheck(KEYLESS, identity, True, f"Sigstore certificate for {identity}", f"{where}#{index}")
        )
    return checks


def verify(
    store: SignatureStore,
    digest: str,
    sm2_public_keys: Sequence[Sm2PublicKey] = (),
    cosign_public_keys: Sequence[CosignPublicKey] = (),
    require: Iterable[str] | None = None,
    *,
    allowed_identities: Iterable[str] = (),
    check_identity: bool = True,
    sm2_dist_id: bytes = sm2.DEFAULT_DIST_ID,
    keyless_identity: str | None = None,
    keyless_issuer: str = GITHUB_ACTIONS_ISSUER,
    attestations: bool | str = True,
) -> VerificationReport:
    """Verify the signatures of `digest` in `store` (and, unless `attestations` is False, each
    platform's signed SBOM and provenance). With `keyless_identity` (the certificate identity, e.g.
    a workflow URL) Sigstore bundles in the registry are verified too, offline, against the trusted
    root shipped with sigstore-python."""
    required = _required(require, sm2_public_keys, cosign_public_keys, keyless=bool(keyless_identity))
    problems: list[str] = []
    if not store.has_subject(digest):
        problems.append(f"image {store.name}@{digest} not found in the registry")
    policy = _policy(
        digest, store.name, sm2_public_keys, cosign_public_keys, allowed_identities, check_identity, sm2_dist_id
    )
    checks: list[SignatureCheck] = []
    for scheme in _schemes_to_read(required, sm2_public_keys, cosign_public_keys):
        try:
            stored = store.read_signatures(digest, scheme)
        except RegistryError as exc:
            problems.append(f"cannot read {scheme} signatures: {exc.message}")
            continue
        if stored is None:
            reason, where = store.absent(digest, scheme)
            checks.append(SignatureCheck(scheme, None, False, reason, where, found=False))
            continue
        checks.extend(_check(s, policy) for s in stored)
    if keyless_identity:
        try:
            checks.extend(_keyless_checks(store, digest, keyless_identity, keyless_issuer))
        except RegistryError as exc:
            problems.append(f"cannot read Sigstore bundles: {exc.message}")
    attested: list[AttestationCheck] = []
    notes: list[str] = []
    if attestations and not problems:
        try:
            schemes = _attestation_schemes(required, sm2_public_keys, cosign_public_keys)
            attested, more, notes = _attestation_checks(store, digest, schemes, policy, attestations)
            problems += more
        except RegistryError as exc:
            problems.append(f"cannot read attestations: {exc.message}")
    return VerificationReport(
        store.describe(digest), digest, tuple(checks), required, tuple(problems), tuple(attested), tuple(notes)
    )


def verify_image(
    ref_with_digest: str | Reference,
    sm2_public_keys: Sequence[Sm2PublicKey] = (),
    cosign_public_keys: Sequence[CosignPublicKey] = (),
    require: Iterable[str] | None = None,
    *,
    client: RegistryClient | None = None,
    insecure: bool = False,
    **options: Any,
) -> VerificationReport:
    """verify() of `registry/repo@sha256:...` in its registry. A tag instead of a digest is resolved
    first (the report names the digest; run that digest, not the tag, or the image may change
    between check and use)."""
    ref = ref_with_digest if isinstance(ref_with_digest, Reference) else Reference.parse(ref_with_digest)
    # Refused before the registry is read: no trusted keys, or an unknown scheme required.
    _required(require, sm2_public_keys, cosign_public_keys, keyless=bool(options.get("keyless_identity")))
    store = RegistryStore(ref, client, insecure=insecure)
    digest = ref.digest or store.resolve(ref.tag or "latest")
    return verify(store, digest, sm2_public_keys, cosign_public_keys, require, **options)


def verify_archive(
    archive: os.PathLike[str] | str,
    digest: str,
    repository: str,
    sm2_public_keys: Sequence[Sm2PublicKey] = (),
    cosign_public_keys: Sequence[CosignPublicKey] = (),
    require: Iterable[str] | None = None,
    **options: Any,
) -> VerificationReport:
    """verify() of the signature files beside an OCI-layout archive (store.detached_path)."""
    store = OciArchiveStore(archive, identity_name(repository))
    return verify(store, digest, sm2_public_keys, cosign_public_keys, require, **options)


# ------------------------------------------------------------------------------------------ attestations


def _attestation_schemes(
    required: frozenset[str], sm2_keys: Sequence[Sm2PublicKey], cosign_keys: Sequence[CosignPublicKey]
) -> list[str]:
    return [s for s in _schemes_to_read(required, sm2_keys, cosign_keys) if s in FORMATS]


def _attestation_checks(
    store: SignatureStore, digest: str, schemes: Sequence[str], policy: _Policy, mode: bool | str
) -> tuple[list[AttestationCheck], list[str], list[str]]:
    """Every attestation of every platform; what is missing (problems); notes.

    Wanted, for each platform and each scheme a key was given for: a valid SBOM attestation that
    matches the attached SBOM, and a valid provenance attestation. A platform that carries no SBOM
    and no attestation at all (an image xcforge did not build) is a note, unless `mode` is
    "require"; one that carries any of them must carry all of them.
    """
    checks: list[AttestationCheck] = []
    problems: list[str] = []
    notes: list[str] = []
    try:
        platforms = store.platform_digests(digest)
    except InvalidSigningRequest as exc:
        (problems if mode == "require" else notes).append(f"attestations not checked: {exc.message}")
        platforms = {}
    for platform_digest, platform in sorted(platforms.items(), key=lambda kv: kv[1]):
        raw = store.read_sbom(platform_digest, platform)
        stored_by_scheme = {scheme: store.read_attestations(platform_digest, scheme) for scheme in schemes}
        if raw is None and all(v is None for v in stored_by_scheme.values()) and mode != "require":
            notes.append(
                f"{platform} {platform_digest}: no SBOM and no attestations (not built by xcforge?); "
                "--require-attestations makes this an error"
            )
            continue
        for scheme in schemes:
            stored = stored_by_scheme[scheme] or []
            found = [
                check_attestation(s, platform_digest, policy.sm2_keys, policy.cosign_keys, policy.sm2_dist_id)
                for s in stored
            ]
            for index, check in enumerate(found):
                if check.valid and check.predicate_type == SBOM_PREDICATE and check.statement is not None:
                    if raw is None:
                        found[index] = _invalid(check, "no SBOM attached beside the image to compare with")
                    elif _json(raw) != predicate_of(check.statement):
                        found[index] = _invalid(check, "the signed SBOM differs from the SBOM attached to the image")
            checks += found
            valid = {c.predicate_type for c in found if c.valid}
            if SBOM_PREDICATE not in valid:
                problems.append(f"{platform} {platform_digest}: no valid {scheme} SBOM attestation")
            if not valid.intersection(PROVENANCE_PREDICATES):
                problems.append(f"{platform} {platform_digest}: no valid {scheme} provenance attestation")
    return checks, problems, notes


def _invalid(check: AttestationCheck, reason: str) -> AttestationCheck:
    return dataclasses.replace(check, valid=False, reason=reason, statement=None)


def _json(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _schemes_to_read(
    required: frozenset[str], sm2_keys: Sequence[Sm2PublicKey], cosign_keys: Sequence[CosignPublicKey]
) -> list[str]:
    schemes = {scheme for scheme in required if scheme in FORMATS}  # keyless bundles are read separately
    if sm2_keys:
        schemes.add(sm2_format.SCHEME)
    if cosign_keys:
        schemes.add(cosign_format.SCHEME)
    return sorted(schemes)
