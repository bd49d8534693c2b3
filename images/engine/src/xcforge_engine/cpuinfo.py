"""CPU vendor and the instruction-set features vLLM's CPU backend cares about, from /proc/cpuinfo."""

from __future__ import annotations

import re
from dataclasses import dataclass

from xcforge_engine.auxv import auxv_features
from xcforge_engine.host import Host

# aarch64 "CPU implementer" codes (MIDR_EL1[31:24]) of the cores this project meets.
_IMPLEMENTERS = {
    "0x41": "Arm",
    "0x48": "HiSilicon (Kunpeng)",
    "0x70": "Phytium (Feiteng)",
    "0x61": "Apple",
    "0x51": "Qualcomm",
    "0x46": "Fujitsu",
    "0xc0": "Ampere",
}


@dataclass(frozen=True)
class CpuInfo:
    arch: str
    vendor: str | None
    model: str | None
    flags: frozenset[str]
    # Where the flags came from: auxv (AT_HWCAP, aarch64), cpuinfo, or none.
    source: str = "cpuinfo"

    def has(self, *names: str) -> bool:
        return any(name in self.flags for name in names)

    def features(self) -> dict[str, bool]:
        """The features doctor reports; keys are stable (docs/engine.md)."""
        if self.arch == "aarch64":
            return {
                "neon": self.has("asimd"),
                "fp16": self.has("asimdhp"),
                "bf16": self.has("bf16"),
                "sve": self.has("sve"),
                "i8mm": self.has("i8mm"),
            }
        return {
            "avx2": self.has("avx2"),
            "avx512f": self.has("avx512f"),
            "avx512_bf16": self.has("avx512_bf16"),
            "amx": self.has("amx_bf16", "amx_tile"),
        }

    def best_dtype(self) -> tuple[str, str]:
        """The --dtype vLLM's CPU backend runs fastest and safely here, and why."""
        if self.arch == "aarch64":
            if self.has("bf16"):
                return "bfloat16", "the CPU has ARMv8.6 BF16 (bf16 in its hardware capabilities)"
            if self.has("asimdhp"):
                return "float16", "no BF16 in the hardware capabilities (needs ARMv8.6), but FP16 (asimdhp) is there"
            return "float32", "neither BF16 (ARMv8.6) nor FP16 arithmetic (asimdhp) in the CPU's hardware capabilities"
        if self.arch == "x86_64":
            if self.has("avx512_bf16", "amx_bf16"):
                return "bfloat16", "the CPU has native BF16 (avx512_bf16/amx_bf16 in /proc/cpuinfo flags)"
            return "float32", "no native BF16 (avx512_bf16/amx_bf16) in /proc/cpuinfo flags"
        return "float32", f"unknown architecture {self.arch}"


def read_cpuinfo(host: Host) -> CpuInfo:
    text = host.read_text("/proc/cpuinfo") or ""
    arch = host.arch()

    def first(key: str) -> str | None:
        match = re.search(rf"^{re.escape(key)}\s*:\s*(.*)$", text, re.M)
        return match.group(1).strip() if match else None

    source = ""
    if arch == "aarch64":
        flags = first("Features") or ""
        # The kernel's hardware capabilities are what the CPU executes; under QEMU user emulation
        # they follow QEMU_CPU while /proc/cpuinfo describes the x86 host.
        raw = host.read_bytes("/proc/self/auxv")
        hwcap = auxv_features(raw) if raw else None
        if hwcap is not None:
            flags, source = " ".join(sorted(hwcap)), "auxv"
        implementer = (first("CPU implementer") or "").lower()
        vendor = _IMPLEMENTERS.get(implementer, f"implementer {implementer}" if implementer else None)
        part = first("CPU part")
        model = f"part {part}" if part else None
    else:
        flags = first("flags") or ""
        vendor = first("vendor_id")
        model = first("model name")
    if source != "auxv":
        source = "cpuinfo" if flags else "none"
    return CpuInfo(arch=arch, vendor=vendor, model=model, flags=frozenset(flags.split()), source=source)
