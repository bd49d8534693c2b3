"""feiteng's llama.cpp compile, before and after the shared toolchain stage and ccache (issue 22 item 4).

    .venv/bin/python bench/bench_feiteng.py [--before REV] [--wait-minutes 20] [--after-only | --warm-only]

For each revision (`--before`, default 601090d, the last one before this change; then HEAD), in a fresh
clone: `build.py contexts --target feiteng` makes the contexts its committed bake file names, then
`docker buildx bake --no-cache` of that file (the base: the local stand-in) is timed, output
`type=cacheonly` (the steps, not the export): the cold compile of both platforms. `--no-cache` also
gives every cache mount a fresh, empty directory (BuildKit; apt's download cache too), so a cold run
starts without ccache's files; what it writes there is what later builds see.

For HEAD once more with ccache kept: the compile step's command changed by a no-op (`: bench-recompile`)
so that it and the stages after it run again while the toolchain stays cached, as when a llama.cpp
release changes the sources. Same sources, so this is what ccache saves at most (a release changes
part of the tree; a flag that every file sees, all of it).

Per run: the wall clock (every step of the image, the runtime stage's emulated arm64 steps too), and
from bake's plain progress each step's own seconds: the toolchain's apt install, the compile per
platform, and ccache's hit/miss lines. Writes `feiteng.json` in bench/results/.
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

FEITENG_BASE = "docker.io/library/python:3.11-slim-bookworm"  # matrix.yaml's; its stand-in is the local one
STEP = re.compile(r"^#(?P<n>\d+) \[(?P<what>[^\]]+)\] (?P<cmd>.*)$")
DONE = re.compile(r"^#(?P<n>\d+) DONE (?P<s>[\d.]+)s$")
CCACHE_LINE = re.compile(r"^#\d+ [\d.]+ xcforge: ccache (?P<line>.*)$")
COMPILE_MARK = 'case "$TARGETARCH" in'  # the first words of the compile step (both revisions)
COMPILED = re.compile(r'case "[a-z0-9]+" in')  # the same in bake's progress ($TARGETARCH expanded)
RECOMPILE_MARK = ": bench-recompile && "


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


def change_compile_step(clone: Path) -> None:
    """The compile step's command with a no-op in front: it and what follows run again, the toolchain
    and the sources stay cached, ccache's mount is the one the last run left."""
    dockerfile = clone / "images" / "feiteng" / "Dockerfile"
    text = dockerfile.read_text()
    if COMPILE_MARK not in text:
        raise SystemExit(f"{dockerfile}: no compile step ({COMPILE_MARK!r}) to change")
    dockerfile.write_text(text.replace(COMPILE_MARK, RECOMPILE_MARK + COMPILE_MARK, 1))


def bake(clone: Path, *, cold: bool) -> dict[str, object]:
    """One timed bake of feiteng from the clone's committed bake file, its base the local stand-in;
    each step's seconds from its progress."""
    cmd = [
        DOCKER, "buildx", "bake", "--progress=plain", "--file", str(clone / "docker-bake.hcl"),
        "--set", f"feiteng.args.BASE_IMAGE={standin_ref(FEITENG_BASE, default_registry())}",
        "--set", "feiteng.output=type=cacheonly",
    ]  # fmt: skip
    if cold:
        # Every step runs again, every cache mount fresh. buildx 0.13's bake drops
        # `--set T.no-cache-filter=...` silently (`bake --print` lacks it): all or nothing.
        cmd += ["--set", "feiteng.no-cache=true"]
    cmd.append("feiteng")
    print("+", " ".join(cmd), flush=True)
    started = time.monotonic()
    names: dict[str, str] = {}
    kinds: dict[str, str] = {}  # step name → "compile" | "apt", for the llama.cpp stages' steps
    steps: dict[str, float] = {}
    ccache: list[str] = []
    with subprocess.Popen(cmd, cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            if step := STEP.match(line):
                name = names.setdefault(step["n"], f"#{step['n']} {step['what']} {step['cmd'][:60]}")
                if "llama-" in step["what"]:
                    # The step line holds the whole command (its continuation lines joined).
                    if COMPILED.search(step["cmd"]):
                        kinds[name] = "compile"
                    elif "apt-get install" in step["cmd"]:
                        kinds[name] = "apt"
            elif done := DONE.match(line):
                name = names.get(done["n"], f"#{done['n']}")
                steps[name] = max(steps.get(name, 0.0), float(done["s"]))
            elif hit := CCACHE_LINE.match(line):
                ccache.append(hit["line"])
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"bake failed (exit {proc.returncode})")
    compile_steps = {k: v for k, v in steps.items() if kinds.get(k) == "compile"}
    apt_steps = {k: v for k, v in steps.items() if kinds.get(k) == "apt"}
    if not compile_steps:
        raise SystemExit("no compile step found in bake's progress (did the Dockerfile's compile step change?)")
    return {
        "wall_s": round(wall, 1),
        "steps_s": steps,
        "compile_s": compile_steps,
        "apt_s": apt_steps,
        "ccache": ccache,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="601090d", help="the revision before the change (default 601090d)")
    parser.add_argument("--wait-minutes", type=float, default=20, help="wait this long for a quiet machine (0: no)")
    parser.add_argument(
        "--after-only",
        action="store_true",
        help="skip the cold build of --before (its figures are in docs/benchmarks.md §6 and this file's history)",
    )
    parser.add_argument(
        "--warm-only",
        action="store_true",
        help="only the compile again with ccache kept (after a build of HEAD filled ccache's mount)",
    )
    args = parser.parse_args(argv)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    phases: list[dict[str, object]] = []
    runs: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="xcforge-bench-feiteng-") as tmp:
        work = Path(tmp)
        after = prepare(head, work)
        plan = [("after: cold", after, True), ("after: the compile again, ccache kept", after, False)]
        if args.warm_only:
            plan = plan[1:]
        elif not args.after_only:
            plan.insert(0, ("before: cold", prepare(args.before, work), True))
        for name, clone, cold in plan:
            with measuring(phases, name, limit_s=args.wait_minutes * 60):
                if not cold:
                    change_compile_step(clone)
                runs[name] = bake(clone, cold=cold)
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
            "before": None if args.after_only or args.warm_only else args.before,
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
