"""The backends, by the name XCFORGE_BACKEND uses."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping

from xcforge_engine.backends.base import Backend, Finding, Setting
from xcforge_engine.errors import UsageError
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.presets import PresetBook, PresetSizing, load_presets

# Modules of this package that are not backends.
_NOT_BACKENDS = frozenset({"base"})


def discover() -> dict[str, Backend]:
    """Every module of this package (but base.py) is one backend: it names itself in `BACKEND`.

    Adding hardware is adding a module here; nothing else lists the backends. They are ordered by
    their `rank` (accelerators first, then the CPU engines), then by name."""
    found: list[Backend] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_BACKENDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        backend = getattr(module, "BACKEND", None)
        if backend is None or backend.name != info.name:
            raise ImportError(f"{module.__name__} must set BACKEND to the backend named {info.name!r}")
        found.append(backend)
    return {b.name: b for b in sorted(found, key=lambda b: (b.rank, b.name))}


BACKENDS: dict[str, Backend] = discover()
CPU = BACKENDS["cpu"]

# A control node that only exists when the vendor's devices were passed in (backends with a probe).
_PROBES = tuple((b.name, b.probe) for b in BACKENDS.values() if b.probe)

__all__ = ["BACKENDS", "Backend", "Finding", "Setting", "discover", "preset_book", "resolve_backend"]


def preset_book() -> PresetBook:
    """The packaged presets with a column for every backend here: a backend without one in
    data/presets.json declares its sizing (`presets`, a PresetSizing) in its module."""
    declared: dict[str, PresetSizing | None] = {
        name: getattr(backend, "presets", None) for name, backend in BACKENDS.items()
    }
    return load_presets(declared)


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
