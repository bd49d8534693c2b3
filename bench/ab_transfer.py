"""A/B of the transfer steps' code, in-process: push, bundle and import of one packed model, each step
timed inside one Python process (no interpreter start in the figure), page cache evicted before each.

    .venv/bin/python bench/ab_transfer.py --old /path/to/old-checkout --size-mib 512 --rounds 4

--old is another checkout of this repository (e.g. `git worktree add /tmp/old HEAD~1`): each round runs
the old tree's code and this tree's code in turn, each in a fresh process of its own (so neither
warms the other's imports), against registries of their own, and prints the medians. The model is
made once and packed once by this tree (the archive format is the same on both sides).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

RUN = r"""
import json, os, sys, time
from pathlib import Path
tree, work, archive, keys = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
sys.path[:0] = [str(tree), str(tree / "images" / "engine" / "src")]
os.chdir(tree)
from tests.registry_process import RegistryProcess
from ocicore.push import push_layout
from xcforge.cli import main
sys.path.append(sys.argv[5])  # this checkout's bench/, after the tree's own paths
from _pagecache import evict

out = {}
with RegistryProcess() as source, RegistryProcess() as inside:
    evict(archive)
    t = time.perf_counter()
    digest = push_layout(archive, f"{source.address}/ab/m", ["1"], progress=lambda m: None)
    out["push"] = time.perf_counter() - t
    bundle = work / "b.tar"
    sign = ["--sm2-key", str(keys / "sm2.key"), "--no-audit"]
    evict(Path(source._tmp.name))
    t = time.perf_counter()
    assert main(["bundle", "--model", f"{source.address}/ab/m@{digest}", "--out", str(bundle), *sign,
                 "--report", str(work / "none")]) == 0
    out["bundle"] = time.perf_counter() - t
    evict(bundle)
    t = time.perf_counter()
    assert main(["import", str(bundle), "--registry", inside.address, "--sm2-key", str(keys / "sm2.pub"),
                 "--no-audit"]) == 0
    out["import"] = time.perf_counter() - t
    bundle.unlink()
print("RESULT " + json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the other checkout (the 'before')")
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/xcforge-ab-transfer"))
    opts = parser.parse_args()
    sys.path[:0] = [str(HERE), str(HERE / "bench")]
    from bench_model import make_model

    from tests.model.model_helpers import write_keys

    work = opts.work
    if work.exists():
        raise SystemExit(f"{work} exists; remove it or give another --work")
    work.mkdir(parents=True)
    try:
        make_model(work / "model", opts.size_mib * 1024 * 1024)
        keys = work / "keys"
        write_keys(keys)
        python = str(HERE / ".venv" / "bin" / "python")
        archive = work / "m.model.oci.tar"
        subprocess.run([python, str(HERE / "build.py"), "model", "pack", str(work / "model"), "--name", "ab:1",
                        "--out", str(archive), "--chunk-size", "128M", "--no-audit"], check=True,
                       capture_output=True)  # fmt: skip
        times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
        for round_ in range(opts.rounds):
            order = [("old", opts.old), ("new", HERE)] if round_ % 2 == 0 else [("new", HERE), ("old", opts.old)]
            for label, tree in order:
                scratch = work / f"run-{label}"
                scratch.mkdir()
                argv = [python, "-c", RUN, str(tree), str(scratch), str(archive), str(keys), str(HERE / "bench")]
                done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tree)
                if done.returncode != 0:
                    raise SystemExit(f"{label}: {done.stderr[-3000:]}")
                result = json.loads(done.stdout.split("RESULT ", 1)[1])
                for step, seconds in result.items():
                    times[label].setdefault(step, []).append(seconds)
                print(f"round {round_ + 1} {label}: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.items()),
                      flush=True)  # fmt: skip
                subprocess.run(["rm", "-rf", str(scratch)], check=True)
        size = archive.stat().st_size
        print(f"\nmodel {size / 1e6:.0f} MB, {opts.rounds} rounds, load {os.getloadavg()[0]:.1f}; medians:")
        for step in times["new"]:
            old, new = statistics.median(times["old"][step]), statistics.median(times["new"][step])
            print(f"  {step:7s} old {old:6.2f} s ({size / old / 1e6:5.0f} MB/s)  new {new:6.2f} s "
                  f"({size / new / 1e6:5.0f} MB/s)  {old / new:.2f}x")  # fmt: skip
        print("RAW " + json.dumps({"size": size, "times": times, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ")}))
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
