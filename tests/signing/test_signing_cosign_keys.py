"""ECDSA P-256 keys for cosign: cosign's own encrypted format, PKCS#8, SEC1, and the secretbox."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from signing import secretbox
from signing.cosign_keys import CosignPrivateKey, load_cosign_private_key, load_cosign_public_key
from signing.errors import SigningError

DATA = Path(__file__).parent / "data"
FIXTURE_PASSWORD = "xcforge-test"  # see data/README.md


def test_key_made_by_real_cosign_opens_and_matches_its_public_key():
    key = load_cosign_private_key((DATA / "cosign-generate-key-pair.key").read_bytes(), FIXTURE_PASSWORD)
    public = load_cosign_public_key((DATA / "cosign-generate-key-pair.pub").read_bytes())
    assert key.key_id == public.key_id
    assert public.verify(b"payload", key.sign(b"payload"))
    with pytest.raises(SigningError, match="wrong password"):
        load_cosign_private_key((DATA / "cosign-generate-key-pair.key").read_bytes(), "wrong")


def test_our_cosign_format_round_trips_and_is_tamper_evident():
    key = CosignPrivateKey.generate()
    pem = key.to_cosign_pem("pw")
    assert pem.startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    assert load_cosign_private_key(pem, "pw").key_id == key.key_id
    assert load_cosign_private_key(key.to_cosign_pem(""), "").key_id == key.key_id  # cosign allows empty
    with pytest.raises(SigningError):
        load_cosign_private_key(pem, "other")


def test_standard_pkcs8_and_sec1_keys_load():
    key = CosignPrivateKey.generate()
    raw = key.key
    for encoding, fmt, password in [
        (serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, None),
        (serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, b"pw"),
        (serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, None),
        (serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, None),
        (serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, b"pw"),
    ]:
        protection = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
        data = raw.private_bytes(encoding, fmt, protection)
        assert load_cosign_private_key(data, password).key_id == key.key_id
    der_public = key.public_key.to_der()
    assert load_cosign_public_key(der_public).key_id == key.key_id


def test_non_p256_and_wrong_kinds_are_refused():
    p384 = ec.generate_private_key(ec.SECP384R1())
    pem = p384.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(SigningError, match="P-256"):
        load_cosign_private_key(pem)
    pub = p384.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(SigningError, match="P-256"):
        load_cosign_public_key(pub)
    key = CosignPrivateKey.generate()
    with pytest.raises(SigningError, match="public key"):
        load_cosign_private_key(key.public_key.to_pem())
    for garbage in (
        b"",
        b"nope",
        b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\ne30=\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
    ):
        with pytest.raises(SigningError):
            load_cosign_private_key(garbage, "pw")


def test_cosign_signature_verification_never_raises():
    key = CosignPrivateKey.generate()
    signature = key.sign(b"payload")
    assert key.public_key.verify(b"payload", signature)
    for bad in (b"", signature[:-1], signature + b"\x00", b"\x30" * 70, bytes(72)):
        assert key.public_key.verify(b"payload", bad) is False
    assert key.public_key.verify(b"payload!", signature) is False
    assert CosignPrivateKey.generate().public_key.verify(b"payload", signature) is False


def test_secretbox_rejects_any_flipped_bit_and_wrong_key():
    key, nonce = bytes(range(32)), bytes(range(24))
    box = secretbox.seal(b"attack at dawn" * 5, nonce, key)
    assert secretbox.open_box(box, nonce, key) == b"attack at dawn" * 5
    for i in range(0, len(box), 7):
        flipped = bytearray(box)
        flipped[i] ^= 0x01
        with pytest.raises(secretbox.SecretBoxError):
            secretbox.open_box(bytes(flipped), nonce, key)
    with pytest.raises(secretbox.SecretBoxError):
        secretbox.open_box(box, nonce, bytes(32))
    with pytest.raises(secretbox.SecretBoxError):
        secretbox.open_box(b"short", nonce, key)


@pytest.mark.docker
def test_real_cosign_reads_our_encrypted_key(tmp_path, cosign_bin):
    key = CosignPrivateKey.generate()
    (tmp_path / "ours.key").write_bytes(key.to_cosign_pem("pw2"))
    (tmp_path / "ours.pub").write_bytes(key.public_key.to_pem())
    (tmp_path / "blob").write_bytes(b"hello")
    env = {"COSIGN_PASSWORD": "pw2", "PATH": "/usr/bin:/bin"}
    sign = [cosign_bin, "sign-blob", "--key", "ours.key", "--tlog-upload=false", "--yes", "blob"]
    subprocess.run([*sign, "--output-signature", "sig"], cwd=tmp_path, env=env, check=True, capture_output=True)
    verify = [cosign_bin, "verify-blob", "--key", "ours.pub", "--insecure-ignore-tlog", "--signature", "sig", "blob"]
    verified = subprocess.run(verify, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stderr
    assert shutil.which("cosign")
