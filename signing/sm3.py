"""SM3 (GB/T 32905-2016) through gmssl, the one hash every SM2 signature and the audit chain use.

gmssl's `sm3_hash` takes a *list of ints* and appends its padding to that list in place, so it is
always handed a fresh list here; it returns lowercase hex.
"""

from __future__ import annotations

from gmssl import sm3 as _gmssl_sm3

DIGEST_SIZE = 32


def sm3(data: bytes) -> bytes:
    """SM3 digest (32 bytes) of `data`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"sm3() takes bytes, not {type(data).__name__}")
    return bytes.fromhex(_gmssl_sm3.sm3_hash(list(bytes(data))))


def sm3_hex(data: bytes) -> str:
    """SM3 digest of `data` as 64 lowercase hex characters."""
    return sm3(data).hex()
