"""SM2 against two independent implementations: OpenSSL 3 (C) and snowland-smx (pure Python).

Batched to keep the suite fast: ROUND_TRIPS random messages/keys/IDs signed by us and verified by
us and by `openssl pkeyutl`; OPENSSL_SIGNED signatures made by OpenSSL verified by us; SNOWLAND
signatures compared value-for-value with a shared nonce.
"""

from __future__ import annotations

import secrets
import time

import pytest
from pysmx.SM2 import Sign as snowland_sign
from pysmx.SM2 import Verify as snowland_verify
from signing_helpers import openssl, openssl_sign_sm2_many, openssl_verify_sm2_many

from signing import sm2
from signing.sm2_keys import Sm2PrivateKey

ROUND_TRIPS = 200
OPENSSL_SIGNED = 60
SNOWLAND = 20


def _random_message() -> bytes:
    return secrets.token_bytes(secrets.choice([0, 1, 31, 32, 33, 64, 250, 1000]))


def test_random_round_trips_verified_by_us_and_by_openssl(tmp_path):
    keys = [Sm2PrivateKey.generate() for _ in range(8)]
    cases = []
    started = time.perf_counter()
    for i in range(ROUND_TRIPS):
        key = keys[i % len(keys)]
        message = _random_message()
        signature = key.sign(message)
        assert key.public_key.verify(message, signature)
        if i % 4 == 0:  # a flipped bit anywhere must fail (every fourth case, to keep the suite fast)
            tampered = bytearray(message or b"\x00")
            tampered[secrets.randbelow(len(tampered))] ^= 1 << secrets.randbelow(8)
            assert not key.public_key.verify(bytes(tampered), signature)
        cases.append((key, message, signature))
    elapsed = time.perf_counter() - started
    print(f"\n{ROUND_TRIPS} SM2 sign+verify round trips in {elapsed:.2f}s")
    for index, key in enumerate(keys):
        mine = [(m, s) for k, m, s in cases if k is key]
        verdicts = openssl_verify_sm2_many(tmp_path / f"k{index}", key.public_key.to_pem(), mine)
        assert all(verdicts), f"openssl rejected {verdicts.count(False)} of our signatures"


def test_openssl_signatures_verify_with_us(tmp_path):
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:SM2", "-out", str(tmp_path / "k.pem"))
    pem = (tmp_path / "k.pem").read_bytes()
    from signing.sm2_keys import load_sm2_private_key

    key = load_sm2_private_key(pem)
    messages = [_random_message() for _ in range(OPENSSL_SIGNED)]
    signatures = openssl_sign_sm2_many(tmp_path, pem, messages)
    for i, (message, signature) in enumerate(zip(messages, signatures, strict=True)):
        assert key.public_key.verify(message, signature)
        if i < 10:
            assert not key.public_key.verify(message + b"x", signature)
            assert not key.public_key.verify(message, signature, dist_id=b"")  # OpenSSL's own default ID


def test_openssl_default_empty_id_is_a_different_signature(tmp_path):
    # docs/signing.md §4: OpenSSL 3 uses an empty ID unless given distid. Signing with an explicit empty ID
    # must verify only with the empty ID — the reason every command in the docs passes distid.
    key = Sm2PrivateKey.generate()
    signature = key.sign(b"payload", dist_id=b"")
    assert openssl_verify_sm2_many(tmp_path, key.public_key.to_pem(), [(b"payload", signature)], distid="")[0]
    assert not openssl_verify_sm2_many(tmp_path / "d", key.public_key.to_pem(), [(b"payload", signature)])[0]


@pytest.mark.parametrize("uid", ["1234567812345678", "ALICE123@YAHOO.COM"])
def test_snowland_agrees_value_for_value(uid):
    for _ in range(SNOWLAND // 2):
        d = sm2.generate_private_scalar()
        k = secrets.randbelow(sm2.SM2P256V1.n - 1) + 1
        message = _random_message() or b"m"
        public = sm2.public_point(d)
        public_hex = f"{public[0]:064x}{public[1]:064x}"
        ours = sm2.sign_raw(d, message, dist_id=uid.encode(), k=k)
        theirs = snowland_sign(message, f"{d:064x}", f"{k:064x}", 64, uid=uid)
        assert theirs is not None
        assert (int(theirs[:32].hex(), 16), int(theirs[32:].hex(), 16)) == ours
        assert snowland_verify(f"{ours[0]:064x}{ours[1]:064x}", message, public_hex, 64, uid=uid)
        assert sm2.verify_raw(public, message, *ours, dist_id=uid.encode())
