"""The operator's `docker run` lines: every device, mount, group and variable of the matrix, valid bash."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from xcforge.config.matrix import load_matrix
from xcforge.deploy import manifests as deploy

REPO_ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
TARGETS = list(MATRIX.targets)
IMAGE = deploy.parse_digest_ref("registry.example.com/xcforge/vllm-x@sha256:" + "c" * 64)
BASH = shutil.which("bash")


def _argv(snippet: str, tmp_path: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run the snippet with `docker` replaced by a function that prints its arguments, one per line."""
    script = tmp_path / "run.sh"
    script.write_text('docker() { printf "%s\\n" "$@"; }\n' + snippet)
    proc = subprocess.run(
        [BASH, "-e", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **(env or {})}
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("name", TARGETS)
def test_contains_every_device_and_mount_of_the_matrix(name):
    target = MATRIX.target(name)
    text = deploy.docker_run(target)
    for device in target.runtime.devices:
        assert device in text, device
    for mount in target.runtime.mounts:
        assert f"-v {mount.host}:{mount.container}{':ro' if mount.readonly else ''}" in text
    for var in target.runtime.env:
        assert f"-e {var.name}" in text
    for flag in target.runtime.docker_flags:
        assert flag in text
    assert f"-p {target.runtime.port}:{target.runtime.port}" in text
    assert "--privileged" not in text


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", TARGETS)
def test_is_valid_bash_and_expands_to_the_right_arguments(name, tmp_path):
    target = MATRIX.target(name)
    argv = _argv(deploy.docker_run(target, IMAGE), tmp_path)
    assert argv[:2] == ["run", "-d"]
    assert argv[-3:] == [str(IMAGE), "--model", "/model"]
    assert "/path/to/model:/model:ro" in argv  # the snippet's MODEL_DIR placeholder
    injects = any(f.startswith("--gpus") for f in target.runtime.docker_flags)
    for device in target.runtime.devices:
        if injects:
            assert not any(a.startswith("--device") for a in argv)
        elif "[" in device:
            # No such card on this machine: the pattern is passed on, and docker names it in its error.
            assert f"--device={device}" in argv
        else:
            assert f"--device={device}" in argv
    if "--ipc=host" in target.runtime.docker_flags:
        assert "--ipc=host" in argv and not any(a.startswith("--shm-size") for a in argv)
    else:
        assert f"--shm-size={target.runtime.shm_size}" in argv
    for group in target.runtime.user.groups:
        index = argv.index("--group-add")
        assert argv[index + 1] == str(group.gid)  # no such group here: the matrix's gid


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_group_gid_is_taken_from_the_host(tmp_path):
    """A host whose HwHiAiUser has another gid: --group-add follows the host, not the matrix."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    getent = fake_bin / "getent"
    getent.write_text('#!/bin/sh\n[ "$2" = HwHiAiUser ] && echo "HwHiAiUser:x:1205:" \n')
    getent.chmod(0o755)
    argv = _argv(deploy.docker_run(MATRIX.target("ascend"), IMAGE), tmp_path, {"PATH": f"{fake_bin}:/usr/bin:/bin"})
    assert argv[argv.index("--group-add") + 1] == "1205"


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_device_patterns_expand_to_every_card(tmp_path):
    target = MATRIX.target("ascend")
    cards = tmp_path / "dev"
    cards.mkdir()
    for n in (0, 1, 7):
        (cards / f"davinci{n}").touch()
    (cards / "davinci_manager").touch()
    text = deploy.docker_run(target, IMAGE).replace("/dev/davinci[0-9]*", f"{cards}/davinci[0-9]*")
    argv = _argv(text, tmp_path)
    assert [a for a in argv if a.startswith(f"--device={cards}")] == [f"--device={cards}/davinci{n}" for n in (0, 1, 7)]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("name", TARGETS)
def test_doctor_variant_has_the_same_contract(name, tmp_path):
    target = MATRIX.target(name)
    serve = _argv(deploy.docker_run(target, IMAGE), tmp_path)
    doctor = _argv(deploy.docker_run(target, IMAGE, doctor=True), tmp_path)
    assert doctor[:2] == ["run", "--rm"] and doctor[-2:] == [str(IMAGE), "doctor"]
    assert "-p" not in doctor and "--model" not in doctor
    contract = [a for a in serve if a.startswith(("--device", "--shm-size", "--ipc", "--gpus", "--cap-add"))]
    contract += [serve[i + 1] for i, a in enumerate(serve) if a in ("--group-add", "-e")]
    contract += [m for m in serve if m.endswith(":ro") and "model" not in m]
    for arg in contract:
        assert arg in doctor, arg


def test_given_image_and_model_are_used_verbatim():
    text = deploy.docker_run(MATRIX.target("cpu"), IMAGE, model="/models/qwen 7b", name="qwen")
    assert f"IMAGE={IMAGE}" in text
    assert "--name qwen" in text
    assert "-v '/models/qwen 7b':'/models/qwen 7b':ro" in text
    assert "MODEL_DIR" not in text


@pytest.mark.parametrize("name", TARGETS)
def test_operator_doc_shows_exactly_the_generated_lines(name):
    doc = (REPO_ROOT / "docs" / "operators.md").read_text()
    assert deploy.docker_run(MATRIX.target(name)).rstrip("\n") in doc


def test_cli_docker_run(capsys):
    from xcforge.cli import main

    assert main(["deploy", "--docker-run", "--target", "mlu", "--matrix", str(REPO_ROOT / "matrix.yaml")]) == 0
    assert capsys.readouterr().out == deploy.docker_run(MATRIX.target("mlu"))
    assert main(["deploy", "--doctor", "--target", "mlu", "--matrix", str(REPO_ROOT / "matrix.yaml")]) == 2
    args = ["deploy", "--docker-run", "--target", "mlu", "--image", "r.example.com/x:1"]
    assert main([*args, "--matrix", str(REPO_ROOT / "matrix.yaml")]) == 2
