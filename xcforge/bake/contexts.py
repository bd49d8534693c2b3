"""Before the first bake: the committed Dockerfiles and docker-bake.hcl are what matrix.yaml and
templates/ render now (`check_rendered`, skipped while nothing they are rendered from changed), and
the build contexts the bake definition names are in place (`prepare_contexts`: the engine wheel,
and each target's sdists and placeholders)."""

from __future__ import annotations

import shutil
from pathlib import Path

from xcforge.bake import definition
from xcforge.bake.engine_wheel import ensure_engine_wheel
from xcforge.config.matrix import Matrix
from xcforge.errors import RenderError
from xcforge.lock import locks, placeholders
from xcforge.plan.build_plan import BuildPlan
from xcforge.render import inputs
from xcforge.render.dockerfile import render_target


def prepare_contexts(matrix: Matrix, plans: list[BuildPlan]) -> tuple[Path, str]:
    engine_dir = plans[0].named_contexts["engine"]
    _, engine_hash = ensure_engine_wheel(engine_dir, matrix.images_dir / "engine")
    for plan in plans:
        wheels = plan.named_contexts["wheels"]
        if not wheels.exists():
            wheels.mkdir(parents=True, exist_ok=True)
        _prepare_sdists(matrix, plan)
    return engine_dir, engine_hash


def _prepare_sdists(matrix: Matrix, plan: BuildPlan) -> None:
    """The engine sdist of a source-empty target into its build context (hash-checked against the
    lock), so the image installs it by path: pip checks a requirement's version against the
    metadata, which vLLM releases before 0.23 suffix with `+empty`."""
    target = plan.target
    work = plan.named_contexts["sdists"]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    if plan.plugin_install != "full":
        # A stand-in build installs these in place of the vendor's step (placeholders.py); a real build
        # never sees them.
        placeholders.write(placeholders.for_target(matrix, target), work / "placeholders")
    if target.engine.install not in locks.SOURCE_BUILDS or plan.engine_install == "skip":
        return
    # Fetching needs the resolver's module (indexes, archives): loaded only by the targets that do.
    from xcforge.lock import deps

    pin = locks.engine_sdist_pin(matrix, target)  # without a lock: the index's file and hash
    version, sha256 = pin or (plan.engine_version, None)
    index = deps.index_of(plan.site)
    path, sha256 = deps.fetch_sdist(plan.site, index, target.engine.package, version, sha256)
    shutil.copyfile(path, work / path.name)
    (work / "SHA256SUMS").write_text(f"{sha256}  {path.name}\n")


def check_rendered(matrix: Matrix, plans: list[BuildPlan], cache_dir: Path) -> None:
    """The committed bake file and the plans' Dockerfiles are what matrix.yaml and templates/
    render now; skipped when none of their inputs changed since the last time they were."""
    outputs = [matrix.root / definition.BAKE_FILE.name, *(plan.dockerfile for plan in plans)]
    stamp = inputs.Stamp(cache_dir / "rendered.json", inputs.digest(matrix, outputs))
    if stamp.current():
        return
    if definition.write_or_check(matrix, check=True).status != "unchanged":
        raise RenderError(
            f"{matrix.root / definition.BAKE_FILE.name}: out of date with matrix.yaml; "
            "run `python build.py render --all` (and commit) before building"
        )
    for plan in plans:
        committed = plan.dockerfile.read_text(encoding="utf-8") if plan.dockerfile.exists() else None
        if committed != render_target(matrix, plan.target).text:
            raise RenderError(
                f"{plan.dockerfile}: out of date with templates/ and matrix.yaml for target '{plan.target.name}'; "
                "run `python build.py render --all` (and commit) before building"
            )
    stamp.record()


__all__ = ["check_rendered", "prepare_contexts"]
