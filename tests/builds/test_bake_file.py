"""The committed docker-bake.hcl: what all targets share is written once, in `target "_common"`,
and every target's effective definition is what it was when each target spelled everything out.

The fast tests read the rendered text (a small reader for the subset of HCL the renderer writes) and
apply bake's inheritance rules themselves; the docker-marked ones ask buildx (`bake --print`, which
builds nothing) for its own reading of the committed file.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from xcforge.bake import definition
from xcforge.config.matrix import Matrix, load_matrix, parse_matrix
from xcforge.plan.build_plan import cache_tag, image_name, named_contexts_for
from xcforge.plan.verification import label_value, planned

REPO = Path(__file__).resolve().parents[2]
COMMON = definition.COMMON_TARGET


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(REPO / "matrix.yaml")


def _bigger_matrix() -> Matrix:
    """The matrix with one more target, whose values differ from every other's where they can."""
    raw = yaml.safe_load((REPO / "matrix.yaml").read_text())
    new = copy.deepcopy(raw["targets"]["cpu"])
    new["description"] = "a new CPU-only target"
    new["platforms"] = ["linux/arm64"]
    raw["targets"]["kunpeng-cpu"] = new
    return parse_matrix(raw, REPO / "matrix.yaml")


# --------------------------------------------------------------------------- reading the rendered HCL

_BLOCK = re.compile(r'^(target|group|variable) "([^"]+)" \{$')
_ATTR = re.compile(r"^  ([\w-]+) *= (.*)$")
_ENTRY = re.compile(r"^    ([\w-]+) *= (.*)$")


def _read(text: str) -> dict[tuple[str, str], dict[str, object]]:
    """(kind, name) → attribute → HCL text of a scalar, list of entries' texts, or dict of key → text."""
    blocks: dict[tuple[str, str], dict[str, object]] = {}
    lines = iter(text.splitlines())
    for line in lines:
        head = _BLOCK.match(line)
        if not head:
            assert not line.startswith(" "), f"attribute outside a block: {line!r}"
            continue
        attrs: dict[str, object] = {}
        for line in lines:
            if line == "}":
                break
            match = _ATTR.match(line)
            assert match, f"unexpected line in {head.group(2)}: {line!r}"
            key, value = match.groups()
            assert key not in attrs, f"{head.group(2)}: {key} set twice"
            if value == "[":
                items = []
                for item in lines:
                    if item == "  ]":
                        break
                    assert item.startswith("    ") and item.endswith(","), item
                    items.append(item.strip().removesuffix(","))
                attrs[key] = items
            elif value == "{":
                entries = {}
                for item in lines:
                    if item == "  }":
                        break
                    entry = _ENTRY.match(item)
                    assert entry, item
                    entries[entry.group(1)] = entry.group(2)
                attrs[key] = entries
            else:
                attrs[key] = value
        blocks[(head.group(1), head.group(2))] = attrs
    return blocks


def _targets(text: str) -> dict[str, dict[str, object]]:
    return {name: attrs for (kind, name), attrs in _read(text).items() if kind == "target"}


# bake's Target.Merge (buildx 0.13) for the attributes the file uses: these maps merge key by key,
# these lists are appended to (inherited entries first), everything else set on the child replaces.
_MAPS = {"args", "contexts", "labels"}
_APPENDED = {"annotations", "attest"}


def _resolve(targets: dict[str, dict[str, object]], name: str) -> dict[str, object]:
    own = dict(targets[name])
    parents = own.pop("inherits", None)
    out: dict[str, object] = {}
    for parent in json.loads(parents) if parents else []:
        out = _merge(out, _resolve(targets, parent))
    return _merge(out, own)


def _merge(base: dict[str, object], child: dict[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in child.items():
        if key in _MAPS and key in out:
            out[key] = {**out[key], **value}  # type: ignore[dict-item]
        elif key in _APPENDED and key in out:
            out[key] = [*out[key], *value]  # type: ignore[misc]
        else:
            out[key] = value
    return out


def _comparable(definition: dict[str, object]) -> dict[str, object]:
    """Annotations as a sorted list: bake puts inherited ones first, and BuildKit reads them into a
    map keyed by level and name, so their order carries nothing."""
    out = dict(definition)
    if "annotations" in out:
        out["annotations"] = sorted(out["annotations"])  # type: ignore[arg-type]
    return out


# --------------------------------------------------------------------------- fast: the rendered text


def test_committed_bake_file_is_current(matrix):
    assert definition.write_or_check(matrix, check=True).status == "unchanged", "run `python build.py render --all`"


@pytest.mark.parametrize("which", ["committed", "bigger matrix"])
def test_every_target_inherits_common_and_repeats_nothing_all_share(matrix, which):
    text = (
        (REPO / "docker-bake.hcl").read_text()
        if which == "committed"
        else definition.render_bake_file(_bigger_matrix())
    )
    blocks = _read(text)
    targets = _targets(text)
    names = [n for n in targets if n != COMMON]
    assert blocks[("group", "default")]["targets"] == [f'"{n}"' for n in names]  # _common is never built
    assert next(iter(targets)) == COMMON and targets[COMMON]
    assert "inherits" not in targets[COMMON]
    for name in names:
        assert targets[name]["inherits"] == f'["{COMMON}"]', name
    for key in {k for n in names for k in targets[n]} - {"inherits"}:
        values = [targets[n].get(key) for n in names]
        if any(v is None for v in values):
            continue
        assert not all(v == values[0] for v in values), f"{key} is the same in every target: put it in {COMMON}"
        if isinstance(values[0], dict):
            shared = set.intersection(*(set(v.items()) for v in values))  # type: ignore[union-attr]
            assert not shared, f"{key}: {sorted(shared)} in every target"
        if isinstance(values[0], list) and key in _APPENDED:
            shared = set.intersection(*(set(v) for v in values))  # type: ignore[arg-type]
            assert not shared, f"{key}: {sorted(shared)} in every target"
    # What _common holds is shared indeed: no target sets a replacing attribute that _common sets too.
    for key in set(targets[COMMON]) - _MAPS - _APPENDED:
        assert all(key not in targets[n] for n in names), key


@pytest.mark.parametrize("which", ["committed", "bigger matrix"])
def test_inheritance_gives_back_each_targets_full_definition(matrix, which):
    m = matrix if which == "committed" else _bigger_matrix()
    text = (REPO / "docker-bake.hcl").read_text() if which == "committed" else definition.render_bake_file(m)
    flat = _targets(definition.render_bake_file(m, inherit=False))
    assert COMMON not in flat
    inherited = _targets(text)
    assert set(inherited) - {COMMON} == set(flat) == set(m.targets)
    for name in m.targets:
        assert _comparable(_resolve(inherited, name)) == _comparable(flat[name]), name


def test_the_file_is_shorter_than_its_flat_form(matrix):
    committed = (REPO / "docker-bake.hcl").read_text()
    flat = definition.render_bake_file(matrix, inherit=False)
    assert committed.count("\n") < flat.count("\n") - 10 * len(matrix.targets)
    assert committed.count('"type=provenance,mode=max"') == 1
    assert committed.count("${BUILD_SOURCE}") == 2  # index and manifest annotation, once


# --------------------------------------------------------------------------- docker: buildx's own reading


def _print(*files: Path, env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in definition.VARIABLES}
    proc = subprocess.run(
        ["docker", "buildx", "bake", "--print", *(a for f in files for a in ("-f", str(f)))],
        cwd=REPO, capture_output=True, text=True, env={**clean, **env}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


_ENVIRONMENTS = {
    "defaults": {},
    "everything set": {
        "BUILD_REVISION": "0123abcd",
        "BUILD_CREATED": "2025-01-02T03:04:05Z",
        "BUILD_SOURCE": "https://git.example/xcforge",
        "REPOSITORY_PREFIX": "registry.example:5000/xcforge",
        "CACHE_REPOSITORY": "cache.example/xcforge",
    },
}


def _expected(matrix: Matrix, name: str, env: dict[str, str]) -> dict[str, object]:
    """What a target is, from the matrix: what the flat file spelled out for each, variables filled."""
    values = {k: default for k, (default, _) in definition.VARIABLES.items()} | env
    target = matrix.targets[name]
    image, version = image_name(target), f"{matrix.engine_version(target)}-{target.variant}"
    production = planned(matrix, target, target.platforms, engine_install="full", plugin_install="full")
    rel = lambda p: str(Path(p).relative_to(REPO)) if Path(p).is_relative_to(REPO) else str(p)  # noqa: E731
    out: dict[str, object] = {
        "context": f"images/{name}",
        "dockerfile": "Dockerfile",
        "contexts": {k: rel(v) for k, v in named_contexts_for(matrix, target, REPO / definition.CONTEXTS_DIR).items()},
        "args": {
            "BUILD_REVISION": values["BUILD_REVISION"],
            "BUILD_CREATED": values["BUILD_CREATED"],
            "BUILD_SOURCE": values["BUILD_SOURCE"],
            "XCFORGE_VERIFICATION": label_value(production),
        },
        "tags": [
            f"{values['REPOSITORY_PREFIX']}/{image}:{version}",
            f"{values['REPOSITORY_PREFIX']}/{image}:{version}-{values['BUILD_REVISION']}",
        ],
        "annotations": sorted(definition.annotation_flags(definition.annotated_labels(matrix, target, values))),
        "attest": ["type=provenance,mode=max"],
        "platforms": list(target.platforms),
    }
    if values["CACHE_REPOSITORY"]:
        ref = f"{values['CACHE_REPOSITORY']}/{image}:{cache_tag(target.platforms)}"
        out["cache-from"] = [f"type=registry,ref={ref}"]
        out["cache-to"] = [f"type=registry,ref={ref},mode=max"]
    return out


def _needs_buildx() -> None:
    if shutil.which("docker") is None:
        pytest.fail("marked docker, but there is no docker CLI")


@pytest.mark.docker
@pytest.mark.parametrize("environment", list(_ENVIRONMENTS))
def test_buildx_reads_every_target_as_the_matrix_says(matrix, environment):
    _needs_buildx()
    env = _ENVIRONMENTS[environment]
    printed = _print(REPO / "docker-bake.hcl", env=env)
    assert printed["group"] == {"default": {"targets": list(matrix.targets)}}
    assert set(printed["target"]) == set(matrix.targets)  # _common is inherited, never printed or built
    for name in matrix.targets:
        assert _comparable(printed["target"][name]) == _expected(matrix, name, env), name


@pytest.mark.docker
@pytest.mark.parametrize("environment", list(_ENVIRONMENTS))
def test_buildx_reads_the_same_definitions_as_from_the_flat_file(matrix, environment, tmp_path):
    """The committed file against its flat form (every target spelled out, as before `_common`),
    alone and under a build run's overrides file (what xcforge's builds hand to bake)."""
    _needs_buildx()
    env = _ENVIRONMENTS[environment]
    flat = tmp_path / "flat.hcl"
    flat.write_text(definition.render_bake_file(matrix, inherit=False))
    (tmp_path / "pip.conf").write_text("[global]\n")  # bake checks that a secret's source exists
    run = definition.write_run_file(
        tmp_path / "run.json",
        [
            definition.RunTarget(
                name=name,
                platforms=matrix.targets[name].platforms[:1],
                args={"XCFORGE_VERIFICATION": "linux/amd64=plugin-skipped", "EXTRA": "1"},
                contexts={"engine": tmp_path / "engine", "sdists": tmp_path / "sdists"},
                context=tmp_path / name,
                outputs=(f"type=oci,dest={tmp_path / name}.oci.tar",),
                secrets={"pip.conf": tmp_path / "pip.conf"},
                cache_ref="cache.example/run:buildcache" if name == "cpu" else None,
            )
            for name in ("cpu", "mlu")
        ],
    )
    for files in ([REPO / "docker-bake.hcl"], [REPO / "docker-bake.hcl", run]):
        ours = _print(*files, env=env)
        theirs = _print(flat, *files[1:], env=env)
        assert ours["group"] == theirs["group"]
        assert set(ours["target"]) == set(theirs["target"])
        for name in ours["target"]:
            assert _comparable(ours["target"][name]) == _comparable(theirs["target"][name]), (files, name)
