"""Model artifacts against the disk: pack, sign, push, bundle, import, unpack and verify (issue 34).

    .venv/bin/python bench/bench_model.py [--size-gib 4] [--rounds 3] [--work DIR] [--wait-seconds 60]

Makes a safetensors model of --size-gib with random weights (two shards, config.json, a tokenizer
file) under --work, then measures, in each of --rounds rounds, every step an operator runs:

1. `build.py model pack DIR --name … --chunk-size 512M` (reads the model, writes the archive);
2. `build.py model sign ARCHIVE --sm2-key --cosign-key` (reads the archive's index only: constant);
3. `build.py model pack … --registry R --push` into a registry process of its own (distribution 2.8,
   storage under --work, tests/registry_process.py), then `build.py bundle --model R/…@sha256:…`
   (reads the registry's blobs, writes the bundle) and `build.py import BUNDLE --registry R2`
   (reads and verifies the bundle, writes a second registry);
4. `build.py model unpack ARCHIVE DIR` (reads the archive, writes the files, every chunk checked);
5. the launcher's check, `xcforge_engine.modelverify.verify_model` on the unpacked directory, cold
   (every file hashed), and again (the restart: the verified-state record, nothing hashed);
6. the reference for the steps that write into a registry: `curl` uploading the model's files as
   blobs (monolithic PUT with the digest, the files side by side) into a registry process of its
   own, i.e. what that registry ingests with the leanest client there is. push and import are also
   compared with it (`ratio_to_disk_and_registry`: push over pack + this, import over its verify
   read + this), since no client can write into a registry faster than the registry takes it.

Every step is a new process where an operator's is (`build.py`), so Python's start is in the figure.
Before every step the files it reads are evicted from the page cache (posix_fadvise DONTNEED after
fsync: this VM cannot drop caches), so each one reads from the disk. The disk's own figures come
from `dd` at the start of every round: write `bs=4M conv=fdatasync`, read `bs=4M iflag=direct` (the
page cache bypassed); this VM's disk gave 310 MB/s and 1.5 GB/s minutes apart, so each round is
compared with its own dd. A step's "disk floor" is the time dd would need for the same bytes: bytes
read / dd read + bytes written / dd write. dd's write figure is durable (fdatasync), so a step is
compared the same way: its time until it returns plus the time to fsync what it wrote (`durable`).
The ratio is the median over rounds of durable time / that round's floor (the goal: at most 1.5).
The time until the command returns is reported beside it: on a machine whose page cache absorbs the
writes that is what an operator waits for, and it can be under the floor. Writes
bench/results/model.json and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import REPO, load_note, log, markdown_table, measuring, write_results
from _pagecache import evict, files_under, fsync_all

sys.path.insert(0, str(REPO / "images" / "engine" / "src"))

from tests.registry_process import RegistryProcess

MiB = 1024 * 1024
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable


def dd(args: list[str]) -> float:
    """MB/s as dd reports it (its last line: `… bytes … copied, S s, R MB/s`), computed from bytes/s."""
    done = subprocess.run(["dd", *args], capture_output=True, text=True, check=True)
    match = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", done.stderr)
    assert match, done.stderr
    return int(match[1]) / float(match[2]) / 1e6


def disk_speed(work: Path, size_mib: int) -> dict[str, float]:
    probe = work / "dd.probe"
    write = dd(["if=/dev/zero", f"of={probe}", "bs=4M", f"count={size_mib // 4}", "conv=fdatasync"])
    evict(probe)
    read = dd([f"if={probe}", "of=/dev/null", "bs=4M", "iflag=direct"])
    probe.unlink()
    return {"write_MBps": round(write, 1), "read_MBps": round(read, 1)}


def make_model(root: Path, size: int) -> None:
    root.mkdir(parents=True)
    (root / "config.json").write_text(
        json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "torch_dtype": "bfloat16"})
    )
    (root / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {str(i): i for i in range(20000)}}}))
    for index in (1, 2):
        elements = size // 2 // 2  # bf16
        header = json.dumps(
            {"weight": {"dtype": "BF16", "shape": [elements // 4096, 4096], "data_offsets": [0, elements * 2]}}
        ).encode()
        with (root / f"model-0000{index}-of-00002.safetensors").open("wb") as fh:
            fh.write(len(header).to_bytes(8, "little") + header)
            left = (elements // 4096) * 4096 * 2
            while left:
                n = min(left, 64 * MiB)
                fh.write(os.urandom(n))
                left -= n
            fh.flush()
            os.fsync(fh.fileno())


def build_py(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PYTHON, str(REPO / "build.py"), *map(str, args)], capture_output=True, text=True, check=False, cwd=REPO
    )
    if done.returncode != 0:
        raise SystemExit(f"build.py {' '.join(map(str, args[:3]))} failed: {done.stderr[-2000:]}")
    return done


def curl_upload(registry: str, files: dict[Path, str]) -> None:
    """Each file as a blob into `registry` (its repository `curl-reference`) with curl, all at once, as push does."""
    uploads = []
    for path, digest in files.items():
        started = subprocess.run(
            [
                "curl",
                "-sSf",
                "-D",
                "-",
                "-o",
                "/dev/null",
                "-X",
                "POST",
                f"http://{registry}/v2/curl-reference/blobs/uploads/",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        headers = started.splitlines()
        location = next(line.split(" ", 1)[1].strip() for line in headers if line.lower().startswith("location:"))
        url = location if location.startswith("http") else f"http://{registry}{location}"
        url += ("&" if "?" in url else "?") + f"digest={digest}"
        put = ["curl", "-sSf", "-o", "/dev/null", "-X", "PUT", "-H", "Content-Type: application/octet-stream"]
        uploads.append(subprocess.Popen([*put, "-T", str(path), url]))
    for upload in uploads:
        if upload.wait() != 0:
            raise SystemExit(f"curl upload into {registry} failed")


def _file_digest(path: Path) -> str:
    with path.open("rb") as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


class Steps:
    """Per step: the seconds until it returned, and until what it wrote was on the disk as well."""

    def __init__(self) -> None:
        self.returned: dict[str, list[float]] = {}
        self.durable: dict[str, list[float]] = {}

    def run(self, step: str, fn: Callable[..., object], *args: object, wrote: tuple[Path, ...] = ()) -> None:
        started = time.perf_counter()
        fn(*args)
        returned = time.perf_counter() - started
        fsync_all(*wrote)
        self.returned.setdefault(step, []).append(returned)
        self.durable.setdefault(step, []).append(time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/xcforge-bench-model"))
    parser.add_argument("--wait-seconds", type=float, default=60, help="wait this long for a quiet machine")
    opts = parser.parse_args()
    from xcforge_engine.modelverify import load_key, verify_model

    shutil.rmtree(opts.work, ignore_errors=True)
    opts.work.mkdir(parents=True)
    size = int(opts.size_gib * 1024 * MiB)
    model = opts.work / "model"
    log(f"making a {opts.size_gib:g} GiB random-weight safetensors model in {model}")
    make_model(model, size)
    model_bytes = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    keys = opts.work / "keys"
    build_py("keygen", "--sm2", "--cosign", "--no-password", "--out", keys, "--no-audit")
    phases: list[dict[str, Any]] = []
    disks: list[dict[str, float]] = []  # dd in every round: this VM's disk moves a lot between minutes
    steps = Steps()
    io = {  # bytes read, bytes written, per step (the model's size; the index/manifests are noise)
        "pack": (model_bytes, model_bytes),
        "sign": (0, 0),
        "push": (model_bytes, model_bytes),
        "bundle": (model_bytes, model_bytes),
        "import": (2 * model_bytes, model_bytes),  # verify pass, then the publish pass
        "unpack": (model_bytes, model_bytes),
        "verify (launcher, cold)": (model_bytes, 0),
        "verify (restart, unchanged)": (0, 0),
        "registry ingest (curl, reference)": (model_bytes, model_bytes),
    }
    blobs = {path: _file_digest(path) for path in files_under(model)}
    env = {"XCFORGE_VERIFY_CACHE": str(opts.work / "state"), "PATH": os.environ["PATH"]}
    trusted = [load_key(keys / "sm2.pub"), load_key(keys / "cosign.pub")]
    for round_no in range(1, opts.rounds + 1):
        archive, unpacked, bundle = opts.work / "m.oci.tar", opts.work / "unpacked", opts.work / "b.tar"
        for leftover in (archive, bundle, opts.work / "verify-bundle.py", opts.work / "state"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.exists():
                leftover.unlink()
        shutil.rmtree(archive.with_name(archive.name + ".signatures"), ignore_errors=True)
        shutil.rmtree(unpacked, ignore_errors=True)
        with measuring(phases, f"round {round_no}", limit_s=opts.wait_seconds):
            disks.append(disk_speed(opts.work, min(4096, int(model_bytes / MiB))))
        log(f"round {round_no}: disk write {disks[-1]['write_MBps']} MB/s, read {disks[-1]['read_MBps']} MB/s")
        with RegistryProcess() as source:
            with RegistryProcess() as inside:
                evict(model)
                name = ["--name", "bench-model:1"]
                steps.run(
                    "pack", build_py, "model", "pack", model, *name, "--out", archive, "--no-audit", wrote=(archive,)
                )
                sign_keys = ["--sm2-key", keys / "sm2.key", "--cosign-key", keys / "cosign.key"]
                steps.run("sign", build_py, "model", "sign", archive, *sign_keys, "--no-audit")
                evict(model)
                pushed, other = opts.work / "pushed.json", opts.work / "p.oci.tar"
                push = ["--registry", f"{source.address}/bench", "--push", "--json", pushed]
                source_storage, inside_storage = Path(source._tmp.name), Path(inside._tmp.name)
                steps.run(
                    "push",
                    build_py,
                    *("model", "pack", model, *name, "--out", other, *push, *sign_keys, "--no-audit"),
                    wrote=(other, source_storage),
                )
                other.unlink()
                ref = json.loads(pushed.read_text())["pushed"]
                evict(source_storage)  # the registry's storage: the bundle reads it from the disk
                no_report = ["--report", opts.work / "no-report"]
                steps.run(
                    "bundle",
                    build_py,
                    *("bundle", "--model", ref, "--out", bundle, *sign_keys, *no_report, "--no-audit"),
                    wrote=(bundle,),
                )
                evict(bundle)
                trust = ["--sm2-key", keys / "sm2.pub", "--cosign-key", keys / "cosign.pub"]
                steps.run(
                    "import",
                    build_py,
                    *("import", bundle, "--registry", inside.address, *trust, "--no-audit"),
                    wrote=(inside_storage,),
                )
            bundle.unlink()
            evict(archive)
            steps.run("unpack", build_py, "model", "unpack", archive, unpacked, "--no-audit", wrote=(unpacked,))
            evict(unpacked)
            steps.run("verify (launcher, cold)", verify_model, unpacked, trusted, env)
            steps.run("verify (restart, unchanged)", verify_model, unpacked, trusted, env)
            with RegistryProcess() as plain:
                evict(model)
                steps.run(
                    "registry ingest (curl, reference)",
                    curl_upload,
                    plain.address,
                    blobs,
                    wrote=(Path(plain._tmp.name),),
                )
        log(f"round {round_no}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in steps.durable.items()))
    rows = []
    results: dict[str, Any] = {}
    # push = pack, then the upload; import = the verify pass's read, then the upload (the reference's)
    against_registry: dict[str, tuple[int, str | None]] = {"push": (0, "pack"), "import": (model_bytes, None)}
    for step, seconds in steps.durable.items():
        read, written = io[step]
        floors = [read / (d["read_MBps"] * 1e6) + written / (d["write_MBps"] * 1e6) for d in disks]
        median = statistics.median(seconds)
        returned = statistics.median(steps.returned[step])
        ratios = [s / f for s, f in zip(seconds, floors, strict=True)] if floors[0] else []
        returned_ratios = [s / f for s, f in zip(steps.returned[step], floors, strict=True)] if floors[0] else []
        entry = {
            "seconds": [round(s, 2) for s in seconds],
            "median_s": round(median, 2),
            "spread_s": [round(min(seconds), 2), round(max(seconds), 2)],
            "returned_seconds": [round(s, 2) for s in steps.returned[step]],
            "returned_median_s": round(returned, 2),
            "bytes_read": read,
            "bytes_written": written,
            "model_MBps": round(model_bytes / median / 1e6, 1) if read or written else None,
            "disk_floor_s": [round(f, 2) for f in floors] if ratios else None,
            "ratios_to_disk": [round(r, 2) for r in ratios] if ratios else None,
            "ratio_to_disk": round(statistics.median(ratios), 2) if ratios else None,
            "returned_ratio_to_disk": round(statistics.median(returned_ratios), 2) if ratios else None,
        }
        results[step] = entry
        if step in against_registry:
            read_first, before = against_registry[step]
            ingest = steps.durable["registry ingest (curl, reference)"]
            first = steps.durable[before] if before else [read_first / (d["read_MBps"] * 1e6) for d in disks]
            mixed = [s / (f + i) for s, f, i in zip(seconds, first, ingest, strict=True)]
            entry["ratios_to_disk_and_registry"] = [round(r, 2) for r in mixed]
            entry["ratio_to_disk_and_registry"] = round(statistics.median(mixed), 2)
        rows.append(
            [
                step,
                f"{median:.2f} s ({min(seconds):.2f}–{max(seconds):.2f})",
                f"{returned:.2f} s",
                f"{entry['model_MBps']} MB/s" if entry["model_MBps"] else "-",
                f"{statistics.median(floors):.2f} s" if ratios else "-",
                f"{entry['ratio_to_disk']}× ({min(ratios):.2f}–{max(ratios):.2f})" if ratios else "-",
                f"{entry['returned_ratio_to_disk']}×" if ratios else "-",
            ]
        )
    print(f"\nModel: {model_bytes / 2**30:.2f} GiB ({model_bytes} bytes), {opts.rounds} rounds, {load_note(phases)}")
    writes, reads = [d["write_MBps"] for d in disks], [d["read_MBps"] for d in disks]
    print(
        f"Disk (dd, every round): write {statistics.median(writes)} MB/s ({min(writes)}–{max(writes)}, fdatasync),"
        f" read {statistics.median(reads)} MB/s ({min(reads)}–{max(reads)}, direct)\n"
    )
    header = [
        "step",
        "durable, median (min–max)",
        "returned",
        "model MB/s",
        "disk floor",
        "ratio (min–max)",
        "returned",
    ]
    print(markdown_table(header, rows))
    for step in against_registry:
        if "ratio_to_disk_and_registry" in results.get(step, {}):
            spread = results[step]["ratios_to_disk_and_registry"]
            print(
                f"{step} against the disk and the registry's own ingest (curl):"
                f" {results[step]['ratio_to_disk_and_registry']}× ({min(spread)}–{max(spread)})"
            )
    write_results(
        "model",
        {
            "model_bytes": model_bytes,
            "rounds": opts.rounds,
            "chunk_size": 512 * MiB,
            "disk": disks,
            "steps": results,
            "phases": phases,
        },
    )
    shutil.rmtree(opts.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
