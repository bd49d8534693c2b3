"""feiteng's llama.cpp compile, before and after the shared toolchain stage and ccache (issue 22 item 4).

    .venv/bin/python bench/bench_feiteng.py [--before REV] [--wait-minutes 20]

For each revision (`--before`, default 601090d, the last one before this change; then HEAD), in a fresh
clone: `build.py contexts --target feiteng` makes the contexts its committed bake file names, then
`docker buildx bake --no-cache` of that file (the base: the local stand-in) is timed, output
`type=cacheonly` (the steps, not the export), ccache's cache mount emptied first: the cold compile of
both platforms. For HEAD once more with ccache kept: the same sources compiled again, which is what
ccache saves at most (a llama.cpp release changes part of the tree; a flag that every file sees, all
of it). The base and apt's download cache are warm in every run.

Per run: the wall clock (every step of the image, the runtime stage's emulated arm64 steps too), and
from bake's plain progress each step's own seconds: the toolchain's apt install, the compile per
platform. Writes `feiteng.json` in bench/results/.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, git_revision, log, machine, markdown_table, measuring, now_iso, write_results

from xcforge.provision.standin import default_registry, standin_ref
from xcforge.shell import DOCKER

CCACHE_ID = "xcforge-llama-ccache"
FEITENG_BASE = "docker.io/library/python:3.11-slim-bookworm"  # matrix.yaml's; its stand-in is the local one
STEP = re.compile(r"^\[feiteng\] #(?P<n>\d+) \[(?P<what>[^\]]+)\] (?P<cmd>.*)$")
DONE = re.compile(r"^\[feiteng\] #(?P<n>\d+) DONE (?P<s>[\d.]+)s$")


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, text=True, **kw)  # type: ignore[call-overload, no-any-return]  # kw: subprocess's own


def prepare(revision: str, workdir: Path) -> Path:
    """A clone of the revision with the contexts its committed bake file names (`build.py contexts`)."""
    clone = workdir / revision
    _run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    _run(["git", "-C", str(clone), "checkout", "--quiet", revision], check=True)
    result = _run([sys.executable, "build.py", "contexts", "--target", "feiteng"], cwd=clone, capture_output=True)
    if result.returncode != 0:
        raise SystemExit(f"{revision}: build.py contexts failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}")
    return clone


def empty_ccache() -> None:
    """Remove ccache's cache mount (buildx prune filters only by exact values: by its record's id)."""
    listing = _run([DOCKER, "buildx", "du", "--verbose"], capture_output=True, check=True).stdout
    for block in listing.split("\n\n"):
        record = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in block.splitlines() if ":" in line)}
        if CCACHE_ID in record.get("Description", "") and "ID" in record:
            _run([DOCKER, "buildx", "prune", "--force", "--filter", f"id={record['ID']}"], check=True)


def bake(clone: Path) -> dict[str, object]:
    """One timed bake of feiteng from the clone's committed bake file, its base the local stand-in;
    each step's seconds from its progress."""
    cmd = [
        DOCKER, "buildx", "bake", "--progress=plain", "--file", str(clone / "docker-bake.hcl"),
        "--set", f"feiteng.args.BASE_IMAGE={standin_ref(FEITENG_BASE, default_registry())}",
        # Every step runs again (cache mounts stay: apt's downloads, ccache unless emptied). buildx
        # 0.13's bake drops `--set T.no-cache-filter=...` silently (`bake --print` lacks it).
        "--set", "feiteng.no-cache=true",
        "--set", "feiteng.output=type=cacheonly",
        "feiteng",
    ]  # fmt: skip
    print("+", " ".join(cmd), flush=True)
    started = time.monotonic()
    names: dict[str, str] = {}
    steps: dict[str, float] = {}
    with subprocess.Popen(cmd, cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = "[feiteng] " + raw.rstrip("\n")
            if step := STEP.match(line):
                names.setdefault(step["n"], f"#{step['n']} {step['what']} {step['cmd'][:60]}")
            elif done := DONE.match(line):
                name = names.get(done["n"], f"#{done['n']}")
                steps[name] = max(steps.get(name, 0.0), float(done["s"]))
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"bake failed (exit {proc.returncode})")
    compile_steps = {k: v for k, v in steps.items() if "cmake" in k or 'case "$TARGETARCH"' in k}
    apt_steps = {k: v for k, v in steps.items() if "apt-get" in k or "APT_MIRROR" in k}
    return {"wall_s": round(wall, 1), "steps_s": steps, "compile_s": compile_steps, "apt_s": apt_steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="601090d", help="the revision before the change (default 601090d)")
    parser.add_argument("--wait-minutes", type=float, default=20, help="wait this long for a quiet machine (0: no)")
    args = parser.parse_args(argv)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    phases: list[dict[str, object]] = []
    runs: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="xcforge-bench-feiteng-") as tmp:
        work = Path(tmp)
        before = prepare(args.before, work)
        after = prepare(head, work)
        for name, clone, cold in (
            ("before: cold", before, True),
            ("after: cold", after, True),
            ("after: the compile again, ccache kept", after, False),
        ):
            with measuring(phases, name, limit_s=args.wait_minutes * 60):
                if cold:
                    empty_ccache()
                runs[name] = bake(clone)
    rows = []
    for name, run in runs.items():
        compiles = run["compile_s"]
        apt = run["apt_s"]
        assert isinstance(compiles, dict) and isinstance(apt, dict)
        rows.append(
            [
                name,
                f"{run['wall_s']:.0f} s",
                " / ".join(f"{v:.0f} s" for v in compiles.values()) or "-",
                f"{len(apt)} × " + " / ".join(f"{v:.0f} s" for v in apt.values()) if apt else "cached",
            ]
        )
    print(markdown_table(["run", "wall", "compile step per platform", "toolchain apt step(s)"], rows))
    write_results(
        "feiteng",
        {
            "measured_at": now_iso(),
            "revision": git_revision(),
            "before": args.before,
            "after": head,
            "machine": machine(),
            "phases": phases,
            "runs": runs,
        },
    )
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
