"""How a bake's plain progress is given to its targets (xcforge/bake/runner.py).

The log is a real `docker buildx bake --progress=plain` of two targets (one of them with two
platforms) where one target fails, replayed through `cat`: the parser, the per-target log files
and the live lines are exercised on BuildKit's own words. The bake itself runs in the docker tests.
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path

from xcforge.bake.runner import Cancellation, failure_reason, run_bake

LOG = Path(__file__).parent / "data" / "bake-two-targets.log"


def _replay(tmp_path: Path, targets: list[str], *, live: bool = False):
    replay = ["sh", "-c", f'cat "{LOG}"; exit 1']
    return run_bake(replay, targets=targets, cwd=tmp_path, env={}, log_dir=tmp_path / "logs", live=live)


def test_lines_go_to_their_target_and_the_failed_one_is_named(tmp_path):
    run = _replay(tmp_path, ["one", "two"])
    assert run.returncode == 1
    assert run.failed_targets() == ["two"]
    one, two = run.targets["one"], run.targets["two"]
    assert one.steps == {"8", "9", "12", "13"} and one.cache_hits == 2
    assert two.steps == {"10", "11"} and two.cache_hits == 1
    assert set(one.current) == {"linux/amd64", "linux/arm64"}  # one live line per platform
    assert "did not complete successfully: exit code: 3" in failure_reason(two.tail)
    one_log = (tmp_path / "logs" / "one.log").read_text()
    two_log = (tmp_path / "logs" / "two.log").read_text()
    assert "RUN sleep 6" in one_log and "RUN sleep 6" not in two_log
    assert "RUN sleep 1; exit 3" in two_log and "#13 0.412 still working" in one_log
    assert "load local bake definitions" in one_log and "load local bake definitions" in two_log  # shared


def test_a_lone_target_owns_every_line(tmp_path):
    run = _replay(tmp_path, ["only"])
    assert run.failed_targets() == ["only"]
    assert "ERROR: failed to solve" in failure_reason(run.targets["only"].tail)


def test_live_lines_redraw_one_row_per_target_and_platform(tmp_path, capsys):
    _replay(tmp_path, ["one", "two"], live=True)
    err = capsys.readouterr().err
    assert "\x1b[1A" in err and "\x1b[2K" in err  # rich.live redraws in place (cursor up, erase line)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", err)  # each frame's rows, cursor moves as breaks
    rows = [line for line in plain.splitlines() if line.strip()][-3:]  # the final frame
    assert [r.split("]")[0] + "]" for r in rows] == ["[one linux/amd64]", "[one linux/arm64]", "[two]"]
    assert "cached" in rows[0] and "RUN sleep" in rows[0]


def test_plain_mode_prefixes_every_line(tmp_path, capsys):
    _replay(tmp_path, ["one", "two"], live=False)
    err = capsys.readouterr().err
    assert "[two] #11 ERROR: process" in err and "[one] #12 [one linux/amd64 stage-0 2/2]" in err


def test_a_cancelled_bake_on_a_worker_thread_is_terminated(tmp_path):
    """Ctrl-C reaches only the main thread; the bake a worker thread runs must stop with it."""
    cancellation = Cancellation()
    spawned = threading.Event()
    outcome: list = []
    hang = ["sh", "-c", f'cat "{LOG}"; exec sleep 600']

    def bake() -> None:
        outcome.append(
            run_bake(hang, targets=["one", "two"], cwd=tmp_path, env={}, log_dir=tmp_path / "logs",
                     spawned=spawned, cancellation=cancellation)
        )  # fmt: skip

    worker = threading.Thread(target=bake)
    worker.start()
    assert spawned.wait(30)
    cancellation.cancel()
    worker.join(60)
    assert not worker.is_alive(), "the bake went on after cancel()"
    assert outcome[0].returncode == -signal.SIGTERM
    assert cancellation.cancelled and cancellation.wait(10)  # a lane's retry sleep returns at once


def test_a_bake_started_after_cancel_is_stopped_at_once(tmp_path):
    cancellation = Cancellation()
    cancellation.cancel()
    run = run_bake(["sleep", "600"], targets=["only"], cwd=tmp_path, env={}, log_dir=tmp_path / "logs",
                   cancellation=cancellation)  # fmt: skip
    assert run.returncode == -signal.SIGTERM
