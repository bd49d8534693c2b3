"""Serving side by side (issue 32 item 3): each image against the same engine run natively, in one run.

    .venv/bin/python bench/bench_sidebyside.py llamacpp --native BIN --image NAME=REF [--image NAME=REF ...]
        --model Q4_0=FILE.gguf --model Q8_0=FILE.gguf [--rounds 3] [--cpus 0,1]
    .venv/bin/python bench/bench_sidebyside.py vllm --image REF --venv DIR --model HF_DIR [--rounds 3]

This machine is shared and noisy, so no figure here is an absolute speed: each is a ratio of two
contestants measured in the same round, and every round runs the contestants one after the other in
a rotated order (A B C, B C A, C A B, ...) so that drift hits all of them alike. The tables give the
median ratio over the rounds and its min-max; every request's numbers are in the JSON.

llamacpp: every contestant serves the same GGUF files at once (idle llama-servers take no CPU),
all started afresh in every round (one process's speed depends on where its memory landed),
pinned to the same cores (`--cpuset-cpus` / `taskset -c`) with the same thread count. The images
run the documented way (`docker run ... IMAGE --model /model`), so the launcher picks their flags;
the native llama-server gets the same flags by hand (--threads = the pinned cores, --ctx-size 4096,
--parallel 1, --metrics, --jinja). `--in-container NAME=PATH@IMAGE` runs a llama-server built here
inside a container of IMAGE with the images' settings (cpuset, shm, -p on loopback, those flags):
the same binary in and out of Docker. The numbers are llama-server's own `timings` per request:
pp = prompt_per_second of a 512-token prompt (token ids, cache_prompt false, n_predict 1),
tg = predicted_per_second of 128 generated tokens (ignore_eos).

vllm: one server at a time (each holds its KV cache and spins its OpenMP threads); per round the
image, run as docs/operators.md documents (`docker run --shm-size=4g --security-opt
seccomp=unconfined --cap-add SYS_NICE -v MODEL:/model:ro IMAGE --model /model`, the launcher
deriving the rest), and `vllm serve` of the same wheels in a plain venv, started as vLLM's CPU
installation guide advises. Streamed /v1/completions at concurrency 1 and 16: output tokens/s (all
requests' completion tokens over the wall time), time to first token P50/P99.

Every command is echoed before it runs; containers and processes are removed at the end.
Writes its numbers to bench/results/ (file sidebyside-ENGINE.json).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import http.client
import itertools
import json
import os
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import load_note, log, markdown_table, measuring, percentile, write_results

from xcforge.shell import DOCKER

PP_TOKENS, TG_TOKENS = 512, 128


def echo_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    print("+", shlex.join(cmd), flush=True)
    return subprocess.run(cmd, text=True, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_json(port: int, path: str, body: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {path} on :{port}: HTTP {resp.status}: {data[:300]!r}")
        return json.loads(data)  # type: ignore[no-any-return]
    finally:
        conn.close()


def wait_health(port: int, what: str, limit_s: float, alive: Callable[[], bool], host: str = "127.0.0.1") -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if not alive():
            raise SystemExit(f"{what} exited before /health answered")
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return time.monotonic() - started
        time.sleep(1)
    raise SystemExit(f"{what}: no /health 200 after {limit_s:.0f} s")


# --------------------------------------------------------------------------- contestants


@dataclass
class Server:
    """One running contestant: its port, and how to check and stop it."""

    name: str
    port: int
    alive: Callable[[], bool]
    stop: Callable[[], None]
    argv: list[str]
    facts: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"


def docker_server(
    name: str, image: str, docker_args: list[str], image_args: list[str], *, publish: bool = True
) -> Server:
    """`docker run -d` with port 8000 published on loopback, or (publish=False) reached at the
    container's own address on Docker's bridge."""
    port = free_port()
    container = f"xcforge-side-{name}-{os.getpid()}"
    published = ["-p", f"127.0.0.1:{port}:8000"] if publish else []
    argv = [DOCKER, "run", "-d", "--name", container, *published, *docker_args, image, *image_args]
    proc = echo_run(argv, capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"docker run failed: {proc.stderr.strip()}")

    def alive() -> bool:
        out = subprocess.run([DOCKER, "inspect", "-f", "{{.State.Running}}", container], capture_output=True, text=True)
        return out.stdout.strip() == "true"

    def stop() -> None:
        logs = subprocess.run([DOCKER, "logs", container], capture_output=True, text=True)
        server.facts["log_tail"] = (logs.stdout + logs.stderr).splitlines()[-60:]
        echo_run([DOCKER, "rm", "-f", container], capture_output=True)

    server = Server(name, port, alive, stop, argv, {"container": container})
    if not publish:
        fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        address = subprocess.run([DOCKER, "inspect", "-f", fmt, container], capture_output=True, text=True)
        server.host, server.port = address.stdout.strip(), 8000
    return server


def process_server(name: str, argv: list[str], env: dict[str, str], log_path: Path, port: int) -> Server:
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    print(f"+ {shown} {shlex.join(argv)} > {log_path}", flush=True)
    out = log_path.open("w")
    proc = subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )

    def stop() -> None:
        print(f"+ kill -TERM -{proc.pid}  # {name}", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.close()
        server.facts["log_tail"] = log_path.read_text(errors="replace").splitlines()[-60:]

    server = Server(name, port, lambda: proc.poll() is None, stop, argv, {"env": env, "pid": proc.pid})
    return server


@contextlib.contextmanager
def running(start: Callable[[], Server], limit_s: float) -> Iterator[Server]:
    server = start()
    try:
        health = wait_health(server.port, server.name, limit_s, server.alive, server.host)
        server.facts["health_s"] = round(health, 1)
        log(f"{server.name}: /health 200 after {server.facts['health_s']} s ({server.host}:{server.port})")
        yield server
    finally:
        server.stop()


def ratio_stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt_ratio(stats: dict[str, float]) -> str:
    return f"**{stats['median']:.3f}** ({stats['min']:.3f}–{stats['max']:.3f})"


# --------------------------------------------------------------------------- llama.cpp


def llama_request(port: int, prompt: list[int], n_predict: int) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False, "ignore_eos": True, "temperature": 0}
    out = post_json(port, "/completion", body)
    timings = out["timings"]
    return {
        k: timings[k] for k in ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_per_second")
    }


def llamacpp(args: argparse.Namespace, phases: list[dict[str, Any]]) -> dict[str, Any]:
    cpus = args.cpus
    threads = len(cpus.split(","))
    images = dict(spec.split("=", 1) for spec in args.image)
    builds = dict(spec.split("=", 1) for spec in args.host_build)
    contained = {n: tuple(v.rsplit("@", 1)) for n, v in (spec.split("=", 1) for spec in args.in_container)}
    models = {q: Path(p).resolve() for q, p in (spec.split("=", 1) for spec in args.model)}
    rng = random.Random(0)

    def ids(n: int) -> list[int]:
        return [rng.randrange(259, args.vocab) for _ in range(n)]  # past the specials and byte tokens

    results: dict[str, Any] = {"cpus": cpus, "threads": threads, "images": images, "native": args.native, "models": {}}
    for quant, gguf in models.items():
        log(f"{quant}: {gguf} ({gguf.stat().st_size / 2**20:.0f} MiB)")

        def native(gguf: Path = gguf, quant: str = quant, name: str = "native", binary: str = args.native) -> Server:
            port = free_port()
            argv = ["taskset", "-c", cpus, binary, "--model", str(gguf), "--host", "127.0.0.1",
                    "--port", str(port), "--threads", str(threads), "--ctx-size", "4096", "--parallel", "1",
                    "--metrics", "--jinja"]  # fmt: skip
            env = dict(v.split("=", 1) for who, v in (e.split("=", 1) for e in args.host_env) if who == name)
            return process_server(name, argv, env, Path(args.workdir) / f"{name}-{quant}.log", port)

        starts: list[Callable[[], Server]] = [native]
        starts += [functools.partial(native, name=name, binary=binary) for name, binary in builds.items()]
        for name, ref in images.items():
            mount = ["--cpuset-cpus", cpus, "--shm-size=64m", "-v", f"{gguf.parent}:/model:ro"]
            mount += [arg for spec in args.docker_arg for who, arg in [spec.split("=", 1)] if who == name]
            starts.append(functools.partial(docker_server, name, ref, mount, ["--model", "/model"]))
        for name, (binary, base) in contained.items():
            here = str(Path(binary).resolve().parent)  # same path inside: a DL build's RUNPATH and backends
            mount = [
                "--cpuset-cpus",
                cpus,
                "--shm-size=64m",
                "-v",
                f"{gguf.parent}:/model:ro",
                "-v",
                f"{here}:{here}:ro",
            ]
            mount += ["--entrypoint", str(Path(binary).resolve())]
            serve = ["--model", f"/model/{gguf.name}", "--host", "0.0.0.0", "--port", "8000", "--threads",
                     str(threads), "--ctx-size", "4096", "--parallel", "1", "--metrics", "--jinja"]  # fmt: skip
            starts.append(functools.partial(docker_server, name, base, mount, serve))
        # Every round starts every server afresh: on this VM one llama-server process generates Q4_0
        # at 30 or at 38 tokens/s for its whole life depending on where its malloc'd (repacked)
        # weights land in memory, so a ratio of two processes started once is a draw, not a
        # measurement (docs/benchmarks.md §8). Fresh processes per round put that into the spread.
        rounds: list[dict[str, Any]] = []
        facts: dict[str, Any] = {}
        with measuring(phases, f"llamacpp {quant}", limit_s=args.wait_minutes * 60):
            for r in range(args.rounds):
                with contextlib.ExitStack() as stack:
                    servers = [stack.enter_context(running(start, 300)) for start in starts]
                    for server in servers:  # warm-up: page cache, first-request allocations
                        llama_request(server.port, ids(PP_TOKENS), 1)
                        llama_request(server.port, ids(8), 16)
                    order = servers[r % len(servers) :] + servers[: r % len(servers)]
                    this: dict[str, Any] = {"order": [s.name for s in order]}
                    for server in order:
                        pp = [llama_request(server.port, ids(PP_TOKENS), 1) for _ in range(args.reps)]
                        tg = [llama_request(server.port, ids(8), TG_TOKENS) for _ in range(args.reps)]
                        this[server.name] = {
                            "pp_tps": statistics.median(x["prompt_per_second"] for x in pp),
                            "tg_tps": statistics.median(x["predicted_per_second"] for x in tg),
                            "pp": pp,
                            "tg": tg,
                        }
                        got = this[server.name]
                        log(
                            f"{quant} round {r + 1}/{args.rounds} {server.name}: "
                            f"pp{PP_TOKENS} {got['pp_tps']:.1f} t/s, tg{TG_TOKENS} {got['tg_tps']:.1f} t/s"
                        )
                    rounds.append(this)
                    facts = {
                        s.name: {"argv": s.argv, **{k: v for k, v in s.facts.items() if k != "log_tail"}}
                        for s in servers
                    }
                for s in servers:
                    facts[s.name]["log_tail"] = s.facts.get("log_tail", [])
        ratios = {
            name: {
                metric: ratio_stats([rd[name][f"{metric}_tps"] / rd["native"][f"{metric}_tps"] for rd in rounds])
                for metric in ("pp", "tg")
            }
            for name in [*images, *builds, *contained]
        }
        results["models"][quant] = {
            "file": str(gguf),
            "bytes": gguf.stat().st_size,
            "servers": facts,
            "rounds": rounds,
            "ratios": ratios,
        }
    return results


def render_llamacpp(res: dict[str, Any]) -> str:
    rows = []
    for quant, m in res["models"].items():
        native_pp = statistics.median(rd["native"]["pp_tps"] for rd in m["rounds"])
        native_tg = statistics.median(rd["native"]["tg_tps"] for rd in m["rounds"])
        for name, r in m["ratios"].items():
            pp = statistics.median(rd[name]["pp_tps"] for rd in m["rounds"])
            tg = statistics.median(rd[name]["tg_tps"] for rd in m["rounds"])
            rows.append(
                [
                    quant,
                    name,
                    f"{pp:.1f} / {native_pp:.1f}",
                    fmt_ratio(r["pp"]),
                    f"{tg:.1f} / {native_tg:.1f}",
                    fmt_ratio(r["tg"]),
                ]
            )
    header = [
        "model", "image", f"pp{PP_TOKENS} t/s (image / native)", "pp ratio median (min–max)",
        f"tg{TG_TOKENS} t/s (image / native)", "tg ratio median (min–max)",
    ]  # fmt: skip
    return markdown_table(header, rows)


# --------------------------------------------------------------------------- vLLM


PROMPT = (
    "The quick brown fox jumps over the lazy dog. A container runs the server; the health endpoint "
    "answers when the model is loaded. vLLM serves large language models with paged attention and "
    "continuous batching. Kunpeng and Phytium are aarch64 processors; Ascend and Cambricon make "
    "accelerators. Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2048. Tell me a long story about it:"
)


def stream_completion(port: int, model: str, max_tokens: int, host: str = "127.0.0.1") -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=900)
    first, tokens, prompt_tokens = None, 0, 0
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            # One chunk per generated token. The random model's ids mostly lie outside the tiny
            # tokenizer's vocabulary and decode to "", so the first token is the first chunk with a
            # choice, whatever its text.
            if first is None and chunk.get("choices"):
                first = time.perf_counter() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
                prompt_tokens = chunk["usage"]["prompt_tokens"]
    finally:
        conn.close()
    return {"ttft_s": first, "total_s": time.perf_counter() - started, "tokens": tokens, "prompt_tokens": prompt_tokens}


def vllm_load(server: Server, model: str, concurrency: int, requests: int, max_tokens: int) -> dict[str, Any]:
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        done = list(pool.map(lambda _: stream_completion(server.port, model, max_tokens, server.host), range(requests)))
    wall = time.perf_counter() - started
    ttfts = [d["ttft_s"] for d in done if d["ttft_s"] is not None]
    tokens = sum(d["tokens"] for d in done)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "max_tokens": max_tokens,
        "wall_s": wall,
        "completion_tokens": tokens,
        "output_tps": tokens / wall,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p99_s": percentile(ttfts, 99),
        "per_request": done,
    }


def served_model(server: Server) -> str:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("GET", "/v1/models")
    return str(json.loads(conn.getresponse().read())["data"][0]["id"])


def vllm(args: argparse.Namespace, phases: list[dict[str, Any]]) -> dict[str, Any]:
    model = Path(args.model).resolve()
    python = str(Path(args.venv) / "bin" / "python")

    # docs/operators.md §3 "cpu": exactly these flags; VLLM_CPU_* unset, so the launcher derives them.
    flags = ["--shm-size=4g", "--security-opt", "seccomp=unconfined", "--cap-add", "SYS_NICE"]

    def image() -> Server:
        return docker_server("image", args.image, [*flags, "-v", f"{model}:/model:ro"], ["--model", "/model"])

    def image_eager() -> Server:
        # the launcher's choice before the image carried a compiler
        return docker_server("image-eager", args.image, [*flags, "-v", f"{model}:/model:ro"],
                             ["--model", "/model", "--enforce-eager"])  # fmt: skip

    def image_hostnet() -> Server:
        # the image without Docker's port publishing: a client on the same machine otherwise goes
        # through docker-proxy, a userland copy of every byte (a remote client goes through iptables)
        port = free_port()
        server = docker_server("image-hostnet", args.image, [*flags, "--network", "host", "-v", f"{model}:/model:ro"],
                               ["--model", "/model", "--host", "127.0.0.1", "--port", str(port)])  # fmt: skip
        server.port = port  # the server's own port: nothing is published
        return server

    def image_bridge() -> Server:
        # the documented run, nothing published: the client reaches the container on Docker's bridge,
        # the path a client on another machine takes after the published port's iptables rule
        return docker_server("image-bridge", args.image, [*flags, "-v", f"{model}:/model:ro"],
                             ["--model", "/model"], publish=False)  # fmt: skip

    def host_eager() -> Server:
        return host(eager=True)

    def host(eager: bool = False) -> Server:
        # vLLM's CPU installation guide, "Related runtime environment variables" and "Performance tips"
        # (https://docs.vllm.ai/en/latest/getting_started/installation/cpu.html): VLLM_CPU_KVCACHE_SPACE
        # in GiB, the OpenMP threads bound with VLLM_CPU_OMP_THREADS_BIND, --dtype=bfloat16 (its docker run
        # example), TCMalloc preloaded. The `vllm` console script fails for the vllm-cpu distribution
        # (it looks up a dist named `vllm`), so `vllm serve` is run as its module.
        port = free_port()
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(args.host_kv_gib),
            "VLLM_CPU_OMP_THREADS_BIND": args.host_bind,
            "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
        }
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--dtype", "bfloat16",
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        name = "host"
        if eager:  # what the image's launcher passes without a compiler
            argv.append("--enforce-eager")
            env["TORCHDYNAMO_DISABLE"] = "1"
            name = "host-eager"
        return process_server(name, argv, env, Path(args.workdir) / f"vllm-{name}.log", port)

    extras = {
        "image-eager": image_eager,
        "image-hostnet": image_hostnet,
        "image-bridge": image_bridge,
        "host-eager": host_eager,
    }
    contestants = [("image", image), ("host", host)] + [(name, extras[name]) for name in args.also]
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        k = r % len(contestants)  # rotated: every contestant starts a round in turn
        order = contestants[k:] + contestants[:k]
        this: dict[str, Any] = {"order": [n for n, _ in order]}
        for name, start in order:
            with (
                running(start, 900) as server,
                measuring(phases, f"vllm round {r + 1} {name}", limit_s=args.wait_minutes * 60),
            ):
                served = served_model(server)
                vllm_load(server, served, 1, 1, args.max_tokens)  # warm-up
                vllm_load(server, served, 16, 16, args.max_tokens)
                c1 = vllm_load(server, served, 1, args.c1_requests, args.max_tokens)
                c16 = vllm_load(server, served, 16, args.c16_requests, args.max_tokens)
                log(f"round {r + 1} {name}: c1 {c1['output_tps']:.1f} tok/s TTFT p50 {c1['ttft_p50_s'] * 1e3:.0f} ms; "
                    f"c16 {c16['output_tps']:.1f} tok/s TTFT p50 {c16['ttft_p50_s'] * 1e3:.0f} ms")  # fmt: skip
            this[name] = {"c1": c1, "c16": c16, "argv": server.argv, **server.facts}
        rounds.append(this)

    def ratios_of(who: str) -> dict[str, Any]:
        return {
            c: {
                "output_tps": ratio_stats([rd[who][c]["output_tps"] / rd["host"][c]["output_tps"] for rd in rounds]),
                # TTFT: host / contestant, so that above 1 means the contestant is faster here too
                "ttft_p50": ratio_stats([rd["host"][c]["ttft_p50_s"] / rd[who][c]["ttft_p50_s"] for rd in rounds]),
                "ttft_p99": ratio_stats([rd["host"][c]["ttft_p99_s"] / rd[who][c]["ttft_p99_s"] for rd in rounds]),
            }
            for c in ("c1", "c16")
        }

    others = [name for name, _ in contestants if name != "host"]
    return {
        "image": args.image,
        "venv": args.venv,
        "model": str(model),
        "rounds": rounds,
        "ratios": ratios_of("image"),
        "ratios_by_contestant": {name: ratios_of(name) for name in others},
    }


def render_vllm(res: dict[str, Any]) -> str:
    rows = []
    by = res.get("ratios_by_contestant") or {"image": res["ratios"]}
    for (who, ratios), (c, label) in itertools.product(by.items(), (("c1", "1"), ("c16", "16"))):
        rds = res["rounds"]

        def med(who: str, key: str, c: str = c, rds: list[dict[str, Any]] = rds) -> float:
            return float(statistics.median(rd[who][c][key] for rd in rds))

        r = ratios[c]
        rows.append([
            who,
            label,
            f"{med(who, 'output_tps'):.1f} / {med('host', 'output_tps'):.1f}",
            fmt_ratio(r["output_tps"]),
            f"{med(who, 'ttft_p50_s') * 1e3:.0f} / {med('host', 'ttft_p50_s') * 1e3:.0f} ms",
            fmt_ratio(r["ttft_p50"]),
            f"{med(who, 'ttft_p99_s') * 1e3:.0f} / {med('host', 'ttft_p99_s') * 1e3:.0f} ms",
            fmt_ratio(r["ttft_p99"]),
        ])  # fmt: skip
    header = [
        "contestant", "concurrency", "output tok/s (it / host)", "ratio it/host", "TTFT P50 (it / host)",
        "ratio host/it", "TTFT P99 (it / host)", "ratio host/it",
    ]  # fmt: skip
    return markdown_table(header, rows)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="engine", required=True)
    lp = sub.add_parser("llamacpp", help="feiteng image(s) against llama-server built natively")
    lp.add_argument("--native", required=True, help="the llama-server built with -DGGML_NATIVE=ON")
    lp.add_argument("--image", action="append", default=[], help="NAME=REF of a feiteng image (repeatable)")
    lp.add_argument("--host-build", action="append", default=[], help="NAME=PATH: another llama-server built here")
    lp.add_argument(
        "--docker-arg", action="append", default=[], help="NAME=ARG: one more `docker run` argument for image NAME"
    )
    lp.add_argument(
        "--host-env", action="append", default=[], help="NAME=VAR=VALUE: an environment variable for host build NAME"
    )
    lp.add_argument(
        "--in-container",
        action="append",
        default=[],
        help="NAME=PATH@IMAGE: a llama-server built here, run inside IMAGE (its directory mounted at the same"
        " path, the image's settings): what Docker alone costs the same binary",
    )
    lp.add_argument("--model", action="append", required=True, help="QUANT=FILE.gguf, alone in its directory")
    lp.add_argument("--vocab", type=int, default=151936, help="the models' vocabulary size (random prompt ids)")
    lp.add_argument("--cpus", default="0,1", help="the cores every contestant is pinned to")
    lp.add_argument("--reps", type=int, default=2, help="requests per figure per contestant per round")
    vp = sub.add_parser("vllm", help="the cpu image against vllm serve in a plain venv")
    vp.add_argument("--image", required=True, help="REF of the cpu image")
    vp.add_argument("--venv", required=True, help="a venv with the image's lock installed")
    vp.add_argument("--model", required=True, help="a Hugging Face model directory")
    vp.add_argument("--host-kv-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE for the host server")
    vp.add_argument("--host-bind", default="0-1", help="VLLM_CPU_OMP_THREADS_BIND for the host server")
    vp.add_argument("--c1-requests", type=int, default=4)
    vp.add_argument("--c16-requests", type=int, default=32)
    vp.add_argument("--max-tokens", type=int, default=64)
    vp.add_argument("--also", action="append", default=[],
                    choices=["image-eager", "image-hostnet", "image-bridge", "host-eager"],
                    help="more contestants, each against the host: the image forced eager, the image on the "
                         "host's network (no docker-proxy), the image reached at its bridge address (no "
                         "docker-proxy, nothing published), the host forced eager (repeatable)")  # fmt: skip
    for p in (lp, vp):
        p.add_argument("--rounds", type=int, default=3)
        p.add_argument("--workdir", default="/var/tmp/xcforge-bench", help="server logs go here")
        p.add_argument("--wait-minutes", type=float, default=0, help="wait this long for a quiet machine")
        p.add_argument("--tag", default="", help="suffix of the results file (sidebyside-ENGINE[-TAG].json)")
    args = parser.parse_args(argv)
    phases: list[dict[str, Any]] = []
    if args.engine == "llamacpp":
        res = llamacpp(args, phases)
        table = render_llamacpp(res)
    else:
        res = vllm(args, phases)
        table = render_vllm(res)
    print(f"## side by side: {args.engine} ({load_note(phases)})\n\n{table}\n")
    name = f"sidebyside-{args.engine}" + (f"-{args.tag}" if args.tag else "")
    write_results(name, {"parameters": vars(args), "phases": phases, "results": res, "table": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
