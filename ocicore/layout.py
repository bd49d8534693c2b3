"""OCI image layouts in a tar file (what `buildx --output type=oci` writes): the one reader of them,
and the merge of several builders' layouts into one index. Plus the names of an archive's side files
(SBOMs, provenance) that the build writes and verify reads.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ocicore.media import OCI_INDEX, OCI_LAYOUT_VERSION, is_attestation, is_index


def platform_manifests(index: dict[str, Any], fetch: Callable[[str], dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """platform → (manifest digest, compressed bytes = config + layers). Attestations are skipped."""
    if not is_index(index):
        raise ValueError("not an image index")
    out: dict[str, tuple[str, int]] = {}
    for descriptor in index.get("manifests", []):
        if is_attestation(descriptor):
            continue
        platform = descriptor.get("platform") or {}
        name = f"{platform.get('os', 'linux')}/{platform.get('architecture', '?')}"
        if platform.get("variant"):
            name += f"/{platform['variant']}"
        manifest = fetch(descriptor["digest"])
        size = manifest.get("config", {}).get("size", 0) + sum(
            layer.get("size", 0) for layer in manifest.get("layers", [])
        )
        out[name] = (descriptor["digest"], size)
    return out


def merge_archives(parts: list[Path], dest: Path) -> str:
    """OCI archives of one image built per platform on different builders → one archive whose index
    lists every part's platform and attestation manifests by digest (blobs copied once, unchanged,
    so each platform keeps the digest its builder gave it). Returns the new index digest."""
    import hashlib

    manifests: list[dict[str, Any]] = []
    annotations: dict[str, Any] = {}
    layout_annotations: dict[str, Any] = {}
    seen: set[str] = set()
    with tarfile.open(dest, "w") as out:
        for part in parts:
            with tarfile.open(part) as tar:
                layout = _member_json(tar, "index.json", part)
                top_descriptor = layout["manifests"][0]
                top_name = "blobs/" + top_descriptor["digest"].replace(":", "/")
                top = _member_json(tar, top_name, part)
                if "manifests" in top:
                    manifests += top["manifests"]
                    annotations = annotations or top.get("annotations", {})
                else:
                    manifests.append({k: v for k, v in top_descriptor.items() if k != "annotations"})
                layout_annotations = layout_annotations or top_descriptor.get("annotations", {})
                for member in tar.getmembers():
                    if not member.name.startswith("blobs/") or member.name in seen or member.isdir():
                        continue
                    if member.name == top_name and "manifests" in top:
                        continue  # the part's own index is replaced by the merged one
                    seen.add(member.name)
                    out.addfile(member, tar.extractfile(member))
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
        if annotations:
            index["annotations"] = annotations
        data = json.dumps(index, separators=(",", ":")).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        descriptor = {"mediaType": index["mediaType"], "digest": digest, "size": len(data)}
        if layout_annotations:
            descriptor["annotations"] = layout_annotations
        files = {
            "blobs/" + digest.replace(":", "/"): data,
            "oci-layout": OCI_LAYOUT_VERSION,
            "index.json": json.dumps({"schemaVersion": 2, "manifests": [descriptor]}).encode(),
        }
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            out.addfile(info, io.BytesIO(content))
    return digest


def _member_json(tar: tarfile.TarFile, name: str, where: Path) -> dict[str, Any]:
    """A JSON file of the layout; ValueError when it is not a regular file (KeyError when absent)."""
    member = tar.extractfile(name)
    if member is None:
        raise ValueError(f"{where}: {name} missing")
    doc: dict[str, Any] = json.loads(member.read())
    return doc


class OciArchive:
    """An OCI image layout in a tar file, as `docker buildx build --output type=oci` writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self, tar: tarfile.TarFile, name: str) -> dict[str, Any]:
        return _member_json(tar, name, self.path)

    def top_descriptor(self, tar: tarfile.TarFile) -> dict[str, Any]:
        """The descriptor index.json points to (the image index, or a lone manifest)."""
        descriptor: dict[str, Any] = self._read(tar, "index.json")["manifests"][0]
        return descriptor

    def blob(self, tar: tarfile.TarFile, digest: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.open_blob(tar, digest).read())
        return doc

    def top_index(self) -> tuple[str, dict[str, Any]]:
        """(digest, content) of the image index the layout's index.json points to."""
        with tarfile.open(self.path) as tar:
            layout = self._read(tar, "index.json")
            descriptor = layout["manifests"][0]
            return descriptor["digest"], self.blob(tar, descriptor["digest"])

    def configs(self) -> dict[str, dict[str, Any]]:
        """platform → image config, like image_configs() for a registry reference."""
        out: dict[str, dict[str, Any]] = {}
        with tarfile.open(self.path) as tar:
            layout = self._read(tar, "index.json")
            top = self.blob(tar, layout["manifests"][0]["digest"])
            descriptors = top.get("manifests") or [layout["manifests"][0]]
            for descriptor in descriptors:
                if is_attestation(descriptor):
                    continue
                manifest = self.blob(tar, descriptor["digest"])
                config = self.blob(tar, manifest["config"]["digest"])
                out[f"{config.get('os', 'linux')}/{config.get('architecture', '?')}"] = config
        return out

    def platforms(self) -> dict[str, tuple[str, int]]:
        with tarfile.open(self.path) as tar:
            layout = self._read(tar, "index.json")
            descriptor = layout["manifests"][0]
            top = self.blob(tar, descriptor["digest"])
            if "manifests" not in top:
                size = top["config"]["size"] + sum(layer["size"] for layer in top["layers"])
                return {"single": (descriptor["digest"], size)}
            return platform_manifests(top, lambda d: self.blob(tar, d))

    def open_blob(self, tar: tarfile.TarFile, digest: str) -> IO[bytes]:
        algo, hexdigest = digest.split(":", 1)
        member = tar.extractfile(f"blobs/{algo}/{hexdigest}")
        if member is None:
            raise ValueError(f"{self.path}: blob {digest} missing")
        return member

    def platform_images(self, tar: tarfile.TarFile) -> list[PlatformImage]:
        """Each platform's manifest and config, and the in-toto statements BuildKit attached to it."""
        layout = self._read(tar, "index.json")
        top = self.blob(tar, layout["manifests"][0]["digest"])
        descriptors = top.get("manifests") or [layout["manifests"][0]]
        statements: dict[str, list[tuple[str, bytes]]] = {}
        for descriptor in descriptors:
            if not is_attestation(descriptor):
                continue
            subject = (descriptor.get("annotations") or {}).get("vnd.docker.reference.digest", "")
            for layer in self.blob(tar, descriptor["digest"]).get("layers") or []:
                predicate_type = (layer.get("annotations") or {}).get("in-toto.io/predicate-type", "")
                statements.setdefault(subject, []).append((predicate_type, self.open_blob(tar, layer["digest"]).read()))
        out = []
        for descriptor in descriptors:
            if is_attestation(descriptor):
                continue
            manifest = self.blob(tar, descriptor["digest"])
            config = self.blob(tar, manifest["config"]["digest"])
            platform = f"{config.get('os', 'linux')}/{config.get('architecture', '?')}"
            out.append(
                PlatformImage(
                    platform,
                    descriptor["digest"],
                    descriptor,
                    manifest,
                    config,
                    statements.get(descriptor["digest"], []),
                )
            )
        return out


@dataclass(frozen=True)
class PlatformImage:
    platform: str
    digest: str
    descriptor: dict[str, Any]  # as the index lists it: mediaType, size, digest
    manifest: dict[str, Any]
    config: dict[str, Any]
    statements: list[tuple[str, bytes]]  # (predicate type, in-toto statement) from BuildKit


# ------------------------------------------------------------------------------------------ side files
# What the build writes beside an archive and `verify --archive` reads back: one naming, here.

SBOM_SUFFIX = ".cdx.json"
PROVENANCE_SUFFIX = ".provenance.json"


def attestation_dir(archive: Path) -> Path:
    """`dist/x.oci.tar` → `dist/x.oci.tar.attestations/` (also for the `.partial` being written)."""
    return archive.with_name(archive.name.removesuffix(".partial") + ".attestations")


def sbom_file_name(platform: str) -> str:
    """`linux/arm64` → `linux-arm64.cdx.json`."""
    return platform.replace("/", "-") + SBOM_SUFFIX


def provenance_file_name(platform: str) -> str:
    return platform.replace("/", "-") + PROVENANCE_SUFFIX
