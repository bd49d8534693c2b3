"""Known-answer tests: SM3 (GB/T 32905) and the standard's SM2 signature examples (GB/T 32918.2).

SM2 vectors as reproduced in OpenSSL's test/sm2_internal_test.c (sm2_sig_test):
- GB/T 32918.2-2016 Annex A / draft-shen-sm2-ecdsa-02: a 256-bit *test* curve, ID ALICE123@YAHOO.COM;
  Z_A and e as printed in the standard's worked example;
- GM/T 0003.5-2012 / GB/T 32918.5 Annex A: the recommended curve sm2p256v1, default ID.
Both use message "message digest" and a fixed nonce k.
"""

from __future__ import annotations

from signing_helpers import openssl_verify_sm2

from signing import sm2
from signing.sm2_keys import Sm2PrivateKey
from signing.sm3 import sm3_hex

MESSAGE = b"message digest"

TEST_CURVE = sm2.Sm2Curve(
    name="GB/T 32918 Annex A test curve Fp-256",
    p=0x8542D69E4C044F18E8B92435BF6FF7DE457283915C45517D722EDB8B08F1DFC3,
    a=0x787968B4FA32C3FD2417842E73BBFEFF2F3C848B6831D7E0EC65228B3937E498,
    b=0x63E4C6D3B23B0C849CF84241484BFE48F61D59A5B16BA06E6E12D1DA27C5249A,
    gx=0x421DEBD61B62EAB6746434EBC3CC315E32220B3BADD50BDC4C4E6C147FEDD43D,
    gy=0x0680512BCBB42C07D47349D2153B70C4E5D7FDFCBFA36EA1A85841B9E46E09A2,
    n=0x8542D69E4C044F18E8B92435BF6FF7DD297720630485628D5AE74EE7C32E79B7,
)
TEST_ID = b"ALICE123@YAHOO.COM"
TEST_D = 0x128B2FA8BD433C6C068C8D803DFF79792A519A55171B1B650C23661D15897263
TEST_K = 0x6CB28D99385C175C94F94E934817663FC176D925DD72B727260DBAAE1FB2F96F
TEST_PUBLIC = (
    0x0AE4C7798AA0F119471BEE11825BE46202BB79E2A5844495E97C04FF4DF2548A,
    0x7C0240F88F1CD4E16352A73C17B7F16F07353E53A176D684A9FE0C6BB798E857,
)
TEST_Z = "f4a38489e32b45b6f876e3ac2168ca392362dc8f23459c1d1146fc3dbfb7bc9a"
TEST_E = "b524f552cd82b8b028476e005c377fb19a87e6fc682d48bb5d42e3d9b9effe76"
TEST_R = 0x40F1EC59F793D9F49E09DCEF49130D4194F79FB1EED2CAA55BACDB49C4E755D1
TEST_S = 0x6FC6DAC32C5D5CF10C77DFB20F7C2EB667A457872FB09EC56327A67EC7DEEBE7

REC_D = 0x3945208F7B2144B13F36E38AC6D39F95889393692860B51A42FB81EF4DF7C5B8
REC_K = 0x59276E27D506861A16680F3AD9C02DCCEF3CC1FA3CDBE4CE6D54B80DEAC1BC21
REC_PUBLIC = (
    0x09F9DF311E5421A150DD7D161E4BC5C672179FAD1833FC076BB08FF356F35020,
    0xCCEA490CE26775A52DC6EA718CC1AA600AED05FBF35E084A6632F6072DA9AD13,
)
REC_R = 0xF5A03B0648D2C4630EEAC513E1BB81A15944DA3827D5B74143AC7EACEEE720B3
REC_S = 0xB1B6AA29DF212FD8763182BC0D421CA1BB9038FD1F7F42D4840B69C485BBC1AA


def test_sm3_standard_vectors_and_openssl_agree():
    # GB/T 32905-2016 Annex A examples 1 and 2.
    assert sm3_hex(b"abc") == "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"
    assert sm3_hex(b"abcd" * 16) == "debe9ff92275b8a138604889c18e5a4d6fdb70e5387e5765293dcba39c0c5732"
    from gmssl import sm3 as gmssl_sm3

    # An independent second implementation (gmssl's pure-Python SM3) agrees at the padding edges.
    for data in (b"", b"x" * 55, b"x" * 56, b"x" * 64, bytes(range(256)) * 3):
        assert sm3_hex(data) == gmssl_sm3.sm3_hash(list(data))


def test_test_curve_example_reproduced_exactly():
    assert TEST_CURVE.contains(TEST_CURVE.gx, TEST_CURVE.gy)
    assert sm2.public_point(TEST_D, TEST_CURVE) == TEST_PUBLIC
    assert sm2.z_value(TEST_PUBLIC, TEST_ID, TEST_CURVE).hex() == TEST_Z
    assert sm2.message_hash(MESSAGE, TEST_PUBLIC, TEST_ID, TEST_CURVE).hex() == TEST_E
    r, s = sm2.sign_raw(TEST_D, MESSAGE, dist_id=TEST_ID, curve=TEST_CURVE, k=TEST_K)
    assert (r, s) == (TEST_R, TEST_S)
    assert sm2.verify_raw(TEST_PUBLIC, MESSAGE, r, s, dist_id=TEST_ID, curve=TEST_CURVE)
    assert not sm2.verify_raw(TEST_PUBLIC, MESSAGE, r, s, dist_id=b"1234567812345678", curve=TEST_CURVE)


def test_recommended_curve_example_reproduced_exactly():
    assert sm2.public_point(REC_D) == REC_PUBLIC
    der = sm2.sign(REC_D, MESSAGE, k=REC_K)
    assert sm2.decode_signature(der) == (REC_R, REC_S)
    assert der == sm2.encode_signature(REC_R, REC_S)
    assert sm2.verify(REC_PUBLIC, MESSAGE, der)


def test_recommended_curve_example_verifies_in_openssl(tmp_path):
    # An independent implementation accepts the standard's signature with the default ID: this pins
    # both our reading of the vector and the `distid:1234567812345678` option the docs prescribe.
    key = Sm2PrivateKey(REC_D)
    assert openssl_verify_sm2(tmp_path, key.public_key.to_pem(), MESSAGE, sm2.encode_signature(REC_R, REC_S))
    assert not openssl_verify_sm2(tmp_path, key.public_key.to_pem(), MESSAGE + b"!", sm2.encode_signature(REC_R, REC_S))


def test_public_key_with_leading_zero_survives_gmssl_lstrip_bug():
    # The example key's x starts with 0x09...: gmssl's constructor would lstrip("04") "0409f9..."
    # into "9f9..." and verify against the wrong point. We assign the key after construction.
    assert f"{REC_PUBLIC[0]:064x}".startswith("09")
    der = sm2.sign(REC_D, b"payload")
    assert sm2.verify(REC_PUBLIC, b"payload", der)
