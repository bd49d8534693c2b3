"""Reading built images back: digests, labels and compressed sizes, from a registry or an OCI archive.

Registry reads go through `docker buildx imagetools`, which shares the engine's credentials and
insecure-registry rules, so what we report is what an operator's docker sees.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xcforge.errors import RegistryError
from xcforge.shell import DOCKER, run

INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}


def _imagetools(args: list[str], *, quiet: bool = False) -> str:
    proc = run([DOCKER, "buildx", "imagetools", "inspect", *args], capture=True, check=False, quiet=quiet)
    if proc.returncode != 0:
        message = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RegistryError(f"cannot inspect {args[-1]}: {message}")
    return proc.stdout.decode()


def resolve_digest(ref: str) -> str:
    """The digest a reference points to (the index for multi-platform images)."""
    data = json.loads(_imagetools(["--format", "{{json .Manifest}}", ref]))
    return data["digest"]


def exists(ref: str) -> bool:
    try:
        resolve_digest(ref)
    except RegistryError:
        return False
    return True


def image_configs(ref: str) -> dict[str, dict]:
    """platform → image config blob, read from the registry as-is.

    (imagetools' `.Image` view is the OCI struct, which drops Docker's Healthcheck and friends.)
    """
    from xcforge.oci import RegistryClient, parse_reference

    parsed = parse_reference(ref)
    client = RegistryClient(parsed.registry)
    top = client.get_manifest(parsed.repository, parsed.reference)
    descriptors = top.json().get("manifests") if top.is_index else [{"digest": top.digest}]
    out: dict[str, dict] = {}
    for descriptor in descriptors or []:
        if is_attestation(descriptor):
            continue
        manifest = client.get_manifest(parsed.repository, descriptor["digest"]).json()
        config = json.loads(client.get_blob(parsed.repository, manifest["config"]["digest"]))
        out[f"{config.get('os', 'linux')}/{config.get('architecture', '?')}"] = config
    return out


def labels(ref: str) -> dict[str, dict[str, str]]:
    return {
        platform: (config.get("config") or {}).get("Labels") or {} for platform, config in image_configs(ref).items()
    }


def raw(ref: str) -> dict:
    return json.loads(_imagetools(["--raw", ref]))


def is_attestation(descriptor: dict) -> bool:
    annotations = descriptor.get("annotations") or {}
    return annotations.get("vnd.docker.reference.type") == "attestation-manifest" or (
        descriptor.get("platform", {}).get("architecture") == "unknown"
    )


def platform_manifests(index: dict, fetch: Callable[[str], dict]) -> dict[str, tuple[str, int]]:
    """platform → (manifest digest, compressed bytes = config + layers). Attestations are skipped."""
    if index.get("mediaType") not in INDEX_TYPES and "manifests" not in index:
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


def registry_platforms(repo: str, digest: str) -> dict[str, tuple[str, int]]:
    top = raw(f"{repo}@{digest}")
    if "manifests" not in top:
        size = top.get("config", {}).get("size", 0) + sum(layer.get("size", 0) for layer in top.get("layers", []))
        return {"single": (digest, size)}
    return platform_manifests(top, lambda d: raw(f"{repo}@{d}"))


class OciArchive:
    """An OCI image layout in a tar file, as `docker buildx build --output type=oci` writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self, tar: tarfile.TarFile, name: str) -> dict:
        member = tar.extractfile(name)
        if member is None:
            raise ValueError(f"{self.path}: {name} missing")
        return json.loads(member.read())

    def blob(self, tar: tarfile.TarFile, digest: str) -> dict:
        return json.loads(self.open_blob(tar, digest).read())

    def top_index(self) -> tuple[str, dict]:
        """(digest, content) of the image index the layout's index.json points to."""
        with tarfile.open(self.path) as tar:
            layout = self._read(tar, "index.json")
            descriptor = layout["manifests"][0]
            return descriptor["digest"], self.blob(tar, descriptor["digest"])

    def configs(self) -> dict[str, dict]:
        """platform → image config, like image_configs() for a registry reference."""
        out: dict[str, dict] = {}
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

    def open_blob(self, tar: tarfile.TarFile, digest: str):
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
    descriptor: dict  # as the index lists it: mediaType, size, digest
    manifest: dict
    config: dict
    statements: list[tuple[str, bytes]]  # (predicate type, in-toto statement) from BuildKit
