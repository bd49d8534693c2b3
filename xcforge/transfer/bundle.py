"""`build.py bundle`: images from a registry → one signed transfer file (or chunks of it).

Layout of the tar, in this order (a reader meets the signed statement before anything it covers):

    xcforge-bundle.json        the bundle manifest (manifest.py), then its signatures
    xcforge-bundle.json.sm2 / .sig
    keys/sm2.pub, keys/cosign.pub, verify-bundle.py, README.txt
    oci-layout, index.json     an OCI image layout: `skopeo`/`oras`/`crane` read it as it is
    blobs/sha256/…             manifests first, then configs and layers, each once

A delta (`--since OLD`) carries every manifest but only the blobs the old bundle did not: the
far side already holds those, and the importer checks that it does before it publishes anything.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ocicore.media import OCI_INDEX, OCI_LAYOUT_VERSION
from xcforge import __version__, console
from xcforge.errors import ConfigError, EnvironmentProblem
from xcforge.files import sync_directory, write_synced
from xcforge.paths import REPO_ROOT
from xcforge.transfer import manifest as bm
from xcforge.transfer.archive import CHUNKS_SUFFIX, ChunkedSink, TarStream, locate, open_tar
from xcforge.transfer.collect import Collected, Source, collect

if TYPE_CHECKING:
    from signing.cosign_keys import CosignPrivateKey
    from signing.sm2_keys import Sm2PrivateKey

VERIFY_TOOL_SOURCE = REPO_ROOT / "tools" / "verify-bundle.py"
# Errors of the output disk (full, over quota, read-only, not ours), told apart from a registry
# read failing mid-stream: those are the operator's to fix where the bundle goes.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG}
# The annotation docker's `load` and containerd read for an image's full name in an OCI layout;
# the OCI one holds the tag only (the OCI image spec, "Annotations").
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
REPOSITORY = "io.xcforge.bundle.repository"


@dataclass
class WrittenBundle:
    files: list[Path]
    manifest: bm.BundleManifest
    manifest_sha256: str
    size: int
    carried_bytes: int
    omitted_bytes: int

    def lines(self) -> list[str]:
        m = self.manifest
        out = [f"bundle {m.name}: {len(m.images)} image(s), {len(m.tags)} signature/attestation tag(s)"]
        out.append(
            f"  {len(m.manifests)} manifests, {len(m.blobs)} blobs ({self.carried_bytes / 2**20:.1f} MiB carried"
            + (f", {len(m.omitted)} blobs / {self.omitted_bytes / 2**20:.1f} MiB left to the base" if m.omitted else "")
            + ")"
        )
        out += [f"  {image['repository']}@{image['digest']} {' '.join(image['tags'])}".rstrip() for image in m.images]
        out += [f"  signed: {scheme} key {key['key_id'][:16]}" for scheme, key in sorted(m.keys.items())]
        out += [f"  wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)" for path in self.files]
        out.append(f"  manifest sha256:{self.manifest_sha256}")
        return out


def default_name(now: datetime | None = None) -> str:
    return "xcforge-bundle-" + (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")


def output_base(out: Path) -> Path:
    """`--out` as given (`dist/x`, `dist/x.tar`, or an existing directory) → the path without suffix."""
    if out.is_dir():
        return out / default_name()
    return out.with_name(out.name.removesuffix(".tar"))


def read_base_manifest(path: Path) -> bm.BundleManifest:
    """The manifest of an earlier bundle (for `--since`): only its first member is read."""
    files = locate(path)
    with open_tar(files) as tar:
        member = tar.next()
        fh = tar.extractfile(member) if member is not None and member.name == bm.MANIFEST else None
        if fh is None:  # no first member, another name, or not a plain file
            raise ConfigError(f"--since {path}: not a bundle (its first file is not {bm.MANIFEST})")
        return bm.BundleManifest.from_bytes(fh.read(), str(path))


def write_bundle(
    sources: list[Source],
    out: Path,
    *,
    sm2_key: Sm2PrivateKey | None = None,
    cosign_key: CosignPrivateKey | None = None,
    sm2_dist_id: bytes = b"1234567812345678",
    chunk_size: int | None = None,
    since: Path | None = None,
    insecure: bool = False,
    force: bool = False,
    say: Callable[[str], None] | None = None,
) -> WrittenBundle:
    say = say or console.say
    if sm2_key is None and cosign_key is None:
        raise ConfigError("bundle: give --sm2-key and/or --cosign-key (or $XCFORGE_SM2_KEY): a bundle is always signed")
    if not sources:
        raise ConfigError("bundle: nothing to carry; name IMAGE@DIGEST or --target, or build and push first")
    base = output_base(out)
    _refuse_existing(base, force)
    base_manifest = read_base_manifest(since) if since is not None else None
    say(f"bundle: reading {len(sources)} image(s) and their signatures from the registry")
    collected = collect(sources, insecure=insecure)
    already = _far_side_blobs(base_manifest)
    carried = {d: e for d, e in collected.blobs.items() if d not in already}
    omitted = [e for d, e in collected.blobs.items() if d in already]

    index = _layout_index(collected)
    files = {
        "oci-layout": OCI_LAYOUT_VERSION,
        "index.json": index,
        bm.VERIFY_TOOL: VERIFY_TOOL_SOURCE.read_bytes(),
        bm.README: _readme(base.name).encode(),
    }
    keys = {}
    for scheme, key in (("sm2", sm2_key), ("cosign", cosign_key)):
        if key is not None:
            files[bm.KEY_FILES[scheme]] = key.public_key.to_pem()
            keys[scheme] = {"key_id": key.key_id, "file": bm.KEY_FILES[scheme]}
    manifest = bm.BundleManifest(
        name=base.name,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        xcforge=__version__,
        images=collected.images,
        tags=collected.tags,
        manifests=sorted(collected.manifests.values(), key=lambda e: e["digest"]),
        blobs=sorted(carried.values(), key=lambda e: e["digest"]),
        omitted=sorted(omitted, key=lambda e: e["digest"]),
        files={name: "sha256:" + hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
        keys=keys,
        base=None
        if base_manifest is None
        else {"name": base_manifest.name, "manifest_sha256": _sha256(base_manifest.to_bytes())},
    )
    data = manifest.to_bytes()
    signatures = bm.sign(data, sm2_key=sm2_key, cosign_key=cosign_key, sm2_dist_id=sm2_dist_id)

    sink = ChunkedSink(base, chunk_size)
    try:
        tar = TarStream(sink)
        tar.add_bytes(bm.MANIFEST, data)
        for member in bm.HEAD_MEMBERS[1:]:
            if member in signatures:
                tar.add_bytes(member, signatures[member])
        for name, content in files.items():
            tar.add_bytes(name, content)
        for entry in manifest.manifests:
            tar.add_bytes(bm.blob_path(entry["digest"]), collected.manifest_data[entry["digest"]])
        _write_blobs(tar, collected, manifest.blobs, say)
        tar.close()
        written = sink.commit()
    except OSError as exc:
        sink.abort()
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise EnvironmentProblem(
            f"bundle --out {base}: cannot write ({os.strerror(exc.errno)}); free space or choose --out on another "
            "disk (the partial bundle was removed)"
        ) from None
    except BaseException:
        sink.abort()
        raise
    tool = base.parent / bm.VERIFY_TOOL  # beside the bundle too: the far side needs it before unpacking
    write_synced(tool, files[bm.VERIFY_TOOL])
    sync_directory(tool.parent)
    return WrittenBundle(
        files=[*written, tool],
        manifest=manifest,
        manifest_sha256=_sha256(data),
        size=sink.total,
        carried_bytes=sum(int(e["size"]) for e in manifest.blobs),
        omitted_bytes=sum(int(e["size"]) for e in manifest.omitted),
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _refuse_existing(base: Path, force: bool) -> None:
    if not base.parent.exists():
        base.parent.mkdir(parents=True, exist_ok=True)
    existing = [
        p for p in (base.with_name(base.name + ".tar"), base.with_name(base.name + CHUNKS_SUFFIX)) if p.exists()
    ]
    existing += sorted(base.parent.glob(f"{base.name}.tar.[0-9][0-9][0-9]"))
    if existing and not force:
        raise ConfigError(f"bundle --out {base}: {existing[0]} exists; pass --force to replace it or choose --out")
    for path in existing:
        path.unlink()


def _far_side_blobs(base: bm.BundleManifest | None) -> set[str]:
    """Blobs the receiver holds once it imported `base`: what it carried and what it relied on."""
    if base is None:
        return set()
    return {entry["digest"] for entry in (*base.blobs, *base.omitted)}


def _layout_index(collected: Collected) -> bytes:
    """index.json of the OCI layout: each image once per tag (full name for docker/containerd, the
    tag as ref.name), each signature/attestation tag likewise."""
    entries = []
    for image in collected.images:
        for tag in image["tags"] or [None]:
            entries.append(_entry(image, image["repository"], tag))
    for tag in collected.tags:
        entries.append(_entry(tag, tag["repository"], tag["tag"]))
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _entry(descriptor: dict[str, Any], repository: str, tag: str | None) -> dict[str, Any]:
    annotations = {REPOSITORY: repository}
    if tag:
        annotations |= {CONTAINERD_NAME: f"{repository}:{tag}", REF_NAME: tag}
    return {
        "mediaType": descriptor["mediaType"],
        "digest": descriptor["digest"],
        "size": descriptor["size"],
        "annotations": annotations,
    }


def _write_blobs(tar: TarStream, collected: Collected, blobs: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    total = sum(int(e["size"]) for e in blobs)
    done = 0
    last_report = 0.0
    for number, entry in enumerate(blobs, 1):
        digest, size = entry["digest"], int(entry["size"])
        client, repository = collected.origin[digest]
        tar.add_stream(bm.blob_path(digest), size, functools.partial(client.download_blob, repository, digest))
        done += size
        if total > 64 << 20 and (done - last_report >= total / 10 or number == len(blobs)):
            last_report = done
            say(f"bundle: {number}/{len(blobs)} blobs, {done / 2**20:.1f} of {total / 2**20:.1f} MiB")


def _readme(name: str) -> str:
    return f"""xcforge transfer bundle {name}

Verify before anything else, on any machine with Python 3 and openssl (no xcforge needed):

    python3 verify-bundle.py {name}.tar --sm2-key SENDER-sm2.pub          # or {name}.chunks.json

Then publish to the inner registry (checks everything again, publishes all or nothing):

    python build.py import {name}.tar --registry harbor.corp:443 --sm2-key SENDER-sm2.pub \\
        [--rewrite xcforge=infra/xcforge]

The sender's public key must come from a channel you trust, not from this bundle: the keys/ folder
here only lets you compare fingerprints. See docs/airgap.md.
"""
