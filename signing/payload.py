"""The signed payload: cosign's "simple signing" JSON, used unchanged by both schemes.

Byte layout follows sigstore/sigstore `pkg/signature/payload` (Go `encoding/json` of
`SimpleContainerImage`): keys in struct order `critical{identity{docker-reference}, image
{docker-manifest-digest}, type}, optional`, no whitespace, `optional` null without annotations or a
key-sorted object of strings, and Go's HTML-safe escaping of `<`, `>`, `&`, U+2028, U+2029.
Verifiers never compare bytes (they parse), but producing cosign's exact bytes makes our payloads
indistinguishable from `cosign sign` output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ocicore.digest import is_sha256

SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
COSIGN_SIGNATURE_TYPE = "cosign container image signature"
_MAX_PAYLOAD = 64 * 1024  # cosign's own payloads are ~250 bytes; refuse to parse megabytes


class PayloadError(ValueError):
    """The payload is not a simple-signing document we can evaluate."""


@dataclass(frozen=True)
class SignedClaims:
    docker_reference: str
    manifest_digest: str
    type: str
    annotations: Mapping[str, object] = field(default_factory=dict)


def _go_json_string(value: str) -> str:
    # json.dumps escapes control characters like Go does; Go additionally escapes these (HTMLEscape).
    text = json.dumps(value, ensure_ascii=False)
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(raw, f"\\u{ord(raw):04x}")
    return text


def simple_signing_payload(repository: str, digest: str, annotations: Mapping[str, str] | None = None) -> bytes:
    """The payload `cosign sign` makes for `repository@digest` (with `-a key=value` annotations).

    `repository` is the image's repository *name* as go-containerregistry prints
    `ref.Context().Name()`, e.g. `127.0.0.1:5000/xcforge/vllm-cpu` (no tag, no digest).
    """
    if not is_sha256(digest):
        raise PayloadError(f"not a sha256 manifest digest: {digest!r}")
    if not repository or "@" in repository:
        raise PayloadError(f"not a repository name: {repository!r}")
    if annotations:
        items = ",".join(f"{_go_json_string(str(k))}:{_go_json_string(str(v))}" for k, v in sorted(annotations.items()))
        optional = "{" + items + "}"
    else:
        optional = "null"
    text = (
        '{"critical":{"identity":{"docker-reference":'
        + _go_json_string(repository)
        + '},"image":{"docker-manifest-digest":'
        + _go_json_string(digest)
        + '},"type":'
        + _go_json_string(COSIGN_SIGNATURE_TYPE)
        + '},"optional":'
        + optional
        + "}"
    )
    return text.encode("utf-8")


def parse_payload(data: bytes) -> SignedClaims:
    """Claims from payload bytes. Only call this on bytes whose signature has been verified."""
    if not isinstance(data, bytes | bytearray) or len(data) > _MAX_PAYLOAD:
        raise PayloadError("payload is not bytes or is too large")
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
        critical = doc["critical"]
        reference = critical["identity"]["docker-reference"]
        digest = critical["image"]["docker-manifest-digest"]
        kind = critical.get("type", "")
        optional = doc.get("optional") or {}
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise PayloadError(f"payload is not simple-signing JSON ({exc.__class__.__name__})") from exc
    if not (isinstance(reference, str) and isinstance(digest, str) and isinstance(kind, str)):
        raise PayloadError("payload fields have the wrong types")
    if not isinstance(optional, dict):
        raise PayloadError("payload 'optional' is not an object")
    return SignedClaims(reference, digest, kind, optional)
