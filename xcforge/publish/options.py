"""The publish stage's options (`build --push --zstd`), resolved before anything is built: the zstd
variant is recompressed from a pushed, tagged image, so without --push it is refused now, not after
an hour of building; its work directory is checked here too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xcforge.errors import ConfigError


@dataclass(frozen=True)
class ZstdOptions:
    work_dir: Path  # downloaded gzip layers and their zstd recompressions, reused between runs


def resolve_zstd_options(*, push: bool, dist_dir: Path) -> ZstdOptions:
    if not push:
        raise ConfigError(
            "--zstd recompresses a pushed, tagged image in the registry: add --push --registry R "
            "(after split builds, run `python build.py zstd --target T` once `merge` has tagged the index)"
        )
    work = dist_dir / ".cache" / "zstd"
    blocker = next((p for p in (work, *work.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ConfigError(f"--zstd: {blocker} is a file, where the zstd work directory {work} goes; remove it")
    return ZstdOptions(work)


__all__ = ["ZstdOptions", "resolve_zstd_options"]
