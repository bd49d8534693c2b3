"""--audit-log / --no-audit, which every signing command (`keygen`, `sign`, `verify`, `promote`,
`bundle`, `import`, `model`) shares, declared once; and the log they name, checked before use."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from xcforge.commands._paths import check_directory
from xcforge.errors import ConfigError
from xcforge.sign.audit_log import AUDIT_ENV

if TYPE_CHECKING:
    from signing.audit import AuditLog


def add_audit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--audit-log",
        type=Path,
        default=Path(os.environ.get(AUDIT_ENV, "dist/audit.log.jsonl")),
        help=f"append-only audit log (default dist/audit.log.jsonl or ${AUDIT_ENV})",
    )
    parser.add_argument("--no-audit", action="store_true", help="do not write the audit log")


def open_audit(args: argparse.Namespace) -> AuditLog | None:
    """The audit log the command appends to, checked before the command does anything else."""
    from signing.audit import AuditLog

    if args.no_audit:
        return None
    path = args.audit_log
    if path.is_dir():
        raise ConfigError(f"--audit-log {path} (or ${AUDIT_ENV}): is a directory; give the log file's path")
    check_directory(path.parent, f"--audit-log {path} (or ${AUDIT_ENV}): its directory")
    return AuditLog(path)


__all__ = ["AUDIT_ENV", "add_audit", "open_audit"]
