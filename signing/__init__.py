"""Sign and verify container image digests: SM2/SM3 (GB/T 32918) and cosign-compatible ECDSA.

This package knows nothing about builds: it signs a digest and verifies a digest. Modules:

- sm3, sm2, sm2_keys       SM3 hash, SM2 signatures (through gmssl), SM2 key files (OpenSSL-compatible)
- cosign_keys, secretbox   ECDSA P-256 keys, including cosign's own encrypted key format
- payload                  cosign's simple-signing payload, used by both schemes
- cosign_format, sm2_format  how a signature sits in a registry (`.sig` / `.sm2` tags)
- store                    reading/appending signature tags; signature files beside OCI archives
- sign, verify, promote    the operations; audit: hash-chained audit log; keyless: Sigstore in CI
- errors                   what it raises, without exit codes (xcforge/errors.py gives them)
"""

from __future__ import annotations

import importlib

# The public names, loaded on first use: `import signing.sm3` need not import every scheme and
# the registry code (a build imports signing for one attestation helper).
_EXPORTS = {
    "AuditLog": "signing.audit",
    "CosignPrivateKey": "signing.cosign_keys",
    "CosignPublicKey": "signing.cosign_keys",
    "PromotionResult": "signing.promote",
    "SignatureCheck": "signing.verify",
    "SignatureRecord": "signing.sign",
    "Sm2PrivateKey": "signing.sm2_keys",
    "Sm2PublicKey": "signing.sm2_keys",
    "VerificationReport": "signing.verify",
    "load_cosign_private_key": "signing.cosign_keys",
    "load_cosign_public_key": "signing.cosign_keys",
    "load_sm2_private_key": "signing.sm2_keys",
    "load_sm2_public_key": "signing.sm2_keys",
    "promote": "signing.promote",
    "sign_archive": "signing.sign",
    "sign_digest": "signing.sign",
    "verify_archive": "signing.verify",
    "verify_audit_log": "signing.audit",
    "verify_image": "signing.verify",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
