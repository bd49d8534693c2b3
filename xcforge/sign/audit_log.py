"""The audit log as the signing commands use it: a signed checkpoint after signing, and the whole
check of a log (`audit verify`) with the sentence a reader needs when it fails."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from signing.errors import VerificationFailed
from xcforge.errors import ConfigError

if TYPE_CHECKING:
    from signing.audit import AuditHead, AuditLog
    from signing.sm2_keys import Sm2PublicKey
    from xcforge.sign.options import SigningKeys

AUDIT_ENV = "XCFORGE_AUDIT_LOG"


def checkpoint(audit: AuditLog | None, keys: SigningKeys) -> None:
    """Sign the chain head with the SM2 key that just signed: rewriting the log then needs that key."""
    if audit is not None and keys.sm2 is not None:
        entry = audit.checkpoint(keys.sm2)
        print(f"audit checkpoint at entry {entry['seq']} (SM2 {keys.sm2.public_key.short_id})")


def parse_head(text: str | None) -> AuditHead | None:
    """--expect-head COUNT:HASH, as `audit verify` prints the head (HASH: 64 lower-case hex digits)."""
    from ocicore.digest import is_sha256_hex
    from signing.audit import AuditHead

    if text is None:
        return None
    count, sep, last_hash = text.partition(":")
    if not (sep and count.isdigit() and count.isascii() and is_sha256_hex(last_hash)):
        raise ConfigError(
            f"--expect-head {text[:80]!r}: not COUNT:HASH; pass the head an earlier `audit verify` printed "
            "(`head 42:<64 hex digits>`), as recorded in the CI report"
        )
    return AuditHead(int(count), last_hash)


def require_log(path: Path) -> None:
    """`path` names an audit log (its current file or a rotated segment); VerificationFailed when not."""
    from signing.audit import DEFAULT_AUDIT_LOG, AuditLog

    if path.is_dir():
        raise ConfigError(f"audit verify {path}: is a directory; give the audit log file (or ${AUDIT_ENV})")
    if not path.exists() and not AuditLog(path).segments():
        # Still a verification failure (exit 8): a deleted log is what tampering looks like.
        raise VerificationFailed(
            f"audit log {path}: does not exist (nor any rotated segment of it); name the log "
            f"(`audit verify PATH` or ${AUDIT_ENV}, default {DEFAULT_AUDIT_LOG}), or restore it from a backup "
            "or an `audit export` archive if it was deleted"
        )


def check_audit_log(path: Path, expected: AuditHead | None, public: Sm2PublicKey | None) -> list[str]:
    """The report of an intact log; VerificationFailed (exit 8) when it was altered."""
    from signing.audit import verify_audit_log

    result = verify_audit_log(path, expected_head=expected, sm2_public=public)
    if not result.ok:
        raise VerificationFailed(f"audit log {path}: {result.problem}")
    lines = [
        f"audit log {path}: {result.count} entries in {result.segments} file(s), chain intact, "
        f"head {result.count}:{result.last_hash}"
    ]
    if result.pruned_before:
        lines.append(f"  entries 0-{result.pruned_before - 1} pruned by the retention policy (recorded in the chain)")
    if public is not None:
        lines.append(
            f"  {result.checkpoints} checkpoint(s) signed by SM2 key {public.short_id}; "
            f"{result.unsigned_tail} entries after the last one"
        )
    else:
        lines.append("  checkpoints not checked: pass --sm2-key PUB to prove the chain was not rewritten")
    return lines


__all__ = ["AUDIT_ENV", "check_audit_log", "checkpoint", "parse_head", "require_log"]
