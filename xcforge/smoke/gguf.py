"""A tiny GGUF model for the llama.cpp smoke test, made the way an operator would make one.

tools/make_tiny_model.py writes the tiny random Llama (safetensors); llama.cpp's own converter
(convert_hf_to_gguf.py, from the hash-pinned sdist the image was compiled from) turns it into a
GGUF file in a throw-away converter image (tools/gguf: torch, transformers, numpy: never shipped),
and the image's own `llama-quantize`, on the image's platform, quantises it. Output: a directory
holding exactly one .gguf, which the launcher picks up from `--model DIR`.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
from pathlib import Path

from xcforge.config.matrix import Matrix, Target
from xcforge.config.site import SiteConfig, load_site
from xcforge.errors import ConfigError, EnvironmentProblem
from xcforge.lock import deps, locks
from xcforge.paths import REPO_ROOT
from xcforge.shell import DOCKER, run
from xcforge.smoke import containers
from xcforge.smoke.containers import RunSpec

CONVERTER_DIR = REPO_ROOT / "tools" / "gguf"
# Q8_0 quantises the tiny model's 64-wide rows as they are; Q4_K needs rows of 256 and would fall
# back to another type for most tensors of a model this small.
QUANT = "Q8_0"


def converter_image(site: SiteConfig) -> str:
    """Build (cached by BuildKit, tagged by the inputs' hash) and return the converter image tag."""
    digest = hashlib.sha256()
    for name in ("Dockerfile", "requirements.txt", "convert_tiny.py"):
        digest.update((CONVERTER_DIR / name).read_bytes())
    tag = f"xcforge-gguf-converter:{digest.hexdigest()[:12]}"
    if run([DOCKER, "image", "inspect", tag], check=False, capture=True, quiet=True).returncode == 0:
        return tag
    base = site.map_image("docker.io/library/python:3.11-slim-bookworm")
    empty = Path(tempfile.mkdtemp(prefix="xcforge-no-wheels-"))
    wheels = site.wheelhouse if site.wheelhouse else empty
    argv = [DOCKER, "buildx", "build", "--load", "--tag", tag, "--build-arg", f"BASE_IMAGE={base}",
            "--build-context", f"wheels={wheels}"]  # fmt: skip
    if site.ca_bundle:
        argv += ["--secret", f"id=ca.pem,src={site.ca_bundle}"]
    try:
        run([*argv, str(CONVERTER_DIR)])
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    return tag


def llama_sources(matrix: Matrix, target: Target, site: SiteConfig, into: Path) -> Path:
    """llama.cpp's converter and gguf-py from the sdist the image was built from (hash-checked)."""
    pin = locks.engine_sdist_pin(matrix, target)
    if pin is None:
        raise EnvironmentProblem(f"no locks/engine-sdist.txt for {target.name}: run `python build.py deps`")
    version, sha256 = pin
    build = target.engine.llama_cpp
    if build is None:  # (the matrix does not tie smoke.model_format gguf to engine.llama_cpp)
        raise ConfigError(
            f"{target.name}: a GGUF smoke model needs llama.cpp's converter, and its engine is not llama.cpp"
        )
    sdist, _ = deps.fetch_sdist(site, deps.index_of(site), target.engine.package, version, sha256)
    source_dir = build.source_dir.strip("/")
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        prefix = f"{top}/{source_dir}/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        members = [
            m for m in tar.getmembers() if m.name.startswith(prefix) and m.name[len(prefix) :].startswith(wanted)
        ]
        for member in members:
            member.name = member.name[len(prefix) :]
        tar.extractall(into, members=members, filter="data")
    return into


def tiny_gguf(matrix: Matrix, target: Target, image: str, platform: str, model_dir: Path, out: Path,
              site: SiteConfig | None = None) -> Path:  # fmt: skip
    """out/tiny-q8_0.gguf from the safetensors model in model_dir; returns out."""
    site = site or load_site(None)
    work = Path(tempfile.mkdtemp(prefix="xcforge-gguf-"))
    try:
        sources = llama_sources(matrix, target, site, work / "llama.cpp")
        f32 = work / "f32"
        f32.mkdir()
        f32.chmod(0o777)  # the image's user (uid 2000) reads it
        convert = RunSpec(converter_image(site), ("/model", "--outfile", "/out/tiny-f32.gguf", "--outtype", "f32"))
        containers.run_to_exit(convert.with_flags(["-v", f"{sources}:/llama.cpp:ro", "-v", f"{model_dir}:/model:ro",
                                                   "-v", f"{f32}:/out", "-e", "LLAMA_CPP_DIR=/llama.cpp"]),
                               check=True)  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        out.chmod(0o777)
        name = f"tiny-{QUANT.lower()}.gguf"
        quantize = RunSpec(image, ("/in/tiny-f32.gguf", f"/out/{name}", QUANT), platform=platform,
                           entrypoint="llama-quantize")  # fmt: skip
        containers.run_to_exit(quantize.with_flags(["-v", f"{f32}:/in:ro", "-v", f"{out}:/out"]), check=True)
        (out / name).chmod(0o644)
        out.chmod(0o755)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
