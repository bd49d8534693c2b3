"""The audit log: a valid chain, and each kind of tampering detected; nothing secret recorded."""

from __future__ import annotations

import itertools
import json

import pytest

from signing.audit import GENESIS, AuditHead, AuditLog, current_actor, entry_hash, verify_audit_log
from signing.errors import InvalidSigningRequest
from signing.sign import sign_archive
from signing.sm2_keys import Sm2PrivateKey
from signing.sm3 import sm3_hex

DIGEST = "sha256:" + "cd" * 32


@pytest.fixture
def log(tmp_path):
    audit = AuditLog(tmp_path / "dist" / "audit.log.jsonl")
    audit.record("build", subject="cpu", digest=DIGEST, details={"platforms": "linux/amd64"})
    audit.record("push", subject="127.0.0.1:5000/x/vllm-cpu", digest=DIGEST)
    for i in range(3):
        audit.record("sign", digest=DIGEST, key_id=f"{i:064x}", result="ok", details={"scheme": "sm2"})
    audit.record("verify", digest=DIGEST, result="ok")
    return audit


def _lines(audit):
    return audit.path.read_bytes().splitlines(keepends=True)


def _write(audit, lines):
    audit.path.write_bytes(b"".join(lines))


def test_a_fresh_log_verifies_and_chains_with_sm3(log):
    result = verify_audit_log(log.path)
    assert result.ok and result.count == 6
    entries = [json.loads(line) for line in _lines(log)]
    assert entries[0]["prev"] == GENESIS
    for before, after in itertools.pairwise(entries):
        assert after["prev"] == before["hash"]
    body = {k: v for k, v in entries[2].items() if k != "hash"}
    assert entries[2]["hash"] == sm3_hex(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    assert entries[0]["actor"] == current_actor() and entries[0]["time"].endswith("Z")
    assert {"seq", "time", "actor", "action", "digest", "result", "prev", "hash"} <= set(entries[2])
    assert log.head() == AuditHead(6, entries[-1]["hash"])


def test_editing_a_line_is_detected(log):
    lines = _lines(log)
    entry = json.loads(lines[2])
    entry["result"] = "failed"
    lines[2] = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    result = verify_audit_log(log.path)
    _write(log, lines)
    result = verify_audit_log(log.path)
    assert not result.ok and "line 3 was modified" in result.problem
    # Recomputing that entry's own hash does not help: the next entry no longer chains to it.
    entry["hash"] = entry_hash(entry)
    lines[2] = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    _write(log, lines)
    result = verify_audit_log(log.path)
    assert not result.ok and "line 4" in result.problem


def test_deleting_a_line_is_detected(log):
    lines = _lines(log)
    _write(log, lines[:3] + lines[4:])
    result = verify_audit_log(log.path)
    assert not result.ok and "line 4" in result.problem
    _write(log, lines[1:])
    assert "line 1" in verify_audit_log(log.path).problem


def test_reordering_lines_is_detected(log):
    lines = _lines(log)
    lines[3], lines[4] = lines[4], lines[3]
    _write(log, lines)
    result = verify_audit_log(log.path)
    assert not result.ok and "reordered" in result.problem


def test_truncation_at_the_end_or_mid_line_is_detected(log):
    lines = _lines(log)
    _write(log, lines[:-2])
    result = verify_audit_log(log.path)
    assert not result.ok and "removed at the end" in result.problem
    _write(log, [*lines[:-1], lines[-1][:40]])
    assert "cut short" in verify_audit_log(log.path).problem
    _write(log, lines)
    assert verify_audit_log(log.path).ok
    # A head published elsewhere (e.g. in the CI report) catches a cut even if the head file is redone.
    assert not verify_audit_log(log.path, expected_head=AuditHead(7, "f" * 64)).ok
    log.head_path.unlink()
    assert "head" in verify_audit_log(log.path).problem


def test_appending_after_verification_keeps_the_chain(log):
    log.record("promote", digest=DIGEST, subject="a -> b")
    assert verify_audit_log(log.path).count == 7


def test_nothing_secret_is_logged(tmp_path, monkeypatch):
    key = Sm2PrivateKey.generate()
    password = "correct horse battery staple 马"
    pem = key.to_pem(password, iterations=1000)
    audit = AuditLog(tmp_path / "audit.log.jsonl")
    archive = tmp_path / "img.tar"
    archive.write_bytes(b"x")
    sign_archive(archive, "registry.example/a/b", DIGEST, sm2_key=key, audit=audit)
    from xcforge.cli import main

    monkeypatch.setenv("XCFORGE_SM2_PASSWORD", password)
    monkeypatch.setenv("XCFORGE_SM2_KEY", pem.decode())
    assert (
        main(["sign", f"registry.example/a/b@{DIGEST}", "--archive", str(archive), "--audit-log", str(audit.path)]) == 0
    )
    assert main(["keygen", "--sm2", "--out", str(tmp_path / "keys"), "--audit-log", str(audit.path)]) == 0
    text = audit.path.read_text() + audit.head_path.read_text()
    assert verify_audit_log(audit.path).ok and text.count("\n") >= 4
    for secret in (f"{key.d:064x}", f"{key.d:x}", str(key.d), password, "PRIVATE KEY", pem.decode().splitlines()[1]):
        assert secret not in text
    new_key = (tmp_path / "keys" / "sm2.key").read_text()
    assert new_key.splitlines()[1] not in text
    with pytest.raises(InvalidSigningRequest, match="key material"):
        audit.record("sign", details={"note": pem.decode().replace("\n", " ")})
    with pytest.raises(InvalidSigningRequest, match="unknown audit action"):
        audit.record("exfiltrate")
