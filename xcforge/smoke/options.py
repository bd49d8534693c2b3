"""The smoke stage's options (`build --smoke`): which matrix the smoked targets come from. The
engine the checks need is checked with the build's own (bake.docker_env) before anything runs."""

from __future__ import annotations

from dataclasses import dataclass

from xcforge.config.matrix import Matrix


@dataclass(frozen=True)
class SmokeOptions:
    matrix: Matrix


__all__ = ["SmokeOptions"]
