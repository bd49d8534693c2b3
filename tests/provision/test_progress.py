"""Provisioning says what it is doing while a step runs (issue item 6): a line when a long step
starts, a heartbeat every $XCFORGE_HEARTBEAT_S seconds while it runs, plain lines (no terminal
control), and nothing left printing once the step is over. Real subprocesses, real timers."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xcforge.provision.progress import Progress

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAIN = re.compile(r"^[\x20-\x7e]*$")  # printable ASCII only: no \r, no escape sequences


def test_heartbeat_around_a_real_subprocess():
    out = io.StringIO()
    progress = Progress("stand-in bases", out)
    started = time.monotonic()
    with progress.heartbeat("building 2/4 docker.io/library/python:3.11-slim-bookworm (linux/arm64)", every=0.5):
        subprocess.run([sys.executable, "-c", "import time; time.sleep(2.2)"], check=True)
    took = time.monotonic() - started
    progress.say("pushed 2/4 docker.io/library/python:3.11-slim-bookworm (linux/arm64) in 2 s (missing before)")
    lines = out.getvalue().splitlines()
    assert lines[0] == "stand-in bases:  building 2/4 docker.io/library/python:3.11-slim-bookworm (linux/arm64)"
    beats = [line for line in lines if "still running after" in line]
    assert 3 <= len(beats) <= int(took / 0.5) + 1, lines
    seconds = [int(re.search(r"after (\d+) s$", line).group(1)) for line in beats]
    assert seconds == sorted(seconds) and seconds[-1] >= 1
    assert lines[-1].startswith("stand-in bases:  pushed 2/4 ")
    assert all(PLAIN.match(line) for line in lines)


def test_no_heartbeat_after_the_step_is_over():
    out = io.StringIO()
    with Progress("python", out).heartbeat("pip install", every=0.2):
        time.sleep(0.5)
    written = out.getvalue()
    time.sleep(0.6)
    assert out.getvalue() == written


def test_progress_goes_to_the_descriptor_provision_gives_and_the_interval_is_the_environments():
    """provision.sh hands its terminal as fd 3 and sends stderr (the commands' output) to its log."""
    read_end, write_end = os.pipe()
    script = (
        "import subprocess, sys\n"
        "from xcforge.provision.progress import Progress\n"
        "print('+ mmdebstrap ...', file=sys.stderr)\n"
        "with Progress('stand-in bases').heartbeat('rootfs arm64: mmdebstrap bookworm minbase under QEMU'):\n"
        "    subprocess.run([sys.executable, '-c', 'import time; time.sleep(2.5)'], check=True)\n"
        "print('4 stand-ins (0 up to date, 4 built) at 127.0.0.1:5000')\n"
    )
    env = {**os.environ, "XCFORGE_PROGRESS_FD": str(write_end), "XCFORGE_HEARTBEAT_S": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
        pass_fds=(write_end,), timeout=60,
    )  # fmt: skip
    os.close(write_end)
    with os.fdopen(read_end) as progress:
        lines = progress.read().splitlines()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "4 stand-ins (0 up to date, 4 built) at 127.0.0.1:5000\n"  # the summary, alone
    assert proc.stderr == "+ mmdebstrap ...\n"
    assert lines[0] == "stand-in bases:  rootfs arm64: mmdebstrap bookworm minbase under QEMU"
    assert len([line for line in lines if line.endswith(" s") and "still running after" in line]) >= 2, lines


def _provision_harness(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    harness = tmp_path / "harness.sh"
    harness.write_text(
        "set -euo pipefail\nset --\n"
        f'source "{REPO_ROOT}/scripts/provision.sh"\n'
        f'PROVISION_LOG="{tmp_path}/provision.log"\n' + body
    )
    env = {**os.environ, "XCFORGE_HEARTBEAT_S": "1"}
    return subprocess.run(["bash", str(harness)], capture_output=True, text=True, env=env, timeout=60)


def test_a_long_logged_step_prints_a_heartbeat_with_the_logs_last_line(tmp_path):
    started = time.monotonic()
    result = _provision_harness(
        tmp_path,
        'logged "pip install" bash -c \'for i in 1 2 3 4 5 6; do echo "Collecting pkg-$i"; sleep 0.5; done\'\n'
        'say "python" ".venv installed in 3 s (Python 3.11.2)"\n',
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "python:          .venv installed in 3 s (Python 3.11.2)"  # the summary, unchanged
    beats = lines[:-1]
    assert len(beats) >= 2, result.stdout
    for n, line in enumerate(beats, 1):
        assert re.fullmatch(rf"pip install:     still running after {n} s \(log: Collecting pkg-\d\)", line), line
    assert took < 3 + 2.5  # the heartbeat ended with the step: nothing kept the output open
    assert "Collecting pkg-6" in (tmp_path / "provision.log").read_text()


def test_a_quick_logged_step_prints_nothing_and_a_failed_one_keeps_its_error(tmp_path):
    result = _provision_harness(
        tmp_path,
        'logged "apt-get update" true\n'
        'logged "apt-get install -t trixie" bash -c \'echo "E: broken"; sleep 1.5; exit 100\'\n',
    )
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["apt-get install -t trixie: still running after 1 s (log: E: broken)"]
    assert result.stderr.startswith("provision: error: apt-get install -t trixie failed; last lines of ")
    assert "  | E: broken" in result.stderr


@pytest.mark.docker
def test_standin_bootstrap_into_an_empty_registry_shows_each_build(tmp_path):
    """The real stand-in bootstrap (cached rootfs: seconds; fresh machine: minutes) into an empty registry."""
    from tests.registry_process import RegistryProcess

    registry = RegistryProcess().start()
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "xcforge.provision.standin", "--registry", registry.address,
             "--image", "docker.io/library/python:3.11-slim-bookworm"],
            capture_output=True, text=True, cwd=REPO_ROOT, pass_fds=(write_end,), timeout=1800,
            env={**os.environ, "XCFORGE_PROGRESS_FD": str(write_end), "XCFORGE_HEARTBEAT_S": "2"},
        )  # fmt: skip
    finally:
        os.close(write_end)
        registry.stop()
    with os.fdopen(read_end) as progress:
        lines = progress.read().splitlines()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == f"1 stand-ins (0 up to date, 1 built) at {registry.address}"
    what = "1/1 docker.io/library/python:3.11-slim-bookworm (linux/amd64, linux/arm64)"
    assert f"stand-in bases:  building {what}" in lines, lines
    pushed = re.compile(rf"stand-in bases:  pushed {re.escape(what)} in \d+ s \(missing before\)")
    assert any(pushed.fullmatch(line) for line in lines), lines
