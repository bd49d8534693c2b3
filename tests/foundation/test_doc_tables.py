"""Doc sections generated from the code (xcforge/docgen/doc_tables.py, readme_table.py): every
backend module and every target has its row, and `render --check` sees a hand edit or a new module."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from xcforge.config.matrix import engine_backends, load_matrix
from xcforge.docgen import doc_tables, readme_table

REPO = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "matrix.yaml")


def test_the_backend_table_has_one_row_per_backend_module():
    backends = doc_tables.engine_backends(REPO)
    assert {b["name"] for b in backends} == set(engine_backends())
    table = doc_tables.backends_table(MATRIX, backends)
    for name in engine_backends():
        assert f"| `{name}` |" in table
    # Each target is listed under the backend it names.
    for t in MATRIX.targets.values():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{t.backend}` |"))
        assert f"`{t.name}`" in row.rsplit("|", 2)[1]


def test_the_readme_lists_every_target():
    listed = readme_table.target_list(MATRIX)
    assert [line.split("`")[1] for line in listed.splitlines()] == list(MATRIX.targets)
    assert listed in (REPO / "README.md").read_text(encoding="utf-8")


def _project(tmp_path: Path) -> Path:
    shutil.copy(REPO / "matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copytree(REPO / "templates", tmp_path / "templates")
    shutil.copytree(REPO / "images" / "engine" / "src", tmp_path / "images" / "engine" / "src")
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs" / "engine.md", tmp_path / "docs" / "engine.md")
    return tmp_path


def test_render_check_sees_a_hand_edit_and_a_new_backend_module(tmp_path):
    root = _project(tmp_path)
    matrix = load_matrix(root / "matrix.yaml")
    assert [r.status for r in doc_tables.write_or_check(matrix, check=True)] == ["unchanged"]

    doc = root / "docs" / "engine.md"
    committed = doc.read_text(encoding="utf-8")
    doc.write_text(committed.replace("| `cuda` | NVIDIA CUDA |", "| `cuda` | NVIDIA |"), encoding="utf-8")
    assert [r.status for r in doc_tables.write_or_check(matrix, check=True)] == ["stale"]
    doc.write_text(committed, encoding="utf-8")

    # A new accelerator's module: its row appears without a hand edit of the doc.
    backends = root / "images" / "engine" / "src" / "xcforge_engine" / "backends"
    module = (backends / "musa.py").read_text(encoding="utf-8")
    (backends / "newhw.py").write_text(
        module.replace('name = "musa"', 'name = "newhw"').replace("Moore Threads MUSA", "New Hardware"),
        encoding="utf-8",
    )
    assert [r.status for r in doc_tables.write_or_check(matrix, check=True)] == ["stale"]
    assert [r.status for r in doc_tables.write_or_check(matrix, check=False)] == ["written"]
    assert "| `newhw` | New Hardware |" in doc.read_text(encoding="utf-8")


def test_a_doc_without_the_markers_is_left_alone(tmp_path):
    root = _project(tmp_path)
    (root / "docs" / "engine.md").write_text("# engine\n", encoding="utf-8")
    matrix = load_matrix(root / "matrix.yaml")
    assert [r.status for r in doc_tables.write_or_check(matrix, check=True)] == ["unchanged"]


def test_a_project_without_the_docs_renders_without_them(tmp_path):
    # A test's copy of matrix.yaml and templates/ (no README.md, no docs/): render --all still works.
    root = _project(tmp_path)
    (root / "README.md").unlink(missing_ok=True)
    shutil.rmtree(root / "docs", ignore_errors=True)
    matrix = load_matrix(root / "matrix.yaml")
    assert readme_table.write_or_check(matrix, check=False) == []
    assert doc_tables.write_or_check(matrix, check=False) == []


def test_the_package_description_names_no_target():
    """pyproject.toml's description is not a second, hand-kept list of the accelerator targets
    (those whose backend probes for a device): it goes stale with every new one."""
    description = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["description"]
    probed = {b["name"] for b in doc_tables.engine_backends(REPO) if b["probe"]}
    words = set(description.lower().replace(",", " ").replace("(", " ").replace(")", " ").split())
    accelerators = {t.name for t in MATRIX.targets.values() if t.backend in probed}
    assert accelerators and not accelerators & words
