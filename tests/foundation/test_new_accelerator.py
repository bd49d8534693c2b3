"""Adding an accelerator touches only its own files: the claim of README's "Adding an accelerator".

In code and configuration, the newest target (musa, Moore Threads) is named in exactly one matrix
entry, its child template and its engine backend module: no `if target == "musa"` branch, no list
of backends or targets kept by hand. Everything else that must know it is generated from those and
drift-checked (`render --all --check`, `deps --all --check`, `workflows --check`,
`deploy --examples --check`), or a test. If this fails, a hand edit for one target crept back in:
make that place read the matrix or the backend module instead.

Documentation (`*.md`) may name any target: its lists and tables of targets and backends are
generated the same way, and prose about one target belongs there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from xcforge.config.matrix import engine_backends, load_matrix

REPO = Path(__file__).resolve().parents[2]

# (target, backend) of the accelerator added the data-driven way.
NEW = [("musa", "musa")]

# Whole files made by a --check-ed command from the matrix, the templates and the backend modules.
_GENERATED_FILES = (
    re.compile(r"images/(?P<t>[a-z0-9-]+)/(Dockerfile|locks/.*)"),  # render --all, deps --all
    re.compile(r"deploy/examples/(?P<t>[a-z0-9-]+)\.yaml"),  # deploy --examples
    re.compile(r"deploy/examples/signed-model/(?P<t>[a-z0-9-]+)\.yaml"),  # deploy --examples
    re.compile(r"deploy/monitoring/(?P<t>[a-z0-9-]+)\.yaml"),  # deploy --examples
    re.compile(r"\.github/workflows/[^/]+\.yml"),  # workflows
    re.compile(r"\.github/actionlint\.yaml"),  # workflows
    re.compile(r"docker-bake\.hcl"),  # render --all
)


def _repo_files() -> list[str]:
    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if line]

    files = set(git("ls-files")) | set(git("ls-files", "--others", "--exclude-standard"))
    return sorted(f for f in files if (REPO / f).is_file())


def _generated(path: str) -> bool:
    return any(p.fullmatch(path) for p in _GENERATED_FILES)


def names(word: str, text: str) -> bool:
    """`text` names `word` as a word of its own: "musa" in vllm-musa, torch_musa, MUSA_HOME,
    `== "musa"`, not in "MemUsage"."""
    return re.search(rf"(?<![a-z]){re.escape(word)}", text, re.I) is not None


def _code(path: str) -> bool:
    """Code and configuration a person writes: not documentation, tests or generated outputs."""
    return not (path.endswith(".md") or path.startswith("tests/") or _generated(path))


def mentioning(word: str) -> set[str]:
    """Hand-written code and configuration files that name `word`."""
    found = set()
    for path in filter(_code, _repo_files()):
        try:
            text = (REPO / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files name nothing
        if names(word, text):
            found.add(path)
    return found


@pytest.mark.parametrize(("target", "backend"), NEW)
def test_the_new_accelerator_is_named_only_in_its_own_files(target, backend):
    allowed = {
        "matrix.yaml",
        f"templates/targets/{target}.Dockerfile.j2",
        f"images/engine/src/xcforge_engine/backends/{backend}.py",
    }
    found = mentioning(target) | mentioning(backend)
    assert found == allowed, (
        f"files naming {target!r} beyond its own: {sorted(found - allowed)}; "
        f"its own files without it: {sorted(allowed - found)}"
    )


@pytest.mark.parametrize(("target", "backend"), NEW)
def test_the_new_accelerator_is_a_full_target(target, backend):
    matrix = load_matrix(REPO / "matrix.yaml")
    assert target in matrix.targets
    t = matrix.targets[target]
    assert t.backend == backend and backend in engine_backends()
    # Its runtime contract, CI runner and generated outputs exist like every other target's.
    assert t.runtime.devices and t.runtime.k8s_resource and t.ci.runner
    assert t.plugin is not None and t.plugin.needs_vendor
    # A target built on the vendor's own image has no lock: the vendor's set is asserted at build time.
    lock = () if t.engine.is_vendor_image else (f"images/{target}/locks/deps.json",)
    for path in (f"images/{target}/Dockerfile", *lock, f"deploy/examples/{target}.yaml"):
        assert (REPO / path).is_file(), f"{path} is missing: run the README's regenerate commands"


def test_the_scan_sees_an_older_target_everywhere_it_is_hand_written():
    """The scan itself works: mlu predates the data-driven way and is named in hand-written files."""
    found = mentioning("cambricon")
    assert "matrix.yaml" in found
    assert "images/engine/src/xcforge_engine/backends/mlu.py" in found
    assert not any(_generated(p) for p in found)


def test_the_scan_catches_a_special_case_and_leaves_docs_free():
    """What the first test relies on: a branch on the target's name is seen wherever code has it,
    and only documentation is free to name targets."""
    for special_case in (
        'if target.name == "musa":',
        "BACKENDS = ('cuda', 'ascend', 'mlu', 'musa', 'cpu')",
        "env['MUSA_HOME'] = home",
        "if backend in {'musa'}: ...",
    ):
        assert names("musa", special_case), special_case
    assert not names("musa", "MemUsage in the cgroup stats")
    assert _code("xcforge/render/dockerfile.py") and _code("images/engine/src/xcforge_engine/serve.py")
    assert _code("ocicore/registry.py") and _code("signing/verify.py") and _code("scripts/provision.sh")
    assert not _code("docs/engine.md") and not _code("README.md") and not _code("images/engine/README.md")
    assert not _code("images/musa/Dockerfile") and not _code("tests/foundation/test_matrix.py")
    # The docs do name it now (the generated target list and backend table), and that is allowed.
    assert names("musa", (REPO / "docs/engine.md").read_text(encoding="utf-8"))
