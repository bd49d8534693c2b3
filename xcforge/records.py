"""The typed records the stages hand on and report.json holds: frozen, one type per thing recorded.

The bake stage records each platform's verification level and its SBOM and provenance; the publish
stage a compression variant; the sign stage each signature and attestation; the smoke stage each
check. Each type writes exactly the dict report.json has always held for it (`as_dict`: a field
listed in OMITTED_WHEN_NONE is left out while it is None, as the old dicts left it out) and is read
back from it (`from_dict`). Every stage may import this module; it imports nothing of the tree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

# The verification rungs, lowest first (xcforge/plan/verification.py says what each one means).
LEVELS = ("rendered", "deps-resolved", "engine-installed", "plugin-installed", "served-cpu", "device-tested")


def rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else 0


def higher(a: str, b: str) -> str:
    return a if rank(a) >= rank(b) else b


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


class Record:
    """What every record type shares: its dict for report.json and the way back."""

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in self.OMITTED_WHEN_NONE:
                continue
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | Self) -> Self:
        """The record of a report.json entry; an unknown key is a TypeError (the report is not ours)."""
        return data if isinstance(data, cls) else cls(**data)  # type: ignore[arg-type]


R = TypeVar("R", bound="Record")


def records_of(kind: type[R], items: Iterable[Mapping[str, Any] | R]) -> tuple[R, ...]:
    """report.json's list (or records already typed) → a tuple of typed records."""
    return tuple(kind.from_dict(item) for item in items)


@dataclass(frozen=True)
class VerificationRecord(Record):
    """How far one platform's image is verified (plan/verification.py); the smoke stage raises it."""

    platform: str
    level: str
    lock: str  # the lock's status for the vendor's Python: locked | partial | unverified | missing
    skipped: tuple[str, ...] = ()  # "step: reason"

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped", tuple(self.skipped))

    def raised(self, level: str) -> VerificationRecord:
        return dataclasses.replace(self, level=higher(self.level, level))


@dataclass(frozen=True)
class AttestationRecord(Record):
    """One platform's SBOM and provenance files (xcforge/attest/attestations.py), and where the
    SBOM was attached in the registry once pushed."""

    OMITTED_WHEN_NONE = frozenset({"sbom_ref"})

    platform: str
    digest: str
    media_type: str
    size: int
    sbom: str  # path of the SBOM file
    provenance: str | None  # path of BuildKit's statement (None when the build recorded none)
    provenance_type: str | None
    components: int
    sbom_ref: str | None = None  # the registry's `sha256-<hex>.sbom` tag it was attached under


@dataclass(frozen=True)
class VariantPlatform(Record):
    platform: str
    digest: str  # the variant's manifest
    source_digest: str  # the gzip manifest
    gzip_bytes: int  # config + layers, as pushed
    compressed_bytes: int  # the same of the variant


@dataclass(frozen=True)
class VariantRecord(Record):
    """Another compression of a pushed image (xcforge/publish/zstd.py), tagged <tag>-<compression>."""

    compression: str
    digest: str
    source_digest: str
    refs: tuple[str, ...]
    level: int
    layers_transcoded: int
    layers_reused: int
    platforms: tuple[VariantPlatform, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "refs", tuple(self.refs))
        object.__setattr__(self, "platforms", records_of(VariantPlatform, self.platforms))


@dataclass(frozen=True)
class SignatureRecord(Record):
    """One signature or attestation the sign stage wrote (xcforge/sign/stage.py), as the report lists it."""

    OMITTED_WHEN_NONE = frozenset({"location", "attestation"})

    scheme: str  # sm2 | cosign | sigstore (keyless)
    digest: str
    key_id: str  # a key's id (16 hex digits), or the keyless identity
    location: str | None = None  # where it was written: the registry tag or the archive's side file
    result: str = "signed"  # signed | already signed | attested | already attested
    attestation: str | None = None  # the predicate type of an attestation


@dataclass(frozen=True)
class SmokeCheck(Record):
    """One smoke check on one platform (xcforge/smoke/checks.py): pass | fail | skip, and why."""

    check: str
    platform: str
    status: str
    detail: str = ""


__all__ = [
    "LEVELS",
    "AttestationRecord",
    "Record",
    "SignatureRecord",
    "SmokeCheck",
    "VariantPlatform",
    "VariantRecord",
    "VerificationRecord",
    "higher",
    "rank",
    "records_of",
]
