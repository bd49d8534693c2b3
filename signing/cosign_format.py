"""cosign's key-based signature layout in a registry (sigstore/cosign specs/SIGNATURE_SPEC.md).

Tag `sha256-<hex>.sig` in the image's repository holds an OCI image manifest; each layer is one
signature: media type `application/vnd.dev.cosign.simplesigning.v1+json`, blob = payload bytes,
annotation `dev.cosignproject.cosign/signature` = base64 of the DER ECDSA signature.

`cosign verify` tries every layer of this manifest and fails on a layer it cannot read, so nothing
but cosign-format signatures may ever be written here (SM2 lives under its own tag).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

SCHEME = "cosign"
TAG_SUFFIX = ".sig"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
# Only cosign's own annotations go on the manifest and layers: no extra keys.
MANIFEST_ANNOTATIONS: dict[str, str] = {}


def layer_annotations(signature: bytes) -> dict[str, str]:
    return {SIGNATURE_ANNOTATION: base64.b64encode(signature).decode("ascii")}


def base64_annotation(annotations: Mapping[str, str], key: str) -> bytes | None:
    """The bytes of a base64 annotation, or None when absent or not valid base64 (never an error:
    a malformed signature layer is an invalid signature, not a crash)."""
    value = annotations.get(key)
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def signature_from(annotations: Mapping[str, str]) -> bytes | None:
    """DER signature bytes from a layer's annotations, or None when absent or not base64."""
    return base64_annotation(annotations, SIGNATURE_ANNOTATION)


def key_id_from(annotations: Mapping[str, str]) -> str | None:
    return None  # cosign records no key id; verification tries every trusted key
