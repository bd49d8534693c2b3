"""llama.cpp's OpenAI-compatible server (llama-server) for CPUs vLLM cannot run on.

vLLM's CPU wheels need ARMv8.2 (LSE atomics, dotprod, FP16); Phytium FT-2000+/64 and D2000 are
ARMv8.0/8.1. The feiteng image carries llama-server with one CPU backend per CPU generation (from
generic armv8-a up; cpu_variants.py names the one that loads) and serves GGUF files (INT4 Q4_K_M,
INT8 Q8_0) behind this same launcher: same port, /health, presets, doctor.

Operators keep the vLLM-style flags the other images take; the few with a llama-server twin are
translated (`--served-model-name` → `--alias`, `--max-model-len` → `--ctx-size`, `--max-num-seqs`
→ `--parallel`), vLLM-only ones are dropped with a note, and everything else goes through as
llama-server's own flag. Threads follow the container's CPU limits, the context its memory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from xcforge_engine.args import flag_key, get_value
from xcforge_engine.backends.base import OK, WARNING, DeriveInput, Finding, Setting, image_part_finding
from xcforge_engine.errors import UsageError
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.limits import GIB, gib, read_limits
from xcforge_engine.software import Software

SERVER = "llama-server"
# vLLM flag → llama-server flag (same meaning).
TRANSLATED = {"served-model-name": "--alias", "max-model-len": "--ctx-size", "max-num-seqs": "--parallel"}
# vLLM flags with no llama-server meaning: dropped, each named in the log.
DROPPED = {"dtype", "enforce-eager", "trust-remote-code", "kv-cache-memory-bytes", "tensor-parallel-size",
           "quantization", "compilation-config", "gpu-memory-utilization"}  # fmt: skip
DEFAULT_CTX = 4096
SMALL_CTX = 2048  # below 2 GiB of memory budget
# Bytes of KV cache per token per billion parameters, f16 K and V: a conservative rule for the small
# Llama/Qwen/GLM models the presets cover (e.g. Qwen2.5-0.5B: ~12 KiB/token).
KV_BYTES_PER_TOKEN_PER_B = 64 * 1024
# Transparent huge pages for what llama-server allocates with glibc's malloc: on x86 the CPU backend
# repacks Q4_0 (and IQ4_NL, Q4_K) weights out of the mmap'd file into malloc'd memory, which token
# generation streams through once per token; on 4 KiB pages that is a TLB miss every 4 KiB. glibc
# (>= 2.35; Debian 12 has 2.36) madvises its mmap'd chunks MADV_HUGEPAGE with this tunable, which
# the kernel honours when THP is "madvise" or "always". Measured on the build VM (Sapphire Rapids,
# 2 vCPUs, THP madvise): Q4_0 generation 29.7 → 40.3 tokens/s for the image's layout (backend DL,
# zen4 variant), 32.7 → 34.4 for a -march=native one (docs/benchmarks.md §8).
TUNABLES_VAR = "GLIBC_TUNABLES"
MALLOC_HUGEPAGES = "glibc.malloc.hugetlb=1"
THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def gguf_in(host: Host, model: str) -> tuple[str | None, str]:
    """The GGUF file a --model names: the file itself, or the only .gguf in a directory."""
    if host.is_file(model):
        return model, ""
    if host.is_dir(model):
        files = sorted(p for p in host.glob(f"{model.rstrip('/')}/*.gguf") if not p.endswith(".part"))
        if len(files) == 1:
            return files[0], f"the only .gguf in {model}"
        if not files:
            return None, (
                f"{model} holds no .gguf file: llama.cpp serves GGUF (convert safetensors with "
                "/opt/llama.cpp/convert_hf_to_gguf.py, or serve them with the cpu image)"
            )
        names = ", ".join(os.path.basename(f) for f in files)
        return None, f"{model} holds {len(files)} .gguf files ({names}): pass --model {files[0]}"
    return None, f"model path {model} does not exist in the container: mount it with -v /path/on/host:{model}:ro"


class LlamaCppBackend:
    name = "llamacpp"
    rank = 90
    probe = None
    distributions: tuple[str, ...] = ()
    title = "CPU (llama.cpp server, GGUF)"
    device_word = "CPU"
    hint = ""
    visible_env: tuple[str, ...] = ()
    model_format = "gguf"
    # llama-server needs a second interrupt to stop during a generation (supervise.py).
    stop_grace = 5.0
    # One process, threads only: no worker processes exchange tensors through /dev/shm (vLLM's need).
    # The GGUF file is memory-mapped instead, so what matters is the container's memory limit.
    shm_minimum: int | None = None
    shm_note = (
        "llama-server does not use /dev/shm (one process, no IPC); the GGUF file is memory-mapped, so it "
        "and the KV cache must fit in the container's memory limit"
    )

    def device_nodes(self, host: Host) -> list[str]:
        return []

    def command(self, python: str) -> list[str]:
        return [SERVER]

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]:
        where = shutil.which(SERVER, path=env.get("PATH")) if host.root.as_posix() == "/" else None
        present = where is not None or host.is_file(f"/usr/local/bin/{SERVER}")
        return [image_part_finding(image, "llamacpp.server", present, SERVER, where or f"/usr/local/bin/{SERVER}")]

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]:
        return {}

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]:
        return []

    def adapt(self, args: list[str], host: Host) -> tuple[list[str], list[str]]:
        """vLLM-style arguments → llama-server's; (argv, notes). The model must be a GGUF file."""
        out: list[str] = []
        notes: list[str] = []
        i = 0
        while i < len(args):
            token = args[i]
            key = flag_key(token)
            has_inline = "=" in token
            value = token.split("=", 1)[1] if has_inline else (args[i + 1] if i + 1 < len(args) else None)
            takes_value = key is not None and not has_inline and value is not None and not value.startswith("--")
            step = 2 if takes_value else 1
            if key == "model":
                gguf, why = gguf_in(host, value or "")
                if gguf is None:
                    raise UsageError(why)
                if why:
                    notes.append(f"--model {gguf} ({why})")
                out += ["--model", gguf]
            elif key in TRANSLATED:
                out += [TRANSLATED[key], value or ""]
                notes.append(f"--{key} {value} → {TRANSLATED[key]} {value} (llama-server's name)")
            elif key in DROPPED:
                dropped = f"{token} {value}" if takes_value else token
                notes.append(f"{dropped} dropped: llama-server has no such setting")
            else:
                out += args[i : i + step]
            i += step
        return out, notes

    def derive(self, given: DeriveInput) -> list[Setting]:
        limits = read_limits(given.host)
        settings: list[Setting] = []
        given_keys = given.given
        if "host" not in given_keys:
            settings.append(Setting("--host", "0.0.0.0", "llama-server listens on 127.0.0.1 by default", kind="arg"))
        if "port" not in given_keys and not given.env.get("XCFORGE_PORT"):
            settings.append(Setting("--port", "8000", "the port every xcforge image serves on", kind="arg"))
        if "threads" not in given_keys and "t" not in given_keys:
            cpus, why = limits.cpu.usable()
            settings.append(Setting("--threads", str(len(cpus)), why, kind="arg"))
        if not {"ctx-size", "max-model-len", "c"} & given_keys:
            budget, budget_why = limits.memory.budget()
            ctx = DEFAULT_CTX if budget is None or budget >= 2 * GIB else SMALL_CTX
            why = f"{budget_why}; {'≥' if ctx == DEFAULT_CTX else '<'} 2 GiB → {ctx} tokens"
            warning = ""
            preset = given.preset
            if budget is not None and preset is not None:
                need = int(preset.params_b * 1e9 * (0.6 if preset.quantization else 2)) + ctx * int(
                    preset.params_b * KV_BYTES_PER_TOKEN_PER_B
                )
                if need > budget:
                    warning = f"{preset.name} needs about {gib(need)} (weights + KV cache); the budget is {gib(budget)}"
            settings.append(Setting("--ctx-size", str(ctx), why, kind="arg", warning=warning))
        if "metrics" not in given_keys:
            settings.append(Setting("--metrics", "", "Prometheus metrics on /metrics, as vLLM serves them", kind="arg"))
        if "jinja" not in given_keys and "chat-template" not in given_keys:
            settings.append(
                Setting(
                    "--jinja", "", "the chat template stored in the GGUF file renders /v1/chat/completions", kind="arg"
                )
            )
        settings.append(self._huge_pages(given.host, given.env))
        if get_value(given.args, "parallel") is None and "max-num-seqs" not in given_keys:
            settings.append(
                Setting("--parallel", "1", "one slot: small CPU servers serve one request at a time best", kind="arg")
            )
        return settings

    @staticmethod
    def _huge_pages(host: Host, env: Mapping[str, str]) -> Setting:
        if TUNABLES_VAR in env:
            return Setting(TUNABLES_VAR, env[TUNABLES_VAR], "", kept=True)
        text = host.read_text(THP_MODE) or ""
        mode = text[text.find("[") + 1 : text.find("]")] if "[" in text else ""  # "always [madvise] never"
        if mode in ("always", "madvise"):
            why = f"transparent huge pages are {mode!r} here: the repacked weights on 2 MiB pages"
            return Setting(TUNABLES_VAR, MALLOC_HUGEPAGES, why)
        return Setting(
            TUNABLES_VAR,
            None,
            f"transparent huge pages are {mode or 'not offered'} here ({THP_MODE}): weights stay on 4 KiB pages;"
            " `madvise` on the host makes token generation faster",
        )


LLAMACPP = LlamaCppBackend()

__all__ = ["LLAMACPP", "OK", "WARNING"]
BACKEND = LLAMACPP
