"""NaCl `crypto_secretbox` (XSalsa20-Poly1305), to open and seal cosign's encrypted private keys.

cosign encrypts its keys with go-securesystemslib's `encrypted` package: scrypt for the key and
`golang.org/x/crypto/nacl/secretbox` for the box, whose output is tag(16) ‖ ciphertext — the same
bytes libsodium's `crypto_secretbox_easy` (PyNaCl's SecretBox) produces, without the nonce prefix.
"""

from __future__ import annotations

from nacl.exceptions import CryptoError
from nacl.secret import SecretBox

KEY_SIZE = SecretBox.KEY_SIZE  # 32
NONCE_SIZE = SecretBox.NONCE_SIZE  # 24
TAG_SIZE = SecretBox.MACBYTES  # 16


class SecretBoxError(ValueError):
    """The box failed authentication (wrong key) or is malformed."""


def _check(nonce: bytes, key: bytes) -> None:
    if len(key) != KEY_SIZE or len(nonce) != NONCE_SIZE:
        raise SecretBoxError(f"secretbox needs a {KEY_SIZE}-byte key and a {NONCE_SIZE}-byte nonce")


def seal(plaintext: bytes, nonce: bytes, key: bytes) -> bytes:
    _check(nonce, key)
    return SecretBox(key).encrypt(plaintext, nonce).ciphertext


def open_box(box: bytes, nonce: bytes, key: bytes) -> bytes:
    _check(nonce, key)
    if len(box) < TAG_SIZE:
        raise SecretBoxError("secretbox: ciphertext shorter than its authenticator")
    try:
        return SecretBox(key).decrypt(box, nonce)
    except CryptoError as exc:
        raise SecretBoxError("secretbox: authentication failed (wrong password?)") from exc
