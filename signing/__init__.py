"""Sign and verify container image digests: SM2/SM3 (GB/T 32918) and cosign-compatible ECDSA.

This package knows nothing about builds: it signs a digest and verifies a digest. Modules:

- sm3, sm2, sm2_keys       SM3 hash, SM2 signatures (through gmssl), SM2 key files (OpenSSL-compatible)
- cosign_keys, secretbox   ECDSA P-256 keys, including cosign's own encrypted key format
- payload                  cosign's simple-signing payload, used by both schemes
- cosign_format, sm2_format  how a signature sits in a registry (`.sig` / `.sm2` tags)
- store                    reading/appending signature tags; signature files beside OCI archives
- sign, verify, promote    the operations; audit: hash-chained audit log; keyless: Sigstore in CI
"""

from signing.audit import AuditLog, verify_audit_log
from signing.cosign_keys import CosignPrivateKey, CosignPublicKey, load_cosign_private_key, load_cosign_public_key
from signing.promote import PromotionResult, promote
from signing.sign import SignatureRecord, sign_archive, sign_digest
from signing.sm2_keys import Sm2PrivateKey, Sm2PublicKey, load_sm2_private_key, load_sm2_public_key
from signing.verify import SignatureCheck, VerificationReport, verify_archive, verify_image

__all__ = [
    "AuditLog",
    "CosignPrivateKey",
    "CosignPublicKey",
    "PromotionResult",
    "SignatureCheck",
    "SignatureRecord",
    "Sm2PrivateKey",
    "Sm2PublicKey",
    "VerificationReport",
    "load_cosign_private_key",
    "load_cosign_public_key",
    "load_sm2_private_key",
    "load_sm2_public_key",
    "promote",
    "sign_archive",
    "sign_digest",
    "verify_archive",
    "verify_audit_log",
    "verify_image",
]
