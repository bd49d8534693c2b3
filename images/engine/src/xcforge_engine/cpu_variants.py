"""Which of the image's llama.cpp CPU backends llama-server will load on this CPU, and why.

The feiteng image carries one CPU backend per CPU generation (libggml-cpu-<name>.so, image.json
`cpu_variants`: "name:FEATURE+FEATURE ..." lowest first). At start llama-server loads every one,
asks each for its score and keeps the best (ggml/src/ggml-backend-reg.cpp, ggml_backend_load_best).
A variant's score is 1 plus a weight per feature word it was compiled with, and 0 (not loadable)
when the CPU lacks one (ggml/src/ggml-cpu/arch/arm/cpu-feats.cpp and arch/x86/cpu-feats.cpp in
llama.cpp as vendored by llama-cpp-python 0.3.36). The launcher applies the same rules to the
features it reads (AT_HWCAP on aarch64, which follows QEMU_CPU under emulation; /proc/cpuinfo flags
on x86_64), so the start line, doctor and the refusal name the variant before the server runs; the
docker tests check the server's own "load_backend: loaded CPU backend from ..." line agrees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

# llama.cpp's feature word → (its weight in the score, the kernel's feature names it checks).
# aarch64: ggml_feats_get_arch64_runtime (ggml/src/ggml-feats.h) reads AT_HWCAP/AT_HWCAP2; FP16 needs
# both FPHP and ASIMDHP.
ARM_FEATURES: dict[str, tuple[int, tuple[str, ...]]] = {
    "DOTPROD": (1 << 1, ("asimddp",)),
    "FP16_VECTOR_ARITHMETIC": (1 << 2, ("fphp", "asimdhp")),
    "SVE": (1 << 3, ("sve",)),
    "MATMUL_INT8": (1 << 4, ("i8mm",)),
    "SVE2": (1 << 5, ("sve2",)),
    "SME": (1 << 6, ("sme",)),
}
# x86_64: cpuid_x86 in arch/x86/cpu-feats.cpp; the names are /proc/cpuinfo's for the same CPUID bits.
# AMX_TILE is a compiler flag only: the score checks AMX_INT8.
X86_FEATURES: dict[str, tuple[int, tuple[str, ...]]] = {
    "FMA": (1, ("fma",)),
    "F16C": (1 << 1, ("f16c",)),
    "SSE42": (1 << 2, ("sse4_2",)),
    "BMI2": (1 << 3, ("bmi2",)),
    "AVX": (1 << 4, ("avx",)),
    "AVX2": (1 << 5, ("avx2",)),
    "AVX_VNNI": (1 << 6, ("avx_vnni",)),
    "AVX512": (1 << 7, ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    "AVX512_VBMI": (1 << 8, ("avx512vbmi",)),
    "AVX512_BF16": (1 << 9, ("avx512_bf16",)),
    "AVX512_VNNI": (1 << 10, ("avx512_vnni",)),
    "AMX_TILE": (0, ()),
    "AMX_INT8": (1 << 11, ("amx_int8",)),
}
FEATURES = {"aarch64": ARM_FEATURES, "x86_64": X86_FEATURES}


@dataclass(frozen=True)
class Variant:
    name: str
    features: tuple[str, ...]

    @property
    def library(self) -> str:
        return f"libggml-cpu-{self.name}.so"


def parse_variants(text: str | None) -> list[Variant]:
    """image.json's `cpu_variants` ("armv8.0_1 armv8.2_1:DOTPROD ..."), lowest first."""
    variants = []
    for item in (text or "").split():
        name, _, words = item.partition(":")
        variants.append(Variant(name, tuple(w for w in words.split("+") if w)))
    return variants


@dataclass(frozen=True)
class Scored:
    variant: Variant
    score: int  # 0: llama.cpp does not load it here
    lacks: tuple[str, ...]  # the kernel feature names the CPU lacks for it


def score(variant: Variant, arch: str, flags: frozenset[str], baseline: tuple[str, ...]) -> Scored:
    """llama.cpp's score of one variant on a CPU with these flags. `baseline`: what every variant
    needs (image.json cpu_requires); llama.cpp's lowest scores 1 without checking it, and would die."""
    table = FEATURES.get(arch, {})
    total, lacks = 1, [name for name in baseline if name not in flags]
    for word in variant.features:
        weight, needs = table.get(word, (0, (word.lower(),)))  # an unknown word: assume it is not there
        missing = [name for name in needs if name not in flags]
        lacks += missing
        total += 0 if missing else weight
    return Scored(variant, 0 if lacks else total, tuple(dict.fromkeys(lacks)))


@dataclass(frozen=True)
class Choice:
    carried: tuple[Variant, ...]
    scored: tuple[Scored, ...]
    best: Scored | None
    seen: tuple[str, ...]  # the CPU's features that any carried variant asks about

    @property
    def refused(self) -> bool:
        return bool(self.carried) and self.best is None

    def summary(self) -> str:
        """One line: the variant and why (the start line, doctor, `version`)."""
        if not self.carried:
            return "no llama.cpp CPU variants in this image"
        if self.best is None:
            lowest = self.scored[0]
            return (
                f"none of the {len(self.carried)} llama.cpp CPU backends loads: the lowest, {lowest.variant.name}, "
                f"needs {' '.join(lowest.lacks)}"
            )
        best = self.best.variant
        why = f"CPU features seen: {' '.join(self.seen) or 'none of those any variant asks for'}"
        # The nearest variant it cannot load: the one that misses the fewest features.
        above = sorted((s for s in self.scored if s.score == 0), key=lambda s: len(s.lacks))
        if above:
            more = f" ({len(above) - 1} more not loadable)" if len(above) > 1 else ""
            why += f"; {above[0].variant.name} needs {' '.join(above[0].lacks)}{more}"
        words = "+".join(best.features) or "baseline"
        return (
            f"llama.cpp CPU backend {best.name} ({words}; {best.library}), the best of {len(self.carried)} "
            f"this image carries for this CPU ({why})"
        )


class VariantBlock(TypedDict):
    """doctor's `host.cpu.variant`."""

    carried: list[str]
    loads: str | None
    library: str | None
    score: int
    seen: list[str]
    scores: dict[str, int]
    summary: str


def choose(carried: list[Variant], arch: str, flags: frozenset[str], baseline: tuple[str, ...]) -> Choice:
    """The variant ggml_backend_load_best keeps: the highest score above 0 (the first on a tie, as
    its directory walk would not promise; the matrix's variants all score differently)."""
    scored = tuple(score(v, arch, flags, baseline) for v in carried)
    best = max((s for s in scored if s.score > 0), key=lambda s: s.score, default=None)
    table = FEATURES.get(arch, {})
    asked = {name for v in carried for word in v.features for name in table.get(word, (0, ()))[1]}
    return Choice(tuple(carried), scored, best, tuple(sorted(asked & flags)))


def block(choice: Choice) -> VariantBlock:
    best = choice.best
    return {
        "carried": [v.name for v in choice.carried],
        "loads": best.variant.name if best else None,
        "library": best.variant.library if best else None,
        "score": best.score if best else 0,
        "seen": list(choice.seen),
        "scores": {s.variant.name: s.score for s in choice.scored},
        "summary": choice.summary(),
    }


__all__ = ["Choice", "Variant", "VariantBlock", "block", "choose", "parse_variants", "score"]
