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

Checkpoints: `checkpoint(key)` appends an entry whose `signature` is SM2 over
`xcforge-audit-checkpoint:v1:<count>:<hash of entry count-1>`: rewriting the chain (and its head)
then needs the SM2 key, and `verify_audit_log(..., sm2_public=KEY)` checks every checkpoint and
says how many entries follow the last one. `sign` writes one after each run.

Segments: `rotate()` closes the current file as `<log>.<first seq>-<last seq>` (8 digits each)
and starts a new one with a `rotate` entry chained to the old head; the chain and `seq` run on
across segments, and verify walks them all in order. `prune(days)` deletes closed segments whose
newest entry is older than the retention period, which is at least RETENTION_DAYS (180: 等保 level 3
asks for six months of audit records); it refuses younger ones, and records what it removed (the
removed segment's last hash, which the next segment chains to) in a `prune` entry. `export(out)`
writes the closed segments, the current file and the head into one tar.gz with SHA256SUMS, for a
remote store.

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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from signing.errors import InvalidSigningRequest, VerificationFailed
from signing.sm3 import sm3_hex

if TYPE_CHECKING:  # annotations only: the log itself never loads keys
    from signing.sm2_keys import Sm2PrivateKey, Sm2PublicKey

DEFAULT_AUDIT_LOG = Path("dist/audit.log.jsonl")
GENESIS = "0" * 64
ACTIONS = frozenset(
    {
        "build",
        "push",
        "sign",
        "attest",
        "verify",
        "promote",
        "bundle",
        "import",
        "keygen",
        "checkpoint",
        "rotate",
        "model-pack",
        "model-unpack",
        "prune",
        "export",
    }
)
_FIELDS = (
    "seq", "time", "actor", "action", "subject", "digest", "key_id", "result", "details", "signature", "prev"
)  # fmt: skip
RETENTION_DAYS = 180
CHECKPOINT_DOMAIN = b"xcforge-audit-checkpoint:v1:"
_SEGMENT = re.compile(r"\.(\d{8})-(\d{8})$")
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
        raise InvalidSigningRequest(f"audit field {name} must be a string, not {type(value).__name__}")
    if len(value) > _MAX_VALUE or "\n" in value:
        raise InvalidSigningRequest(f"audit field {name} is too long or multi-line")
    if _SECRET_SHAPES.search(value):
        raise InvalidSigningRequest(f"audit field {name} looks like key material; the audit log never stores secrets")
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
    segments: int = 1
    checkpoints: int = 0  # valid signed checkpoints (when a key was given)
    unsigned_tail: int = 0  # entries after the last valid checkpoint
    pruned_before: int = 0  # the first seq still present (entries before it were pruned by policy)


class _Extent(TypedDict):
    """The AuditVerification fields every verdict past the chain walk carries."""

    segments: int
    pruned_before: int


class AuditLog:
    """`AuditLog(path).record("sign", digest=..., key_id=..., result="ok")`."""

    def __init__(self, path: os.PathLike[str] | str = DEFAULT_AUDIT_LOG) -> None:
        self.path = Path(path)
        self.head_path = self.path.with_name(self.path.name + ".head")

    @contextmanager
    def _locked(self) -> Iterator[int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def segments(self) -> list[Path]:
        """Closed segments, oldest first."""
        found = [
            (int(m.group(1)), p) for p in self.path.parent.glob(self.path.name + ".*") if (m := _SEGMENT.search(p.name))
        ]
        return [p for _, p in sorted(found)]

    def _last(self) -> tuple[int, str]:
        """(next seq, prev hash) from the last line; the chain itself is checked by verify."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            segments = self.segments()
            if segments:  # just rotated: continue from the newest closed segment
                return self._last_of(segments[-1])
        return self._last_of(self.path)

    def _last_of(self, path: Path) -> tuple[int, str]:
        last_line = b""
        if not path.exists():
            return 0, GENESIS
        with open(path, "rb") as fh:
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
        signature: str | None = None,
        _sign: Callable[[int, str], str] | None = None,
    ) -> dict[str, Any]:
        if action not in ACTIONS:
            raise InvalidSigningRequest(f"unknown audit action {action!r} (known: {', '.join(sorted(ACTIONS))})")
        clean_details = {str(k): _clean(f"details.{k}", v) for k, v in (details or {}).items()}
        with self._locked() as fd:
            seq, prev = self._last()
            if _sign is not None:  # a checkpoint: signs the head as it is under the lock
                signature = _sign(seq, prev)
            if signature is not None and not re.fullmatch(r"[0-9a-f]{16,512}", signature):
                raise InvalidSigningRequest("audit signature must be lower-case hex")
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
                "signature": signature,
                "prev": prev,
            }
            entry = {k: entry[k] for k in _FIELDS if entry[k] is not None}
            entry["hash"] = entry_hash(entry)
            os.write(fd, canonical(entry) + b"\n")
            os.fsync(fd)
            self._write_head(AuditHead(seq + 1, entry["hash"]))
        return entry

    def checkpoint(self, private_key: Sm2PrivateKey, *, actor: str | None = None) -> dict[str, Any]:
        """Sign the chain head with the SM2 key (see the module docstring)."""

        def sign(count: int, head: str) -> str:
            return private_key.sign(CHECKPOINT_DOMAIN + f"{count}:{head}".encode()).hex()

        return self.record("checkpoint", key_id=private_key.key_id, subject="sm2-checkpoint", actor=actor, _sign=sign)

    def rotate(self) -> Path | None:
        """Close the current file as a segment; the next entry (a `rotate`) chains to it."""
        with self._locked():
            raw = self.path.read_bytes()
            if not raw.strip():
                return None
            lines = raw.splitlines()
            first, last = json.loads(lines[0])["seq"], json.loads(lines[-1])["seq"]
            segment = self.path.with_name(f"{self.path.name}.{first:08d}-{last:08d}")
            if segment.exists():
                raise VerificationFailed(f"{segment} already exists: the log and its segments disagree")
            tmp = segment.with_name(segment.name + ".tmp")
            with open(tmp, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, segment)
            # Emptied in place (under the lock), once the segment holds the bytes on disk.
            with open(self.path, "r+b") as fh:
                fh.truncate(0)
        self.record("rotate", subject=segment.name, details={"entries": str(len(lines))})
        return segment

    def prune(self, *, retention_days: int = RETENTION_DAYS, now: datetime | None = None) -> list[Path]:
        """Delete closed segments older than the retention period (never younger than 180 days)."""
        if retention_days < RETENTION_DAYS:
            raise InvalidSigningRequest(
                f"retention of {retention_days} days is below the policy's {RETENTION_DAYS} (等保 level 3 keeps "
                "six months of audit records); pass --retention-days 180 or more"
            )
        now = now or datetime.now(UTC)
        removed = []
        for segment in self.segments()[:-1] or []:  # the newest closed segment anchors the chain
            last = json.loads(segment.read_bytes().splitlines()[-1])
            age = now - datetime.strptime(last["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            if age.days < retention_days:
                break  # segments are in order: every later one is younger still
            self.record(
                "prune",
                subject=segment.name,
                details={"last_seq": str(last["seq"]), "last_hash": last["hash"], "age_days": str(age.days)},
            )
            segment.unlink()
            removed.append(segment)
        return removed

    def export(self, out: Path) -> Path:
        """Closed segments + current file + head into one tar.gz with SHA256SUMS (for a remote store)."""
        import hashlib
        import io
        import tarfile

        files = [*self.segments(), self.path, self.head_path]
        sums = "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in files if f.exists())
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tar:
            for f in files:
                if f.exists():
                    tar.add(f, arcname=f.name)
            info = tarfile.TarInfo("SHA256SUMS")
            info.size = len(sums.encode())
            tar.addfile(info, io.BytesIO(sums.encode()))
        self.record("export", subject=out.name, details={"files": str(len(files))})
        return out

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
    path: os.PathLike[str] | str = DEFAULT_AUDIT_LOG,
    *,
    expected_head: AuditHead | None = None,
    sm2_public: Sm2PublicKey | None = None,
) -> AuditVerification:
    """Check the chain through every segment, then the head (the file's, or `expected_head` from
    elsewhere), then, given the SM2 public key, every checkpoint's signature."""
    log = AuditLog(path)
    files = [*log.segments(), log.path]
    if not log.path.exists() and len(files) == 1:
        return AuditVerification(False, 0, GENESIS, f"{log.path} does not exist")
    entries: list[tuple[str, int, dict[str, Any]]] = []
    for file in files:
        try:
            raw = file.read_bytes()
        except FileNotFoundError:
            continue
        if raw and not raw.endswith(b"\n"):
            return AuditVerification(
                False, 0, GENESIS, f"{file.name}: the last line is cut short (truncated mid-entry)"
            )
        for number, line in enumerate(raw.splitlines(), start=1):
            try:
                entry = json.loads(line)
            except ValueError:
                return AuditVerification(False, 0, GENESIS, f"{file.name} line {number} is not JSON")
            if not isinstance(entry, dict) or canonical(entry) != line:
                problem = f"{file.name} line {number} is not in canonical form (edited by hand?)"
                return AuditVerification(False, 0, GENESIS, problem)
            entries.append((file.name, number, entry))
    # Entries pruned by policy: the first one left chains to a hash a later `prune` entry records.
    pruned = {e["details"]["last_hash"]: int(e["details"]["last_seq"]) for _, _, e in entries
              if e.get("action") == "prune" and isinstance(e.get("details"), dict)}  # fmt: skip
    prev, seq = GENESIS, 0
    if entries and entries[0][2].get("prev") in pruned:
        prev, seq = entries[0][2]["prev"], pruned[entries[0][2]["prev"]] + 1
    first_seq = seq
    signed, last_signed_seq = 0, None
    for name, number, entry in entries:
        where = f"{name} line {number}"
        if entry.get("seq") != seq:
            problem = f"{where} has seq {entry.get('seq')}, expected {seq} (lines removed or reordered)"
            return AuditVerification(False, seq, prev, problem)
        if entry.get("prev") != prev:
            return AuditVerification(False, seq, prev, f"{where} does not chain to the previous entry")
        if entry.get("hash") != entry_hash(entry):
            return AuditVerification(False, seq, prev, f"{where} was modified (its hash does not match)")
        if entry.get("action") == "checkpoint" and sm2_public is not None:
            message = CHECKPOINT_DOMAIN + f"{seq}:{prev}".encode()
            try:
                valid = sm2_public.verify(message, bytes.fromhex(entry.get("signature", "")))
            except ValueError:
                valid = False
            if not valid:
                problem = f"{where}: checkpoint signature does not verify with SM2 key {sm2_public.short_id}"
                return AuditVerification(False, seq, prev, problem + " (chain rewritten, or another key)")
            signed, last_signed_seq = signed + 1, seq
        prev, seq = entry["hash"], seq + 1
    head = expected_head if expected_head is not None else log.head()
    result: _Extent = {"segments": len(files), "pruned_before": first_seq}
    if head is None:
        if seq:
            problem = f"{log.head_path} is missing: cannot rule out a cut at the end"
            return AuditVerification(False, seq, prev, problem, **result)
    elif (head.count, head.last_hash) != (seq, prev):
        problem = f"log ends at entry {seq} but the head records {head.count} entries (entries removed at the end)"
        return AuditVerification(False, seq, prev, problem, **result)
    tail = seq - (last_signed_seq + 1) if last_signed_seq is not None else seq - first_seq
    if sm2_public is not None and signed == 0 and seq > first_seq:
        problem = f"no checkpoint signed by SM2 key {sm2_public.short_id}: the whole chain could have been rewritten"
        return AuditVerification(False, seq, prev, problem, checkpoints=0, unsigned_tail=tail, **result)
    return AuditVerification(True, seq, prev, checkpoints=signed, unsigned_tail=tail, **result)
