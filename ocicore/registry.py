"""A small OCI distribution client (distribution-spec v1.1) on `requests`.

Kept over oras-py and skopeo (issue 22). oras-py lacks Docker manifest lists, mounts, byte-exact
manifest PUTs and digest checks. skopeo is a subprocess that knows none of xcforge's signature tags.
The figures and the feature matrix are in docs/architecture.md, "Registry client: ocicore vs oras-py vs skopeo".

Enough for pushing and reading images, signatures and attachments by tag or digest: references,
token/basic auth, manifests (OCI and Docker v2 media types), blobs (monolithic upload, cross-repo
mount, streamed download with digest check), tags, deletes; retries with exponential backoff
(urllib3's Retry on the session's adapters: `retry_policy`).

Scheme: plain http for loopback registries (127.0.0.0/8, localhost, ::1), as dockerd treats them;
https elsewhere unless `insecure=True`. Credentials: explicit, then XCFORGE_REGISTRY_USERNAME /
XCFORGE_REGISTRY_PASSWORD, then `auths` in the docker config ($DOCKER_CONFIG/config.json or
~/.docker/config.json; credential helpers are not run).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin, urlparse

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from ocicore import __version__

# `X as X`: explicit re-exports, the names the registry client's callers import from here.
from ocicore.digest import is_digest as is_digest
from ocicore.digest import sha256_digest as sha256_digest
from ocicore.errors import InvalidReference
from ocicore.errors import RegistryError as RegistryError
from ocicore.hashing import ThreadedSha256
from ocicore.layout import platform_manifests
from ocicore.media import DOCKER_MANIFEST as DOCKER_MANIFEST
from ocicore.media import DOCKER_MANIFEST_LIST as DOCKER_MANIFEST_LIST
from ocicore.media import INDEX_MEDIA_TYPES as INDEX_MEDIA_TYPES
from ocicore.media import MANIFEST_MEDIA_TYPES as MANIFEST_MEDIA_TYPES
from ocicore.media import OCI_CONFIG as OCI_CONFIG
from ocicore.media import OCI_EMPTY as OCI_EMPTY
from ocicore.media import OCI_EMPTY_BLOB as OCI_EMPTY_BLOB
from ocicore.media import OCI_INDEX as OCI_INDEX
from ocicore.media import OCI_MANIFEST as OCI_MANIFEST
from ocicore.media import is_attestation as is_attestation

if TYPE_CHECKING:  # what a streamed blob is read from or written to: anything with read(n) / write(b)
    from _typeshed import SupportsRead, SupportsWrite

# go-containerregistry's names for Docker Hub; `index.docker.io` is what cosign writes into payloads.
DOCKER_HUB = "index.docker.io"
_DOCKER_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}
_DOCKER_HUB_API = "registry-1.docker.io"
_THREADED_HASH_FROM = 16 << 20  # bytes: download_blob hashes a blob this large on a thread of its own

# distribution/reference grammar (reference/regexp.go).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$")

_MAX_MANIFEST = 4 * 1024 * 1024  # distribution's own limit
_SPOOL_IN_MEMORY = 32 * 1024 * 1024


@dataclass(frozen=True)
class Reference:
    """`registry/repository[:tag][@digest]`, normalised like the docker CLI and go-containerregistry."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        raw = text.strip()
        if not raw or any(c.isspace() for c in raw):
            raise InvalidReference(f"invalid image reference {text!r}")
        name, digest = raw, None
        if "@" in raw:
            name, digest = raw.split("@", 1)
            if not is_digest(digest):
                raise InvalidReference(f"invalid digest in {text!r}: expected sha256:<64 hex>")
        tag = None
        slash = name.rfind("/")
        colon = name.rfind(":")
        if colon > slash:
            name, tag = name[:colon], name[colon + 1 :]
            if not _TAG.match(tag):
                raise InvalidReference(f"invalid tag {tag!r} in {text!r}")
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
            registry, repository = first, rest
        else:
            registry, repository = DOCKER_HUB, name
        if registry in _DOCKER_HUB_ALIASES:
            registry = DOCKER_HUB
            if "/" not in repository:
                repository = f"library/{repository}"
        if not _HOST.match(registry):
            raise InvalidReference(f"invalid registry host {registry!r} in {text!r}")
        if not _REPOSITORY.match(repository) or len(repository) > 255:
            raise InvalidReference(f"invalid repository {repository!r} in {text!r}: lowercase [a-z0-9._-/] only")
        return cls(registry, repository, tag, digest)

    @property
    def name(self) -> str:
        """`registry/repository`: the identity cosign signs (`ref.Context().Name()`)."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        """What goes after /manifests/: the digest when known, else the tag (default `latest`)."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str | None) -> Reference:
        return replace(self, digest=digest)

    def with_tag(self, tag: str | None) -> Reference:
        return replace(self, tag=tag)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str) -> Reference:
    return Reference.parse(text)


@dataclass(frozen=True)
class Manifest:
    data: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.data)
        return doc

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_MEDIA_TYPES

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


def is_loopback(registry: str) -> bool:
    host = urlparse(f"//{registry}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _registry_message(response: requests.Response) -> str:
    """The registry's own words: distribution-spec error JSON, else the start of the body."""
    try:
        errors = response.json().get("errors") or []
        parts = [f"{e.get('code', '?')}: {e.get('message', '')}".strip() for e in errors if isinstance(e, dict)]
        if parts:
            return "; ".join(parts)
    except (ValueError, AttributeError):
        pass
    text = (response.text or "").strip().replace("\n", " ")
    return text[:200] or response.reason or "no details"


def _docker_config_auth(registry: str) -> tuple[str, str] | None:
    config_dir = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    path = Path(config_dir) / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError):
        return None
    keys = [registry, f"https://{registry}", f"http://{registry}"]
    if registry == DOCKER_HUB:
        keys += ["https://index.docker.io/v1/", "docker.io"]
    for key in keys:
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                return user, password
            except (ValueError, UnicodeDecodeError):
                continue
        if entry.get("username") and entry.get("password"):
            return entry["username"], entry["password"]
    return None


def default_credentials(registry: str) -> tuple[str, str] | None:
    user, password = os.environ.get("XCFORGE_REGISTRY_USERNAME"), os.environ.get("XCFORGE_REGISTRY_PASSWORD")
    if user and password:
        return user, password
    return _docker_config_auth(registry)


# What is worth another try: the registry (or a proxy in front of it) overloaded or failing.
RETRY_STATUSES = frozenset([429, *range(500, 600)])
_MAX_WAIT = 30.0  # seconds: the longest backoff step, and the longest Retry-After honoured


class _RegistryRetry(Retry):
    """urllib3's Retry with the client's schedule: wait `backoff * 2**(n-1)` before retry n (urllib3
    itself retries the first time at once), Retry-After (seconds or an HTTP date) on any retried
    status, both capped at 30 s; an unreadable Retry-After falls back to the backoff."""

    RETRY_AFTER_STATUS_CODES = RETRY_STATUSES

    def get_backoff_time(self) -> float:
        retries = len(self.history)
        if retries == 0:
            return 0.0
        return min(self.backoff_factor * 2.0 ** (retries - 1), _MAX_WAIT)

    def parse_retry_after(self, retry_after: str) -> float:
        try:
            return min(super().parse_retry_after(retry_after), _MAX_WAIT)
        except Exception:  # urllib3's InvalidHeader: a header we cannot read is no reason to give up
            return 0.0


def retry_policy(retries: int, backoff: float) -> Retry:
    """`retries` more attempts after the first on connection errors, timeouts, 429 and 5xx, for every
    method the client sends (uploads too: a blob PUT carries its digest, a manifest PUT its bytes, so
    repeating one stores the same thing). After the last 429/5xx the response comes back
    (`raise_on_status=False`) so the registry's own message reaches the error."""
    return _RegistryRetry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=backoff,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset(["GET", "HEAD", "PUT", "POST", "PATCH", "DELETE"]),
        respect_retry_after_header=True,
        raise_on_status=False,
    )


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


class RegistryClient:
    """One registry host. Methods take the repository; errors are `RegistryError` (ocicore.errors)."""

    def __init__(
        self,
        registry: str,
        *,
        insecure: bool = False,
        credentials: tuple[str, str] | None = None,
        retries: int = 4,
        backoff: float = 0.5,
        timeout: float = 60.0,
        session: requests.Session | None = None,
    ) -> None:
        self.registry = registry
        self.api_host = _DOCKER_HUB_API if registry == DOCKER_HUB else registry
        self.scheme = "http" if insecure or is_loopback(registry) else "https"
        self.credentials = credentials if credentials is not None else default_credentials(registry)
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.headers.setdefault("User-Agent", f"xcforge/{__version__}")
        adapter = HTTPAdapter(max_retries=retry_policy(retries, backoff))
        for prefix in ("http://", "https://"):
            self.session.mount(prefix, adapter)
        self._tokens: dict[str, str] = {}
        self._basic = False

    @classmethod
    def for_reference(cls, ref: Reference, **kwargs: Any) -> RegistryClient:
        return cls(ref.registry, **kwargs)

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.api_host}/v2/{path}"

    # ------------------------------------------------------------------------------------ transport

    def _auth_header(self, scope: str) -> dict[str, str]:
        if scope in self._tokens:
            return {"Authorization": f"Bearer {self._tokens[scope]}"}
        if self._basic and self.credentials:
            raw = base64.b64encode(f"{self.credentials[0]}:{self.credentials[1]}".encode()).decode()
            return {"Authorization": f"Basic {raw}"}
        return {}

    def _fetch_token(self, params: dict[str, str], scope: str) -> None:
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"{self.registry}: bearer challenge without a realm")
        query = {"service": params.get("service", "")} if params.get("service") else {}
        scopes = [s for s in scope.split(" ") if s]
        url = realm + ("&" if "?" in realm else "?") + urlencode([*query.items(), *[("scope", s) for s in scopes]])
        auth = self.credentials if self.credentials else None
        response = self._send("GET", url, auth=auth)
        if response.status_code != 200:
            why = f"{response.status_code}: {_registry_message(response)}"
            raise RegistryError(f"{self.registry}: token request to {realm} failed ({why})")
        body = response.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            raise RegistryError(f"{self.registry}: token endpoint returned no token")
        self._tokens[scope] = token

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One HTTP exchange; the session's adapter retries it (`retry_policy`: connection errors,
        timeouts, 429 and 5xx, rewinding a file body). What is still failing then is a RegistryError."""
        failed = f"{method} {url} failed after {self.retries + 1} attempts"
        try:
            response = self.session.request(method, url, timeout=self.timeout, **kwargs)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise RegistryError(
                f"{failed}: cannot reach {urlparse(url).netloc}: {exc.__class__.__name__}; "
                "is the registry running? (scripts/provision.sh starts the local one)"
            ) from None
        if response.status_code in RETRY_STATUSES:
            raise RegistryError(f"{failed}: HTTP {response.status_code}: {_registry_message(response)}")
        return response

    def request(self, method: str, path_or_url: str, *, scope: str, **kwargs: Any) -> requests.Response:
        url = path_or_url if "://" in path_or_url else self.url(path_or_url)
        headers = {**kwargs.pop("headers", {}), **self._auth_header(scope)}
        response = self._send(method, url, headers=headers, **kwargs)
        if response.status_code == 401 and "WWW-Authenticate" in response.headers:
            scheme, params = _parse_challenge(response.headers["WWW-Authenticate"])
            if scheme == "bearer":
                wanted = " ".join(dict.fromkeys([*scope.split(" "), params.get("scope", "")])).strip()
                self._fetch_token(params, wanted)
                self._tokens[scope] = self._tokens[wanted]
            elif scheme == "basic" and self.credentials:
                self._basic = True
            else:
                return response
            headers.update(self._auth_header(scope))
            if hasattr(kwargs.get("data"), "seek"):
                kwargs["data"].seek(0)
            response = self._send(method, url, headers=headers, **kwargs)
        return response

    def _check(self, response: requests.Response, what: str, ok: Iterable[int]) -> requests.Response:
        if response.status_code in ok:
            return response
        if response.status_code == 404:
            raise RegistryNotFound(f"{what}: not found ({_registry_message(response)})")
        if response.status_code in (401, 403):
            raise RegistryError(
                f"{what}: access denied ({response.status_code}: {_registry_message(response)}); "
                "log in (docker login) or set XCFORGE_REGISTRY_USERNAME / XCFORGE_REGISTRY_PASSWORD"
            )
        raise RegistryError(f"{what}: HTTP {response.status_code}: {_registry_message(response)}")

    @staticmethod
    def _scope(repository: str, actions: str) -> str:
        return f"repository:{repository}:{actions}"

    # ------------------------------------------------------------------------------------ manifests

    def get_manifest(
        self, repository: str, reference: str, *, accept: Iterable[str] = MANIFEST_MEDIA_TYPES
    ) -> Manifest:
        what = f"{self.registry}/{repository}{'@' if is_digest(reference) else ':'}{reference}"
        response = self._check(
            self.request(
                "GET",
                f"{repository}/manifests/{reference}",
                scope=self._scope(repository, "pull"),
                headers={"Accept": ", ".join(accept)},
            ),
            what,
            (200,),
        )
        data = response.content
        if len(data) > _MAX_MANIFEST:
            raise RegistryError(f"{what}: manifest larger than {_MAX_MANIFEST} bytes")
        digest = sha256_digest(data)
        if is_digest(reference) and reference != digest:
            raise RegistryError(f"{what}: registry returned content with digest {digest}")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in MANIFEST_MEDIA_TYPES:
            with contextlib.suppress(ValueError, AttributeError):
                media_type = json.loads(data).get("mediaType") or media_type
        return Manifest(data, media_type, digest)

    def head_manifest(self, repository: str, reference: str) -> tuple[str, str] | None:
        """(digest, media type) or None when absent."""
        response = self.request(
            "HEAD",
            f"{repository}/manifests/{reference}",
            scope=self._scope(repository, "pull"),
            headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)},
        )
        if response.status_code == 404:
            return None
        self._check(response, f"{self.registry}/{repository}:{reference}", (200,))
        digest = response.headers.get("Docker-Content-Digest", "")
        if not is_digest(digest):
            manifest = self.get_manifest(repository, reference)
            return manifest.digest, manifest.media_type
        return digest, response.headers.get("Content-Type", "").split(";")[0].strip()

    def resolve(self, repository: str, reference: str) -> str:
        """Digest of a tag (or digest): Docker-Content-Digest, else sha256 of the manifest body."""
        found = self.head_manifest(repository, reference)
        if found is None:
            raise RegistryNotFound(f"{self.registry}/{repository}:{reference}: not found")
        return found[0]

    def put_manifest(self, repository: str, reference: str, data: bytes, media_type: str) -> str:
        digest = sha256_digest(data)
        if is_digest(reference) and reference != digest:
            raise RegistryError(f"manifest bytes have digest {digest}, not {reference}")
        response = self.request(
            "PUT",
            f"{repository}/manifests/{reference}",
            scope=self._scope(repository, "pull,push"),
            data=data,
            headers={"Content-Type": media_type},
        )
        self._check(response, f"push manifest {self.registry}/{repository}:{reference}", (200, 201, 202))
        returned = response.headers.get("Docker-Content-Digest")
        if returned and returned != digest:
            raise RegistryError(f"registry stored manifest as {returned}, expected {digest}")
        return digest

    def delete_manifest(self, repository: str, digest: str) -> None:
        response = self.request("DELETE", f"{repository}/manifests/{digest}", scope=self._scope(repository, "delete"))
        self._check(response, f"delete {self.registry}/{repository}@{digest}", (200, 202))

    def list_tags(self, repository: str) -> list[str]:
        tags: list[str] = []
        url: str | None = self.url(f"{repository}/tags/list?n=1000")
        while url:
            response = self.request("GET", url, scope=self._scope(repository, "pull"))
            if response.status_code == 404:
                return tags
            self._check(response, f"list tags of {self.registry}/{repository}", (200,))
            tags.extend(response.json().get("tags") or [])
            link = response.links.get("next", {}).get("url")
            url = urljoin(url, link) if link else None
        return tags

    # ------------------------------------------------------------------------------------ blobs

    def blob_exists(self, repository: str, digest: str) -> bool:
        response = self.request("HEAD", f"{repository}/blobs/{digest}", scope=self._scope(repository, "pull"))
        if response.status_code == 404:
            return False
        self._check(response, f"blob {digest}", (200,))
        return True

    def get_blob(self, repository: str, digest: str, *, max_size: int = 64 * 1024 * 1024) -> bytes:
        """A small blob (config, signature payload) in memory, checked against its digest."""
        response = self._check(
            self.request("GET", f"{repository}/blobs/{digest}", scope=self._scope(repository, "pull"), stream=True),
            f"blob {self.registry}/{repository}@{digest}",
            (200,),
        )
        chunks, size = [], 0
        for chunk in response.iter_content(1 << 16):
            size += len(chunk)
            if size > max_size:
                raise RegistryError(f"blob {digest} is larger than {max_size} bytes")
            chunks.append(chunk)
        data = b"".join(chunks)
        if sha256_digest(data) != digest:
            raise RegistryError(f"blob {self.registry}/{repository}@{digest}: content does not match its digest")
        return data

    def download_blob(self, repository: str, digest: str, out: SupportsWrite[bytes]) -> int:
        """Stream a blob of any size into `out`, checking the digest; returns its size."""
        response = self._check(
            self.request("GET", f"{repository}/blobs/{digest}", scope=self._scope(repository, "pull"), stream=True),
            f"blob {self.registry}/{repository}@{digest}",
            (200,),
        )
        # A large blob is hashed on a thread of its own (ocicore.hashing), so that receiving, hashing
        # and `out`'s writing overlap; for a small one the thread would cost more than it saves.
        large = int(response.headers.get("Content-Length") or 0) >= _THREADED_HASH_FROM
        size = 0
        with ThreadedSha256() if large else contextlib.nullcontext(hashlib.sha256()) as hasher:
            for chunk in response.iter_content(1 << 20):
                hasher.update(chunk)
                out.write(chunk)
                size += len(chunk)
        if f"sha256:{hasher.hexdigest()}" != digest:
            raise RegistryError(f"blob {self.registry}/{repository}@{digest}: content does not match its digest")
        return size

    def push_blob(
        self, repository: str, data: bytes | SupportsRead[bytes] | Iterable[bytes], digest: str | None = None
    ) -> str:
        """Monolithic upload (POST, then PUT with ?digest=). Skipped when the blob exists. `data`: the
        bytes, a file object, or an iterable of blocks with len() (sent with a Content-Length)."""
        if isinstance(data, bytes | bytearray):
            digest = digest or sha256_digest(bytes(data))
        elif digest is None:
            raise ValueError("push_blob needs the digest of a streamed blob")
        if self.blob_exists(repository, digest):
            return digest
        location = self._start_upload(repository)
        self._finish_upload(repository, location, digest, data)
        return digest

    def _start_upload(self, repository: str, query: str = "") -> str:
        response = self.request(
            "POST", f"{repository}/blobs/uploads/{query}", scope=self._scope(repository, "pull,push")
        )
        self._check(response, f"start blob upload to {self.registry}/{repository}", (202,))
        return response.headers["Location"]

    def _finish_upload(
        self, repository: str, location: str, digest: str, data: bytes | SupportsRead[bytes] | Iterable[bytes]
    ) -> None:
        url = urljoin(self.url(""), location)
        url += ("&" if "?" in url else "?") + urlencode({"digest": digest})
        response = self.request(
            "PUT",
            url,
            scope=self._scope(repository, "pull,push"),
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        self._check(response, f"upload blob {digest} to {self.registry}/{repository}", (201, 204))

    def mount_blob(self, repository: str, digest: str, from_repository: str) -> bool:
        """Cross-repository mount on the same registry; False when the registry declines."""
        scope = f"{self._scope(repository, 'pull,push')} {self._scope(from_repository, 'pull')}"
        response = self.request(
            "POST",
            f"{repository}/blobs/uploads/?{urlencode({'mount': digest, 'from': from_repository})}",
            scope=scope,
        )
        if response.status_code == 201:
            return True
        if response.status_code == 202 and "Location" in response.headers:
            # Declined but an upload session was opened; let it expire (distribution cleans up).
            return False
        self._check(response, f"mount {digest} into {self.registry}/{repository}", (201, 202))
        return False


class RegistryNotFound(RegistryError):
    """The manifest, tag or blob does not exist (HTTP 404)."""


def copy_blob(
    source: RegistryClient, source_repository: str, target: RegistryClient, target_repository: str, digest: str
) -> None:
    """Copy one blob between repositories/registries: skip, mount, or stream through a spool file."""
    if target.blob_exists(target_repository, digest):
        return
    same_registry = source.registry == target.registry and source.api_host == target.api_host
    if same_registry and target.mount_blob(target_repository, digest, source_repository):
        return
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
        source.download_blob(source_repository, digest, spool)
        spool.seek(0)
        target.push_blob(target_repository, spool, digest)


def manifest_children(manifest: Manifest) -> Iterator[dict[str, Any]]:
    """Descriptors a manifest points at: child manifests of an index, or config + layers."""
    doc = manifest.json()
    if manifest.is_index:
        yield from doc.get("manifests") or []
    else:
        if doc.get("config"):
            yield doc["config"]
        yield from doc.get("layers") or []


def blob_descriptors(manifest: Manifest) -> list[dict[str, Any]]:
    if manifest.is_index:
        return []
    return [d for d in manifest_children(manifest) if "urls" not in d]  # foreign layers stay where they are


def canonical_json(doc: Mapping[str, Any]) -> bytes:
    """Compact JSON for manifests we write (stable bytes, hence stable digests)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------------------------------ images
# Reading images by reference (base images, pushed results), all through RegistryClient.


def _client_for(ref: str) -> tuple[RegistryClient, Reference]:
    """One way of reading a registry: ocicore.registry's client (docker's credentials, http on loopback)."""
    try:
        parsed = parse_reference(ref)
    except InvalidReference as exc:
        raise RegistryError(f"cannot inspect {ref}: {exc.message}") from None
    return RegistryClient(parsed.registry, retries=2), parsed


def _manifest(ref: str) -> Manifest:
    client, parsed = _client_for(ref)
    try:
        return client.get_manifest(parsed.repository, parsed.reference)
    except RegistryError as exc:
        raise RegistryError(f"cannot inspect {ref}: {exc.message}") from None


def resolve_digest(ref: str) -> str:
    """The digest a reference points to (the index for multi-platform images)."""
    return _manifest(ref).digest


def exists(ref: str) -> bool:
    try:
        resolve_digest(ref)
    except RegistryError:
        return False
    return True


def describe(ref: str, *, retries: int = 4) -> tuple[str, dict[str, dict[str, Any]]]:
    """(the digest `ref` points to, platform → image config blob read from the registry as-is),
    in one pass: the top manifest is read once for both.

    (imagetools' `.Image` view is the OCI struct, which drops Docker's Healthcheck and friends.)
    """
    try:
        parsed = parse_reference(ref)
    except InvalidReference as exc:
        raise RegistryError(f"cannot inspect {ref}: {exc.message}") from None
    client = RegistryClient(parsed.registry, retries=retries)
    top = client.get_manifest(parsed.repository, parsed.reference)
    descriptors = top.json().get("manifests") if top.is_index else [{"digest": top.digest}]
    out: dict[str, dict[str, Any]] = {}
    for descriptor in descriptors or []:
        if is_attestation(descriptor):
            continue
        manifest = client.get_manifest(parsed.repository, descriptor["digest"]).json()
        config = json.loads(client.get_blob(parsed.repository, manifest["config"]["digest"]))
        out[f"{config.get('os', 'linux')}/{config.get('architecture', '?')}"] = config
    return top.digest, out


def image_configs(ref: str) -> dict[str, dict[str, Any]]:
    """platform → image config blob (describe's second half)."""
    return describe(ref)[1]


def config_labels(configs: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """platform → its image config's labels."""
    return {platform: (config.get("config") or {}).get("Labels") or {} for platform, config in configs.items()}


def labels(ref: str) -> dict[str, dict[str, str]]:
    return config_labels(image_configs(ref))


def raw(ref: str) -> dict[str, Any]:
    return _manifest(ref).json()


def registry_platforms(repo: str, digest: str) -> dict[str, tuple[str, int]]:
    top = raw(f"{repo}@{digest}")
    if "manifests" not in top:
        size = top.get("config", {}).get("size", 0) + sum(layer.get("size", 0) for layer in top.get("layers", []))
        return {"single": (digest, size)}
    return platform_manifests(top, lambda d: raw(f"{repo}@{d}"))
