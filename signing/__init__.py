"""Sign and verify container image digests: SM2/SM3 (GB/T 32918) and cosign-compatible ECDSA.

This package knows nothing about builds: it signs a digest and verifies a digest. Modules:

- sm3, sm2, sm2_keys       SM3 hash, SM2 signatures (through gmssl), SM2 key files (OpenSSL-compatible)
- cosign_keys, secretbox   ECDSA P-256 keys, including cosign's own encrypted key format
- payload                  cosign's simple-signing payload, used by both schemes
- cosign_format, sm2_format  how a signature sits in a registry (`.sig` / `.sm2` tags)
- store                    SignatureStore: where signatures and attestations live, a registry's tags
                           (RegistryStore) or the files beside an OCI archive (OciArchiveStore)
- dsse                     DSSE envelopes of in-toto statements (attestations)
- sign, verify, promote    the operations, each written once against a SignatureStore; attest:
                           checking attestations; audit: hash-chained audit log; keyless: Sigstore in CI
- errors                   what it raises, without exit codes (xcforge/errors.py gives them)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# The public names, loaded on first use: `import signing.sm3` need not import every scheme and
# the registry code (a build imports signing for one attestation helper). None may share its name
# with a submodule: once imported, `signing.promote` is the module whatever __getattr__ says (the
# function is `signing.promote.promote`).
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
    "OciArchiveStore": "signing.store",
    "RegistryStore": "signing.store",
    "SignatureStore": "signing.store",
    "open_store": "signing.store",
    "sign_archive": "signing.sign",
    "sign_digest": "signing.sign",
    "verify_archive": "signing.verify",
    "verify_audit_log": "signing.audit",
    "verify_image": "signing.verify",
}


if TYPE_CHECKING:  # the same names for the type checker (tests/signing/test_signing_exports.py keeps them equal)
    from signing.audit import AuditLog as AuditLog
    from signing.audit import verify_audit_log as verify_audit_log
    from signing.cosign_keys import CosignPrivateKey as CosignPrivateKey
    from signing.cosign_keys import CosignPublicKey as CosignPublicKey
    from signing.cosign_keys import load_cosign_private_key as load_cosign_private_key
    from signing.cosign_keys import load_cosign_public_key as load_cosign_public_key
    from signing.promote import PromotionResult as PromotionResult
    from signing.sign import SignatureRecord as SignatureRecord
    from signing.sign import sign_archive as sign_archive
    from signing.sign import sign_digest as sign_digest
    from signing.sm2_keys import Sm2PrivateKey as Sm2PrivateKey
    from signing.sm2_keys import Sm2PublicKey as Sm2PublicKey
    from signing.sm2_keys import load_sm2_private_key as load_sm2_private_key
    from signing.sm2_keys import load_sm2_public_key as load_sm2_public_key
    from signing.store import OciArchiveStore as OciArchiveStore
    from signing.store import RegistryStore as RegistryStore
    from signing.store import SignatureStore as SignatureStore
    from signing.store import open_store as open_store
    from signing.verify import SignatureCheck as SignatureCheck
    from signing.verify import VerificationReport as VerificationReport
    from signing.verify import verify_archive as verify_archive
    from signing.verify import verify_image as verify_image


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
