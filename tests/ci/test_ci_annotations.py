"""xcforge.console and xcforge.ci.runners: workflow commands, escaping, summary, outputs, masks, runner detection."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from xcforge import console
from xcforge.ci import runners as runners_mod
from xcforge.ci.workflows import hardware_labels
from xcforge.config.matrix import load_matrix

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def actions(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    return tmp_path


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch):
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT"):
        monkeypatch.delenv(name, raising=False)


def test_in_github_actions_reads_the_runner_variable():
    assert console.in_github_actions({"GITHUB_ACTIONS": "true"})
    assert not console.in_github_actions({"GITHUB_ACTIONS": "false"})
    assert not console.in_github_actions({})


def test_message_escaping_keeps_percent_and_newlines():
    assert console.escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    # ':' and ',' are fine in a message ...
    assert console.escape_data("a: b, c") == "a: b, c"
    # ... but end a property value, so they are escaped there.
    assert console.escape_property("C:\\x,y: 5%") == "C%3A\\x%2Cy%3A 5%25"


def test_annotate_error_in_actions_with_file_and_line(actions):
    out = io.StringIO()
    console.annotate_error("build failed\nsee log: 50% done", file="images/a,b:c/Dockerfile", line=12, stream=out)
    assert out.getvalue() == ("::error file=images/a%2Cb%3Ac/Dockerfile,line=12::build failed%0Asee log: 50%25 done\n")


def test_annotate_error_without_location_and_with_title(actions):
    out = io.StringIO()
    console.annotate_error("boom", title="cuda: build", stream=out)
    assert out.getvalue() == "::error title=cuda%3A build::boom\n"


def test_annotate_error_outside_actions_is_silent_unless_asked(local, capsys):
    console.annotate_error("boom", file="x.py", line=3)
    assert capsys.readouterr() == ("", "")
    console.annotate_error("boom", file="x.py", line=3, echo=True)
    assert capsys.readouterr().err == "error: x.py:3: boom\n"


def test_warning_and_notice(local, capsys):
    console.warning("slow", file="matrix.yaml", line=7)
    assert capsys.readouterr().err == "warning: matrix.yaml:7: slow\n"
    console.notice("fyi")
    assert capsys.readouterr().err == "notice: fyi\n"


def test_warning_in_actions(actions):
    out = io.StringIO()
    console.warning("slow, really", file="matrix.yaml", line=7, column=2, stream=out)
    assert out.getvalue() == "::warning file=matrix.yaml,line=7,col=2::slow, really\n"


def test_group_in_actions_closes_even_on_error_and_does_not_nest(actions):
    out = io.StringIO()
    with pytest.raises(RuntimeError), console.group("build cuda", stream=out):
        with console.group("inner", stream=out):
            out.write("work\n")
        raise RuntimeError("x")
    assert out.getvalue() == "::group::build cuda\n==> inner\nwork\n::endgroup::\n"
    # The depth is reset: the next group is native again.
    out = io.StringIO()
    with console.group("next", stream=out):
        pass
    assert out.getvalue() == "::group::next\n::endgroup::\n"


def test_group_title_is_escaped(actions):
    out = io.StringIO()
    with console.group("a\nb", stream=out):
        pass
    assert out.getvalue().splitlines()[0] == "::group::a%0Ab"


def test_group_outside_actions_is_a_heading(local):
    out = io.StringIO()
    with console.group("build cpu", stream=out):
        pass
    assert out.getvalue() == "==> build cpu\n"


def test_mask_registers_each_line(actions):
    out = io.StringIO()
    console.mask("-----BEGIN KEY-----\nabc%def\n\n-----END KEY-----", stream=out)
    assert out.getvalue().splitlines() == [
        "::add-mask::-----BEGIN KEY-----",
        "::add-mask::abc%25def",
        "::add-mask::-----END KEY-----",
    ]


def test_mask_outside_actions_prints_nothing(local, capsys):
    console.mask("secret")
    assert capsys.readouterr() == ("", "")


def test_step_summary_appends(actions):
    assert console.write_step_summary("## one")
    assert console.write_step_summary("two\n")
    assert (actions / "summary.md").read_text() == "## one\ntwo\n"


def test_step_summary_outside_actions(local):
    assert console.write_step_summary("x") is False


def test_set_output_single_and_multiline(actions):
    console.set_output("digest", "sha256:" + "a" * 64)
    console.set_output("report", "line1\nline2")
    text = (actions / "output").read_text()
    lines = text.splitlines()
    assert lines[0] == "digest=sha256:" + "a" * 64
    name, delimiter = lines[1].split("<<")
    assert name == "report" and delimiter.startswith("xcforge_")
    assert lines[2:5] == ["line1", "line2", delimiter]


def _runner(name, labels, status="online"):
    return {"name": name, "status": status, "labels": [{"name": x} for x in labels]}


def test_detect_runners_online_offline_missing():
    runners = [
        _runner("npu-1", ["self-hosted", "Linux", "ARM64", "ascend"]),
        _runner("gpu-1", ["self-hosted", "gpu"], status="offline"),
        _runner("hosted-like", ["mlu"]),  # not self-hosted: does not count
    ]
    got = {r.label: r for r in runners_mod.detect_runners(["ascend", "gpu", "mlu", "arm64"], runners)}
    assert got["ascend"].available and "npu-1" in got["ascend"].reason
    assert not got["gpu"].available and "offline" in got["gpu"].reason
    assert not got["mlu"].available
    assert got["mlu"].summary_line() == "- `mlu`: skipped: no self-hosted mlu runner registered"
    # arm64 is a label GitHub gives every arm64 self-hosted runner (the Kunpeng NPU host here).
    assert got["arm64"].available


def test_detect_runners_without_token_and_declared_labels():
    got = {r.label: r for r in runners_mod.detect_runners(["ascend", "gpu"], None, declared=["GPU", ""])}
    assert got["gpu"].available and "XCFORGE_SELF_HOSTED_LABELS" in got["gpu"].reason
    assert not got["ascend"].available
    assert got["ascend"].reason.startswith("no self-hosted ascend runner registered")
    assert "RUNNERS_TOKEN" in got["ascend"].reason


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"total_count": 1, "runners": [_runner("a", ["self-hosted", "gpu"])]}),
        json.dumps([_runner("a", ["self-hosted", "gpu"])]),
        json.dumps(_runner("a", ["self-hosted", "gpu"])) + "\n",  # gh --jq '.runners[]': one per line
    ],
)
def test_parse_runners_accepts_what_gh_api_prints(text):
    runners = runners_mod.parse_runners(text)
    assert [r["name"] for r in runners] == ["a"]


def test_parse_runners_empty():
    assert runners_mod.parse_runners("") == []
    assert runners_mod.parse_runners('{"total_count": 0, "runners": []}') == []


def test_detect_runners_module_entry_point_uses_stdlib_only(tmp_path):
    """release.yml runs `python3 -m xcforge.ci.runners` before installing anything: outputs and a visible summary."""
    runners = tmp_path / "runners.jsonl"
    runners.write_text(json.dumps(_runner("npu", ["self-hosted", "ascend"])) + "\n")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        # -S: no site-packages, so an import of pydantic/yaml would fail here.
        "PYTHONPATH": REPO_ROOT,
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "xcforge.ci.runners",
            "detect-runners",
            "--labels",
            "gpu,ascend",
            "--runners",
            str(runners),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out").read_text() == "gpu=false\nascend=true\n"
    summary = (tmp_path / "summary").read_text()
    assert "skipped: no self-hosted gpu runner registered" in summary
    assert "::notice::hardware jobs for [self-hosted, gpu] skipped" in proc.stdout


def test_select_targets_cli(actions, capsys):
    from xcforge.cli import main

    assert main(["ci", "select-targets", "--targets", "cpu, ascend", "--matrix", f"{REPO_ROOT}/matrix.yaml"]) == 0
    names = list(load_matrix(f"{REPO_ROOT}/matrix.yaml").targets)
    chosen = {"cpu", "ascend"}
    assert (actions / "output").read_text() == "".join(f"{n}={str(n in chosen).lower()}\n" for n in names)
    skipped = ", ".join(n for n in names if n not in chosen)
    assert f"not selected (skipped): {skipped}" in (actions / "summary.md").read_text()
    assert main(["ci", "select-targets", "--targets", "all", "--matrix", f"{REPO_ROOT}/matrix.yaml"]) == 0


def test_select_targets_rejects_typos(actions, capsys):
    from xcforge.cli import main

    assert main(["ci", "select-targets", "--targets", "ascnd", "--matrix", f"{REPO_ROOT}/matrix.yaml"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'ascend'?" in err and err.count("\n") == 1


def test_detect_runners_cli_defaults_to_the_matrix_labels(actions, capsys):
    from xcforge.cli import main

    assert main(["ci", "detect-runners", "--no-token", "--matrix", f"{REPO_ROOT}/matrix.yaml"]) == 0
    labels = hardware_labels(load_matrix(f"{REPO_ROOT}/matrix.yaml"))
    assert labels[:3] == ["gpu", "ascend", "mlu"] and labels[-2:] == ["arm64", "phytium"]
    assert (actions / "output").read_text() == "".join(f"{label}=false\n" for label in labels)
