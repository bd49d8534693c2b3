"""Bad input anywhere gets the promise: one `error:` line naming the file/flag/field, a documented
exit code (2 config, 7 key, 8 verification), no traceback, never the internal-error 70 (issue 11,
item 6). Config files get bounded time and memory: alias bombs, recursive aliases, deep nesting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "recursive.yaml").write_text("a: &a [*a]\n")
    (d / "deep.yaml").write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    levels = ["a: &a [1, 2]"] + [
        f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdef", "bcdefg", strict=True)
    ]
    (d / "bomb.yaml").write_text("\n".join(levels) + "\n")
    (d / "latin1.yaml").write_bytes(b"description: caf\xe9\n")
    (d / "dir.yaml").mkdir()
    (d / "list.yaml").write_text("- just\n- a list\n")
    (d / "dup.yaml").write_text("mirrors: {}\nmirrors: {}\n")
    (d / "afile").write_text("x")
    (d / "notpem.key").write_text("hello\n")
    return d


CASES = [
    # (id, argv with {bad} for the fixture dir, expected exit, text the error line must hold)
    ("site-recursive-alias", ["--target", "cpu", "--site", "{bad}/recursive.yaml", "--dry-run"], 2, "recursive alias"),
    ("site-deep", ["--target", "cpu", "--site", "{bad}/deep.yaml", "--dry-run"], 2, "nested more than 64"),
    ("site-alias-bomb", ["--target", "cpu", "--site", "{bad}/bomb.yaml", "--dry-run"], 2, "alias bomb"),
    ("site-not-utf8", ["--target", "cpu", "--site", "{bad}/latin1.yaml", "--dry-run"], 2, "not UTF-8"),
    ("site-is-a-directory", ["--target", "cpu", "--site", "{bad}/dir.yaml", "--dry-run"], 2, "Is a directory"),
    ("site-is-a-list", ["--target", "cpu", "--site", "{bad}/list.yaml", "--dry-run"], 2, "must be a mapping"),
    ("site-duplicate-key", ["--target", "cpu", "--site", "{bad}/dup.yaml", "--dry-run"], 2, "duplicate key"),
    ("matrix-recursive-alias", ["--matrix", "{bad}/recursive.yaml", "--list"], 2, "recursive alias"),
    ("matrix-deep", ["--matrix", "{bad}/deep.yaml", "--list"], 2, "nested more than 64"),
    ("matrix-alias-bomb", ["--matrix", "{bad}/bomb.yaml", "--list"], 2, "alias bomb"),
    ("matrix-not-utf8", ["--matrix", "{bad}/latin1.yaml", "--list"], 2, "not UTF-8"),
    (
        "matrix-is-a-directory",
        ["--matrix", "{bad}/dir.yaml", "--list"],
        2,
        "Is a directory); a directory: pass --matrix FILE (or set XCFORGE_MATRIX)",
    ),
    ("registry-with-space", ["--target", "cpu", "--registry", "bad registry", "--push", "--dry-run"], 2, "HOST[:PORT]"),
    ("registry-with-scheme", ["--target", "cpu", "--registry", "https://r/x", "--push", "--dry-run"], 2, "no scheme"),
    ("platform-not-built", ["--target", "cpu", "--platform", "linux/s390x", "--dry-run"], 2, "linux/s390x"),
    (
        "wheelhouse-is-a-file",
        ["--target", "cpu", "--wheelhouse", "{bad}/afile", "--dry-run"],
        2,
        "is a file, not a directory; give the directory the .whl files are in",
    ),
    ("target-typo", ["--target", "feitng", "--dry-run"], 2, "feiteng"),
    ("keygen-out-is-a-file", ["keygen", "--sm2", "--out", "{bad}/afile", "--no-password"], 2, "is a file"),
    ("audit-key-not-pem", ["audit", "checkpoint", "{bad}/log.jsonl", "--sm2-key", "{bad}/notpem.key"], 7, "notpem.key"),
    ("audit-prune-missing-log", ["audit", "prune", "{bad}/none.jsonl"], 2, "does not exist; name the log"),
    (
        "audit-verify-missing-log",
        ["audit", "verify", "{bad}/none.jsonl"],
        8,
        "does not exist (nor any rotated segment of it); name the log",
    ),
    ("sign-a-tag", ["sign", "127.0.0.1:5000/x:latest"], 2, "not a tag"),
    ("verify-short-digest", ["verify", "127.0.0.1:5000/x@sha256:abc"], 2, "64 hex"),
    ("smoke-a-tag", ["smoke", "--target", "cpu", "--image", "x:latest"], 2, "digest"),
]


@pytest.mark.parametrize(("argv", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_one_error_line(bad, argv, code, says):
    args = [a.format(bad=bad) for a in argv]
    proc = subprocess.run([sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, cwd=REPO)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == code, proc.stderr[-500:]
    assert len(errors) == 1 and says in errors[0], proc.stderr[-500:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert not (bad / "afile.d").exists() and (bad / "afile").read_text() == "x"  # nothing written
