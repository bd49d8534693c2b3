"""The CLI wiring (`python build.py keygen|sign|verify|promote|audit verify`) end to end, no docker."""

from __future__ import annotations

import os
import stat

import pytest
from signing_helpers import push_synthetic_image

from ocicore.registry import RegistryClient
from signing.errors import VerificationFailed
from xcforge.cli import main
from xcforge.errors import exit_code


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
    # No SBOM or attestations on this hand-made image: a note, not a failure, unless required.
    verdicts = [line.split()[0] for line in out]
    assert verdicts[:2] == ["VALID", "VALID"] and verdicts[-1] == "OK:"
    assert set(verdicts[2:-1]) == {"NOTE"}, out
    assert main(["verify", img.ref, *trusted, "--require-attestations"]) == exit_code(VerificationFailed)
    assert "no valid sm2 SBOM attestation" in capsys.readouterr().out

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
    from xcforge.bake.result import BuildResult
    from xcforge.report.results import write_reports

    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "xcforge/vllm-cpu", index=True)
    result = BuildResult(
        target="cpu", status="built", platforms=[], image_repo=img.name, digest=img.digest, output="push"
    )
    write_reports([result], tmp_path / "dist")
    trusted = ["--sm2-key", str(keys / "sm2.pub")]
    assert main(["sign", img.ref, "--sm2-key", str(keys / "sm2.key")]) == 0
    assert main(["verify", "--target", "cpu", "--report", str(tmp_path / "dist"), *trusted]) == 0
    assert f"OK: {img.ref}" in capsys.readouterr().out
    assert main(["verify", "--target", "ascend", "--report", str(tmp_path / "dist"), *trusted]) == 2


def test_verify_trusts_the_named_private_keys_own_public_half(keys, registry, tmp_path, monkeypatch, capsys):
    """--sm2-key/--cosign-key FILE with a private key: that file's public half, never the key in
    $XCFORGE_SM2_KEY / $XCFORGE_COSIGN_KEY (which once silently won)."""
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/named")
    other = tmp_path / "other"
    assert main(["keygen", "--sm2", "--cosign", "--out", str(other)]) == 0
    assert main(["sign", img.ref, "--sm2-key", str(other / "sm2.key"), "--cosign-key", str(other / "cosign.key")]) == 0
    monkeypatch.setenv("XCFORGE_SM2_KEY", (other / "sm2.key").read_text())  # the signer's key
    monkeypatch.setenv("XCFORGE_COSIGN_KEY", (other / "cosign.key").read_text())
    capsys.readouterr()
    # the operator names *their* keys (private files): the signature by `other` must not pass
    assert main(["verify", img.ref, "--sm2-key", str(keys / "sm2.key"), "--cosign-key", str(keys / "cosign.key")]) == 8
    verdicts = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert "VALID" not in verdicts, verdicts
    assert (
        main(["verify", img.ref, "--sm2-key", str(other / "sm2.key"), "--cosign-key", str(other / "cosign.key")]) == 0
    )


def test_an_empty_password_never_writes_an_unencrypted_key(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XCFORGE_SM2_PASSWORD", "")
    monkeypatch.setenv("XCFORGE_COSIGN_PASSWORD", "")
    for scheme in ("--sm2", "--cosign"):
        out = tmp_path / scheme.strip("-")
        assert main(["keygen", scheme, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "is empty: that would write an unencrypted private key" in err and "--no-password" in err
        assert not out.exists() or not any(out.iterdir())


def test_a_no_password_cosign_key_loads_whatever_the_variable_holds(tmp_path, registry, monkeypatch):
    monkeypatch.setenv("XCFORGE_AUDIT_LOG", str(tmp_path / "audit.log.jsonl"))
    assert main(["keygen", "--cosign", "--no-password", "--out", str(tmp_path / "k")]) == 0
    monkeypatch.setenv("XCFORGE_COSIGN_PASSWORD", "for-another-key")
    img = push_synthetic_image(RegistryClient(registry.address), "team/nopass")
    assert main(["sign", img.ref, "--cosign-key", str(tmp_path / "k" / "cosign.key")]) == 0
    assert main(["verify", img.ref, "--cosign-key", str(tmp_path / "k" / "cosign.pub")]) == 0
