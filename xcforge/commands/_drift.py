"""Reporting generated files (Dockerfiles, workflows, operator examples) that drifted from matrix.yaml."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from xcforge.errors import RenderError
from xcforge.generated import Generated


def report_drift(results: Iterable[Generated], *, what: str, fix: str, root: Path | None = None) -> int:
    """Print one line per file; raise RenderError (exit 4) naming the stale ones and the fix."""
    results = list(results)
    for result in results:
        shown = result.path
        if root is not None and result.path.is_relative_to(root):
            shown = result.path.relative_to(root)
        print(f"{result.status:9} {shown}")
    bad = [r for r in results if r.status in {"stale", "missing"}]
    if bad:
        names = ", ".join(r.path.name if r.path.name != "Dockerfile" else str(r.path.parent.name) for r in bad)
        raise RenderError(f"{what} are out of date with matrix.yaml ({names}); run `{fix}` and commit")
    return 0
