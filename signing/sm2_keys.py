"""SM2 key pairs in the formats OpenSSL 3 reads and writes.

- Private: PKCS#8 `PrivateKeyInfo` (RFC 5208) with algorithm id-ecPublicKey and the SM2 named
  curve, wrapping an RFC 5915 `ECPrivateKey` without its own parameters — byte-identical to
  `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:SM2`. Encrypted: PKCS#8
  `EncryptedPrivateKeyInfo` with PBES2 / PBKDF2-HMAC-SHA256 / AES-256-CBC (RFC 8018), OpenSSL 3's
  default scheme. Also read: SEC1 `EC PRIVATE KEY` / `SM2 PRIVATE KEY` (what `openssl ec` writes),
  including the legacy `Proc-Type: 4,ENCRYPTED` PEM form.
- Public: `SubjectPublicKeyInfo` (RFC 5480) with id-ecPublicKey + namedCurve 1.2.156.10197.1.301
  (GM/T 0006-2012), uncompressed point.

Key id: SHA-256 of the DER SubjectPublicKeyInfo, hex (the first 16 characters for display).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from asn1crypto import keys, parser
from Cryptodome.IO import PEM as _CryptodomePEM

from signing import sm2
from signing.errors import SigningError
from signing.pem import armor, is_pem, read_blocks
from signing.pkcs8_crypt import DEFAULT_ITERATIONS as DEFAULT_PBKDF2_ITERATIONS
from signing.pkcs8_crypt import decrypt_private_key_info, encrypt_private_key_info

SM2_CURVE_OID = "1.2.156.10197.1.301"  # GM/T 0006-2012: sm2p256v1 (OpenSSL's "SM2")
EC_PUBLIC_KEY_OID = "1.2.840.10045.2.1"  # RFC 5480 id-ecPublicKey

# asn1crypto knows the NIST/SEC curves only; registering the OID makes it parse and write SM2
# keys exactly as OpenSSL does (idempotent).
keys.NamedCurve.register("sm2p256v1", SM2_CURVE_OID, 32)

_PRIVATE_LABELS = ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY", "SM2 PRIVATE KEY")


def key_id_of(spki_der: bytes) -> str:
    return hashlib.sha256(spki_der).hexdigest()


@dataclass(frozen=True)
class Sm2PublicKey:
    x: int
    y: int

    def __post_init__(self) -> None:
        try:
            sm2.check_public_point((self.x, self.y))
        except sm2.Sm2InputError as exc:
            raise SigningError(f"invalid SM2 public key: {exc}") from exc

    @property
    def point(self) -> sm2.Point:
        return (self.x, self.y)

    def to_der(self) -> bytes:
        size = sm2.SM2P256V1.byte_len
        spki = keys.PublicKeyInfo(
            {
                "algorithm": {"algorithm": "ec", "parameters": ("named", "sm2p256v1")},
                "public_key": b"\x04" + self.x.to_bytes(size, "big") + self.y.to_bytes(size, "big"),
            }
        )
        der: bytes = spki.dump()
        return der

    def to_pem(self) -> bytes:
        return armor(self.to_der(), "PUBLIC KEY")

    @property
    def key_id(self) -> str:
        return key_id_of(self.to_der())

    @property
    def short_id(self) -> str:
        return self.key_id[:16]

    def verify(self, message: bytes, signature: bytes, *, dist_id: bytes = sm2.DEFAULT_DIST_ID) -> bool:
        """Never raises; any malformed input is an invalid signature."""
        return sm2.verify(self.point, message, signature, dist_id=dist_id)


@dataclass(frozen=True)
class Sm2PrivateKey:
    d: int = field(repr=False)
    public_key: Sm2PublicKey = field(init=False)

    def __post_init__(self) -> None:
        try:
            x, y = sm2.public_point(self.d)
        except sm2.Sm2InputError as exc:
            raise SigningError(f"invalid SM2 private key: {exc}") from exc
        object.__setattr__(self, "public_key", Sm2PublicKey(x, y))

    def __repr__(self) -> str:  # never print the scalar
        return f"Sm2PrivateKey(key_id={self.public_key.short_id})"

    @classmethod
    def generate(cls) -> Sm2PrivateKey:
        return cls(sm2.generate_private_scalar())

    @property
    def key_id(self) -> str:
        return self.public_key.key_id

    def sign(self, message: bytes, *, dist_id: bytes = sm2.DEFAULT_DIST_ID) -> bytes:
        try:
            return sm2.sign(self.d, message, dist_id=dist_id, public=self.public_key.point)
        except sm2.Sm2InputError as exc:
            raise SigningError(f"SM2 signing failed: {exc}") from exc

    def _ec_private_key(self, *, with_parameters: bool) -> keys.ECPrivateKey:
        size = sm2.SM2P256V1.byte_len
        value = {
            "version": "ecPrivkeyVer1",
            "private_key": self.d,
            "public_key": b"\x04" + self.public_key.x.to_bytes(size, "big") + self.public_key.y.to_bytes(size, "big"),
        }
        if with_parameters:
            value["parameters"] = ("named", "sm2p256v1")
        return keys.ECPrivateKey(value)

    def to_der(self) -> bytes:
        """Unencrypted PKCS#8 PrivateKeyInfo."""
        info = keys.PrivateKeyInfo(
            {
                "version": 0,
                "private_key_algorithm": {"algorithm": "ec", "parameters": ("named", "sm2p256v1")},
                "private_key": self._ec_private_key(with_parameters=False),
            }
        )
        der: bytes = info.dump()
        return der

    def to_encrypted_der(self, password: bytes | str, *, iterations: int = DEFAULT_PBKDF2_ITERATIONS) -> bytes:
        """PKCS#8 EncryptedPrivateKeyInfo, PBES2 + PBKDF2-HMAC-SHA256 + AES-256-CBC (OpenSSL's default)."""
        return encrypt_private_key_info(self.to_der(), _password_bytes(password), iterations=iterations)

    def to_pem(self, password: bytes | str | None = None, *, iterations: int = DEFAULT_PBKDF2_ITERATIONS) -> bytes:
        if password is None:
            return armor(self.to_der(), "PRIVATE KEY")
        return armor(self.to_encrypted_der(password, iterations=iterations), "ENCRYPTED PRIVATE KEY")


def _password_bytes(password: bytes | str) -> bytes:
    return password.encode("utf-8") if isinstance(password, str) else bytes(password)


# --------------------------------------------------------------------------------------------- read


def load_sm2_public_key(data: bytes, *, source: str = "SM2 public key") -> Sm2PublicKey:
    """SubjectPublicKeyInfo in PEM or DER. A private key file is accepted too (its public half)."""
    if is_pem(data):
        for block in read_blocks(data, what=source):
            if block.label == "PUBLIC KEY":
                return _public_from_spki(block.der, source)
            if block.label in _PRIVATE_LABELS:
                raise SigningError(f"{source}: this is a private key; pass the public key (openssl pkey -pubout)")
        raise SigningError(f"{source}: no 'PUBLIC KEY' PEM block")
    return _public_from_spki(bytes(data), source)


def _public_from_spki(der: bytes, source: str) -> Sm2PublicKey:
    try:
        spki = keys.PublicKeyInfo.load(der, strict=True)
        algorithm = spki["algorithm"]["algorithm"].dotted
        params = spki["algorithm"]["parameters"]
        point = spki["public_key"].native
    except Exception as exc:  # asn1crypto raises several types on malformed input
        raise SigningError(f"{source}: not a DER SubjectPublicKeyInfo ({exc})") from exc
    # Some GmSSL 2.x era tools put the SM2 OID in the algorithm field instead of the curve field.
    if algorithm == EC_PUBLIC_KEY_OID:
        if params.name != "named" or params.chosen.dotted != SM2_CURVE_OID:
            raise SigningError(f"{source}: EC key on curve {_curve_name(params)}, not SM2 ({SM2_CURVE_OID})")
    elif algorithm != SM2_CURVE_OID:
        raise SigningError(f"{source}: key algorithm {algorithm} is not an SM2 EC key")
    return _point_to_key(point, source)


def _curve_name(params: keys.ECDomainParameters) -> str:
    try:
        return params.chosen.dotted if params.name == "named" else f"<{params.name} parameters>"
    except Exception:
        return "<unreadable>"


def _point_to_key(point: bytes, source: str) -> Sm2PublicKey:
    size = sm2.SM2P256V1.byte_len
    try:
        if len(point) == 1 + 2 * size and point[0] == 4:
            return Sm2PublicKey(int.from_bytes(point[1 : 1 + size], "big"), int.from_bytes(point[1 + size :], "big"))
        if len(point) == 1 + size and point[0] in (2, 3):
            x, y = sm2.decompress_point(point[0], int.from_bytes(point[1:], "big"))
            return Sm2PublicKey(x, y)
    except sm2.Sm2InputError as exc:
        raise SigningError(f"{source}: {exc}") from exc
    raise SigningError(f"{source}: public key is not an encoded SM2 point")


def load_sm2_private_key(
    data: bytes, password: bytes | str | None = None, *, source: str = "SM2 private key"
) -> Sm2PrivateKey:
    """PKCS#8 (plain or encrypted) or SEC1, PEM or DER."""
    pw = _password_bytes(password) if password else None
    if is_pem(data):
        for block in read_blocks(data, what=source):
            if block.label in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
                return _private_from_der(block.der, pw, source)
            if block.label in ("EC PRIVATE KEY", "SM2 PRIVATE KEY"):
                der = block.der
                if block.legacy_encrypted:
                    der = _legacy_pem_decrypt(block.text, pw, source)
                return _private_from_sec1(der, source, curve_from_pkcs8=None)
            if block.label == "PUBLIC KEY":
                raise SigningError(f"{source}: this is a public key; signing needs the private key")
        raise SigningError(f"{source}: no private key PEM block (labels: {', '.join(_PRIVATE_LABELS)})")
    return _private_from_der(bytes(data), pw, source)


def _legacy_pem_decrypt(text: bytes, password: bytes | None, source: str) -> bytes:
    if not password:
        raise SigningError(f"{source} is encrypted: a password is needed")
    try:
        der, _marker, _enc = _CryptodomePEM.decode(text.decode("ascii"), password)
        # A wrong password passes the CBC padding check about once in 256 tries and yields garbage:
        # only a decryption that parses as an ECPrivateKey was the right one.
        keys.ECPrivateKey.load(der, strict=True).native  # noqa: B018 - parse to detect garbage
    except Exception as exc:
        raise SigningError(f"{source}: wrong password or corrupt key") from exc
    return der


def _private_from_der(der: bytes, password: bytes | None, source: str) -> Sm2PrivateKey:
    # Which DER structure is it? EncryptedPrivateKeyInfo starts with an AlgorithmIdentifier
    # (SEQUENCE); PrivateKeyInfo is INTEGER 0, SEQUENCE; SEC1 ECPrivateKey is INTEGER 1, OCTET STRING.
    tags = _child_tags(der)
    if tags is None:
        raise SigningError(f"{source}: not a DER private key")
    if tags[0] == 16:
        if not password:
            raise SigningError(f"{source} is encrypted: a password is needed")
        der = decrypt_private_key_info(der, password, source=source)
    if tags[:2] == [2, 4]:
        return _private_from_sec1(der, source, curve_from_pkcs8=None)
    try:
        info = keys.PrivateKeyInfo.load(der, strict=True)
        algorithm = info["private_key_algorithm"]["algorithm"].dotted
        params = info["private_key_algorithm"]["parameters"]
        inner = info["private_key"].contents
    except Exception as exc:
        raise SigningError(f"{source}: not a PKCS#8 private key ({exc})") from exc
    curve: str | None
    if algorithm == SM2_CURVE_OID:
        curve = SM2_CURVE_OID
    elif algorithm == EC_PUBLIC_KEY_OID:
        curve = params.chosen.dotted if params.name == "named" else None
    else:
        raise SigningError(f"{source}: key algorithm {algorithm} is not an EC key")
    return _private_from_sec1(inner, source, curve_from_pkcs8=curve)


def _child_tags(der: bytes) -> list[int] | None:
    """Universal tag numbers of the first two elements of a DER SEQUENCE, or None."""
    try:
        _cls, _method, tag, _header, contents, _trailer = parser.parse(der, strict=True)
        if tag != 16:
            return None
        tags: list[int] = []
        offset = 0
        while offset < len(contents) and len(tags) < 2:
            size = parser.peek(contents[offset:])
            tags.append(parser.parse(contents[offset : offset + size])[2])
            offset += size
    except (ValueError, TypeError):
        return None
    return tags if len(tags) == 2 else None


def _private_from_sec1(der: bytes, source: str, *, curve_from_pkcs8: str | None) -> Sm2PrivateKey:
    try:
        ec = keys.ECPrivateKey.load(der, strict=True)
        d = ec["private_key"].native
        params = ec["parameters"]
        embedded_public = ec["public_key"].native
    except Exception as exc:
        raise SigningError(f"{source}: not an EC private key ({exc})") from exc
    curve = curve_from_pkcs8
    if params.native is not None:
        inner_curve = params.chosen.dotted if params.name == "named" else None
        if curve is not None and inner_curve != curve:
            raise SigningError(f"{source}: conflicting curve parameters")
        curve = inner_curve
    if curve != SM2_CURVE_OID:
        raise SigningError(f"{source}: EC key on curve {curve or '<unnamed>'}, not SM2 ({SM2_CURVE_OID})")
    if not isinstance(d, int):
        raise SigningError(f"{source}: private scalar is missing")
    key = Sm2PrivateKey(d)
    if embedded_public is not None:
        # A file whose public half does not belong to d would make Z (and every signature) wrong.
        stored = _point_to_key(embedded_public, source)
        if stored != key.public_key:
            raise SigningError(f"{source}: the embedded public key does not match the private key")
    return key
