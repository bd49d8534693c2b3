"""The llama.cpp CPU variant the feiteng image loads on a CPU, predicted by the launcher with
llama.cpp's own scoring rules (cpu_variants.py): start line, doctor and the one-line refusal.

The variants are the matrix's (what the image's Dockerfile builds and writes to image.json), so a
feature word the launcher does not know, or a variant the matrix adds, shows here.
"""

from __future__ import annotations

import json
import struct

import pytest
from engine_fakes import CPUINFO_PHYTIUM
from xcforge_engine.auxv import AT_HWCAP, AT_HWCAP2, HWCAP2_NAMES, HWCAP_NAMES
from xcforge_engine.cli import main
from xcforge_engine.cpu_variants import FEATURES, choose, parse_variants
from xcforge_engine.software import Software

from xcforge.config.matrix import load_matrix
from xcforge.paths import REPO_ROOT

SERVER = Software(python="3.11.2", server="/usr/local/bin/llama-server")
FEITENG = load_matrix(REPO_ROOT / "matrix.yaml").targets["feiteng"]
LLAMA = FEITENG.engine.llama_cpp
assert LLAMA is not None


def image_json_value(arch: str) -> str:
    """What the Dockerfile writes: `name:FEATURE+FEATURE` per variant, lowest first (render._facts)."""
    return " ".join(":".join([v.name, "+".join(v.features)]).rstrip(":") for v in LLAMA.cpu_variants[arch])


# AT_HWCAP/AT_HWCAP2 names as QEMU 7.2 user emulation reports them for `-e QEMU_CPU=` models (the
# docker tests check the same models end to end).
BASE = ["fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "cpuid"]
CPUS = {
    "cortex-a53": (BASE, []),
    "cortex-a72": (BASE, []),
    "neoverse-n1": ([*BASE, "atomics", "fphp", "asimdhp", "asimdrdm", "lrcpc", "dcpop", "asimddp", "ssbs"], []),
    # A64FX: ARMv8.2 with FP16 and 512-bit SVE, no dotprod.
    "a64fx": ([*BASE, "atomics", "fphp", "asimdhp", "asimdrdm", "fcma", "dcpop", "sve"], []),
    # Neoverse V1 class: SVE and I8MM, no SVE2.
    "neoverse-v1": (
        [*BASE, "atomics", "fphp", "asimdhp", "asimdrdm", "dcpop", "asimddp", "sve"],
        ["i8mm", "bf16"],
    ),
    # Neoverse N2 class: SVE2 too.
    "neoverse-n2": ([*BASE, "atomics", "fphp", "asimdhp", "asimdrdm", "asimddp", "sve"], ["sve2", "i8mm", "bf16"]),
}
EXPECTED_ARM = {
    "cortex-a53": "armv8.0_1",
    "cortex-a72": "armv8.0_1",
    "neoverse-n1": "armv8.2_2",
    "a64fx": "armv8.2_sve",
    "neoverse-v1": "armv8.6_1",
    "neoverse-n2": "armv8.6_2",
}


def auxv(names: list[str], names2: list[str]) -> bytes:
    bits = sum(1 << HWCAP_NAMES.index(n) for n in names)
    bits2 = sum(1 << HWCAP2_NAMES.index(n) for n in names2)
    return struct.pack("<8Q", 6, 4096, AT_HWCAP, bits, AT_HWCAP2, bits2, 0, 0)


def feiteng_machine(machine, arch: str, cpuinfo: str = CPUINFO_PHYTIUM, hwcaps=None):
    fake = machine("llamacpp", cpuinfo=cpuinfo)
    if hwcaps is not None:
        fake.path("/proc/self").mkdir(parents=True, exist_ok=True)
        fake.path("/proc/self/auxv").write_bytes(auxv(*hwcaps))
    isa = FEITENG.cpu_isa[arch]
    fake.image_json(target="feiteng", backend="llamacpp", engine="llama.cpp", engine_version="0.3.36",
                    engine_package="llama-cpp-python",
                    cpu_requires=" ".join(isa.requires), cpu_isa=isa.describes, cpu_variants=image_json_value(arch),
                    cpu_instead="an image built for this CPU's instruction set")  # fmt: skip
    return fake


def test_every_feature_word_of_the_matrix_is_scored_by_the_launcher():
    for arch, variants in LLAMA.cpu_variants.items():
        table = FEATURES["aarch64" if arch == "arm64" else "x86_64"]
        for variant in variants:
            assert set(variant.features) <= set(table), (arch, variant.name)
    # The round trip through image.json's string keeps names and words.
    assert [v.name for v in parse_variants(image_json_value("arm64"))] == [v.name for v in LLAMA.cpu_variants["arm64"]]


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_each_emulated_arm_cpu_gets_its_variant_in_doctor_and_the_start_line(machine, env_for, capsys, cpu):
    fake = feiteng_machine(machine, "arm64", hwcaps=CPUS[cpu])
    code = main(["doctor", "--json"], env=env_for("llamacpp"), host=fake.host, software=SERVER)
    report = json.loads(capsys.readouterr().out)
    variant = report["host"]["cpu"]["isa"]["variant"]
    assert code == 0 and variant["loads"] == EXPECTED_ARM[cpu], variant
    assert variant["library"] == f"libggml-cpu-{EXPECTED_ARM[cpu]}.so"
    assert variant["carried"] == [v.name for v in LLAMA.cpu_variants["arm64"]]
    (check,) = [c for c in report["checks"] if c["id"] == "cpu.isa"]
    assert check["status"] == "ok" and f"backend {EXPECTED_ARM[cpu]} (" in check["message"]
    fake.write("/models/m/m.gguf", "GGUF")
    main(["serve", "--model", "/models/m", "--dry-run"], env=env_for("llamacpp"), host=fake.host, software=SERVER)
    start = capsys.readouterr().err.splitlines()[0]
    assert f"llama.cpp CPU backend {EXPECTED_ARM[cpu]} (" in start, start
    assert ", llama.cpp from llama-cpp-python 0.3.36," in start and "vLLM" not in start, start


def test_the_why_names_the_features_seen_and_what_the_next_variant_lacks():
    carried = parse_variants(image_json_value("arm64"))
    names, names2 = CPUS["neoverse-n1"]
    choice = choose(carried, "aarch64", frozenset(names + names2), ("fp", "asimd"))
    line = choice.summary()
    assert "CPU features seen: asimddp asimdhp fphp" in line
    assert "armv8.2_3 needs sve" in line  # the nearest one it cannot load
    assert choice.best is not None and choice.best.score == 1 + 2 + 4  # llama.cpp's weights


def test_x86_host_with_avx512_bf16_gets_zen4_and_avx2_only_gets_haswell(machine, env_for, capsys):
    """zen4 (AVX-512 VBMI, VNNI, BF16) is the top of the matrix's amd64 list: AMX (sapphirerapids) is left out."""
    amx = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi2 avx2 avx512f avx512cd avx512vl avx512dq avx512bw "
    amx += "avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16 avx_vnni"
    for flags, expected in ((amx, "zen4"), ("fpu sse sse2 sse4_2 avx f16c fma bmi2 avx2", "haswell")):
        cpuinfo = f"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: {flags}\n"
        fake = feiteng_machine(machine, "amd64", cpuinfo=cpuinfo)
        fake.arch = "x86_64"
        main(["doctor", "--json"], env=env_for("llamacpp"), host=fake.host, software=SERVER)
        variant = json.loads(capsys.readouterr().out)["host"]["cpu"]["isa"]["variant"]
        assert variant["loads"] == expected, variant


def test_a_cpu_below_the_lowest_variant_is_refused_in_one_line(machine, env_for, capsys):
    fake = feiteng_machine(machine, "arm64", hwcaps=(["evtstrm", "cpuid"], []))  # no fp, no asimd
    fake.write("/models/m/m.gguf", "GGUF")
    argv = ["serve", "--model", "/models/m", "--dry-run"]
    code = main(argv, env=env_for("llamacpp"), host=fake.host, software=SERVER)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[xcforge] error:")]
    assert code == 3 and len(errors) == 1, errors
    carried = len(LLAMA.cpu_variants["arm64"])
    lowest = "the lowest, armv8.0_1, needs fp asimd"
    assert f"can load none of this image's {carried} llama.cpp CPU backends: {lowest}" in errors[0]
    assert "Phytium" in errors[0]  # the CPU, by name
