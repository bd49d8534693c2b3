"""SM2 key files, both directions with OpenSSL 3: PKCS#8 plain/encrypted, SPKI, SEC1, PEM and DER."""

from __future__ import annotations

import hashlib

import pytest
from signing_helpers import openssl, openssl_verify_sm2

from signing.errors import SigningError
from signing.sm2_keys import SM2_CURVE_OID, Sm2PrivateKey, load_sm2_private_key, load_sm2_public_key

FAST = 1000  # PBKDF2 iterations in tests; the default (600 000) is exercised once


@pytest.fixture(scope="module")
def openssl_key(tmp_path_factory):
    """An SM2 key made by OpenSSL in every format OpenSSL writes."""
    d = tmp_path_factory.mktemp("openssl-key")

    def run(*args: str) -> None:
        openssl(*args)

    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:SM2", "-out", str(d / "pkcs8.pem"))
    run("pkcs8", "-topk8", "-nocrypt", "-in", str(d / "pkcs8.pem"), "-outform", "DER", "-out", str(d / "pkcs8.der"))
    run("pkey", "-in", str(d / "pkcs8.pem"), "-pubout", "-out", str(d / "pub.pem"))
    run("pkey", "-in", str(d / "pkcs8.pem"), "-pubout", "-outform", "DER", "-out", str(d / "pub.der"))
    run("ec", "-in", str(d / "pkcs8.pem"), "-out", str(d / "sec1.pem"))  # label "SM2 PRIVATE KEY"
    run("ec", "-in", str(d / "pkcs8.pem"), "-outform", "DER", "-out", str(d / "sec1.der"))
    run("ec", "-in", str(d / "pkcs8.pem"), "-aes256", "-passout", "pass:legacy", "-out", str(d / "sec1-enc.pem"))
    run("pkcs8", "-topk8", "-in", str(d / "pkcs8.pem"), "-passout", "pass:s3cret", "-out", str(d / "enc.pem"))
    run(
        "pkcs8",
        "-topk8",
        "-in",
        str(d / "pkcs8.pem"),
        "-passout",
        "pass:s3cret",
        "-outform",
        "DER",
        "-out",
        str(d / "enc.der"),
    )
    run(
        "pkcs8",
        "-topk8",
        "-in",
        str(d / "pkcs8.pem"),
        "-scrypt",
        "-passout",
        "pass:s3cret",
        "-out",
        str(d / "scrypt.pem"),
    )
    run(
        "pkcs8", "-topk8", "-in", str(d / "pkcs8.pem"), "-v2", "aes-128-cbc", "-v2prf", "hmacWithSHA512",
        "-passout", "pass:s3cret", "-out", str(d / "sha512.pem"),
    )  # fmt: skip
    return d


def test_every_openssl_format_loads_to_the_same_key(openssl_key):
    d = openssl_key
    reference = load_sm2_private_key((d / "pkcs8.pem").read_bytes())
    assert (d / "sec1.pem").read_bytes().startswith(b"-----BEGIN SM2 PRIVATE KEY-----")
    for name, password in [
        ("pkcs8.der", None),
        ("sec1.pem", None),
        ("sec1.der", None),
        ("sec1-enc.pem", "legacy"),
        ("enc.pem", "s3cret"),
        ("enc.der", b"s3cret"),
        ("scrypt.pem", "s3cret"),
        ("sha512.pem", "s3cret"),
    ]:
        assert load_sm2_private_key((d / name).read_bytes(), password).d == reference.d, name
    for name in ("pub.pem", "pub.der"):
        assert load_sm2_public_key((d / name).read_bytes()) == reference.public_key


def test_our_output_is_byte_identical_to_openssl(openssl_key):
    d = openssl_key
    key = load_sm2_private_key((d / "pkcs8.pem").read_bytes())
    assert key.to_pem() == (d / "pkcs8.pem").read_bytes()
    assert key.to_der() == (d / "pkcs8.der").read_bytes()
    assert key.public_key.to_pem() == (d / "pub.pem").read_bytes()
    assert key.public_key.to_der() == (d / "pub.der").read_bytes()


def test_key_id_is_sha256_of_the_der_spki_as_openssl_writes_it(openssl_key):
    d = openssl_key
    key = load_sm2_public_key((d / "pub.pem").read_bytes())
    spki = openssl("pkey", "-pubin", "-in", str(d / "pub.pem"), "-outform", "DER").stdout
    assert key.key_id == hashlib.sha256(spki).hexdigest()
    assert key.short_id == key.key_id[:16]


def test_openssl_reads_our_keys_plain_and_encrypted(tmp_path):
    key = Sm2PrivateKey.generate()
    (tmp_path / "plain.pem").write_bytes(key.to_pem())
    (tmp_path / "plain.der").write_bytes(key.to_der())
    (tmp_path / "enc.pem").write_bytes(key.to_pem("päss wörd", iterations=FAST))
    (tmp_path / "enc.der").write_bytes(key.to_encrypted_der("päss wörd", iterations=FAST))
    (tmp_path / "pub.pem").write_bytes(key.public_key.to_pem())
    expected_pub = key.public_key.to_pem()
    for name, extra in [
        ("plain.pem", []),
        ("plain.der", ["-inform", "DER"]),
        ("enc.pem", ["-passin", "pass:päss wörd"]),
        ("enc.der", ["-inform", "DER", "-passin", "pass:päss wörd"]),
    ]:
        out = openssl("pkey", "-in", str(tmp_path / name), *extra, "-pubout").stdout
        assert out == expected_pub, name
    text = openssl("pkey", "-pubin", "-in", str(tmp_path / "pub.pem"), "-text", "-noout").stdout.decode()
    assert "SM2" in text
    asn1 = openssl("asn1parse", "-in", str(tmp_path / "enc.pem")).stdout.decode()
    assert "PBES2" in asn1 and "PBKDF2" in asn1 and "hmacWithSHA256" in asn1 and "aes-256-cbc" in asn1
    # The signing key OpenSSL decrypted from our file makes signatures we verify.
    signature = openssl(
        "pkeyutl", "-sign", "-inkey", str(tmp_path / "enc.pem"), "-passin", "pass:päss wörd", "-rawin",
        "-digest", "sm3", "-pkeyopt", "distid:1234567812345678", input=b"hello",
    ).stdout  # fmt: skip
    assert key.public_key.verify(b"hello", signature)
    assert openssl_verify_sm2(tmp_path, key.public_key.to_pem(), b"hello", key.sign(b"hello"))


def test_default_iteration_count_round_trip_and_pycryptodomex_reads_it():
    from asn1crypto.core import ObjectIdentifier
    from Cryptodome.IO import PKCS8

    key = Sm2PrivateKey.generate()
    encrypted = key.to_encrypted_der("pw")
    assert load_sm2_private_key(encrypted, "pw").d == key.d
    oid, _inner, params = PKCS8.unwrap(key.to_encrypted_der("pw", iterations=FAST), "pw")
    assert oid == "1.2.840.10045.2.1"  # id-ecPublicKey, with the SM2 curve as its parameter
    assert ObjectIdentifier.load(params).dotted == SM2_CURVE_OID


def test_wrong_or_missing_password_and_wrong_key_types(tmp_path, openssl_key):
    d = openssl_key
    encrypted = (d / "enc.pem").read_bytes()
    with pytest.raises(SigningError, match="wrong password"):
        load_sm2_private_key(encrypted, "nope")
    with pytest.raises(SigningError, match="password is needed"):
        load_sm2_private_key(encrypted)
    with pytest.raises(SigningError, match="wrong password"):
        load_sm2_private_key((d / "sec1-enc.pem").read_bytes(), "nope")
    with pytest.raises(SigningError, match="public key"):
        load_sm2_private_key((d / "pub.pem").read_bytes())
    with pytest.raises(SigningError, match="private key"):
        load_sm2_public_key((d / "pkcs8.pem").read_bytes())
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(tmp_path / "p256.pem"))
    openssl("pkey", "-in", str(tmp_path / "p256.pem"), "-pubout", "-out", str(tmp_path / "p256.pub"))
    with pytest.raises(SigningError, match="not SM2"):
        load_sm2_private_key((tmp_path / "p256.pem").read_bytes())
    with pytest.raises(SigningError, match="not SM2"):
        load_sm2_public_key((tmp_path / "p256.pub").read_bytes())
    for garbage in (
        b"",
        b"garbage",
        b"-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n",
        b"\x30\x03\x02\x01\x00",
    ):
        with pytest.raises(SigningError):
            load_sm2_private_key(garbage)
        with pytest.raises(SigningError):
            load_sm2_public_key(garbage)


def test_a_wrong_password_that_passes_the_padding_check_is_still_a_wrong_password(openssl_key):
    """Legacy PEM encryption (DEK-Info, CBC): about one wrong password in 256 decrypts to bytes with
    valid padding. Found here, not hoped for, so the test cannot pass by luck."""
    from Cryptodome.IO import PEM

    text = (openssl_key / "sec1-enc.pem").read_text()
    for n in range(20_000):
        try:
            PEM.decode(text, f"wrong-{n}".encode())
        except ValueError:
            continue
        break
    else:
        pytest.fail("no wrong password with valid padding in 20,000 tries")
    with pytest.raises(SigningError, match="wrong password"):
        load_sm2_private_key(text.encode(), f"wrong-{n}")


def test_key_file_whose_public_half_does_not_match_is_refused():
    from asn1crypto import keys

    key, other = Sm2PrivateKey.generate(), Sm2PrivateKey.generate()
    info = keys.PrivateKeyInfo.load(key.to_der())
    ec = info["private_key"].parsed
    size = 32
    ec["public_key"] = b"\x04" + other.public_key.x.to_bytes(size, "big") + other.public_key.y.to_bytes(size, "big")
    info["private_key"] = ec
    with pytest.raises(SigningError, match="does not match"):
        load_sm2_private_key(info.dump(force=True))


def test_private_key_repr_hides_the_scalar():
    key = Sm2PrivateKey.generate()
    assert f"{key.d:x}" not in repr(key) and str(key.d) not in repr(key)
    assert key.public_key.short_id in repr(key)
