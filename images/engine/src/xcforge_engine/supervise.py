"""Run a server that needs its stop signal twice, so that `docker stop` stops it cleanly.

llama-server, on SIGTERM during a generation, closes its listener and waits for the request,
which never finishes (seen under QEMU and in its source: only a second interrupt exits at once).
Docker then kills it after the stop timeout (exit 137). The launcher therefore stays as the
server's parent for such backends: it forwards the first SIGTERM/SIGINT, and if the server is
still there after `grace` seconds it sends SIGINT again, then returns the server's exit status
(0 for a clean stop, 128 + signal if it died of one).
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence

from xcforge_engine import log


def run_supervised(argv: Sequence[str], env: Mapping[str, str], grace: float) -> int:
    stopping = threading.Event()
    started: list[subprocess.Popen[bytes]] = []
    timers: list[threading.Timer] = []  # the second interrupt, armed by the first stop signal

    def again() -> None:
        if started and started[0].poll() is None:
            log.warning(f"{argv[0]} still running {grace:g} s after the stop signal: interrupting it again")
            started[0].send_signal(signal.SIGINT)

    def forward(signum: int, _frame: object) -> None:
        stopping.set()
        if not started or started[0].poll() is not None:
            return  # not started yet: Popen below sees `stopping` and stops it at once
        started[0].send_signal(signum)
        if not timers:
            timers.append(threading.Timer(grace, again))
            timers[0].daemon = True
            timers[0].start()

    # Handlers first: a stop signal that comes while the server is starting is not lost.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    started.append(subprocess.Popen(list(argv), env=dict(env)))
    if stopping.is_set():
        forward(signal.SIGTERM, None)
    code = started[0].wait()
    if stopping.is_set() and code in (1, -signal.SIGINT, -signal.SIGTERM):
        return 0  # stopped because we were asked to: a clean stop for Docker
    return 128 - code if code < 0 else code
