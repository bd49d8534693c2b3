"""OCI and Docker media types: the one list every module reads (image-spec v1.1, Docker schema 2)."""

from __future__ import annotations

from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
OCI_EMPTY_BLOB = b"{}"
OCI_LAYOUT_VERSION = b'{"imageLayoutVersion":"1.0.0"}'
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"

INDEX_MEDIA_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
IMAGE_MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
# Accept order for reading any manifest (index first: a multi-platform reference must stay one).
MANIFEST_MEDIA_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)


def is_index(descriptor_or_doc: dict[str, Any]) -> bool:
    return descriptor_or_doc.get("mediaType") in INDEX_MEDIA_TYPES or "manifests" in descriptor_or_doc


def is_attestation(descriptor: dict[str, Any]) -> bool:
    """BuildKit's attestation manifests sit in the index as platform unknown/unknown."""
    annotations = descriptor.get("annotations") or {}
    return annotations.get("vnd.docker.reference.type") == "attestation-manifest" or (
        descriptor.get("platform", {}).get("architecture") == "unknown"
    )
