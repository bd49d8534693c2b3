"""Rendered Dockerfiles: content a reviewer expects, drift check, hadolint, CLI."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xcforge.config.matrix import load_matrix
from xcforge.render.dockerfile import render_target

REPO = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "matrix.yaml")
TARGETS = list(MATRIX.targets)


def _text(name: str) -> str:
    return render_target(MATRIX, MATRIX.targets[name]).text


@pytest.mark.parametrize("name", TARGETS)
def test_committed_dockerfile_matches_template(name):
    committed = (REPO / "images" / name / "Dockerfile").read_text()
    assert committed == _text(name), f"images/{name}/Dockerfile is stale: run `python build.py render --all`"


@pytest.mark.parametrize("name", TARGETS)
def test_dockerfile_essentials(name):
    text = _text(name)
    assert text.startswith("# GENERATED") and "DO NOT EDIT" in text.splitlines()[1]
    assert "# syntax=" not in text  # BuildKit would try to pull the frontend image
    assert "EXPOSE 8000" in text
    assert "HEALTHCHECK" in text and 'CMD ["xcforge-engine", "healthcheck"]' in text
    # xcforge-env sources the vendor's environment scripts before the launcher (or any program) runs.
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "xcforge-env", "xcforge-engine"]' in text
    assert re.search(r"^USER 2000:0$", text, re.M)
    assert ".bashrc" not in text
    assert "--mount=type=cache,target=/var/cache/apt" in text
    if MATRIX.targets[name].engine.is_vllm and not MATRIX.targets[name].engine.is_vendor_image:
        assert "--mount=type=cache,target=/root/.cache/pip" in text
    assert "--mount=type=secret,id=ca.pem" in text
    for label in (
        "org.opencontainers.image.revision",
        "io.xcforge.engine.version",
        "org.opencontainers.image.base.digest",
    ):
        assert label in text
    target = MATRIX.targets[name]
    engine = (
        f"xcforge-install-engine {'native' if target.engine.native_install else 'deps'} {target.engine.install} "
        f"{target.engine.package} {MATRIX.engine_version(target)}"
    )
    if not target.engine.is_vllm:
        engine = "COPY --from=llama-build /out/bin/ /usr/local/bin/"
    if target.engine.is_vendor_image:
        # The vendor's image carries the engine: nothing installs it, check-install asserts it.
        engine = "xcforge installs nothing of its stack; check-install (below) asserts it"
        assert "xcforge-install-engine deps" not in text and "/xcforge/locks" not in text
    else:
        assert "--mount=type=bind,source=locks,target=/xcforge/locks" in text  # the committed lock
    assert engine in text
    assert "RUN xcforge-env xcforge-engine check-install" in text  # the build proves its engine


@pytest.mark.parametrize("name", TARGETS)
def test_layer_order_least_to_most_changing(name):
    target = MATRIX.targets[name]
    text = _text(name)
    if target.engine.native_install:
        # The build platform's stage comes first; the runtime stage copies its venv.
        assert text.index("FROM --platform=$BUILDPLATFORM") < text.index("xcforge-install-engine native")
        assert text.index("xcforge-install-engine native") < text.index("FROM ${BASE_IMAGE} AS runtime")
        text = text[text.index("FROM ${BASE_IMAGE} AS runtime") :]
    if not target.engine.is_vllm:
        # The compile stage runs on the build platform, before the runtime stage copies its binaries.
        toolchain = text.index("FROM --platform=$BUILDPLATFORM ${BASE_IMAGE} AS llama-toolchain")
        assert toolchain < text.index("AS llama-build") < text.index("FROM ${BASE_IMAGE} AS runtime")
        text = text[text.index("FROM ${BASE_IMAGE} AS runtime") :]
    venv = "COPY --from=engine-native" if target.engine.native_install else "-m venv"
    phase = "engine" if target.engine.native_install else "deps"
    install = (
        "xcforge installs nothing of its stack"
        if target.engine.is_vendor_image
        else f"xcforge-install-engine {phase} {target.engine.install} "
        if target.engine.is_vllm
        else "COPY --from=llama-build"
    )
    order = [
        text.index("FROM ${BASE_IMAGE}"),
        text.index("apt-get install"),
        text.index("useradd"),
        text.index(venv if target.python.create_venv else "test -x"),
        text.index(install),
        text.index("/tmp/xcforge-engine/*.whl"),
        text.index("/etc/xcforge/image.json"),
        text.index("LABEL"),
    ]
    assert order == sorted(order)


def test_target_differences_live_in_data_and_blocks():
    ascend, mlu, cpu, cuda = _text("ascend"), _text("mlu"), _text("cpu"), _text("cuda")
    assert "VLLM_TARGET_DEVICE=empty" in ascend and "VLLM_TARGET_DEVICE=empty" not in cpu
    assert "set_env.sh" in ascend and "-r /xcforge/locks/plugin-sdist.txt" in ascend  # vllm-ascend, hash-pinned
    assert "--groups HwHiAiUser" in ascend
    # mlu is built on Cambricon's vLLM container: only the launcher goes in, into the container's venv.
    assert "XCFORGE_PYTHON=/torch/venv3/pytorch_infer/bin/python xcforge-pip install --no-index --no-deps" in mlu
    assert 'ARG OMIT_PACKAGES="triton"' in cpu  # torchvision & co. are left out only where the site lacks their index
    assert "ENV LD_PRELOAD=/usr/local/lib/libtcmalloc_minimal.so.4" in cpu and "LD_PRELOAD" not in cuda
    assert "/torch/venv3/pytorch_infer" in mlu and "-m venv" not in mlu  # Cambricon's own venv
    assert (
        "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:"
        in cuda
    )
    assert "LD_LIBRARY_PATH" not in ascend  # CANN's own value stays
    assert "cuda-nvcc-13-0" in cuda and "xcforge-skip vendor-packages" in cuda
    assert "python3-venv" in cuda and "python3-venv" not in cpu  # CUDA base has no Python
    assert "--system-site-packages" in ascend and "--system-site-packages" not in cpu


@pytest.mark.skipif(
    shutil.which("hadolint") is None and not (REPO / ".venv/bin/hadolint").exists(), reason="hadolint not installed"
)
@pytest.mark.parametrize("name", TARGETS)
def test_hadolint_clean(name):
    binary = shutil.which("hadolint") or str(REPO / ".venv/bin/hadolint")
    proc = subprocess.run(
        [binary, "--config", str(REPO / ".hadolint.yaml"), str(REPO / "images" / name / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("name", TARGETS)
def test_dry_run_prints_plan_and_dockerfile(name):
    # The stand-in site named, not left to this checkout's default (.xcforge/site.yaml, which only a
    # full provisioning writes): refused targets (mlu, musa) plan only on a site that skips their engine.
    proc = _cli("--target", name, "--dry-run", "--site", "sites/standin.yaml")
    assert proc.returncode == 0, proc.stderr
    assert f"target:        {name}" in proc.stdout
    assert "build args:" in proc.stdout and "BASE_IMAGE=" in proc.stdout
    assert "# GENERATED" in proc.stdout
    assert "+ " not in proc.stderr  # a dry run runs no command


def test_list_one_line_per_target_and_its_platforms_verification():
    proc = _cli("--list")
    assert proc.returncode == 0
    lines = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    assert lines[-1].startswith("Which image fits which CPU")
    lines = lines[:-1]
    assert [line.split()[0] for line in lines if not line.startswith(" ")] == TARGETS
    platforms = [line.split() for line in lines if line.strip().startswith("linux/")]
    assert len(platforms) == sum(len(MATRIX.targets[t].platforms) for t in TARGETS)
    assert all(p[1] in ("rendered", "deps-resolved") for p in platforms)  # a listing proves no install
    needs = [line for line in lines if line.split()[0] == "needs"]
    assert len(needs) == sum(len(MATRIX.targets[t].cpu_isa) for t in TARGETS)
    assert "ARMv8.0-A with NEON (llama.cpp's armv8.0_1 CPU backend), e.g. Phytium FT-2000+/64 (fp asimd)" in proc.stdout
    assert "linux/amd64  rendered       lock unverified (needs https://download.pytorch.org/whl/cpu)" in proc.stdout


def test_unknown_target_lists_valid_ones():
    proc = _cli("--target", "npu", "--dry-run")
    assert proc.returncode == 2
    names = ", ".join(load_matrix(REPO / "matrix.yaml").targets)
    assert names.startswith("cuda, ascend, ascend-vendor, mlu") and f"valid targets: {names}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_render_check_detects_drift(tmp_path):
    from xcforge.render import dockerfile

    shutil.copytree(REPO / "templates", tmp_path / "templates")
    shutil.copy(REPO / "matrix.yaml", tmp_path / "matrix.yaml")
    matrix = load_matrix(tmp_path / "matrix.yaml")
    targets = list(matrix.targets.values())
    assert {r.status for r in dockerfile.write_or_check(matrix, targets, check=True)} == {"missing"}
    dockerfile.write_or_check(matrix, targets, check=False)
    path = tmp_path / "images" / "cpu" / "Dockerfile"
    path.write_text(path.read_text() + "# hand edit\n")
    statuses = {r.path.parent.name: r.status for r in dockerfile.write_or_check(matrix, targets, check=True)}
    assert statuses["cpu"] == "stale" and statuses["cuda"] == "unchanged"


def test_render_check_cli_passes_on_committed_tree():
    proc = _cli("render", "--all", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_missing_template_variable_fails(tmp_path):
    import jinja2

    from xcforge.errors import RenderError

    shutil.copytree(REPO / "templates", tmp_path / "templates")
    skeleton = tmp_path / "templates" / "Dockerfile.j2"
    skeleton.write_text(skeleton.read_text().replace("{{ t.runtime.port }}", "{{ t.runtime.prot }}"))
    with pytest.raises(RenderError) as info:
        render_target(MATRIX, MATRIX.targets["cpu"], templates_dir=tmp_path / "templates")
    assert "prot" in info.value.message
    assert jinja2  # StrictUndefined turned the typo into an error rather than an empty string


def test_feiteng_cross_compiles_one_cpu_backend_per_generation_from_checked_sources():
    text = _text("feiteng")
    stage = text[text.index("AS llama-toolchain") : text.index("AS runtime")]
    shared = text[text.index("AS llama-toolchain") : text.index("AS llama-build")]
    # Debian's cross toolchain for every other platform, no emulated compile; installed once for all
    # platforms (the toolchain and source stages never read $TARGETARCH, so BuildKit shares them).
    assert 'set -- "$@" "crossbuild-essential-$arch"' in shared and "for arch in amd64 arm64" in shared
    assert "TARGETARCH" not in shared
    # Later compiles (a new release, a new flag) reuse unchanged objects from a cache mount.
    assert "--mount=type=cache,target=/var/cache/ccache,id=xcforge-llama-ccache,sharing=shared" in stage
    assert "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache" in stage
    assert "sha256sum -c -" in stage and "from=sdists" in stage  # the hash-pinned sdist, checked again
    # One loadable CPU backend per variant the matrix names (GGML_BACKEND_DL), not one -march.
    assert "-DGGML_NATIVE=OFF" in stage and "-DGGML_BACKEND_DL=ON" in stage and "-DBUILD_SHARED_LIBS=ON" in stage
    assert "GGML_CPU_ARM_ARCH" not in stage and "-DGGML_BACKEND_DIR=/usr/local/lib/ggml" in stage
    llama = MATRIX.targets["feiteng"].engine.llama_cpp
    for arch, variants in llama.cpu_variants.items():
        line = next(x for x in shared.splitlines() if f"> /src/xcforge-cpu-variants-{arch}.cmake" in x)
        args = shlex.split(line.split("printf 'ggml_add_cpu_backend_variant(%s)\\n'", 1)[1].split(" > ", 1)[0])
        assert args == [" ".join([v.name, *v.features]) for v in variants], line
    # The variants list replaces llama.cpp's own, checked where it is patched and after the build.
    assert "grep -q '^    include(${XCFORGE_CPU_VARIANTS})$' /src/ggml/src/CMakeLists.txt" in shared
    assert 'if [ "$want" != "$got" ]' in stage
    assert "--target llama-server llama-quantize" in stage
    assert "pip install" not in stage
