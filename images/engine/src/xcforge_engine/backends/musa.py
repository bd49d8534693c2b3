"""x86_64 + Moore Threads MUSA GPUs (MTT S4000/S5000): device nodes by hand, not `--privileged`.

What the vendor documents (MooreThreads/vllm-musa docker/README.md, docs/installation.md; the
torch_musa release image's docker/ubuntu/dockerfile.release): one `/dev/mtgpu.<N>` node per GPU
plus the DRM nodes under `/dev/dri` (card/render), which belong to the `render` group ("only users
in render group can use MooreThreads GPU"); `MUSA_VISIBLE_DEVICES` is "the authoritative device
list used by the plugin", `MTHREADS_VISIBLE_DEVICES` is what the MT container toolkit reads;
`mthreads-gmi` is the host's management tool; the runtime lives under MUSA_HOME=/usr/local/musa.
Moore Threads publishes no driver/runtime compatibility table (only "keep the driver, toolkit, and
wheel versions from the same release family"): doctor reports both versions and judges neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from xcforge_engine.backends.base import (
    ERROR,
    OK,
    WARNING,
    DeriveInput,
    Finding,
    Setting,
    access_finding,
    file_finding,
    image_part_finding,
    numbered_finding,
    visible_settings,
)
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.presets import PresetSizing
from xcforge_engine.software import Software

GMI = "/usr/bin/mthreads-gmi"
GPU_PREFIX = "/dev/mtgpu."
DRI = "/dev/dri"
# The kernel module's own version (MODULE_VERSION of the mtgpu driver), where the driver sets one.
DRIVER_VERSION_FILES = ("/sys/module/mtgpu/version", "/proc/driver/mtgpu/version")


def musa_home(env: Mapping[str, str]) -> str:
    return env.get("MUSA_HOME") or "/usr/local/musa"


def _first_version(text: str) -> str | None:
    match = re.search(r"(\d+\.\d+(?:\.\d+)*)", text)
    return match.group(1) if match else None


def driver_version(host: Host) -> str | None:
    """The host driver's version as its kernel module reports it (e.g. 3.3.5-server → 3.3.5)."""
    for path in DRIVER_VERSION_FILES:
        version = _first_version(host.read_text(path) or "")
        if version:
            return version
    return None


def runtime_version(host: Host, env: Mapping[str, str]) -> str | None:
    """The MUSA runtime in the image: the toolkit's version file, else libmusart.so.<version>."""
    home = musa_home(env)
    for name in ("version.txt", "version.json", "version"):
        version = _first_version(host.read_text(f"{home}/{name}") or "")
        if version:
            return version
    for lib in host.glob(f"{home}/lib/libmusart.so.*"):
        version = _first_version(lib.rsplit("libmusart.so.", 1)[1])
        if version and "." in version:
            return version
    return None


def dri_finding(host: Host) -> Finding:
    """The DRM render nodes MUSA opens beside /dev/mtgpu.N (`--device /dev/dri`)."""
    nodes = [p for p in host.glob(f"{DRI}/renderD*") + host.glob(f"{DRI}/card*") if host.is_device(p)]
    if not nodes:
        return Finding(
            "musa.device.dri",
            ERROR,
            f"no {DRI}/renderD<N> or {DRI}/card<N> device",
            "the MUSA runtime opens the GPU's DRM nodes too",
            (f"--device {DRI}",),
            subject=f"{DRI}/renderD<N>",
        )
    return access_finding(host, "musa.device.dri", nodes) or Finding(
        "musa.device.dri", OK, f"{len(nodes)} present: {', '.join(nodes)}"
    )


class MusaBackend:
    name = "musa"
    rank = 40
    probe = f"{GPU_PREFIX}0"
    distributions: tuple[str, ...] = ("vllm-musa", "torch-musa", "mate", "torchada")
    title = "Moore Threads MUSA"
    device_word = "GPU"
    hint = "one --device /dev/mtgpu.N per GPU and --device /dev/dri; or the MT container toolkit (--runtime mthreads)"
    visible_env = ("MUSA_VISIBLE_DEVICES", "MTHREADS_VISIBLE_DEVICES")
    # MTT S5000: 80 GiB per GPU (HAMi's Moore Threads device support), the memory of the CUDA
    # reference device, so the CUDA column's arguments and tensor-parallel sizes fit.
    presets = PresetSizing(
        like="cuda",
        reference_device="MTT S5000, 80 GB per GPU",
        quantization={
            "gptq": {
                "status": "unverified",
                "args": {"quantization": "gptq", "dtype": "float16"},
                "reason": "GPTQ on vllm-musa depends on the MUSA/MATE release: not verified by xcforge",
            },
            "awq": {
                "status": "unverified",
                "args": {"quantization": "awq", "dtype": "float16"},
                "reason": "AWQ on vllm-musa depends on the MUSA/MATE release: not verified by xcforge",
            },
        },
    )

    def device_nodes(self, host: Host) -> list[str]:
        return host.numbered(GPU_PREFIX)

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]:
        home = musa_home(env)
        return [
            numbered_finding(host, "musa.device.mtgpu", GPU_PREFIX, (f"--device {GPU_PREFIX}0",)),
            dri_finding(host),
            # mthreads-gmi is the host's management tool; the engine serves without it.
            file_finding(
                host,
                "musa.tool.mthreads-gmi",
                GMI,
                (f"-v {GMI}:{GMI}:ro",),
                WARNING,
                "needed for doctor's device details and vendor tooling, not for serving",
            ),
            image_part_finding(image, "musa.runtime", host.is_dir(f"{home}/lib"), "the MUSA runtime", f"{home}/lib"),
        ]

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]:
        return {"driver": driver_version(host), "musa": runtime_version(host, env)}

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]:
        # No table to judge by: Moore Threads publishes none, and its driver and runtime numbers
        # are not one scheme (a 3.3.5-server driver runs the 4.3 runtime), so doctor only reports both.
        return []

    def derive(self, given: DeriveInput) -> list[Setting]:
        return visible_settings(self, given)


MUSA = MusaBackend()
BACKEND = MUSA
