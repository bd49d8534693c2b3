"""README.md's target list (at the top) and target table, generated from the matrix and the
committed locks between markers, and drift-checked by `render --check` like the Dockerfiles: a new
target, a version bump or a refusal shows in the README without a hand edit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xcforge import generated
from xcforge.config.matrix import Matrix, Target
from xcforge.docgen.doc_tables import replace_section
from xcforge.lock import locks
from xcforge.render import dockerfile
from xcforge.render.dockerfile import engine_title

BEGIN = "<!-- BEGIN GENERATED: python build.py render (edit matrix.yaml, not this table) -->"
LIST_BEGIN = "<!-- BEGIN GENERATED: python build.py render (edit matrix.yaml, not this list) -->"
END = "<!-- END GENERATED -->"


def _engine(matrix: Matrix, target: Target) -> str:
    package = target.engine.package
    packager = target.engine.packager
    built_by = f", built by {packager.name}{'' if packager.official else ' (third party)'}" if packager else ""
    shown = f" ({package}{built_by})" if target.engine.is_vllm and package != "vllm" else ""
    text = engine_title(matrix, target) + shown
    if target.plugin:
        text += f" + {target.plugin.name} {target.plugin.version}"
    return text


def _wheelhouse_note(entry: dict[str, Any]) -> str:
    """`torch 2.13.0+cpu from the wheelhouse /opt/wheels; torchvision/… omitted: only on URL`."""
    taken = ", ".join(str(pin).replace("==", " ") for pin in entry.get("from_wheelhouse", []))
    note = f"{taken} from the wheelhouse {entry['wheelhouse']}"
    if entry.get("omitted"):
        note += f"; {'/'.join(entry['omitted'])} omitted: only on {', '.join(entry.get('stands_in_for', []))}"
    return note


def _locks(matrix: Matrix, target: Target) -> str:
    """Per platform, the committed lock's status for the vendor's Python (`deps`)."""
    if target.refused:
        return f"**refused**: {target.refused}"
    if target.vendor_image:
        count = len(dockerfile.vendor_assertions(matrix, target))
        return f"vendor image: its own set, {count} packages asserted at build time (no lock)"
    parts = []
    for platform in target.platforms:
        entry = locks.set_status(matrix, target, platform) if target.engine.is_vllm else None
        if target.engine.is_vllm:
            status = entry.get("status", "missing") if entry else "missing"
            needs = f" (needs {', '.join(entry['needs'])})" if entry and entry.get("needs") else ""
            if status == "unverified" and needs:
                needs = needs[:-1] + "; resolved at build time, versions may float)"
            if entry and entry.get("wheelhouse"):
                needs = f" ({_wheelhouse_note(entry)})"
        else:
            status, needs = ("locked" if locks.engine_sdist_pin(matrix, target) else "missing"), ""
        parts.append(f"{platform.split('/', 1)[1]}: {status}{needs}")
    fallback = target.engine.fallback
    if fallback:
        for platform in fallback.platforms:
            entry = locks.set_status(matrix, target, platform, fallback=True) or {}
            status = entry.get("status", "missing")
            parts.append(f"{platform.split('/', 1)[1]} fallback {fallback.version} (PyPI only): {status}")
    return "; ".join(parts)


def table(matrix: Matrix) -> str:
    rows = [
        "| target | hardware | platforms | base | engine | locks |",
        "|---|---|---|---|---|---|",
    ]
    for t in matrix.targets.values():
        base = f"`{t.base.image}`" + (" (the vendor's vLLM image)" if t.vendor_image else "")
        cells = [f"`{t.name}`", t.hardware, ", ".join(t.platforms), base, _engine(matrix, t)]
        rows.append("| " + " | ".join([*cells, _locks(matrix, t)]) + " |")
    return "\n".join(rows)


def target_list(matrix: Matrix) -> str:
    """One line per target for the README's opening: what it runs on and what it serves."""
    lines = []
    for t in matrix.targets.values():
        refused = " (refused for now: see [the matrix](#the-matrix))" if t.refused else ""
        mode = " (the vendor's image, its stack asserted)" if t.vendor_image else ""
        lines.append(f"- `{t.name}` — {t.description}: {_engine(matrix, t)}{mode}{refused}")
    return "\n".join(lines)


def write_or_check(matrix: Matrix, check: bool, path: Path | None = None) -> list[generated.Generated]:
    """README's generated sections, written or checked; nothing for a project without a README (a
    test's copy of the matrix and templates)."""
    path = path or matrix.root / "README.md"
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    new = text
    for begin, body in ((LIST_BEGIN, target_list), (BEGIN, table)):
        replaced = replace_section(new, begin, body(matrix), END)
        # A project without a README section (a test's copy) has nothing there to keep.
        new = new if replaced is None else replaced
    if new == text:
        return [generated.Generated(path, "unchanged")]
    return [generated.write_or_check(path, new, check=check)]
