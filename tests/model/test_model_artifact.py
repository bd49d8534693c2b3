"""`model pack|inspect|unpack|sign|verify`: real files, real SM2/cosign keys, real tar archives; a real
registry (distribution 2.8 on a loopback port) and the real cosign binary for the pushed side."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.model.model_helpers import KeyFiles, safetensors_model, write_gguf, write_keys
from tests.registry_process import RegistryProcess
from xcforge.cli import main
from xcforge.model.artifact import CHUNK_MEDIA_TYPE, MODEL_ARTIFACT_TYPE, RECORD_DIR, read_archive
from xcforge.model.formats import read_gguf

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_keys(tmp_path_factory.mktemp("other"))


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def pack(capsys: pytest.CaptureFixture[str], source: Path, tmp: Path, *more: str | Path) -> Path:
    code, _, err = run(capsys, "model", "pack", source, "--name", "qwen-test:1.0", "--dist", tmp / "dist", *more)
    assert code == 0, err
    return tmp / "dist" / "models" / "qwen-test-1.0.model.oci.tar"


def test_pack_records_the_models_own_facts_every_file_and_chunk(tmp_path, capsys, keys):
    model = safetensors_model(tmp_path / "m", big=int(2.5 * MiB))
    archive = pack(capsys, model, tmp_path, "--chunk-size", "1M", "--no-audit")
    artifact = read_archive(archive)
    manifest, config = artifact.manifest, artifact.config
    assert manifest["artifactType"] == MODEL_ARTIFACT_TYPE
    assert (config["format"], config["architecture"], config["dtype"]) == (
        "safetensors",
        "Qwen2ForCausalLM",
        "bfloat16",
    )
    assert config["parameters"] == 256 * 512 * 2 + 512
    assert config["quantization"] is None
    files = {f["path"]: f for f in config["files"]}
    assert set(files) == {
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
        "sub/empty.txt",
        "zeros.bin",
    }
    for rel, entry in files.items():
        data = (model / rel).read_bytes()
        assert entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert sum(c["size"] for c in entry["chunks"]) == len(data)
        assert all(c["size"] <= MiB for c in entry["chunks"])
    assert files["sub/empty.txt"]["chunks"] == []
    zeros = [c["digest"] for c in files["zeros.bin"]["chunks"]]
    assert len(zeros) == 3 and zeros[0] == zeros[1] != zeros[2]
    assert all(layer["mediaType"] == CHUNK_MEDIA_TYPE for layer in manifest["layers"])
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names.count("blobs/sha256/" + zeros[0][7:]) == 1  # one copy of the repeated chunk
    for layer in manifest["layers"]:
        assert "blobs/sha256/" + layer["digest"][7:] in names


def test_quantization_is_read_from_quantization_config(tmp_path, capsys):
    quant = {"quant_method": "AWQ", "bits": 4, "group_size": 128, "zero_point": True}
    model = safetensors_model(tmp_path / "awq", quantization=quant)
    config = read_archive(pack(capsys, model, tmp_path, "--no-audit")).config
    assert config["quantization"] == {"method": "awq", "bits": 4, "group_size": 128}


def test_gguf_header_gives_architecture_file_type_and_parameters(tmp_path, capsys):
    path = tmp_path / "tiny.Q4_K_M.gguf"
    elements = write_gguf(path, architecture="qwen2", file_type=15)
    facts = read_gguf(path)
    assert (facts.format, facts.architecture, facts.parameters) == ("gguf", "qwen2", elements)
    assert facts.quantization == {"method": "gguf", "type": "Q4_K_M"}
    config = read_archive(pack(capsys, path, tmp_path, "--no-audit")).config
    assert [f["path"] for f in config["files"]] == ["tiny.Q4_K_M.gguf"]
    assert config["quantization"]["type"] == "Q4_K_M"


def test_sign_verify_unpack_round_trip_through_the_images_signing(tmp_path, capsys, keys, other_keys):
    model = safetensors_model(tmp_path / "m", big=2 * MiB)
    audit = tmp_path / "audit.jsonl"
    archive = pack(
        capsys, model, tmp_path, "--chunk-size", "1M", "--sm2-key", keys.sm2_key, "--cosign-key", keys.cosign_key,
        "--audit-log", audit,
    )  # fmt: skip
    code, out, err = run(
        capsys,
        "model",
        "verify",
        archive,
        "--sm2-key",
        keys.sm2_pub,
        "--cosign-key",
        keys.cosign_pub,
        "--audit-log",
        audit,
    )
    assert code == 0, err
    assert out.count("VALID ") == 2
    # The image command accepts the model's digest and archive too: one verification code path.
    digest = read_archive(archive).digest
    code, out, err = run(
        capsys, "verify", f"qwen-test@{digest}", "--archive", archive, "--sm2-key", keys.sm2_pub, "--no-audit"
    )
    assert code == 0, err
    code, out, err = run(capsys, "model", "verify", archive, "--sm2-key", other_keys.sm2_pub, "--audit-log", audit)
    assert code == 8
    assert "INVALID" in out and "error:" in err and "Traceback" not in err
    dest = tmp_path / "unpacked"
    code, out, err = run(capsys, "model", "unpack", archive, dest, "--sm2-key", keys.sm2_pub, "--audit-log", audit)
    assert code == 0, err
    for path in model.rglob("*"):
        if path.is_file():
            assert (dest / path.relative_to(model)).read_bytes() == path.read_bytes()
    record = dest / RECORD_DIR
    assert hashlib.sha256((record / "manifest.json").read_bytes()).hexdigest() == digest[7:]
    assert sorted(p.name for p in (record / "signatures").iterdir()) == ["cosign.json", "sm2.json"]
    actions = [json.loads(line)["action"] for line in audit.read_text().splitlines()]
    assert {"model-pack", "sign", "verify", "model-unpack", "checkpoint"} <= set(actions)
    code, _, _ = run(capsys, "audit", "verify", audit, "--sm2-key", keys.sm2_pub)
    assert code == 0


def test_unpack_refuses_a_corrupt_chunk_and_leaves_nothing(tmp_path, capsys):
    model = safetensors_model(tmp_path / "m")
    archive = pack(capsys, model, tmp_path, "--no-audit")
    shard = read_archive(archive).config["files"][1]
    blob = "blobs/sha256/" + shard["chunks"][0]["digest"][7:]
    with tarfile.open(archive) as tar:
        offset = tar.getmember(blob).offset_data
    with archive.open("r+b") as fh:
        fh.seek(offset + 1000)
        byte = fh.read(1)
        fh.seek(offset + 1000)
        fh.write(bytes([byte[0] ^ 1]))
    dest = tmp_path / "out"
    code, _, err = run(capsys, "model", "unpack", archive, dest, "--no-audit")
    assert code == 11
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"chunk 0 of {shard['path']}" in errors[0] and "Traceback" not in err
    assert not dest.exists()


@pytest.mark.parametrize(
    ("argv", "code", "names"),
    [
        (["--name", "Qwen Test"], 2, "--name"),
        (["--name", "q:1", "--chunk-size", "lots"], 2, "--chunk-size"),
        (["--name", "q:1", "--push"], 2, "--registry"),
    ],
)
def test_bad_pack_arguments_are_one_line(tmp_path, capsys, argv, code, names):
    model = safetensors_model(tmp_path / "m")
    got, _, err = run(capsys, "model", "pack", model, "--dist", tmp_path / "d", "--no-audit", *argv)
    assert got == code
    assert names in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "d").exists()


def test_a_directory_without_weights_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("no weights")
    code, _, err = run(capsys, "model", "pack", tmp_path / "empty", "--name", "x:1", "--dist", tmp_path, "--no-audit")
    assert code == 2 and "no *.safetensors or *.gguf" in err


def test_pushed_model_is_signed_in_the_registry_and_cosign_accepts_it(tmp_path, capsys, keys):
    model = safetensors_model(tmp_path / "m", big=MiB + 7)
    with RegistryProcess() as registry:
        repo = f"{registry.address}/wt34-models"
        pack(
            capsys, model, tmp_path, "--chunk-size", "1M", "--registry", repo, "--push", "--sm2-key", keys.sm2_key,
            "--cosign-key", keys.cosign_key, "--no-audit",
        )  # fmt: skip
        code, out, err = run(capsys, "model", "inspect", f"{repo}/qwen-test:1.0", "--json")
        assert code == 0, err
        digest = json.loads(out)["digest"]
        ref = f"{repo}/qwen-test@{digest}"
        cosign = shutil.which("cosign")
        assert cosign, "cosign is provisioned (scripts/provision.sh); this check needs the real binary"
        done = subprocess.run(
            [cosign, "verify", "--key", str(keys.cosign_pub), "--insecure-ignore-tlog", "--allow-insecure-registry",
             ref],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert digest in done.stdout
        code, out, err = run(capsys, "model", "verify", ref, "--sm2-key", keys.sm2_pub, "--no-audit")
        assert code == 0, err
        code, out, err = run(
            capsys, "model", "verify", f"{repo}/qwen-test:1.0", "--sm2-key", keys.sm2_pub, "--no-audit"
        )
        assert code == 2 and "a tag, not a digest" in err
        dest = tmp_path / "from-registry"
        code, out, err = run(capsys, "model", "unpack", ref, dest, "--cosign-key", keys.cosign_pub, "--no-audit")
        assert code == 0, err
        assert (dest / "zeros.bin").read_bytes() == bytes(MiB + 7)
        assert (dest / RECORD_DIR / "signatures" / "sm2.json").is_file()


def test_the_standalone_verifier_needs_only_python_and_openssl(tmp_path, capsys, keys, other_keys):
    model = safetensors_model(tmp_path / "m", big=MiB + 5)
    archive = pack(capsys, model, tmp_path, "--chunk-size", "1M", "--sm2-key", keys.sm2_key, "--cosign-key",
                   keys.cosign_key, "--no-audit")  # fmt: skip
    dest = tmp_path / "unpacked"
    assert main(["model", "unpack", str(archive), str(dest), "--no-audit"]) == 0
    tool = Path(__file__).resolve().parents[2] / "tools" / "verify-model.py"

    def check(target: Path, *key_args: str | Path) -> tuple[int, str]:
        done = subprocess.run(
            ["python3", "-I", str(tool), str(target), *map(str, key_args)],
            capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        )  # fmt: skip
        return done.returncode, done.stdout

    for target in (archive, dest):
        code, out = check(target, "--sm2-key", keys.sm2_pub, "--cosign-key", keys.cosign_pub)
        assert code == 0 and "VERIFIED" in out, out
        code, out = check(target, "--sm2-key", other_keys.sm2_pub)
        assert code == 1 and "REFUSED: no valid sm2 signature" in out
    (dest / "extra.txt").write_text("x")
    code, out = check(dest, "--sm2-key", keys.sm2_pub)
    assert code == 1 and "extra file extra.txt" in out
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.size == MiB)
    with archive.open("r+b") as fh:
        fh.seek(member.offset_data + 7)
        fh.write(b"\xff")
    code, out = check(archive, "--cosign-key", keys.cosign_pub)
    assert code == 1 and f"{member.name} differs from its digest" in out
    assert check(archive)[0] == 2


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys):
    import os

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    model = safetensors_model(tmp_path / "m", big=3 * MiB)
    archive = pack(capsys, model, tmp_path, "--no-audit")
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        for argv in (
            ["model", "pack", str(model), "--name", "x:1", "--out", str(disk / "x.tar"), "--no-audit"],
            ["model", "unpack", str(archive), str(disk / "unpacked"), "--no-audit"],
        ):
            code, _, err = run(capsys, *argv)
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert code == 3 and len(errors) == 1 and "No space left on device" in errors[0], err
            assert "Traceback" not in err
            assert list(disk.iterdir()) == [], f"{argv[1]} left files on the full disk"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
