"""Prove the chosen --dtype on this CPU before vLLM starts, in a throw-away subprocess.

A flag in /proc/cpuinfo is not proof: a VM can advertise AMX/avx512_bf16 (seen: a Sapphire Rapids
guest) whose use then kills vLLM's worker with SIGILL on the first request. So serve runs a short
probe in the dtype it derived (a linear layer and causal attention through torch's CPU kernels,
where oneDNN picks AMX/BF16 paths) and, when that dies or fails, falls back to the next dtype with
the reason logged. An operator's own --dtype is never probed or changed.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

PROBE = r"""
import sys, torch
dtype = getattr(torch, sys.argv[1])
torch.manual_seed(0)
x = torch.randn(64, 512).to(dtype)
w = torch.randn(512, 512).to(dtype)
y = torch.nn.functional.linear(x, w)
q = torch.randn(1, 4, 32, 64).to(dtype)
a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
assert bool(torch.isfinite(y.float()).all()) and bool(torch.isfinite(a.float()).all()), "non-finite result"
print("ok")
"""

# What each dtype falls back to when its probe fails (the next one vLLM's CPU backend accepts).
FALLBACK = {"bfloat16": ("float16", "float32"), "float16": ("float32",), "float32": ()}
DEFAULT_TIMEOUT = 300.0  # import torch alone takes tens of seconds under QEMU emulation


@dataclass(frozen=True)
class ProbeResult:
    dtype: str
    ok: bool
    detail: str  # "ok", "killed by SIGILL", "exit 1: RuntimeError: ...", "timed out after 300 s"


Runner = Callable[[str], ProbeResult]


def subprocess_runner(python: str, env: Mapping[str, str], timeout: float = DEFAULT_TIMEOUT) -> Runner:
    def run(dtype: str) -> ProbeResult:
        try:
            proc = subprocess.run(
                [python, "-c", PROBE, dtype], capture_output=True, text=True, env=dict(env), timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return ProbeResult(dtype, False, f"timed out after {timeout:g} s")
        except OSError as exc:
            return ProbeResult(dtype, False, f"cannot start {python}: {exc.strerror or exc}")
        if proc.returncode == 0 and proc.stdout.strip().endswith("ok"):
            return ProbeResult(dtype, True, "ok")
        if proc.returncode < 0:
            try:
                name = signal.Signals(-proc.returncode).name
            except ValueError:
                name = f"signal {-proc.returncode}"
            return ProbeResult(dtype, False, f"killed by {name}")
        last = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "no message")
        return ProbeResult(dtype, False, f"exit {proc.returncode}: {last.strip()[:200]}")

    return run


def choose(derived: str, allowed: Sequence[str], run: Runner) -> tuple[str | None, list[ProbeResult]]:
    """The first of `derived` and its fallbacks (those in `allowed`) whose probe passes."""
    tried: list[ProbeResult] = []
    for dtype in (derived, *FALLBACK.get(derived, ())):
        if dtype != derived and dtype not in allowed:
            continue
        result = run(dtype)
        tried.append(result)
        if result.ok:
            return dtype, tried
    return None, tried


# --------------------------------------------------------------------------- thread binding

AFFINITY_PROBE = "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); print('ok')"


def affinity_runner(python: str, env: Mapping[str, str], timeout: float = 60.0) -> Callable[[list[int]], str]:
    """Pin a throw-away process to the CPUs the binding names: "ok", or why the kernel refused."""

    def run(cpus: list[int]) -> str:
        try:
            proc = subprocess.run(
                [python, "-S", "-c", AFFINITY_PROBE, ",".join(map(str, cpus))],
                capture_output=True, text=True, env=dict(env), timeout=timeout,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"probe did not run ({exc})"
        if proc.returncode == 0 and proc.stdout.strip() == "ok":
            return "ok"
        last = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), f"exit {proc.returncode}")
        return last.strip()[:200]

    return run
