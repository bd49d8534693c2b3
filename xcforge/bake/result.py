"""The build stage's result: one record per target, what the later stages (sign, smoke) add to and
the report writes. report.json is these records, as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xcforge.plan.build_plan import OutputMode
from xcforge.plan.verification import higher


@dataclass
class PlatformResult:
    platform: str
    digest: str | None = None
    compressed_bytes: int | None = None
    builder: str | None = None  # the buildx builder that built it ("default": the local engine's)
    native: bool | None = None  # built on a node of this platform (else emulated with QEMU)


@dataclass
class BuildResult:
    target: str
    status: str  # built | skipped | failed
    platforms: list[PlatformResult]
    image_repo: str
    refs: list[str] = field(default_factory=list)
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
    signatures: list[dict[str, Any]] = field(default_factory=list)
    # Other compressions of the pushed image (the publish stage, xcforge/publish/zstd.py): per
    # variant {compression, digest, source_digest, refs, platforms: [{platform, digest, ...}], ...}.
    variants: list[dict[str, Any]] = field(default_factory=list)
    # Per platform: SBOM and provenance files and where they were attached (xcforge/attest/attestations.py).
    attestations: list[dict[str, Any]] = field(default_factory=list)
    smoke: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Per platform: {platform, level, lock, skipped} (xcforge/plan/verification.py); smoke raises levels.
    verification: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.output = OutputMode(self.output)  # report.json holds the value

    def raise_level(self, platform: str, level: str) -> None:
        for entry in self.verification:
            if entry["platform"] == platform:
                entry["level"] = higher(entry["level"], level)

    @property
    def pinned_ref(self) -> str | None:
        return f"{self.image_repo}@{self.digest}" if self.digest else None
