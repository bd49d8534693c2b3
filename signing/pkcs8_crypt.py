"""Password protection of PKCS#8 keys: EncryptedPrivateKeyInfo (RFC 5958 §3) with PBES2 (RFC 8018 §6.2).

Written: PBKDF2-HMAC-SHA256 + AES-256-CBC, the scheme `openssl genpkey -aes-256-cbc` and
`openssl pkcs8 -topk8` use by default in OpenSSL 3.

Why not pycryptodomex's `PKCS8.wrap/unwrap` for this scheme: in pycryptodomex 3.24 PBES2 hands
PBKDF2 a hash *object* instead of the hash module, which disables its C fast path — 600 000
iterations take ~12 s instead of ~0.3 s. The structures come from asn1crypto and the KDF/cipher
from `cryptography` (OpenSSL) here; pycryptodomex still reads every other scheme (PBES1, scrypt,
3DES, ...) on the way in, so nothing OpenSSL can write is refused.
"""

from __future__ import annotations

import os

from asn1crypto import algos, keys
from Cryptodome.IO import PKCS8
from Cryptodome.Util.asn1 import DerObjectId, DerOctetString, DerSequence
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from signing.errors import SigningError

# OWASP 2023 guidance for PBKDF2-HMAC-SHA256; OpenSSL's default of 2048 is far too low for a
# key that may sit on a shared CI disk.
DEFAULT_ITERATIONS = 600_000
MAX_ITERATIONS = 10_000_000  # refuse files crafted to burn CPU

_PRFS: dict[str, type[hashes.HashAlgorithm]] = {
    "sha1": hashes.SHA1,
    "sha224": hashes.SHA224,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}
_AES_CBC = {"aes128_cbc": 16, "aes192_cbc": 24, "aes256_cbc": 32}


def encrypt_private_key_info(
    private_key_info: bytes, password: bytes, *, iterations: int = DEFAULT_ITERATIONS
) -> bytes:
    if not password:
        raise SigningError("an empty password cannot protect a key; use --no-password explicitly")
    salt, iv = os.urandom(16), os.urandom(16)
    key = PBKDF2HMAC(hashes.SHA256(), 32, salt, iterations).derive(password)
    padder = padding.PKCS7(128).padder()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    ciphertext = encryptor.update(padder.update(private_key_info) + padder.finalize()) + encryptor.finalize()
    encrypted: bytes = keys.EncryptedPrivateKeyInfo(
        {
            "encryption_algorithm": {
                "algorithm": "pbes2",
                "parameters": {
                    "key_derivation_func": {
                        "algorithm": "pbkdf2",
                        "parameters": {
                            "salt": ("specified", salt),
                            "iteration_count": iterations,
                            "prf": {"algorithm": "sha256", "parameters": None},
                        },
                    },
                    "encryption_scheme": {"algorithm": "aes256_cbc", "parameters": iv},
                },
            },
            "encrypted_data": ciphertext,
        }
    ).dump()
    return encrypted


def decrypt_private_key_info(encrypted: bytes, password: bytes, *, source: str) -> bytes:
    """PrivateKeyInfo DER from EncryptedPrivateKeyInfo DER; SigningError on a wrong password."""
    try:
        info = keys.EncryptedPrivateKeyInfo.load(encrypted, strict=True)
        algorithm = info["encryption_algorithm"]
        fast = _fast_path_parameters(algorithm)
    except Exception as exc:
        raise SigningError(f"{source}: not a PKCS#8 EncryptedPrivateKeyInfo ({exc})") from exc
    if fast is None:
        return _decrypt_with_pycryptodomex(encrypted, password, source)
    prf, salt, iterations, key_length, iv = fast
    if iterations > MAX_ITERATIONS:
        raise SigningError(f"{source}: PBKDF2 iteration count {iterations} is implausibly high")
    key = PBKDF2HMAC(prf(), key_length, salt, iterations).derive(password)
    decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        plain = decryptor.update(info["encrypted_data"].native) + decryptor.finalize()
        plain = unpadder.update(plain) + unpadder.finalize()
        keys.PrivateKeyInfo.load(plain, strict=True).native  # noqa: B018 - parse to detect garbage
    except Exception as exc:
        raise SigningError(f"{source}: wrong password or corrupt encrypted key") from exc
    return plain


def _fast_path_parameters(
    algorithm: algos.EncryptionAlgorithm,
) -> tuple[type[hashes.HashAlgorithm], bytes, int, int, bytes] | None:
    """(PRF, salt, iterations, key length, IV) for PBES2 + PBKDF2 + AES-CBC, the schemes `cryptography`
    decrypts here; None for everything else (pycryptodomex's job)."""
    if algorithm["algorithm"].native != "pbes2" or algorithm.kdf != "pbkdf2":
        return None
    cipher = algorithm["parameters"]["encryption_scheme"]["algorithm"].native
    prf = _PRFS.get(algorithm.kdf_hmac)
    if cipher not in _AES_CBC or prf is None:
        return None
    key_length = _AES_CBC[cipher]
    iv = algorithm["parameters"]["encryption_scheme"]["parameters"].native
    return prf, algorithm.kdf_salt, algorithm.kdf_iterations, key_length, iv


def _decrypt_with_pycryptodomex(encrypted: bytes, password: bytes, source: str) -> bytes:
    try:
        oid, inner, params = PKCS8.unwrap(  # type: ignore[call-arg]  # the .pyi lacks the runtime's max_iteration_count
            encrypted, password, max_iteration_count=MAX_ITERATIONS
        )
    except (ValueError, IndexError, TypeError, KeyError) as exc:
        raise SigningError(f"{source}: wrong password or unsupported key encryption ({exc})") from exc
    # Rebuild the PrivateKeyInfo that unwrap took apart: version 0, AlgorithmIdentifier, key.
    items = [DerObjectId(oid), params] if params else [DerObjectId(oid)]
    algorithm = DerSequence(items)  # type: ignore[arg-type]  # DER bytes as an item: the runtime takes them, the .pyi not
    return DerSequence([0, algorithm, DerOctetString(inner)]).encode()
