"""An in-memory OCI distribution registry over real HTTP, for tests that need no docker.

Implements the endpoints ocicore/registry.py uses (manifests by tag/digest, blobs, monolithic uploads,
cross-repo mount, tag listing with pagination, deletes) with distribution's status codes, plus
switches for auth challenges and injected failures. It is a test double: the docker-marked tests
run the same flows against the real distribution 2.8 registry.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class FakeRegistry:
    def __init__(self, *, auth: str | None = None, user: str = "u", password: str = "p") -> None:
        self.blobs: dict[str, bytes] = {}
        self.repo_blobs: dict[str, set[str]] = {}
        self.manifests: dict[tuple[str, str], tuple[bytes, str]] = {}  # (repo, digest) -> (bytes, type)
        self.tags: dict[tuple[str, str], str] = {}
        self.uploads: dict[str, str] = {}
        self.auth = auth  # None | "basic" | "bearer"
        self.user, self.password = user, password
        self.token = "tok-" + uuid.uuid4().hex
        self.fail_next: list[int] = []  # status codes to answer before serving normally
        self.requests: list[tuple[str, str]] = []
        self.tag_page_size = 1000
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _error(self, status: int, code: str, message: str) -> None:
                body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
                self._send(status, body, {"Content-Type": "application/json"})

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _authorized(self) -> bool:
                header = self.headers.get("Authorization", "")
                if registry.auth is None:
                    return True
                if registry.auth == "basic":
                    expected = base64.b64encode(f"{registry.user}:{registry.password}".encode()).decode()
                    if header == f"Basic {expected}":
                        return True
                    self._send(401, b"", {"WWW-Authenticate": 'Basic realm="fake"'})
                    return False
                if header == f"Bearer {registry.token}":
                    return True
                realm = f"http://{registry.address}/token"
                self._send(401, b"", {"WWW-Authenticate": f'Bearer realm="{realm}",service="fake"'})
                return False

            def _dispatch(self) -> None:
                url = urlparse(self.path)
                registry.requests.append((self.command, url.path))
                if registry.fail_next:
                    status = registry.fail_next.pop(0)
                    extra = {"Retry-After": "0"} if status == 429 else {}
                    body = json.dumps({"errors": [{"code": "UNAVAILABLE", "message": "injected"}]}).encode()
                    self._send(status, body, {"Content-Type": "application/json", **extra})
                    return
                if url.path == "/token":
                    expected = base64.b64encode(f"{registry.user}:{registry.password}".encode()).decode()
                    if self.headers.get("Authorization") != f"Basic {expected}":
                        self._error(401, "UNAUTHORIZED", "bad credentials")
                        return
                    self._send(
                        200, json.dumps({"token": registry.token}).encode(), {"Content-Type": "application/json"}
                    )
                    return
                if not self._authorized():
                    return
                if url.path == "/v2/":
                    self._send(200, b"{}")
                    return
                match = re.match(r"^/v2/(?P<repo>.+)/(?P<kind>manifests|blobs|tags)/(?P<rest>.*)$", url.path)
                if not match:
                    self._error(404, "NAME_UNKNOWN", "no route")
                    return
                repo, kind, rest = match["repo"], match["kind"], match["rest"]
                query = parse_qs(url.query)
                getattr(self, f"_{kind}")(repo, rest, query)

            def _manifests(self, repo: str, ref: str, query) -> None:
                if self.command == "PUT":
                    data = self._body()
                    digest = "sha256:" + hashlib.sha256(data).hexdigest()
                    doc = json.loads(data)
                    for blob in [doc.get("config"), *(doc.get("layers") or [])]:
                        if blob and blob["digest"] not in registry.repo_blobs.get(repo, set()):
                            self._error(400, "MANIFEST_BLOB_UNKNOWN", f"blob unknown {blob['digest']}")
                            return
                    for child in doc.get("manifests") or []:
                        if (repo, child["digest"]) not in registry.manifests:
                            self._error(400, "MANIFEST_BLOB_UNKNOWN", f"manifest unknown {child['digest']}")
                            return
                    if ref.startswith("sha256:") and ref != digest:
                        self._error(400, "DIGEST_INVALID", "digest mismatch")
                        return
                    registry.manifests[(repo, digest)] = (data, self.headers.get("Content-Type", ""))
                    if not ref.startswith("sha256:"):
                        registry.tags[(repo, ref)] = digest
                    self._send(
                        201, b"", {"Docker-Content-Digest": digest, "Location": f"/v2/{repo}/manifests/{digest}"}
                    )
                    return
                digest = ref if ref.startswith("sha256:") else registry.tags.get((repo, ref))
                found = registry.manifests.get((repo, digest)) if digest else None
                if self.command == "DELETE":
                    if found is None:
                        self._error(404, "MANIFEST_UNKNOWN", "manifest unknown")
                        return
                    del registry.manifests[(repo, digest)]
                    for key in [k for k, v in registry.tags.items() if k[0] == repo and v == digest]:
                        del registry.tags[key]
                    self._send(202)
                    return
                if found is None:
                    self._error(404, "MANIFEST_UNKNOWN", "manifest unknown")
                    return
                data, media_type = found
                self._send(200, data, {"Content-Type": media_type, "Docker-Content-Digest": digest})

            def _blobs(self, repo: str, rest: str, query) -> None:
                if rest.startswith("uploads/"):
                    self._uploads(repo, rest[len("uploads/") :], query)
                    return
                digest = rest
                if digest not in registry.repo_blobs.get(repo, set()):
                    self._error(404, "BLOB_UNKNOWN", "blob unknown")
                    return
                self._send(200, registry.blobs[digest], {"Docker-Content-Digest": digest})

            def _uploads(self, repo: str, session: str, query) -> None:
                if self.command == "POST":
                    if "mount" in query:
                        digest, source = query["mount"][0], query.get("from", [""])[0]
                        if digest in registry.repo_blobs.get(source, set()):
                            registry.repo_blobs.setdefault(repo, set()).add(digest)
                            self._send(201, b"", {"Location": f"/v2/{repo}/blobs/{digest}"})
                            return
                    upload = uuid.uuid4().hex
                    registry.uploads[upload] = repo
                    self._send(202, b"", {"Location": f"/v2/{repo}/blobs/uploads/{upload}?_state=x"})
                    return
                if self.command == "PUT":
                    data = self._body()
                    digest = query.get("digest", [""])[0]
                    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
                        self._error(400, "DIGEST_INVALID", "digest mismatch")
                        return
                    registry.blobs[digest] = data
                    registry.repo_blobs.setdefault(repo, set()).add(digest)
                    self._send(201, b"", {"Docker-Content-Digest": digest})
                    return
                self._error(405, "UNSUPPORTED", "method")

            def _tags(self, repo: str, rest: str, query) -> None:
                names = sorted(t for (r, t) in registry.tags if r == repo)
                if not names:
                    self._error(404, "NAME_UNKNOWN", "repository unknown")
                    return
                last = query.get("last", [""])[0]
                names = [n for n in names if n > last]
                page = names[: registry.tag_page_size]
                headers = {"Content-Type": "application/json"}
                if len(names) > len(page):
                    headers["Link"] = f'</v2/{repo}/tags/list?n={registry.tag_page_size}&last={page[-1]}>; rel="next"'
                self._send(200, json.dumps({"name": repo, "tags": page}).encode(), headers)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _dispatch

        return Handler
