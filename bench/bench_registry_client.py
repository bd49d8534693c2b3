"""Registry client benchmark (issue 22): ocicore's client next to oras-py and skopeo, on real registries.

    .venv/bin/python bench/bench_registry_client.py [--total-mb 50] [--platforms 2] [--layers 3]
                                                    [--runs 3] [--startup-runs 10] [--large-mb 300]
                                                    [--oras-python /tmp/oras-eval/bin/python]
                                                    [--no-probes] [--wait-minutes 5]     # ~2 min

oras-py is not a dependency of xcforge: it lives in a throwaway venv of its own
(`python3 -m venv /tmp/oras-eval && /tmp/oras-eval/bin/pip install oras`); without it its rows are
skipped. skopeo is the distribution's binary. Every registry is Debian's `docker-registry` on a free
loopback port (tests/registry_process.py), with its own temporary storage.

The source registry holds one multi-platform OCI index: `--platforms` images of `--layers` gzip tar
layers each (random content, so gzip does not shrink it), the first layer shared by all platforms as
our targets share the engine's; `--total-mb` is the sum of the distinct layers. Measured:

1. Copying that index with every platform to a fresh, empty registry (`--runs` times, each a new
   destination), every tool as a fresh process, as a command line or CI step would run it:
   - ocicore: `signing.promote.promote` (the copier `build.py promote` runs: manifests by digest,
     blobs streamed through a spool file, tags listed for signatures);
   - skopeo: `skopeo copy --all --src-tls-verify=false --dest-tls-verify=false docker://… docker://…`;
   - oras-py: its one way of moving an index with all its platforms,
     `oras.layout.NewLayoutFromRegistry` (registry → OCI layout on disk) then
     `Layout.push_to_registry` (layout → registry); oras-py's `Registry.pull`/`push` handle one
     artifact manifest of files, not an image index.
   Each copy is checked: the destination tag resolves to the source digest and every blob is there.
2. The same copy within one registry (repository → new repository): who mounts blobs instead of
   uploading them again. skopeo mounts only from locations its blob-info cache
   (/var/lib/containers/cache) learnt in earlier runs, which here are the copies of part 1; a probe
   (part 5) shows its first copy out of a repository on a fresh registry.
3. Process start and import: `python -c pass`, `import ocicore.registry`, `import signing.promote`,
   `import oras.client` (+ `oras.layout`), each as a new process, `-X importtime`'s cumulative figure
   for the module, and `skopeo --version`.
4. Large layers (`--large-mb`, default 300: 2 platforms × 2 layers, 3 distinct), one copy per tool:
   peak memory when a layer is larger than a spool buffer.
5. Probes (one run each): a Docker v2 manifest list (what buildx and Docker Hub serve), a source
   blob corrupted in the registry's storage (same size, different bytes: who notices?), and
   skopeo's first and second same-registry copy on a fresh registry (`--debug`: mount requests,
   PATCH uploads).

Prints Markdown tables; writes bench/results/registry_client.json.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from _common import (
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

from ocicore.registry import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_MANIFEST,
    RegistryClient,
    canonical_json,
    sha256_digest,
)
from tests.registry_process import RegistryProcess

REPOSITORY = "xcforge-bench/registry-client"
TAG = "bench"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
VENV_PYTHON = str(REPO / ".venv" / "bin" / "python")
ARCHES = ("amd64", "arm64", "ppc64le", "s390x", "riscv64", "386", "arm", "mips64le")

# Run by .venv/bin/python in the checkout: the copy `build.py promote` makes.
OCICORE_WORKER = r"""
import json, sys, time
t0 = time.perf_counter()
from signing.promote import promote
t1 = time.perf_counter()
try:
    result = promote(sys.argv[1], sys.argv[2])
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:1000]}))
    sys.exit(1)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "copy_s": t2 - t1, "manifests": result.manifests, "blobs": result.blobs}))
"""

# Run by the oras-py venv's python: registry -> OCI layout -> registry (or, "pull", the first half
# only, then the layout's blobs checked against their names).
ORAS_WORKER = r"""
import hashlib, json, logging, os, sys, tempfile, time
t0 = time.perf_counter()
import oras.client, oras.layout, oras.provider, oras.version
t1 = time.perf_counter()
from oras.logger import logger
logger.set_level(logging.ERROR)
mode, source, target, tag = sys.argv[1:5]
out = {"import_s": t1 - t0, "version": oras.version.__version__}
try:
    with tempfile.TemporaryDirectory() as tmp:
        layout = oras.layout.NewLayoutFromRegistry(os.path.join(tmp, "layout"), oras.provider.Registry(insecure=True),
                                                   source, tag=tag)
        t2 = time.perf_counter()
        out["pull_s"] = t2 - t1
        if mode == "pull":
            blobs = os.path.join(tmp, "layout", "blobs", "sha256")
            out["layout_blobs"] = len(os.listdir(blobs))
            out["layout_blobs_not_matching_their_digest"] = sum(
                hashlib.sha256(open(os.path.join(blobs, name), "rb").read()).hexdigest() != name
                for name in os.listdir(blobs))
        else:
            layout.push_to_registry(oras.provider.Registry(insecure=True), target, tag=tag)
            out["push_s"] = time.perf_counter() - t2
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"[:1000]
out["copy_s"] = time.perf_counter() - t1
print(json.dumps(out))
sys.exit(1 if "error" in out else 0)
"""


# --------------------------------------------------------------------------- the image


@dataclass(frozen=True)
class Image:
    digest: str
    manifests: tuple[str, ...]
    blobs: tuple[str, ...]  # distinct layers and configs
    layer_bytes: int  # distinct layers, compressed


def gzip_layer(name: str, size: int) -> tuple[bytes, str]:
    """A gzip'd tar of one file of `size` random bytes, and its diff_id."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = size, 0o644
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    plain = raw.getvalue()
    return gzip.compress(plain, compresslevel=1, mtime=0), sha256_digest(plain)


class _Shape(TypedDict):
    """push_index's size arguments."""

    platforms: int
    layers: int
    total: int


def push_index(
    client: RegistryClient, repository: str, tag: str, *, platforms: int, layers: int, total: int, docker: bool = False
) -> Image:
    """An index over `platforms` images of `layers` layers each; layer 0 is shared by all of them."""
    layer_type, config_type = (DOCKER_LAYER_GZIP, DOCKER_CONFIG) if docker else (OCI_LAYER_GZIP, OCI_CONFIG)
    manifest_type, index_type = (DOCKER_MANIFEST, DOCKER_MANIFEST_LIST) if docker else (OCI_MANIFEST, OCI_INDEX)
    distinct = 1 + platforms * (layers - 1)
    each = max(1024, total // distinct)
    blobs, layer_bytes = [], 0

    def layer(name: str) -> tuple[dict[str, Any], str]:
        nonlocal layer_bytes
        data, diff_id = gzip_layer(name, each)
        layer_bytes += len(data)
        blobs.append(client.push_blob(repository, data))
        return {"mediaType": layer_type, "digest": blobs[-1], "size": len(data)}, diff_id

    shared = layer("opt/shared")
    entries, manifests = [], []
    for arch in ARCHES[:platforms]:
        own = [layer(f"opt/{arch}/{n}") for n in range(1, layers)]
        config = canonical_json(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Cmd": ["/bin/true"]},
                "rootfs": {"type": "layers", "diff_ids": [shared[1], *(d for _, d in own)]},
            }
        )
        blobs.append(client.push_blob(repository, config))
        manifest = canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": manifest_type,
                "config": {"mediaType": config_type, "digest": blobs[-1], "size": len(config)},
                "layers": [shared[0], *(d for d, _ in own)],
            }
        )
        digest = client.put_manifest(repository, sha256_digest(manifest), manifest, manifest_type)
        manifests.append(digest)
        entries.append(
            {
                "mediaType": manifest_type,
                "digest": digest,
                "size": len(manifest),
                "platform": {"os": "linux", "architecture": arch},
            }
        )
    index = canonical_json({"schemaVersion": 2, "mediaType": index_type, "manifests": entries})
    digest = client.put_manifest(repository, tag, index, index_type)
    return Image(digest, tuple(manifests), tuple(dict.fromkeys(blobs)), layer_bytes)


def verify_copy(client: RegistryClient, repository: str, image: Image) -> str:
    """'ok' when the tag resolves to the source digest and every manifest and blob is there."""
    try:
        digest = client.resolve(repository, TAG)
    except Exception as exc:  # a failed copy is a result here
        return f"tag missing: {exc}"[:120]
    if digest != image.digest:
        return f"digest changed: {digest}"
    missing = [d for d in image.manifests if client.head_manifest(repository, d) is None]
    missing += [d for d in image.blobs if not client.blob_exists(repository, d)]
    return "ok" if not missing else f"{len(missing)} missing"


# --------------------------------------------------------------------------- running a tool


def _high_water_kib(pid: int) -> int | None:
    """VmHWM of a running process: the peak RSS of its own address space. (wait4's ru_maxrss would
    not do: a child that subprocess starts through vfork inherits this process's peak at exec.)"""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_measured(cmd: list[str], *, cwd: str | None = None, timeout: float = 600) -> dict[str, Any]:
    """Run cmd as a new process: wall time, peak RSS (polled every 2 ms), exit status, stdout and stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline, peak = started + timeout, 0
        while True:
            peak = max(peak, _high_water_kib(proc.pid) or 0)
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, _ = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "wall_s": wall,
            "maxrss_kib": peak,
            "rc": proc.returncode,
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


def worker_json(run: dict[str, Any]) -> dict[str, Any]:
    lines = [line for line in str(run["stdout"]).splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def first_error_line(run: dict[str, Any]) -> str:
    text = str(run.get("stderr") or "") + "\n" + str(run.get("stdout") or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line.lower() or "error" in line.lower()]
    return str(_short((fatal or lines or ["?"])[-1]))[:500]


def _short(error: object) -> object:
    """An error without the upload session's state token (hundreds of base64 characters)."""
    return re.sub(r"\?_state=[^:\s]*", "?_state=…", error) if isinstance(error, str) else error


def copy_with(tool: str, source: str, target: str, oras_python: str | None) -> dict[str, Any]:
    """One copy of `source` (host/repo@digest) to `target` (host/repo:tag) as a new process."""
    if tool == "ocicore":
        run = run_measured([VENV_PYTHON, "-c", OCICORE_WORKER, source, target], cwd=str(REPO))
    elif tool == "skopeo":
        run = run_measured(
            [
                "skopeo",
                "copy",
                "--all",
                "--src-tls-verify=false",
                "--dest-tls-verify=false",
                f"docker://{source}",
                f"docker://{target}",
            ]
        )
    elif tool == "oras-py":
        with tempfile.TemporaryDirectory() as cwd:
            run = run_measured([str(oras_python), "-c", ORAS_WORKER, "copy", source, target, TAG], cwd=cwd)
    else:
        raise ValueError(tool)
    inner = worker_json(run) if tool != "skopeo" else {}
    result = {"tool": tool, "process_s": run["wall_s"], "maxrss_kib": run["maxrss_kib"], "rc": run["rc"], **inner}
    if run["rc"] != 0:
        result["error"] = str(_short(inner["error"]))[:500] if inner.get("error") else first_error_line(run)
    return result


# --------------------------------------------------------------------------- the measurements


def bench_copies(
    tools: list[str], source: RegistryProcess, image: Image, runs: int, oras_python: str | None
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Each tool, `runs` times, into a fresh registry each time; then within the source registry."""
    cross: dict[str, list[dict[str, Any]]] = {tool: [] for tool in tools}
    for n in range(runs):
        for tool in tools:  # interleaved, so a slow minute of the machine hits every tool alike
            with RegistryProcess() as target:
                result = copy_with(
                    tool,
                    f"{source.address}/{REPOSITORY}@{image.digest}",
                    f"{target.address}/{REPOSITORY}:{TAG}",
                    oras_python,
                )
                result["verified"] = verify_copy(RegistryClient(target.address), REPOSITORY, image)
            cross[tool].append(result)
            log(f"copy {n + 1}/{runs} {tool}: {fmt_time(float(result['process_s']))} ({result['verified']})")
    within: dict[str, list[dict[str, Any]]] = {tool: [] for tool in tools}
    client = RegistryClient(source.address)
    for n in range(runs):
        for tool in tools:
            repository = f"xcforge-bench/copy-{tool.replace('-', '')}-{n}"
            result = copy_with(
                tool,
                f"{source.address}/{REPOSITORY}@{image.digest}",
                f"{source.address}/{repository}:{TAG}",
                oras_python,
            )
            result["verified"] = verify_copy(client, repository, image)
            within[tool].append(result)
            log(f"same-registry copy {n + 1}/{runs} {tool}: {fmt_time(float(result['process_s']))}")
    return cross, within


def bench_large(tools: list[str], total: int, oras_python: str | None) -> tuple[Image, dict[str, list[dict[str, Any]]]]:
    """One copy per tool of an index with large layers (2 platforms × 2 layers, 3 distinct): what
    streaming means for memory."""
    out: dict[str, list[dict[str, Any]]] = {}
    with RegistryProcess() as source:
        image = push_index(RegistryClient(source.address), REPOSITORY, TAG, platforms=2, layers=2, total=total)
        for tool in tools:
            with RegistryProcess() as target:
                result = copy_with(
                    tool,
                    f"{source.address}/{REPOSITORY}@{image.digest}",
                    f"{target.address}/{REPOSITORY}:{TAG}",
                    oras_python,
                )
                result["verified"] = verify_copy(RegistryClient(target.address), REPOSITORY, image)
            out[tool] = [result]
            peak = fmt_bytes(int(result["maxrss_kib"]) * 1024)
            log(f"large copy {tool}: {fmt_time(float(result['process_s']))}, peak {peak}")
    return image, out


def importtime_cumulative(python: str, module: str, cwd: str) -> float | None:
    """`-X importtime`'s cumulative seconds for `module` (its own line), in a new process."""
    proc = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {module}"], cwd=cwd, capture_output=True, text=True
    )
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module and parts[1].isdigit():
            return int(parts[1]) / 1e6
    return None


def bench_startup(runs: int, oras_python: str | None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as elsewhere:
        cases = [
            ("python -c pass (.venv)", [VENV_PYTHON, "-c", "pass"], str(REPO), None),
            ("import ocicore.registry", [VENV_PYTHON, "-c", "import ocicore.registry"], str(REPO), "ocicore.registry"),
            ("import signing.promote", [VENV_PYTHON, "-c", "import signing.promote"], str(REPO), "signing.promote"),
        ]
        if oras_python:
            cases += [
                ("python -c pass (oras venv)", [oras_python, "-c", "pass"], elsewhere, None),
                ("import oras.client", [oras_python, "-c", "import oras.client"], elsewhere, "oras.client"),
                (
                    "import oras.client, oras.layout",
                    [oras_python, "-c", "import oras.client, oras.layout"],
                    elsewhere,
                    "oras.layout",
                ),
            ]
        if shutil.which("skopeo"):
            cases.append(("skopeo --version", ["skopeo", "--version"], elsewhere, None))
        rows = []
        for name, cmd, cwd, module in cases:
            run_measured(cmd, cwd=cwd)  # warm the page cache
            walls = [float(run_measured(cmd, cwd=cwd)["wall_s"]) for _ in range(runs)]
            row = {"what": name, **summarize(walls), "maxrss_kib": run_measured(cmd, cwd=cwd)["maxrss_kib"]}
            if module:
                python = cmd[0]
                cumulative = [importtime_cumulative(python, module, cwd) for _ in range(runs)]
                known = [c for c in cumulative if c is not None]
                row["importtime_cumulative_s"] = sorted(known)[len(known) // 2] if known else None
            rows.append(row)
            log(f"startup {name}: {fmt_time(row['median_s'])}")
    return rows


def corrupt_blob(registry: RegistryProcess, digest: str) -> Path:
    """Flip bytes in the middle of a blob in the registry's filesystem storage (size unchanged)."""
    hexdigest = digest.split(":", 1)[1]
    path = Path(registry._tmp.name) / "data/docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))
    return path


def bench_probes(tools: list[str], oras_python: str | None) -> dict[str, dict[str, Any]]:
    probes: dict[str, dict[str, Any]] = {}
    small: _Shape = {"platforms": 2, "layers": 2, "total": 256 * 1024}

    with RegistryProcess() as source:
        image = push_index(RegistryClient(source.address), REPOSITORY, TAG, docker=True, **small)
        outcome = {}
        for tool in tools:
            with RegistryProcess() as target:
                result = copy_with(
                    tool,
                    f"{source.address}/{REPOSITORY}@{image.digest}",
                    f"{target.address}/{REPOSITORY}:{TAG}",
                    oras_python,
                )
                verified = verify_copy(RegistryClient(target.address), REPOSITORY, image)
            outcome[tool] = {
                "ok": result["rc"] == 0 and verified == "ok",
                "verified": verified,
                "error": result.get("error"),
            }
            log(f"probe docker manifest list, {tool}: {outcome[tool]}")
        probes["docker_v2_manifest_list"] = outcome

    with RegistryProcess() as source:
        image = push_index(RegistryClient(source.address), REPOSITORY, TAG, **small)
        corrupt_blob(source, image.blobs[0])  # the shared layer
        outcome = {}
        for tool in tools:
            with RegistryProcess() as target:
                result = copy_with(
                    tool,
                    f"{source.address}/{REPOSITORY}@{image.digest}",
                    f"{target.address}/{REPOSITORY}:{TAG}",
                    oras_python,
                )
                stored = RegistryClient(target.address).blob_exists(REPOSITORY, image.blobs[0])
            outcome[tool] = {
                "copy_refused": result["rc"] != 0,
                "corrupt_blob_at_destination": stored,
                "error": result.get("error"),
            }
            log(f"probe corrupt blob, {tool}: {outcome[tool]}")
        if oras_python:
            with tempfile.TemporaryDirectory() as cwd:
                run = run_measured(
                    [oras_python, "-c", ORAS_WORKER, "pull", f"{source.address}/{REPOSITORY}@{image.digest}", "-", TAG],
                    cwd=cwd,
                )
            pulled = worker_json(run)
            outcome["oras-py pull into a layout"] = {
                "pull_refused": run["rc"] != 0,
                "layout_blobs": pulled.get("layout_blobs"),
                "layout_blobs_not_matching_their_digest": pulled.get("layout_blobs_not_matching_their_digest"),
                "error": pulled.get("error"),
            }
            log(f"probe corrupt blob, oras-py pull only: {outcome['oras-py pull into a layout']}")
        probes["corrupt_source_blob"] = outcome

    if "skopeo" in tools:
        with RegistryProcess() as source:
            image = push_index(RegistryClient(source.address), REPOSITORY, TAG, **small)
            outcome = {}
            for n in (1, 2):
                run = run_measured(
                    [
                        "skopeo",
                        "--debug",
                        "copy",
                        "--all",
                        "--src-tls-verify=false",
                        "--dest-tls-verify=false",
                        f"docker://{source.address}/{REPOSITORY}@{image.digest}",
                        f"docker://{source.address}/xcforge-bench/skopeo-mount-{n}:{TAG}",
                    ]
                )
                lines = str(run["stderr"]).splitlines()
                outcome[f"copy {n}"] = {
                    "rc": run["rc"],
                    "mount_requests": sum("mount=" in line for line in lines),
                    "patch_uploads": sum("PATCH " in line for line in lines),
                    "blob_downloads": sum("Downloading /v2/" in line for line in lines),
                    "distinct_blobs": len(image.blobs),
                }
            log(f"probe skopeo same-registry mounts on a fresh registry: {outcome}")
            probes["skopeo_same_registry_fresh_registry"] = outcome
    return probes


# --------------------------------------------------------------------------- output


def versions(oras_python: str | None) -> dict[str, str]:
    out = {"skopeo": subprocess.run(["skopeo", "--version"], capture_output=True, text=True).stdout.strip()}
    registry = next(filter(None, map(shutil.which, ("docker-registry", "registry"))))
    out["registry"] = subprocess.run([registry, "--version"], capture_output=True, text=True).stdout.strip()
    script = "import importlib.metadata as m; print(m.version('requests'), m.version('urllib3'))"
    out["requests/urllib3 (.venv)"] = subprocess.run(
        [VENV_PYTHON, "-c", script], capture_output=True, text=True
    ).stdout.strip()
    if oras_python:
        script = "import importlib.metadata as m; print(m.version('oras'), m.version('requests'), m.version('urllib3'))"
        out["oras/requests/urllib3 (oras venv)"] = subprocess.run(
            [oras_python, "-c", script], capture_output=True, text=True
        ).stdout.strip()
    return out


def copy_rows(results: dict[str, list[dict[str, Any]]], layer_bytes: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for tool, runs in results.items():
        good = [r for r in runs if r["rc"] == 0 and r["verified"] == "ok"]
        if not good:
            rows.append(
                [tool, "failed", "-", "-", "-", "-", "-", str(runs[0].get("error") or runs[0]["verified"])[:80]]
            )
            continue
        process = summarize([float(r["process_s"]) for r in good])
        copy = summarize([float(r["copy_s"]) for r in good]) if all("copy_s" in r for r in good) else None
        peak = max(int(r["maxrss_kib"]) for r in good) * 1024
        note = f"{len(good)}/{len(runs)} verified"
        if tool == "oras-py" and all("push_s" in r for r in good):
            pull = summarize([float(r["pull_s"]) for r in good])["median_s"]
            push = summarize([float(r["push_s"]) for r in good])["median_s"]
            note += f"; pull {fmt_time(pull)} + push {fmt_time(push)}"
        rows.append(
            [
                tool,
                fmt_time(process["median_s"]),
                f"{fmt_time(process['min_s'])} – {fmt_time(process['max_s'])}",
                fmt_time(copy["median_s"]) if copy else "(whole process)",
                f"{layer_bytes / process['median_s'] / 1e6:.0f} MB/s",
                fmt_bytes(peak),
                fmt_time(float(good[0]["import_s"])) if "import_s" in good[0] else "-",
                note,
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-mb", type=float, default=50, help="sum of the distinct layers, MB")
    parser.add_argument("--platforms", type=int, default=2, choices=range(1, len(ARCHES) + 1))
    parser.add_argument("--layers", type=int, default=3, help="layers per platform (the first shared)")
    parser.add_argument("--runs", type=int, default=3, help="copies per tool (each into a fresh registry)")
    parser.add_argument("--startup-runs", type=int, default=10)
    parser.add_argument("--oras-python", default="/tmp/oras-eval/bin/python", help="a python with oras installed")
    parser.add_argument("--large-mb", type=float, default=300, help="one copy of 3 layers this large in all (0: skip)")
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--wait-minutes", type=float, default=5, help="wait this long for a quiet machine (0: no)")
    args = parser.parse_args(argv)
    if args.layers < 1:
        parser.error("--layers must be at least 1")

    oras_python = args.oras_python if Path(args.oras_python).is_file() else None
    if oras_python is None:
        log(f"no oras-py at {args.oras_python}: its rows are skipped")
    tools = ["ocicore", "skopeo", "oras-py"] if oras_python else ["ocicore", "skopeo"]
    if shutil.which("skopeo") is None:
        log("no skopeo binary: its rows are skipped")
        tools.remove("skopeo")
    wait_s = args.wait_minutes * 60
    phases: list[dict[str, Any]] = []
    total = int(args.total_mb * 1e6)

    with RegistryProcess() as source:
        image = push_index(
            RegistryClient(source.address), REPOSITORY, TAG, platforms=args.platforms, layers=args.layers, total=total
        )
        log(f"source {source.address}/{REPOSITORY}@{image.digest}: {fmt_bytes(image.layer_bytes)} in layers")
        with measuring(phases, "copies", limit_s=wait_s):
            cross, within = bench_copies(tools, source, image, args.runs, oras_python)
    large_image: Image | None = None
    large: dict[str, list[dict[str, Any]]] = {}
    if args.large_mb > 0:
        with measuring(phases, "large layers", limit_s=wait_s):
            large_image, large = bench_large(tools, int(args.large_mb * 1e6), oras_python)
    with measuring(phases, "startup", limit_s=wait_s):
        startup = bench_startup(args.startup_runs, oras_python)
    probes = {} if args.no_probes else bench_probes(tools, oras_python)

    header = ["tool", "process (median)", "range", "copy in-process", "throughput", "peak RSS", "import", "note"]
    image_line = (
        f"{args.platforms} platforms × {args.layers} layers (first shared), {len(image.blobs)} distinct blobs, "
        f"{fmt_bytes(image.layer_bytes)} of layers; {args.runs} runs per tool"
    )
    print(f"## bench_registry_client ({load_note(phases)})\n\n{image_line}\n")
    for title, results in (
        ("Copy the index with every platform to a fresh registry", cross),
        ("The same copy within one registry (new repository)", within),
    ):
        print(f"### {title}\n\n{markdown_table(header, copy_rows(results, image.layer_bytes))}\n")
    if large_image is not None:
        print(
            f"### Large layers: 3 distinct layers, {fmt_bytes(large_image.layer_bytes)} in all (one copy each)\n\n"
            f"{markdown_table(header, copy_rows(large, large_image.layer_bytes))}\n"
        )
    startup_rows = [
        [
            r["what"],
            fmt_time(r["median_s"]),
            fmt_time(r["p95_s"]),
            fmt_time(r.get("importtime_cumulative_s")),
            fmt_bytes(int(r["maxrss_kib"]) * 1024),
        ]
        for r in startup
    ]
    print(
        "### Process start and import (new process each)\n\n"
        + markdown_table(["what", "median", "p95", "-X importtime (cumulative)", "peak RSS"], startup_rows)
        + "\n"
    )
    for name, outcome in probes.items():
        print(f"### Probe: {name}\n")
        print(
            markdown_table(
                ["tool", "outcome"], [[tool, json.dumps(o, ensure_ascii=False)] for tool, o in outcome.items()]
            )
        )
        print()

    write_results(
        "registry_client",
        {
            "parameters": {
                "platforms": args.platforms,
                "layers_per_platform": args.layers,
                "shared_layers": 1,
                "total_mb": args.total_mb,
                "runs": args.runs,
                "startup_runs": args.startup_runs,
            },
            "image": {
                "distinct_blobs": len(image.blobs),
                "manifests": len(image.manifests) + 1,
                "layer_bytes": image.layer_bytes,
            },
            "versions": versions(oras_python),
            "phases": phases,
            "copy_to_fresh_registry": cross,
            "copy_within_registry": within,
            "large_layers": {
                "layer_bytes": large_image.layer_bytes if large_image else None,
                "distinct_blobs": len(large_image.blobs) if large_image else None,
                "copy_to_fresh_registry": large,
            },
            "startup": startup,
            "probes": probes,
            "note": (
                "every copy is a new process; process_s is its wall time, copy_s the copy alone (Python tools); "
                "skopeo's same-registry copies ran after the cross-registry ones had filled its blob-info cache"
            ),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
