"""The container's limits from cgroup v1 and v2 files, /proc/meminfo, /proc/self/status and mounts."""

from __future__ import annotations

import pytest
from engine_fakes import (
    CPUINFO_ARM_BF16,
    CPUINFO_KUNPENG920,
    CPUINFO_PHYTIUM,
    CPUINFO_X86_AMX,
    CPUINFO_X86_AVX2,
    GIB,
    FakeMachine,
)
from xcforge_engine.cpuinfo import read_cpuinfo
from xcforge_engine.limits import format_cpulist, parse_cpulist, read_limits, shm_size


@pytest.fixture
def fake(tmp_path):
    machine = FakeMachine(tmp_path)
    machine.meminfo(total_gib=64, available_gib=60)
    return machine


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8", [0, 1, 2, 3, 8]), ("0", [0]), ("0-7:2", [0, 2, 4, 6]), (" 2,4-5\n", [2, 4, 5]), ("", [])],
)
def test_cpulist_round_trip(text, cpus):
    assert parse_cpulist(text) == cpus
    if cpus and ":" not in text:
        assert parse_cpulist(format_cpulist(cpus)) == cpus
    assert format_cpulist([0, 1, 2, 3, 8]) == "0-3,8"


def test_v2_memory_number_and_cpu_quota(fake):
    fake.cgroup_v2(memory_max=str(8 * GIB), cpu_max="200000 100000", cpuset="0-3,8")
    limits = read_limits(fake.host)
    assert limits.cgroup_version == 2
    assert limits.memory.limit_bytes == 8 * GIB
    assert limits.memory.source == "cgroup v2 memory.max"
    assert limits.cpu.quota == 2.0
    assert limits.cpu.quota_source == "cgroup v2 cpu.max (200000 100000)"
    assert limits.cpu.cpus == (0, 1, 2, 3, 8)
    budget, why = limits.memory.budget()
    assert budget == 8 * GIB
    assert why == "memory limit 8.0 GiB from cgroup v2 memory.max"


def test_v2_unlimited_falls_back_to_available_memory(fake):
    fake.cgroup_v2(memory_max="max", cpu_max="max 100000")
    limits = read_limits(fake.host)
    assert limits.memory.limit_bytes is None
    assert limits.cpu.quota is None
    budget, why = limits.memory.budget()
    assert budget == 60 * GIB
    assert "no cgroup memory limit (cgroup v2 memory.max = max)" in why
    assert "60.0 GiB available (/proc/meminfo MemAvailable)" in why


def test_limit_above_available_memory_uses_available(fake):
    fake.meminfo(total_gib=16, available_gib=4)
    fake.cgroup_v2(memory_max=str(8 * GIB))
    budget, why = read_limits(fake.host).memory.budget()
    assert budget == 4 * GIB
    assert "but only 4.0 GiB available" in why


def test_v2_nested_cgroup_takes_the_smallest_limit_on_the_path(fake):
    fake.cgroup_v2(memory_max="max", cpu_max="max 100000", cpuset="0-15")
    fake.write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n")
    fake.write("/sys/fs/cgroup/kubepods/memory.max", str(32 * GIB))
    fake.write("/sys/fs/cgroup/kubepods/pod1/memory.max", str(6 * GIB))
    fake.write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max")
    fake.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "150000 100000")
    fake.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective", "4-7")
    limits = read_limits(fake.host)
    assert limits.memory.limit_bytes == 6 * GIB
    assert limits.memory.source == "cgroup v2 /sys/fs/cgroup/kubepods/pod1/memory.max"
    assert limits.cpu.quota == 1.5
    assert limits.cpu.cpus == (4, 5, 6, 7)


def test_v1_sentinel_is_no_limit(fake):
    fake.cgroup_v1(limit=9223372036854771712, quota=-1, cpuset="0-3")
    limits = read_limits(fake.host)
    assert limits.cgroup_version == 1
    assert limits.memory.limit_bytes is None
    assert "9223372036854771712, the unlimited value" in limits.memory.source
    assert limits.cpu.quota is None
    assert limits.cpu.cpus == (0, 1, 2, 3)
    assert limits.cpu.cpus_source == "cgroup v1 cpuset.cpus (0-3)"


def test_v1_limit_and_cfs_quota(fake):
    fake.cgroup_v1(limit=4 * GIB, quota=250000, period=100000, cpuset="0-3,8")
    limits = read_limits(fake.host)
    assert limits.memory.limit_bytes == 4 * GIB
    assert limits.memory.source == "cgroup v1 memory.limit_in_bytes"
    assert limits.cpu.quota == 2.5
    assert "cpu.cfs_quota_us / cpu.cfs_period_us (250000/100000)" in limits.cpu.quota_source
    cpus, why = limits.cpu.usable()
    assert cpus == [0, 1]  # a 2.5-CPU quota runs 2 busy threads without throttling
    assert "cut to 2 by the CPU quota of 2.5 CPUs" in why


def test_quota_larger_than_cpuset_changes_nothing(fake):
    fake.cgroup_v2(cpu_max="800000 100000", cpuset="0-3")
    cpus, why = read_limits(fake.host).cpu.usable()
    assert cpus == [0, 1, 2, 3]
    assert "cut" not in why


def test_affinity_narrower_than_cpuset_is_intersected(fake):
    fake.cgroup_v2(cpuset="0-7")
    fake.write("/proc/self/status", "Name:\tx\nCpus_allowed_list:\t2-3\n")
    limits = read_limits(fake.host)
    assert limits.cpu.cpus == (2, 3)
    assert "∩ /proc/self/status Cpus_allowed_list (2-3)" in limits.cpu.cpus_source


def test_no_cgroup_filesystem_uses_online_cpus(fake):
    fake.write("/sys/devices/system/cpu/online", "0-5\n")
    limits = read_limits(fake.host)
    assert limits.cgroup_version is None
    assert limits.cpu.cpus == tuple(range(6))
    assert limits.memory.limit_bytes is None


def test_shm_size_from_mount_options(fake):
    fake.shm("65536k")
    assert shm_size(fake.host) == (64 << 20, "/proc/self/mounts /dev/shm size=65536k")
    fake.shm("4g")
    assert shm_size(fake.host)[0] == 4 * GIB


def test_shm_size_falls_back_to_statvfs(fake):
    fake.mkdir("/dev/shm")
    size, source = shm_size(fake.host)
    assert size and size > 0
    assert source == "statvfs(/dev/shm)"


@pytest.mark.parametrize(
    ("cpuinfo", "arch", "vendor", "dtype", "features"),
    [
        (CPUINFO_PHYTIUM, "aarch64", "Phytium (Feiteng)", "float32", {"neon": True, "bf16": False, "sve": False}),
        (CPUINFO_KUNPENG920, "aarch64", "HiSilicon (Kunpeng)", "float16", {"neon": True, "fp16": True, "bf16": False}),
        (CPUINFO_ARM_BF16, "aarch64", "Arm", "bfloat16", {"bf16": True, "sve": True}),
        (CPUINFO_X86_AMX, "x86_64", "GenuineIntel", "bfloat16", {"avx512f": True, "avx512_bf16": True, "amx": True}),
        (CPUINFO_X86_AVX2, "x86_64", "AuthenticAMD", "float32", {"avx2": True, "avx512f": False, "amx": False}),
    ],
)
def test_cpu_features_and_dtype(fake, cpuinfo, arch, vendor, dtype, features):
    fake.write("/proc/cpuinfo", cpuinfo)
    info = read_cpuinfo(fake.host)
    assert info.arch == arch
    assert info.vendor == vendor
    assert info.best_dtype()[0] == dtype
    for name, present in features.items():
        assert info.features()[name] is present
