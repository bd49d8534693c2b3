"""zstd benchmark: a pushed image and its zstd variant side by side (issue 21).

    .venv/bin/python bench/bench_zstd.py [--target cpu] [--dist dist] [--rounds 2] [--publish]
                                         [--cold-engine | --sizes-only] [--redo-loaded 2]

Reads the target's record from dist/report.json, written by a pushed build
(`build.py --target cpu --registry 127.0.0.1:5000/xcforge --push`, with `--zstd` or followed by
`build.py zstd --target cpu`: the record then carries the variant; `--publish` runs `build.py
zstd` first). Nothing is built here. Measures:

1. size: per platform, the compressed bytes of config + layers of the gzip image and of the zstd
   variant, read from the registry's manifests;
2. pull → /health, on this machine's platform, for each variant, --rounds times in alternating
   order (gzip first, then zstd first, ...): `docker pull --platform P REPO@DIGEST` is timed, then
   `docker run` → `/health` 200 with xcforge.smoke.checks's own `served` and `wait_healthy`, as
   bench_serve.py does (the tiny random model; wait_healthy polls every 2 s, so that part is up to
   2 s late). A round during which something else ran is measured again (--redo-loaded times in
   all; the loaded runs stay in the JSON as `discarded_under_load`). Where:
   - with --cold-engine (as root), in a private engine started by scripts/cold-engine.sh and
     stopped at the end, whatever happens: its own dockerd and its own managed containerd (the
     machine's socket hidden by a private mount namespace), the classic overlay2 store, its own
     data root, its own network namespace (xcforge-cold, 10.232.0.0/24, bridge 172.30.0.1/24;
     127.0.0.1:5000 there is forwarded to the registry). `docker system prune -af` there before
     each pull, so every layer is fetched, decompressed and unpacked: a cold pull. Just before it,
     untimed, the variant's blobs are read from the registry once, so the registry serves them
     from the page cache whatever this VM's memory reclaim did meanwhile (read_blobs). docker commands
     and the SDK reach it through DOCKER_HOST; /health is polled from a thread inside its network
     namespace, where the container's port is published. Afterwards the machine's docker0 and
     engine are checked (`host_after_stop` in the JSON; exit 1 if either is gone);
   - without it, in this machine's engine, after removing every local image of the repository
     (`docker image rm -f`, then `docker image prune -f`). Not a cold pull: the containerd image
     store keeps the layers' unpacked snapshots (keyed by the uncompressed diff_ids, shared by the
     gzip and zstd variants and by the build's own image) and skips the fetch;
   `docker_images_before` in the JSON says what was there, `engine` where it ran, `digests` the
   index and platform manifest pulled;
3. fetch + decompress, in-process: every layer of this platform fetched from the registry and
   decompressed (what a cold pull must do before unpacking);
4. ratios zstd / gzip: size per platform, the pull, and pull → /health.

Every container is removed (served() does `docker rm -f`). Prints Markdown tables; writes
`zstd.json` in bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform as platform_module
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from _common import (
    REPO,
    fmt_bytes,
    fmt_time,
    load_note,
    log,
    markdown_table,
    measuring,
    write_results,
)

from ocicore import registry
from xcforge.config.matrix import load_matrix
from xcforge.console import echo
from xcforge.shell import DOCKER
from xcforge.smoke import containers
from xcforge.smoke.checks import SmokeSubject, model_for, served, tiny_model, wait_healthy

UPSTREAM = {  # vLLM's own figures for its gzip and zstd images (issue 21)
    "size_gb": {"gzip": 8.66, "zstd": 7.00},
    "pull_to_first_answer_s": {"gzip": 144.5, "zstd": 118.0},
}


# --------------------------------------------------------------------------- the images


def recorded(target: str, dist: Path, publish: bool) -> dict[str, Any]:
    """The target's record in dist/report.json, with its zstd variant (published first if asked)."""
    if publish:
        cmd = [sys.executable, str(REPO / "build.py"), "zstd", "--target", target, "--dist", str(dist)]
        log("publishing the zstd variant: " + " ".join(cmd[1:]))
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(
                f"build.py zstd failed (exit {proc.returncode}):\n" + "\n".join(proc.stderr.splitlines()[-20:])
            )
    path = dist / "report.json"
    if not path.exists():
        raise SystemExit(
            f"{path}: no report; build and push first: build.py --target {target} --registry R --push --zstd"
        )
    results: list[dict[str, Any]] = json.loads(path.read_text())["results"]
    record = next((r for r in results if r["target"] == target), None)
    if record is None or not record.get("digest") or record.get("output") != "push":
        raise SystemExit(
            f"{path}: no pushed build of {target}; run build.py --target {target} --registry R --push --zstd"
        )
    if not any(v.get("compression") == "zstd" for v in record.get("variants", [])):
        raise SystemExit(
            f"{path}: {target} has no zstd variant; run build.py zstd --target {target} (or pass --publish)"
        )
    return record


def images(record: dict[str, Any]) -> dict[str, str]:
    """compression → REPO@DIGEST."""
    zstd = next(v for v in record["variants"] if v.get("compression") == "zstd")
    return {"gzip": f"{record['image_repo']}@{record['digest']}", "zstd": f"{record['image_repo']}@{zstd['digest']}"}


def sizes(refs: dict[str, str]) -> dict[str, dict[str, int]]:
    """platform → compression → compressed bytes (config + layers), from the registry."""
    out: dict[str, dict[str, int]] = {}
    for compression, ref in refs.items():
        repo, digest = ref.split("@", 1)
        for platform, (_digest, size) in registry.registry_platforms(repo, digest).items():
            out.setdefault(platform, {})[compression] = size
    return out


# --------------------------------------------------------------------------- fetch + decompress


class _Inflate:
    """A writable sink that decompresses what it is given and counts the plain bytes."""

    def __init__(self, compression: str) -> None:
        import zlib

        import zstandard

        self.plain = 0
        # One of the two: zstd (one frame per worker chunk), or gzip framing.
        zstd = compression == "zstd"
        self._zstd = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True) if zstd else None
        self._gzip = None if zstd else zlib.decompressobj(16 + zlib.MAX_WBITS)

    def write(self, chunk: bytes) -> int:
        if self._gzip is not None:
            # Bounded output per call: zlib's unbounded decompress grows one buffer to the whole
            # chunk's inflated size by reallocation, 20x slower here than `gzip -dc` (136 s vs 7 s).
            data = chunk
            while data:
                self.plain += len(self._gzip.decompress(data, 1 << 20))
                data = self._gzip.unconsumed_tail
        elif self._zstd is not None:
            self.plain += len(self._zstd.decompress(chunk))
        return len(chunk)


def fetch_and_decompress(refs: dict[str, str], platform: str, rounds: int) -> dict[str, Any]:
    """What a cold pull must do before unpacking, measured in-process: every layer of one platform
    fetched from the registry (digest checked) and decompressed, gzip by zlib, zstd by zstandard.

    This machine's engine cannot time a cold `docker pull`: the containerd store keeps the layers'
    unpacked snapshots (keyed by diff_id, shared by both variants and by the build's own loaded
    image) and skips the fetch (well under a second for either variant); --cold-engine can."""
    out: dict[str, list[float]] = {"gzip": [], "zstd": []}
    plain: dict[str, int] = {}
    for n in range(rounds):
        for compression in ("gzip", "zstd") if n % 2 == 0 else ("zstd", "gzip"):
            repo, digest = refs[compression].split("@", 1)
            ref = registry.Reference.parse(f"{repo}@{digest}")
            client = registry.RegistryClient(ref.registry)
            platforms = registry.registry_platforms(repo, digest)
            manifest = registry.raw(f"{repo}@{platforms[platform][0]}")
            started, inflated = time.perf_counter(), 0
            for layer in manifest["layers"]:
                sink = _Inflate(compression)  # one stream per layer, as the engine unpacks them
                client.download_blob(ref.repository, layer["digest"], sink)
                inflated += sink.plain
            out[compression].append(time.perf_counter() - started)
            plain[compression] = inflated
            log(f"round {n + 1} {compression}: fetch + decompress {out[compression][-1]:.1f} s")
    if plain["gzip"] != plain["zstd"]:
        raise SystemExit(f"the variants' layers decompress to different sizes: {plain}")
    median = {c: statistics.median(v) for c, v in out.items()}
    return {"platform": platform, "runs": out, "median": median, "plain_bytes": plain["gzip"],
            "ratio": median["zstd"] / median["gzip"]}  # fmt: skip


# --------------------------------------------------------------------------- the cold engine

_T = TypeVar("_T")
COLD_ENGINE = REPO / "scripts" / "cold-engine.sh"
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class ColdEngine:
    """A private dockerd started by scripts/cold-engine.sh; `setup` is what its start reported."""

    setup: dict[str, Any]

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """fn(*args) in a thread that joined the engine's network namespace (setns is per thread):
        there 127.0.0.1 is the namespace's, where the engine publishes container ports. Docker's
        unix socket is a path, so the SDK reaches the engine from there as well."""
        out: dict[str, Any] = {}

        def inside() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(f"/var/run/netns/{self.setup['netns']}") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        errno = ctypes.get_errno()
                        raise OSError(errno, f"setns {self.setup['netns']}: {os.strerror(errno)}")
                out["value"] = fn(*args)
            except BaseException as exc:  # re-raised in the calling thread
                out["error"] = exc

        thread = threading.Thread(target=inside, name="in-netns", daemon=True)
        thread.start()
        thread.join()
        if "error" in out:
            error: BaseException = out["error"]
            raise error
        value: _T = out["value"]
        return value


def _engine_script(action: str) -> subprocess.CompletedProcess[str]:
    argv = ["bash", str(COLD_ENGINE), action]
    echo(argv)
    return subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)  # progress on stderr


def _sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that the engine is stopped on the way out


@contextlib.contextmanager
def cold_engine() -> Iterator[ColdEngine]:
    """scripts/cold-engine.sh start; docker commands and the SDK pointed at it (DOCKER_HOST) until
    the end, then scripts/cold-engine.sh stop, whatever happened (exception, Ctrl-C, SIGTERM)."""
    if os.geteuid() != 0:
        raise SystemExit("--cold-engine needs root: it starts a dockerd in its own network namespace")
    saved = {key: os.environ.get(key) for key in ("DOCKER_HOST", "DOCKER_CONTEXT")}
    previous_handler = signal.signal(signal.SIGTERM, _sigterm)
    try:
        started = _engine_script("start")
        if started.returncode != 0:
            raise SystemExit(f"{COLD_ENGINE.name} start failed (exit {started.returncode}); see its output above")
        engine = ColdEngine(setup=json.loads(started.stdout.strip().splitlines()[-1]))
        os.environ["DOCKER_HOST"] = engine.setup["docker_host"]
        os.environ.pop("DOCKER_CONTEXT", None)
        containers.client.cache_clear()  # the SDK client is made once, from the environment
        log(f"cold engine: {engine.setup['docker_host']} in network namespace {engine.setup['netns']}")
        yield engine
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        containers.client.cache_clear()
        stopped = _engine_script("stop")
        signal.signal(signal.SIGTERM, previous_handler)
        if stopped.returncode != 0:
            log(f"{COLD_ENGINE.name} stop failed (exit {stopped.returncode}); run it again by hand")


def host_after_stop() -> dict[str, Any]:
    """What the engine must not have broken: this machine's docker0 and its own engine."""
    docker0 = subprocess.run(["ip", "link", "show", "docker0"], capture_output=True, check=False).returncode == 0
    info = _docker("info", "--format", "{{.Driver}} {{.ServerVersion}}")
    state = {"docker0": docker0, "main_engine": info.stdout.strip() if info.returncode == 0 else None}
    if not docker0 or info.returncode != 0:
        log(f"AFTER THE COLD ENGINE: docker0 present {docker0}, main engine: {info.stderr.strip() or 'ok'}")
    return state


# --------------------------------------------------------------------------- pull → /health


def _docker(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check)


def forget_local(repo: str) -> list[str]:
    """Remove every local image of `repo` (both variants), then dangling ones; what was there before."""
    listed = _docker("images", "--digests", "--format", "{{.Repository}}:{{.Tag}} {{.Digest}} {{.ID}}", repo).stdout
    before = [line for line in listed.splitlines() if line.strip()]
    ids = sorted({line.split()[-1] for line in before})
    if ids:
        _docker("image", "rm", "-f", *ids)
    _docker("image", "prune", "-f")
    return before


def forget_all() -> list[str]:
    """The cold engine's reset: `docker system prune -af` (every image, layer, container, network
    and build cache: everything there is the benchmark's own); what was there before."""
    listed = _docker("images", "-a", "--digests", "--format", "{{.Repository}}:{{.Tag}} {{.Digest}} {{.ID}}").stdout
    echo([DOCKER, "system", "prune", "-af"])
    _docker("system", "prune", "-af", check=True)
    left = _docker("images", "-aq").stdout.split()
    if left:
        raise SystemExit(f"the cold engine still has images after prune: {left}")
    return [line for line in listed.splitlines() if line.strip()]


class _Discard:
    def write(self, chunk: bytes) -> int:
        return len(chunk)


def read_blobs(ref: str, platform: str) -> float:
    """Every layer of ref's platform read from the registry and thrown away; how long it took.

    Done before each timed cold pull, so that the registry serves from the page cache, as a real
    registry serves hot blobs. This VM's DAMON pages out memory idle for a minute, and in a run
    without this step pulls took 52-56 s or 24-34 s whichever the variant, probably depending on
    whether the variant's blob files were still cached (docs/benchmarks.md, section 4)."""
    repo, digest = ref.split("@", 1)
    parsed = registry.Reference.parse(ref)
    client = registry.RegistryClient(parsed.registry)
    manifest = registry.raw(f"{repo}@{registry.registry_platforms(repo, digest)[platform][0]}")
    started = time.perf_counter()
    for layer in manifest["layers"]:
        client.download_blob(parsed.repository, layer["digest"], _Discard())
    return time.perf_counter() - started


def _disk_kib() -> tuple[int, int]:
    """KiB read from and written to block devices so far, machine-wide (/proc/vmstat)."""
    counters = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return int(counters["pgpgin"]), int(counters["pgpgout"])


def pull_and_serve(
    ref: str, subject: SmokeSubject, model: Path, env: dict[str, str], engine: ColdEngine | None = None
) -> dict[str, Any]:
    repo = ref.split("@", 1)[0]
    before = forget_all() if engine else forget_local(repo)
    present = _docker("image", "inspect", ref).returncode == 0
    warm_s = read_blobs(ref, subject.native_platform) if engine else None
    pull = [DOCKER, "pull", "--platform", subject.native_platform, "--quiet", ref]
    echo(pull)
    disk_before = _disk_kib()
    started = time.perf_counter()
    proc = subprocess.run(pull, capture_output=True, text=True, check=False)
    pulled = time.perf_counter()
    disk_after = _disk_kib()
    if proc.returncode != 0:
        raise SystemExit(f"docker pull {ref} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    with served(subject, model, extra_env=env) as container:
        ok, detail = engine.call(wait_healthy, container) if engine else wait_healthy(container)
    healthy = time.perf_counter()
    if not ok:
        raise SystemExit(f"{ref} did not become healthy: {detail}")
    image_id = _docker("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
    return {
        "docker_images_before": before,
        "present_after_rm": present,
        "image_id": image_id,
        "registry_blobs_read_before_s": warm_s,
        "disk_during_pull_mib": {  # machine-wide: a pull reads little and writes its unpacked layers
            "read": (disk_after[0] - disk_before[0]) / 1024,
            "written": (disk_after[1] - disk_before[1]) / 1024,
        },
        "pull_s": pulled - started,
        "run_to_health_s": healthy - pulled,
        "pull_to_health_s": healthy - started,
    }


def measure(
    refs: dict[str, str],
    target_name: str,
    rounds: int,
    phases: list[dict[str, Any]],
    wait_s: float,
    engine: ColdEngine | None = None,
    redo_loaded: int = 0,
) -> dict[str, Any]:
    """--rounds rounds of pull → /health per variant, in alternating order. A round during which
    something else ran (a phase under load) is measured again, up to redo_loaded times in all; the
    loaded runs are kept in `discarded_under_load` and their phases marked `discarded`."""
    # The engine's own platform (not check_docker(): that one is the build's, and refuses an engine
    # without the containerd image store, as the cold engine is).
    version = _docker("version", "--format", "{{.Server.Os}}/{{.Server.Arch}}", check=True)
    native = version.stdout.strip()
    target = load_matrix(REPO / "matrix.yaml").target(target_name)
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"} if target.backend == "cpu" else {}  # what the serve smoke test gives it
    runs: dict[str, list[dict[str, Any]]] = {"gzip": [], "zstd": []}
    discarded: list[dict[str, Any]] = []
    i = 0
    with tiny_model() as tiny:
        while i < rounds:
            order = ("gzip", "zstd") if i % 2 == 0 else ("zstd", "gzip")
            measured: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (compression, run, its phase)
            for compression in order:
                subject = SmokeSubject(
                    target=target, ref=refs[compression], platforms=(native,), native_platform=native
                )
                with contextlib.ExitStack() as stack:
                    model = stack.enter_context(model_for(subject, tiny, native))
                    with measuring(phases, f"round {i + 1}: {compression}", limit_s=wait_s) as phase:
                        run = pull_and_serve(refs[compression], subject, model, env, engine)
                run["round"] = i + 1
                measured.append((compression, run, phase))
                log(
                    f"round {i + 1} {compression}: pull {run['pull_s']:.1f} s, run → /health "
                    f"{run['run_to_health_s']:.1f} s, total {run['pull_to_health_s']:.1f} s"
                )
            if redo_loaded > 0 and any(phase["under_load"] for _, _, phase in measured):
                redo_loaded -= 1
                log(f"round {i + 1} was measured under load: discarded, measuring it again")
                for compression, run, phase in measured:
                    phase["discarded"] = True
                    discarded.append({"compression": compression, **run})
                continue
            for compression, run, _ in measured:
                runs[compression].append(run)
            i += 1
    if engine:
        forget_all()
    else:
        forget_local(refs["gzip"].split("@", 1)[0])
    median = {
        c: {k: statistics.median(r[k] for r in rs) for k in ("pull_s", "run_to_health_s", "pull_to_health_s")}
        for c, rs in runs.items()
    }
    pulled = {}
    for compression, ref in refs.items():
        repo, digest = ref.split("@", 1)
        pulled[compression] = {"index": digest, native: registry.registry_platforms(repo, digest)[native][0]}
    out: dict[str, Any] = {
        "platform": native,
        "runs": runs,
        "median": median,
        "digests": pulled,
        "discarded_under_load": discarded,
    }
    if engine:
        out["engine"] = {"kind": "cold", **engine.setup, "reset_before_each_pull": "docker system prune -af"}
    else:
        out["engine"] = {"kind": "this machine's", "reset_before_each_pull": "docker image rm -f, image prune -f"}
    return out


def measure_cold(
    refs: dict[str, str], target_name: str, rounds: int, phases: list[dict[str, Any]], wait_s: float, redo_loaded: int
) -> dict[str, Any]:
    """measure() against a private engine (scripts/cold-engine.sh), stopped afterwards; then a check
    that this machine's docker0 and engine are still there."""
    with cold_engine() as engine:
        timing = measure(refs, target_name, rounds, phases, wait_s, engine, redo_loaded)
    timing["engine"]["host_after_stop"] = host_after_stop()
    return timing


# --------------------------------------------------------------------------- output


def _ratio(zstd: float | None, gzip: float | None) -> float | None:
    return zstd / gzip if zstd and gzip else None


def ratios(size: dict[str, dict[str, int]], timing: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"size": {p: _ratio(s.get("zstd"), s.get("gzip")) for p, s in size.items()}}
    if timing:
        median = timing["median"]
        for key in ("pull_s", "run_to_health_s", "pull_to_health_s"):
            out[key] = _ratio(median["zstd"][key], median["gzip"][key])
    return out


def render(res: dict[str, Any]) -> str:
    size, ratio = res["size"], res["ratios"]
    size_rows = [
        [p, fmt_bytes(s.get("gzip")), fmt_bytes(s.get("zstd")), f"{ratio['size'][p]:.3f}" if ratio["size"][p] else "-"]
        for p, s in sorted(size.items())
    ]
    up = UPSTREAM
    size_rows.append(["vLLM upstream", f"{up['size_gb']['gzip']} GB", f"{up['size_gb']['zstd']} GB",
                      f"{up['size_gb']['zstd'] / up['size_gb']['gzip']:.3f}"])  # fmt: skip
    parts = [markdown_table(["platform", "gzip", "zstd", "zstd / gzip"], size_rows)]
    timing = res.get("timing")
    if timing:
        median = timing["median"]
        rows = [
            [
                label,
                fmt_time(median["gzip"][key]),
                fmt_time(median["zstd"][key]),
                f"{ratio[key]:.3f}" if ratio.get(key) else "-",
            ]
            for key, label in (
                ("pull_s", "`docker pull`"),
                ("run_to_health_s", "`docker run` → /health 200"),
                ("pull_to_health_s", "pull → /health 200"),
            )
        ]
        pull_up = up["pull_to_first_answer_s"]
        rows.append(["vLLM upstream: pull → first answer", f"{pull_up['gzip']} s", f"{pull_up['zstd']} s",
                     f"{pull_up['zstd'] / pull_up['gzip']:.3f}"])  # fmt: skip
        rounds = len(timing["runs"]["gzip"])
        engine = timing.get("engine", {})
        where = (
            f"a cold engine ({engine['storage_driver']}, its own containerd, network namespace {engine['netns']}; "
            "`docker system prune -af` before each pull)"
            if engine.get("kind") == "cold"
            else "this machine's engine (local images of the repository removed before each pull)"
        )
        redone = len(timing.get("discarded_under_load", [])) // 2
        redone_note = f" ({redone} round(s) measured under load, discarded and measured again)" if redone else ""
        parts.append(f"{timing['platform']}, {where}, median of {rounds} round(s){redone_note}:\n\n" + markdown_table(
            ["", "gzip", "zstd", "zstd / gzip"], rows))  # fmt: skip
    fetch = res.get("fetch_decompress")
    if fetch:
        median = fetch["median"]
        parts.append(
            f"{fetch['platform']}, every layer fetched from the registry and decompressed "
            f"({fmt_bytes(fetch['plain_bytes'])} of tar), median of {len(fetch['runs']['gzip'])}:\n\n"
            + markdown_table(
                ["", "gzip", "zstd", "zstd / gzip"],
                [["fetch + decompress", fmt_time(median["gzip"]), fmt_time(median["zstd"]), f"{fetch['ratio']:.3f}"]],
            )
        )
    head = f"`{res['images']['gzip']}` (gzip) and `{res['images']['zstd']}` (zstd)"
    return head + "\n\n" + "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="cpu", help="the target whose pushed build to measure (default cpu)")
    parser.add_argument("--dist", type=Path, default=REPO / "dist", help="directory holding report.json")
    parser.add_argument("--rounds", type=int, default=2, help="pull → /health rounds per variant (order alternates)")
    parser.add_argument("--publish", action="store_true", help="run `build.py zstd --target T` first")
    parser.add_argument("--sizes-only", action="store_true", help="compare sizes only: no pull, no container")
    parser.add_argument(
        "--cold-engine",
        action="store_true",
        help="pull into a private engine (scripts/cold-engine.sh: own containerd, overlay2, own network namespace) "
        "emptied before each pull; as root",
    )
    parser.add_argument("--wait-minutes", type=float, default=20, help="wait this long for a quiet machine (0: no)")
    parser.add_argument(
        "--redo-loaded",
        type=int,
        default=2,
        help="measure a pull → /health round again when something else ran during it, up to N times in all "
        "(default 2; the loaded runs stay in the JSON, discarded)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.cold_engine and args.sizes_only:
        parser.error("--cold-engine measures pulls; --sizes-only measures none")

    phases: list[dict[str, Any]] = []
    record = recorded(args.target, args.dist, args.publish)
    refs = images(record)
    size = sizes(refs)
    timing = None
    if not args.sizes_only:
        if args.cold_engine:
            timing = measure_cold(refs, args.target, args.rounds, phases, args.wait_minutes * 60, args.redo_loaded)
        else:
            timing = measure(refs, args.target, args.rounds, phases, args.wait_minutes * 60, None, args.redo_loaded)
    native = "linux/arm64" if platform_module.machine() in ("aarch64", "arm64") else "linux/amd64"
    with measuring(phases, "fetch + decompress", limit_s=args.wait_minutes * 60):
        fetch = fetch_and_decompress(refs, native, max(args.rounds, 3))
    result = {"target": args.target, "images": refs, "size": size, "fetch_decompress": fetch, "timing": timing,
              "upstream": UPSTREAM}  # fmt: skip
    result["ratios"] = ratios(size, timing)
    kept = [phase for phase in phases if not phase.get("discarded")]  # a redone round's load does not count
    print(f"## bench_zstd ({load_note(kept)})\n\n{render(result)}\n")
    parameters = {**vars(args), "dist": str(args.dist)}
    write_results("zstd", {"parameters": parameters, "phases": phases, "results": result})
    after = (timing or {}).get("engine", {}).get("host_after_stop")
    if after and not (after["docker0"] and after["main_engine"]):
        log(f"this machine's docker0 or engine did not survive the cold engine: {after}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
