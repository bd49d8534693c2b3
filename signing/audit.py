"""Append-only audit log of builds, pushes and signatures, hash-chained with SM3.

One JSON object per line. Each entry has `seq` (0, 1, 2, ...), `time` (UTC ISO 8601), `actor`
(user@host, or the CI actor), `action`, `digest`, `key_id`, `result`, optional `subject` and
string `details`, then `prev` (the previous entry's `hash`; 64 zeros for the first) and `hash`:

    hash = SM3(canonical JSON of the entry without "hash")   (GB/T 32905)
    canonical JSON = sorted keys, separators (",", ":"), UTF-8

The chain catches editing, deleting, inserting and reordering lines anywhere, and a cut at the
front. A cut at the *end* leaves a valid shorter chain, so every append also rewrites a head file
(`<log>.head`: count and last hash); `verify_audit_log` compares the two, and CI can publish the
head (it is in the build report) to anchor the log outside the machine.

Nothing secret is written: entries take only the named fields, values are checked to be short
strings, and key material never reaches this module (callers pass key ids).
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import re
import socket
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from signing.sm3 import sm3_hex
from xcforge.errors import ConfigError, VerificationFailed

DEFAULT_AUDIT_LOG = Path("dist/audit.log.jsonl")
GENESIS = "0" * 64
ACTIONS = frozenset({"build", "push", "sign", "verify", "promote", "keygen"})
_FIELDS = ("seq", "time", "actor", "action", "subject", "digest", "key_id", "result", "details", "prev")
_MAX_VALUE = 512
# A value that looks like key material is refused outright: PEM armour or a long base64/hex blob.
_SECRET_SHAPES = re.compile(r"-----BEGIN|PRIVATE KEY|[A-Za-z0-9+/=]{120,}")


def canonical(entry: Mapping[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def entry_hash(entry: Mapping[str, Any]) -> str:
    return sm3_hex(canonical({k: v for k, v in entry.items() if k != "hash"}))


def current_actor() -> str:
    """GitHub Actions' actor and run when in CI, else user@host."""
    if os.environ.get("GITHUB_ACTIONS") == "true":
        actor = os.environ.get("GITHUB_ACTOR", "unknown")
        repo = os.environ.get("GITHUB_REPOSITORY", "")
        run = os.environ.get("GITHUB_RUN_ID", "")
        return f"{actor}@github-actions/{repo}#{run}"
    if os.environ.get("CI") and os.environ.get("CI_ACTOR"):
        return os.environ["CI_ACTOR"]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _clean(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"audit field {name} must be a string, not {type(value).__name__}")
    if len(value) > _MAX_VALUE or "\n" in value:
        raise ConfigError(f"audit field {name} is too long or multi-line")
    if _SECRET_SHAPES.search(value):
        raise ConfigError(f"audit field {name} looks like key material; the audit log never stores secrets")
    return value


@dataclass(frozen=True)
class AuditHead:
    count: int
    last_hash: str


@dataclass(frozen=True)
class AuditVerification:
    ok: bool
    count: int
    last_hash: str
    problem: str | None = None


class AuditLog:
    """`AuditLog(path).record("sign", digest=..., key_id=..., result="ok")`."""

    def __init__(self, path: os.PathLike[str] | str = DEFAULT_AUDIT_LOG) -> None:
        self.path = Path(path)
        self.head_path = self.path.with_name(self.path.name + ".head")

    @contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _last(self) -> tuple[int, str]:
        """(next seq, prev hash) from the last line; the chain itself is checked by verify."""
        last_line = b""
        with open(self.path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            tail = fh.read().rstrip(b"\n")
            if tail:
                last_line = tail.rsplit(b"\n", 1)[-1]
        if not last_line:
            return 0, GENESIS
        try:
            entry = json.loads(last_line)
            return int(entry["seq"]) + 1, str(entry["hash"])
        except (ValueError, KeyError, TypeError) as exc:
            raise VerificationFailed(
                f"{self.path}: last line is not an audit entry; run `xcforge audit verify`"
            ) from exc

    def record(
        self,
        action: str,
        *,
        digest: str | None = None,
        key_id: str | None = None,
        result: str = "ok",
        subject: str | None = None,
        details: Mapping[str, str] | None = None,
        actor: str | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        if action not in ACTIONS:
            raise ConfigError(f"unknown audit action {action!r} (known: {', '.join(sorted(ACTIONS))})")
        clean_details = {str(k): _clean(f"details.{k}", v) for k, v in (details or {}).items()}
        with self._locked() as fd:
            seq, prev = self._last()
            entry: dict[str, Any] = {
                "seq": seq,
                "time": (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "actor": _clean("actor", actor or current_actor()),
                "action": action,
                "subject": _clean("subject", subject),
                "digest": _clean("digest", digest),
                "key_id": _clean("key_id", key_id),
                "result": _clean("result", result),
                "details": clean_details or None,
                "prev": prev,
            }
            entry = {k: entry[k] for k in _FIELDS if entry[k] is not None}
            entry["hash"] = entry_hash(entry)
            os.write(fd, canonical(entry) + b"\n")
            os.fsync(fd)
            self._write_head(AuditHead(seq + 1, entry["hash"]))
        return entry

    def _write_head(self, head: AuditHead) -> None:
        tmp = self.head_path.with_name(self.head_path.name + ".tmp")
        tmp.write_text(json.dumps({"count": head.count, "last_hash": head.last_hash}) + "\n")
        os.replace(tmp, self.head_path)

    def head(self) -> AuditHead | None:
        try:
            doc = json.loads(self.head_path.read_text())
            return AuditHead(int(doc["count"]), str(doc["last_hash"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise VerificationFailed(f"{self.head_path}: unreadable head file") from exc


def verify_audit_log(
    path: os.PathLike[str] | str = DEFAULT_AUDIT_LOG, *, expected_head: AuditHead | None = None
) -> AuditVerification:
    """Check the whole chain, then the head (the file's, or `expected_head` from elsewhere)."""
    log = AuditLog(path)
    prev, count = GENESIS, 0
    try:
        raw = log.path.read_bytes()
    except FileNotFoundError:
        return AuditVerification(False, 0, GENESIS, f"{log.path} does not exist")
    if raw and not raw.endswith(b"\n"):
        return AuditVerification(False, 0, GENESIS, "the last line is cut short (file truncated mid-entry)")
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            return AuditVerification(False, count, prev, f"line {number} is not JSON")
        if not isinstance(entry, dict) or canonical(entry) != line:
            return AuditVerification(False, count, prev, f"line {number} is not in canonical form (edited by hand?)")
        if entry.get("seq") != count:
            return AuditVerification(
                False,
                count,
                prev,
                f"line {number} has seq {entry.get('seq')}, expected {count} (lines removed or reordered)",
            )
        if entry.get("prev") != prev:
            return AuditVerification(False, count, prev, f"line {number} does not chain to the previous entry")
        if entry.get("hash") != entry_hash(entry):
            return AuditVerification(False, count, prev, f"line {number} was modified (its hash does not match)")
        prev, count = entry["hash"], count + 1
    head = expected_head if expected_head is not None else log.head()
    if head is None:
        if count:
            problem = f"{log.head_path} is missing: cannot rule out a cut at the end"
            return AuditVerification(False, count, prev, problem)
    elif (head.count, head.last_hash) != (count, prev):
        problem = f"log ends at entry {count} but the head records {head.count} entries (entries removed at the end)"
        return AuditVerification(False, count, prev, problem)
    return AuditVerification(True, count, prev)
