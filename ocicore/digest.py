"""OCI content digests: the image-spec's descriptor grammar, written once for every package.

    digest                ::= algorithm ":" encoded
    algorithm             ::= algorithm-component (algorithm-separator algorithm-component)*
    algorithm-component   ::= [a-z0-9]+
    algorithm-separator   ::= [+._-]
    encoded               ::= [a-zA-Z0-9=_-]+

(the OCI image-spec's descriptor page, "Digests"). Of the registered algorithms, `sha256` (encoded: 64 lower-case
hex digits) and `sha512` (128) are the ones accepted here; a well-formed digest with any other
algorithm is refused as unsupported, as distribution and go-containerregistry do.

The pattern strings (`SHA256_HEX`, `SHA256_DIGEST`, `DIGEST`) are for regexes that embed a digest in
something larger (`name@sha256:…`); everything else calls `is_digest`, `is_sha256` or `parse`.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

ALGORITHM = r"[a-z0-9]+(?:[+._-][a-z0-9]+)*"
ENCODED = r"[a-zA-Z0-9=_-]+"
SHA256_HEX = r"[a-f0-9]{64}"
SHA512_HEX = r"[a-f0-9]{128}"
SHA256_DIGEST = rf"sha256:{SHA256_HEX}"
DIGEST = rf"(?:{SHA256_DIGEST}|sha512:{SHA512_HEX})"

# The encoded part of each supported algorithm.
ENCODINGS = {"sha256": re.compile(SHA256_HEX), "sha512": re.compile(SHA512_HEX)}

DIGEST_RE = re.compile(DIGEST)  # use with fullmatch (as the helpers do): `$` would allow a trailing newline
SHA256_RE = re.compile(SHA256_DIGEST)
SHA256_HEX_RE = re.compile(SHA256_HEX)
_GRAMMAR_RE = re.compile(rf"(?P<algorithm>{ALGORITHM}):(?P<encoded>{ENCODED})")


class Digest(NamedTuple):
    algorithm: str
    encoded: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.encoded}"


def is_digest(value: object) -> bool:
    """`sha256:<64 hex>` or `sha512:<128 hex>`, lower case, nothing around it."""
    return isinstance(value, str) and DIGEST_RE.fullmatch(value) is not None


def is_sha256(value: object) -> bool:
    """`sha256:<64 lower-case hex>`: the only algorithm cosign payloads, statements and pins carry."""
    return isinstance(value, str) and SHA256_RE.fullmatch(value) is not None


def is_sha256_hex(value: object) -> bool:
    """64 lower-case hex digits (a SHA-256 without the `sha256:` prefix, e.g. an SM2 key id)."""
    return isinstance(value, str) and SHA256_HEX_RE.fullmatch(value) is not None


def parse(value: str) -> Digest:
    """(algorithm, encoded) of a supported digest; ValueError saying what is wrong otherwise."""
    match = _GRAMMAR_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not a digest: {value!r} (expected algorithm:encoded, e.g. sha256:<64 hex>)")
    algorithm, encoded = match["algorithm"], match["encoded"]
    encoding = ENCODINGS.get(algorithm)
    if encoding is None:
        raise ValueError(f"unsupported digest algorithm {algorithm!r} in {value!r} (supported: sha256, sha512)")
    if not encoding.fullmatch(encoded):
        raise ValueError(f"not a {algorithm} digest: {value!r} (the hex part is wrong)")
    return Digest(algorithm, encoded)


def sha256_digest(data: bytes) -> str:
    """The digest of `data`: `sha256:<hex>`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
