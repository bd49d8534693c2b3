"""DSSE envelopes of in-toto statements (DSSE v1): what an attestation layer or file entry holds.

The signature covers PAE("application/vnd.in-toto+json", statement) (DSSE v1 §"Signature
definition"). cosign writes an empty `keyid`; an SM2 envelope names our SM2 key id. Where the
envelopes are stored is store.py's business; what they must say to be valid is attest.py's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass

from ocicore.registry import canonical_json
from signing import cosign_format, sm2, sm2_format
from signing.cosign_keys import CosignPublicKey
from signing.intoto import IN_TOTO_PAYLOAD_TYPE, pae
from signing.signers import Signer
from signing.sm2_keys import Sm2PublicKey

DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
PREDICATE_ANNOTATION = "predicateType"


def envelope(payload: bytes, signer: Signer) -> bytes:
    signature = signer.signature(pae(IN_TOTO_PAYLOAD_TYPE, payload))
    key_id = signer.key_id if signer.scheme == sm2_format.SCHEME else ""  # cosign writes an empty keyid
    return canonical_json(
        {
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode("ascii"),
            "signatures": [{"keyid": key_id, "sig": base64.b64encode(signature).decode("ascii")}],
        }
    )


def layer_annotations(signer: Signer, predicate_type: str) -> dict[str, str]:
    if signer.scheme == sm2_format.SCHEME:
        return {
            PREDICATE_ANNOTATION: predicate_type,
            sm2_format.KEYID_ANNOTATION: signer.key_id,
            sm2_format.DISTID_ANNOTATION: getattr(signer, "dist_id", sm2.DEFAULT_DIST_ID).decode("utf-8"),
            sm2_format.ALGORITHM_ANNOTATION: sm2_format.ALGORITHM,
        }
    return {cosign_format.SIGNATURE_ANNOTATION: "", PREDICATE_ANNOTATION: predicate_type}


@dataclass(frozen=True)
class Opened:
    """A parsed envelope: the statement and its signatures, or why it is unusable."""

    payload: bytes | None
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, signature)
    problem: str | None = None


def open_envelope(data: bytes) -> Opened:
    try:
        doc = json.loads(data)
        if doc.get("payloadType") != IN_TOTO_PAYLOAD_TYPE:
            return Opened(None, (), f"payloadType {doc.get('payloadType')!r} is not in-toto")
        payload = base64.b64decode(doc["payload"], validate=True)
        signatures = tuple(
            (str(s.get("keyid") or ""), base64.b64decode(s["sig"], validate=True)) for s in doc.get("signatures") or []
        )
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        return Opened(None, (), f"not a DSSE envelope ({type(exc).__name__})")
    return Opened(payload, signatures)


def signed_by(
    opened: Opened, scheme: str, key: Sm2PublicKey | CosignPublicKey, dist_id: bytes = sm2.DEFAULT_DIST_ID
) -> bool:
    """True when one of the envelope's signatures is `key`'s (a key of the `scheme` named)."""
    if opened.payload is None:
        return False
    message = pae(IN_TOTO_PAYLOAD_TYPE, opened.payload)
    for _key_id, signature in opened.signatures:
        if scheme == sm2_format.SCHEME and isinstance(key, Sm2PublicKey):
            if key.verify(message, signature, dist_id=dist_id):
                return True
        elif scheme == cosign_format.SCHEME and isinstance(key, CosignPublicKey) and key.verify(message, signature):
            return True
    return False


def already_attested(signer: Signer, payload: bytes, envelopes: Iterable[bytes]) -> bool:
    """This signer has already attested exactly this statement (signing again would only add noise)."""
    message = pae(IN_TOTO_PAYLOAD_TYPE, payload)
    for data in envelopes:
        opened = open_envelope(data)
        if opened.payload == payload and any(signer.verifies(message, sig) for _key_id, sig in opened.signatures):
            return True
    return False


@dataclass(frozen=True)
class StoredAttestation:
    scheme: str
    predicate_type: str  # from the layer annotation
    envelope: bytes | None
    location: str
    problem: str | None = None


@dataclass(frozen=True)
class AttestResult:
    scheme: str
    key_id: str
    predicate_type: str
    location: str
    added: bool
