"""Verification for the command line: one image's (or model artifact's) signatures checked in its
SignatureStore against the trusted keys, the report printed and audited, VerificationFailed (exit 8)
when it does not pass. `verify IMAGE@DIGEST`, `verify --target`, `model verify` and `model unpack`
all come here; signing.verify does the checking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from signing.errors import VerificationFailed
from signing.verify import GITHUB_ACTIONS_ISSUER, verify
from xcforge.sign.options import DEFAULT_SM2_DIST_ID

if TYPE_CHECKING:
    from signing.audit import AuditLog
    from signing.cosign_keys import CosignPublicKey
    from signing.sm2_keys import Sm2PublicKey
    from signing.store import SignatureStore
    from signing.verify import VerificationReport


@dataclass(frozen=True)
class Trust:
    """What a verification trusts (the flags' keys, loaded) and how strict it is."""

    sm2_keys: tuple[Sm2PublicKey, ...] = ()
    cosign_keys: tuple[CosignPublicKey, ...] = ()
    require: tuple[str, ...] | None = None  # None: every scheme a key was given for
    allowed_identities: tuple[str, ...] = ()
    check_identity: bool = True
    sm2_dist_id: bytes = DEFAULT_SM2_DIST_ID.encode()
    keyless_identity: str | None = None
    keyless_issuer: str = GITHUB_ACTIONS_ISSUER


def check_signatures(
    store: SignatureStore,
    digest: str,
    trust: Trust,
    *,
    attestations: bool | str,
    audit: Callable[[], AuditLog | None],
) -> VerificationReport:
    """Verify, print the report, audit it; VerificationFailed when it fails. `audit` opens the log
    when there is something to record, so a verification that could not even run (registry
    unreachable, bad archive) is audited too."""
    try:
        report = verify(
            store,
            digest,
            trust.sm2_keys,
            trust.cosign_keys,
            trust.require,
            allowed_identities=trust.allowed_identities,
            check_identity=trust.check_identity,
            sm2_dist_id=trust.sm2_dist_id,
            keyless_identity=trust.keyless_identity,
            keyless_issuer=trust.keyless_issuer,
            attestations=attestations,
        )
    except Exception as exc:
        log = audit()
        if log is not None:
            log.record("verify", digest=digest, subject=store.name, result=f"error: {type(exc).__name__}")
        raise
    for line in report.lines():
        print(line)
    log = audit()
    if log is not None:
        log.record("verify", digest=report.digest, subject=report.reference, result="ok" if report.ok else "failed")
    if not report.ok:
        raise VerificationFailed(f"{report.reference}: {failure(report)}")
    return report


def failure(report: VerificationReport) -> str:
    """Why a report failed, in one sentence (the lines above say the rest)."""
    reasons = [f"required signatures missing or invalid ({', '.join(report.missing)})"] if report.missing else []
    if report.problems:
        more = f" (+{len(report.problems) - 1} more above)" if len(report.problems) > 1 else ""
        reasons.append(f"{report.problems[0]}{more}")
    return "; ".join(reasons) or "see above"


__all__ = ["Trust", "check_signatures", "failure"]
