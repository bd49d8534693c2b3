"""signing's lazy public names: each loads from the module _EXPORTS names, and the type checker's
copy of the list (the `if TYPE_CHECKING:` imports in signing/__init__.py) names the same ones."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import signing

INIT = Path(signing.__file__)


def _type_checking_imports() -> dict[str, str]:
    """name → module of the `from M import N as N` lines under `if TYPE_CHECKING:`."""
    found: dict[str, str] = {}
    for node in ast.parse(INIT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names:
                    assert alias.asname == alias.name, f"{alias.name}: `X as X`, an explicit re-export"
                    found[alias.name] = statement.module
    return found


def test_the_type_checkers_names_are_the_lazy_ones():
    assert _type_checking_imports() == signing._EXPORTS


@pytest.mark.parametrize("name", sorted(signing._EXPORTS))
def test_each_lazy_name_is_its_modules_object(name: str):
    assert getattr(signing, name) is getattr(importlib.import_module(signing._EXPORTS[name]), name)


def test_no_lazy_name_is_also_a_submodule():
    """A submodule, once imported, is the package's attribute of that name: the lazy name would be
    the function on first use and the module after (it was so for `signing.promote`)."""
    submodules = {path.stem for path in INIT.parent.glob("*.py")}
    assert submodules & set(signing._EXPORTS) == set()


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        signing.no_such_name  # type: ignore[attr-defined]  # noqa: B018 - the lookup is the test
