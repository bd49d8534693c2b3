"""The simple-signing payload: cosign's exact bytes, and strict parsing."""

from __future__ import annotations

import json

import pytest

from signing.payload import PayloadError, parse_payload, simple_signing_payload

DIGEST = "sha256:7de911e40a48845a635fb00707c0a6e336f26688a5cf9a1799fe21f61b28b989"


def test_bytes_match_what_cosign_sign_wrote():
    # Produced by `cosign sign --key ... 127.0.0.1:5055/e2e/img@<DIGEST>` (cosign 2.5); the blob that
    # cosign pushed had the same sha256 as ours, so the bytes are identical.
    expected = (
        b'{"critical":{"identity":{"docker-reference":"127.0.0.1:5055/e2e/img"},'
        b'"image":{"docker-manifest-digest":"' + DIGEST.encode() + b'"},'
        b'"type":"cosign container image signature"},"optional":null}'
    )
    assert simple_signing_payload("127.0.0.1:5055/e2e/img", DIGEST) == expected


def test_annotations_are_sorted_and_escaped_like_go():
    payload = simple_signing_payload("r.example/x", DIGEST, {"z": "1", "a": "<b>&\u2028", "中": "文"})
    text = payload.decode()
    assert text.endswith('"optional":{"a":"\\u003cb\\u003e\\u0026\\u2028","z":"1","中":"文"}}')
    assert json.loads(payload)["optional"]["a"] == "<b>&\u2028"


def test_round_trip_and_rejections():
    claims = parse_payload(simple_signing_payload("r.example/x", DIGEST, {"k": "v"}))
    assert (claims.docker_reference, claims.manifest_digest, claims.annotations) == ("r.example/x", DIGEST, {"k": "v"})
    for bad in (b"", b"{}", b"[]", b"not json", b'{"critical":{"identity":{}}}', b"\xff\xfe", b"{" * 70000):
        with pytest.raises(PayloadError):
            parse_payload(bad)
    with pytest.raises(PayloadError):
        parse_payload(b'{"critical":{"identity":{"docker-reference":1},"image":{"docker-manifest-digest":"x"}}}')
    for bad_digest in ("sha256:abc", "latest", "sha512:" + "a" * 128):
        with pytest.raises(PayloadError):
            simple_signing_payload("r.example/x", bad_digest)
    with pytest.raises(PayloadError):
        simple_signing_payload("r.example/x@sha256:" + "a" * 64, DIGEST)
