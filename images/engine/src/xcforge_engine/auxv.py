"""The kernel's hardware capabilities of an aarch64 CPU (AT_HWCAP/AT_HWCAP2 in /proc/self/auxv).

What the CPU executes: under QEMU user emulation they follow QEMU_CPU while /proc/cpuinfo shows the
x86 host. cpuinfo.read_cpuinfo reads them; isa.py compares them with what an image needs. A module
of its own so that neither of those two imports the other's private names.
"""

from __future__ import annotations

import struct

AT_HWCAP, AT_HWCAP2 = 16, 26
# Linux arch/arm64/include/uapi/asm/hwcap.h: bit → the name /proc/cpuinfo prints.
HWCAP_NAMES = [
    "fp",
    "asimd",
    "evtstrm",
    "aes",
    "pmull",
    "sha1",
    "sha2",
    "crc32",
    "atomics",
    "fphp",
    "asimdhp",
    "cpuid",
    "asimdrdm",
    "jscvt",
    "fcma",
    "lrcpc",
    "dcpop",
    "sha3",
    "sm3",
    "sm4",
    "asimddp",
    "sha512",
    "sve",
    "asimdfhm",
    "dit",
    "uscat",
    "ilrcpc",
    "flagm",
    "ssbs",
    "sb",
    "paca",
    "pacg",
]
HWCAP2_NAMES = [
    "dcpodp",
    "sve2",
    "sveaes",
    "svepmull",
    "svebitperm",
    "svesha3",
    "svesm4",
    "flagm2",
    "frint",
    "svei8mm",
    "svef32mm",
    "svef64mm",
    "svebf16",
    "i8mm",
    "bf16",
    "dgh",
    "rng",
    "bti",
]


def auxv_features(raw: bytes) -> set[str] | None:
    """Feature names from an auxv blob (pairs of native unsigned longs, little-endian on arm64)."""
    if len(raw) < 16:
        return None
    words = struct.unpack(f"<{len(raw) // 8}Q", raw[: len(raw) // 8 * 8])
    caps = {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2)}
    if AT_HWCAP not in caps:
        return None
    found = {name for bit, name in enumerate(HWCAP_NAMES) if caps[AT_HWCAP] >> bit & 1}
    found |= {name for bit, name in enumerate(HWCAP2_NAMES) if caps.get(AT_HWCAP2, 0) >> bit & 1}
    return found


__all__ = ["AT_HWCAP", "AT_HWCAP2", "HWCAP2_NAMES", "HWCAP_NAMES", "auxv_features"]
