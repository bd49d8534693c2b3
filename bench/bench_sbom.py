"""What the SBOM step costs: reading every platform's layers out of a built OCI archive.

    .venv/bin/python bench/bench_sbom.py dist/<target>-….oci.tar [more archives]

Times `xcforge.attest.attestations.write_attestations` (gunzip of every layer, the dpkg and dist-info
files kept, CycloneDX serialization and schema validation) per archive, three runs each, into a
throw-away directory. Writes bench/results/bench_sbom.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, fmt_bytes, fmt_time, log, markdown_table, write_results

sys.path.insert(0, str(REPO))

from xcforge.attest.attestations import write_attestations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archives", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows, results = [], []
    for archive in args.archives:
        times = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as out:
                started = time.perf_counter()
                written = write_attestations(archive, Path(out), "bench/image")
                times.append(time.perf_counter() - started)
            log(f"{archive.name} run {run + 1}: {times[-1]:.2f} s")
        components = {w.platform: w.components for w in written}
        size = archive.stat().st_size
        results.append({"archive": archive.name, "bytes": size, "seconds": times, "components": components})
        rows.append(
            [
                archive.name,
                fmt_bytes(size),
                ", ".join(f"{p}: {n}" for p, n in components.items()),
                fmt_time(statistics.median(times)),
                f"{size / statistics.median(times) / 2**20:.0f} MiB/s",
            ]
        )
    write_results("bench_sbom", {"archives": results})
    print(markdown_table(["archive", "size", "components", "median", "throughput"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
