"""Real multi-architecture builds against the local registry (docker-marked).

Stand-in bases stand for the vendor images (reports say so). These tests exercise the build, push,
sign and merge machinery, so they use a skeleton site (sites/skeleton.yaml) that skips the engine
steps; the reports then say "rendered"/"deps-resolved", never more. The real engine installs on
stand-ins are test_engine_installs.py (ascend arm64) and test_cpu_engine.py (cpu amd64).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.builds.conftest import REPO, cli, manifest, tags
from tests.builds.conftest import SKELETON_SITE as SITE

pytestmark = pytest.mark.docker

STANDIN_TARGETS = ["cuda", "ascend", "mlu"]


def _report(dist: Path) -> dict[str, dict]:
    data = json.loads((dist / "report.json").read_text())
    return {r["target"]: r for r in data["results"]}


def _platforms(index: dict) -> set[str]:
    return {
        f"{m['platform']['os']}/{m['platform']['architecture']}"
        for m in index["manifests"]
        if m["platform"]["architecture"] != "unknown"
    }


@pytest.fixture(scope="module")
def pushed(prefix, tmp_path_factory):
    """Every stand-in target built for all its platforms and pushed, once for the module."""
    dist = tmp_path_factory.mktemp("dist")
    args = ["--site", str(SITE), "--registry", prefix, "--push", "--dist", str(dist)]
    proc = cli(*[a for t in STANDIN_TARGETS for a in ("--target", t)], *args, "--keep-going")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"dist": dist, "args": args, "first": proc}


def test_every_standin_target_is_an_index_with_all_platforms(pushed, prefix):
    from xcforge.config.matrix import load_matrix

    matrix = load_matrix(REPO / "matrix.yaml")
    report = _report(pushed["dist"])
    for name in STANDIN_TARGETS:
        target = matrix.targets[name]
        repo = f"{prefix.split('/', 1)[1]}/vllm-{name}"
        entry = report[name]
        assert entry["status"] == "built" and entry["base_kind"] == "stand-in"
        assert entry["engine_install"] == "skip"
        index = manifest(repo, entry["digest"])
        assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
        assert _platforms(index) == set(target.platforms)
        # provenance attestations ride along as attestation manifests
        assert any(m["platform"]["architecture"] == "unknown" for m in index["manifests"])
        annotations = index.get("annotations") or {}
        assert annotations["io.xcforge.target"] == name
        assert annotations["org.opencontainers.image.version"].startswith(matrix.engine_version(target))
        assert annotations["org.opencontainers.image.base.name"] == target.base.image
        # both tags point at the reported digest; nothing called latest
        repo_tags = tags(repo)
        assert len([t for t in repo_tags if not t.startswith(("buildcache", "sha256-"))]) == 2
        # and one SBOM per platform manifest, attached beside it
        platform_digests = {m["digest"] for m in index["manifests"] if m["platform"]["architecture"] != "unknown"}
        sbom_tags = {t for t in repo_tags if t.endswith(".sbom")}
        assert sbom_tags == {d.replace(":", "-") + ".sbom" for d in platform_digests}
        assert not any("latest" in t for t in repo_tags)
        for tag in entry["refs"]:
            response = manifest(repo, tag.rsplit(":", 1)[1])
            assert response == index
        # each platform's config carries our labels
        for descriptor in index["manifests"]:
            if descriptor["platform"]["architecture"] == "unknown":
                continue
            image = manifest(repo, descriptor["digest"])
            assert len(image["layers"]) > 3
            sizes = {p["platform"]: p["compressed_bytes"] for p in entry["platforms"]}
            platform = f"linux/{descriptor['platform']['architecture']}"
            assert sizes[platform] == image["config"]["size"] + sum(layer["size"] for layer in image["layers"])


def test_report_files_say_stand_in(pushed):
    markdown = (pushed["dist"] / "report.md").read_text()
    assert "stand-in (engine skipped)" in markdown
    # a skeleton build claims no install it did not do, and names every skipped step
    assert "engine-installed" not in markdown and "### Not verified" in markdown
    assert "amd64: deps-resolved" in markdown  # cuda's lock resolved (images/cuda/locks/)
    for name in STANDIN_TARGETS:
        assert f"| {name} | built |" in markdown


def test_second_run_is_skipped_by_fingerprint(pushed):
    started = time.monotonic()
    proc = cli(*[a for t in STANDIN_TARGETS for a in ("--target", t)], *pushed["args"])
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = _report(pushed["dist"])
    assert {report[t]["status"] for t in STANDIN_TARGETS} == {"skipped"}
    assert "buildx bake" not in proc.stderr and "buildx build" not in proc.stderr
    print(f"unchanged rebuild of {len(STANDIN_TARGETS)} targets: {elapsed:.1f} s")


def test_engine_change_rebuilds_only_top_layers(project, prefix, tmp_path):
    dist = tmp_path / "dist"
    common = ["--matrix", str(project / "matrix.yaml"), "--target", "cuda", "--site", str(SITE)]
    common += ["--registry", prefix + "-layers", "--push", "--dist", str(dist)]
    first = cli(*common)
    assert first.returncode == 0, first.stderr[-2000:]
    before = _report(dist)["cuda"]
    module = next((project / "images" / "engine").rglob("__init__.py"))
    module.write_text(module.read_text() + "\n# a one-line change\n")
    second = cli(*common)
    assert second.returncode == 0, second.stderr[-2000:]
    after = _report(dist)["cuda"]
    assert after["status"] == "built" and after["digest"] != before["digest"]
    repo = f"{prefix.split('/', 1)[1]}-layers/vllm-cuda"
    old = manifest(repo, before["platforms"][0]["digest"])["layers"]
    new = manifest(repo, after["platforms"][0]["digest"])["layers"]
    changed = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a["digest"] != b["digest"]]
    # Only the engine wheel layer, the image-facts layer and check-install's proof after it differ
    # (the proof must run again with the new launcher); what follows them (WORKDIR) and everything
    # before them (base, apt, user, venv, engine) is reused.
    assert 1 <= len(changed) <= 3 and min(changed) >= len(new) - 4, f"layers changed: {changed} of {len(new)}"
    assert after["cache_hits"] > 0


def test_broken_build_fails_cleanly_and_pushes_nothing(project, prefix, tmp_path):
    matrix = project / "matrix.yaml"
    text = matrix.read_text().replace(
        "    extra_system_packages: [gcc,", "    extra_system_packages: [xcforge-no-such-package, gcc,"
    )
    matrix.write_text(text)
    rendered = cli("render", "--all", "--matrix", str(matrix))
    assert rendered.returncode == 0, rendered.stderr
    dist = tmp_path / "dist"
    proc = cli(
        "--matrix", str(matrix), "--target", "ascend", "--site", str(SITE),
        "--registry", prefix + "-broken", "--push", "--dist", str(dist),
    )  # fmt: skip
    assert proc.returncode == 5
    assert "Traceback" not in proc.stderr
    assert "error: " in proc.stderr and "xcforge-no-such-package" in proc.stderr
    assert tags(f"{prefix.split('/', 1)[1]}-broken/vllm-ascend") == []
    assert not list((dist / ".work").glob("*.partial")) if (dist / ".work").exists() else True
    assert _report(dist)["ascend"]["status"] == "failed"


def test_registry_down_is_reported_with_nothing_tagged(project, tmp_path):
    dist = tmp_path / "dist"
    proc = cli(
        "--matrix", str(project / "matrix.yaml"), "--target", "cuda", "--site", str(SITE),
        "--registry", "127.0.0.1:5999/xcforge", "--push", "--dist", str(dist),
    )  # fmt: skip
    assert proc.returncode == 6  # a registry error, after retries
    assert "Traceback" not in proc.stderr
    last = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert last and "127.0.0.1:5999" in last[-1] and "attempts" in last[-1]


def _interruptible() -> None:
    # A job started in the background by a non-interactive shell (as `.ci/run ... &` is) inherits
    # SIGINT ignored, and Python then never raises KeyboardInterrupt; a terminal's Ctrl-C reaches
    # a process with the default disposition, so the test gives xcforge that one.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("whom", ["group", "process"])
def test_interrupted_build_publishes_nothing(project, prefix, tmp_path, whom):
    """Ctrl-C on a terminal signals the whole group (buildx too); a supervisor's `kill -INT` only
    xcforge, whose bake runs on a worker thread. Either way the bake stops, is not retried as a
    registry error, and nothing is published."""
    # A change that forces a real rebuild (the engine layer), so there is time to interrupt it.
    module = next((project / "images" / "engine").rglob("__init__.py"))
    module.write_text(module.read_text() + f"\n# interrupt me ({whom})\n")
    dist = tmp_path / "dist"
    repo = f"{prefix}-interrupted-{whom}"
    proc = subprocess.Popen(
        [
            sys.executable, str(REPO / "build.py"), "--matrix", str(project / "matrix.yaml"), "--target", "ascend",
            "--site", str(SITE), "--registry", repo, "--push", "--dist", str(dist), "--force",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_interruptible,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "buildx bake" in line:
            time.sleep(3)
            if whom == "group":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                os.kill(proc.pid, signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    output = "".join(seen) + rest
    assert proc.returncode == 130, output[-2000:]
    assert "Traceback" not in output
    assert "retrying" not in output, output[-2000:]
    assert tags(f"{repo.split('/', 1)[1]}/vllm-ascend") == []
    work = dist / ".work"
    assert not (work.exists() and list(work.iterdir())), list(work.iterdir())


def test_archive_output_loads_and_runs_on_both_architectures(tmp_path):
    dist = tmp_path / "dist"
    proc = cli("--target", "ascend", "--site", str(SITE), "--dist", str(dist))
    assert proc.returncode == 0, proc.stderr[-2000:]
    entry = _report(dist)["ascend"]
    archive = Path(entry["archive"])
    assert archive.exists() and archive.suffix == ".tar"
    with tarfile.open(archive) as tar:
        layout = json.loads(tar.extractfile("oci-layout").read())
        assert layout["imageLayoutVersion"] == "1.0.0"
    ref = entry["refs"][0]
    for platform, arch in (("linux/amd64", "x86_64"), ("linux/arm64", "aarch64")):
        run = subprocess.run(
            ["/usr/bin/docker", "run", "--rm", "--platform", platform, "--entrypoint", "uname", ref, "-m"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.stdout.strip() == arch, run.stderr


def test_build_signs_pushed_digests_and_independent_tools_verify(pushed, prefix, tmp_path):
    keys = tmp_path / "keys"
    made = cli("keygen", "--sm2", "--cosign", "--no-password", "--out", str(keys), "--no-audit")
    assert made.returncode == 0, made.stderr
    audit = tmp_path / "audit.log.jsonl"
    proc = cli(
        "--target", "cuda", *pushed["args"], "--sign",
        "--sm2-key", str(keys / "sm2.key"), "--cosign-key", str(keys / "cosign.key"),
        env={"XCFORGE_AUDIT_LOG": str(audit)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    entry = _report(pushed["dist"])["cuda"]
    schemes = {(s["scheme"], s["digest"]) for s in entry["signatures"]}
    digests = {entry["digest"], *(p["digest"] for p in entry["platforms"])}
    assert schemes == {(scheme, d) for scheme in ("sm2", "cosign") for d in digests}
    image = f"{entry['image_repo']}@{entry['digest']}"
    verified = cli("verify", image, "--sm2-key", str(keys / "sm2.pub"), "--cosign-key", str(keys / "cosign.pub"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    cosign = subprocess.run(
        ["cosign", "verify", "--key", str(keys / "cosign.pub"), "--insecure-ignore-tlog", "--allow-insecure-registry",
         image],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COSIGN_YES": "true"},
    )  # fmt: skip
    assert cosign.returncode == 0, cosign.stderr
    # Each platform's SBOM and BuildKit provenance were attested, even though this run skipped the
    # (unchanged) build: the files written by the build that pushed it are signed.
    attested = {(s["scheme"], s["digest"], s["attestation"]) for s in entry["signatures"] if s.get("attestation")}
    platforms = {p["digest"] for p in entry["platforms"]}
    kinds = ("https://cyclonedx.org/bom", "https://slsa.dev/provenance/v0.2")
    assert attested == {(scheme, d, k) for scheme in ("sm2", "cosign") for d in platforms for k in kinds}
    trusted = ("--sm2-key", str(keys / "sm2.pub"), "--cosign-key", str(keys / "cosign.pub"))
    strict = cli("verify", image, *trusted, "--require-attestations")
    assert strict.returncode == 0, strict.stdout + strict.stderr
    assert strict.stdout.count("attestation https://") == 4 * len(platforms)
    for kind in ("cyclonedx", "slsaprovenance"):
        checked = subprocess.run(
            ["cosign", "verify-attestation", "--key", str(keys / "cosign.pub"), "--type", kind,
             "--insecure-ignore-tlog", "--allow-insecure-registry", f"{entry['image_repo']}@{sorted(platforms)[0]}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stderr
    # another key is refused
    other = tmp_path / "other"
    cli("keygen", "--sm2", "--no-password", "--out", str(other), "--no-audit")
    refused = cli("verify", image, "--sm2-key", str(other / "sm2.pub"))
    assert refused.returncode == 8
    # the audit log holds the push and the signatures, chained
    checked = cli("audit", "verify", str(audit))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    actions = [json.loads(line)["action"] for line in audit.read_text().splitlines()]
    assert "push" in actions and actions.count("sign") == 2 * len(digests)


def test_split_builds_merge_into_one_index(project, prefix, tmp_path):
    dist = tmp_path / "dist"
    base = ["--matrix", str(project / "matrix.yaml"), "--target", "ascend", "--site", str(SITE), "--dist", str(dist)]
    registry = prefix + "-split"
    digests = []
    for platform in ("linux/amd64", "linux/arm64"):
        proc = cli(*base, "--registry", registry, "--platform", platform, "--push-by-digest")
        assert proc.returncode == 0, proc.stderr[-2000:]
        record = json.loads((dist / "digests" / f"ascend-{platform.split('/')[1]}.json").read_text())
        assert record["platform"] == platform
        digests.append(record["digest"])
    repo = f"{registry.split('/', 1)[1]}/vllm-ascend"
    # untagged until merged; only each platform's SBOM sits beside its digest already
    assert [t for t in tags(repo) if not t.startswith(("buildcache", "sha256-"))] == []
    assert len([t for t in tags(repo) if t.endswith(".sbom")]) == 2
    merged = cli(
        "merge", "--matrix", str(project / "matrix.yaml"), "--target", "ascend", "--registry", registry,
        "--dist", str(dist), *[a for d in digests for a in ("--digest", d)],
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr[-2000:]
    entry = _report(dist)["ascend"]
    index = manifest(repo, entry["digest"])
    assert _platforms(index) == {"linux/amd64", "linux/arm64"}
    assert (index.get("annotations") or {}).get("io.xcforge.target") == "ascend"
    assert len([t for t in tags(repo) if not t.startswith(("buildcache", "sha256-"))]) == 2
    # CI signs the merged index with `sign`: it finds each platform's SBOM and BuildKit provenance
    # in the registry and attests them, so verification can require them.
    keys = tmp_path / "keys"
    assert cli("keygen", "--sm2", "--no-password", "--out", str(keys), "--no-audit").returncode == 0
    image = f"{entry['image_repo']}@{entry['digest']}"
    signed = cli("sign", image, "--sm2-key", str(keys / "sm2.key"), "--no-audit")
    assert signed.returncode == 0, signed.stdout + signed.stderr
    assert signed.stdout.count("attested: ") == 4, signed.stdout  # 2 platforms x (SBOM, provenance)
    verified = cli("verify", image, "--sm2-key", str(keys / "sm2.pub"), "--require-attestations", "--no-audit")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_isa_gate_under_emulated_cpu_models(tmp_path):
    """QEMU_CPU picks the emulated core; the launcher reads its HWCAP from auxv and refuses ARMv8.0
    (Phytium FT-2000+/64 class) for the vllm-cpu image in one line, before torch could SIGILL."""
    dist = tmp_path / "dist"
    proc = cli("--target", "cpu", "--platform", "linux/arm64", "--site", str(SITE), "--dist", str(dist))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ref = _report(dist)["cpu"]["refs"][0]
    for model, refused in (("cortex-a57", True), ("cortex-a72", True), ("neoverse-n1", False)):
        run = subprocess.run(
            ["/usr/bin/docker", "run", "--rm", "--init", "--platform", "linux/arm64", "-e", f"QEMU_CPU={model}",
             ref, "doctor", "--json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        isa = json.loads(run.stdout)["host"]["cpu"]["isa"]
        assert isa["source"] == "auxv", (model, isa)
        if refused:
            assert run.returncode == 3 and isa["level"] == "armv8.0-a"
            assert {"atomics", "asimddp"} <= set(isa["missing"]), (model, isa)
            assert "lacks atomics" in run.stdout and "llama.cpp built for armv8-a" in run.stdout
        else:
            assert isa["missing"] == [] and isa["level"] == "armv8.2-a", isa
