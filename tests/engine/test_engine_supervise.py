"""A server that ignores its first stop signal (llama-server mid-generation) still stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

# The child: the first SIGTERM is swallowed (it "waits for the request"); SIGINT ends it with 1,
# as llama-server's "Received second interrupt, terminating immediately" does.
CHILD = "trap '' TERM; trap 'exit 1' INT; echo ready; while :; do sleep 0.1; done"
SUPERVISOR = (
    "import sys; from xcforge_engine.supervise import run_supervised; "
    "sys.exit(run_supervised(['sh', '-c', sys.argv[1]], {'PATH': '/usr/bin:/bin'}, float(sys.argv[2])))"
)


def start(grace: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, CHILD, grace], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_second_interrupt_after_the_grace_period_stops_it_with_exit_0():
    proc = start("0.5")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    took = time.monotonic() - started
    assert 0.4 < took < 5, took


def test_a_crash_is_not_hidden():
    proc = subprocess.run([sys.executable, "-c", SUPERVISOR, "exit 3", "5"], capture_output=True, timeout=30)
    assert proc.returncode == 3
    killed = subprocess.run([sys.executable, "-c", SUPERVISOR, "kill -ILL $$", "5"], capture_output=True, timeout=30)
    assert killed.returncode == 128 + signal.SIGILL
