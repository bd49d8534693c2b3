"""The CLI wiring (`python build.py keygen|sign|verify|promote|audit verify`) end to end, no docker."""

from __future__ import annotations

import os
import stat

import pytest
from signing_helpers import push_synthetic_image

from xcforge.cli import main
from xcforge.oci import RegistryClient


@pytest.fixture
def keys(tmp_path, monkeypatch):
    monkeypatch.setenv("XCFORGE_AUDIT_LOG", str(tmp_path / "audit.log.jsonl"))
    for name in ("XCFORGE_SM2_KEY", "XCFORGE_COSIGN_KEY", "XCFORGE_SM2_PASSWORD", "XCFORGE_COSIGN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XCFORGE_SM2_PASSWORD", "sm2-pass")
    monkeypatch.setenv("XCFORGE_COSIGN_PASSWORD", "cosign-pass")
    out = tmp_path / "keys"
    assert main(["keygen", "--sm2", "--cosign", "--out", str(out)]) == 0
    return out


def test_keygen_writes_protected_encrypted_keys_and_refuses_to_overwrite(keys, capsys):
    for name in ("sm2.key", "cosign.key"):
        assert stat.S_IMODE(os.stat(keys / name).st_mode) == 0o600
    assert (keys / "sm2.key").read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert (keys / "cosign.key").read_bytes().startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    assert (keys / "sm2.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert main(["keygen", "--sm2", "--out", str(keys)]) == 2  # ConfigError: exists
    assert "pass --force" in capsys.readouterr().err


def test_keygen_needs_a_password_source(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("XCFORGE_SM2_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["keygen", "--sm2", "--out", str(tmp_path / "k")]) == 2
    assert "XCFORGE_SM2_PASSWORD" in capsys.readouterr().err
    assert main(["keygen", "--sm2", "--no-password", "--out", str(tmp_path / "k2")]) == 0
    assert (tmp_path / "k2" / "sm2.key").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert main(["keygen", "--out", str(tmp_path / "k3")]) == 2


def test_sign_verify_promote_audit_round_trip(keys, registry, capsys, tmp_path):
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/vllm", index=True)
    sm2 = ["--sm2-key", str(keys / "sm2.key")]
    cosign = ["--cosign-key", str(keys / "cosign.key")]
    assert main(["sign", img.ref, *sm2, *cosign, "-a", "build=42"]) == 0
    out = capsys.readouterr().out
    assert out.count("signed: ") == 2

    trusted = ["--sm2-key", str(keys / "sm2.pub"), "--cosign-key", str(keys / "cosign.pub")]
    assert main(["verify", img.ref, *trusted]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["VALID", "VALID", "OK:"]

    dst = f"{registry.address}/prod/vllm"
    assert main(["promote", img.ref, dst]) == 0
    assert "--allow-identity" in capsys.readouterr().out
    assert main(["verify", f"{dst}@{img.digest}", *trusted]) == 8  # identity: not re-signed
    assert "names repository" in capsys.readouterr().out
    assert main(["verify", f"{dst}@{img.digest}", *trusted, "--allow-identity", img.name]) == 0
    assert main(["promote", img.ref, dst, *sm2, *cosign]) == 0
    assert main(["verify", f"{dst}@{img.digest}", *trusted]) == 0
    capsys.readouterr()

    assert main(["audit", "verify"]) == 0
    assert "chain intact" in capsys.readouterr().out
    log = tmp_path / "audit.log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:2] + lines[3:]))
    assert main(["audit", "verify", str(log)]) == 8


def test_sign_refuses_tags_and_needs_keys(keys, registry, capsys):
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/vllm")
    assert main(["sign", f"{img.name}:v1", "--sm2-key", str(keys / "sm2.key")]) == 2
    assert "takes a digest, not a tag" in capsys.readouterr().err
    assert main(["sign", img.ref]) == 2
    assert main(["verify", img.ref, "--target", "cpu"]) == 2
    assert main(["verify", img.ref, "--sm2-key", str(keys / "sm2.pub")]) == 8  # nothing signed yet
    assert "MISSING" in capsys.readouterr().out


def test_keys_from_environment_and_wrong_password(keys, registry, monkeypatch, capsys):
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/env")
    monkeypatch.setenv("XCFORGE_SM2_KEY", (keys / "sm2.key").read_text())
    assert main(["sign", img.ref]) == 0
    assert main(["verify", img.ref]) == 0  # the public half of $XCFORGE_SM2_KEY is trusted
    monkeypatch.setenv("XCFORGE_SM2_PASSWORD", "wrong")
    assert main(["sign", img.ref]) == 7
    err = capsys.readouterr().err
    assert "wrong password" in err and "Traceback" not in err


def test_verify_target_reads_the_build_report(keys, registry, tmp_path, capsys):
    from xcforge.report import BuildResult, write_reports

    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "xcforge/vllm-cpu", index=True)
    result = BuildResult(
        target="cpu", status="built", platforms=[], image_repo=img.name, digest=img.digest, output="registry"
    )
    write_reports([result], tmp_path / "dist")
    trusted = ["--sm2-key", str(keys / "sm2.pub")]
    assert main(["sign", img.ref, "--sm2-key", str(keys / "sm2.key")]) == 0
    assert main(["verify", "--target", "cpu", "--report", str(tmp_path / "dist"), *trusted]) == 0
    assert f"OK: {img.ref}" in capsys.readouterr().out
    assert main(["verify", "--target", "ascend", "--report", str(tmp_path / "dist"), *trusted]) == 2
