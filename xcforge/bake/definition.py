"""The build graph as a `docker buildx bake` definition: the fourth arrow of the flow.

Two files, one definition. `docker-bake.hcl` (committed, drift-checked like the Dockerfiles) holds
everything the matrix says about a build: each target's context, named contexts, platforms,
annotations, provenance and cache settings. It is usable without xcforge:

    python build.py contexts --all          # the engine wheel and sdists the contexts name
    docker buildx bake -f docker-bake.hcl cpu

A build run adds a second file, `dist/bake/<run>.json`, with what only this site and this run know
(mirrored base, build args from the site, secrets *paths*, the archive to write, platform subset).
Bake merges it over the committed one; the `--print` of the pair is what BuildKit builds.

What every target shares (the Dockerfile name, the shared named contexts and build args, the
annotations that read a variable, provenance) is written once, in `target "_common"`, which each
target `inherits`; a target's block keeps only what is its own. `_common` is in no group, so a
plain `docker buildx bake` never builds it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xcforge import generated
from xcforge.config.matrix import Matrix, Target
from xcforge.generated import Generated
from xcforge.paths import REPO_ROOT
from xcforge.plan.build_plan import cache_tag, image_name, named_contexts_for
from xcforge.plan.verification import label_value, planned
from xcforge.render.dockerfile import labels

BAKE_FILE = REPO_ROOT / "docker-bake.hcl"
# Work directories the committed file names; `build.py contexts` fills them (plan/build_plan.py names the same).
CONTEXTS_DIR = "dist/.contexts"
# Labels that are also OCI annotations on the index and every manifest (the registry shows them
# without reading the config blob). One list, values from render.labels: built once, from one place.
ANNOTATED_LABELS = (
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
    "org.opencontainers.image.source",
    "org.opencontainers.image.base.name",
    "io.xcforge.target",
)
# (base.digest stays a label only: one committed file serves every target, and a bake variable
# is global, so a per-target digest cannot be interpolated into it; provenance records it too.)
# Variables of the committed file, each also a build arg of every Dockerfile of the same name.
VARIABLES = {
    "BUILD_REVISION": ("unknown", "commit the image is built from (xcforge passes git's)"),
    "BUILD_CREATED": ("", "RFC 3339 time of that commit"),
    "BUILD_SOURCE": ("https://github.com/xcforge/xcforge", "where the sources live"),
    "REPOSITORY_PREFIX": ("xcforge", "HOST[:PORT]/PREFIX the tags are written under"),
    "CACHE_REPOSITORY": ("", "HOST[:PORT]/PREFIX for BuildKit's registry cache; empty: no registry cache"),
}
_INTERPOLATION = re.compile(r"\$\{([A-Z_]+)\}")


def annotated_labels(matrix: Matrix, target: Target, values: Mapping[str, str]) -> dict[str, str]:
    """The annotated labels with ${ARG} filled from `values` (absent: empty), base.name the
    matrix's own reference (a mirror is a site detail, not the image's identity)."""
    out = {}
    for key, value in labels(matrix, target):
        if key not in ANNOTATED_LABELS:
            continue
        if key == "org.opencontainers.image.base.name":
            value = target.base.pinned_ref
        out[key] = _INTERPOLATION.sub(lambda m: values.get(m.group(1), ""), value)
    return out


def annotation_flags(annotated: Mapping[str, str]) -> list[str]:
    # One entry per level: buildx 0.13 reads "index,manifest:" as part of the key.
    return [f"{level}:{k}={v}" for k, v in annotated.items() for level in ("index", "manifest")]


# --------------------------------------------------------------------------- the committed file


@dataclass(frozen=True)
class _Raw:
    """An HCL expression written as is (not quoted)."""

    text: str


@dataclass
class _Block:
    kind: str
    name: str
    attrs: dict[str, object] = field(default_factory=dict)
    comment: str = ""


# The target every committed target inherits from (bake's convention: a leading `_`, in no group).
COMMON_TARGET = "_common"
# How bake combines an attribute of a target with the same attribute of the target it inherits
# (buildx bake's Target.Merge): these maps merge key by key, these lists are appended to (the
# inherited entries first); every other attribute set on the target replaces the inherited value.
_MERGED_MAPS = frozenset({"args", "contexts", "labels"})
_APPENDED_LISTS = frozenset({"annotations", "attest"})


def _committed_target(matrix: Matrix, target: Target) -> _Block:
    root = matrix.root

    def rel(p: Path | str) -> str:
        return str(Path(p).relative_to(root)) if Path(p).is_relative_to(root) else str(p)

    production = planned(matrix, target, target.platforms, engine_install="full", plugin_install="full")
    variables = {name: "${" + name + "}" for name in VARIABLES}
    cache = f"{image_name(target)}:{cache_tag(target.platforms)}"
    return _Block(
        "target",
        target.name,
        {
            "context": rel(matrix.images_dir / target.name),
            "dockerfile": "Dockerfile",
            "contexts": {k: rel(v) for k, v in named_contexts_for(matrix, target, root / CONTEXTS_DIR).items()},
            "platforms": list(target.platforms),
            "args": {
                "BUILD_REVISION": _Raw("BUILD_REVISION"),
                "BUILD_CREATED": _Raw("BUILD_CREATED"),
                "BUILD_SOURCE": _Raw("BUILD_SOURCE"),
                "XCFORGE_VERIFICATION": label_value(production),
            },
            "tags": [
                f"${{REPOSITORY_PREFIX}}/{image_name(target)}:{matrix.engine_version(target)}-{target.variant}",
                f"${{REPOSITORY_PREFIX}}/{image_name(target)}:{matrix.engine_version(target)}-{target.variant}"
                "-${BUILD_REVISION}",
            ],
            "annotations": annotation_flags(annotated_labels(matrix, target, variables)),
            "attest": ["type=provenance,mode=max"],
            "cache-from": _Raw(f'CACHE_REPOSITORY == "" ? [] : ["type=registry,ref=${{CACHE_REPOSITORY}}/{cache}"]'),
            "cache-to": _Raw(
                f'CACHE_REPOSITORY == "" ? [] : ["type=registry,ref=${{CACHE_REPOSITORY}}/{cache},mode=max"]'
            ),
        },
        comment=f"{target.description}. Hardware: {target.hardware}.",
    )


def _hcl_string(value: str) -> str:
    # JSON escapes are HCL escapes; `%{` starts an HCL template directive and must be doubled.
    return json.dumps(value, ensure_ascii=False).replace("%{", "%%{")


def _hcl_value(value: object, indent: str) -> str:
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, str):
        return _hcl_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        if not value:
            return "[]"
        inner = indent + "  "
        return "[\n" + "".join(f"{inner}{_hcl_value(v, inner)},\n" for v in value) + f"{indent}]"
    if isinstance(value, dict):
        inner = indent + "  "
        width = max(len(k) for k in value)
        return (
            "{\n" + "".join(f"{inner}{k:<{width}} = {_hcl_value(v, inner)}\n" for k, v in value.items()) + f"{indent}}}"
        )
    raise TypeError(f"no HCL form for {value!r}")


def _hcl_block(block: _Block) -> str:
    lines = [f"# {block.comment}"] if block.comment else []
    lines.append(f'{block.kind} "{block.name}" {{')
    width = max((len(k) for k in block.attrs), default=0)
    for key, value in block.attrs.items():
        lines.append(f"  {key:<{width}} = {_hcl_value(value, '  ')}")
    lines.append("}")
    return "\n".join(lines)


def _shared(targets: list[_Block]) -> _Block:
    """What every target has, in the form bake's inheritance gives back unchanged: a whole value
    where the attribute replaces, the common keys of a merged map, the common entries of an
    appended list."""
    first, rest = targets[0].attrs, [t.attrs for t in targets[1:]]
    common: dict[str, object] = {}
    for key, value in first.items():
        values = [attrs.get(key) for attrs in rest]
        if key in _MERGED_MAPS and isinstance(value, dict):
            same = {k: v for k, v in value.items() if all(isinstance(o, dict) and k in o and o[k] == v for o in values)}
            if same:
                common[key] = same
        elif key in _APPENDED_LISTS and isinstance(value, list):
            same_list = [v for v in value if all(isinstance(o, list) and v in o for o in values)]
            if same_list:
                common[key] = same_list
        elif all(o == value for o in values):
            common[key] = value
    return _Block("target", COMMON_TARGET, common, comment="What every target below shares; each inherits it.")


def _without(block: _Block, common: _Block) -> _Block:
    """The target's own part: `inherits`, then what `common` does not already give it."""
    own: dict[str, object] = {"inherits": _Raw(f'["{COMMON_TARGET}"]')}
    for key, value in block.attrs.items():
        shared = common.attrs.get(key)
        if shared is None:
            own[key] = value
        elif key in _MERGED_MAPS and isinstance(value, dict) and isinstance(shared, dict):
            rest = {k: v for k, v in value.items() if k not in shared}
            if rest:
                own[key] = rest
        elif key in _APPENDED_LISTS and isinstance(value, list) and isinstance(shared, list):
            rest_list = [v for v in value if v not in shared]
            if rest_list:
                own[key] = rest_list
    return _Block(block.kind, block.name, own, comment=block.comment)


def _target_blocks(matrix: Matrix, *, inherit: bool = True) -> list[_Block]:
    """The targets of the committed file; with `inherit`, a `_common` first and what is shared
    taken out of each. The effective definitions are the same either way (tests/builds/test_bake_file.py
    checks it, with bake's own `--print`)."""
    targets = [_committed_target(matrix, target) for target in matrix.targets.values()]
    if not inherit or len(targets) < 2:
        return targets
    common = _shared(targets)
    return [common, *(_without(t, common) for t in targets)]


def render_bake_file(matrix: Matrix, *, inherit: bool = True) -> str:
    blocks = [_Block("variable", name, {"default": default}, comment=why) for name, (default, why) in VARIABLES.items()]
    blocks.append(_Block("group", "default", {"targets": list(matrix.targets)}, comment="Every image of the matrix."))
    blocks += _target_blocks(matrix, inherit=inherit)
    header = (
        "# Generated by `python build.py render --all` from matrix.yaml: do not edit (render --check fails on drift).\n"
        "# Build without xcforge: `python build.py contexts --all`, then `docker buildx bake -f docker-bake.hcl cpu`\n"
        "# (override a variable with REPOSITORY_PREFIX=registry.example/xcforge in the environment).\n"
    )
    return header + "\n" + "\n\n".join(_hcl_block(b) for b in blocks) + "\n"


def write_or_check(matrix: Matrix, check: bool, path: Path | None = None) -> Generated:
    return generated.write_or_check(path or matrix.root / BAKE_FILE.name, render_bake_file(matrix), check=check)


# --------------------------------------------------------------------------- one run's overrides


@dataclass(frozen=True)
class RunTarget:
    """What one build run sets on one committed target (merged over it by bake)."""

    name: str  # the committed target's name
    platforms: tuple[str, ...]
    args: dict[str, str]
    contexts: dict[str, Path]
    context: Path
    outputs: tuple[str, ...]
    secrets: dict[str, Path] = field(default_factory=dict)
    cache_ref: str | None = None  # registry cache reference, or none

    def as_bake(self) -> dict[str, object]:
        entry: dict[str, object] = {
            "context": str(self.context),
            "platforms": list(self.platforms),
            "args": dict(sorted(self.args.items())),
            "contexts": {k: str(v) for k, v in sorted(self.contexts.items())},
            "secret": [f"id={k},src={v}" for k, v in sorted(self.secrets.items())],
            "output": list(self.outputs),
            "tags": [],  # the names travel in the output (the archive is what gets pushed)
            "cache-from": [f"type=registry,ref={self.cache_ref}"] if self.cache_ref else [],
            "cache-to": [f"type=registry,ref={self.cache_ref},mode=max"] if self.cache_ref else [],
        }
        return entry


def variables(build_args: Mapping[str, str]) -> dict[str, str]:
    """The committed file's variables for this run (bake reads them from its environment)."""
    values = {name: default for name, (default, _) in VARIABLES.items()}
    values.update({k: v for k, v in build_args.items() if k in VARIABLES})
    values["CACHE_REPOSITORY"] = ""  # the run file sets the cache of each target explicitly
    return values


def write_run_file(path: Path, runs: list[RunTarget]) -> Path:
    """The run's overrides; secret *paths* only, never contents (the file stays in dist/bake/)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "group": {"default": {"targets": [r.name for r in runs]}},
        "target": {r.name: r.as_bake() for r in runs},
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path


__all__ = [
    "ANNOTATED_LABELS",
    "BAKE_FILE",
    "COMMON_TARGET",
    "RunTarget",
    "annotation_flags",
    "annotations",
    "render_bake_file",
    "variables",
    "write_or_check",
    "write_run_file",
]
