"""The build stage's result: one frozen record per target. The later stages return outcomes of their
own (publish, sign, smoke); the report stage puts each record together with them, once, into new
records (`dataclasses.replace`). report.json is these records, as JSON (`as_dict`, `from_dict`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xcforge.plan.build_plan import OutputMode
from xcforge.records import (
    AttestationRecord,
    SignatureRecord,
    SmokeCheck,
    VariantRecord,
    VerificationRecord,
    records_of,
)


@dataclass(frozen=True)
class PlatformResult:
    platform: str
    digest: str | None = None
    compressed_bytes: int | None = None
    builder: str | None = None  # the buildx builder that built it ("default": the local engine's)
    native: bool | None = None  # built on a node of this platform (else emulated with QEMU)


@dataclass(frozen=True)
class BuildResult:
    target: str
    status: str  # built | skipped | failed
    platforms: tuple[PlatformResult, ...]
    image_repo: str
    refs: tuple[str, ...] = ()
    digest: str | None = None  # the index (or the single platform manifest in split mode)
    output: OutputMode = OutputMode.ARCHIVE
    archive: str | None = None
    base: str = ""
    base_digest: str | None = None
    base_kind: str = "unknown"  # real | stand-in | unknown
    engine_install: str = "full"
    fingerprint: str | None = None
    revision: str = ""
    duration_s: float = 0.0
    cache_hits: int = 0
    steps: int = 0
    error: str | None = None
    error_code: int = 0  # the exit code behind `error` (xcforge.errors.exit_code: 5 build, 6 registry, ...)
    signatures: tuple[SignatureRecord, ...] = ()
    # Other compressions of the pushed image (the publish stage, xcforge/publish/zstd.py).
    variants: tuple[VariantRecord, ...] = ()
    # Per platform: SBOM and provenance files and where they were attached (xcforge/attest/attestations.py).
    attestations: tuple[AttestationRecord, ...] = ()
    smoke: tuple[SmokeCheck, ...] = ()
    notes: tuple[str, ...] = ()
    # Per platform (xcforge/plan/verification.py); smoke raises levels.
    verification: tuple[VerificationRecord, ...] = ()

    def __post_init__(self) -> None:
        # Lists and report.json's dicts in, tuples of typed records kept.
        normal = {
            "output": OutputMode(self.output),
            "platforms": tuple(p if isinstance(p, PlatformResult) else PlatformResult(**p) for p in self.platforms),
            "refs": tuple(self.refs),
            "signatures": records_of(SignatureRecord, self.signatures),
            "variants": records_of(VariantRecord, self.variants),
            "attestations": records_of(AttestationRecord, self.attestations),
            "smoke": records_of(SmokeCheck, self.smoke),
            "notes": tuple(self.notes),
            "verification": records_of(VerificationRecord, self.verification),
        }
        for name, value in normal.items():
            object.__setattr__(self, name, value)

    def with_levels(self, levels: Iterable[tuple[str, str]]) -> BuildResult:
        """This record with each (platform, level)'s verification raised to at least that level."""
        verification = {v.platform: v for v in self.verification}
        for platform, level in levels:
            if platform in verification:
                verification[platform] = verification[platform].raised(level)
        return dataclasses.replace(self, verification=tuple(verification.values()))

    @property
    def pinned_ref(self) -> str | None:
        return f"{self.image_repo}@{self.digest}" if self.digest else None

    def as_dict(self) -> dict[str, Any]:
        """The record as report.json holds it."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "platforms":
                value = [dataclasses.asdict(p) for p in value]
            elif isinstance(value, tuple):
                value = [v.as_dict() if hasattr(v, "as_dict") else v for v in value]
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildResult:
        """A record of report.json; an unknown key is a TypeError (the file is not a report of ours)."""
        return cls(**data)
