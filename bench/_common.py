"""Shared by the benchmark scripts: timing statistics, the machine, waiting for a quiet machine, output.

Each benchmark prints Markdown tables and writes `bench/results/<name>.json` with the same numbers,
the machine they were measured on and, per measurement phase, whether something else was running.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
if str(REPO) not in sys.path:  # `python bench/<name>.py` puts bench/ first on the path, not the checkout
    sys.path.insert(0, str(REPO))

from xcforge.report.results import format_bytes  # noqa: E402  (after sys.path)

fmt_bytes = format_bytes  # the benchmarks' name for it

BUSY_PATTERN = "pytest|buildx build|buildx bake"
REGISTRY = os.environ.get("XCFORGE_BENCH_REGISTRY", "127.0.0.1:5000")
BENCH_PREFIX = f"{REGISTRY}/xcforge-bench"  # the only repositories the benchmarks write


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: with few samples p95 is simply the largest one."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p95, min, max and mean of a list of durations (seconds), plus the count."""
    return {
        "n": len(seconds),
        "median_s": statistics.median(seconds),
        "p95_s": percentile(seconds, 95),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "mean_s": statistics.fmean(seconds),
    }


def time_calls(fn: Callable[[], object], n: int, *, warmup: int = 1) -> list[float]:
    """Call fn() n times (after `warmup` untimed calls); each call's duration in seconds."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def fmt_time(seconds: float | None) -> str:
    """Human units: µs / ms / s."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the machine


def _out(cmd: Sequence[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return "not installed"
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if (proc.stdout or proc.stderr).strip() else ""


def machine() -> dict[str, Any]:
    cpu, mem_kib, os_name = "unknown", 0, "unknown"
    with contextlib.suppress(OSError):
        models = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
        cpu = models[0].split(":", 1)[1].strip() if models else cpu
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    with contextlib.suppress(OSError):
        names = [line for line in Path("/etc/os-release").read_text().splitlines() if line.startswith("PRETTY_NAME=")]
        os_name = names[0].split("=", 1)[1].strip('"') if names else os_name
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "os": os_name,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "docker": _out(["docker", "version", "--format", "{{.Server.Version}}"]),
        "buildx": _out(["docker", "buildx", "version"]),
        "openssl": _out(["openssl", "version"]),
        "load_average": os.getloadavg(),
    }


# --------------------------------------------------------------------------- a quiet machine


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _lineage(pid: int) -> set[int]:
    """pid and its ancestors."""
    pids = set()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        pid = _parent(pid)
    return pids


def busy_processes() -> list[str]:
    """Other people's test runs and builds: matches of BUSY_PATTERN that are neither this process,
    its ancestors, nor its descendants (our own `build.py` runs `docker buildx build`)."""
    proc = subprocess.run(["pgrep", "-af", BUSY_PATTERN], capture_output=True, text=True, check=False)
    me = os.getpid()
    ancestors = _lineage(me)
    busy = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        pid_text, _, command = line.partition(" ")
        # a `flock LOCK pytest …` waiting for the machine's lock does no work; once it holds the
        # lock, its child (the pytest itself) matches on its own
        if command.split(None, 1)[0].rsplit("/", 1)[-1] == "flock":
            continue
        pid = int(pid_text)
        if pid in ancestors or me in _lineage(pid):
            continue
        busy.append(line[:160])
    return busy


def wait_until_idle(phase: str, *, poll_s: float = 30, limit_s: float = 20 * 60) -> dict[str, Any]:
    """Wait until no other test run or build is going (`pgrep -f 'pytest|buildx build'`), up to limit_s.

    Returns what to record with the phase's numbers: how long we waited and, when the machine never
    became quiet, `under_load: true` with what was running (the numbers are then marked as such).
    """
    started = time.monotonic()
    first = busy_processes()
    busy = first
    while busy and time.monotonic() - started < limit_s:
        log(f"{phase}: waiting for a quiet machine ({len(busy)} busy: {busy[0][:100]})")
        time.sleep(poll_s)
        busy = busy_processes()
    waited = time.monotonic() - started
    state = {
        "phase": phase,
        "waited_s": round(waited, 1),
        "under_load": bool(busy),
        "busy": busy[:5],
        "load_average_at_start": os.getloadavg(),
        "started": now_iso(),
    }
    if busy:
        log(f"{phase}: still busy after {waited / 60:.0f} min; measuring anyway (marked 'measured under load')")
    return state


@contextlib.contextmanager
def measuring(
    phases: list[dict[str, Any]], name: str, *, limit_s: float, watch_s: float = 5
) -> Iterator[dict[str, Any]]:
    """One measurement phase: wait for a quiet machine, then watch it while measuring.

    Anything matching BUSY_PATTERN that shows up *during* the phase (polled every watch_s) is
    recorded as `busy_during` and marks the phase `under_load` as well.
    """
    state = wait_until_idle(name, limit_s=limit_s)
    phases.append(state)
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(watch_s):
            seen.update(busy_processes())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        yield state
    finally:
        stop.set()
        watcher.join(timeout=30)
        seen.update(busy_processes())
        state["duration_s"] = round(time.monotonic() - started, 1)
        state["busy_during"] = sorted(seen)[:5]
        state["load_average_at_end"] = os.getloadavg()
        if seen:
            state["under_load"] = True
            log(f"{name}: something else ran during the measurement; marked 'measured under load'")


# --------------------------------------------------------------------------- output


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_revision() -> str:
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return proc.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_results(name: str, doc: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    full = {"benchmark": name, "measured": now_iso(), "revision": git_revision(), "machine": machine(), **doc}
    path.write_text(json.dumps(full, indent=2, ensure_ascii=False) + "\n")
    log(f"results: {path.relative_to(REPO)}")
    return path


def load_note(phases: Sequence[dict[str, Any]]) -> str:
    loaded = [p["phase"] for p in phases if p.get("under_load")]
    if not loaded:
        return "measured on a quiet machine"
    return f"**measured under load** (phases: {', '.join(map(str, loaded))})"
