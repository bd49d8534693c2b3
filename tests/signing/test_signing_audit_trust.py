"""Audit checkpoints, segments, retention and export (issue 11, item 3): the log an auditor relies on.

A rewritten chain with a recomputed head passes the hash check; only the SM2 checkpoints catch it,
and only with the key. Segments chain to each other; pruning obeys the 180-day policy and leaves the
chain verifiable; the export carries everything with checksums.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signing.audit import RETENTION_DAYS, AuditHead, AuditLog, canonical, entry_hash, verify_audit_log
from signing.errors import InvalidSigningRequest
from signing.sm2_keys import Sm2PrivateKey

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
KEY = Sm2PrivateKey.generate()
OTHER = Sm2PrivateKey.generate()


def _log(tmp_path, n: int = 4, when: datetime | None = None) -> AuditLog:
    log = AuditLog(tmp_path / "dist" / "audit.log.jsonl")
    for i in range(n):
        log.record("sign", digest=DIGEST, key_id=f"{i:064x}", now=when)
    return log


def _rechain(log: AuditLog, edit) -> None:
    """What an attacker without the key does: edit, then recompute every hash and the head."""
    entries = [json.loads(line) for line in log.path.read_bytes().splitlines()]
    edit(entries)
    prev = entries[0]["prev"]
    for seq, entry in enumerate(entries, start=entries[0]["seq"]):
        entry["seq"], entry["prev"] = seq, prev
        entry["hash"] = entry_hash(entry)
        prev = entry["hash"]
    log.path.write_bytes(b"".join(canonical(e) + b"\n" for e in entries))
    log._write_head(AuditHead(entries[-1]["seq"] + 1, prev))


def test_checkpoint_signs_the_head_and_verify_checks_it(tmp_path):
    log = _log(tmp_path)
    entry = log.checkpoint(KEY)
    assert entry["action"] == "checkpoint" and entry["key_id"] == KEY.key_id and len(entry["signature"]) > 100
    log.record("verify", digest=DIGEST)
    result = verify_audit_log(log.path, sm2_public=KEY.public_key)
    assert result.ok and result.checkpoints == 1 and result.unsigned_tail == 1
    wrong = verify_audit_log(log.path, sm2_public=OTHER.public_key)
    assert not wrong.ok and "checkpoint signature does not verify" in wrong.problem


def test_a_rechained_log_passes_the_hashes_but_not_the_checkpoints(tmp_path):
    log = _log(tmp_path)
    log.checkpoint(KEY)

    def hide_a_signature(entries):
        entries[1]["key_id"] = "f" * 64  # who signed what, rewritten

    _rechain(log, hide_a_signature)
    assert verify_audit_log(log.path).ok  # without the key the forgery is consistent
    result = verify_audit_log(log.path, sm2_public=KEY.public_key)
    assert not result.ok and "checkpoint signature does not verify" in result.problem

    def drop_the_checkpoint(entries):
        del entries[-1]

    _rechain(log, drop_the_checkpoint)
    result = verify_audit_log(log.path, sm2_public=KEY.public_key)
    assert not result.ok and "no checkpoint signed by SM2 key" in result.problem


def test_segments_chain_and_verify_walks_them_all(tmp_path):
    log = _log(tmp_path, 3)
    first = log.rotate()
    assert first.name == "audit.log.jsonl.00000000-00000002" and log.path.read_bytes().count(b"\n") == 1
    log.record("verify", digest=DIGEST)
    second = log.rotate()
    log.checkpoint(KEY)
    result = verify_audit_log(log.path, sm2_public=KEY.public_key)
    assert result.ok and result.segments == 3 and result.count == 7 and result.checkpoints == 1
    lines = second.read_bytes().splitlines()
    second.write_bytes(b"\n".join(lines[:-1]) + b"\n")  # an entry cut from a closed segment
    assert "expected" in verify_audit_log(log.path).problem


def test_prune_keeps_the_policy_and_the_chain(tmp_path):
    old = datetime.now(UTC) - timedelta(days=400)
    log = _log(tmp_path, 2, when=old)
    log.rotate()  # segment 0-1 (400 days old) + its rotate entry in the new file (today)
    log.record("verify", digest=DIGEST)
    log.rotate()  # segment 2-3: today
    with pytest.raises(InvalidSigningRequest, match="below the policy's 180"):
        log.prune(retention_days=30)
    assert log.prune(retention_days=RETENTION_DAYS + 10) == [tmp_path / "dist" / "audit.log.jsonl.00000000-00000001"]
    assert log.prune() == []  # the young segment stays
    result = verify_audit_log(log.path)
    assert result.ok and result.pruned_before == 2 and result.count == 6


def test_export_carries_every_file_with_checksums(tmp_path):
    log = _log(tmp_path, 2)
    log.rotate()
    out = log.export(tmp_path / "ship" / "audit.tar.gz")
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        sums = tar.extractfile("SHA256SUMS").read().decode()
    assert {"audit.log.jsonl", "audit.log.jsonl.head", "audit.log.jsonl.00000000-00000001", "SHA256SUMS"} <= names
    assert sums.count("\n") == 3
    assert verify_audit_log(log.path).ok  # the export is itself an audited entry


def test_cli_checkpoint_rotate_verify_prune(tmp_path):
    log = _log(tmp_path, 2)
    key = tmp_path / "sm2.key"
    key.write_bytes(KEY.to_pem())
    pub = tmp_path / "sm2.pub"
    pub.write_bytes(KEY.public_key.to_pem())

    def cli(*args):
        return subprocess.run([sys.executable, str(REPO / "build.py"), "audit", *args, str(log.path)],
                              capture_output=True, text=True)  # fmt: skip

    assert cli("checkpoint", "--sm2-key", str(key)).returncode == 0
    assert cli("rotate").returncode == 0
    ok = cli("verify", "--sm2-key", str(pub))
    assert ok.returncode == 0 and "1 checkpoint(s) signed by SM2 key" in ok.stdout and "2 file(s)" in ok.stdout
    refused = cli("prune", "--retention-days", "90")
    assert refused.returncode != 0 and refused.stderr.count("error:") == 1 and "Traceback" not in refused.stderr
