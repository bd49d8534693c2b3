"""Serve benchmark: the cpu image with the tiny random Llama model, on loopback.

    .venv/bin/python bench/bench_serve.py [--image REPO@sha256:...] [--starts 2] [--single 16]
                                          [--requests 32] [--rounds 10] [--concurrency 16] [--max-tokens 64]

Without --image, the cpu image is built (or found unchanged by its fingerprint) with
`build.py --target cpu --site sites/standin.yaml --registry 127.0.0.1:5000/xcforge-bench --push
--platform linux/amd64 --dist TMP` — several minutes the first time (real vLLM install).

Measures, using xcforge.smoke.checks's own `tiny_model`, `served` and `wait_healthy` (the serve smoke
test's container: a 127.0.0.1 port, the target's --shm-size, VLLM_CPU_KVCACHE_SPACE=1 (GiB of
KV cache), --max-model-len 512):

1. `docker pull` of the image from the local registry (next to no work when it is already present:
   with the containerd image store even `docker image rm` keeps the blobs, so only a first pull
   measures the transfer);
2. cold start: `docker run` → `/health` 200, --starts times (the image's files are in the page
   cache after the first). wait_healthy polls every 2 s, so this is up to 2 s late;
   the log line "Application startup complete" (docker logs --timestamps) gives the finer number;
3. throughput through the `openai` client, after a warm-up (one streamed request, one burst):
   one request at a time (--single completions, then --single streamed ones: time to first
   token; streaming sends every token as its own event through the API server), and
   --rounds rounds of --requests completions with --concurrency in flight (aggregate tokens/s per
   round, latency per request). Every request asks for exactly --max-tokens (ignore_eos);
4. memory from `docker stats`: idle after warm-up, peak during the concurrent run, and after it.

Every container is removed (served() does `docker rm -f`). Prints Markdown tables; writes
bench/results/bench_serve.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import (
    BENCH_PREFIX,
    REPO,
    fmt_bytes,
    fmt_time,
    load_note,
    log,
    markdown_table,
    measuring,
    percentile,
    summarize,
    write_results,
)

from ocicore import registry
from xcforge.bake.docker_env import check_docker
from xcforge.config.matrix import load_matrix
from xcforge.smoke.checks import ServedContainer, SmokeSubject, served, tiny_model, wait_healthy

if TYPE_CHECKING:
    from openai import OpenAI

PROMPT = "The quick brown fox jumps over the lazy dog. Tell me a story about a container:"
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # what the serve smoke test gives the cpu image
_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "kB": 1000, "MB": 1000**2, "GB": 1000**3}


# --------------------------------------------------------------------------- the image


def build_cpu_image(work: Path) -> str:
    dist = work / "dist"
    cmd = [sys.executable, str(REPO / "build.py"), "--target", "cpu", "--site", str(REPO / "sites" / "standin.yaml")]
    cmd += ["--registry", BENCH_PREFIX, "--push", "--platform", "linux/amd64", "--dist", str(dist)]
    log("building the cpu image (minutes the first time): " + " ".join(cmd[1:]))
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"cpu build failed (exit {proc.returncode}):\n" + "\n".join(proc.stderr.splitlines()[-20:]))
    record = next(r for r in json.loads((dist / "report.json").read_text())["results"] if r["target"] == "cpu")
    return f"{record['image_repo']}@{record['digest']}"


def pull(ref: str, platform: str) -> dict[str, Any]:
    present = subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode == 0
    started = time.perf_counter()
    subprocess.run(["docker", "pull", "--platform", platform, "--quiet", ref], check=True, capture_output=True)
    took = time.perf_counter() - started
    repo, digest = ref.split("@", 1)
    compressed = registry.registry_platforms(repo, digest).get(platform, (None, None))[1]
    # With the containerd image store, `docker images` SIZE is the unpacked snapshot plus the content.
    listed = subprocess.run(
        ["docker", "images", "--digests", "--format", "{{.Digest}} {{.Size}}", repo], capture_output=True, text=True
    ).stdout.split("\n")
    unpacked = next((line.split(" ", 1)[1] for line in listed if line.startswith(digest + " ")), None)
    return {"already_present": present, "pull_s": took, "compressed_bytes": compressed, "docker_images_size": unpacked}


# --------------------------------------------------------------------------- container facts


def _parse_time(text: str) -> datetime:
    # Docker writes nanoseconds; Python reads at most microseconds.
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", text.strip()).replace("Z", "+00:00"))


def startup_from_logs(name: str) -> float | None:
    """Seconds from the container's start to uvicorn's "Application startup complete", from the logs."""
    started = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.StartedAt}}", name], capture_output=True, text=True
    ).stdout
    logs = subprocess.run(["docker", "logs", "--timestamps", name], capture_output=True, text=True)
    for line in (logs.stdout + logs.stderr).splitlines():
        if "Application startup complete" in line:
            return (_parse_time(line.split(" ", 1)[0]) - _parse_time(started)).total_seconds()
    return None


def _bytes(text: str) -> float | None:
    match = re.match(r"\s*([\d.]+)\s*([A-Za-z]+)", text)
    if not match or match.group(2) not in _UNITS:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)]


def docker_stats(name: str) -> dict[str, float | None]:
    out = subprocess.run(
        ["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}|{{.CPUPerc}}", name],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if "|" not in out:
        return {"mem_bytes": None, "cpu_percent": None}
    mem, cpu = out.split("|", 1)
    return {"mem_bytes": _bytes(mem.split("/")[0]), "cpu_percent": float(cpu.rstrip("%") or 0)}


def stats_samples(name: str, count: int) -> list[dict[str, float | None]]:
    return [docker_stats(name) for _ in range(count)]  # each `docker stats --no-stream` takes ~1-2 s


class StatsSampler(threading.Thread):
    """Samples `docker stats` in the background until stopped (peak memory under load)."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True)
        self.name_, self._stop_event = name, threading.Event()
        self.samples: list[dict[str, float | None]] = []

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append(docker_stats(self.name_))

    def stop(self) -> list[dict[str, float | None]]:
        self._stop_event.set()
        self.join(timeout=30)
        return self.samples


# --------------------------------------------------------------------------- load


def one_request(client: OpenAI, max_tokens: int, *, stream: bool) -> dict[str, Any]:
    """One completion of exactly max_tokens; time to first token too when streamed."""
    started = time.perf_counter()
    args: dict[str, Any] = {"model": "tiny", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}
    if not stream:
        out = client.completions.create(**args, extra_body={"ignore_eos": True})
        tokens = out.usage.completion_tokens if out.usage else 0
        return {"ttft_s": None, "total_s": time.perf_counter() - started, "tokens": tokens}
    first, tokens = None, 0
    chunks = client.completions.create(
        **args, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}
    )
    for chunk in chunks:
        if first is None and chunk.choices and chunk.choices[0].text:
            first = time.perf_counter() - started
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return {"ttft_s": first, "total_s": time.perf_counter() - started, "tokens": tokens}


def single_stream(client: OpenAI, runs: int, max_tokens: int, *, stream: bool) -> dict[str, Any]:
    """`runs` requests one after the other: one user."""
    requests = [one_request(client, max_tokens, stream=stream) for _ in range(runs)]
    tokens = sum(r["tokens"] for r in requests)
    total = sum(r["total_s"] for r in requests)
    ttfts = [r["ttft_s"] for r in requests if r["ttft_s"] is not None]
    return {
        "streamed": stream,
        "requests": runs,
        "max_tokens": max_tokens,
        "completion_tokens": tokens,
        "tokens_per_s": tokens / total,
        "ttft": summarize(ttfts) if ttfts else None,
        "latency": summarize([r["total_s"] for r in requests]),
        "per_request": requests,
    }


def concurrent_load(client: OpenAI, count: int, concurrency: int, max_tokens: int, rounds: int) -> dict[str, Any]:
    """`rounds` times: `count` requests, `concurrency` in flight; tokens/s per round, latency per request."""

    def one(_: int) -> tuple[float, int]:
        started = time.perf_counter()
        out = client.completions.create(
            model="tiny", prompt=PROMPT, max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True}
        )
        return time.perf_counter() - started, out.usage.completion_tokens if out.usage else 0

    per_round, latencies, tokens_total = [], [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for _ in range(rounds):
            started = time.perf_counter()
            results = list(pool.map(one, range(count)))
            wall = time.perf_counter() - started
            tokens = sum(t for _, t in results)
            tokens_total += tokens
            latencies += [s for s, _ in results]
            per_round.append({"wall_s": wall, "completion_tokens": tokens, "tokens_per_s": tokens / wall})
    rates = [r["tokens_per_s"] for r in per_round]
    return {
        "rounds": rounds,
        "requests_per_round": count,
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "completion_tokens": tokens_total,
        "tokens_per_s_median": statistics.median(rates),
        "tokens_per_s_min": min(rates),
        "tokens_per_s_max": max(rates),
        "round_wall": summarize([r["wall_s"] for r in per_round]),
        "latency": summarize(latencies),
        "per_round": per_round,
    }


def warm_up(client: OpenAI, concurrency: int, max_tokens: int) -> None:
    """First requests pay one-off costs (new batch shapes): one streamed request and one full burst."""
    single_stream(client, 1, max_tokens, stream=True)
    concurrent_load(client, concurrency, concurrency, max_tokens, 1)


# --------------------------------------------------------------------------- main


def mem_summary(samples: list[dict[str, float | None]]) -> dict[str, float | None]:
    mem = [s["mem_bytes"] for s in samples if s["mem_bytes"] is not None]
    cpu = [s["cpu_percent"] for s in samples if s["cpu_percent"] is not None]
    return {
        "samples": len(samples),
        "mem_median_bytes": statistics.median(mem) if mem else None,
        "mem_max_bytes": max(mem) if mem else None,
        "cpu_percent_median": statistics.median(cpu) if cpu else None,
        "cpu_percent_p95": percentile(cpu, 95) if cpu else None,
    }


def measure_load(
    container: ServedContainer, args: argparse.Namespace, phases: list[dict[str, Any]], wait_s: float
) -> dict[str, Any]:
    from openai import OpenAI

    load: dict[str, Any] = {}
    client = OpenAI(base_url=f"http://127.0.0.1:{container.port}/v1", api_key="unused", timeout=300)
    with measuring(phases, "warm-up and idle memory", limit_s=wait_s):
        warm_up(client, args.concurrency, args.max_tokens)
        load["idle"] = mem_summary(stats_samples(container.name, 5))
    # Both ways: streaming sends every token through the API server as its own event, which on a
    # small machine competes with the engine for the same cores.
    with measuring(phases, "single stream, not streamed", limit_s=wait_s):
        load["single"] = single_stream(client, args.single, args.max_tokens, stream=False)
    with measuring(phases, "single stream, streamed", limit_s=wait_s):
        load["single_streamed"] = single_stream(client, args.single, args.max_tokens, stream=True)
    rates = load["single"]["tokens_per_s"], load["single_streamed"]["tokens_per_s"]
    log(f"one at a time: {rates[0]:.0f} tokens/s, {rates[1]:.0f} streamed")
    with measuring(phases, "concurrent", limit_s=wait_s):
        sampler = StatsSampler(container.name)
        sampler.start()
        try:
            load["concurrent"] = concurrent_load(client, args.requests, args.concurrency, args.max_tokens, args.rounds)
        finally:
            load["during_load"] = mem_summary(sampler.stop())
    log(f"concurrent: {load['concurrent']['tokens_per_s_median']:.0f} tokens/s (median of rounds)")
    with measuring(phases, "memory after load", limit_s=wait_s):
        load["after_load"] = mem_summary(stats_samples(container.name, 5))
    return load


def run(args: argparse.Namespace, phases: list[dict[str, Any]]) -> dict[str, Any]:
    wait_s = args.wait_minutes * 60
    with tempfile.TemporaryDirectory(prefix="xcforge-bench-serve-") as tmp:
        image = args.image
        if not image:
            with measuring(phases, "build cpu image", limit_s=wait_s):
                image = build_cpu_image(Path(tmp))
        log(f"image: {image}")
        native = check_docker().native_platform
        target = load_matrix(REPO / "matrix.yaml").target("cpu")
        subject = SmokeSubject(target=target, ref=image, platforms=(native,), native_platform=native)

        with measuring(phases, "pull", limit_s=wait_s):
            pulled = pull(image, native)
        log(f"pull: {pulled['pull_s']:.1f} s (already present: {pulled['already_present']})")

        starts, load = [], {}
        with tiny_model() as model:
            for i in range(args.starts):
                # The ExitStack keeps the container past its start phase; served() removes it on leaving.
                with contextlib.ExitStack() as stack:
                    with measuring(phases, f"start {i + 1}", limit_s=wait_s):
                        began = time.perf_counter()
                        container = stack.enter_context(served(subject, model, extra_env=CPU_ENV))
                        ok, detail = wait_healthy(container)
                        health_s = time.perf_counter() - began
                    if not ok:
                        raise SystemExit(f"the cpu image did not become healthy: {detail}")
                    from_logs = startup_from_logs(container.name)
                    starts.append({"health_200_s": health_s, "startup_complete_from_logs_s": from_logs})
                    log(f"start {i + 1}: /health 200 after {health_s:.1f} s (logs: {from_logs})")
                    if i == args.starts - 1:  # the last start also carries the load
                        load = measure_load(container, args, phases, wait_s)
    return {"image": image, "pull": pulled, "starts": starts, **load}


def render(res: dict[str, Any]) -> str:
    pulled = res["pull"]
    start_rows = [
        [
            i + 1,
            "first" if i == 0 else "again",
            fmt_time(s["health_200_s"]),
            fmt_time(s["startup_complete_from_logs_s"]),
        ]
        for i, s in enumerate(res["starts"])
    ]
    starts = markdown_table(
        ["start", "kind", "docker run → /health 200", "start → 'startup complete' (logs)"], start_rows
    )
    conc = res["concurrent"]

    def single_row(key: str, label: str) -> list[object]:
        single = res[key]
        ttft = single["ttft"]
        return [
            label,
            single["requests"],
            single["completion_tokens"],
            f"{single['tokens_per_s']:.0f}",
            fmt_time(single["latency"]["median_s"]),
            fmt_time(single["latency"]["p95_s"]),
            fmt_time(ttft["median_s"]) if ttft else "-",
            fmt_time(ttft["p95_s"]) if ttft else "-",
        ]

    throughput = markdown_table(
        ["load", "requests", "tokens", "tokens/s", "latency median", "latency p95", "TTFT median", "TTFT p95"],
        [
            single_row("single", "1 at a time, not streamed"),
            single_row("single_streamed", "1 at a time, streamed"),
            [
                f"{conc['concurrency']} in flight, {conc['rounds']} rounds of {conc['requests_per_round']}",
                conc["rounds"] * conc["requests_per_round"],
                conc["completion_tokens"],
                f"{conc['tokens_per_s_median']:.0f} ({conc['tokens_per_s_min']:.0f}-{conc['tokens_per_s_max']:.0f})",
                fmt_time(conc["latency"]["median_s"]),
                fmt_time(conc["latency"]["p95_s"]),
                "-",
                "-",
            ],
        ],
    )
    memory = markdown_table(
        ["when", "docker stats samples", "memory median", "memory max", "CPU % median"],
        [
            [
                label,
                res[key]["samples"],
                fmt_bytes(res[key]["mem_median_bytes"]),
                fmt_bytes(res[key]["mem_max_bytes"]),
                f"{res[key]['cpu_percent_median']:.0f}" if res[key]["cpu_percent_median"] is not None else "-",
            ]
            for key, label in (
                ("idle", "idle, after warm-up"),
                ("during_load", "during the concurrent run"),
                ("after_load", "after the load"),
            )
        ],
    )
    head = (
        f"image `{res['image']}`: {fmt_bytes(pulled['compressed_bytes'])} compressed, "
        f"{pulled['docker_images_size']} in `docker images`; `docker pull` {fmt_time(pulled['pull_s'])} "
        f"({'already present' if pulled['already_present'] else 'from the registry'})"
    )
    note = "tokens/s of the concurrent run: median over rounds (range)."
    return f"{head}\n\n{starts}\n\n{throughput}\n\n{note}\n\n{memory}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", help="REPO@sha256:... of a cpu image (default: build it under xcforge-bench)")
    parser.add_argument("--starts", type=int, default=2, help="container starts to time (the last carries the load)")
    parser.add_argument("--single", type=int, default=16, help="sequential streamed requests")
    parser.add_argument("--requests", type=int, default=32, help="requests per round of the concurrent run")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the concurrent run")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight in the concurrent run")
    parser.add_argument("--max-tokens", type=int, default=64, help="completion tokens per request (exact)")
    parser.add_argument("--wait-minutes", type=float, default=20, help="wait this long for a quiet machine (0: no)")
    args = parser.parse_args(argv)
    if args.image and "@sha256:" not in args.image:
        parser.error("--image takes REPO@sha256:..., not a tag")

    phases: list[dict[str, Any]] = []
    result = run(args, phases)
    print(f"## bench_serve ({load_note(phases)})\n\n{render(result)}\n")
    write_results("bench_serve", {"parameters": vars(args), "phases": phases, "results": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
