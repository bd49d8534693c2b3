"""xcforge's SM2 signature layout in a registry: cosign's structure under our own names.

Tag `sha256-<hex>.sm2` (never `.sig`: upstream cosign fails on layers it cannot read) holds an OCI
image manifest whose layers are signatures:

- layer media type `application/vnd.dev.cosign.simplesigning.v1+json`, blob = the payload bytes
  (the same simple-signing JSON cosign signs);
- `cn.xcforge.sm2/signature`: base64 of the DER SM2 signature (GM/T 0009 SEQUENCE{r, s}) over
  those bytes, with SM3 and Z computed from the distinguishing ID (GB/T 32918.2 §5.5, §6.1);
- `cn.xcforge.sm2/distid`: that ID as text (default `1234567812345678`);
- `cn.xcforge.sm2/keyid`: sha256 of the signer's DER SubjectPublicKeyInfo, hex (a hint: the
  verifier decides which keys it trusts, and checks the signature against them);
- `cn.xcforge.sm2/algorithm`: `SM2-with-SM3`.

The manifest carries `cn.xcforge.sm2/format: 1`. docs/signing.md shows a by-hand check with curl,
jq and openssl.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from ocicore.digest import is_sha256_hex
from signing.cosign_format import base64_annotation

SCHEME = "sm2"
TAG_SUFFIX = ".sm2"
NAMESPACE = "cn.xcforge.sm2"
SIGNATURE_ANNOTATION = f"{NAMESPACE}/signature"
KEYID_ANNOTATION = f"{NAMESPACE}/keyid"
DISTID_ANNOTATION = f"{NAMESPACE}/distid"
ALGORITHM_ANNOTATION = f"{NAMESPACE}/algorithm"
ALGORITHM = "SM2-with-SM3"
FORMAT_ANNOTATION = f"{NAMESPACE}/format"
MANIFEST_ANNOTATIONS = {FORMAT_ANNOTATION: "1"}


def layer_annotations(signature: bytes, *, key_id: str, dist_id: bytes) -> dict[str, str]:
    return {
        SIGNATURE_ANNOTATION: base64.b64encode(signature).decode("ascii"),
        KEYID_ANNOTATION: key_id,
        DISTID_ANNOTATION: dist_id.decode("utf-8"),
        ALGORITHM_ANNOTATION: ALGORITHM,
    }


def signature_from(annotations: Mapping[str, str]) -> bytes | None:
    return base64_annotation(annotations, SIGNATURE_ANNOTATION)


def key_id_from(annotations: Mapping[str, str]) -> str | None:
    value = annotations.get(KEYID_ANNOTATION)
    return value if is_sha256_hex(value) else None  # key_id_of: the SHA-256 of the public key


def dist_id_from(annotations: Mapping[str, str]) -> bytes | None:
    value = annotations.get(DISTID_ANNOTATION)
    return value.encode("utf-8") if isinstance(value, str) else None
