"""Malformed inputs are invalid signatures or clean errors — never exceptions from gmssl."""

from __future__ import annotations

import pytest

from signing import sm2

N = sm2.SM2P256V1.n
MESSAGE = b'{"critical":{}}'


@pytest.fixture(scope="module")
def signed():
    d = sm2.generate_private_scalar()
    public = sm2.public_point(d)
    der = sm2.sign(d, MESSAGE)
    return d, public, der


def _der_int(body: bytes) -> bytes:
    return b"\x02" + bytes([len(body)]) + body


def _seq(content: bytes) -> bytes:
    return b"\x30" + bytes([len(content)]) + content


def test_valid_signature_and_basic_rejections(signed):
    _d, public, der = signed
    assert sm2.verify(public, MESSAGE, der)
    assert not sm2.verify(public, MESSAGE + b" ", der)
    assert not sm2.verify(public, MESSAGE, der, dist_id=b"ALICE123@YAHOO.COM")
    other = sm2.public_point(sm2.generate_private_scalar())
    assert not sm2.verify(other, MESSAGE, der)


def _malformed(der: bytes) -> dict[str, object]:
    r, s = sm2.decode_signature(der)
    raw = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return {
        "empty": b"",
        "one byte": b"\x30",
        "truncated by one": der[:-1],
        "truncated to half": der[: len(der) // 2],
        "trailing byte": der + b"\x00",
        "garbage": bytes(range(70)),
        "raw r||s instead of DER": raw,
        "hex text": der.hex().encode(),
        "wrong outer tag": b"\x31" + der[1:],
        "long-form length (BER)": b"\x30\x81" + der[1:],
        "r = 0": sm2.encode_signature(0, s),
        "s = 0": sm2.encode_signature(r, 0),
        "r = n": sm2.encode_signature(N, s),
        "s = n": sm2.encode_signature(r, N),
        "r = n + r (mod-n alias)": sm2.encode_signature(N + r, s),
        "r + s = n": sm2.encode_signature(r, N - r),
        "negative r": _seq(_der_int(b"\x80" + b"\x01" * 31) + _der_int(s.to_bytes(33, "big"))),
        "r padded with extra zero": _seq(
            _der_int(b"\x00\x00" + r.to_bytes(32, "big")) + _der_int(s.to_bytes(33, "big"))
        ),
        "three integers": _seq(_der_int(b"\x01") + _der_int(b"\x01") + _der_int(b"\x01")),
        "octet strings": _seq(b"\x04\x01\x01\x04\x01\x01"),
        "huge": b"\x30" * 10_000,
        "not bytes (str)": der.hex(),
        "not bytes (None)": None,
        "not bytes (int)": 42,
    }


def test_every_malformed_signature_is_just_invalid(signed):
    _d, public, der = signed
    for name, bad in _malformed(der).items():
        assert sm2.verify(public, MESSAGE, bad) is False, name  # no exception, a clean False


def test_bad_public_keys_and_messages_are_invalid_not_errors(signed):
    _d, public, der = signed
    x, y = public
    for bad_point in [(x, y + 1), (0, 0), (x, sm2.SM2P256V1.p + y), (-1, y), ("x", "y")]:
        assert sm2.verify(bad_point, MESSAGE, der) is False
    assert sm2.verify(public, "text, not bytes", der) is False
    assert sm2.verify(public, MESSAGE, der, dist_id="not bytes") is False
    assert sm2.verify(public, MESSAGE, der, dist_id=b"x" * 9000) is False
    assert sm2.verify_raw(public, MESSAGE, 1.5, 2) is False


def test_verify_raw_range_checks(signed):
    _d, public, der = signed
    r, s = sm2.decode_signature(der)
    assert sm2.verify_raw(public, MESSAGE, r, s)
    for rr, ss in [(0, s), (r, 0), (N, s), (r, N), (r + N, s), (r, N - r), (-r, s)]:
        assert sm2.verify_raw(public, MESSAGE, rr, ss) is False


def test_private_scalar_and_nonce_ranges():
    for bad in (0, N - 1, N, -5, 2**256):
        with pytest.raises(sm2.Sm2InputError):
            sm2.public_point(bad)
        with pytest.raises(sm2.Sm2InputError):
            sm2.sign(bad, MESSAGE)
    d = sm2.generate_private_scalar()
    assert 1 <= d <= N - 2
    for bad_k in (0, N, -1, N + 1):
        with pytest.raises(sm2.Sm2InputError):
            sm2.sign(d, MESSAGE, k=bad_k)
    assert sm2.verify(sm2.public_point(d), MESSAGE, sm2.sign(d, MESSAGE, k=N - 1))
    assert sm2.verify(sm2.public_point(d), MESSAGE, sm2.sign(d, MESSAGE, k=1))


def test_nonce_comes_from_secrets_not_random(monkeypatch):
    import random

    # If anything used the `random` module (gmssl's default nonce source), seeding it would make two
    # signatures equal. They must differ: k comes from `secrets` in our code.
    d = sm2.generate_private_scalar()
    random.seed(1)
    first = sm2.sign(d, MESSAGE)
    random.seed(1)
    assert sm2.sign(d, MESSAGE) != first
    calls = []
    monkeypatch.setattr("gmssl.func.random_hex", lambda n: calls.append(n) or "1" * n)
    sm2.sign(d, MESSAGE)
    assert calls == []


def test_distinguishing_id_limits_and_z_value():
    public = sm2.public_point(sm2.generate_private_scalar())
    assert len(sm2.z_value(public, b"")) == 32
    assert len(sm2.z_value(public, b"x" * sm2.MAX_DIST_ID_BYTES)) == 32
    with pytest.raises(sm2.Sm2InputError):
        sm2.z_value(public, b"x" * (sm2.MAX_DIST_ID_BYTES + 1))
    assert sm2.z_value(public, b"a") != sm2.z_value(public, b"b")


def test_empty_message_and_custom_ids_round_trip():
    d = sm2.generate_private_scalar()
    public = sm2.public_point(d)
    for dist_id in (b"", b"1234567812345678", "组织甲@example.cn".encode()):
        for message in (b"", b"\x00", b"x" * 1000):
            assert sm2.verify(public, message, sm2.sign(d, message, dist_id=dist_id), dist_id=dist_id)


def test_compressed_points_decompress_to_the_same_key():
    x, y = sm2.public_point(sm2.generate_private_scalar())
    assert sm2.decompress_point(2 + (y & 1), x) == (x, y)
    with pytest.raises(sm2.Sm2InputError):
        sm2.decompress_point(4, x)
