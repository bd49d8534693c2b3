"""Build fingerprints: the hash of everything that decides an image's content.

Recorded as the `io.xcforge.fingerprint` label; an unchanged target is skipped in seconds.
Volatile metadata (revision, creation time) is left out on purpose: a commit that changes nothing
an image is made of does not rebuild it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

VOLATILE_ARGS = frozenset({"BUILD_REVISION", "BUILD_CREATED", "XCFORGE_FINGERPRINT"})
_IGNORED_PARTS = frozenset({"__pycache__", "build", ".pytest_cache"})


def tree_files(root: Path) -> list[Path]:
    """Files under root that go into an image, in a stable order (no caches, no build debris)."""
    if root.is_file():
        return [root]
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).parts
        if any(part in _IGNORED_PARTS or part.endswith(".egg-info") for part in rel):
            continue
        if path.is_file():
            files.append(path)
    return files


def hash_tree(root: Path, *, contents: bool = True) -> str:
    """sha256 over relative names and (by default) contents; `contents=False` uses sizes only,
    which is enough for wheelhouses whose file names carry versions."""
    digest = hashlib.sha256()
    for path in tree_files(root):
        digest.update(str(path.relative_to(root) if root.is_dir() else path.name).encode() + b"\0")
        if contents:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(str(path.stat().st_size).encode())
    return digest.hexdigest()


def build_fingerprint(
    *,
    dockerfile_text: str,
    platforms: Iterable[str],
    base_digest: str | None,
    build_args: Mapping[str, str],
    context_hashes: Mapping[str, str],
) -> str:
    digest = hashlib.sha256()
    digest.update(b"xcforge-fingerprint-v1\0")
    digest.update(dockerfile_text.encode())
    digest.update(("\0platforms=" + ",".join(sorted(platforms))).encode())
    digest.update(f"\0base={base_digest or 'unresolved'}".encode())
    for key in sorted(build_args):
        if key not in VOLATILE_ARGS:
            digest.update(f"\0arg:{key}={build_args[key]}".encode())
    for name in sorted(context_hashes):
        digest.update(f"\0ctx:{name}={context_hashes[name]}".encode())
    return "sha256:" + digest.hexdigest()
