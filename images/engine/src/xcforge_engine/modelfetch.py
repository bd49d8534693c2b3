"""`oci://REGISTRY/REPO@sha256:…`: fetch a signed model artifact into a directory (standard library).

What `build.py model unpack` does on the build side, for the image itself (an init container, or
`serve --model oci://…`): the manifest by digest (checked), the config, every chunk streamed to its
file with its SHA-256 checked, and the `.sm2` / `.sig` signature tags written as the record
`.xcforge-model/` (docs/models.md). Trust is not decided here: modelverify.verify_model checks the
signatures and every file afterwards, with the keys the operator gave.

Registry access: the OCI distribution API over https (http for loopback, or XCFORGE_REGISTRY_INSECURE=1),
anonymous or with XCFORGE_REGISTRY_USERNAME (or XCFORGE_REGISTRY_USER) / XCFORGE_REGISTRY_PASSWORD, the
names `build.py`'s registry client reads too, Basic or Bearer tokens as distribution's token spec
describes (WWW-Authenticate realm, service, scope).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xcforge_engine import log
from xcforge_engine.modelverify import ARTIFACT_TYPE, RECORD_DIR, ModelRefused

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_REF = re.compile(r"^oci://(?P<host>[^/]+)/(?P<repo>[a-z0-9._/-]+)@(?P<digest>sha256:[0-9a-f]{64})$")
_BUFFER = 4 * 1024 * 1024
_SCHEMES = (("sm2", ".sm2", "cn.xcforge.sm2/signature"), ("cosign", ".sig", "dev.cosignproject.cosign/signature"))
DETACHED_MEDIA_TYPE = "application/vnd.xcforge.detached-signatures.v1+json"


def parse(ref: str) -> tuple[str, str, str]:
    match = _REF.match(ref)
    if match is None:
        raise ModelRefused(
            f"model {ref}: give oci://REGISTRY/REPO@sha256:<digest> "
            "(a digest, not a tag: the digest is what was signed)"
        )
    return match["host"], match["repo"], match["digest"]


class _Registry:
    def __init__(self, host: str, env: Mapping[str, str]) -> None:
        loopback = host.split(":")[0] in ("localhost", "127.0.0.1", "[::1]")
        insecure = loopback or env.get("XCFORGE_REGISTRY_INSECURE") == "1"
        self.base = f"{'http' if insecure else 'https'}://{host}"
        user = env.get("XCFORGE_REGISTRY_USERNAME") or env.get("XCFORGE_REGISTRY_USER")
        password = env.get("XCFORGE_REGISTRY_PASSWORD")
        self.basic = base64.b64encode(f"{user}:{password}".encode()).decode() if user and password else None
        self.token: str | None = None
        self.host = host

    def _authorize(self, challenge: str) -> None:
        kind, _, params = challenge.partition(" ")
        if kind.lower() == "basic":
            if self.basic is None:
                raise ModelRefused(
                    f"registry {self.host} asks for a login: "
                    "set XCFORGE_REGISTRY_USERNAME and XCFORGE_REGISTRY_PASSWORD"
                )
            return
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        query = urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
        request = urllib.request.Request(f"{fields.get('realm', '')}?{query}")
        if self.basic:
            request.add_header("Authorization", f"Basic {self.basic}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                doc = json.load(response)
        except urllib.error.HTTPError as exc:
            login = "the login was refused" if exc.code in (401, 403) else f"answered {exc.code} {exc.reason}"
            raise ModelRefused(f"registry {self.host}: its token service {fields.get('realm')}: {login}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ModelRefused(
                f"registry {self.host}: no token from {fields.get('realm')} ({getattr(exc, 'reason', exc)})"
            ) from None
        self.token = doc.get("token") or doc.get("access_token")
        if not self.token:
            raise ModelRefused(f"registry {self.host}: its token service {fields.get('realm')} sent no token")

    def open(self, path: str, accept: str | None = None) -> Any:
        """The response to GET path (None on 404), authenticating once when asked."""
        for attempt in (0, 1):
            request = urllib.request.Request(self.base + path)
            if accept:
                request.add_header("Accept", accept)
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            elif self.basic:
                request.add_header("Authorization", f"Basic {self.basic}")
            try:
                return urllib.request.urlopen(request, timeout=300)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401 and attempt == 0 and exc.headers.get("WWW-Authenticate"):
                    self._authorize(exc.headers["WWW-Authenticate"])
                    continue
                if exc.code == 401 and self.basic:
                    raise ModelRefused(
                        f"registry {self.host} refused the login of XCFORGE_REGISTRY_USERNAME "
                        "(or the password in XCFORGE_REGISTRY_PASSWORD)"
                    ) from None
                raise ModelRefused(f"registry {self.host}: GET {path} answered {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError) as exc:
                raise ModelRefused(f"registry {self.host}: cannot reach it ({getattr(exc, 'reason', exc)})") from None
        raise ModelRefused(f"registry {self.host}: GET {path} was refused after logging in")

    def read(self, path: str, accept: str | None = None, limit: int = 16 * 1024 * 1024) -> bytes | None:
        response = self.open(path, accept)
        if response is None:
            return None
        with response:
            data: bytes = response.read(limit + 1)
        if len(data) > limit:
            raise ModelRefused(f"registry {self.host}: {path} is larger than {limit} bytes")
        return data


def is_archive(model: str) -> bool:
    """A model artifact written by `build.py model pack` as an OCI archive (mounted into the container)."""
    return model.endswith(".oci.tar")


def archive_digest(path: Path) -> str:
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("index.json")
            digest = json.loads(member.read())["manifests"][0]["digest"] if member else ""
    except (OSError, tarfile.TarError, ValueError, KeyError, IndexError) as exc:
        raise ModelRefused(f"model {path}: not a readable model archive ({exc})") from None
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", str(digest)):
        raise ModelRefused(f"model {path}: its index.json names no manifest digest")
    return str(digest)


def unpack_archive(path: Path, dest: Path) -> str:
    """The archive's files into `dest`, every chunk checked as it streams, and the record from the
    manifest, the config and the signature files beside the archive (`<archive>.signatures/`)."""
    digest = archive_digest(path)
    try:
        with tarfile.open(path) as tar:

            def blob(digest: str, limit: int | None = None) -> bytes:
                member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
                if member is None:
                    raise KeyError(digest)
                return member.read(limit if limit is not None else -1)

            manifest_bytes = blob(digest, 16 * 1024 * 1024)
            if _sha256(manifest_bytes) != digest:
                raise ModelRefused(f"model {path}: its manifest does not match its digest")
            manifest = json.loads(manifest_bytes)
            if manifest.get("artifactType") != ARTIFACT_TYPE:
                raise ModelRefused(f"model {path}: not an xcforge model artifact ({manifest.get('artifactType')})")
            config_bytes = blob(manifest["config"]["digest"], 64 * 1024 * 1024)
            if _sha256(config_bytes) != manifest["config"]["digest"]:
                raise ModelRefused(f"model {path}: its config differs from the manifest")
            dest.mkdir(parents=True, exist_ok=True)
            try:
                for entry in json.loads(config_bytes).get("files") or []:
                    rel = str(entry["path"])
                    target = (dest / rel).resolve()
                    if not target.is_relative_to(dest.resolve()):
                        raise ModelRefused(f"model {path}: file path {rel!r} leaves the model directory")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with target.open("wb") as out:
                        for index, chunk in enumerate(entry.get("chunks") or []):
                            member = tar.extractfile("blobs/sha256/" + chunk["digest"].removeprefix("sha256:"))
                            if member is None:
                                raise KeyError(chunk["digest"])
                            hasher = hashlib.sha256()
                            while data := member.read(_BUFFER):
                                hasher.update(data)
                                out.write(data)
                            if "sha256:" + hasher.hexdigest() != chunk["digest"]:
                                raise ModelRefused(f"model {path}: chunk {index} of {rel} differs from the manifest")
                _write_record(dest, digest, manifest_bytes, config_bytes)
                signatures = path.with_name(path.name + ".signatures")
                for scheme, suffix, _ in _SCHEMES:
                    found = signatures / f"{digest.replace(':', '-')}{suffix}.json"
                    if found.is_file():
                        shutil.copyfile(found, dest / RECORD_DIR / "signatures" / f"{scheme}.json")
            except BaseException:
                empty(dest)
                raise
    except KeyError as exc:
        raise ModelRefused(f"model {path}: blob {exc.args[0]} is missing; the archive is incomplete") from None
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise ModelRefused(f"model {path}: cannot unpack it ({exc})") from None
    return digest


def _write_record(dest: Path, digest: str, manifest_bytes: bytes, config_bytes: bytes) -> Path:
    record = dest / RECORD_DIR
    (record / "signatures").mkdir(parents=True, exist_ok=True)
    (record / "manifest.json").write_bytes(manifest_bytes)
    (record / "config.json").write_bytes(config_bytes)
    (record / "digest").write_text(digest + "\n", encoding="ascii")
    return record


def empty(dest: Path) -> None:
    """Remove what is in `dest`, not `dest`: it may be a mount point (an init container's emptyDir)."""
    for child in dest.iterdir() if dest.is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fetch(ref: str, dest: Path, env: Mapping[str, str]) -> str:
    """Write the artifact `ref` names into `dest` (new or empty); its manifest digest. Nothing is left
    behind on failure."""
    host, repo, digest = parse(ref)
    if dest.exists() and any(dest.iterdir()):
        raise ModelRefused(f"fetch-model {dest}: not empty; give a new or empty directory")
    registry = _Registry(host, env)
    log.info(f"fetch: GET {registry.base}/v2/{repo}/manifests/{digest}")
    manifest_bytes = registry.read(f"/v2/{repo}/manifests/{digest}", OCI_MANIFEST)
    if manifest_bytes is None:
        raise ModelRefused(f"model {ref}: not in the registry")
    if _sha256(manifest_bytes) != digest:
        raise ModelRefused(f"model {ref}: the registry sent a manifest with another digest")
    manifest = json.loads(manifest_bytes)
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise ModelRefused(f"model {ref}: not an xcforge model artifact ({manifest.get('artifactType')})")
    config_digest = manifest["config"]["digest"]
    config_bytes = registry.read(f"/v2/{repo}/blobs/{config_digest}")
    if config_bytes is None or _sha256(config_bytes) != config_digest:
        raise ModelRefused(f"model {ref}: its config is missing or differs from the manifest")
    config = json.loads(config_bytes)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        for entry in config.get("files") or []:
            rel = str(entry["path"])
            target = (dest / rel).resolve()
            if not target.is_relative_to(dest.resolve()):
                raise ModelRefused(f"model {ref}: file path {rel!r} leaves the model directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                for index, chunk in enumerate(entry.get("chunks") or []):
                    response = registry.open(f"/v2/{repo}/blobs/{chunk['digest']}")
                    if response is None:
                        raise ModelRefused(
                            f"model {ref}: chunk {index} of {rel} ({chunk['digest']}) is not in the registry"
                        )
                    hasher = hashlib.sha256()
                    with response:
                        while data := response.read(_BUFFER):
                            hasher.update(data)
                            out.write(data)
                    if "sha256:" + hasher.hexdigest() != chunk["digest"]:
                        raise ModelRefused(f"model {ref}: chunk {index} of {rel} differs from the signed manifest")
            log.info(f"fetch: {rel} ({entry['size']} bytes)")
        record = _write_record(dest, digest, manifest_bytes, config_bytes)
        for scheme, suffix, annotation in _SCHEMES:
            tag = digest.replace(":", "-") + suffix
            raw = registry.read(f"/v2/{repo}/manifests/{tag}", OCI_MANIFEST)
            if raw is None:
                continue
            entries = []
            for layer in json.loads(raw).get("layers") or []:
                payload = registry.read(f"/v2/{repo}/blobs/{layer['digest']}", limit=64 * 1024)
                annotations = layer.get("annotations") or {}
                if payload is None or annotation not in annotations:
                    continue
                entries.append({"payload": base64.b64encode(payload).decode("ascii"), "annotations": annotations})
            doc = {"mediaType": DETACHED_MEDIA_TYPE, "subject": digest, "scheme": scheme, "signatures": entries}
            (record / "signatures" / f"{scheme}.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except BaseException:
        empty(dest)
        raise
    return digest
