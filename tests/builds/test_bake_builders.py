"""Builds through bake on named builders: the committed bake file, and a second Docker engine.

The second engine (scripts/second-engine.sh) runs on this machine in its own network namespace,
reached over TCP through a docker context: a real, separate BuildKit, standing in for a remote
build node. It builds linux/arm64 while the local engine builds linux/amd64; xcforge merges the two
into one index by digest, pushes, signs and smoke-tests it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builds.conftest import REPO, cli, manifest, tags
from tests.builds.conftest import SKELETON_SITE as SITE

pytestmark = pytest.mark.docker
NODE = "xcforge-node2"


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
