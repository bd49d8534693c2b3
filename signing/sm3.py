"""SM3 (GB/T 32905-2016), the hash every SM2 signature (Z and e, GB/T 32918.2 §6.1) and the audit
chain use.

Computed with `cryptography` (OpenSSL's C implementation): gmssl's pure-Python SM3 gives the same
digests ~860x slower (bench/bench_signing.py), which dominated SM2 signing and audit-log checks.
tests/signing checks both against the standard's vectors and against each other.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes

DIGEST_SIZE = 32


def sm3(data: bytes) -> bytes:
    """SM3 digest (32 bytes) of `data`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"sm3() takes bytes, not {type(data).__name__}")
    digest = hashes.Hash(hashes.SM3())
    digest.update(bytes(data))
    return digest.finalize()


def sm3_hex(data: bytes) -> str:
    """SM3 digest of `data` as 64 lowercase hex characters."""
    return sm3(data).hex()
