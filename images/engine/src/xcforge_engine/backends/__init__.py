"""The backends, by the name XCFORGE_BACKEND uses."""

from __future__ import annotations

from collections.abc import Mapping

from xcforge_engine.backends.ascend import ASCEND
from xcforge_engine.backends.base import Backend, Finding, Setting
from xcforge_engine.backends.cpu import CPU
from xcforge_engine.backends.cuda import CUDA
from xcforge_engine.backends.llamacpp import LLAMACPP
from xcforge_engine.backends.mlu import MLU
from xcforge_engine.errors import UsageError
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts

BACKENDS: dict[str, Backend] = {b.name: b for b in (CUDA, ASCEND, MLU, CPU, LLAMACPP)}

# A control node that only exists when the vendor's devices were passed in.
_PROBES = (("ascend", "/dev/davinci_manager"), ("mlu", "/dev/cambricon_ctl"), ("cuda", "/dev/nvidiactl"))

__all__ = ["BACKENDS", "Backend", "Finding", "Setting", "resolve_backend"]


def resolve_backend(image: ImageFacts, env: Mapping[str, str], host: Host) -> tuple[Backend, str]:
    """The backend to serve with, and why: the image's declared backend (or target), else probing."""
    for field_name in ("backend", "target"):
        value = getattr(image, field_name)
        if not value:
            continue
        name = value.strip().lower()
        if name.startswith("cpu"):
            name = "cpu"
        if name not in BACKENDS:
            raise UsageError(
                f"XCFORGE_{field_name.upper()}={value!r} is not a backend: use one of {', '.join(BACKENDS)}"
            )
        if image.sources.get(field_name) == "env":
            return BACKENDS[name], f"XCFORGE_{field_name.upper()}={value}"
        return BACKENDS[name], f"{field_name} {value} in {image.sources.get(field_name)}"
    for name, probe in _PROBES:
        if host.is_device(probe):
            return BACKENDS[name], f"no XCFORGE_BACKEND; {probe} present"
    return CPU, "no XCFORGE_BACKEND and no accelerator control device"
