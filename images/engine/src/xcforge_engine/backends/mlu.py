"""x86_64 + Cambricon MLU: device nodes by hand (least privilege instead of the vendor's --privileged)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from xcforge_engine.backends.base import (
    WARNING,
    DeriveInput,
    Finding,
    Setting,
    device_finding,
    file_finding,
    image_part_finding,
    numbered_finding,
    visible_settings,
)
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.software import Software

CNMON = "/usr/bin/cnmon"


def neuware_home(env: Mapping[str, str]) -> str:
    return env.get("NEUWARE_HOME") or "/usr/local/neuware"


def neuware_version(host: Host, env: Mapping[str, str]) -> str | None:
    home = neuware_home(env)
    for name in ("version.txt", "version", ".version"):
        match = re.search(r"(\d+\.\d+(?:\.\d+)*)", host.read_text(f"{home}/{name}") or "")
        if match:
            return match.group(1)
    return None


def driver_version(host: Host) -> str | None:
    """The host driver's version as its kernel module reports it (indicative: layouts vary by release)."""
    for info in host.glob("/proc/driver/cambricon/mlus/*/information"):
        match = re.search(r"Driver Version\s*:\s*v?(\S+)", host.read_text(info) or "", re.I)
        if match:
            return match.group(1)
    return None


class MluBackend:
    name = "mlu"
    rank = 30
    probe = "/dev/cambricon_ctl"
    distributions: tuple[str, ...] = ("vllm-mlu", "torch-mlu", "torch-mlu-ops")
    title = "Cambricon MLU"
    device_word = "MLU"
    hint = "one --device /dev/cambricon_devN and /dev/cambricon_ipcmN per MLU to use"
    visible_env = ("MLU_VISIBLE_DEVICES", "CAMBRICON_VISIBLE_DEVICES")

    def device_nodes(self, host: Host) -> list[str]:
        return host.numbered("/dev/cambricon_dev")

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]:
        home = neuware_home(env)
        return [
            device_finding(host, "mlu.device.cambricon_ctl", "/dev/cambricon_ctl", ("--device /dev/cambricon_ctl",)),
            numbered_finding(host, "mlu.device.cambricon_dev", "/dev/cambricon_dev", ("--device /dev/cambricon_dev0",)),
            # The runtime's inter-process node: Cambricon's docker run examples pass it with each card,
            # but its Kubernetes device plugin treats it as optional (single-process serving runs without
            # it), so its absence is a warning, not an error.
            numbered_finding(
                host,
                "mlu.device.cambricon_ipcm",
                "/dev/cambricon_ipcm",
                ("--device /dev/cambricon_ipcm0",),
                "needed for multi-process (tensor-parallel) serving across MLUs",
                missing=WARNING,
            ),
            # cnmon is the host's monitoring tool; the engine runs without it, so only a warning.
            file_finding(
                host,
                "mlu.tool.cnmon",
                CNMON,
                (f"-v {CNMON}:{CNMON}",),
                WARNING,
                "needed for doctor's device details and vendor tooling, not for serving",
            ),
            image_part_finding(image, "mlu.neuware", host.is_dir(home), "Cambricon Neuware", home),
        ]

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]:
        return {"driver": driver_version(host), "neuware": neuware_version(host, env)}

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]:
        return []

    def derive(self, given: DeriveInput) -> list[Setting]:
        return visible_settings(self, given)


MLU = MluBackend()
BACKEND = MLU
