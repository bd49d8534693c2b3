"""Where signatures live: tags next to the image in its registry, or files next to an OCI archive.

Registry (tag scheme — distribution 2.8 has no referrers API): `sha256-<hex>.sig` for cosign,
`sha256-<hex>.sm2` for SM2, each an OCI image manifest with one layer per signature (see
cosign_format.py and sm2_format.py). Signatures accumulate: a new one is appended as a layer, and
signing the same payload again with the same key changes nothing. Two writers racing on one tag
could drop each other's layer (cosign has the same read-modify-write); every write is read back and
retried until our layer is present.

Archive: `<archive>.signatures/sha256-<hex>.<scheme suffix>.json`, a JSON document holding the same
payloads and layer annotations (`DETACHED_MEDIA_TYPE`).

Attestations (attest.py) sit beside them the same way: tags `.att` (cosign) / `.sm2att` (SM2), or
`<archive>.signatures/sha256-<hex>.att.json` / `.sm2att.json`. The two places are the two
implementations of `SignatureStore` (RegistryStore, OciArchiveStore): every operation in sign.py,
verify.py and promote.py is written once against that interface, the way cibuildwheel puts its
platforms behind one.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from ocicore.registry import (
    OCI_CONFIG,
    OCI_MANIFEST,
    Reference,
    RegistryClient,
    RegistryError,
    RegistryNotFound,
    canonical_json,
    is_digest,
    sha256_digest,
)
from signing import cosign_format, sm2_format
from signing.dsse import (
    DSSE_MEDIA_TYPE,
    PREDICATE_ANNOTATION,
    AttestResult,
    StoredAttestation,
    already_attested,
    envelope,
    layer_annotations,
)
from signing.errors import InvalidSigningRequest, SigningError
from signing.payload import SIMPLE_SIGNING_MEDIA_TYPE
from signing.signers import Signer

FORMATS: dict[str, ModuleType] = {cosign_format.SCHEME: cosign_format, sm2_format.SCHEME: sm2_format}
DETACHED_MEDIA_TYPE = "application/vnd.xcforge.detached-signatures.v1+json"
ATTESTATIONS_MEDIA_TYPE = "application/vnd.xcforge.detached-attestations.v1+json"
ATTESTATION_TAG_SUFFIXES = {cosign_format.SCHEME: ".att", sm2_format.SCHEME: ".sm2att"}
SBOM_TAG_SUFFIX = ".sbom"
_MAX_PAYLOAD = 64 * 1024
_MAX_ENVELOPE = 32 * 1024 * 1024
_ZERO_TIME = "0001-01-01T00:00:00Z"  # what go-containerregistry writes into cosign's config


@dataclass(frozen=True)
class StoredSignature:
    """One signature layer as found: payload bytes and the layer's annotations."""

    scheme: str
    payload: bytes | None
    annotations: Mapping[str, str]
    location: str
    problem: str | None = None  # why the layer could not be read (then payload is None)


@dataclass(frozen=True)
class AttachResult:
    scheme: str
    key_id: str
    location: str
    added: bool  # False: this key had already signed this payload here


@dataclass
class SignatureManifest:
    layers: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


def format_for(scheme: str) -> ModuleType:
    try:
        return FORMATS[scheme]
    except KeyError:
        raise SigningError(f"unknown signature scheme {scheme!r} (known: {', '.join(FORMATS)})") from None


def digest_tag(digest: str, suffix: str) -> str:
    """`sha256:<hex>` → `sha256-<hex><suffix>`: cosign's tag-based discovery (SIGNATURE_SPEC), used for
    signatures, attestations and SBOMs alike."""
    if not is_digest(digest):
        raise SigningError(f"not a manifest digest: {digest!r}")
    return digest.replace(":", "-", 1) + suffix


def signature_tag(digest: str, scheme: str) -> str:
    """`sha256:<hex>` → `sha256-<hex>.sig` / `.sm2`."""
    return digest_tag(digest, format_for(scheme).TAG_SUFFIX)


def attestation_tag(digest: str, scheme: str) -> str:
    return digest_tag(digest, ATTESTATION_TAG_SUFFIXES[scheme])


def sbom_tag(digest: str) -> str:
    return digest_tag(digest, SBOM_TAG_SUFFIX)


def signature_config_blob(layer_digests: Sequence[str]) -> bytes:
    # The layout go-containerregistry's empty image gets once layers are appended (cosign's .sig).
    return canonical_json(
        {
            "architecture": "",
            "created": _ZERO_TIME,
            "history": [{"created": _ZERO_TIME} for _ in layer_digests],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": list(layer_digests)},
            "config": {},
        }
    )


def manifest_bytes(manifest: SignatureManifest, config: bytes) -> bytes:
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256_digest(config)},
        "layers": manifest.layers,
    }
    if manifest.annotations:
        doc["annotations"] = manifest.annotations
    return canonical_json(doc)


# ------------------------------------------------------------------------------------------ reading and writing


def read_manifest(client: RegistryClient, repository: str, tag: str) -> SignatureManifest | None:
    try:
        doc = client.get_manifest(repository, tag, accept=(OCI_MANIFEST,)).json()
    except RegistryNotFound:
        return None
    except ValueError as exc:
        raise RegistryError(f"{client.registry}/{repository}:{tag} is not JSON ({exc})") from exc
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise RegistryError(f"{client.registry}/{repository}:{tag} is not an image manifest")
    return SignatureManifest(list(layers), dict(doc.get("annotations") or {}))


def read_sbom(client: RegistryClient, repository: str, digest: str) -> bytes | None:
    """The raw SBOM attached under `sha256-<hex>.sbom` (attest.attach_sbom); None when there is none."""
    manifest = read_manifest(client, repository, sbom_tag(digest))
    if manifest is None or not manifest.layers:
        return None
    layer = manifest.layers[0]
    return client.get_blob(repository, layer["digest"], max_size=_MAX_ENVELOPE)


def registry_platform_digests(client: RegistryClient, repository: str, digest: str) -> dict[str, str]:
    """platform digest → platform, for an index (attestation manifests left out) or one manifest."""
    from ocicore.media import is_attestation

    top = client.get_manifest(repository, digest)
    if not top.is_index:
        return {digest: "single"}
    out = {}
    for child in top.json().get("manifests") or []:
        platform = child.get("platform") or {}
        if is_attestation(child) or not child.get("digest"):
            continue
        out[child["digest"]] = f"{platform.get('os', '?')}/{platform.get('architecture', '?')}"
    return out


def detached_dir(archive: os.PathLike[str] | str) -> Path:
    archive = Path(archive)
    return archive.with_name(archive.name + ".signatures")


def detached_path(archive: os.PathLike[str] | str, digest: str, scheme: str) -> Path:
    return detached_dir(archive) / f"{signature_tag(digest, scheme)}.json"


def detached_attestation_path(archive: os.PathLike[str] | str, digest: str, scheme: str) -> Path:
    return detached_dir(archive) / f"{attestation_tag(digest, scheme)}.json"


def read_detached_doc(
    path: Path, digest: str, scheme: str, *, media_type: str = DETACHED_MEDIA_TYPE, what: str = "signature"
) -> dict[str, Any] | None:
    """A detached signature (or attestation) file for `digest`/`scheme`; None when there is none."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SigningError(f"{path}: unreadable {what} file ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("mediaType") != media_type:
        raise SigningError(f"{path}: not an xcforge {what} file")
    if doc.get("subject") != digest or doc.get("scheme") != scheme:
        found = f"{doc.get('subject')} ({doc.get('scheme')})"
        raise SigningError(f"{path}: {what}s for {found}, expected {digest} ({scheme})")
    return doc


def write_detached_doc(path: Path, doc: Mapping[str, Any]) -> None:
    """Replace the file atomically: a reader never sees half a signature file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def detached_document(digest: str, scheme: str, signatures: Sequence[StoredSignature]) -> bytes:
    """Signatures as one detached-signature file (the archive's format), wherever they were read."""
    doc = {
        "mediaType": DETACHED_MEDIA_TYPE,
        "subject": digest,
        "scheme": scheme,
        "signatures": [
            {"payload": base64.b64encode(s.payload).decode("ascii"), "annotations": dict(s.annotations)}
            for s in signatures
            if s.payload is not None
        ],
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def _annotations_of(entry: object) -> dict[str, str]:
    annotations = entry.get("annotations") if isinstance(entry, dict) else None
    return {k: v for k, v in (annotations or {}).items() if isinstance(v, str)}


def _schemes(signers: Sequence[Signer]) -> list[str]:
    return list(dict.fromkeys(s.scheme for s in signers))


def _attest_new(
    signers: Sequence[Signer],
    scheme: str,
    statements: Sequence[tuple[str, bytes]],
    existing: list[bytes],
    location: str,
    add: Callable[[bytes, dict[str, str]], None],
) -> list[AttestResult]:
    """An envelope per (signer of `scheme`, statement) not in `existing` yet, handed to `add` with its
    layer annotations; signing the same statement again with the same key changes nothing."""
    results = []
    for signer in (s for s in signers if s.scheme == scheme):
        for predicate_type, payload in statements:
            if already_attested(signer, payload, existing):
                results.append(AttestResult(scheme, signer.key_id, predicate_type, location, False))
                continue
            data = envelope(payload, signer)
            add(data, layer_annotations(signer, predicate_type))
            existing.append(data)
            results.append(AttestResult(scheme, signer.key_id, predicate_type, location, True))
    return results


# ------------------------------------------------------------------------------------------ the stores


class SignatureStore(Protocol):
    """Where one image's signatures and attestations live. Every operation (sign.py, verify.py, promote.py)
    is written once against this; RegistryStore and OciArchiveStore are the two places."""

    @property
    def name(self) -> str:
        """The repository the image is (or will be) published as: the payload's identity."""

    @property
    def where(self) -> str:
        """The image's place, as audit entries name it (repository, or archive path)."""

    def describe(self, digest: str) -> str:
        """The image at `digest` in one line, as reports and audit entries name it."""

    def has_subject(self, digest: str) -> bool:
        """The image itself is there (a registry refuses signatures of what it does not hold)."""

    def absent(self, digest: str, scheme: str) -> tuple[str, str]:
        """(reason, location) reported when the scheme has no signatures at all."""

    def read_signatures(self, digest: str, scheme: str) -> list[StoredSignature] | None:
        """Every signature of the scheme; None when there is no tag (file) for it."""

    def write_signatures(self, digest: str, payload: bytes, signers: Sequence[Signer]) -> list[AttachResult]:
        """Sign `payload` with each signer and add what is not there yet."""

    def read_attestations(self, digest: str, scheme: str) -> list[StoredAttestation] | None:
        """Every attestation envelope of the scheme about `digest`; None when there are none stored."""

    def write_attestations(
        self, digest: str, statements: Sequence[tuple[str, bytes]], signers: Sequence[Signer]
    ) -> list[AttestResult]:
        """Sign each (predicate type, statement) with each signer as a DSSE envelope and add it."""

    def platform_digests(self, digest: str) -> dict[str, str]:
        """platform manifest digest → platform (os/arch) of the image; InvalidSigningRequest when unreadable."""

    def read_sbom(self, platform_digest: str, platform: str) -> bytes | None:
        """The raw SBOM attached to one platform, unsigned; None when there is none."""

    def signature_document(self, digest: str, scheme: str) -> bytes | None:
        """The scheme's signatures as one detached-signature file (what a model record carries)."""


class RegistryStore:
    """Tags next to the image in its registry (module docstring); `ref` names the repository."""

    def __init__(self, ref: Reference, client: RegistryClient | None = None, *, insecure: bool = False) -> None:
        self.ref = ref
        self.client = client or RegistryClient(ref.registry, insecure=insecure)

    @classmethod
    def open(
        cls, repo: str | Reference, client: RegistryClient | None = None, *, insecure: bool = False
    ) -> RegistryStore:
        return cls(repo if isinstance(repo, Reference) else Reference.parse(repo), client, insecure=insecure)

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def where(self) -> str:
        return self.ref.name

    def describe(self, digest: str) -> str:
        return f"{self.ref.name}@{digest}"

    def resolve(self, tag: str) -> str:
        return self.client.resolve(self.ref.repository, tag)

    def has_subject(self, digest: str) -> bool:
        return self.client.head_manifest(self.ref.repository, digest) is not None

    def absent(self, digest: str, scheme: str) -> tuple[str, str]:
        return "no signatures (tag not found)", f"{self.ref.name}:{signature_tag(digest, scheme)}"

    def _location(self, tag: str) -> str:
        return f"{self.client.registry}/{self.ref.repository}:{tag}"

    def read_signatures(self, digest: str, scheme: str) -> list[StoredSignature] | None:
        tag = signature_tag(digest, scheme)
        manifest = read_manifest(self.client, self.ref.repository, tag)
        if manifest is None:
            return None
        return [
            StoredSignature(scheme, blob, _annotations_of(layer), location, problem)
            for location, layer, blob, problem in self._layers(tag, manifest, _MAX_PAYLOAD, SIMPLE_SIGNING_MEDIA_TYPE)
        ]

    def _layers(
        self, tag: str, manifest: SignatureManifest, max_size: int, media_type: str | None = None
    ) -> list[tuple[str, dict[str, Any], bytes | None, str | None]]:
        """(location, layer, blob, problem) of each layer under `tag`: its blob fetched, or why not."""
        found = []
        for index, layer in enumerate(manifest.layers):
            layer = layer if isinstance(layer, dict) else {}
            blob, problem = None, None
            layer_digest = layer.get("digest")
            if not isinstance(layer_digest, str) or not is_digest(layer_digest):
                problem = "layer has no valid digest"
            elif media_type is not None and layer.get("mediaType") != media_type:
                problem = f"layer media type {layer.get('mediaType')!r} is not a simple-signing payload"
            else:
                try:
                    blob = self.client.get_blob(self.ref.repository, layer_digest, max_size=max_size)
                except RegistryError as exc:
                    what = "payload blob unreadable" if media_type == SIMPLE_SIGNING_MEDIA_TYPE else "unreadable"
                    problem = f"{what}: {exc.message}"
            found.append((f"{self._location(tag)}#{index}", layer, blob, problem))
        return found

    def write_signatures(
        self, digest: str, payload: bytes, signers: Sequence[Signer], *, attempts: int = 3
    ) -> list[AttachResult]:
        results: list[AttachResult] = []
        for scheme in _schemes(signers):
            scheme_signers = [s for s in signers if s.scheme == scheme]
            results.extend(self._write_one_scheme(digest, payload, scheme, scheme_signers, attempts))
        return results

    def _write_one_scheme(
        self, digest: str, payload: bytes, scheme: str, signers: Sequence[Signer], attempts: int
    ) -> list[AttachResult]:
        """Read-modify-write of one signature tag until a read-back shows our layers. The loop is
        optimistic concurrency against other signers, not HTTP retries (each request is retried by the
        client's urllib3 Retry already), so it stays a loop."""
        client, repository = self.client, self.ref.repository
        fmt = format_for(scheme)
        tag = signature_tag(digest, scheme)
        location = self._location(tag)
        payload_digest = sha256_digest(payload)
        client.push_blob(repository, payload, payload_digest)
        new_layers: dict[str, dict[str, Any]] = {}  # key id → the layer we add
        for _attempt in range(attempts):
            manifest = read_manifest(client, repository, tag) or SignatureManifest()
            results: list[AttachResult] = []
            appended = False
            for signer in signers:
                existing = [
                    layer
                    for layer in manifest.layers
                    if isinstance(layer, dict) and layer.get("digest") == payload_digest
                ]
                if any(signer.has_signed(payload, layer.get("annotations") or {}) for layer in existing):
                    results.append(AttachResult(scheme, signer.key_id, location, added=signer.key_id in new_layers))
                    continue
                layer = new_layers.get(signer.key_id) or {
                    "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                    "size": len(payload),
                    "digest": payload_digest,
                    "annotations": signer.sign(payload),
                }
                new_layers[signer.key_id] = layer
                manifest.layers.append(layer)
                appended = True
                results.append(AttachResult(scheme, signer.key_id, location, added=True))
            if not appended:
                return results
            manifest.annotations = {**manifest.annotations, **fmt.MANIFEST_ANNOTATIONS}
            self._put(tag, manifest)
            # Read back: a concurrent writer may have replaced the tag between our read and write.
            stored = read_manifest(client, repository, tag) or SignatureManifest()
            if all(layer in stored.layers for layer in new_layers.values()):
                return results
        raise SigningError(f"{location}: the signature tag kept changing under us (concurrent signers?); retry")

    def _put(self, tag: str, manifest: SignatureManifest) -> None:
        config = signature_config_blob([layer.get("digest", "") for layer in manifest.layers])
        self.client.push_blob(self.ref.repository, config)
        self.client.put_manifest(self.ref.repository, tag, manifest_bytes(manifest, config), OCI_MANIFEST)

    def read_attestations(self, digest: str, scheme: str) -> list[StoredAttestation] | None:
        tag = attestation_tag(digest, scheme)
        manifest = read_manifest(self.client, self.ref.repository, tag)
        return None if manifest is None else self._attestations(tag, manifest, scheme)

    def _attestations(self, tag: str, manifest: SignatureManifest, scheme: str) -> list[StoredAttestation]:
        """Each layer of an attestation manifest with its envelope fetched (or why it could not be)."""
        return [
            StoredAttestation(
                scheme, str((layer.get("annotations") or {}).get(PREDICATE_ANNOTATION, "")), blob, where, why
            )
            for where, layer, blob, why in self._layers(tag, manifest, _MAX_ENVELOPE)
        ]

    def write_attestations(
        self, digest: str, statements: Sequence[tuple[str, bytes]], signers: Sequence[Signer]
    ) -> list[AttestResult]:
        results: list[AttestResult] = []
        for scheme in _schemes(signers):
            tag = attestation_tag(digest, scheme)
            location = self._location(tag)
            manifest = read_manifest(self.client, self.ref.repository, tag) or SignatureManifest()
            existing = [s.envelope for s in self._attestations(tag, manifest, scheme) if s.envelope]

            def add(data: bytes, annotations: dict[str, str], layers: list[dict[str, Any]] = manifest.layers) -> None:
                self.client.push_blob(self.ref.repository, data)
                layers.append(
                    {
                        "mediaType": DSSE_MEDIA_TYPE,
                        "size": len(data),
                        "digest": sha256_digest(data),
                        "annotations": annotations,
                    }
                )

            made = _attest_new(signers, scheme, statements, existing, location, add)
            results += made
            if any(r.added for r in made):
                self._put(tag, manifest)
        return results

    def platform_digests(self, digest: str) -> dict[str, str]:
        return registry_platform_digests(self.client, self.ref.repository, digest)

    def read_sbom(self, platform_digest: str, platform: str) -> bytes | None:
        return read_sbom(self.client, self.ref.repository, platform_digest)

    def signature_document(self, digest: str, scheme: str) -> bytes | None:
        stored = self.read_signatures(digest, scheme)
        return detached_document(digest, scheme, stored) if stored else None


class OciArchiveStore:
    """Files beside an OCI-layout archive (module docstring); `name` is what it will be published as."""

    def __init__(self, archive: os.PathLike[str] | str, name: str = "") -> None:
        self.archive = archive
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def where(self) -> str:
        return str(self.archive)

    def describe(self, digest: str) -> str:
        return f"{self.archive} ({self._name}@{digest})"

    def has_subject(self, digest: str) -> bool:
        return True  # the archive is what is signed; platform_digests checks its digest where it matters

    def absent(self, digest: str, scheme: str) -> tuple[str, str]:
        return "no signature file", str(Path(self.archive)) + ".signatures/"

    def _document(self, kind: str, digest: str, scheme: str, *, new: bool = False) -> tuple[Path, dict[str, Any]]:
        """The file of `kind` ("signatures" | "attestations") for `digest`/`scheme` and what it holds
        ({} when there is no file; with `new`, an empty document of that kind)."""
        signatures = kind == "signatures"
        media_type, what = (
            (DETACHED_MEDIA_TYPE, "signature") if signatures else (ATTESTATIONS_MEDIA_TYPE, "attestation")
        )
        path = (detached_path if signatures else detached_attestation_path)(self.archive, digest, scheme)
        doc = read_detached_doc(path, digest, scheme, media_type=media_type, what=what)
        if doc is None:
            doc = {"mediaType": media_type, "subject": digest, "scheme": scheme, kind: []} if new else {}
        return path, doc

    def read_signatures(self, digest: str, scheme: str) -> list[StoredSignature] | None:
        path, doc = self._document("signatures", digest, scheme)
        if not doc:
            return None
        found = []
        for index, entry in enumerate(doc.get("signatures") or []):
            location = f"{path}#{index}"
            annotations = _annotations_of(entry)
            try:
                payload = base64.b64decode(entry["payload"], validate=True)
                found.append(StoredSignature(scheme, payload, annotations, location))
            except (KeyError, TypeError, binascii.Error, ValueError):
                found.append(StoredSignature(scheme, None, annotations, location, "payload missing or not base64"))
        return found

    def write_signatures(self, digest: str, payload: bytes, signers: Sequence[Signer]) -> list[AttachResult]:
        results: list[AttachResult] = []
        for scheme in _schemes(signers):
            path, doc = self._document("signatures", digest, scheme, new=True)
            entries = doc["signatures"]
            encoded = base64.b64encode(payload).decode("ascii")
            changed = False
            for signer in (s for s in signers if s.scheme == scheme):
                same_payload = [e for e in entries if isinstance(e, dict) and e.get("payload") == encoded]
                if any(signer.has_signed(payload, e.get("annotations") or {}) for e in same_payload):
                    results.append(AttachResult(scheme, signer.key_id, str(path), added=False))
                    continue
                entries.append({"payload": encoded, "annotations": signer.sign(payload)})
                changed = True
                results.append(AttachResult(scheme, signer.key_id, str(path), added=True))
            if changed:
                write_detached_doc(path, doc)
        return results

    def read_attestations(self, digest: str, scheme: str) -> list[StoredAttestation] | None:
        path, doc = self._document("attestations", digest, scheme)
        if not doc:
            return None
        found = []
        for index, entry in enumerate(doc.get("attestations") or []):
            location = f"{path}#{index}"
            if not isinstance(entry, dict) or not isinstance(entry.get("envelope"), dict):
                found.append(StoredAttestation(scheme, "", None, location, "entry has no envelope"))
                continue
            predicate_type = str((entry.get("annotations") or {}).get(PREDICATE_ANNOTATION, ""))
            found.append(StoredAttestation(scheme, predicate_type, canonical_json(entry["envelope"]), location))
        return found

    def write_attestations(
        self, digest: str, statements: Sequence[tuple[str, bytes]], signers: Sequence[Signer]
    ) -> list[AttestResult]:
        results: list[AttestResult] = []
        for scheme in _schemes(signers):
            path, doc = self._document("attestations", digest, scheme, new=True)
            entries = doc["attestations"]
            existing = [canonical_json(e["envelope"]) for e in entries if isinstance(e, dict) and "envelope" in e]

            def add(data: bytes, annotations: dict[str, str], entries: list[Any] = entries) -> None:
                entries.append({"envelope": json.loads(data), "annotations": annotations})

            made = _attest_new(signers, scheme, statements, existing, str(path), add)
            results += made
            if any(r.added for r in made):
                write_detached_doc(path, doc)
        return results

    def platform_digests(self, digest: str) -> dict[str, str]:
        from ocicore.layout import OciArchive

        archive = Path(self.archive)
        try:
            top, _ = OciArchive(archive).top_index()
            platforms = OciArchive(archive).platforms()
        except (OSError, ValueError, KeyError, tarfile.TarError) as exc:
            reason = " ".join(str(exc).split())[:120]
            raise InvalidSigningRequest(f"{archive}: not a readable OCI-layout archive ({reason})") from exc
        if top != digest:
            raise InvalidSigningRequest(
                f"{archive} holds {top}, not {digest}: verify the digest the archive was built as"
            )
        return {d: p for p, (d, _size) in platforms.items()}

    def read_sbom(self, platform_digest: str, platform: str) -> bytes | None:
        from ocicore.layout import attestation_dir, sbom_file_name

        try:
            return (attestation_dir(Path(self.archive)) / sbom_file_name(platform)).read_bytes()
        except OSError:
            return None

    def signature_document(self, digest: str, scheme: str) -> bytes | None:
        path = detached_path(self.archive, digest, scheme)
        return path.read_bytes() if path.is_file() else None


def identity_name(reference: str) -> str:
    """The repository a docker-reference names (tags/digests some signers include are dropped)."""
    try:
        return Reference.parse(reference).name
    except Exception:
        return reference


def open_store(
    repository: str | Reference,
    archive: os.PathLike[str] | str | None = None,
    *,
    client: RegistryClient | None = None,
    insecure: bool = False,
) -> SignatureStore:
    """The files beside `archive` when one is given (published later as `repository`), else the registry."""
    if archive is not None:
        return OciArchiveStore(archive, identity_name(str(repository)))
    return RegistryStore.open(repository, client, insecure=insecure)
