"""healthcheck: exit 0 only when the server answers GET /health with 200 in time (Docker's HEALTHCHECK).

Where to ask: --url, else --port on 127.0.0.1, else the address `serve` recorded (it knows the
operator's --port/--host/TLS flags), else XCFORGE_PORT, else 8000. Proxies are bypassed: an
enterprise HTTP_PROXY must not receive requests for the container's own loopback.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping

from xcforge_engine.errors import Unhealthy, UsageError
from xcforge_engine.serve import DEFAULT_PORT, state_path

DEFAULT_TIMEOUT = 5.0


def health_url(env: Mapping[str, str], port: int | None = None) -> tuple[str, str]:
    """The URL to probe and where it came from."""
    if port:
        return f"http://127.0.0.1:{port}/health", "--port"
    path = state_path(env)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(state, dict) and isinstance(state.get("health_url"), str):
            return state["health_url"], str(path)
    except (OSError, ValueError):
        pass
    if env.get("XCFORGE_PORT"):
        try:
            return f"http://127.0.0.1:{int(env['XCFORGE_PORT'])}/health", "XCFORGE_PORT"
        except ValueError:
            raise UsageError(f"XCFORGE_PORT={env['XCFORGE_PORT']!r} is not a port number") from None
    return f"http://127.0.0.1:{DEFAULT_PORT}/health", "the default port"


def probe(url: str, timeout: float) -> int:
    """The HTTP status of GET url; raises Unhealthy when nothing usable answers."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if url.startswith("https:"):
        # The server's certificate is for its public name; the probe talks to loopback.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unhealthy(f"GET {url} failed: {reason}") from None


def check_health(url: str, timeout: float) -> None:
    status = probe(url, timeout)
    if status != 200:
        raise Unhealthy(f"GET {url} answered HTTP {status}, not 200")
