"""Toolkit-in-the-image versus driver-on-the-host, judged from the packaged data/compat.json.

The table is indicative (see its "about"): it catches the frequent failure, an image whose CANN or
CUDA is newer than the host's driver, with a sentence that names both versions and both ways out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading numeric components: `24.1.rc2` → (24, 1), `8.0.RC3` → (8, 0), `550.54.15` → (550, 54, 15)."""
    parts: list[int] = []
    for piece in re.split(r"[.\-]", text.strip()):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def _at_least(have: tuple[int, ...], want: tuple[int, ...]) -> bool:
    width = max(len(have), len(want))
    return have + (0,) * (width - len(have)) >= want + (0,) * (width - len(want))


@dataclass(frozen=True)
class Verdict:
    status: str  # ok | warning | error
    message: str
    remedy: str = ""


@cache
def _table() -> dict[str, Any]:
    text = resources.files("xcforge_engine").joinpath("data/compat.json").read_text(encoding="utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def _row(rows: list[dict[str, str]], key: str, toolkit: tuple[int, ...]) -> dict[str, str] | None:
    """The row for toolkit's major.minor, or the newest row older than it."""
    best = None
    for row in rows:
        if version_tuple(row[key])[:2] <= toolkit[:2]:
            best = row
    return best


def _judge(kind: str, key: str, toolkit: str, driver: str, driver_name: str) -> Verdict:
    rows: list[dict[str, str]] = _table()[f"{key}_driver"]
    have_toolkit, have_driver = version_tuple(toolkit), version_tuple(driver)
    if len(have_toolkit) < 2 or not have_driver:
        return Verdict("warning", f"cannot compare {kind} {toolkit!r} with {driver_name} {driver!r}")
    row = _row(rows, key, have_toolkit)
    if row is None:
        return Verdict("warning", f"{kind} {toolkit} is older than the compatibility table (indicative) knows")
    minimum, recommended = row["min_driver"], row["recommended_driver"]
    if not _at_least(have_driver, version_tuple(minimum)):
        runnable = [r[key] for r in rows if _at_least(have_driver, version_tuple(r["min_driver"]))]
        fallback = f" or use an image built for {kind} ≤ {runnable[-1]}" if runnable else ""
        return Verdict(
            "error",
            f"{kind} {toolkit} in the image is newer than the host's {driver_name} {driver} (needs ≥ {minimum})",
            f"upgrade the host driver to ≥ {recommended}{fallback}",
        )
    if not _at_least(have_driver, version_tuple(recommended)):
        return Verdict(
            "warning",
            f"{kind} {toolkit} shipped with {driver_name} {recommended}; the host has {driver}, which "
            "the table (indicative) lists as the minimum line, not the tested one",
            f"upgrade the host driver to ≥ {recommended} if start-up or kernels fail",
        )
    return Verdict("ok", f"{kind} {toolkit} runs on the host's {driver_name} {driver}")


def judge_cann(cann: str, driver: str) -> Verdict:
    return _judge("CANN", "cann", cann, driver, "Ascend driver")


def judge_cuda(cuda: str, driver: str) -> Verdict:
    return _judge("CUDA", "cuda", cuda, driver, "NVIDIA driver")
