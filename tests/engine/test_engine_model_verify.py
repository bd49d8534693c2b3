"""The launcher verifies a signed model before the engine starts (modelverify.py): real SM2 and
cosign signatures made by xcforge's own `model pack --sm2-key/--cosign-key`, checked here with the
real `openssl` CLI, on the host (the launcher is standard library only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fakes import ENGINE
from xcforge_engine.image import load_image_facts
from xcforge_engine.modelverify import ModelRefused, fit_problem, load_key, verify_model
from xcforge_engine.serve import parse_serve_args, plan_serve

from tests.model.model_helpers import KeyFiles, safetensors_model, write_gguf, write_keys
from xcforge.cli import main as xcforge_main

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> KeyFiles:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory) -> KeyFiles:
    return write_keys(tmp_path_factory.mktemp("other"))


def _signed_archive(tmp: Path, source: Path, keys: KeyFiles, name: str) -> Path:
    argv = ["model", "pack", str(source), "--name", name, "--dist", str(tmp), "--chunk-size", "1M", "--no-audit"]
    assert xcforge_main([*argv, "--sm2-key", str(keys.sm2_key), "--cosign-key", str(keys.cosign_key)]) == 0
    return next((tmp / "models").glob("*.model.oci.tar"))


@pytest.fixture(scope="module")
def safetensors_archive(tmp_path_factory, keys) -> Path:
    tmp = tmp_path_factory.mktemp("st")
    return _signed_archive(tmp, safetensors_model(tmp / "src", big=1024 * 1024 + 3), keys, "qwen-tiny:1.0")


@pytest.fixture(scope="module")
def gguf_archive(tmp_path_factory, keys) -> Path:
    tmp = tmp_path_factory.mktemp("gguf")
    (tmp / "src").mkdir()
    write_gguf(tmp / "src" / "tiny-q4_k_m.gguf")
    return _signed_archive(tmp, tmp / "src", keys, "tiny-gguf:1.0")


def unpack(archive: Path, dest: Path) -> Path:
    assert xcforge_main(["model", "unpack", str(archive), str(dest), "--no-audit"]) == 0
    return dest


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"XCFORGE_VERIFY_CACHE": str(tmp_path / "cache"), "PATH": os.environ["PATH"]}


def test_a_signed_model_verifies_with_either_key_and_a_restart_rehashes_nothing(
    tmp_path, safetensors_archive, keys, env, capsys
):
    model = unpack(safetensors_archive, tmp_path / "m")
    first = verify_model(model, [load_key(keys.sm2_pub), load_key(keys.cosign_pub)], env)
    assert first.hashed == 6 and first.reused == 0
    assert {k.scheme for k in first.keys} == {"sm2", "cosign"}
    assert "openssl pkeyutl -verify -pubin" in capsys.readouterr().err  # the command is echoed
    again = verify_model(model, [load_key(keys.sm2_pub)], env)
    assert (again.hashed, again.reused) == (0, 6)
    # Content written back with the old mtime: ctime moved, so the file is hashed again and refused.
    shard = model / "model-00001-of-00002.safetensors"
    st = shard.stat()
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ModelRefused, match=r"file model-00001-of-00002\.safetensors differs from the signed model"):
        verify_model(model, [load_key(keys.sm2_pub)], env)


@pytest.mark.parametrize("damage", ["flipped-byte", "missing-file", "extra-file", "truncated", "edited-config"])
def test_any_difference_from_the_signed_model_is_refused_naming_the_file(
    tmp_path, safetensors_archive, keys, env, damage
):
    model = unpack(safetensors_archive, tmp_path / "m")
    expect = {
        "flipped-byte": r"file zeros\.bin differs from the signed model",
        "missing-file": r"file tokenizer\.json is missing",
        "extra-file": r"extra file sub/notes\.txt is not part of the signed model",
        "truncated": r"file zeros\.bin has 1048570 bytes, the signed model .* says 1048579",
        "edited-config": r"config\.json: differs from the signed manifest",
    }[damage]
    if damage == "flipped-byte":
        with (model / "zeros.bin").open("r+b") as fh:
            fh.seek(1024 * 1024 + 1)
            fh.write(b"\x01")
    elif damage == "missing-file":
        (model / "tokenizer.json").unlink()
    elif damage == "extra-file":
        (model / "sub" / "notes.txt").write_text("not signed")
    elif damage == "truncated":
        os.truncate(model / "zeros.bin", 1048570)
    else:
        config = json.loads((model / ".xcforge-model" / "config.json").read_text())
        config["files"][0]["sha256"] = "0" * 64
        (model / ".xcforge-model" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelRefused, match=expect):
        verify_model(model, [load_key(keys.sm2_pub)], env)


def test_a_signature_by_another_key_or_a_swapped_manifest_is_refused(
    tmp_path, safetensors_archive, gguf_archive, keys, other_keys, env
):
    model = unpack(safetensors_archive, tmp_path / "m")
    with pytest.raises(
        ModelRefused, match=r"no valid sm2 signature by key .*other.*sm2\.pub .*signed by key [0-9a-f]{16}"
    ):
        verify_model(model, [load_key(other_keys.sm2_pub)], env)
    with pytest.raises(ModelRefused, match=r"no valid cosign signature by key"):
        verify_model(model, [load_key(other_keys.cosign_pub)], env)
    # The manifest of another signed model put in: its signatures name another digest.
    other = unpack(gguf_archive, tmp_path / "g")
    shutil.copy(other / ".xcforge-model" / "manifest.json", model / ".xcforge-model" / "manifest.json")
    with pytest.raises(ModelRefused, match=r"signatures for sha256:[0-9a-f]{64}, not for this model's"):
        verify_model(model, [load_key(keys.sm2_pub)], env)


def test_a_model_without_its_record_is_refused_when_a_key_is_given(tmp_path, keys, env):
    model = safetensors_model(tmp_path / "plain")
    with pytest.raises(ModelRefused, match=r"no signed record \(\.xcforge-model/\)"):
        verify_model(model, [load_key(keys.sm2_pub)], env)
    (tmp_path / "bad.pub").write_text("not a key")
    with pytest.raises(ModelRefused, match=r"bad\.pub: not a PEM public key"):
        load_key(tmp_path / "bad.pub")


def test_fit_names_the_target_that_can_serve_the_model():
    assert "feiteng (llama.cpp)" in str(
        fit_problem({"format": "gguf", "quantization": {"type": "Q4_K_M"}}, "safetensors", "cpu")
    )
    assert "vLLM image" in str(fit_problem({"format": "safetensors"}, "gguf", "llamacpp"))
    assert fit_problem({"format": "gguf"}, "gguf", "llamacpp") is None


def _plan(fake, env, *args):
    return plan_serve(parse_serve_args(list(args), env), env, fake.host, load_image_facts(fake.host, env), ENGINE)


def test_serve_plans_only_after_verification_and_refuses_a_model_that_does_not_fit(
    machine, env_for, tmp_path, safetensors_archive, gguf_archive, keys
):
    fake = machine("cpu")
    unpack(safetensors_archive, fake.root / "models" / "qwen")
    unpack(gguf_archive, fake.root / "models" / "tiny-gguf")
    shutil.copy(keys.sm2_pub, fake.root / "sm2.pub")
    env = {**env_for("cpu"), "PATH": os.environ["PATH"], "XCFORGE_VERIFY_CACHE": str(tmp_path / "cache")}
    plan = _plan(fake, env, "--model", "/models/qwen", "--model-key", "/sm2.pub")
    assert any("sha256:" in n and "verified" in n for n in plan.notes)
    assert plan.argv[plan.argv.index("--model") + 1] == "/models/qwen"
    with pytest.raises(ModelRefused, match=r"GGUF .*feiteng"):
        _plan(fake, env, "--model", "/models/tiny-gguf", "--model-key", "/sm2.pub")
    with pytest.raises(ModelRefused, match=r"carries a signed record .* but no key was given"):
        _plan(fake, env, "--model", "/models/qwen")
    assert _plan(fake, {**env, "XCFORGE_MODEL_VERIFY": "off"}, "--model", "/models/qwen").model == "/models/qwen"
    assert not list((fake.root / "models" / "qwen").glob("*.json.state*"))  # the record is not in the model
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2  # one per verified model (the GGUF one too)


def test_the_launcher_exits_6_in_one_line_and_starts_nothing(tmp_path, safetensors_archive, gguf_archive, keys):
    model = unpack(safetensors_archive, tmp_path / "m")
    (model / "extra.bin").write_bytes(b"x")
    gguf = unpack(gguf_archive, tmp_path / "g")
    safetensors = unpack(safetensors_archive, tmp_path / "s")
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO / "images" / "engine" / "src"),
        "XCFORGE_VERIFY_CACHE": str(tmp_path / "cache"),
        "XCFORGE_STATE_DIR": str(tmp_path / "state"),
    }
    cases = [
        ({}, ["--model", str(model), "--model-key", str(keys.sm2_pub)], "extra file extra.bin"),
        ({"XCFORGE_MODEL_KEY": str(keys.cosign_pub)}, ["--model", str(gguf)], "GGUF"),
        ({"XCFORGE_BACKEND": "llamacpp"}, ["--model", str(safetensors), "--model-key", str(keys.sm2_pub)], "llama.cpp"),
    ]  # fmt: skip
    for extra, args, words in cases:
        done = subprocess.run(
            [sys.executable, "-m", "xcforge_engine", "serve", "--dry-run", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert done.returncode == 6, done.stderr
        assert len(errors) == 1 and words in errors[0] and "Traceback" not in done.stderr
        assert done.stdout == ""  # no plan printed: nothing would be started


def test_quantization_fit_follows_the_presets_rules(tmp_path):
    from xcforge_engine.backends import preset_book

    rules = preset_book().quantization
    awq = {"name": "q", "tag": "1", "format": "safetensors", "quantization": {"method": "awq", "bits": 4}}
    assert "ascend backend cannot serve it" in str(fit_problem(awq, "safetensors", "ascend", quantization_rules=rules))
    assert "targets that serve AWQ: cuda" in str(fit_problem(awq, "safetensors", "ascend", quantization_rules=rules))
    gptq = {**awq, "quantization": {"method": "gptq", "bits": 4}}
    assert "only on x86_64, not aarch64" in str(
        fit_problem(gptq, "safetensors", "cpu", arch="aarch64", quantization_rules=rules)
    )
    assert fit_problem(gptq, "safetensors", "cpu", arch="x86_64", quantization_rules=rules) is None
    big = {"name": "q", "tag": "1", "format": "safetensors", "total_size": 40 * 2**30}
    assert "more than the 32.0 GiB" in str(fit_problem(big, "safetensors", "cpu", memory_bytes=32 * 2**30))


def test_fetch_model_pulls_a_pushed_artifact_then_serve_verifies_it(tmp_path, keys, other_keys):
    from tests.registry_process import RegistryProcess

    model = safetensors_model(tmp_path / "src", big=1024 * 1024 + 9)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO / "images" / "engine" / "src"),
        "XCFORGE_VERIFY_CACHE": str(tmp_path / "cache"),
        "XCFORGE_MODEL_STORE": str(tmp_path / "store"),
        "XCFORGE_STATE_DIR": str(tmp_path / "state"),
    }

    def engine(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xcforge_engine", *args], env=env, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip

    with RegistryProcess() as registry:
        repo = f"{registry.address}/wt34-fetch"
        argv = ["model", "pack", str(model), "--name", "fetched:1", "--dist", str(tmp_path / "d"), "--chunk-size", "1M"]
        assert xcforge_main([*argv, "--registry", repo, "--push", "--sm2-key", str(keys.sm2_key), "--no-audit"]) == 0
        archive = next((tmp_path / "d" / "models").glob("*.tar"))
        from xcforge.model.artifact import read_archive

        digest = read_archive(archive).digest
        ref = f"oci://{repo}/fetched@{digest}"
        done = engine("fetch-model", ref, str(tmp_path / "init"), "--model-key", str(keys.sm2_pub))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "init" / "zeros.bin").stat().st_size == 1024 * 1024 + 9
        done = engine("fetch-model", ref, str(tmp_path / "bad"), "--model-key", str(other_keys.sm2_pub))
        assert done.returncode == 6 and "no valid sm2 signature" in done.stderr
        assert not list((tmp_path / "bad").iterdir())  # nothing left to serve
        done = engine("fetch-model", ref.replace("@sha256:", ":"), str(tmp_path / "tag"))
        assert done.returncode == 6 and "a digest, not a tag" in done.stderr
        done = engine("serve", "--dry-run", "--model", ref, "--model-key", str(keys.sm2_pub))
        assert done.returncode == 0, done.stderr
        local = str(tmp_path / "store" / digest.removeprefix("sha256:"))
        plan = json.loads(done.stdout)
        assert plan["argv"][plan["argv"].index("--model") + 1] == local
        assert any("verified" in n for n in plan["notes"])


def test_serve_takes_a_signed_archive_unpacks_it_checked_then_verifies(tmp_path, safetensors_archive, keys, other_keys):
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO / "images" / "engine" / "src"),
        "XCFORGE_VERIFY_CACHE": str(tmp_path / "cache"),
        "XCFORGE_MODEL_STORE": str(tmp_path / "store"),
        "XCFORGE_STATE_DIR": str(tmp_path / "state"),
    }

    def serve(archive: Path, key: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xcforge_engine", "serve", "--dry-run", "--model", str(archive), "--model-key",
             str(key)], env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    done = serve(safetensors_archive, keys.cosign_pub)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    local = plan["argv"][plan["argv"].index("--model") + 1]
    assert local.startswith(str(tmp_path / "store")) and any("verified" in n for n in plan["notes"])
    done = serve(safetensors_archive, other_keys.cosign_pub)
    assert done.returncode == 6 and "no valid cosign signature" in done.stderr and done.stdout == ""
    # A copy with one byte of a chunk flipped: refused while it is unpacked, nothing left to serve.
    import tarfile

    bad = tmp_path / "bad" / safetensors_archive.name
    bad.parent.mkdir()
    shutil.copy(safetensors_archive, bad)
    shutil.copytree(safetensors_archive.with_name(safetensors_archive.name + ".signatures"),
                    bad.with_name(bad.name + ".signatures"))  # fmt: skip
    with tarfile.open(bad) as tar:
        member = next(m for m in tar.getmembers() if m.size == 1024 * 1024)
    with bad.open("r+b") as fh:
        fh.seek(member.offset_data + 99)
        fh.write(b"\x07")
    env["XCFORGE_MODEL_STORE"] = str(tmp_path / "store2")
    done = serve(bad, keys.sm2_pub)
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 6 and len(errors) == 1 and "differs from the manifest" in errors[0], done.stderr
    assert not any(p.is_file() for p in (tmp_path / "store2").rglob("*"))
