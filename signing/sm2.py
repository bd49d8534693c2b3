"""SM2 digital signatures with SM3 (GB/T 32918.2-2016 / GM/T 0003.2-2012), through gmssl.

gmssl 3.2.2 does the elliptic-curve arithmetic; everything around it is ours, because its own
entry points are unsafe with inputs we do not control (read from gmssl/sm2.py):

- `sign_with_sm3` hard-codes the user ID; the Z value is computed here (GB/T 32918.2 §5.5) so the
  distinguishing ID is configurable;
- its default nonce comes from `random.choice`; k is always drawn here with `secrets`;
- `CryptSM2.__init__` does `public_key.lstrip("04")`, which also eats leading '0'/'4' hex digits
  of x: the key is therefore assigned after construction, always as exactly 128 hex digits;
- `verify` has no range checks (s = 0 makes `_kg` return G), raises on garbage and on a point at
  infinity, and its DER path accepts anything `DerSequence` decodes: every input is validated
  here first and the call is wrapped so a malformed signature is `False`, never an exception.

Signatures are DER `SEQUENCE { r INTEGER, s INTEGER }` (GM/T 0009-2012 §7.3), as OpenSSL writes.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from asn1crypto.algos import DSASignature
from gmssl.sm2 import CryptSM2

from signing.sm3 import sm3

# GB/T 32918.5 (GM/T 0009-2012 §10): the user ID used when none is agreed, "1234567812345678".
DEFAULT_DIST_ID = b"1234567812345678"
# ENTL is two bytes holding the ID's length in *bits* (GB/T 32918.2 §5.5), so at most 8191 bytes.
MAX_DIST_ID_BYTES = 0xFFFF // 8


@dataclass(frozen=True)
class Sm2Curve:
    """Short Weierstrass curve y² = x³ + ax + b over F_p with base point G of prime order n."""

    name: str
    p: int
    a: int
    b: int
    gx: int
    gy: int
    n: int

    @property
    def byte_len(self) -> int:
        return (self.p.bit_length() + 7) // 8

    def contains(self, x: int, y: int) -> bool:
        """Public-key validation (GB/T 32918.1 §6.2.2 b, c): coordinates in F_p and on the curve."""
        if not (0 <= x < self.p and 0 <= y < self.p):
            return False
        return (y * y - (x * x * x + self.a * x + self.b)) % self.p == 0

    def gmssl_table(self) -> dict[str, str]:
        width = self.byte_len * 2
        return {
            "n": f"{self.n:0{width}x}",
            "p": f"{self.p:0{width}x}",
            "g": f"{self.gx:0{width}x}{self.gy:0{width}x}",
            "a": f"{self.a:0{width}x}",
            "b": f"{self.b:0{width}x}",
        }


# The recommended curve sm2p256v1 (GB/T 32918.5-2017 §A / GM/T 0003.5-2012).
SM2P256V1 = Sm2Curve(
    name="sm2p256v1",
    p=0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFF,
    a=0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFC,
    b=0x28E9FA9E9D9F5E344D5A9E4BCF6509A7F39789F515AB8F92DDBCBD414D940E93,
    gx=0x32C4AE2C1F1981195F9904466A39C9948FE30BBFF2660BE1715A4589334C74C7,
    gy=0xBC3736A2F4F6779C59BDCEE36B692153D0A9877CC62A474002DF32E52139F0A0,
    n=0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFF7203DF6B21C6052B53BBF40939D54123,
)

Point = tuple[int, int]


class Sm2InputError(ValueError):
    """A key, ID or nonce handed to an SM2 operation is out of range or malformed."""


def _engine(curve: Sm2Curve, *, private: int | None = None, public: Point | None = None) -> CryptSM2:
    width = curve.byte_len * 2
    engine = CryptSM2(private_key="", public_key="", ecc_table=curve.gmssl_table())
    # Assigned after construction: the constructor's lstrip("04") corrupts some keys (module doc).
    if private is not None:
        engine.private_key = f"{private:0{width}x}"
    if public is not None:
        engine.public_key = f"{public[0]:0{width}x}{public[1]:0{width}x}"
    return engine


def check_private_scalar(d: int, curve: Sm2Curve = SM2P256V1) -> None:
    # GB/T 32918.1 §6.1: d ∈ [1, n-2], because signing needs (1 + d)⁻¹ mod n.
    if not isinstance(d, int) or not 1 <= d <= curve.n - 2:
        raise Sm2InputError("SM2 private key is out of range [1, n-2]")


def check_public_point(point: Point, curve: Sm2Curve = SM2P256V1) -> None:
    x, y = point
    if not (isinstance(x, int) and isinstance(y, int)) or not curve.contains(x, y):
        raise Sm2InputError("SM2 public key is not a point on the curve")


def generate_private_scalar(curve: Sm2Curve = SM2P256V1) -> int:
    return secrets.randbelow(curve.n - 2) + 1


def public_point(d: int, curve: Sm2Curve = SM2P256V1) -> Point:
    """P = [d]G."""
    check_private_scalar(d, curve)
    width = curve.byte_len * 2
    xy = _engine(curve)._kg(d, curve.gmssl_table()["g"])
    return int(xy[:width], 16), int(xy[width:], 16)


def decompress_point(prefix: int, x: int, curve: Sm2Curve = SM2P256V1) -> Point:
    """Recover y from a compressed point (GB/T 32918.1 §A.5.2); needs p ≡ 3 (mod 4), as sm2p256v1."""
    if curve.p % 4 != 3 or prefix not in (2, 3) or not 0 <= x < curve.p:
        raise Sm2InputError("unsupported compressed SM2 point")
    rhs = (pow(x, 3, curve.p) + curve.a * x + curve.b) % curve.p
    y = pow(rhs, (curve.p + 1) // 4, curve.p)
    if y * y % curve.p != rhs:
        raise Sm2InputError("compressed SM2 point is not on the curve")
    if y & 1 != prefix & 1:
        y = curve.p - y
    return x, y


def z_value(public: Point, dist_id: bytes = DEFAULT_DIST_ID, curve: Sm2Curve = SM2P256V1) -> bytes:
    """Z_A = SM3(ENTL_A ‖ ID_A ‖ a ‖ b ‖ x_G ‖ y_G ‖ x_A ‖ y_A)  (GB/T 32918.2 §5.5)."""
    if not isinstance(dist_id, bytes) or len(dist_id) > MAX_DIST_ID_BYTES:
        raise Sm2InputError(f"SM2 distinguishing ID must be bytes of at most {MAX_DIST_ID_BYTES} bytes")
    check_public_point(public, curve)
    size = curve.byte_len
    fields = (curve.a, curve.b, curve.gx, curve.gy, public[0], public[1])
    entl = (len(dist_id) * 8).to_bytes(2, "big")
    return sm3(entl + dist_id + b"".join(v.to_bytes(size, "big") for v in fields))


def message_hash(message: bytes, public: Point, dist_id: bytes = DEFAULT_DIST_ID, curve: Sm2Curve = SM2P256V1) -> bytes:
    """e = SM3(Z_A ‖ M)  (GB/T 32918.2 §6.1 A1-A2); the 32 bytes are read as a big-endian integer."""
    if not isinstance(message, bytes | bytearray):
        raise Sm2InputError("SM2 message must be bytes")
    return sm3(z_value(public, dist_id, curve) + bytes(message))


def encode_signature(r: int, s: int) -> bytes:
    """DER SEQUENCE { r INTEGER, s INTEGER } with minimal encodings."""

    def integer(v: int) -> bytes:
        body = v.to_bytes(v.bit_length() // 8 + 1, "big")  # one spare byte keeps the sign bit clear
        return b"\x02" + _der_length(len(body)) + body

    content = integer(r) + integer(s)
    return b"\x30" + _der_length(len(content)) + content


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def decode_signature(der: bytes, curve: Sm2Curve = SM2P256V1) -> tuple[int, int] | None:
    """(r, s) from a strict-DER signature, or None for anything else.

    Like OpenSSL (crypto/sm2/sm2_sign.c), the input must re-encode to the same bytes: this rejects
    BER length forms, padded integers, negative numbers and trailing data. r and s must lie in
    [1, n-1] (GB/T 32918.2 §7.1 B1-B2).
    """
    if not isinstance(der, bytes | bytearray) or not 8 <= len(der) <= 2 * (curve.byte_len + 3) + 3:
        return None
    der = bytes(der)
    try:
        parsed = DSASignature.load(der, strict=True)
        r, s = parsed["r"].native, parsed["s"].native
    except Exception:  # asn1crypto raises ValueError/TypeError/... on garbage; all mean "invalid"
        return None
    if not (isinstance(r, int) and isinstance(s, int)):
        return None
    if not (1 <= r < curve.n and 1 <= s < curve.n):
        return None
    if encode_signature(r, s) != der:
        return None
    return r, s


def sign(
    d: int,
    message: bytes,
    *,
    dist_id: bytes = DEFAULT_DIST_ID,
    curve: Sm2Curve = SM2P256V1,
    k: int | None = None,
    public: Point | None = None,
) -> bytes:
    """Sign `message` with private scalar d; returns the DER signature.

    `k` exists only for the standard's known-answer tests; otherwise each attempt draws a fresh
    k ∈ [1, n-1] from `secrets` (GB/T 32918.2 §6.1 A3), retrying when r = 0, r + k = n or s = 0.
    `public` is [d]G when the caller already has it (Sm2PrivateKey derives it once), which saves a
    scalar multiplication per signature.
    """
    r, s = sign_raw(d, message, dist_id=dist_id, curve=curve, k=k, public=public)
    return encode_signature(r, s)


def sign_raw(
    d: int,
    message: bytes,
    *,
    dist_id: bytes = DEFAULT_DIST_ID,
    curve: Sm2Curve = SM2P256V1,
    k: int | None = None,
    public: Point | None = None,
) -> tuple[int, int]:
    check_private_scalar(d, curve)
    if public is None:
        public = public_point(d, curve)
    e = message_hash(message, public, dist_id, curve)
    engine = _engine(curve, private=d)
    width = curve.byte_len * 2
    for _ in range(64):
        nonce = k if k is not None else secrets.randbelow(curve.n - 1) + 1
        if not isinstance(nonce, int) or not 1 <= nonce <= curve.n - 1:
            raise Sm2InputError("SM2 nonce k is out of range [1, n-1]")
        # gmssl.sign(e, k) computes (x1, y1) = [k]G, r = (e + x1) mod n, s = (1+d)⁻¹(k + r) - r mod n,
        # which equals (1+d)⁻¹(k - r·d) (§6.1 A4-A6), and returns None when r = 0, r + k = n or s = 0.
        out = engine.sign(e, f"{nonce:0{width}x}")
        if out is not None:
            r, s = int(out[:width], 16), int(out[width:], 16)
            if 1 <= r < curve.n and 1 <= s < curve.n:
                return r, s
        if k is not None:
            raise Sm2InputError("the given nonce k yields r = 0, r + k = n or s = 0; choose another")
    raise Sm2InputError("SM2 signing failed 64 times in a row: the random source is broken")


def verify(
    public: Point,
    message: bytes,
    signature: bytes,
    *,
    dist_id: bytes = DEFAULT_DIST_ID,
    curve: Sm2Curve = SM2P256V1,
) -> bool:
    """True when `signature` (DER) is a valid SM2 signature of `message` by `public`.

    Never raises: a bad key, ID, message type or signature is simply not valid.
    """
    rs = decode_signature(signature, curve)
    if rs is None:
        return False
    return verify_raw(public, message, *rs, dist_id=dist_id, curve=curve)


def verify_raw(
    public: Point,
    message: bytes,
    r: int,
    s: int,
    *,
    dist_id: bytes = DEFAULT_DIST_ID,
    curve: Sm2Curve = SM2P256V1,
) -> bool:
    try:
        if not (isinstance(r, int) and isinstance(s, int)):
            return False
        if not (1 <= r < curve.n and 1 <= s < curve.n):  # §7.1 B1-B2
            return False
        if (r + s) % curve.n == 0:  # §7.1 B5: t = 0 fails
            return False
        e = message_hash(message, public, dist_id, curve)  # validates the point and the ID
        width = curve.byte_len * 2
        # B6-B7 in gmssl: (x1', y1') = [s]G + [t]P, R = (e + x1') mod n, compare with r. Its one
        # flaw left after the checks above is the [s]G = [t]P branch (it skips the Jacobian →
        # affine conversion), which needs s ≡ t·d (mod n): unreachable without the private key,
        # and at worst a false *rejection*.
        return bool(_engine(curve, public=public).verify(f"{r:0{width}x}{s:0{width}x}", e))
    except (Sm2InputError, ValueError, TypeError, IndexError):
        # Point at infinity in gmssl's arithmetic surfaces as TypeError on None: not a valid signature.
        return False
