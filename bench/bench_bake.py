"""Orchestration overhead: xcforge's cached `--force` build next to a plain `docker buildx bake` of the
same files, side by side, one machine, one run each per repeat.

    .venv/bin/python bench/bench_bake.py [--target mlu] [--repeats 3]

Per target (default mlu and ascend, stand-in bases with the engine steps skipped, archive output:
the embedded default):

0. prime: `build.py --target T --site sites/skeleton.yaml --dist TMP --force` (caches warm, and it
   leaves the two bake files it ran: docker-bake.hcl and TMP/bake/run-default-1.json);
1. xcforge: the same command again (wall time of the process: plan, base check, contexts, bake,
   SBOM/provenance, archive, report);
2. plain: `docker buildx bake -f docker-bake.hcl -f TMP/bake/plain-run.json T`: the very
   definition xcforge ran (TMP/bake/run-default-1.json), with the same two outputs (the OCI archive
   and the engine's image store), the archive written to a file of its own that each plain run
   overwrites (as each xcforge run replaces its own), and bake's default progress (plain: its
   output is a pipe, as in CI).

Repeats alternate the order (xcforge first, then plain first) so neither always runs warmer.
Overhead = (xcforge - plain) / plain of the medians. Because the bake itself varies by a second or
two between runs on a small machine, each xcforge run also reports the time it spent outside its
own bake (wall time less the bake's, as xcforge measured it): that is the orchestration overhead
without the bake's noise, given as a share of plain bake's median. Both sides also report the CPU
time of the command and every process it waited for (the orchestration's cost, however much of it
overlaps with the bake). Before each timed run, untimed: `sync`, and xcforge's deletion of the
archive it replaced has finished (it leaves that to an `rm` of its own; plain bake truncates its
old archive inside its own run). Writes bench/results/bench_bake.json; prints a Markdown table
(docs/benchmarks.md §2e).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, load_note, log, markdown_table, measuring, write_results

SITE = REPO / "sites" / "skeleton.yaml"


def _settle(dist: Path) -> None:
    """Untimed, before every timed run: the last run's archive (300-400 MiB) is written out, and the
    one it replaced is gone (xcforge leaves its deletion to an `rm` of its own), so that neither
    side pays for the other's writeback or deletion."""
    deadline = time.monotonic() + 60
    while any(dist.glob(".*.replaced-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    subprocess.run(["sync"], check=True)


def _timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the command and every process it waited for, the result). The CPU is
    what the orchestration costs however it overlaps with the bake; BuildKit's own (the daemon's)
    is in neither side's count."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, proc


def _xcforge(target: str, dist: Path) -> tuple[float, float, str]:
    _settle(dist)
    cmd = [sys.executable, str(REPO / "build.py"), "--target", target, "--site", str(SITE), "--dist", str(dist)]
    elapsed, cpu, proc = _timed([*cmd, "--force"])
    if proc.returncode != 0:
        raise SystemExit(f"xcforge build of {target} failed:\n{proc.stderr[-2000:]}")
    return elapsed, cpu, proc.stderr


def _plain_run_file(dist: Path) -> Path:
    """xcforge's run file with one change: the archive goes to a file of plain bake's own, so each
    side overwrites only its own last output (the truncation a user's rebuild pays), and xcforge
    never deletes plain's file (it clears its own `.partial` before building)."""
    run = json.loads((dist / "bake" / "run-default-1.json").read_text())
    for target in run["target"].values():
        target["output"] = [
            re.sub(r"dest=[^,]+", f"dest={dist / 'plain-output.oci.tar'}", out) if out.startswith("type=oci") else out
            for out in target["output"]
        ]
    path = dist / "bake" / "plain-run.json"
    path.write_text(json.dumps(run, indent=2))
    return path


def _plain(target: str, dist: Path) -> tuple[float, float]:
    run_file = _plain_run_file(dist)
    # Bake's own default progress: plain, as in CI (the output is a pipe), the log xcforge reads too.
    cmd = ["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", str(run_file), target]
    _settle(dist)
    elapsed, cpu, proc = _timed(cmd)
    if proc.returncode != 0:
        raise SystemExit(f"plain bake of {target} failed:\n{proc.stderr[-2000:]}")
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    targets = args.target or ["mlu", "ascend"]
    # Python caches each module's bytecode on first import, unless PYTHONDONTWRITEBYTECODE is set
    # (this sandbox sets it): then every run compiles xcforge's ~100 modules again, 0.1 s that no
    # user's second run pays. Compile them once, untimed, as a user's first run would.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "xcforge", "ocicore", "signing"], cwd=REPO, check=True)
    phases: list[dict[str, Any]] = []
    rows, results = [], {}
    for target in targets:
        with tempfile.TemporaryDirectory(prefix="xcforge-bench-bake-") as tmp:
            dist = Path(tmp) / "dist"
            log(f"{target}: prime")
            _xcforge(target, dist)
            ours: list[float] = []
            plain: list[float] = []
            ours_cpu: list[float] = []
            plain_cpu: list[float] = []
            sbom: list[float] = []
            outside: list[float] = []  # xcforge's wall time less its own bake's
            with measuring(phases, f"{target} side by side", limit_s=20 * 60):
                for repeat in range(args.repeats):
                    order = ("xcforge", "plain") if repeat % 2 == 0 else ("plain", "xcforge")
                    for which in order:
                        if which == "xcforge":
                            elapsed, cpu, stderr = _xcforge(target, dist)
                            ours.append(elapsed)
                            ours_cpu.append(cpu)
                            found = re.search(r"SBOMs and provenance written in ([\d.]+) s", stderr)
                            sbom.append(float(found.group(1)) if found else 0.0)
                            baked = re.search(r"bake finished in ([\d.]+) s", stderr)
                            outside.append(elapsed - float(baked.group(1)) if baked else float("nan"))
                        else:
                            elapsed, cpu = _plain(target, dist)
                            plain.append(elapsed)
                            plain_cpu.append(cpu)
                    log(f"{target} #{repeat + 1}: xcforge {ours[-1]:.2f} s, plain bake {plain[-1]:.2f} s")
            med_ours, med_plain = statistics.median(ours), statistics.median(plain)
            overhead = (med_ours - med_plain) / med_plain
            med_outside = statistics.median(outside)
            results[target] = {
                "xcforge_s": ours,
                "plain_bake_s": plain,
                "sbom_s": sbom,
                "outside_bake_s": outside,
                "overhead": overhead,
                "outside_bake_overhead": med_outside / med_plain,
                "xcforge_cpu_s": ours_cpu,
                "plain_bake_cpu_s": plain_cpu,
            }
            rows.append(
                [
                    target,
                    f"{med_plain:.2f} s",
                    f"{med_ours:.2f} s",
                    f"{overhead * 100:+.1f} %",
                    f"{med_outside:.2f} s ({med_outside / med_plain * 100:.1f} %)",
                    f"{statistics.median(sbom):.2f} s",
                    f"{statistics.median(plain_cpu):.2f} s / {statistics.median(ours_cpu):.2f} s",
                ]
            )
    header = [
        "target",
        "plain bake (median)",
        "xcforge (median)",
        "overhead (medians)",
        "xcforge outside its bake (median)",
        "of which SBOM/provenance",
        "CPU of the command and its children: plain / xcforge (medians)",
    ]
    print(markdown_table(header, rows))
    print(f"\n{args.repeats} repeats each, alternating order; {load_note(phases)}")
    write_results("bench_bake", {"repeats": args.repeats, "targets": results, "phases": phases})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
