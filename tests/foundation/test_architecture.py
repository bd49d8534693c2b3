"""The folder layout is the flow, and the imports keep it so (read from the sources with ast).

config → plan → attest → build → sign → smoke → report; a stage may import an earlier one,
never a later one; only cli.py and commands/ are the command line, and nothing below them imports
it; ocicore/ (the OCI core) imports neither xcforge nor signing; signing/ imports ocicore, never
xcforge. pipeline.py is the one module that knows the whole order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["config", "plan", "attest", "build", "sign", "smoke", "report"]
# Used by every stage: not part of the order.
SHARED = {"xcforge.shell", "xcforge.paths", "xcforge.generated", "xcforge.ci.actions", "xcforge.__init__"}
OUTSIDE_THE_FLOW = {"ci", "deploy", "provision"}  # they read the matrix and plan; no stage reads them


def _imports(package: str) -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                out += [(module, name) for name in names]
            elif isinstance(node, ast.Import):
                out += [(module, a.name) for a in node.names]
    return [(m, n) for m, n in out if n.split(".")[0] in {"ocicore", "signing", "xcforge"}]


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "xcforge" else None


def test_ocicore_and_signing_do_not_import_xcforge():
    assert [(m, n) for m, n in _imports("ocicore") if not n.startswith("ocicore")] == []
    assert [(m, n) for m, n in _imports("signing") if n.startswith("xcforge")] == []


def test_no_stage_imports_a_later_stage_or_the_command_line():
    wrong = []
    for module, name in _imports("xcforge"):
        source, target = _stage(module), _stage(name)
        if name.startswith(("xcforge.commands", "xcforge.cli")) and source not in (None, "commands"):
            wrong.append(f"{module} imports the command line ({name})")
        if name.startswith("xcforge.pipeline") and not module.startswith(("xcforge.commands", "xcforge.cli")):
            wrong.append(f"{module} imports the pipeline")
        later = source in STAGES and target in STAGES and STAGES.index(target) > STAGES.index(source)
        if later and not any(name.startswith(s) for s in SHARED):
            wrong.append(f"{module} ({source}) imports {name} ({target}), a later stage")
        if source in STAGES and target in OUTSIDE_THE_FLOW and not any(name.startswith(s) for s in SHARED):
            wrong.append(f"{module} ({source}) imports {name}, which is outside the build flow")
    assert wrong == []


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_is_a_subpackage_with_a_docstring(stage):
    init = ROOT / "xcforge" / stage / "__init__.py"
    assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), f"xcforge/{stage}/ says what it is"


def test_the_pipeline_runs_the_stages_in_order():
    source = (ROOT / "xcforge" / "pipeline.py").read_text()
    calls = ["build_all(", "record_builds(", "sign_results(", "smoke_results(", "write_reports("]
    positions = [source.index(call, source.index("def run_builds")) for call in calls]
    assert positions == sorted(positions)


def test_the_three_packages_carry_the_version_pyproject_gives() -> None:
    import tomllib

    import ocicore
    import xcforge

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert ocicore.__version__ == xcforge.__version__ == declared


def test_sign_and_smoke_return_outcomes_instead_of_changing_build_records():
    from dataclasses import fields

    from xcforge.build.result import BuildResult

    names = {f.name for f in fields(BuildResult)}
    found = []
    for stage in ("sign", "smoke"):
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
