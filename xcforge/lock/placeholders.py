"""Empty distributions that stand in for vendor-only packages, so the rest is resolved and installed for real.

A package that exists on no public index (triton-ascend on Huawei's, vllm-mlu in Cambricon's SDK) would
stop a resolution, and with it every check of the packages around it. In its place xcforge writes a
wheel of the same name and version with the vendor's declared requirements and nothing else: uv resolves
the closure through it, a stand-in image installs it with `--no-deps` beside the real closure, and
`pip check` and the version checks run against the real set. The wheel says what it is in its Summary
and in an `XCFORGE-PLACEHOLDER` file of its .dist-info, which check-install and every report read; a
real build never uses one (the placeholder directory is only passed where a site skips the vendor step).

The wheel is byte-for-byte reproducible (fixed timestamps and order), so the hash a lock or a cache
records for it is stable.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from xcforge.config.matrix import Matrix, Target
from xcforge.lock import locks

MARKER = "XCFORGE-PLACEHOLDER"
SUMMARY_PREFIX = "xcforge placeholder"
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Placeholder:
    """One vendor-only package: what it is called, its version, what it requires, and why it is empty."""

    name: str
    version: str
    requires: tuple[str, ...]
    reason: str
    # (group, name) entry points it registers, as the vendor's package does (a stand-in of a vendor image:
    # check-install looks for them). Each points at a function of an empty module this wheel carries, which
    # returns None: vLLM then activates no platform of it and loads nothing.
    entry_points: tuple[tuple[str, str], ...] = ()
    # Top-level packages it must make unimportable (`import ray` raises ImportError saying what it is), where a
    # stand-in puts files inside the vendor's package tree.
    blocked_packages: tuple[str, ...] = ()

    @property
    def stub_module(self) -> str:
        return f"xcforge_placeholder_{self.dist_name.lower()}"

    @property
    def dist_name(self) -> str:
        # The wheel file name's normalised distribution name (PEP 427 / binary distribution format).
        return re.sub(r"[-_.]+", "_", canonicalize_name(self.name))

    @property
    def filename(self) -> str:
        return f"{self.dist_name}-{self.version}-py3-none-any.whl"

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def _metadata(p: Placeholder) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p.name}",
        f"Version: {p.version}",
        f"Summary: {SUMMARY_PREFIX}: empty stand-in for {p.name} {p.version} ({p.reason})",
    ]
    lines += [f"Requires-Dist: {r}" for r in p.requires]
    return "\n".join(lines) + "\n"


def wheel_bytes(p: Placeholder) -> bytes:
    info = f"{p.dist_name}-{p.version}.dist-info"
    files = {
        f"{info}/METADATA": _metadata(p).encode(),
        **_stub_files(p, info),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: xcforge\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/{MARKER}": f"{p.reason}\n".encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=_EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    return buffer.getvalue()


def _stub_files(p: Placeholder, info: str) -> dict[str, bytes]:
    """The entry points' empty module and the blocked packages' __init__ (nothing when it has neither)."""
    files: dict[str, bytes] = {}
    if p.entry_points:
        groups: dict[str, list[str]] = {}
        for group, name in p.entry_points:
            groups.setdefault(group, []).append(f"{name} = {p.stub_module}:register")
        text = "".join(f"[{g}]\n" + "".join(f"{line}\n" for line in lines) + "\n" for g, lines in groups.items())
        files[f"{info}/entry_points.txt"] = text.encode()
        files[f"{p.stub_module}.py"] = (
            f'"""{SUMMARY_PREFIX}: empty stand-in for {p.name} {p.version}; its entry points do nothing."""\n\n\n'
            "def register(*args: object, **kwargs: object) -> None:\n"
            "    return None\n"
        ).encode()
    for package in p.blocked_packages:
        files[f"{package}/__init__.py"] = (
            f"raise ImportError({SUMMARY_PREFIX + ': ' + package + ' is not installed in this stand-in'!r})\n"
        ).encode()
    return files


def write(placeholders: list[Placeholder], out: Path) -> list[Path]:
    """Write each placeholder wheel into `out` (created); files already there with the same bytes stay."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for p in placeholders:
        path = out / p.filename
        data = wheel_bytes(p)
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        written.append(path)
    return written


def vendor_only(target: Target) -> list[Placeholder]:
    """The target's plugin.vendor_only packages as placeholders (what the resolution goes through)."""
    if target.plugin is None:
        return []
    return [
        Placeholder(name, v.version, v.requires, f"vendor-only: {v.source}")
        for name, v in target.plugin.vendor_only.items()
    ]


def for_target(matrix: Matrix, target: Target) -> list[Placeholder]:
    """What a stand-in build of `target` installs in place of the vendor's step: the plugin itself
    (declaring the requirements its committed sets resolved), its vendor-only packages, and the
    sdist-only packages of its lock at their locked versions. Empty for a target without a plugin."""
    plugin = target.plugin
    if plugin is None:
        return []
    sets = (locks.read_deps(matrix, target) or {}).get("sets", [])
    requires = next((tuple(e["plugin_requires"]) for e in sets if e.get("plugin_requires")), ())
    found = [Placeholder(plugin.name, plugin.version, requires, plugin.needs_vendor)]
    found += vendor_only(target)
    lock_dir = locks.deps_path(matrix, target).parent.parent
    for entry in sets:
        if not entry.get("lock") or not plugin.sdist_only:
            continue
        pins = locks.pins((lock_dir / entry["lock"]).read_text(encoding="utf-8"))
        for name, why in plugin.sdist_only.items():
            if canonicalize_name(name) in pins:
                found.append(Placeholder(name, pins[canonicalize_name(name)], (), f"sdist only: {why}"))
    return list(dict.fromkeys(found))  # plugin, vendor-only, sdist-only; one of each (sets share versions)
