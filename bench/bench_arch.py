"""arm64 against amd64: what an image with its real engine costs to build for each, side by side.

    .venv/bin/python bench/bench_arch.py [--target cpu] [--target feiteng]

On this x86 machine arm64 is the emulated platform. xcforge keeps emulation out of the expensive
steps: the cpu image's dependency set is installed by the build platform's own Python (uv
--python-platform) and copied in; feiteng's llama-server is cross-compiled with Debian's aarch64
toolchain. Only small steps (apt, useradd, check-install) run under QEMU. The issue's bar: arm64 at
most 1.5x amd64.

Each build is `build.py --target T --platform P --site sites/standin.yaml --dist TMP --force` on a
copy of the project whose install script (cpu) or compile flags (feiteng) carry a fresh comment, so
the engine steps really run again (package downloads and apt come from warm caches: what is
measured is install/compile work, not the network). amd64 and arm64 alternate. One run each by
default. Writes bench/results/bench_arch.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import REPO, fmt_bytes, fmt_time, log, markdown_table, measuring, write_results
from bench_builds import copy_project

SITE = REPO / "sites" / "standin.yaml"
# The file whose change re-runs each target's engine steps (and everything after them).
BUSTS = {"cpu": "images/support/xcforge-install-engine", "feiteng": "templates/targets/feiteng.Dockerfile.j2"}


def bust(project: Path, target: str) -> None:
    path = project / BUSTS[target]
    marker = uuid.uuid4().hex
    if path.suffix == ".j2":
        # A comment inside the compile RUN's shell: a new layer, same binary.
        text = path.read_text().replace(
            '&& echo "xcforge: llama.cpp for', f'&& : bench-{marker} && echo "xcforge: llama.cpp for', 1
        )
        path.write_text(text)
        subprocess.run([sys.executable, str(REPO / "build.py"), "render", "--matrix", str(project / "matrix.yaml"),
                        "--target", target], check=True, capture_output=True)  # fmt: skip
    else:
        path.write_text(path.read_text() + f"\n# bench {marker}\n")


def build(project: Path, target: str, platform: str, dist: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(REPO / "build.py"), "--matrix", str(project / "matrix.yaml"), "--target", target,
           "--platform", platform, "--site", str(SITE), "--dist", str(dist), "--force"]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{target} {platform} failed:\n" + "\n".join(proc.stderr.splitlines()[-15:]))
    record = next(r for r in json.loads((dist / "report.json").read_text())["results"] if r["target"] == target)
    steps = [line for line in proc.stderr.splitlines() if " DONE " in line]
    return {
        "target": target,
        "platform": platform,
        "wall_s": wall,
        "duration_s": record.get("duration_s"),
        "compressed_bytes": sum(p.get("compressed_bytes") or 0 for p in record.get("platforms", [])),
        "verification": record.get("verification"),
        "slowest_steps": sorted(steps, key=lambda s: -float(s.rsplit("DONE", 1)[1].strip().rstrip("s") or 0))[:4],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", choices=sorted(BUSTS), help="default: cpu and feiteng")
    args = parser.parse_args()
    targets = args.target or ["cpu", "feiteng"]
    rows: list[list[object]] = []
    runs: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="xcforge-bench-arch-") as tmp:
        work = Path(tmp)
        for target in targets:
            project = copy_project(work / target / "project")
            pair = {}
            for platform in ("linux/amd64", "linux/arm64"):
                bust(project, target)
                with measuring(phases, f"{target} {platform}", limit_s=20 * 60):
                    log(f"{target} {platform}: building")
                    pair[platform] = build(project, target, platform, work / target / platform.replace("/", "-"))
                    log(f"{target} {platform}: {pair[platform]['wall_s']:.0f} s")
                runs.append(pair[platform])
            ratio = pair["linux/arm64"]["wall_s"] / pair["linux/amd64"]["wall_s"]
            rows.append([target, fmt_time(pair["linux/amd64"]["wall_s"]), fmt_time(pair["linux/arm64"]["wall_s"]),
                         f"{ratio:.2f}x", fmt_bytes(pair["linux/amd64"]["compressed_bytes"]),
                         fmt_bytes(pair["linux/arm64"]["compressed_bytes"])])  # fmt: skip
    print(
        markdown_table(
            ["target", "amd64", "arm64 (emulated platform)", "arm64/amd64", "amd64 size", "arm64 size"], rows
        )
    )
    write_results("bench_arch", {"runs": runs, "phases": phases})
    return 0


if __name__ == "__main__":
    sys.exit(main())
