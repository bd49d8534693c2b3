"""In-toto statements and DSSE's pre-authentication encoding: what an attestation says and what its
signature covers, without any signature scheme (signing/attest.py wraps them in envelopes).

Small on purpose: a build writes statements next to its archive and need not load the SM2 and
ECDSA code (a fifth of a second of imports) to do so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ocicore.registry import canonical_json

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v0.1"
SBOM_PREDICATE = "https://cyclonedx.org/bom"  # `cosign attest --type cyclonedx`
# What BuildKit records with --provenance (v0.2 by default, v1 with `version=v1`).
PROVENANCE_PREDICATES = ("https://slsa.dev/provenance/v0.2", "https://slsa.dev/provenance/v1")


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what a signature actually covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement(predicate_type: str, predicate: Mapping[str, Any], subjects: Iterable[tuple[str, str]]) -> bytes:
    """An in-toto statement about (name, sha256:<hex>) subjects."""
    subject = [{"name": name, "digest": {"sha256": digest.split(":", 1)[1]}} for name, digest in subjects]
    return canonical_json(
        {"_type": STATEMENT_TYPE, "predicateType": predicate_type, "subject": subject, "predicate": predicate}
    )
