"""The bundle manifest: the one signed statement of what a transfer carries.

It lists every image (repository, tags, digest), every signature/attestation/SBOM tag, every
manifest and blob by digest and size (a blob's file name *is* its digest), every other file's
SHA-256, and the fingerprints of the keys that signed it. Its exact bytes are signed twice:

- SM2 with SM3 (GB/T 32918.2, distinguishing ID 1234567812345678), DER, in `xcforge-bundle.json.sm2`
  — `openssl pkeyutl -verify -rawin -digest sm3 -pkeyopt distid:1234567812345678` checks it;
- ECDSA P-256/SHA-256, base64 DER, in `xcforge-bundle.json.sig` — the format of
  `cosign sign-blob`, so `cosign verify-blob --key cosign.pub --signature … xcforge-bundle.json` checks it.

Which key to trust is never taken from the bundle: the importer names the public key(s), and the
keys inside are only there to print their fingerprints for comparison.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from signing.errors import VerificationFailed
from xcforge.errors import BundleDamaged

if TYPE_CHECKING:
    from signing.cosign_keys import CosignPrivateKey, CosignPublicKey
    from signing.sm2_keys import Sm2PrivateKey, Sm2PublicKey

FORMAT = "xcforge-bundle/v1"
MANIFEST = "xcforge-bundle.json"
SM2_SIGNATURE = MANIFEST + ".sm2"
COSIGN_SIGNATURE = MANIFEST + ".sig"
KEY_FILES = {"sm2": "keys/sm2.pub", "cosign": "keys/cosign.pub"}
VERIFY_TOOL = "verify-bundle.py"
README = "README.txt"
# The members that come first, in this order: a reader checks the signature before anything else.
HEAD_MEMBERS = (MANIFEST, SM2_SIGNATURE, COSIGN_SIGNATURE)


@dataclass
class BundleManifest:
    name: str
    created: str
    xcforge: str
    images: list[dict[str, Any]] = field(default_factory=list)  # repository, tags, digest, mediaType, size
    tags: list[dict[str, Any]] = field(default_factory=list)  # repository, tag, digest, mediaType, size
    manifests: list[dict[str, Any]] = field(default_factory=list)  # digest, mediaType, size, repositories
    blobs: list[dict[str, Any]] = field(default_factory=list)  # digest, size, repositories
    omitted: list[dict[str, Any]] = field(default_factory=list)  # a delta's blobs the far side must hold
    files: dict[str, str] = field(default_factory=dict)  # path → sha256:<hex>
    keys: dict[str, dict[str, str]] = field(default_factory=dict)  # scheme → key_id, file
    base: dict[str, str] | None = None  # a delta: the bundle it extends (name, manifest sha256)
    format: str = FORMAT

    def to_bytes(self) -> bytes:
        return (json.dumps(self.__dict__, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> BundleManifest:
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError(f"format is not {FORMAT}")
            return cls(**doc)
        except (ValueError, TypeError) as exc:
            raise BundleDamaged(
                f"{where}: {MANIFEST} is not a bundle manifest ({exc}); copy the bundle again"
            ) from None

    @property
    def blob_sizes(self) -> dict[str, int]:
        """Every digest the bundle carries as a file under blobs/ → its size."""
        return {entry["digest"]: int(entry["size"]) for entry in (*self.manifests, *self.blobs)}


def blob_path(digest: str) -> str:
    algorithm, _, encoded = digest.partition(":")
    return f"blobs/{algorithm}/{encoded}"


def digest_of_path(path: str) -> str | None:
    parts = path.split("/")
    return f"{parts[1]}:{parts[2]}" if len(parts) == 3 and parts[0] == "blobs" else None


# ------------------------------------------------------------------------------------ signatures


def sign(
    data: bytes,
    *,
    sm2_key: Sm2PrivateKey | None = None,
    cosign_key: CosignPrivateKey | None = None,
    sm2_dist_id: bytes,
) -> dict[str, bytes]:
    """member name → signature file content, for each key given."""
    out: dict[str, bytes] = {}
    if sm2_key is not None:
        out[SM2_SIGNATURE] = sm2_key.sign(data, dist_id=sm2_dist_id)
    if cosign_key is not None:
        out[COSIGN_SIGNATURE] = base64.b64encode(cosign_key.sign(data)) + b"\n"
    return out


def verify(
    data: bytes,
    signatures: Mapping[str, bytes],
    *,
    sm2_keys: Sequence[Sm2PublicKey] = (),
    cosign_keys: Sequence[CosignPublicKey] = (),
    sm2_dist_id: bytes,
    bundled: Mapping[str, dict[str, str]],
    where: str,
) -> list[str]:
    """Every scheme the importer gave a key for must be validly signed by one of those keys.

    Returns one line per scheme; raises VerificationFailed naming the key ids (ours and the bundle's).
    """
    lines = []
    for scheme, keys, member in (("sm2", sm2_keys, SM2_SIGNATURE), ("cosign", cosign_keys, COSIGN_SIGNATURE)):
        if not keys:
            continue
        signature = signatures.get(member)
        trusted = ", ".join(key.short_id for key in keys)
        signer = (bundled.get(scheme) or {}).get("key_id", "")[:16] or "none"
        if signature is None:
            raise VerificationFailed(
                f"{where}: the bundle has no {scheme} signature ({member}) but --{scheme}-key was given; "
                "ask the sender to sign it with that key, or verify with the scheme it was signed with"
            )
        if scheme == "cosign":
            try:
                signature = base64.b64decode(signature.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise BundleDamaged(f"{where}: {member} is not base64; copy the bundle again") from None
        valid = [key for key in keys if key.verify(data, signature, **_dist(scheme, sm2_dist_id))]
        if not valid:
            raise VerificationFailed(
                f"{where}: the bundle manifest's {scheme} signature does not verify with the trusted key(s) {trusted} "
                f"(the bundle says it was signed by {signer}); refuse it, or get the sender's public key out of band"
            )
        lines.append(f"{scheme:<6} signature of the bundle manifest: VALID (key {valid[0].short_id})")
    return lines


def _dist(scheme: str, dist_id: bytes) -> dict[str, bytes]:
    return {"dist_id": dist_id} if scheme == "sm2" else {}
