"""`build.py import`: a bundle → the inner registry (or a docker engine), all of it or nothing.

1. check (reads only): every chunk against the chunk list, the manifest's signature against the key
   the operator names, every member's SHA-256 against the manifest, no member missing and none
   extra, every manifest's children carried (or, in a delta, already at the destination).
2. publish: blobs (re-hashed while they stream; the registry checks the digest again), then
   manifests by digest, children before parents, then tags. A failure on the way deletes the
   manifests this import created, so no tag or digest the import was publishing stays visible.
3. record: one audit log entry naming the bundle, its manifest hash, the registry and the images.

Repositories are rewritten Harbor-style (`--rewrite old=new`, a path prefix matched at `/`):
`127.0.0.1:5000/xcforge/vllm-cpu` with `--registry harbor:443 --rewrite xcforge=ai/xcforge` becomes
`harbor:443/ai/xcforge/vllm-cpu`. Signatures still name the sender's repository; verify with
`--allow-identity` (the import prints the command), or re-sign inside with `promote`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ocicore.errors import RegistryError
from ocicore.media import OCI_LAYOUT_VERSION
from ocicore.registry import Manifest, Reference, RegistryClient, manifest_children
from signing.promote import merge_manifests
from xcforge import console
from xcforge.console import echo
from xcforge.errors import BundleDamaged, ConfigError
from xcforge.transfer import manifest as bm
from xcforge.transfer.archive import BundleFiles, MemberReader, TarStream, locate, open_tar
from xcforge.transfer.bundle import CONTAINERD_NAME, REF_NAME

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from signing.audit import AuditLog
    from signing.cosign_keys import CosignPublicKey
    from signing.sm2_keys import Sm2PublicKey

_COPY = 1 << 20
_MAX_WORKERS = 4  # hashing threads and concurrent uploads: bounded, whatever the CPU count


@dataclass(frozen=True)
class Rewrite:
    old: str
    new: str

    @classmethod
    def parse(cls, text: str) -> Rewrite:
        old, sep, new = text.partition("=")
        old, new = old.strip("/"), new.strip("/")
        if not sep or not old or not new:
            raise ConfigError(
                f"--rewrite {text!r}: expected OLD=NEW (a repository path prefix, e.g. xcforge=ai/xcforge)"
            )
        return cls(old, new)

    def apply(self, path: str) -> str | None:
        if path == self.old or path.startswith(self.old + "/"):
            return self.new + path[len(self.old) :]
        return None


@dataclass
class CheckedBundle:
    files: BundleFiles
    manifest: bm.BundleManifest
    manifest_sha256: str
    members: dict[str, tarfile.TarInfo]
    lines: list[str] = field(default_factory=list)


@dataclass
class ImportResult:
    bundle: str
    destination: str
    images: list[str] = field(default_factory=list)
    blobs_pushed: int = 0
    bytes_pushed: int = 0
    blobs_present: int = 0
    manifests_created: int = 0
    tags: int = 0
    lines: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ check


def check_bundle(
    path: Path,
    *,
    sm2_keys: Sequence[Sm2PublicKey] = (),
    cosign_keys: Sequence[CosignPublicKey] = (),
    sm2_dist_id: bytes = b"1234567812345678",
    say: Callable[[str], None] | None = None,
) -> CheckedBundle:
    """Everything about the bundle that can be checked without the destination; raises on the first
    problem (BundleDamaged 11, VerificationFailed 8)."""
    say = say or console.say
    if not sm2_keys and not cosign_keys:
        raise ConfigError(
            "import: name the sender's public key (--sm2-key and/or --cosign-key); a bundle is only trusted "
            "against a key you got out of band"
        )
    files = locate(path)
    where = str(path)
    with open_tar(files) as tar:
        members = _members(tar, where)
        head = {name: _read(tar, members[name]) for name in bm.HEAD_MEMBERS if name in members}
        if bm.MANIFEST not in head:
            raise BundleDamaged(f"{where}: no {bm.MANIFEST} in the bundle; copy it again from the source")
        data = head[bm.MANIFEST]
        manifest = bm.BundleManifest.from_bytes(data, where)
        lines = bm.verify(
            data,
            head,
            sm2_keys=sm2_keys,
            cosign_keys=cosign_keys,
            sm2_dist_id=sm2_dist_id,
            bundled=manifest.keys,
            where=where,
        )
        expected: dict[str, tuple[str, int | None]] = {
            bm.blob_path(digest): (digest, size) for digest, size in manifest.blob_sizes.items()
        }
        expected |= {name: (digest, None) for name, digest in manifest.files.items()}
        for name in members:
            if name not in expected and name not in bm.HEAD_MEMBERS:
                raise BundleDamaged(f"{where}: {name} is in the bundle but not in its signed manifest; refuse it")
        missing = sorted(set(expected) - set(members))
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise BundleDamaged(
                f"{where}: {missing[0]}{more} is listed in the signed manifest but not in the bundle; copy it again"
            )
        total = sum(members[name].size for name in expected)
        for name, (_, size) in expected.items():
            if size is not None and members[name].size != size:
                raise BundleDamaged(
                    f"{where}: {name} has {members[name].size} bytes, the manifest says {size}; refuse it"
                )
        # Members hashed side by side, each through its own file handles (hashlib and reads release the
        # GIL): one core's SHA-256 is slower than the disk here. The first mismatch in bundle order is named.
        done = 0
        with ThreadPoolExecutor(max_workers=_workers(len(expected))) as pool:
            sums = pool.map(lambda name: _hash_range(files, members[name]), expected)
            for hashed, ((name, (digest, _)), actual) in enumerate(zip(expected.items(), sums, strict=True), 1):
                if actual != digest:
                    what = "blob" if name.startswith("blobs/") else "file"
                    raise BundleDamaged(
                        f"{where}: {what} {name} does not match its digest in the signed manifest (swapped or "
                        "corrupt); refuse the bundle and ask for it again"
                    )
                done += members[name].size
                if total > 64 << 20 and hashed % 50 == 0:
                    say(
                        f"import: checked {hashed}/{len(expected)} files, {done / 2**20:.0f} of {total / 2**20:.0f} MiB"
                    )
        _check_trees(tar, members, manifest, where)
    lines.append(f"bundle {manifest.name}: {len(expected)} files match the signed manifest ({total / 2**20:.1f} MiB)")
    return CheckedBundle(files, manifest, hashlib.sha256(data).hexdigest(), members, lines)


def _members(tar: tarfile.TarFile, where: str) -> dict[str, tarfile.TarInfo]:
    members: dict[str, tarfile.TarInfo] = {}
    for member in tar.getmembers():
        if not member.isfile():
            raise BundleDamaged(f"{where}: {member.name} is not a plain file; a bundle holds files only, refuse it")
        if member.name in members:
            raise BundleDamaged(f"{where}: {member.name} occurs twice; refuse the bundle")
        members[member.name] = member
    first = next(iter(members), None)
    if first != bm.MANIFEST:
        raise BundleDamaged(f"{where}: the first file is {first!r}, not {bm.MANIFEST}; not an xcforge bundle")
    return members


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int = 64 << 20) -> bytes:
    if member.size > limit:
        raise BundleDamaged(f"{member.name}: {member.size} bytes where at most {limit} are expected; refuse it")
    return _open(tar, member).read()


def _open(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    fh = tar.extractfile(member)
    assert fh is not None  # a plain file: _members refuses every other kind of member
    return fh


def _workers(count: int) -> int:
    return max(1, min(count, os.cpu_count() or 1, _MAX_WORKERS))


def _hash_range(files: BundleFiles, member: tarfile.TarInfo) -> str:
    digest = hashlib.sha256()
    with MemberReader(files, member) as reader:
        for block in reader:
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def _check_trees(
    tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], manifest: bm.BundleManifest, where: str
) -> None:
    """Every descriptor a carried manifest names is carried, or listed as held by the far side."""
    known = set(manifest.blob_sizes) | {e["digest"] for e in manifest.omitted}
    for entry in manifest.manifests:
        data = _read(tar, members[bm.blob_path(entry["digest"])])
        doc = Manifest(data, entry["mediaType"], entry["digest"])
        for child in manifest_children(doc):
            if "urls" not in child and child.get("digest") not in known:
                raise BundleDamaged(
                    f"{where}: manifest {entry['digest']} names {child.get('digest')}, which the bundle neither "
                    "carries nor lists as held by the far side; refuse it"
                )


# ---------------------------------------------------------------------------------------- publish


class _Destination:
    def __init__(self, registry: str, rewrites: Sequence[Rewrite], insecure: bool) -> None:
        self.registry = registry
        self.client = RegistryClient(registry, insecure=insecure)
        self.rewrites = list(rewrites)
        self.used: set[Rewrite] = set()

    def repository(self, source: str) -> str:
        """host/path of the sender → path at the destination."""
        path = Reference.parse(source + ":x").repository if "/" in source else source
        for rule in self.rewrites:
            new = rule.apply(path)
            if new is not None:
                self.used.add(rule)
                return new
        return path


def plan_repositories(manifest: bm.BundleManifest, destination: _Destination) -> dict[str, str]:
    sources = {e["repository"] for e in (*manifest.images, *manifest.tags)}
    sources |= {repo for e in (*manifest.manifests, *manifest.blobs, *manifest.omitted) for repo in e["repositories"]}
    mapping = {source: destination.repository(source) for source in sorted(sources)}
    unused = [rule for rule in destination.rewrites if rule not in destination.used]
    if unused:
        raise ConfigError(
            f"--rewrite {unused[0].old}={unused[0].new}: matches no repository of the bundle "
            f"({', '.join(sorted({Reference.parse(s + ':x').repository for s in sources}))}); fix the prefix"
        )
    return mapping


def import_to_registry(
    checked: CheckedBundle,
    registry: str,
    *,
    rewrites: Sequence[Rewrite] = (),
    insecure: bool = False,
    audit: AuditLog | None = None,
    say: Callable[[str], None] | None = None,
) -> ImportResult:
    say = say or console.say
    destination = _Destination(registry, rewrites, insecure)
    manifest = checked.manifest
    repos = plan_repositories(manifest, destination)
    client = destination.client
    result = ImportResult(manifest.name, registry)
    _check_delta_base(manifest, client, repos)
    created: list[tuple[str, str]] = []
    try:
        with open_tar(checked.files) as tar:
            _push_blobs(tar, checked, client, repos, result, say)
            _mount_omitted(manifest, client, repos)
            for entry in _children_first(manifest, tar, checked.members):
                data = _read(tar, checked.members[bm.blob_path(entry["digest"])])
                for source in entry["repositories"]:
                    repo = repos[source]
                    if client.head_manifest(repo, entry["digest"]) is None:
                        client.put_manifest(repo, entry["digest"], data, entry["mediaType"])
                        created.append((repo, entry["digest"]))
            result.manifests_created = len(created)
            for image in manifest.images:
                data = _read(tar, checked.members[bm.blob_path(image["digest"])])
                for tag in image["tags"]:
                    client.put_manifest(repos[image["repository"]], tag, data, image["mediaType"])
                    result.tags += 1
                result.images.append(f"{registry}/{repos[image['repository']]}@{image['digest']}")
            for tag in manifest.tags:
                data = _read(tar, checked.members[bm.blob_path(tag["digest"])])
                _put_related_tag(client, repos[tag["repository"]], tag, data)
                result.tags += 1
    except BaseException as exc:
        _roll_back(client, created, say)
        if isinstance(exc, RegistryError):
            raise RegistryError(
                f"import into {registry} failed, nothing was published (the {len(created)} manifest(s) it had written "
                f"were deleted): {exc.message}"
            ) from None
        raise
    if audit is not None:
        audit.record(
            "import",
            digest="sha256:" + checked.manifest_sha256,
            subject=f"bundle {manifest.name} -> {registry}",
            details={
                "images": ",".join(result.images),
                "blobs_pushed": str(result.blobs_pushed),
                "bytes_pushed": str(result.bytes_pushed),
                "tags": str(result.tags),
                "base": (manifest.base or {}).get("manifest_sha256", ""),
            },
        )
    result.lines = [
        *checked.lines,
        f"imported into {registry}: {result.blobs_pushed} blobs ({result.bytes_pushed / 2**20:.1f} MiB) pushed, "
        f"{result.blobs_present} already there, {result.manifests_created} manifests, {result.tags} tags",
        *(f"  {ref}" for ref in result.images),
    ]
    for image in manifest.images:
        result.lines.append(
            f"  verify: python build.py verify {registry}/{repos[image['repository']]}@{image['digest']} "
            f"--sm2-key SENDER-sm2.pub --allow-identity {image['repository']}"
        )
    return result


def _check_delta_base(manifest: bm.BundleManifest, client: RegistryClient, repos: dict[str, str]) -> None:
    """A delta's omitted blobs must already be at the destination (in some repository it maps to)."""
    base = (manifest.base or {}).get("name", "its base bundle")
    for entry in manifest.omitted:
        if not any(client.blob_exists(repos[source], entry["digest"]) for source in entry["repositories"]):
            raise BundleDamaged(
                f"bundle {manifest.name} is a delta on {base}: blob {entry['digest']} is not at {client.registry} "
                f"({repos[entry['repositories'][0]]}); import {base} first, or bring a full bundle"
            )


def _push_blobs(
    tar: tarfile.TarFile,
    checked: CheckedBundle,
    client: RegistryClient,
    repos: dict[str, str],
    result: ImportResult,
    say: Callable[[str], None],
) -> None:
    total = sum(int(e["size"]) for e in checked.manifest.blobs)
    lock = threading.Lock()

    def publish(entry: dict[str, Any]) -> None:
        """One blob into each repository that needs it: pushed once, mounted into the others."""
        digest = entry["digest"]
        first: str | None = None
        for source in entry["repositories"]:
            repo = repos[source]
            if client.blob_exists(repo, digest):
                with lock:
                    result.blobs_present += 1
            elif first is None or not client.mount_blob(repo, digest, first):
                with _HashingReader(MemberReader(checked.files, checked.members[bm.blob_path(digest)])) as stream:
                    client.push_blob(repo, stream, digest)
                if stream.digest() != digest:  # the file changed between the check and now
                    raise BundleDamaged(f"blob {digest} changed while it was being imported; refuse the bundle")
                with lock:
                    result.blobs_pushed += 1
                    result.bytes_pushed += int(entry["size"])
            first = first or repo

    # A few uploads at once (bounded): while one blob is read and hashed here, the registry receives,
    # hashes and stores another. Blobs are independent; manifests follow only when all are in.
    blobs = checked.manifest.blobs
    with ThreadPoolExecutor(max_workers=_workers(len(blobs)) + 1) as pool:
        for number, _ in enumerate(pool.map(publish, blobs), 1):
            if total > 64 << 20 and (number % 20 == 0 or number == len(blobs)):
                say(f"import: {number}/{len(blobs)} blobs, {result.bytes_pushed / 2**20:.0f} MiB pushed")


def _mount_omitted(manifest: bm.BundleManifest, client: RegistryClient, repos: dict[str, str]) -> None:
    for entry in manifest.omitted:
        holders = [repos[s] for s in entry["repositories"] if client.blob_exists(repos[s], entry["digest"])]
        for source in entry["repositories"]:
            if repos[source] not in holders and not client.mount_blob(repos[source], entry["digest"], holders[0]):
                raise BundleDamaged(
                    f"blob {entry['digest']} is at {holders[0]} but cannot be mounted into {repos[source]}; "
                    "import a full bundle"
                )


def _children_first(
    manifest: bm.BundleManifest, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo]
) -> list[dict[str, Any]]:
    """Manifests ordered so that an index comes after every manifest it lists."""
    by_digest = {e["digest"]: e for e in manifest.manifests}
    ordered: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(digest: str) -> None:
        if digest in seen or digest not in by_digest:
            return
        seen.add(digest)
        entry = by_digest[digest]
        doc = Manifest(_read(tar, members[bm.blob_path(digest)]), entry["mediaType"], digest)
        if doc.is_index:
            for child in manifest_children(doc):
                visit(child["digest"])
        ordered.append(entry)

    for digest in sorted(by_digest):
        visit(digest)
    return ordered


def _put_related_tag(client: RegistryClient, repo: str, tag: dict[str, Any], data: bytes) -> None:
    """A signature/attestation tag: set it, or merge with what the destination already holds there."""
    present = client.head_manifest(repo, tag["tag"])
    if present is not None and present[0] != tag["digest"]:
        merged = merge_manifests(Manifest(data, tag["mediaType"], tag["digest"]), client.get_manifest(repo, tag["tag"]))
        if merged is not None:
            data, media_type, config = merged
            if config is not None:
                client.push_blob(repo, config)
            client.put_manifest(repo, tag["tag"], data, media_type)
            return
    client.put_manifest(repo, tag["tag"], data, tag["mediaType"])


def _roll_back(client: RegistryClient, created: list[tuple[str, str]], say: Callable[[str], None]) -> None:
    for repo, digest in reversed(created):
        with contextlib.suppress(Exception):
            client.delete_manifest(repo, digest)
    if created:
        say(f"import: rolled back {len(created)} manifest(s) this import had written")


class _HashingReader:
    """A member's bytes, hashed as requests sends them as the PUT body (in 1 MiB blocks, with a
    Content-Length: see MemberReader)."""

    def __init__(self, source: MemberReader) -> None:
        self.source, self._hash = source, hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        for block in self.source:
            self._hash.update(block)
            yield block

    def __len__(self) -> int:
        return len(self.source)

    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def __enter__(self) -> _HashingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.source.close()


# ----------------------------------------------------------------------------------------- docker


def import_to_docker(
    checked: CheckedBundle,
    *,
    rewrites: Sequence[Rewrite] = (),
    registry: str | None = None,
    audit: AuditLog | None = None,
    docker: str = "docker",
) -> ImportResult:
    """Each image as its own OCI layout streamed into `docker load` (no registry inside)."""
    manifest = checked.manifest
    if manifest.omitted:
        base = (manifest.base or {}).get("name", "a base bundle")
        raise ConfigError(
            f"bundle {manifest.name} is a delta on {base}: a docker engine cannot be checked for the blobs it omits; "
            "import it into a registry, or bring a full bundle for --docker"
        )
    destination = _Destination(registry or "", rewrites, insecure=False) if registry else None
    result = ImportResult(manifest.name, "docker engine")
    with open_tar(checked.files) as tar:
        by_digest = {e["digest"]: e for e in manifest.manifests}
        for image in manifest.images:
            source = image["repository"]
            name = source
            if destination is not None:
                name = f"{registry}/{destination.repository(source)}"
            elif rewrites:
                host, path = source.split("/", 1)
                for rule in rewrites:
                    new = rule.apply(path)
                    if new is not None:
                        name = f"{host}/{new}"
                        break
            refs = [f"{name}:{tag}" for tag in image["tags"]] or [f"{name}@{image['digest']}"]
            _docker_load(tar, checked.members, image, by_digest, refs, docker)
            result.images += refs
    if audit is not None:
        audit.record(
            "import",
            digest="sha256:" + checked.manifest_sha256,
            subject=f"bundle {manifest.name} -> docker engine",
            details={"images": ",".join(result.images)},
        )
    result.lines = [*checked.lines, *(f"loaded {ref}" for ref in result.images)]
    return result


def _docker_load(
    tar: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    image: dict[str, Any],
    by_digest: dict[str, dict[str, Any]],
    refs: list[str],
    docker: str,
) -> None:
    digests: list[str] = []

    def walk(digest: str) -> None:
        digests.append(digest)
        entry = by_digest[digest]
        doc = Manifest(_read(tar, members[bm.blob_path(digest)]), entry["mediaType"], digest)
        for child in manifest_children(doc):
            if child["digest"] in by_digest:
                walk(child["digest"])
            elif "urls" not in child:
                digests.append(child["digest"])

    walk(image["digest"])
    entries = [
        {
            "mediaType": image["mediaType"],
            "digest": image["digest"],
            "size": image["size"],
            "annotations": {CONTAINERD_NAME: ref, **({REF_NAME: ref.rsplit(":", 1)[1]} if "@" not in ref else {})},
        }
        for ref in refs
    ]
    index = json.dumps({"schemaVersion": 2, "manifests": entries}).encode()
    command = [docker, "load"]
    echo(command)
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stdin = proc.stdin
    assert stdin is not None  # stdin=PIPE
    try:
        stream = TarStream(stdin)
        stream.add_bytes("oci-layout", OCI_LAYOUT_VERSION)
        stream.add_bytes("index.json", index)
        for digest in dict.fromkeys(digests):
            member = members[bm.blob_path(digest)]
            stream.add_stream(member.name, member.size, functools.partial(_copy_member, tar, member))
        stream.close()
        stdin.close()
    except BrokenPipeError:
        pass
    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.wait() != 0:
        last = output.strip().splitlines()[-1] if output.strip() else f"exit {proc.returncode}"
        raise RegistryError(f"docker load of {refs[0]} failed: {last}; is the engine running (docker info)?")


def _copy_member(tar: tarfile.TarFile, member: tarfile.TarInfo, out: SupportsWrite[bytes]) -> None:
    _copy(_open(tar, member), out)


def _copy(src: IO[bytes], out: SupportsWrite[bytes]) -> None:
    for block in iter(lambda: src.read(_COPY), b""):
        out.write(block)
