"""Build benchmark: what an unchanged re-run, a one-line engine change and a forced rebuild cost.

    .venv/bin/python bench/bench_builds.py [--target ascend --target cuda] [--cpu] [--repeats 3]

For each target, on a copy of the project (matrix.yaml, templates/, images/ in a temporary
directory, built with `--matrix COPY/matrix.yaml`, as tests/builds/conftest.py's `project` does),
every build is `python build.py --target T --site sites/skeleton.yaml --registry
127.0.0.1:5000/xcforge-bench --push --dist TMP/dist`, and:

0. prime: one build so that the image and the registry cache exist (its time depends on whatever
   BuildKit had cached already, so it is shown but is not one of the measurements);
a. unchanged re-run: the fingerprint matches the pushed image, nothing is built (`skipped`);
b. one-line change: a comment appended to the copy's images/engine/.../__init__.py, then a build
   (a new line each repeat, so every repeat really rebuilds the engine layer and what follows);
c. `--force`: a full rebuild of the same inputs, with BuildKit's cache warm.

Times: the wall time of the build.py process (what a user waits for) and `duration_s` from
dist/report.json (build + push of that target, without start-up). Also from the report: cache
hits / steps and the compressed size of each platform. `cuda` and `ascend` use stand-in bases with
the engine install skipped (fast); `--cpu` adds the cpu target for linux/amd64 with the real vLLM
install (minutes the first time). Prints Markdown tables; writes bench/results/bench_builds.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import (
    BENCH_PREFIX,
    REPO,
    fmt_bytes,
    fmt_time,
    load_note,
    log,
    markdown_table,
    measuring,
    summarize,
    write_results,
)

# Skeleton builds (engine steps skipped) for ascend/cuda: rebuild costs of the machinery, not of pip
# (the real installs are measured once each, docs/benchmarks.md). --cpu keeps its real engine.
SITE = REPO / "sites" / "skeleton.yaml"
CPU_PLATFORM = "linux/amd64"  # the rebuild costs of one platform (bench_arch.py compares the two)


def copy_project(root: Path) -> Path:
    root.mkdir(parents=True)
    shutil.copy(REPO / "matrix.yaml", root / "matrix.yaml")
    shutil.copy(REPO / "docker-bake.hcl", root / "docker-bake.hcl")
    shutil.copytree(REPO / "templates", root / "templates")
    shutil.copytree(
        REPO / "images", root / "images", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    return root


def build(project: Path, dist: Path, target: str, logs: Path, *extra: str) -> dict[str, Any]:
    """One `build.py` run; its wall time and the target's record from dist/report.json."""
    cmd = [sys.executable, str(REPO / "build.py"), "--matrix", str(project / "matrix.yaml"), "--target", target]
    cmd += ["--site", str(SITE), "--registry", BENCH_PREFIX, "--push", "--dist", str(dist)]
    if target == "cpu":
        cmd += ["--platform", CPU_PLATFORM]
    cmd += list(extra)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{target}-{uuid.uuid4().hex[:6]}.log").write_text(proc.stderr)
    record: dict[str, Any] = {}
    report = dist / "report.json"
    if report.exists():
        record = next((r for r in json.loads(report.read_text())["results"] if r["target"] == target), {})
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"build.py --target {target} {' '.join(extra)} failed (exit {proc.returncode}):\n{tail}")
    return {
        "wall_s": wall,
        "status": record.get("status"),
        "duration_s": record.get("duration_s"),
        "cache_hits": record.get("cache_hits"),
        "steps": record.get("steps"),
        "digest": record.get("digest"),
        "platforms": record.get("platforms", []),
        "engine_install": record.get("engine_install"),
        "base_kind": record.get("base_kind"),
    }


def scenario(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    durations = [r["duration_s"] for r in runs if r["duration_s"] is not None]
    return {
        "scenario": name,
        "wall": summarize(walls),
        "duration": summarize(durations) if durations else None,
        "statuses": sorted({str(r["status"]) for r in runs}),
        "cache_hits": [r["cache_hits"] for r in runs],
        "steps": [r["steps"] for r in runs],
        "runs": runs,
    }


def bench_target(target: str, repeats: int, work: Path, wait_s: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    project = copy_project(work / target / "project")
    dist, logs = work / target / "dist", work / target / "logs"
    phases: list[dict[str, Any]] = []

    with measuring(phases, f"{target}: prime", limit_s=wait_s):
        log(f"{target}: prime build")
        prime = build(project, dist, target, logs)
        log(f"{target}: prime {prime['status']} in {prime['wall_s']:.1f} s")

    unchanged = []
    with measuring(phases, f"{target}: unchanged", limit_s=wait_s):
        for i in range(repeats):
            unchanged.append(build(project, dist, target, logs))
            log(f"{target}: unchanged #{i + 1}: {unchanged[-1]['status']} in {unchanged[-1]['wall_s']:.1f} s")

    module = next((project / "images" / "engine").rglob("__init__.py"))
    changed = []
    with measuring(phases, f"{target}: one-line change", limit_s=wait_s):
        for i in range(repeats):
            module.write_text(module.read_text() + f"\n# bench: a one-line change {uuid.uuid4().hex}\n")
            changed.append(build(project, dist, target, logs))
            log(f"{target}: one-line change #{i + 1}: {changed[-1]['status']} in {changed[-1]['wall_s']:.1f} s")

    forced = []
    with measuring(phases, f"{target}: --force", limit_s=wait_s):
        for i in range(repeats):
            forced.append(build(project, dist, target, logs, "--force"))
            log(f"{target}: --force #{i + 1}: {forced[-1]['status']} in {forced[-1]['wall_s']:.1f} s")

    last = forced[-1]
    return {
        "target": target,
        "platforms": [p["platform"] for p in last["platforms"]],
        "engine_install": last["engine_install"],
        "base_kind": last["base_kind"],
        "repository": f"{BENCH_PREFIX}/vllm-{target}",
        "digest": last["digest"],
        "sizes": {p["platform"]: p["compressed_bytes"] for p in last["platforms"]},
        "prime": prime,
        "scenarios": [
            scenario("a. unchanged re-run (fingerprint skip)", unchanged),
            scenario("b. one-line change in images/engine", changed),
            scenario("c. --force, warm BuildKit cache", forced),
        ],
    }, phases


def render(results: list[dict[str, Any]]) -> str:
    rows = []
    for res in results:
        for sc in res["scenarios"]:
            hits = ", ".join(f"{h}/{s}" for h, s in zip(sc["cache_hits"], sc["steps"], strict=True))
            duration = sc["duration"]
            rows.append(
                [
                    res["target"],
                    sc["scenario"],
                    sc["wall"]["n"],
                    fmt_time(sc["wall"]["median_s"]),
                    fmt_time(sc["wall"]["p95_s"]),
                    fmt_time(duration["median_s"]) if duration else "-",
                    "/".join(sc["statuses"]),
                    hits,
                ]
            )
    table = markdown_table(
        ["target", "scenario", "n", "wall median", "wall p95", "build+push median", "status", "cache hits/steps"],
        rows,
    )
    sizes = markdown_table(
        ["target", "platform", "compressed size", "engine install", "base", "prime build"],
        [
            [
                res["target"],
                platform,
                fmt_bytes(size),
                res["engine_install"],
                res["base_kind"],
                f"{res['prime']['status']} in {fmt_time(res['prime']['wall_s'])}",
            ]
            for res in results
            for platform, size in sorted(res["sizes"].items())
        ],
    )
    return f"{table}\n\n{sizes}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", help="target to measure (repeatable; default ascend and cuda)")
    parser.add_argument("--cpu", action="store_true", help=f"also the cpu target ({CPU_PLATFORM}, real engine)")
    parser.add_argument("--repeats", type=int, default=3, help="builds per scenario")
    parser.add_argument("--wait-minutes", type=float, default=20, help="wait this long for a quiet machine (0: no)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary projects, dists and logs")
    args = parser.parse_args(argv)
    targets = args.target or ["ascend", "cuda"]
    if args.cpu and "cpu" not in targets:
        targets.append("cpu")
    args.target = targets

    work = Path(tempfile.mkdtemp(prefix="xcforge-bench-builds-"))
    results, phases = [], []
    try:
        for target in targets:
            result, target_phases = bench_target(target, args.repeats, work, args.wait_minutes * 60)
            results.append(result)
            phases += target_phases
            # Written after every target, so a failure later on keeps what was measured.
            doc = {"parameters": vars(args), "complete": len(results) == len(targets), "phases": phases}
            write_results("bench_builds", {**doc, "results": results})
    except BaseException:
        log(f"failed; build logs kept in {work}")
        raise
    if args.keep:
        log(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)

    print(f"## bench_builds ({load_note(phases)})\n\n{render(results)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
