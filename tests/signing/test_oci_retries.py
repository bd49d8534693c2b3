"""ocicore/registry.py's retries are urllib3's Retry on the session: against a local http.server that
fails on demand, counting the hits the client makes."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from urllib3.exceptions import NewConnectionError
from urllib3.util.retry import Retry

from ocicore.errors import RegistryError
from ocicore.registry import RegistryClient, retry_policy


class Flaky:
    """Answers each request with the next status in `plan` (then 200s), recording method and body."""

    def __init__(self) -> None:
        self.plan: list[int] = []
        self.retry_after: str | None = None
        self.hits: list[tuple[str, bytes]] = []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                flaky.hits.append((self.command, body))
                status = flaky.plan.pop(0) if flaky.plan else 200
                if status == 200:
                    data = json.dumps({"name": "r", "tags": ["v1"]}).encode()
                else:
                    data = json.dumps({"errors": [{"code": "UNAVAILABLE", "message": f"try {len(flaky.hits)}"}]})
                    data = data.encode()
                self.send_response(status)
                if status != 200 and flaky.retry_after is not None:
                    self.send_header("Retry-After", flaky.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def flaky() -> Iterator[Flaky]:
    server = Flaky()
    yield server
    server.close()


def test_two_503s_then_a_200_is_three_hits(flaky):
    flaky.plan = [503, 503]
    client = RegistryClient(flaky.address, retries=4, backoff=0.01)
    assert client.list_tags("r") == ["v1"]
    assert [method for method, _ in flaky.hits] == ["GET"] * 3


def test_after_retries_plus_one_attempts_the_last_answer_is_the_error(flaky):
    flaky.plan = [500, 502, 503, 504]
    client = RegistryClient(flaky.address, retries=2, backoff=0.01)
    with pytest.raises(RegistryError, match=r"failed after 3 attempts: HTTP 503: UNAVAILABLE: try 3$"):
        client.list_tags("r")
    assert len(flaky.hits) == 3


def test_no_retries_is_one_attempt(flaky):
    flaky.plan = [503]
    with pytest.raises(RegistryError, match="failed after 1 attempts: HTTP 503"):
        RegistryClient(flaky.address, retries=0).list_tags("r")
    assert len(flaky.hits) == 1


def test_4xx_other_than_429_is_not_retried(flaky):
    flaky.plan = [404]
    response = RegistryClient(flaky.address, retries=3, backoff=0.01).request("GET", "r/tags/list", scope="")
    assert response.status_code == 404 and len(flaky.hits) == 1


def test_uploads_are_retried_with_a_streamed_body_rewound(flaky):
    flaky.plan = [503, 429]
    client = RegistryClient(flaky.address, retries=3, backoff=0.01)
    body = io.BytesIO(b"layer bytes" * 1000)
    response = client.request("PUT", "r/blobs/uploads/x?digest=sha256:0", scope="", data=body)
    assert response.status_code == 200
    assert [method for method, _ in flaky.hits] == ["PUT"] * 3
    assert {data for _, data in flaky.hits} == {b"layer bytes" * 1000}
    flaky.plan = [502]
    assert client.request("POST", "r/blobs/uploads/", scope="").status_code == 200
    assert [method for method, _ in flaky.hits[3:]] == ["POST", "POST"]


def test_retry_after_is_honoured(flaky):
    flaky.plan, flaky.retry_after = [429], "1"
    started = time.monotonic()
    assert RegistryClient(flaky.address, retries=2, backoff=0.01).list_tags("r") == ["v1"]
    assert time.monotonic() - started >= 0.9 and len(flaky.hits) == 2


def test_an_unreadable_retry_after_falls_back_to_the_backoff(flaky):
    flaky.plan, flaky.retry_after = [503], "whenever"
    assert RegistryClient(flaky.address, retries=2, backoff=0.01).list_tags("r") == ["v1"]
    assert len(flaky.hits) == 2


def test_connection_refused_counts_every_attempt():
    with pytest.raises(RegistryError, match=r"failed after 3 attempts: cannot reach 127.0.0.1:1: ConnectionError"):
        RegistryClient("127.0.0.1:1", retries=2, backoff=0.01, timeout=2).list_tags("x")


def test_the_policy_is_mounted_on_the_session_for_both_schemes():
    client = RegistryClient("registry.example", retries=3, backoff=0.25)
    for url in ("https://registry.example/v2/", "http://127.0.0.1:5000/v2/"):
        policy = client.session.get_adapter(url).max_retries
        assert isinstance(policy, Retry)
        assert (policy.total, policy.connect, policy.read, policy.status) == (3, 3, 3, 3)
        assert {429, 500, 502, 503, 504} <= set(policy.status_forcelist)
        assert {"GET", "HEAD", "PUT", "POST", "DELETE"} <= set(policy.allowed_methods)
        assert policy.respect_retry_after_header and not policy.raise_on_status


def test_the_backoff_doubles_from_the_first_retry_and_stops_at_30_s():
    policy = retry_policy(8, 0.5)
    waits = [policy.get_backoff_time()]
    for _ in range(7):
        policy = policy.increment("GET", "/v2/", error=NewConnectionError(None, "refused"))
        waits.append(policy.get_backoff_time())
    assert waits == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert policy.parse_retry_after("3600") == 30.0 and policy.parse_retry_after("2") == 2.0
