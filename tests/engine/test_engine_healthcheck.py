"""healthcheck against a real HTTP server on a random loopback port."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from xcforge_engine.cli import main


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200
    delay = 0.0
    seen: list[str] = []  # noqa: RUF012  (shared by design: the test reads what the server got)

    def do_GET(self):
        type(self).seen.append(self.path)
        time.sleep(self.delay)
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@contextmanager
def server(status=200, delay=0.0):
    handler = type("Handler", (_Handler,), {"status": status, "delay": delay, "seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.block_on_close = False  # a deliberately slow handler must not hold up the test's end
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path):
    # An HTTP proxy in the environment must not swallow loopback probes.
    return {"XCFORGE_STATE_DIR": str(tmp_path), "http_proxy": "http://127.0.0.1:9", "no_proxy": ""}


def test_200_is_healthy(env, capsys):
    with server(200) as (port, handler):
        assert main(["healthcheck", "--port", str(port)], env=env) == 0
    assert handler.seen == ["/health"]


def test_500_is_unhealthy(env, capsys):
    with server(500) as (port, _):
        assert main(["healthcheck", "--port", str(port)], env=env) == 1
    assert "answered HTTP 500, not 200" in capsys.readouterr().err


def test_closed_port_is_unhealthy(env, capsys):
    port = free_port()
    assert main(["healthcheck", "--port", str(port)], env=env) == 1
    err = capsys.readouterr().err
    assert err.startswith("[xcforge] error: GET http://127.0.0.1:") and "Traceback" not in err


def test_slow_answer_times_out(env, capsys):
    with server(200, delay=2.0) as (port, _):
        started = time.monotonic()
        assert main(["healthcheck", "--port", str(port), "--timeout", "0.3"], env=env) == 1
        assert time.monotonic() - started < 1.5


def test_timeout_from_environment(env, capsys):
    with server(200, delay=2.0) as (port, _):
        assert main(["healthcheck", "--port", str(port)], env={**env, "XCFORGE_HEALTH_TIMEOUT": "0.3"}) == 1


def test_port_from_xcforge_port(env):
    with server(200) as (port, _):
        assert main(["healthcheck"], env={**env, "XCFORGE_PORT": str(port)}) == 0


def test_port_recorded_by_serve_wins_over_environment(env, tmp_path):
    with server(200) as (port, _):
        (tmp_path / "serve.json").write_text(json.dumps({"health_url": f"http://127.0.0.1:{port}/health"}))
        assert main(["healthcheck"], env={**env, "XCFORGE_PORT": str(free_port())}) == 0


def test_explicit_url(env):
    with server(200) as (port, handler):
        assert main(["healthcheck", "--url", f"http://127.0.0.1:{port}/ready"], env=env) == 0
    assert handler.seen == ["/ready"]
