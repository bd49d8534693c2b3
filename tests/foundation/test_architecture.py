"""The folder layout is the flow, and the imports keep it so (read from the sources with ast).

config → lock → render → plan → attest → bake → publish → sign → smoke → report; a stage may import
an earlier one, never a later one; only cli.py and commands/ are the command line, and nothing below
them imports it; ocicore/ (the OCI core) imports neither xcforge nor signing; signing/ imports ocicore, never
xcforge. pipeline.py is the one module that knows the whole order.

An import is an import however it is written: `import a.b`, `from a import b` (b may be a
submodule), relative imports (`from . import x`, `from ..plan import y`), imports inside functions,
and `importlib.import_module` / `__import__` with a string literal. A dynamic import whose name is
not a literal cannot be read here, so those are listed (DYNAMIC_IMPORTS) and any new one fails.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ocicore", "signing", "xcforge")
STAGES = ["config", "lock", "render", "plan", "attest", "bake", "publish", "sign", "smoke", "report"]
# Used by every stage: not part of the order.
SHARED = {
    "xcforge.shell",
    "xcforge.paths",
    "xcforge.generated",
    "xcforge.console",
    "xcforge.errors",
    "xcforge.records",  # the typed records the stages hand on (imports nothing of the tree)
    "xcforge.__init__",
}
# They read the matrix and plan (model/: models as signed artifacts); no stage reads them.
OUTSIDE_THE_FLOW = {"ci", "deploy", "docgen", "model", "provision", "transfer"}
# Known edges that break the rule, each with the reason it stays for now; empty is the goal. An entry
# is (importing module, imported name); one that no longer occurs fails the test, so the list shrinks.
ALLOWED: dict[tuple[str, str], str] = {}
# Modules whose import_module calls take a computed name, and what they load: the names are not
# literals, so this test cannot check them; a new one must be looked at and added here.
DYNAMIC_IMPORTS = {
    "xcforge.cli": "the command modules of COMMAND_MODULES (xcforge.commands.*), the command line itself",
    "signing.__init__": "its own lazy public names (_EXPORTS: signing.* modules only)",
}
_IMPORT_FUNCTIONS = {"import_module", "__import__"}


def _package_of(module: str) -> str:
    """The package a module's relative imports start from: `a.b.__init__` and `a.b.c` are both in `a.b`."""
    return module.rpartition(".")[0]


def _resolve(module: str, level: int, name: str | None) -> str | None:
    """`from <level dots><name> import ...` in `module`, as an absolute name (None: above the top package)."""
    if level == 0:
        return name
    parts = _package_of(module).split(".")
    if level - 1 >= len(parts):
        return None
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _dynamic_import(module: str, call: ast.Call) -> tuple[list[str], bool]:
    """(the names an import_module/__import__ call imports, whether its name is a computed one)."""
    func = call.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in _IMPORT_FUNCTIONS or not call.args:
        return [], False
    name = _literal(call.args[0])
    if name is None:
        return [], True
    if called == "__import__":
        fromlist = (
            call.args[3] if len(call.args) > 3 else next((k.value for k in call.keywords if k.arg == "fromlist"), None)
        )
        items = fromlist.elts if isinstance(fromlist, ast.List | ast.Tuple) else []
        return [name] + [f"{name}.{item}" for item in map(_literal, items) if item], False
    if not name.startswith("."):
        return [name], False
    # import_module(".x", package): relative to `package`, a literal or this module's __package__/__name__.
    anchor = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "package"), None)
    if isinstance(anchor, ast.Name) and anchor.id in {"__package__", "__name__"}:
        # __name__ is the package itself only in an __init__; __package__ always is
        package = module if anchor.id == "__name__" and not module.endswith(".__init__") else _package_of(module)
    else:
        package = _literal(anchor)
    if package is None:
        return [], True
    level = len(name) - len(name.lstrip("."))
    resolved = _resolve(f"{package}.__init__", level, name[level:] or None)
    return ([resolved] if resolved else []), False


def imported_names(source: str, module: str) -> tuple[list[str], list[int]]:
    """What `source` (the module `module`; a package is `a.b.__init__`) imports, in the three packages:
    every module and `module.name` it names, anywhere in the file; and the lines of dynamic imports
    whose name is computed."""
    names: list[str] = []
    computed: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            if base:
                names += [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call):
            found, is_computed = _dynamic_import(module, node)
            names += found
            if is_computed:
                computed.append(node.lineno)
    return [n for n in names if n.split(".")[0] in PACKAGES], computed


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imports(package: str) -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        module = _module_name(path)
        out += [(module, name) for name in imported_names(path.read_text(encoding="utf-8"), module)[0]]
    return out


def _stage(module: str) -> str | None:
    """The stage (or other subpackage) a module of the tree is in; None for xcforge's top-level modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "xcforge" else None


def _target_stage(name: str) -> str | None:
    """The subpackage an imported name is in: `xcforge.sign` (the package itself) is in sign."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "xcforge" else None


def _within(name: str, module: str) -> bool:
    return name == module or name.startswith(f"{module}.")


def core_violations(edges: list[tuple[str, str]]) -> list[str]:
    """ocicore imports only ocicore; signing imports anything but xcforge."""
    wrong = []
    for module, name in edges:
        if module.startswith("ocicore.") and not name.startswith("ocicore"):
            wrong.append(f"{module} (the OCI core) imports {name}")
        if module.startswith("signing.") and name.split(".")[0] == "xcforge":
            wrong.append(f"{module} (signing) imports {name}")
    return wrong


def flow_violations(edges: list[tuple[str, str]]) -> list[str]:
    """Imports among xcforge's modules that run against the flow (see the module docstring)."""
    wrong = []
    for module, name in edges:
        source, target = _stage(module), _target_stage(name)
        shared = any(_within(name, s) for s in SHARED) or any(s.startswith(f"{name}.") for s in SHARED)
        if name.startswith(("xcforge.commands", "xcforge.cli")) and source not in (None, "commands"):
            wrong.append(f"{module} imports the command line ({name})")
        if name.startswith("xcforge.pipeline") and not module.startswith(("xcforge.commands", "xcforge.cli")):
            wrong.append(f"{module} imports the pipeline")
        later = source in STAGES and target in STAGES and STAGES.index(target) > STAGES.index(source)
        if later and not shared:
            wrong.append(f"{module} ({source}) imports {name} ({target}), a later stage")
        if source in STAGES and target in OUTSIDE_THE_FLOW and not shared:
            wrong.append(f"{module} ({source}) imports {name}, which is outside the build flow")
    return wrong


def test_the_packages_above_shared_modules_import_nothing():
    """Importing a shared module (xcforge.console) loads the packages above it (xcforge/__init__.py),
    so those count as shared too: sound only while their __init__ imports nothing of the tree."""
    above = {s.rsplit(".", i)[0] for s in SHARED for i in range(1, s.count("."))}
    found = {
        package: names
        for package in sorted(above)
        if (
            names := imported_names(
                (ROOT / package.replace(".", "/") / "__init__.py").read_text(), f"{package}.__init__"
            )[0]
        )
    }
    assert found == {}


def _not_allowed(edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [edge for edge in edges if edge not in ALLOWED]


def test_ocicore_and_signing_do_not_import_xcforge():
    assert core_violations(_not_allowed(_imports("ocicore") + _imports("signing"))) == []


def test_no_stage_imports_a_later_stage_or_the_command_line():
    assert flow_violations(_not_allowed(_imports("xcforge"))) == []


def test_the_allow_list_names_only_edges_that_still_break_the_rule():
    edges = set(_imports("ocicore") + _imports("signing") + _imports("xcforge"))
    stale = [edge for edge in ALLOWED if edge not in edges or not (core_violations([edge]) + flow_violations([edge]))]
    assert stale == [], "remove these from ALLOWED: they no longer occur or no longer break the rule"


def test_every_dynamic_import_with_a_computed_name_is_known():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = imported_names(path.read_text(encoding="utf-8"), _module_name(path))[1]
            if lines:
                found[_module_name(path)] = lines
    assert sorted(found) == sorted(DYNAMIC_IMPORTS), f"import_module with a computed name: {found}"


# A stage importing a later one, written every way Python allows: each must be caught.
FORBIDDEN_FORMS = {
    "import": "import xcforge.sign.signer",
    "import as": "import xcforge.sign.signer as s",
    "from package import module": "from xcforge.sign import signer",
    "from top import subpackage": "from xcforge import sign",
    "from top import subpackage as": "from xcforge import sign as s",
    "relative from parent": "from ..sign import signer",
    "relative parent itself": "from .. import sign",
    "relative dotted": "from ..sign.signer import sign_results",
    "relative star": "from ..sign.signer import *",
    "lazy, in a function": "def f():\n    from xcforge.sign import signer\n    return signer",
    "lazy, in a method": "class C:\n    def m(self):\n        import xcforge.sign\n",
    "under if": "import sys\nif sys.platform:\n    from ..sign import signer\n",
    "importlib.import_module": 'import importlib\nimportlib.import_module("xcforge.sign.signer")',
    "import_module": 'from importlib import import_module\nimport_module("xcforge.sign")',
    "import_module relative, literal package": 'import importlib\nimportlib.import_module(".signer", "xcforge.sign")',
    "import_module relative, package=": 'import importlib\nimportlib.import_module("..sign", package=__package__)',
    "import_module lazy": 'def f():\n    import importlib\n    return importlib.import_module("xcforge.sign")',
    "__import__": '__import__("xcforge.sign.signer")',
    "__import__ fromlist": '__import__("xcforge", fromlist=["sign"])',
    "builtins.__import__": 'import builtins\nbuiltins.__import__("xcforge.sign")',
}


@pytest.mark.parametrize("module", ["xcforge.plan.build_plan", "xcforge.plan.__init__"])
@pytest.mark.parametrize("form", FORBIDDEN_FORMS)
def test_a_later_stage_is_caught_however_it_is_imported(form, module):
    names, computed = imported_names(textwrap.dedent(FORBIDDEN_FORMS[form]), module)
    wrong = flow_violations([(module, name) for name in names])
    assert wrong and all("(sign), a later stage" in w for w in wrong), (names, wrong)
    assert computed == []


@pytest.mark.parametrize(
    "source",
    [
        "from xcforge import config",
        "import xcforge.config.matrix",
        'import importlib\nimportlib.import_module("xcforge")',
        "def f():\n    from signing import sign\n    from xcforge.plan import build_plan\n",
    ],
)
def test_the_core_importing_xcforge_is_caught_however_it_is_written(source):
    module = "ocicore.layout"
    wrong = core_violations([(module, name) for name in imported_names(textwrap.dedent(source), module)[0]])
    assert wrong and all("(the OCI core) imports" in w for w in wrong)
    assert core_violations([("signing.sign", name) for name in imported_names(source, "signing.sign")[0]])


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from . import verification", "xcforge.plan.build_plan", {"xcforge.plan", "xcforge.plan.verification"}),
        ("from . import verification", "xcforge.plan.__init__", {"xcforge.plan", "xcforge.plan.verification"}),
        (
            "from .verification import planned",
            "xcforge.plan.x",
            {"xcforge.plan.verification", "xcforge.plan.verification.planned"},
        ),
        (
            "from ..config.matrix import Target",
            "xcforge.sign.signer",
            {"xcforge.config.matrix", "xcforge.config.matrix.Target"},
        ),
        ("from ... import x", "xcforge.plan.x", set()),  # above the top package: an ImportError, not an edge
        ("import os\nfrom pathlib import Path", "xcforge.plan.x", set()),  # outside the three packages
        ('importlib.import_module(".store", __name__)', "signing.__init__", {"signing.store"}),
        ('importlib.import_module(".store", __package__)', "signing.sign", {"signing.store"}),
    ],
)
def test_relative_and_dynamic_names_resolve_against_the_importing_package(source, module, expected):
    assert set(imported_names(source, module)[0]) == expected


def test_earlier_stages_and_shared_modules_are_allowed_however_imported():
    sources = [
        "from ..plan import build_plan",
        "from xcforge import plan",
        "from .. import paths",
        "from xcforge import generated",
    ]
    for source in sources:
        names = imported_names(source, "xcforge.sign.signer")[0]
        assert names and flow_violations([("xcforge.sign.signer", n) for n in names]) == [], source


def test_a_computed_dynamic_import_is_reported():
    source = "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n"
    assert imported_names(source, "xcforge.plan.x") == ([], [4])


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_is_a_subpackage_with_a_docstring(stage):
    init = ROOT / "xcforge" / stage / "__init__.py"
    assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), f"xcforge/{stage}/ says what it is"


def test_the_pipeline_runs_the_stages_in_order():
    source = (ROOT / "xcforge" / "pipeline.py").read_text()
    calls = [
        "build_all(",
        "push_results(",
        "publish_results(",
        "record_builds(",
        "sign_results(",
        "smoke_results(",
        "write_reports(",
    ]
    positions = [source.index(call, source.index("def run_builds")) for call in calls]
    assert positions == sorted(positions)


def test_the_three_packages_carry_the_version_pyproject_gives() -> None:
    import tomllib

    import ocicore
    import xcforge

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert ocicore.__version__ == xcforge.__version__ == declared


def test_the_pipeline_builds_the_report_once_at_the_end():
    source = (ROOT / "xcforge" / "pipeline.py").read_text()
    body = source[source.index("def run_builds") : source.index("def merge_and_report")]
    assert body.count("with_outcomes(") == 1
    assert body.index("with_outcomes(") > body.index("smoke_results(")


def test_the_records_between_stages_are_frozen_and_typed():
    from dataclasses import FrozenInstanceError, fields

    from xcforge import records
    from xcforge.bake.result import BuildResult, PlatformResult

    assert imported_names((ROOT / "xcforge" / "records.py").read_text(), "xcforge.records")[0] == []
    result = BuildResult("cpu", "built", [PlatformResult("linux/amd64")], "r/x")
    with pytest.raises(FrozenInstanceError):
        result.status = "failed"  # type: ignore[misc]
    for f in fields(BuildResult):
        assert "dict[" not in str(f.type) and "list[" not in str(f.type), f"BuildResult.{f.name}: {f.type}"
    kinds = [records.SignatureRecord, records.VariantRecord, records.AttestationRecord, records.SmokeCheck]
    assert all(kind.__dataclass_params__.frozen for kind in [*kinds, records.VerificationRecord])  # type: ignore[attr-defined]


def test_publish_sign_and_smoke_return_outcomes_instead_of_changing_build_records():
    from dataclasses import fields

    from xcforge.bake.result import BuildResult

    names = {f.name for f in fields(BuildResult)}
    found = []
    for stage in ("publish", "sign", "smoke"):
        for path in sorted((ROOT / "xcforge" / stage).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AugAssign)
                    else []
                )
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr in names:
                        found.append(f"{path.name}:{node.lineno} sets .{target.attr}")
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"append", "extend", "update"}
                    and isinstance(node.func.value, ast.Attribute)
                    and node.func.value.attr in names
                ):
                    found.append(f"{path.name}:{node.lineno} changes .{node.func.value.attr}")
    assert not found, found


# --------------------------------------------------------------------------- images/engine (issue 33)
# The engine package every image installs (stdlib only) keeps the same discipline: no import cycle,
# however an import is written (a function-level import or a module __getattr__ only hides one),
# and no private name (`_x`) imported from another module. Imports under `if TYPE_CHECKING:` do not
# run, so they cannot make a cycle.

ENGINE = ROOT / "images" / "engine" / "src"
ENGINE_PACKAGE = "xcforge_engine"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node that runs (module level or in a function), less `if TYPE_CHECKING:` bodies."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node) and child in node.body:
                continue
            stack.append(child)
    return out


def engine_imports(sources: dict[str, str]) -> tuple[dict[str, set[str]], list[str]]:
    """(module → the engine modules it imports when it runs, private names imported across modules)
    for `sources` (module name → text; a package is `a.b.__init__`)."""
    modules = set(sources)

    def as_module(name: str) -> str | None:
        for candidate in (name, f"{name}.__init__"):
            if candidate in modules:
                return candidate
        return None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for module, source in sources.items():
        own_packages = {module.rsplit(".", i)[0] + ".__init__" for i in range(1, module.count(".") + 1)}
        for node in _runtime_nodes(ast.parse(source)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node.level, node.module)
                if not base or base.split(".")[0] != ENGINE_PACKAGE:
                    continue
                names = [base]
                for alias in node.names:
                    submodule = as_module(f"{base}.{alias.name}")
                    if submodule:
                        names.append(f"{base}.{alias.name}")
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append(f"{module} imports {alias.name} from {base}")
            elif isinstance(node, ast.Call):
                names = _dynamic_import(module, node)[0]
            for name in names:
                target = as_module(name)
                if target is None or target == module:
                    continue
                # Importing a.b.c runs a/b/__init__ first, unless it is already running (our own).
                parts = target.removesuffix(".__init__").split(".")
                parents = {".".join(parts[:i]) + ".__init__" for i in range(2, len(parts))}
                graph[module] |= {target, *(parents & modules)} - own_packages - {module}
    return graph, private


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def _engine_sources() -> dict[str, str]:
    return {
        ".".join(path.relative_to(ENGINE).with_suffix("").parts): path.read_text(encoding="utf-8")
        for path in sorted((ENGINE / ENGINE_PACKAGE).rglob("*.py"))
    }


def test_the_engine_has_no_import_cycle():
    sources = _engine_sources()
    assert len(sources) > 20 and "xcforge_engine.backends.__init__" in sources
    graph, _ = engine_imports(sources)
    assert import_cycles(graph) == []


def test_the_engine_imports_no_private_name_from_another_module():
    assert engine_imports(_engine_sources())[1] == []


def test_the_engine_checks_catch_what_they_are_for():
    sources = {
        "xcforge_engine.__init__": "",
        "xcforge_engine.pkg.__init__": "from xcforge_engine.pkg.base import Base\n",
        "xcforge_engine.pkg.base": "from xcforge_engine.presets import Preset\n",
        "xcforge_engine.presets": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from xcforge_engine.isa import Isa\n"
            "def names():\n    from xcforge_engine.pkg import ALL\n    return ALL\n"
        ),
        "xcforge_engine.isa": "from xcforge_engine.cpuinfo import CpuInfo\n",
        "xcforge_engine.cpuinfo": "def read():\n    from xcforge_engine.isa import _auxv\n",
    }
    graph, private = engine_imports(sources)
    assert import_cycles(graph) == [
        ["xcforge_engine.cpuinfo", "xcforge_engine.isa"],
        ["xcforge_engine.pkg.__init__", "xcforge_engine.pkg.base", "xcforge_engine.presets"],
    ]
    assert private == ["xcforge_engine.cpuinfo imports _auxv from xcforge_engine.isa"]
    # A type-only import runs nothing: no cycle through it.
    assert "xcforge_engine.isa" not in graph["xcforge_engine.presets"]
