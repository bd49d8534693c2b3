"""YAML with line numbers and without silent surprises.

PyYAML keeps the last of two equal keys without a word and forgets where values came from. Config
files (matrix.yaml, site files) are read through here instead: a duplicate key is an error naming
both lines, and every mapping key and list item is mapped to its line so errors can say
`matrix.yaml:42: targets.ascend.platforms[0]: ...`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from xcforge.errors import ConfigError

Loc = tuple[str | int, ...]  # a place in a document: its keys and list indexes, from the top
Lines = dict[Loc, int]


# A config file is small: bounds that no real one comes near, so that an alias bomb ("billion
# laughs"), a self-referencing alias or absurd nesting fails fast with one line instead of eating
# memory or the stack.
MAX_DEPTH = 64
TOO_DEEP_REMEDY = (
    "a config file is a few levels deep: look for brackets that never close or an alias that includes "
    "itself, and write the value out flat"
)
MAX_NODES = 100_000
# No config value (a name, version, path, URL or one line of text) comes near this; it also stays
# below Python's limit on digits in an int (4300), which a long number would otherwise hit.
MAX_SCALAR = 4096


def _shown(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


def _check_shape(root: yaml.Node, path: Path) -> None:
    """Depth and size with aliases expanded, iteratively; a cycle is an error of its own."""
    stack: list[tuple[yaml.Node, int, frozenset[int]]] = [(root, 1, frozenset())]
    visited = 0
    while stack:
        node, depth, ancestors = stack.pop()
        visited += 1
        line = node.start_mark.line + 1
        if id(node) in ancestors:
            raise ConfigError(f"{path}:{line}: an alias refers to a node that contains it; remove the recursive alias")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path}:{line}: nested more than {MAX_DEPTH} levels deep; {TOO_DEEP_REMEDY}")
        if visited > MAX_NODES:
            raise ConfigError(
                f"{path}: more than {MAX_NODES} values once aliases are expanded (an alias bomb?); write it out plainly"
            )
        children = []
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        inner = ancestors | {id(node)}
        stack.extend((child, depth + 1, inner) for child in children)


# libyaml's parser where PyYAML was built with it (every wheel on PyPI is): the same documents and
# errors, five times faster than the pure-Python one (matrix.yaml: 0.1 s of every command).
if TYPE_CHECKING:  # checked against the C loader's interface; the pure-Python one has the same
    _BaseLoader = yaml.CSafeLoader
else:
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):
    """SafeLoader whose constructors fail as YAML errors with a line (`!!int abc`, `2024-13-45`)."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            kind = node.tag.rsplit(":", 1)[-1]
            value = _shown(node.value) if isinstance(node.value, str) else "the value"
            detail = f" ({exc})" if isinstance(exc, ValueError | OverflowError) else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"{value} is not a valid {kind}{detail}; quote it to keep it a string", node.start_mark
            ) from None


def _too_deep(path: Path) -> ConfigError:
    return ConfigError(f"{path}: nested more than {MAX_DEPTH} levels deep; {TOO_DEEP_REMEDY}")


def _yaml_remedy(text: str, mark: Any) -> str:
    """What to do about a YAML syntax error: a tab is the usual one (YAML indents with spaces only)."""
    if mark is not None:
        lines = text.splitlines()
        line = lines[mark.line] if mark.line < len(lines) else ""
        if "\t" in line[: mark.column + 1]:
            return f"YAML indents with spaces, never tabs: replace the tab on line {mark.line + 1} with spaces"
    return "fix the YAML there (an unclosed quote or bracket, a missing ':' or wrong indentation)"


def load_yaml(text: str, path: Path) -> tuple[Any, Lines]:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()  # parsed once: the checks below walk the nodes, then values are built
        lines: Lines = {}
        data = None
        if root is not None:
            _check_shape(root, path)
            _walk(root, (), lines, path)  # before values are constructed: duplicate keys, oversized values
            data = loader.construct_document(root)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f": line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "maximum nesting depth" in problem:  # libyaml's own bound, far above ours
            raise _too_deep(path) from None
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}; {_yaml_remedy(text, mark)}") from None
    except RecursionError:
        raise _too_deep(path) from None
    finally:
        loader.dispose()
    return data, lines


def _walk(node: yaml.Node, here: Loc, lines: Lines, path: Path) -> None:
    lines.setdefault(here, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":
                dotted = ".".join(str(p) for p in (*here, key))
                raise ConfigError(
                    f"{path}:{line}: {dotted}: duplicate key (first on line {seen[key]}); YAML would silently keep "
                    "the last one: remove one of them"
                )
            seen[key] = line
            lines[(*here, key)] = line
            _walk(value_node, (*here, key), lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*here, index)] = item.start_mark.line + 1
            _walk(item, (*here, index), lines, path)
    elif isinstance(node, yaml.ScalarNode) and len(node.value) > MAX_SCALAR:
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in here).lstrip(".") or "the document"
        raise ConfigError(
            f"{path}:{node.start_mark.line + 1}: {dotted}: a value of {len(node.value)} characters; no config "
            f"value needs more than {MAX_SCALAR}: shorten it"
        )


def line_of(lines: Lines | None, location: Loc) -> int | None:
    """The line of the deepest part of `location` that exists in the file."""
    if not lines:
        return None
    for end in range(len(location), -1, -1):
        if location[:end] in lines:
            return lines[location[:end]]
    return None
