"""`docker buildx bake`, the way xcforge drives it: one command per builder, its plain progress
split by target, written in full to `dist/logs/<target>.log`, and shown as it goes.

BuildKit names every step of a multi-target bake `[<target> <platform> <stage> n/m]` (the target
only when there are several, the platform only when a target has several): that is how a line is
given to its target and platform. On a terminal each target/platform gets one live line (current
step, elapsed time, cache hits); elsewhere (CI, pipes) every line is printed with a `[target]`
prefix, inside the CI log group of the bake.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from xcforge.console import echo, output_lock, say
from xcforge.shell import DOCKER

# buildx/registry failures worth another try (the registry client has its own list for pushes).
RETRYABLE = re.compile(
    r"(connection refused|connection reset|i/o timeout|tls handshake timeout|EOF|"
    r"\b50[0234]\b|\b429\b|too many requests|bad gateway|service unavailable|no such host)",
    re.IGNORECASE,
)
_VERTEX = re.compile(r"^#(\d+) (?:\[(?P<name>[^\]]*)\]|(?P<word>CACHED|DONE|ERROR|CANCELED)\b)?")


@functools.cache
def is_context(builder: str) -> bool:
    """A docker context (its engine's own BuildKit, the docker driver) rather than a buildx builder:
    buildx only drives those through `docker --context NAME buildx ...`."""
    proc = subprocess.run([DOCKER, "context", "inspect", builder], capture_output=True, check=False)
    return proc.returncode == 0


def buildx_base(builder: str | None) -> list[str]:
    """`docker buildx`, pointed at the builder: a context by --context, a builder by --builder."""
    if builder and is_context(builder):
        return [DOCKER, "--context", builder, "buildx"]
    return [DOCKER, "buildx"]


def builder_flags(builder: str | None) -> list[str]:
    return ["--builder", builder] if builder and not is_context(builder) else []


@dataclass(frozen=True)
class BuilderNode:
    """One node of a buildx builder, as `buildx inspect` lists it."""

    name: str
    declared: tuple[str, ...]  # platforms given with `buildx create --platform` (starred): buildx sends those here
    native: str | None  # the worker's own platform: the first it reports itself (the rest is QEMU)

    def builds(self, platform: str) -> bool:
        return platform in self.declared


def parse_nodes(inspect_output: str) -> tuple[BuilderNode, ...]:
    nodes: list[BuilderNode] = []
    name = None
    in_nodes = False
    for line in inspect_output.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "Nodes" and not value:
            in_nodes = True
        elif key == "Name" and (in_nodes or not nodes):
            name = value
        elif key == "Platforms" and name is not None:
            listed = [p.strip() for p in value.split(",") if p.strip()]
            declared = tuple(p.rstrip("*") for p in listed if p.endswith("*"))
            # buildx lists the declared platforms first, then the worker's own list, native first
            # (`linux/amd64/v2` is still amd64: a variant is a level of the same CPU, not QEMU).
            own = ["/".join(p.split("/")[:2]) for p in listed if not p.endswith("*")]
            nodes.append(BuilderNode(name, declared, own[0] if own else (declared[0] if declared else None)))
            name = None
    return tuple(nodes)


def _inspect_nodes(builder: str | None) -> tuple[BuilderNode, ...]:
    cmd = [*buildx_base(builder), "inspect", *builder_flags(builder)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return parse_nodes(proc.stdout) if proc.returncode == 0 else ()


_NODES: dict[str | None, Future[tuple[BuilderNode, ...]]] = {}
_NODES_LOCK = threading.Lock()


def prefetch_nodes(builders: Iterable[str | None]) -> None:
    """Ask the builders for their nodes now, in the background: the answer (0.1 s of `buildx
    inspect` each) is needed to plan a multi-node builder's bakes and for the report, and is
    ready by then."""
    for builder in builders:
        _nodes_future(builder)


def _nodes_future(builder: str | None) -> Future[tuple[BuilderNode, ...]]:
    with _NODES_LOCK:
        if builder not in _NODES:
            future: Future[tuple[BuilderNode, ...]] = Future()
            _NODES[builder] = future
            threading.Thread(target=_resolve, args=(future, builder), name="buildx-inspect", daemon=True).start()
        return _NODES[builder]


def _resolve(future: Future[tuple[BuilderNode, ...]], builder: str | None) -> None:
    try:
        future.set_result(_inspect_nodes(builder))
    except Exception as exc:  # handed to whoever asks, in its thread
        future.set_exception(exc)


def builder_nodes(builder: str | None) -> tuple[BuilderNode, ...]:
    """The nodes of a builder (None: the current one), each with the platforms it was declared
    for and its own platform: how bakes are split on a multi-node builder and how the report
    tells native from emulated builds."""
    return _nodes_future(builder).result()


def node_for(nodes: tuple[BuilderNode, ...], platform: str) -> BuilderNode | None:
    """The node buildx sends a platform to: the one declared for it, else the one whose own
    platform it is, else (one node) that node, emulating."""
    return (
        next((n for n in nodes if n.builds(platform)), None)
        or next((n for n in nodes if n.native == platform), None)
        or (nodes[0] if len(nodes) == 1 else None)
    )


def check_builder(builder: str, platforms: Iterable[str]) -> str | None:
    """None when the builder exists and answers; else the reason, in buildx's words."""
    if (
        not is_context(builder)
        and subprocess.run([DOCKER, "buildx", "inspect", builder], capture_output=True, check=False).returncode
    ):
        return "no such buildx builder or docker context (see `docker buildx ls`)"
    cmd = [*buildx_base(builder), "inspect", "--bootstrap", *builder_flags(builder)]
    echo(cmd)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return "it did not answer within 60 s"
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
        return lines[-1].removeprefix("ERROR: ")
    status = re.findall(r"^Status:\s*(\S+)", proc.stdout, re.M)
    if status and all(s != "running" for s in status):
        return f"its nodes are {', '.join(status)}"
    return None


def bake_command(files: Iterable[Path], targets: Iterable[str], *, builder: str | None, metadata: Path) -> list[str]:
    cmd = [*buildx_base(builder), "bake", "--progress=plain", *builder_flags(builder)]
    for path in files:
        cmd += ["--file", str(path)]
    cmd += ["--metadata-file", str(metadata), *targets]
    return cmd


@dataclass
class TargetProgress:
    """What the bake said about one target."""

    name: str
    steps: set[str] = field(default_factory=set)
    cached: set[str] = field(default_factory=set)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=60))
    failed: bool = False
    # Per platform ("" when the target has one): the step it is on.
    current: dict[str, str] = field(default_factory=dict)

    @property
    def cache_hits(self) -> int:
        return len(self.cached & self.steps)


@dataclass
class BakeRun:
    returncode: int
    targets: dict[str, TargetProgress]
    tail: list[str]
    duration_s: float

    def failed_targets(self) -> list[str]:
        return [name for name, progress in self.targets.items() if progress.failed]


class _Logs:
    """dist/logs/<target>.log, one per target, the whole BuildKit log of its steps."""

    def __init__(self, log_dir: Path, targets: list[str]) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.files: dict[str, IO[str]] = {t: open(log_dir / f"{t}.log", "a", encoding="utf-8") for t in targets}  # noqa: SIM115

    def write(self, targets: Iterable[str], line: str) -> None:
        for name in targets:
            self.files[name].write(line + "\n")

    def close(self) -> None:
        for fh in self.files.values():
            fh.close()


class _LiveLines:
    """One line per target/platform, redrawn in place by rich.live (a terminal only).

    The lines are fed by the plain progress parser: buildx 0.13 (Debian 12's) has no structured
    progress (`--progress=rawjson` arrived in 0.15), and plain is also what CI logs and
    dist/logs/ keep, so one parser serves all three."""

    def __init__(self, stream: IO[str], progress: dict[str, TargetProgress], started: float) -> None:
        from rich.console import Console
        from rich.live import Live

        self.progress, self.started, self.last = progress, started, 0.0
        width = None if stream.isatty() else 120
        self.console = Console(file=stream, force_terminal=True, width=width, highlight=False)
        # No auto refresh thread: a frame is drawn when a line arrives (at most 4 per second).
        self.live = Live(console=self.console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self.live.start()

    def rows(self) -> list[str]:
        elapsed = time.monotonic() - self.started
        out = []
        for name, p in self.progress.items():
            for platform, step in sorted(p.current.items()) or [("", "waiting")]:
                head = f"[{name}{' ' + platform if platform else ''}] {elapsed:6.0f}s  {p.cache_hits:3} cached  "
                out.append(head + step)
        return out

    def draw(self, force: bool = False) -> None:
        from rich.text import Text

        now = time.monotonic()
        if not force and now - self.last < 0.25:
            return
        self.last = now
        frame = Text("\n".join(self.rows()), no_wrap=True, overflow="ellipsis")
        with output_lock:
            self.live.update(frame, refresh=True)

    def close(self) -> None:
        self.draw(force=True)
        self.live.stop()


class Cancellation:
    """Stops the bakes that worker threads run once the main thread is interrupted.

    Python raises KeyboardInterrupt only in the main thread; a bake on a worker thread would run
    on (and a failed push be retried) while the main thread waits for it. `cancel()` terminates
    every bake process this object tracks, and a lane that sees `cancelled` starts no other."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            for proc in self._running:
                proc.terminate()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True at once if cancelled meanwhile."""
        return self._event.wait(seconds)

    def track(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.add(proc)
            if self._event.is_set():
                proc.terminate()

    def forget(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.discard(proc)


def live_wanted(stream: IO[str] | None = None) -> bool:
    stream = stream or sys.stderr
    return stream.isatty() and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"


def run_bake(
    cmd: list[str],
    *,
    targets: list[str],
    cwd: Path,
    env: dict[str, str],
    log_dir: Path,
    live: bool | None = None,
    spawned: threading.Event | None = None,
    cancellation: Cancellation | None = None,
) -> BakeRun:
    """Run one bake; give each output line to its target (log file, progress, live line).
    `spawned` is set once the bake process runs; `cancellation` can terminate it from another thread."""
    echo(cmd)
    started = time.monotonic()
    progress = {name: TargetProgress(name) for name in targets}
    owners: dict[str, tuple[str | None, str]] = {}  # vertex id → (target or None, platform)
    tail: deque[str] = deque(maxlen=80)
    logs = _Logs(log_dir, targets)
    live_lines = _LiveLines(sys.stderr, progress, started) if (live if live is not None else live_wanted()) else None
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    if cancellation:
        cancellation.track(proc)
    if spawned:
        spawned.set()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            match = _VERTEX.match(line)
            owner, platform = _owner(match, owners, progress)
            if owner is None and len(progress) == 1:
                owner = targets[0]  # a lone target owns every line, step or not
            logs.write([owner] if owner else list(progress), line)
            if owner:
                _account(progress[owner], line, match, platform)
            if live_lines:
                live_lines.draw()
            elif line.strip():
                say(f"[{owner or ','.join(targets)}] {line}")
        proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        if cancellation:
            cancellation.forget(proc)
        logs.close()
        if live_lines:
            live_lines.close()
    if proc.returncode != 0 and not any(p.failed for p in progress.values()):
        for p in progress.values():  # a failure no step owns (bad definition, builder gone): everyone's
            p.failed = True
            p.tail.extend(list(tail)[-15:])
    return BakeRun(proc.returncode, progress, list(tail), time.monotonic() - started)


def _owner(
    match: re.Match[str] | None, owners: dict[str, tuple[str | None, str]], progress: dict[str, TargetProgress]
) -> tuple[str | None, str]:
    """(target, platform) of a step line from its `[target platform stage n/m]` name (remembered
    by step number for the step's later lines); None for lines no step owns."""
    if not match:
        return None, ""
    vertex = match.group(1)
    name = match.group("name")
    if name is not None:
        words = name.split()
        target = words.pop(0) if words and words[0] in progress and len(progress) > 1 else None
        platform = words[0] if words and words[0].startswith("linux/") else ""
        owners.setdefault(vertex, (target, platform))
    return owners.get(vertex, (None, ""))


def _account(progress: TargetProgress, line: str, match: re.Match[str] | None, platform: str) -> None:
    progress.tail.append(line)
    if not match:
        progress.failed |= line.startswith("ERROR:")
        return
    vertex, name, word = match.group(1), match.group("name"), match.group("word")
    if name is not None:
        if "internal" not in name.split() and not name.startswith("context "):
            progress.steps.add(vertex)
            words = [w for w in name.split() if w != progress.name and not w.startswith("linux/")]
            progress.current[platform] = f"[{' '.join(words)}] {line.split('] ', 1)[-1]}"[:200]
    elif word == "CACHED":
        progress.cached.add(vertex)
    elif word == "ERROR" or line.split(" ", 2)[-1].startswith("ERROR:"):
        progress.failed = True


def failure_reason(tail: Iterable[str]) -> str:
    tail = list(tail)
    for line in reversed(tail):
        if line.startswith("ERROR:") or "error:" in line.lower():
            line = re.sub(r"^#\d+ ([\d.]+ )?", "", line).strip()
            # BuildKit quotes the whole RUN script; its first words and the cause are what matter.
            line = re.sub(
                r'process "(.{0,60}).*" (did not complete successfully: .*)$', r'process "\1…" \2', line, flags=re.S
            )
            return line[:400]
    return (tail[-1] if tail else "no output")[:400]


__all__ = [
    "RETRYABLE",
    "BakeRun",
    "BuilderNode",
    "Cancellation",
    "TargetProgress",
    "bake_command",
    "builder_nodes",
    "check_builder",
    "failure_reason",
    "node_for",
    "parse_nodes",
    "prefetch_nodes",
    "run_bake",
    "say",
]
