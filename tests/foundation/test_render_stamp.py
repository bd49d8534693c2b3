"""The build's drift check (bake.contexts.check_rendered) and the stamp that lets it skip re-rendering:
skipped only while every input and committed output is byte for byte what the last passing check
saw; any change to either is rendered and compared in full."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xcforge.bake.contexts import check_rendered
from xcforge.config.matrix import load_matrix
from xcforge.config.site import SiteConfig
from xcforge.errors import RenderError
from xcforge.plan.build_plan import BuildOptions, make_plan
from xcforge.render import inputs

REPO = Path(__file__).resolve().parents[2]


def _check(root: Path, cache: Path) -> None:
    matrix = load_matrix(root / "matrix.yaml")
    site = SiteConfig(skip_engine_install=("mlu",))  # mlu is refused: its machinery builds, not its engine
    plan = make_plan(matrix, matrix.targets["mlu"], site, BuildOptions(dist_dir=root / "dist"))
    check_rendered(matrix, [plan], cache)


def test_a_passing_check_is_stamped_and_a_changed_output_is_checked_again(project: Path) -> None:
    cache = project / "dist" / ".cache"
    _check(project, cache)
    assert (cache / "rendered.json").exists()
    _check(project, cache)  # unchanged: the stamp stands

    dockerfile = project / "images" / "mlu" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# edited by hand\n")
    with pytest.raises(RenderError, match=r"images/mlu/Dockerfile: out of date"):
        _check(project, cache)


def test_a_changed_template_is_rendered_and_its_drift_caught(project: Path) -> None:
    cache = project / "dist" / ".cache"
    _check(project, cache)
    template = project / "templates" / "Dockerfile.j2"
    template.write_text(template.read_text() + "# a new line every target renders\n")
    with pytest.raises(RenderError, match=r"out of date with templates/"):
        _check(project, cache)


@pytest.mark.parametrize(
    "changed",
    [
        "matrix.yaml",
        "templates/Dockerfile.j2",
        "images/cpu/locks/deps.json",
        "images/mlu/Dockerfile",
        "docker-bake.hcl",
    ],
)
def test_every_input_and_output_is_part_of_the_digest(project: Path, changed: str) -> None:
    matrix = load_matrix(project / "matrix.yaml")
    outputs = [project / "docker-bake.hcl", project / "images" / "mlu" / "Dockerfile"]
    before = inputs.digest(matrix, outputs)
    assert inputs.digest(matrix, outputs) == before
    path = project / changed
    path.write_text(path.read_text() + "\n")
    assert inputs.digest(matrix, outputs) != before


def test_a_failed_check_stamps_nothing(project: Path) -> None:
    cache = project / "dist" / ".cache"
    dockerfile = project / "images" / "mlu" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# edited by hand\n")
    with pytest.raises(RenderError):
        _check(project, cache)
    assert not (cache / "rendered.json").exists()


def test_an_unchanged_build_renders_nothing(project: Path) -> None:
    """The second check does not even load Jinja2 (that is what the stamp is for)."""
    script = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_render_stamp import _check
_check(Path({str(project)!r}), Path({str(project / "dist" / ".cache")!r}))
print("jinja2" in sys.modules)
"""
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert (first.stdout.strip(), second.stdout.strip()) == ("True", "False"), second.stderr
