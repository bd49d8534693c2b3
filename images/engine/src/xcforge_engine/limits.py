"""The container's real memory and CPU limits (cgroup v1 and v2), not the host's.

`/proc/meminfo` and `/proc/cpuinfo` inside a container describe the whole host; the limits that
`docker run --memory/--cpus/--cpuset-cpus` set live in the cgroup files. Every value carries the
sentence saying where it came from, which the launcher logs next to what it derived.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from xcforge_engine.host import Host

GIB = 1 << 30
MIB = 1 << 20

# cgroup v1 reports "no limit" as a huge page-aligned number (9223372036854771712 on 4 KiB pages);
# anything this large is that sentinel, not a limit.
_V1_UNLIMITED = 1 << 60
_CGROUP = "/sys/fs/cgroup"


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def size_text(n: float) -> str:
    return gib(n) if n >= GIB else f"{n / MIB:.0f} MiB"


def parse_cpulist(text: str) -> list[int]:
    """`0-3,8` → [0, 1, 2, 3, 8]; also `0-7:2` strides as the kernel writes them."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        stride = 1
        if ":" in part:
            part, step = part.split(":", 1)
            stride = int(step)
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1, stride))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] → `0-3,8`, the form VLLM_CPU_OMP_THREADS_BIND and cpusets take."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


@dataclass(frozen=True)
class MemoryLimit:
    limit_bytes: int | None  # None: no cgroup limit
    source: str  # "cgroup v2 memory.max", or why there is no limit
    total_bytes: int | None  # /proc/meminfo MemTotal (the host's)
    available_bytes: int | None  # /proc/meminfo MemAvailable (the host's)

    def budget(self) -> tuple[int | None, str]:
        """Bytes this container may use, and the sentence that says why."""
        if self.limit_bytes is not None:
            if self.available_bytes is not None and self.available_bytes < self.limit_bytes:
                return self.available_bytes, (
                    f"memory limit {gib(self.limit_bytes)} from {self.source}, but only "
                    f"{gib(self.available_bytes)} available (/proc/meminfo MemAvailable)"
                )
            return self.limit_bytes, f"memory limit {gib(self.limit_bytes)} from {self.source}"
        if self.available_bytes is not None:
            return self.available_bytes, (
                f"{self.source}; {gib(self.available_bytes)} available (/proc/meminfo MemAvailable)"
            )
        if self.total_bytes is not None:
            return self.total_bytes, f"{self.source}; {gib(self.total_bytes)} total (/proc/meminfo MemTotal)"
        return None, f"{self.source}; /proc/meminfo unreadable"


@dataclass(frozen=True)
class CpuLimit:
    cpus: tuple[int, ...]  # CPU ids this container may run on
    cpus_source: str
    quota: float | None  # CPUs of time per period; None: no quota
    quota_source: str

    def usable(self) -> tuple[list[int], str]:
        """CPUs worth binding threads to, and why: the cpuset, cut to the quota when that is smaller.

        Busy OpenMP threads beyond the quota do not run faster, they get throttled together; so
        with `--cpus 2` on a 16-CPU cpuset we bind 2, rounding a fractional quota down.
        """
        cpus = list(self.cpus)
        why = f"{len(cpus)} CPUs ({format_cpulist(cpus)}) from {self.cpus_source}"
        if self.quota is not None and math.floor(self.quota) < len(cpus):
            keep = max(1, math.floor(self.quota))
            why += f", cut to {keep} by the CPU quota of {self.quota:g} CPUs from {self.quota_source}"
            cpus = cpus[:keep]
        return cpus, why


@dataclass(frozen=True)
class Limits:
    cgroup_version: int | None
    memory: MemoryLimit
    cpu: CpuLimit


def _cgroup_version(host: Host) -> int | None:
    if host.exists(f"{_CGROUP}/cgroup.controllers"):
        return 2
    if host.is_dir(f"{_CGROUP}/memory") or host.is_dir(f"{_CGROUP}/cpu") or host.is_dir(f"{_CGROUP}/cpuset"):
        return 1
    return None


def _self_cgroup_paths(host: Host) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; v2's single line is keyed ''."""
    paths: dict[str, str] = {}
    for line in (host.read_text("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def _dirs_upward(host: Host, mount: str, rel: str | None) -> list[str]:
    """The process's cgroup directory and its ancestors up to the mount, innermost first.

    With a private cgroup namespace (Docker's default on v2) the mount root is the container's own
    cgroup and /proc/self/cgroup says `/`; with the host's namespace it names a nested directory,
    and a limit set on any ancestor applies too, so the effective limit is the smallest found.
    """
    dirs: list[str] = []
    if rel and rel != "/":
        current = mount + "/" + rel.strip("/")
        while current != mount and current.startswith(mount):
            if host.is_dir(current):
                dirs.append(current)
            current = current.rsplit("/", 1)[0]
    dirs.append(mount)
    return dirs


def _label(version: int, mount: str, directory: str, name: str) -> str:
    shown = name if directory == mount else f"{directory}/{name}"
    return f"cgroup v{version} {shown}"


def _read_int(host: Host, path: str) -> int | None:
    text = host.read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _meminfo(host: Host) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in (host.read_text("/proc/meminfo") or "").splitlines():
        match = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if match:
            values[match.group(1)] = int(match.group(2)) * 1024
    return values


def _memory_v2(host: Host, dirs: list[str]) -> tuple[int | None, str]:
    best: tuple[int, str] | None = None
    seen_max = False
    for directory in dirs:
        text = host.read_text(f"{directory}/memory.max")
        if text is None:
            continue
        text = text.strip()
        if text == "max":
            seen_max = True
            continue
        try:
            value = int(text)
        except ValueError:
            continue
        if best is None or value < best[0]:
            best = (value, _label(2, _CGROUP, directory, "memory.max"))
    if best:
        return best
    if seen_max:
        return None, "no cgroup memory limit (cgroup v2 memory.max = max)"
    return None, "no cgroup memory limit (no cgroup v2 memory.max)"


def _memory_v1(host: Host, rel: str | None) -> tuple[int | None, str]:
    mount = f"{_CGROUP}/memory"
    best: tuple[int, str] | None = None
    sentinel: int | None = None
    for directory in _dirs_upward(host, mount, rel):
        value = _read_int(host, f"{directory}/memory.limit_in_bytes")
        if value is None:
            continue
        if value >= _V1_UNLIMITED:
            sentinel = value
            continue
        if best is None or value < best[0]:
            best = (value, _label(1, mount, directory, "memory.limit_in_bytes"))
    if best:
        return best
    if sentinel is not None:
        return None, f"no cgroup memory limit (cgroup v1 memory.limit_in_bytes = {sentinel}, the unlimited value)"
    return None, "no cgroup memory limit (no cgroup v1 memory.limit_in_bytes)"


def _quota_v2(host: Host, dirs: list[str]) -> tuple[float | None, str]:
    best: tuple[float, str] | None = None
    for directory in dirs:
        text = host.read_text(f"{directory}/cpu.max")
        if not text:
            continue
        parts = text.split()
        if not parts or parts[0] == "max":
            continue
        try:
            period = int(parts[1]) if len(parts) > 1 else 100000
            quota = int(parts[0]) / period
        except (ValueError, ZeroDivisionError):
            continue
        if best is None or quota < best[0]:
            best = (quota, f"{_label(2, _CGROUP, directory, 'cpu.max')} ({text.strip()})")
    if best:
        return best
    return None, "no CPU quota (cgroup v2 cpu.max)"


def _quota_v1(host: Host, paths: dict[str, str]) -> tuple[float | None, str]:
    best: tuple[float, str] | None = None
    for mount in (f"{_CGROUP}/cpu,cpuacct", f"{_CGROUP}/cpu"):
        if not host.is_dir(mount):
            continue
        for directory in _dirs_upward(host, mount, paths.get("cpu")):
            quota = _read_int(host, f"{directory}/cpu.cfs_quota_us")
            period = _read_int(host, f"{directory}/cpu.cfs_period_us")
            if quota is None or quota < 0 or not period:
                continue
            cpus = quota / period
            if best is None or cpus < best[0]:
                label = _label(1, mount, directory, "cpu.cfs_quota_us")
                best = (cpus, f"{label} / cpu.cfs_period_us ({quota}/{period})")
        break
    if best:
        return best
    return None, "no CPU quota (cgroup v1 cpu.cfs_quota_us = -1)"


def _cpuset(host: Host, version: int | None, paths: dict[str, str]) -> tuple[list[int], str] | None:
    if version == 2:
        candidates = [
            (d, name)
            for d in _dirs_upward(host, _CGROUP, paths.get(""))
            for name in ("cpuset.cpus.effective", "cpuset.cpus")
        ]
        mount = _CGROUP
    elif version == 1:
        mount = f"{_CGROUP}/cpuset"
        candidates = [
            (d, name)
            for d in _dirs_upward(host, mount, paths.get("cpuset"))
            for name in ("cpuset.effective_cpus", "cpuset.cpus")
        ]
    else:
        return None
    for directory, name in candidates:
        text = (host.read_text(f"{directory}/{name}") or "").strip()
        if text:
            return parse_cpulist(text), f"{_label(version, mount, directory, name)} ({text})"
    return None


def _affinity(host: Host) -> tuple[list[int], str] | None:
    for line in (host.read_text("/proc/self/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            text = line.split(":", 1)[1].strip()
            if text:
                return parse_cpulist(text), f"/proc/self/status Cpus_allowed_list ({text})"
    return None


def _all_cpus(host: Host) -> tuple[list[int], str]:
    online = (host.read_text("/sys/devices/system/cpu/online") or "").strip()
    if online:
        return parse_cpulist(online), f"/sys/devices/system/cpu/online ({online})"
    count = len(re.findall(r"^processor\s*:", host.read_text("/proc/cpuinfo") or "", re.M))
    if count:
        return list(range(count)), f"{count} processors in /proc/cpuinfo"
    count = os.cpu_count() or 1
    return list(range(count)), "os.cpu_count()"


def read_limits(host: Host) -> Limits:
    version = _cgroup_version(host)
    paths = _self_cgroup_paths(host)
    if version == 2:
        dirs = _dirs_upward(host, _CGROUP, paths.get(""))
        limit, mem_source = _memory_v2(host, dirs)
        quota, quota_source = _quota_v2(host, dirs)
    elif version == 1:
        limit, mem_source = _memory_v1(host, paths.get("memory"))
        quota, quota_source = _quota_v1(host, paths)
    else:
        limit, mem_source = None, "no cgroup memory limit (no cgroup filesystem at /sys/fs/cgroup)"
        quota, quota_source = None, "no CPU quota (no cgroup filesystem at /sys/fs/cgroup)"

    # The cgroup's cpuset and the process's affinity (taskset, numactl) can each be narrower than
    # the other; threads may run only where both allow.
    cpuset = _cpuset(host, version, paths)
    affinity = _affinity(host)
    if cpuset and affinity and set(cpuset[0]) != set(affinity[0]):
        both = sorted(set(cpuset[0]) & set(affinity[0])) or cpuset[0]
        cpus, cpus_source = both, f"{cpuset[1]} ∩ {affinity[1]}"
    else:
        cpus, cpus_source = cpuset or affinity or _all_cpus(host)

    meminfo = _meminfo(host)
    return Limits(
        cgroup_version=version,
        memory=MemoryLimit(limit, mem_source, meminfo.get("MemTotal"), meminfo.get("MemAvailable")),
        cpu=CpuLimit(tuple(cpus), cpus_source, quota, quota_source),
    )


def _parse_size(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", text.strip())
    if not match:
        return None
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2).lower()]
    return int(match.group(1)) * scale


def shm_size(host: Host) -> tuple[int | None, str]:
    """Size of /dev/shm: the `size=` option of its tmpfs mount (what --shm-size sets), else statvfs."""
    for line in (host.read_text("/proc/self/mounts") or host.read_text("/proc/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            for option in fields[3].split(","):
                if option.startswith("size="):
                    size = _parse_size(option[5:])
                    if size is not None:
                        return size, f"/proc/self/mounts /dev/shm {option}"
    try:
        st = os.statvfs(host.path("/dev/shm"))
    except OSError:
        return None, "/dev/shm not found"
    return st.f_blocks * st.f_frsize, "statvfs(/dev/shm)"


def numa_nodes(host: Host) -> list[str]:
    return [p for p in host.glob("/sys/devices/system/node/node*") if re.search(r"/node\d+$", p)]


def has_capability(host: Host, bit: int) -> bool | None:
    """Whether the process's effective capability set holds `bit` (CAP_SYS_NICE is 23)."""
    for line in (host.read_text("/proc/self/status") or "").splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split(":", 1)[1].strip(), 16) >> bit & 1)
            except ValueError:
                return None
    return None
