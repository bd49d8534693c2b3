"""The ISA gate: the CPU's features against what the image's binaries need, before torch loads."""

from __future__ import annotations

import json
import struct

from engine_fakes import CPUINFO_KUNPENG920, CPUINFO_X86_AVX2, ENGINE
from xcforge_engine.auxv import AT_HWCAP, AT_HWCAP2, HWCAP_NAMES, auxv_features
from xcforge_engine.cli import main

ARM_NEEDS = "atomics asimddp fphp asimdhp"
# AT_HWCAP as QEMU user emulation reports it for these `-e QEMU_CPU=` models (docs/operators.md
# §2b; the names the kernel prints).
CORTEX_A57 = ["fp", "asimd", "aes", "pmull", "sha1", "sha2", "crc32", "cpuid"]
NEOVERSE_N1 = [*CORTEX_A57, "atomics", "fphp", "asimdhp", "asimdrdm", "lrcpc", "dcpop", "asimddp", "ssbs"]


def auxv(names: list[str], hwcap2: int = 0) -> bytes:
    bits = sum(1 << HWCAP_NAMES.index(n) for n in names)
    return struct.pack("<8Q", 6, 4096, AT_HWCAP, bits, AT_HWCAP2, hwcap2, 0, 0)


def arm_machine(machine, names):
    fake = machine("cpu", cpuinfo=CPUINFO_KUNPENG920)
    fake.path("/proc/self").mkdir(parents=True, exist_ok=True)
    fake.path("/proc/self/auxv").write_bytes(auxv(names))
    fake.image_json(target="cpu", backend="cpu", engine_version="0.32.0", cpu_requires=ARM_NEEDS,
                    cpu_isa="ARMv8.2-A with LSE atomics", cpu_instead="llama.cpp built for armv8-a")  # fmt: skip
    return fake


def test_auxv_bits_decode_to_kernel_names():
    assert auxv_features(auxv(CORTEX_A57)) == set(CORTEX_A57)
    assert "bf16" in auxv_features(auxv(CORTEX_A57, hwcap2=1 << 14))
    assert auxv_features(b"") is None


def test_armv8_0_cpu_is_refused_by_doctor_with_the_missing_features(machine, env_for, capsys):
    fake = arm_machine(machine, CORTEX_A57)
    code = main(["doctor", "--json"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    isa = report["host"]["cpu"]["isa"]
    assert code == 3 and isa["source"] == "auxv" and isa["level"] == "armv8.0-a"
    assert isa["missing"] == ["atomics", "asimddp", "fphp", "asimdhp"]
    (check,) = [c for c in report["checks"] if c["id"] == "cpu.isa"]
    assert check["status"] == "error" and "lacks atomics, asimddp, fphp, asimdhp" in check["message"]
    assert check["remedy"] == "use llama.cpp built for armv8-a"


def test_armv8_2_cpu_passes(machine, env_for, capsys):
    fake = arm_machine(machine, NEOVERSE_N1)
    main(["doctor", "--json"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    assert report["host"]["cpu"]["isa"]["level"] == "armv8.2-a"
    assert [c["status"] for c in report["checks"] if c["id"] == "cpu.isa"] == ["ok"]


def test_serve_refuses_in_one_line_before_anything_starts(machine, env_for, capsys):
    fake = arm_machine(machine, CORTEX_A57)
    fake.write("/models/tiny/config.json", "{}")
    code = main(["serve", "--model", "/models/tiny", "--dry-run"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    err = capsys.readouterr().err
    assert code == 3
    line = next(line for line in err.splitlines() if "lacks" in line)
    assert "lacks atomics, asimddp, fphp, asimdhp" in line and "use llama.cpp built for armv8-a" in line


def test_x86_without_avx2_is_refused(machine, env_for, capsys):
    fake = machine("cpu", cpuinfo=CPUINFO_X86_AVX2.replace(" avx2", "").replace(" fma", ""))
    fake.image_json(target="cpu", backend="cpu", engine_version="0.32.0", cpu_requires="avx2 fma")
    code = main(["doctor", "--json"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    assert code == 3 and report["host"]["cpu"]["isa"]["missing"] == ["avx2", "fma"]


def test_images_without_requirements_are_not_gated(machine, env_for, capsys):
    fake = machine("cuda")
    main(["doctor", "--json"], env=env_for("cuda"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in report["checks"] if c["id"] == "cpu.isa"] == ["ok"]


def test_dtype_follows_the_hardware_capabilities_not_the_hosts_cpuinfo(machine, env_for, capsys):
    """Under QEMU /proc/cpuinfo is the x86 host's; auxv is the emulated CPU: FP16 on Neoverse N1."""
    fake = arm_machine(machine, NEOVERSE_N1)
    fake.write("/proc/cpuinfo", CPUINFO_X86_AVX2)
    fake.arch = "aarch64"  # an emulated aarch64 process on an x86 host
    main(["doctor", "--json"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    dtype = next(d for d in report["serve_defaults"] if d["name"] == "--dtype")
    assert dtype["value"] == "float16" and "asimdhp" in dtype["why"]
    (check,) = [c for c in report["checks"] if c["id"] == "cpu.cpuinfo"]
    assert check["status"] == "error" and "x86_64 /proc/cpuinfo" in check["message"]
    assert "-v FILE:/proc/cpuinfo:ro" in check["remedy"]


def test_matching_cpuinfo_is_fine(machine, env_for, capsys):
    fake = arm_machine(machine, NEOVERSE_N1)
    main(["doctor", "--json"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in report["checks"] if c["id"] == "cpu.cpuinfo"] == ["ok"]


def test_a_foreign_cpuinfo_does_not_stop_llama_cpp(machine, env_for, capsys):
    fake = arm_machine(machine, CORTEX_A57)
    fake.write("/proc/cpuinfo", CPUINFO_X86_AVX2)
    fake.arch = "aarch64"
    fake.image_json(target="feiteng", backend="llamacpp", engine="llama.cpp", cpu_requires="fp asimd")
    fake.write("/usr/local/bin/llama-server")
    main(["doctor", "--json"], env=env_for("llamacpp"), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    checks = {c["id"]: c["status"] for c in report["checks"]}
    assert checks["cpu.isa"] == "ok" and checks["cpu.cpuinfo"] == "ok"
