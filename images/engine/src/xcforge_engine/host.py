"""The machine as the container sees it, read under a root directory.

Every file the launcher reads about devices, drivers, cgroups and CPUs goes through `Host`, so the
tests build fake `/dev`, `/proc`, `/sys` and `/usr/local/Ascend` trees in a temporary directory and
run the real code on them. A fake tree holds device nodes as regular files: `strict_devices=False`
accepts them, while a real run (`Host.real()`) also insists on a character device, since a plain
file left at `/dev/davinci0` by a bad bind mount opens nothing.
"""

from __future__ import annotations

import os
import platform
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}


def normalize_arch(name: str) -> str:
    name = name.strip().lower()
    return _ARCH_ALIASES.get(name, name)


def _natural_key(text: str) -> tuple[object, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


@dataclass(frozen=True)
class Host:
    root: Path = Path("/")
    strict_devices: bool = True
    # None: the architecture of this process (platform.machine()) on a real root, the one that
    # /proc/cpuinfo describes under a fake root.
    arch_override: str | None = field(default=None)

    @classmethod
    def real(cls) -> Host:
        return cls(Path("/"), strict_devices=True)

    def path(self, container_path: str) -> Path:
        """Where a container path such as `/dev/davinci0` lies under this root."""
        return self.root / container_path.lstrip("/")

    def exists(self, container_path: str) -> bool:
        return self.path(container_path).exists()

    def is_file(self, container_path: str) -> bool:
        return self.path(container_path).is_file()

    def is_dir(self, container_path: str) -> bool:
        return self.path(container_path).is_dir()

    def is_device(self, container_path: str) -> bool:
        try:
            mode = self.path(container_path).stat().st_mode
        except OSError:
            return False
        return stat.S_ISCHR(mode) if self.strict_devices else not stat.S_ISDIR(mode)

    def read_bytes(self, container_path: str) -> bytes | None:
        try:
            return self.path(container_path).read_bytes()
        except OSError:
            return None

    def read_text(self, container_path: str) -> str | None:
        try:
            return self.path(container_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def glob(self, pattern: str) -> list[str]:
        """Container paths matching a glob (`/dev/davinci*`), in natural order (davinci2 before davinci10)."""
        found = ["/" + str(p.relative_to(self.root)).lstrip("/") for p in self.root.glob(pattern.lstrip("/"))]
        return sorted(found, key=_natural_key)

    def numbered(self, prefix: str) -> list[str]:
        """Device nodes `<prefix><N>` (`/dev/davinci0`, ...), leaving out `davinci_manager` and the like."""
        pattern = re.compile(re.escape(prefix) + r"\d+")
        return [p for p in self.glob(prefix + "*") if pattern.fullmatch(p) and self.is_device(p)]

    def arch(self) -> str:
        if self.arch_override:
            return normalize_arch(self.arch_override)
        if self.root == Path("/"):
            return normalize_arch(platform.machine())
        cpuinfo = self.read_text("/proc/cpuinfo") or ""
        if re.search(r"^CPU implementer", cpuinfo, re.M) or re.search(r"^Features\s*:", cpuinfo, re.M):
            return "aarch64"
        if re.search(r"^flags\s*:", cpuinfo, re.M):
            return "x86_64"
        return normalize_arch(platform.machine())

    def find_library(self, name: str, dirs: list[str]) -> str | None:
        """The first `dirs` entry holding `name` (a file or a symlink to one), as a container path."""
        for directory in dirs:
            candidate = f"{directory.rstrip('/')}/{name}"
            if self.is_file(candidate):
                return candidate
        return None

    def openable(self, container_path: str) -> bool:
        """Whether this process may open a device node for reading and writing."""
        return os.access(self.path(container_path), os.R_OK | os.W_OK)

    def group_of(self, container_path: str) -> int:
        return self.path(container_path).stat().st_gid

    def readable(self, container_path: str) -> bool:
        path = self.path(container_path)
        wanted = os.R_OK | (os.X_OK if path.is_dir() else 0)
        return os.access(path, wanted)
