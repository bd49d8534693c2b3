"""NaCl `crypto_secretbox` (XSalsa20-Poly1305), enough to open and seal cosign's encrypted keys.

cosign encrypts its private keys with go-securesystemslib's `encrypted` package: scrypt for the key,
`golang.org/x/crypto/nacl/secretbox` for the box. PyNaCl is not a dependency here, so the box is
built from pycryptodomex's Salsa20 plus the two small pieces it lacks:

- HSalsa20 (XSalsa20 paper, D. J. Bernstein 2011, §2): derives a subkey from the key and the first
  16 nonce bytes; Salsa20 then runs with the subkey and the last 8 nonce bytes;
- Poly1305 with a raw one-time key (RFC 8439 §2.5; pycryptodomex only offers it keyed through a
  cipher). The first 32 keystream bytes are that key; the box is tag(16) ‖ ciphertext.
"""

from __future__ import annotations

import hmac
import struct

from Cryptodome.Cipher import Salsa20

KEY_SIZE = 32
NONCE_SIZE = 24
TAG_SIZE = 16
_P1305 = (1 << 130) - 5


class SecretBoxError(ValueError):
    """The box failed authentication (wrong key) or is malformed."""


def _rotl32(v: int, n: int) -> int:
    return ((v << n) | (v >> (32 - n))) & 0xFFFFFFFF


def hsalsa20(key: bytes, nonce16: bytes) -> bytes:
    sigma = struct.unpack("<4I", b"expand 32-byte k")
    k = struct.unpack("<8I", key)
    n = struct.unpack("<4I", nonce16)
    x = [sigma[0], *k[:4], sigma[1], *n, sigma[2], *k[4:], sigma[3]]

    def quarter(a: int, b: int, c: int, d: int) -> None:
        x[b] ^= _rotl32((x[a] + x[d]) & 0xFFFFFFFF, 7)
        x[c] ^= _rotl32((x[b] + x[a]) & 0xFFFFFFFF, 9)
        x[d] ^= _rotl32((x[c] + x[b]) & 0xFFFFFFFF, 13)
        x[a] ^= _rotl32((x[d] + x[c]) & 0xFFFFFFFF, 18)

    for _ in range(10):  # 20 rounds: column round + row round
        quarter(0, 4, 8, 12)
        quarter(5, 9, 13, 1)
        quarter(10, 14, 2, 6)
        quarter(15, 3, 7, 11)
        quarter(0, 1, 2, 3)
        quarter(5, 6, 7, 4)
        quarter(10, 11, 8, 9)
        quarter(15, 12, 13, 14)
    return struct.pack("<8I", x[0], x[5], x[10], x[15], x[6], x[7], x[8], x[9])


def poly1305(key: bytes, message: bytes) -> bytes:
    r = int.from_bytes(key[:16], "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
    s = int.from_bytes(key[16:32], "little")
    acc = 0
    for i in range(0, len(message), 16):
        block = message[i : i + 16] + b"\x01"
        acc = (acc + int.from_bytes(block, "little")) * r % _P1305
    return ((acc + s) & ((1 << 128) - 1)).to_bytes(16, "little")


def _stream(key: bytes, nonce: bytes, data: bytes) -> bytes:
    if len(key) != KEY_SIZE or len(nonce) != NONCE_SIZE:
        raise SecretBoxError("secretbox needs a 32-byte key and a 24-byte nonce")
    subkey = hsalsa20(key, nonce[:16])
    return Salsa20.new(key=subkey, nonce=nonce[16:]).encrypt(bytes(32) + data)


def seal(plaintext: bytes, nonce: bytes, key: bytes) -> bytes:
    stream = _stream(key, nonce, plaintext)
    ciphertext = stream[32:]
    return poly1305(stream[:32], ciphertext) + ciphertext


def open_box(box: bytes, nonce: bytes, key: bytes) -> bytes:
    if len(box) < TAG_SIZE:
        raise SecretBoxError("secretbox is shorter than its tag")
    tag, ciphertext = box[:TAG_SIZE], box[TAG_SIZE:]
    poly_key = _stream(key, nonce, b"")[:32]
    if not hmac.compare_digest(poly1305(poly_key, ciphertext), tag):
        raise SecretBoxError("secretbox authentication failed")
    return _stream(key, nonce, ciphertext)[32:]
