"""Build results → signatures: the arrow between the builder and signing/.

Runs only after every target built and pushed; signs the index digest and each platform manifest
digest (never a tag), records the signatures in the build report and every step in the audit log.
signing/ stays ignorant of builds: this module hands it a repository and a digest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ocicore.errors import ConfigError, XcforgeError
from xcforge.build.result import BuildResult

AUDIT_ENV = "XCFORGE_AUDIT_LOG"


def audit_log(dist: Path):
    from signing.audit import AuditLog

    return AuditLog(Path(os.environ.get(AUDIT_ENV, dist / "audit.log.jsonl")))


def record_builds(results: list[BuildResult], dist: Path) -> None:
    """One audit entry per build and push: who, when, what digest, result (nothing secret)."""
    log = audit_log(dist)
    for result in results:
        action = "push" if result.output.pushes else "build"
        log.record(
            action,
            digest=result.digest or "",
            subject=result.pinned_ref or result.image_repo,
            result=result.status if not result.error else f"error: {result.error[:200]}",
            details={"target": result.target, "revision": result.revision, "fingerprint": result.fingerprint or ""},
        )


def sign_results(results: list[BuildResult], request) -> bool:
    from signing.sign import sign_archive, sign_digest
    from xcforge.sign.keys import load_cosign_signing_key, load_sm2_signing_key

    sm2_key = load_sm2_signing_key(request.sm2_key)
    cosign_key = load_cosign_signing_key(request.cosign_key)
    if sm2_key is None and cosign_key is None and not request.keyless:
        raise ConfigError("--sign needs --sm2-key and/or --cosign-key (or $XCFORGE_SM2_KEY / $XCFORGE_COSIGN_KEY)")
    audit = audit_log(request.options.dist_dir)
    ok = True
    for result in results:
        if result.error or not result.digest:
            continue
        digests = [result.digest] + [p.digest for p in result.platforms if p.digest and p.digest != result.digest]
        try:
            for digest in digests:
                if not result.output.pushes:
                    records = sign_archive(
                        result.archive, result.image_repo, digest, sm2_key=sm2_key, cosign_key=cosign_key, audit=audit
                    )
                elif sm2_key or cosign_key:
                    records = sign_digest(
                        result.image_repo, digest, sm2_key=sm2_key, cosign_key=cosign_key, audit=audit
                    )
                else:
                    records = []
                for record in records:
                    result.signatures.append(
                        {
                            "scheme": record.scheme,
                            "digest": digest,
                            "key_id": record.key_id[:16],
                            "location": record.location,
                            "result": "signed" if record.added else "already signed",
                        }
                    )
            _attest_result(result, sm2_key, cosign_key, audit)
            if request.keyless and result.output.pushes:
                from signing.keyless import sign_keyless

                keyless = sign_keyless(result.image_repo, result.digest)
                result.signatures.append(
                    {"scheme": "sigstore", "digest": result.digest, "key_id": keyless.identity, "result": "signed"}
                )
        except XcforgeError as exc:
            ok = False
            result.error, result.error_code = f"signing failed: {exc.message}", exc.exit_code
            print(f"error: {result.target}: {result.error}", file=sys.stderr)
    return ok


def _attest_result(result: BuildResult, sm2_key, cosign_key, audit) -> None:
    """Each platform's SBOM and BuildKit provenance, signed as in-toto attestations."""
    from signing.sign import attest
    from xcforge.attest.attestations import statements

    if sm2_key is None and cosign_key is None:
        return
    if not result.attestations:
        result.notes.append("no SBOM/provenance recorded for this build (rebuild with --force to attest it)")
        return
    for entry in result.attestations:
        where = {"repo": result.image_repo} if result.output.pushes else {"archive": result.archive}
        records = attest(
            statements(entry, result.image_repo),
            entry["digest"],
            sm2_key=sm2_key,
            cosign_key=cosign_key,
            audit=audit,
            **where,
        )
        for record in records:
            result.signatures.append(
                {
                    "scheme": record.scheme,
                    "digest": record.digest,
                    "key_id": record.key_id[:16],
                    "location": record.location,
                    "result": "attested" if record.added else "already attested",
                    "attestation": record.predicate_type,
                }
            )
