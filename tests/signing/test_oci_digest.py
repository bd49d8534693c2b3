"""ocicore/digest.py: the one digest grammar, and the places that check digests all using it."""

from __future__ import annotations

import re

import pytest

from ocicore import digest
from ocicore.errors import InvalidReference
from ocicore.registry import Reference
from signing import sm2_format
from signing.payload import PayloadError, simple_signing_payload
from xcforge.paths import REPO_ROOT

SHA256 = "sha256:" + "0123456789abcdef" * 4
SHA512 = "sha512:" + "0123456789abcdef" * 8

BAD = [
    "",
    "sha256:" + "A" * 64,  # upper case
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 65,
    "sha256:" + "a" * 128,  # sha512's length under sha256's name
    "sha512:" + "a" * 64,
    "sha256:" + "g" * 64,
    SHA256 + "\n",  # `$` would let this through
    " " + SHA256,
    "SHA256:" + "a" * 64,
    "sha256-" + "a" * 64,
    "sha256" + "a" * 64,
    "md5:" + "a" * 32,
    "a" * 64,
]


@pytest.mark.parametrize("value", [SHA256, SHA512])
def test_supported_digests_are_accepted(value):
    assert digest.is_digest(value)
    assert digest.parse(value) == (value.split(":")[0], value.split(":")[1])
    assert str(digest.parse(value)) == value


@pytest.mark.parametrize("value", BAD)
def test_malformed_or_unsupported_digests_are_refused(value):
    assert not digest.is_digest(value) and not digest.is_sha256(value)
    with pytest.raises(ValueError):
        digest.parse(value)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("sha256+b64u:LCa0a2j_xo_5m0U8HTBBNBNCLXBkg7-g-YpeiGJm564", "unsupported digest algorithm 'sha256+b64u'"),
        ("multihash+base58:QmRZxt2b1FVZPNqd8hsiykDL3TdBDeTSPX9Kv46HmX4Gx8", "unsupported"),
        ("sha256:" + "A" * 64, "not a sha256 digest"),
        ("sha256:", "not a digest"),
        ("sha256..x:abc", "not a digest"),  # separators join components, never two in a row
        ("sha256:abc def", "not a digest"),
    ],
)
def test_parse_says_which_part_is_wrong(value, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        digest.parse(value)


def test_sha256_only_helpers():
    assert digest.is_sha256(SHA256) and not digest.is_sha256(SHA512)
    assert digest.is_sha256_hex(SHA256.split(":")[1]) and not digest.is_sha256_hex(SHA256)
    assert not digest.is_digest(None) and not digest.is_sha256_hex(None)
    assert digest.sha256_digest(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert re.fullmatch(rf"r\.io/a@{digest.SHA256_DIGEST}", f"r.io/a@{SHA256}")


@pytest.mark.parametrize("value", BAD)
def test_every_site_refuses_what_the_grammar_refuses(value):
    if value != SHA256 + "\n":  # Reference.parse strips the text it is given
        with pytest.raises(InvalidReference):
            Reference.parse(f"r.io/a@{value}")
    with pytest.raises(PayloadError):
        simple_signing_payload("r.io/a", value)


def test_the_sites_accept_what_the_grammar_accepts():
    assert Reference.parse(f"r.io/a@{SHA512}").digest == SHA512
    simple_signing_payload("r.io/a", SHA256)
    with pytest.raises(PayloadError):  # cosign payloads name sha256 manifests only
        simple_signing_payload("r.io/a", SHA512)


@pytest.mark.parametrize("value", ["A" * 64, "a" * 63, "a" * 65, "a" * 64 + "\n", SHA256, 7])
def test_sm2_key_ids_are_sha256_hex(value):
    assert sm2_format.key_id_from({sm2_format.KEYID_ANNOTATION: value}) is None
    hexdigits = SHA256.split(":")[1]
    assert sm2_format.key_id_from({sm2_format.KEYID_ANNOTATION: hexdigits}) == hexdigits


# A regex for 64 hex digits outside ocicore/digest.py is a second digest grammar. The exception:
# pip's `--hash=sha256:` lines in a requirements lock (not an OCI digest).
_ELSEWHERE = re.compile(r"\[(?:0-9a-f|a-f0-9)\]\{(?:64|128)\}")
_NOT_OCI = {"xcforge/lock/locks.py"}


def test_no_other_module_spells_out_the_digest_grammar():
    found = []
    for package in ("ocicore", "signing", "xcforge"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT).as_posix()
            if rel == "ocicore/digest.py" or rel in _NOT_OCI:
                continue
            found += [
                f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if _ELSEWHERE.search(line)
            ]
    assert found == [], "use ocicore.digest (is_digest, is_sha256, SHA256_DIGEST) instead"
