"""ECDSA P-256 keys for cosign-compatible signatures, through `cryptography`.

Read: PKCS#8 (`PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`), SEC1 (`EC PRIVATE KEY`), and cosign's own
`ENCRYPTED SIGSTORE PRIVATE KEY` / `ENCRYPTED COSIGN PRIVATE KEY` — a JSON document of
go-securesystemslib's `encrypted` package: scrypt KDF + NaCl secretbox over the PKCS#8 DER.
Written: that cosign format (so the same file works with `cosign sign --key`), and a PKIX
`PUBLIC KEY`, which `cosign verify --key` reads.

Signatures: ECDSA over SHA-256 of the payload, ASN.1 DER (cosign SIGNATURE_SPEC.md "ECDSA-P256").
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import overload

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from signing import secretbox
from signing.errors import SigningError
from signing.pem import armor, is_pem, read_blocks

SIGSTORE_LABELS = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
# cosign 2.5 writes N=65536, r=8, p=1; older releases wrote N=32768. Anything above 2^20 is refused
# rather than allowed to take gigabytes of memory.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 65536, 8, 1
_MAX_SCRYPT_N = 1 << 20


@dataclass(frozen=True)
class CosignPublicKey:
    key: ec.EllipticCurvePublicKey

    def to_der(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

    def to_pem(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.to_der()).hexdigest()

    @property
    def short_id(self) -> str:
        return self.key_id[:16]

    def verify(self, payload: bytes, signature: bytes) -> bool:
        """Never raises; a malformed signature is an invalid one."""
        try:
            self.key.verify(bytes(signature), bytes(payload), ec.ECDSA(hashes.SHA256()))
            return True
        except (InvalidSignature, ValueError, TypeError):
            return False


@dataclass(frozen=True)
class CosignPrivateKey:
    key: ec.EllipticCurvePrivateKey = field(repr=False)

    def __repr__(self) -> str:
        return f"CosignPrivateKey(key_id={self.public_key.short_id})"

    @classmethod
    def generate(cls) -> CosignPrivateKey:
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @property
    def public_key(self) -> CosignPublicKey:
        return CosignPublicKey(self.key.public_key())

    @property
    def key_id(self) -> str:
        return self.public_key.key_id

    def sign(self, payload: bytes) -> bytes:
        return self.key.sign(bytes(payload), ec.ECDSA(hashes.SHA256()))

    def to_pkcs8_der(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def to_cosign_pem(self, password: bytes | str) -> bytes:
        """cosign's `ENCRYPTED SIGSTORE PRIVATE KEY` (an empty password is what cosign itself allows)."""
        pw = password.encode("utf-8") if isinstance(password, str) else bytes(password)
        salt, nonce = os.urandom(32), os.urandom(secretbox.NONCE_SIZE)
        box_key = Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(pw)
        document = {
            "kdf": {
                "name": "scrypt",
                "params": {"N": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P},
                "salt": base64.b64encode(salt).decode(),
            },
            "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
            "ciphertext": base64.b64encode(secretbox.seal(self.to_pkcs8_der(), nonce, box_key)).decode(),
        }
        return armor(json.dumps(document, separators=(",", ":")).encode(), SIGSTORE_LABELS[0])


def load_cosign_public_key(data: bytes, *, source: str = "cosign public key") -> CosignPublicKey:
    try:
        key = serialization.load_pem_public_key(data) if is_pem(data) else serialization.load_der_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{source}: not a PKIX public key ({exc})") from exc
    return CosignPublicKey(_require_p256(key, source))


def load_cosign_private_key(
    data: bytes, password: bytes | str | None = None, *, source: str = "cosign private key"
) -> CosignPrivateKey:
    pw = password.encode("utf-8") if isinstance(password, str) else password
    if is_pem(data):
        for block in read_blocks(data, what=source):
            if block.label in SIGSTORE_LABELS:
                der = _open_sigstore_document(block.der, pw or b"", source)
                return CosignPrivateKey(_require_p256(_load_der_private(der, None, source), source))
            if block.label in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY"):
                try:
                    key = serialization.load_pem_private_key(block.text, pw or None)
                except TypeError as exc:  # encrypted without a password, or a password for a plain key
                    raise SigningError(f"{source}: {exc}") from exc
                except (ValueError, UnsupportedAlgorithm) as exc:
                    raise SigningError(f"{source}: wrong password or unreadable key ({exc})") from exc
                return CosignPrivateKey(_require_p256(key, source))
            if block.label == "PUBLIC KEY":
                raise SigningError(f"{source}: this is a public key; signing needs the private key")
        raise SigningError(f"{source}: no private key PEM block")
    return CosignPrivateKey(_require_p256(_load_der_private(bytes(data), pw, source), source))


def _load_der_private(der: bytes, password: bytes | None, source: str) -> PrivateKeyTypes:
    try:
        return serialization.load_der_private_key(der, password or None)
    except TypeError as exc:
        raise SigningError(f"{source}: {exc}") from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{source}: wrong password or unreadable key ({exc})") from exc


def _open_sigstore_document(raw: bytes, password: bytes, source: str) -> bytes:
    try:
        doc = json.loads(raw)
        kdf, cipher = doc["kdf"], doc["cipher"]
        if kdf["name"] != "scrypt" or cipher["name"] != "nacl/secretbox":
            raise SigningError(f"{source}: unsupported encryption {kdf['name']}/{cipher['name']}")
        n, r, p = int(kdf["params"]["N"]), int(kdf["params"]["r"]), int(kdf["params"]["p"])
        salt = base64.b64decode(kdf["salt"], validate=True)
        nonce = base64.b64decode(cipher["nonce"], validate=True)
        box = base64.b64decode(doc["ciphertext"], validate=True)
    except SigningError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise SigningError(f"{source}: malformed cosign key document ({exc})") from exc
    if not (1 < n <= _MAX_SCRYPT_N and n & (n - 1) == 0 and 0 < r <= 32 and 0 < p <= 16):
        raise SigningError(f"{source}: implausible scrypt parameters N={n} r={r} p={p}")
    box_key = Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(password)
    try:
        return secretbox.open_box(box, nonce, box_key)
    except secretbox.SecretBoxError as exc:
        raise SigningError(f"{source}: wrong password (set XCFORGE_COSIGN_PASSWORD) or corrupt key") from exc


@overload
def _require_p256(key: PrivateKeyTypes, source: str) -> ec.EllipticCurvePrivateKey: ...
@overload
def _require_p256(key: PublicKeyTypes, source: str) -> ec.EllipticCurvePublicKey: ...


def _require_p256(
    key: PrivateKeyTypes | PublicKeyTypes, source: str
) -> ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey:
    if not isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) or not isinstance(
        key.curve, ec.SECP256R1
    ):
        raise SigningError(f"{source}: only ECDSA P-256 keys are supported for cosign signatures")
    return key
