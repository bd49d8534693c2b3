"""Fake machines for the launcher's tests: real files under a temporary root, read by the real code.

`FakeMachine` writes `/dev`, `/proc`, `/sys` and vendor driver trees under a root directory; device
nodes are regular files (its Host is built with strict_devices=False).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from xcforge_engine.host import Host
from xcforge_engine.software import Software

GIB = 1 << 30

CPUINFO_PHYTIUM = """\
processor\t: 0
BogoMIPS\t: 100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid
CPU implementer\t: 0x70
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0x662
CPU revision\t: 2
"""

_KUNPENG920_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp asimdfhm"
)
CPUINFO_KUNPENG920 = f"""\
processor\t: 0
Features\t: {_KUNPENG920_FEATURES}
CPU implementer\t: 0x48
CPU part\t: 0xd01
"""

CPUINFO_ARM_BF16 = """\
processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve sve2 i8mm bf16
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""

CPUINFO_X86_AMX = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8
"""

CPUINFO_X86_AVX2 = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7302
flags\t\t: fpu vme sse sse2 avx avx2
"""

ENGINE = Software(python="3.11.7", vllm_distribution="vllm", vllm="0.11.0", torch="2.7.1", vllm_importable=True)
NO_ENGINE = Software(python="3.11.7")


class FakeMachine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.arch: str | None = None  # set: the process architecture, whatever /proc/cpuinfo says

    @property
    def host(self) -> Host:
        return Host(self.root, strict_devices=False, arch_override=self.arch)

    def path(self, container_path: str) -> Path:
        return self.root / container_path.lstrip("/")

    def write(self, container_path: str, text: str = "") -> Path:
        path = self.path(container_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def devices(self, *paths: str) -> None:
        for p in paths:
            self.write(p)

    def remove(self, container_path: str) -> None:
        path = self.path(container_path)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()

    def mkdir(self, container_path: str) -> None:
        self.path(container_path).mkdir(parents=True, exist_ok=True)

    # --- system files -----------------------------------------------------------------------------

    def meminfo(self, total_gib: float = 64, available_gib: float = 60) -> None:
        self.write(
            "/proc/meminfo",
            f"MemTotal:       {int(total_gib * GIB / 1024)} kB\n"
            f"MemFree:        {int(available_gib * GIB / 1024)} kB\n"
            f"MemAvailable:   {int(available_gib * GIB / 1024)} kB\n",
        )

    def cgroup_v2(self, memory_max: str = "max", cpu_max: str = "max 100000", cpuset: str = "0-7") -> None:
        shutil.rmtree(self.path("/sys/fs/cgroup"), ignore_errors=True)
        self.write("/proc/self/cgroup", "0::/\n")
        self.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
        self.write("/sys/fs/cgroup/memory.max", memory_max + "\n")
        self.write("/sys/fs/cgroup/cpu.max", cpu_max + "\n")
        self.write("/sys/fs/cgroup/cpuset.cpus.effective", cpuset + "\n")

    def cgroup_v1(
        self, limit: int = 9223372036854771712, quota: int = -1, period: int = 100000, cpuset: str = "0-7"
    ) -> None:
        shutil.rmtree(self.path("/sys/fs/cgroup"), ignore_errors=True)
        self.write(
            "/proc/self/cgroup",
            "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n10:cpuset:/docker/abc\n",
        )
        self.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", f"{limit}\n")
        self.write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", f"{quota}\n")
        self.write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", f"{period}\n")
        self.write("/sys/fs/cgroup/cpuset/cpuset.cpus", cpuset + "\n")

    def shm(self, size: str = "1g") -> None:
        self.write(
            "/proc/self/mounts",
            f"overlay / overlay rw,relatime 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size={size} 0 0\n",
        )

    def image_json(self, **facts: str) -> None:
        self.write("/etc/xcforge/image.json", json.dumps(facts))

    # --- one healthy container per backend --------------------------------------------------------

    def ascend(self) -> None:
        self.devices("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/davinci0", "/dev/davinci1")
        self.write("/usr/local/Ascend/driver/lib64/driver/libascend_hal.so")
        self.write(
            "/usr/local/Ascend/driver/version.info",
            "Version=24.1.rc2\nascendhal_version=7.35.23\npackage_version=24.1.rc2\n",
        )
        self.write(
            "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info",
            "package_name=Ascend-cann-toolkit\nversion=8.0.RC3\narch=aarch64\nos=linux\n",
        )
        self.write("/usr/local/bin/npu-smi")
        self.mkdir("/usr/local/dcmi")
        self.write("/etc/ascend_install.info", "Driver_Install_Path_Param=/usr/local/Ascend\n")

    def mlu(self) -> None:
        self.devices(
            "/dev/cambricon_ctl",
            "/dev/cambricon_dev0",
            "/dev/cambricon_dev1",
            "/dev/cambricon_ipcm0",
            "/dev/cambricon_ipcm1",
        )
        self.write("/usr/bin/cnmon")
        self.write("/usr/local/neuware/version.txt", "Neuware Version 3.10.2\n")

    def cuda(self) -> None:
        self.devices("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm")
        self.write("/usr/local/nvidia/lib64/libcuda.so.1")
        self.write(
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan 16 2025\n"
            "GCC version:  gcc version 12.2.0\n",
        )

    def cpu(self) -> None:
        self.write("/usr/lib/x86_64-linux-gnu/libnuma.so.1")
        self.write("/usr/lib/aarch64-linux-gnu/libnuma.so.1")

    def llamacpp(self) -> None:
        self.write("/usr/local/bin/llama-server")


CPUINFO_FOR = {
    "ascend": CPUINFO_KUNPENG920,
    "mlu": CPUINFO_X86_AVX2,
    "cuda": CPUINFO_X86_AMX,
    "cpu": CPUINFO_X86_AVX2,
    "llamacpp": CPUINFO_PHYTIUM,
}
