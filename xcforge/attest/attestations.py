"""A built archive → what a reviewer asks for next: each platform's SBOM and build provenance.

Written right after the build, before anything is pushed, into `<archive>.attestations/`
(`dist/<target>.attestations/` when the archive is a work file of a push):

- `<os>-<arch>.cdx.json`: the CycloneDX SBOM read from that platform's layers (xcforge/attest/sbom.py);
- `<os>-<arch>.provenance.json`: the SLSA provenance statement BuildKit recorded for it
  (`--provenance=mode=max`), byte for byte, so what gets signed is what BuildKit wrote.

The sign step (xcforge/sign/stage.py) turns both into signed in-toto statements (signing/attest.py);
push modes also attach the raw SBOM in the registry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tarfile
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ocicore import layout, media
from signing.intoto import PROVENANCE_PREDICATES, SBOM_PREDICATE, statement
from xcforge import __version__
from xcforge.attest import sbom
from xcforge.errors import ConfigError
from xcforge.records import AttestationRecord

if TYPE_CHECKING:
    from ocicore.registry import RegistryClient

RECORD = "attestations.json"  # what was written, so a skipped (unchanged) build can sign it again


@functools.cache
def _reader_version() -> str:
    """sbom.py's own hash: a change in what is read from a layer invalidates what was kept."""
    return hashlib.sha256(Path(sbom.__file__).read_bytes()).hexdigest()[:16]


def _layer_cache_key(layer: dict[str, Any]) -> str:
    """Layers are content-addressed: one digest, one set of files."""
    return f"{layer['digest'].replace(':', '-')}-{_reader_version()}"


def _layer_entries(
    reader: layout.OciArchive, tar: tarfile.TarFile, layer: dict[str, Any], cache: Path | None
) -> sbom.LayerEntries:
    """One layer's SBOM-relevant entries, from `cache` when this layer was read before (a cached
    rebuild changes only its top layers)."""
    path = cache / "layers" / f"{_layer_cache_key(layer)}.json" if cache else None
    if path and path.exists():
        try:
            return sbom.LayerEntries.from_json(path.read_text())
        except (ValueError, TypeError, KeyError):
            pass  # an unreadable entry is read again
    entries = sbom.read_layer(reader.open_blob(tar, layer["digest"]), layer["mediaType"])
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(entries.to_json())
        tmp.replace(path)
    return entries


def _document_cache_path(cache: Path, repository: str, digest: str) -> Path:
    """Where the SBOM of one platform manifest is kept. The document is a function of the manifest
    (its layers and config are content-addressed by its digest), the repository it names and the
    code that wrote it, so the same three give the same bytes, checked against the schema once."""
    key = hashlib.sha256(f"{repository}@{digest} {_reader_version()} {__version__}".encode()).hexdigest()[:32]
    return cache / "documents" / f"{key}{sbom.SUFFIX}"


def _sbom_document(
    reader: layout.OciArchive, tar: tarfile.TarFile, image: layout.PlatformImage, repository: str, cache: Path | None
) -> tuple[bytes, int]:
    """(CycloneDX document, component count) of one platform image."""
    kept = _document_cache_path(cache, repository, image.digest) if cache else None
    if kept and kept.exists():
        document = kept.read_bytes()
        try:
            return document, len(json.loads(document).get("components") or [])
        except ValueError:
            pass  # unreadable: written again below
    layers = (_layer_entries(reader, tar, layer, cache) for layer in image.manifest["layers"])
    inventory = sbom.inventory(sbom.merge_layers(layers), image.platform)
    subject = sbom.Subject(repository, image.digest, image.platform, str(image.config.get("created", "")))
    document = sbom.document(inventory, subject)
    if kept:
        kept.parent.mkdir(parents=True, exist_ok=True)
        sbom.write(kept, document)
    return document, len(inventory.packages)


def write_attestations(
    archive: Path, out: Path, repository: str, *, cache: Path | None = None
) -> list[AttestationRecord]:
    """SBOM and provenance of every platform in `archive` (an OCI-layout tar), written under `out`.
    With `cache` (a directory), each layer is read once (what it holds is kept by its digest) and
    each platform manifest's SBOM is written once (a cached rebuild makes the same manifests)."""
    reader = layout.OciArchive(archive)
    written = []
    try:
        with tarfile.open(archive) as tar:
            for image in reader.platform_images(tar):
                document, components = _sbom_document(reader, tar, image, repository, cache)
                sbom_path = out / layout.sbom_file_name(image.platform)
                sbom.write(sbom_path, document)
                provenance_path, provenance_type = None, None
                for predicate_type, statement in image.statements:
                    if predicate_type in PROVENANCE_PREDICATES:
                        provenance_path = out / layout.provenance_file_name(image.platform)
                        sbom.write(provenance_path, statement)
                        provenance_type = predicate_type
                written.append(
                    AttestationRecord(
                        image.platform,
                        image.digest,
                        image.descriptor["mediaType"],
                        image.descriptor["size"],
                        str(sbom_path),
                        str(provenance_path) if provenance_path else None,
                        provenance_type,
                        components,
                    )
                )
    except (tarfile.TarError, OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"{archive}: cannot read the image for its SBOM ({exc})") from exc
    sbom.write(out / RECORD, (json.dumps([w.as_dict() for w in written], indent=1) + "\n").encode())
    return written


def load_recorded(out: Path, digests: AbstractSet[str | None]) -> list[AttestationRecord]:
    """The entries written for these platform digests by an earlier build, when all are there."""
    entries = _recorded(out)
    if {e.digest for e in entries} != digests:
        return []
    return [e for e in entries if all(Path(p).exists() for p in (e.sbom, e.provenance) if p)]


def sbom_statement(document: Any, name: str, digest: str) -> tuple[str, bytes]:
    """The in-toto statement that carries a platform's SBOM: what SM2 and cosign sign."""
    return SBOM_PREDICATE, statement(SBOM_PREDICATE, document, [(name, digest)])


def statements(entry: AttestationRecord, repository: str) -> list[tuple[str, bytes]]:
    """(predicate type, in-toto statement) pairs to sign for one platform."""
    try:
        out = [sbom_statement(json.loads(Path(entry.sbom).read_bytes()), repository, entry.digest)]
        if entry.provenance and entry.provenance_type:
            out.append((entry.provenance_type, Path(entry.provenance).read_bytes()))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"attestation input for {entry.platform} unreadable ({exc}); rebuild with --force") from exc
    return out


def archive_statements(archive: Path, repository: str) -> dict[str, list[tuple[str, bytes]]]:
    """platform digest → statements, from what the build wrote beside `archive`."""
    recorded = _recorded(layout.attestation_dir(archive))
    return {entry.digest: statements(entry, repository) for entry in recorded}


def registry_statements(
    client: RegistryClient, repository: str, name: str, digest: str
) -> dict[str, list[tuple[str, bytes]]]:
    """platform digest → statements, from the registry: the attached SBOM and BuildKit's provenance."""
    from signing.attest import read_sbom

    top = client.get_manifest(repository, digest)
    children: list[dict[str, Any]] = top.json().get("manifests") or [] if top.is_index else [{"digest": digest}]
    provenance: dict[str, tuple[str, bytes]] = {}
    platforms = []
    for child in children:
        annotations = child.get("annotations") or {}
        if not media.is_attestation(child):
            platforms.append(child["digest"])
            continue
        for layer in client.get_manifest(repository, child["digest"]).json().get("layers") or []:
            predicate_type = (layer.get("annotations") or {}).get("in-toto.io/predicate-type", "")
            if predicate_type in PROVENANCE_PREDICATES:
                data = client.get_blob(repository, layer["digest"])
                provenance[annotations.get("vnd.docker.reference.digest", "")] = (predicate_type, data)
    out: dict[str, list[tuple[str, bytes]]] = {}
    for platform_digest in platforms:
        pairs = []
        document = read_sbom(client, repository, platform_digest)
        if document is not None:
            pairs.append(sbom_statement(json.loads(document), name, platform_digest))
        if platform_digest in provenance:
            pairs.append(provenance[platform_digest])
        out[platform_digest] = pairs
    return out


def _recorded(out: Path) -> list[AttestationRecord]:
    """What the build wrote beside the archive ([] when it is missing or not ours)."""
    try:
        entries = json.loads((out / RECORD).read_text(encoding="utf-8"))
        return [AttestationRecord.from_dict(e) for e in entries if e.get("digest")]
    except (OSError, ValueError, TypeError, AttributeError):
        return []
