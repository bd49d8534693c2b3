"""x86_64 + NVIDIA GPU: the NVIDIA Container Toolkit (`--gpus all`) provides devices and libcuda."""

from __future__ import annotations

import re
from collections.abc import Mapping

from xcforge_engine.backends.base import (
    ERROR,
    OK,
    DeriveInput,
    Finding,
    Setting,
    compat_findings,
    device_finding,
    library_dirs,
    numbered_finding,
    visible_settings,
)
from xcforge_engine.compat import judge_cuda
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.software import Software

_GPUS = ("--gpus all",)


def driver_version(host: Host) -> str | None:
    text = host.read_text("/proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return match.group(1) if match else None


def runtime_version(env: Mapping[str, str], software: Software) -> str | None:
    """The CUDA the engine runs on: what torch was built for (its own runtime wheels), else torch's
    +cuXYZ, else the base image's CUDA_VERSION. The base's value alone can say OK on a driver too
    old for the torch the image actually carries."""
    if software.torch_cuda:
        return software.torch_cuda
    match = re.search(r"\+cu(\d+)(\d)$", software.torch or "")
    if match:
        return f"{match.group(1)}.{match.group(2)}"
    return env.get("CUDA_VERSION") or None


class CudaBackend:
    name = "cuda"
    rank = 10
    probe = "/dev/nvidiactl"
    distributions: tuple[str, ...] = ()
    title = "NVIDIA CUDA"
    device_word = "GPU"
    hint = "needs the NVIDIA Container Toolkit on the host; or --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all"
    visible_env = ("CUDA_VISIBLE_DEVICES",)

    def device_nodes(self, host: Host) -> list[str]:
        return host.numbered("/dev/nvidia")

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]:
        remedy = ""
        if env.get("NVIDIA_VISIBLE_DEVICES", "").strip().lower() in ("void", "none"):
            remedy = f"NVIDIA_VISIBLE_DEVICES={env['NVIDIA_VISIBLE_DEVICES']} hides every GPU: drop it"
        findings = [
            device_finding(host, "cuda.device.nvidiactl", "/dev/nvidiactl", _GPUS, remedy),
            numbered_finding(host, "cuda.device.nvidia", "/dev/nvidia", _GPUS, remedy),
            device_finding(host, "cuda.device.nvidia-uvm", "/dev/nvidia-uvm", _GPUS, remedy),
        ]
        libcuda = host.find_library("libcuda.so.1", library_dirs(env))
        if libcuda:
            findings.append(Finding("cuda.driver.libcuda", OK, f"libcuda.so.1 at {libcuda}"))
        else:
            findings.append(
                Finding(
                    "cuda.driver.libcuda",
                    ERROR,
                    "libcuda.so.1 (the host driver's library) is not in the container",
                    remedy or "the NVIDIA Container Toolkit mounts it from the host driver",
                    _GPUS,
                    subject="libcuda.so.1",
                )
            )
        return findings

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]:
        return {"driver": driver_version(host), "cuda_runtime": runtime_version(env, software)}

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]:
        return compat_findings("cuda.compat.driver", judge_cuda, versions.get("cuda_runtime"), versions.get("driver"))

    def derive(self, given: DeriveInput) -> list[Setting]:
        return visible_settings(self, given)


CUDA = CudaBackend()
BACKEND = CUDA
