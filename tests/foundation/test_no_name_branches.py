"""Nothing in xcforge/ branches on a target's or a backend's name (docs/architecture.md, "Where
variation lives"): a target is data, so `target.name == "cpu"` or `t.backend == "ascend"` in code is
a ladder that the next target would have to extend. Read from the sources with ast.

A comparison of a `.name` or `.backend` attribute with a string literal fails, wherever it is
written (==, !=, in, not in a tuple of literals). Grouping targets by a backend read from data
(`t.backend == b["name"]`) compares two values, not a literal, and stays allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMED = {"name", "backend"}


def _literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [v for elt in node.elts for v in _literals(elt)]
    return []


def _target_like(node: ast.expr) -> bool:
    """`target.backend`, `t.name`, `subject.target.backend`: an attribute read off a target."""
    if not (isinstance(node, ast.Attribute) and node.attr in NAMED):
        return False
    owner = node.value
    spelled = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
    return spelled in {"t", "target", "tgt"} or spelled.endswith("target")


def name_branches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_target_like(s) for s in sides) and any(_literals(s) for s in sides):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_in_xcforge_branches_on_a_target_or_backend_name() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} {hit}"
        for path in sorted((ROOT / "xcforge").rglob("*.py"))
        for hit in name_branches(path.read_text())
    ]
    assert not offenders, "move the difference into matrix.yaml (a field the code reads):\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source",
    [
        'env = {} if subject.target.backend == "cpu" else {}',
        'if target.name in ("mlu", "musa"): pass',
        'if "ascend" != t.backend: pass',
    ],
)
def test_a_name_branch_is_caught(source: str) -> None:
    assert name_branches(source)


def test_grouping_by_a_backend_read_from_data_is_not_a_branch() -> None:
    assert not name_branches('targets = [t for t in ts if t.backend == b["name"]]')
