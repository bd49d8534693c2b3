"""Builds through bake on named builders: the committed bake file, and a second Docker engine.

The second engine (scripts/second-engine.sh) runs on this machine in its own network namespace,
reached over TCP through a docker context: a real, separate BuildKit, standing in for a remote
build node. It builds linux/arm64 while the local engine builds linux/amd64; xcforge merges the two
into one index by digest, pushes, signs and smoke-tests it.

The multi-node builder (scripts/buildkit-farm.sh) is one buildx builder with two BuildKit daemons
behind the remote driver: node amd64 on this machine, node arm64 in the second engine's namespace.
buildx picks the node by platform; each node's own build history shows which platform it built.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ocicore.layout import OciArchive
from tests.builds.conftest import REPO, cli, manifest, tags
from tests.builds.conftest import SKELETON_SITE as SITE

pytestmark = pytest.mark.docker
NODE = "xcforge-node2"
FARM = "xcforge-farm"
FARM_SCRIPT = REPO / "scripts" / "buildkit-farm.sh"
BUILDCTL = Path("/var/lib/xcforge/buildkit/bin/buildctl")


def _report(dist: Path) -> dict[str, dict]:
    return {r["target"]: r for r in json.loads((dist / "report.json").read_text())["results"]}


def test_committed_bake_file_is_what_buildx_reads():
    """buildx itself parses docker-bake.hcl: every matrix target, its platforms and contexts."""
    from xcforge.config.matrix import load_matrix

    matrix = load_matrix(REPO / "matrix.yaml")
    printed = subprocess.run(
        ["docker", "buildx", "bake", "-f", "docker-bake.hcl", "--print"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    definition = json.loads(printed.stdout)
    assert set(definition["target"]) == set(matrix.targets)
    for name, target in matrix.targets.items():
        entry = definition["target"][name]
        assert entry["platforms"] == list(target.platforms)
        assert entry["context"] == f"images/{name}"
        assert set(entry["contexts"]) == {"engine", "support", "wheels", "sdists"}
        assert "index:io.xcforge.target=" + name in entry["annotations"]


def test_plain_bake_of_the_kept_files_rebuilds_the_same_image(tmp_path):
    """What xcforge ran is two files anyone can hand to `docker buildx bake` again."""
    dist = tmp_path / "dist"
    proc = cli("--target", "mlu", "--site", str(SITE), "--dist", str(dist), "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "buildx bake" in proc.stderr and "buildx build" not in proc.stderr
    assert (dist / "logs" / "mlu.log").read_text().count("#") > 10  # the whole BuildKit log
    metadata = json.loads(next((dist / "bake").glob("metadata-default-*.json")).read_text())
    assert metadata["mlu"]["containerimage.digest"] == _report(dist)["mlu"]["digest"]  # bake's word, checked
    run_file = next((dist / "bake").glob("run-default-*.json"))
    assert "pip.conf" not in run_file.read_text() or "src=" in run_file.read_text()  # paths, never contents
    again = tmp_path / "again.oci.tar"
    plain = subprocess.run(
        ["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", str(run_file),
         "--set", f"mlu.output=type=oci,dest={again}", "mlu"],
        cwd=REPO, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-3000:]
    from ocicore.layout import OciArchive

    ours = OciArchive(next(dist.glob("mlu-*.oci.tar"))).configs()
    theirs = OciArchive(again).configs()
    assert ours.keys() == theirs.keys() == {"linux/amd64"}
    for platform in ours:
        assert ours[platform]["rootfs"] == theirs[platform]["rootfs"]  # the same layers
        assert ours[platform]["config"]["Labels"] == theirs[platform]["config"]["Labels"]


@pytest.fixture(scope="module")
def second_engine():
    started = subprocess.run(["bash", str(REPO / "scripts" / "second-engine.sh"), "start", NODE],
                             capture_output=True, text=True, timeout=180)  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    yield NODE
    subprocess.run(["bash", str(REPO / "scripts" / "second-engine.sh"), "stop", NODE], capture_output=True, timeout=120)


def _site(tmp_path: Path, builders: dict[str, str]) -> Path:
    site = yaml.safe_load(SITE.read_text())
    site["builders"] = builders
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


def test_one_platform_per_engine_merged_signed_and_smoke_tested(second_engine, prefix, tmp_path):
    keys = tmp_path / "keys"
    assert cli("keygen", "--sm2", "--cosign", "--no-password", "--out", str(keys), "--no-audit").returncode == 0
    dist = tmp_path / "dist"
    site = _site(tmp_path, {"linux/arm64": second_engine})
    proc = cli(
        "--target", "ascend", "--site", str(site), "--registry", prefix + "-node2", "--push", "--dist", str(dist),
        "--sign", "--sm2-key", str(keys / "sm2.key"), "--cosign-key", str(keys / "cosign.key"), "--smoke",
        env={"XCFORGE_AUDIT_LOG": str(tmp_path / "audit.jsonl")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"--context {second_engine} buildx bake" in proc.stderr  # the arm64 half went to the node
    entry = _report(dist)["ascend"]
    where = {p["platform"]: p["builder"] for p in entry["platforms"]}
    assert where == {"linux/amd64": "default", "linux/arm64": second_engine}
    assert f"| ascend | linux/arm64 | {second_engine} | emulated (QEMU) |" in (dist / "report.md").read_text()
    repo = f"{prefix.split('/', 1)[1]}-node2/vllm-ascend"
    index = manifest(repo, entry["digest"])
    platforms = {m["platform"]["architecture"] for m in index["manifests"]}
    assert platforms == {"amd64", "arm64", "unknown"}  # both images and their provenance
    assert {s["scheme"] for s in entry["signatures"]} == {"sm2", "cosign"}
    assert {s["platform"] for s in entry["smoke"]} == {"linux/amd64", "linux/arm64"}
    assert {s["status"] for s in entry["smoke"]} <= {"pass", "skip"}, entry["smoke"]
    image = f"{entry['image_repo']}@{entry['digest']}"
    verified = cli("verify", image, "--sm2-key", str(keys / "sm2.pub"), "--cosign-key", str(keys / "cosign.pub"))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_unusable_builder_is_one_line_and_nothing_is_published(prefix, tmp_path):
    site = _site(tmp_path, {"linux/arm64": "no-such-node"})
    repo_prefix = prefix + "-nobuilder"
    proc = cli("--target", "ascend", "--site", str(site), "--registry", repo_prefix, "--push", "--dist",
               str(tmp_path / "dist"))  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "no-such-node" in last and "linux/arm64" in last and "Traceback" not in proc.stderr
    assert tags(f"{repo_prefix.split('/', 1)[1]}/vllm-ascend") == []


@pytest.fixture(scope="module")
def farm(second_engine):
    binary = subprocess.run(["bash", str(FARM_SCRIPT), "binary"], capture_output=True, text=True, timeout=1800)
    if binary.returncode != 0:  # no buildkitd and none could be built (no Go or no BuildKit source here)
        tail = (binary.stderr or binary.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"no buildkitd for the multi-node builder ({tail[0]}); see scripts/buildkit-farm.sh")
    started = subprocess.run(["bash", str(FARM_SCRIPT), "start", FARM], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "XCFORGE_NODE2": second_engine})  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    yield FARM
    subprocess.run(["bash", str(FARM_SCRIPT), "stop", FARM], capture_output=True, timeout=120)


def _built_platforms(address: str, netns: str | None) -> set[str]:
    """The platforms a BuildKit daemon's own build history says it built."""
    cmd = [str(BUILDCTL), "--addr", address, "debug", "histories", "--format", "{{json .}}"]
    if netns:
        cmd = ["nsenter", f"--net=/var/run/netns/{netns}", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {r["record"]["FrontendAttrs"].get("platform") for r in records if r.get("record")}


def test_a_multi_node_builder_builds_each_platform_on_its_node_into_one_archive(farm, tmp_path):
    dist = tmp_path / "dist"
    proc = cli("--target", "ascend", "--site", str(SITE), "--builder", farm, "--dist", str(dist), "--force")
    assert proc.returncode == 0, proc.stderr[-4000:]
    # buildx cannot export one OCI archive from several nodes: one bake per platform, same builder.
    runs = {path.name: json.loads(path.read_text()) for path in (dist / "bake").glob("run-*.json")}
    assert set(runs) == {f"run-{farm}-amd64-1.json", f"run-{farm}-arm64-1.json"}
    assert runs[f"run-{farm}-arm64-1.json"]["target"]["ascend"]["platforms"] == ["linux/arm64"]
    # ... and buildx sent each to the node declared for it (each daemon's own history says so).
    assert _built_platforms("tcp://127.0.0.1:12340", None) == {"linux/amd64"}
    assert _built_platforms("tcp://10.231.0.2:12340", NODE) == {"linux/arm64"}

    entry = _report(dist)["ascend"]
    where = {p["platform"]: (p["builder"], p["native"]) for p in entry["platforms"]}
    # Both daemons run on this x86 machine: the arm64 node emulates, and the report says so.
    assert where == {"linux/amd64": (f"{farm} (node amd64)", True), "linux/arm64": (f"{farm} (node arm64)", False)}
    assert f"| ascend | linux/arm64 | {farm} (node arm64) | emulated (QEMU) |" in (dist / "report.md").read_text()
    archive = OciArchive(Path(entry["archive"]))
    assert set(archive.platforms()) == {"linux/amd64", "linux/arm64"}
    assert archive.top_index()[0] == entry["digest"]
    assert "+ /usr/bin/docker load" in proc.stderr or "docker load --input" in proc.stderr  # a remote builder's archive
