"""A model as an OCI artifact: chunks as layers, every file's path, size and SHA-256 in the config.

Layout (docs/models.md): an OCI image manifest with `artifactType` MODEL_ARTIFACT_TYPE, a config
blob of CONFIG_MEDIA_TYPE (the model's facts and its file list) and one raw layer of
CHUNK_MEDIA_TYPE per chunk of at most `chunk_size` bytes, in file order. The manifest digest is
what SM2 and cosign sign (signing.sign, the same calls as for images); it names the config by
digest, and the config names every file's SHA-256: one signature covers every byte.

Written as an OCI image layout in a tar file (`ocicore.layout.OciArchive` reads it,
`ocicore.push.push_layout` pushes it). Each chunk streams from the model file into the tar once,
hashed as it goes (memory: one read buffer); its member header is written with a placeholder name
and rewritten with the digest when the chunk is done, so nothing is read twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ocicore.digest import is_sha256
from ocicore.hashing import ThreadedSha256
from ocicore.media import OCI_LAYOUT_VERSION, OCI_MANIFEST
from xcforge import __version__
from xcforge.errors import BundleDamaged, ConfigError, EnvironmentProblem
from xcforge.files import SyncedWriter
from xcforge.model.formats import read_facts

MODEL_ARTIFACT_TYPE = "application/vnd.xcforge.model.v1"
CONFIG_MEDIA_TYPE = "application/vnd.xcforge.model.config.v1+json"
CHUNK_MEDIA_TYPE = "application/vnd.xcforge.model.chunk.v1"
RECORD_DIR = ".xcforge-model"  # what unpack writes beside the files: the signed record
TITLE = "org.opencontainers.image.title"
REF_NAME = "org.opencontainers.image.ref.name"
NAME_ANNOTATION = "io.xcforge.model.name"
DEFAULT_CHUNK_SIZE = 512 * 1024 * 1024
_BUFFER = 4 * 1024 * 1024
_BLOCK = tarfile.BLOCKSIZE
_PLACEHOLDER = "blobs/sha256/" + "0" * 64


@dataclass(frozen=True)
class PackedModel:
    archive: Path
    digest: str  # the manifest's: what is signed
    config: dict[str, Any]
    chunks: int
    bytes: int


def model_files(root: Path) -> list[str]:
    """Every regular file under `root` (symlinks followed), relative, sorted; the record directory
    and nothing else left out. A GGUF file given alone is its own model."""
    if root.is_file():
        return [root.name]
    if not root.is_dir():
        raise ConfigError(f"model pack {root}: no such directory; give the model directory (or a .gguf file)")
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d != RECORD_DIR]
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_file():
                raise ConfigError(f"model pack {root}: {path} is not a regular file (a broken link?); remove it")
            out.append((rel_dir / name).as_posix())
    return sorted(out)


def _root_and_files(source: Path) -> tuple[Path, list[str]]:
    files = model_files(source)
    return (source.parent if source.is_file() else source), files


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def _pad(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


class _LayoutWriter:
    """Blobs into a tar file, each written once whatever the number of chunks naming it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.written: set[str] = set()

    def _hash_and_write(self, file_hash: Any, data: memoryview) -> None:
        file_hash.update(data)
        self.out.write(data)

    def add_bytes(self, name: str, data: bytes) -> None:
        self.out.write(_header(name, len(data)))
        self.out.write(data)
        self.out.write(_pad(len(data)))

    def add_blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if digest not in self.written:
            self.written.add(digest)
            self.add_bytes("blobs/sha256/" + digest[7:], data)
        return digest

    def stream_chunk(
        self, src: IO[bytes], limit: int, file_hash: Any, buffers: tuple[bytearray, bytearray], pool: ThreadPoolExecutor
    ) -> tuple[str, int]:
        """Up to `limit` bytes of `src` as one blob; (digest, size). `file_hash` sees the same bytes.

        Two buffers in turn: while this thread reads the next one and hashes it for the chunk, a
        worker hashes the previous one for the file and writes it (hashlib and file I/O release the
        GIL), so reading, the two SHA-256s and writing overlap instead of adding up."""
        start = self.out.tell()
        self.out.write(_header(_PLACEHOLDER, 0))
        chunk_hash = hashlib.sha256()
        views = tuple(memoryview(b) for b in buffers)
        size = 0
        turn = 0
        pending: Future[None] | None = None
        try:
            while size < limit:
                view = views[turn]
                n = src.readinto(view[: min(len(view), limit - size)])  # type: ignore[attr-defined]
                if not n:
                    break
                data = view[:n]
                if pending is not None:
                    pending.result()  # the other buffer is written: it may be read into next
                pending = pool.submit(self._hash_and_write, file_hash, data)
                chunk_hash.update(data)
                size += n
                turn ^= 1
        finally:
            if pending is not None:
                pending.result()
        digest = "sha256:" + chunk_hash.hexdigest()
        if size == 0 or digest in self.written:  # the same bytes again (zero padding, a repeated file): drop this copy
            self.out.seek(start)
            self.out.truncate()
            return digest, size
        self.written.add(digest)
        self.out.write(_pad(size))
        end = self.out.tell()
        self.out.seek(start)
        self.out.write(_header("blobs/sha256/" + digest[7:], size))
        self.out.seek(end)
        return digest, size


def pack_model(
    source: Path,
    name: str,
    tag: str,
    out: Path,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: Callable[[str], None] | None = None,
) -> PackedModel:
    """Write `source` (a model directory or one .gguf file) as a model artifact archive at `out`."""
    if chunk_size < 1024 * 1024:
        raise ConfigError(f"--chunk-size {chunk_size}: at least 1M (chunks are layers; millions of them help no one)")
    root, files = _root_and_files(source)
    if not files:
        raise ConfigError(f"model pack {source}: the directory is empty; give a model directory")
    facts = read_facts(root, files)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    entries: list[dict[str, Any]] = []
    layers: list[dict[str, Any]] = []
    buffers = (bytearray(_BUFFER), bytearray(_BUFFER))
    total = 0
    try:
        with partial.open("wb") as fh, ThreadPoolExecutor(max_workers=1) as pool:
            writer = _LayoutWriter(fh)
            writer.add_bytes("oci-layout", OCI_LAYOUT_VERSION)
            for rel in files:
                path = root / rel
                size = path.stat().st_size
                file_hash = hashlib.sha256()
                chunks: list[dict[str, Any]] = []
                with path.open("rb", buffering=0) as src:
                    while True:
                        digest, got = writer.stream_chunk(src, chunk_size, file_hash, buffers, pool)
                        if got == 0:  # the end (an empty file: no layer, only its entry)
                            break
                        chunks.append({"digest": digest, "size": got})
                        layers.append(
                            {
                                "mediaType": CHUNK_MEDIA_TYPE,
                                "digest": digest,
                                "size": got,
                                "annotations": {TITLE: rel, "io.xcforge.model.chunk": str(len(chunks) - 1)},
                            }
                        )
                        if got < chunk_size:
                            break
                written = sum(c["size"] for c in chunks)
                if written != size:
                    raise ConfigError(f"model pack: {path} changed size while it was read ({size} → {written}); retry")
                entries.append({"path": rel, "size": size, "sha256": file_hash.hexdigest(), "chunks": chunks})
                total += size
                if progress:
                    progress(f"packed {rel} ({size / 2**20:.1f} MiB, {len(chunks)} chunk(s))")
            config = {
                "mediaType": CONFIG_MEDIA_TYPE,
                "name": name,
                "tag": tag,
                **facts.as_dict(),
                "total_size": total,
                "chunk_size": chunk_size,
                "files": entries,
                "created_by": f"xcforge {__version__}",
            }
            config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
            config_digest = writer.add_blob(config_bytes)
            manifest = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": MODEL_ARTIFACT_TYPE,
                "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config_bytes)},
                "layers": layers,
                "annotations": {NAME_ANNOTATION: name, "io.xcforge.model.format": facts.format},
            }
            manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
            digest = writer.add_blob(manifest_bytes)
            descriptor = {
                "mediaType": OCI_MANIFEST,
                "artifactType": MODEL_ARTIFACT_TYPE,
                "digest": digest,
                "size": len(manifest_bytes),
                "annotations": {REF_NAME: tag, NAME_ANNOTATION: f"{name}:{tag}"},
            }
            writer.add_bytes("index.json", json.dumps({"schemaVersion": 2, "manifests": [descriptor]}).encode())
            fh.write(b"\0" * (2 * _BLOCK))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(partial, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise EnvironmentProblem(
            f"model pack: cannot write {out} ({exc.strerror or exc}); free space or give --out"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    return PackedModel(out, digest, config, len(layers), total)


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class ModelArtifact:
    """A model artifact's manifest and config, bytes kept (their digests are what was signed)."""

    digest: str
    manifest_bytes: bytes
    config_bytes: bytes

    @property
    def manifest(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.manifest_bytes)
        return doc

    @property
    def config(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.config_bytes)
        return doc


def check_artifact(digest: str, manifest_bytes: bytes, config_bytes: bytes, where: str) -> ModelArtifact:
    """The manifest is the one `digest` names, a model artifact, and its config is the one it names."""
    if "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() != digest:
        raise BundleDamaged(f"{where}: the manifest does not match its digest {digest}; the artifact is damaged")
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError:
        raise BundleDamaged(f"{where}: the manifest is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("artifactType") != MODEL_ARTIFACT_TYPE:
        found = manifest.get("artifactType") if isinstance(manifest, dict) else None
        raise ConfigError(
            f"{where}: not a model artifact (artifactType {found!r}, expected {MODEL_ARTIFACT_TYPE}); "
            "an image is verified with `build.py verify`"
        )
    config_digest = (manifest.get("config") or {}).get("digest")
    if not is_sha256(config_digest) or "sha256:" + hashlib.sha256(config_bytes).hexdigest() != config_digest:
        raise BundleDamaged(f"{where}: the config does not match the manifest's digest {config_digest}")
    return ModelArtifact(digest, manifest_bytes, config_bytes)


def read_archive(archive: Path) -> ModelArtifact:
    if not archive.is_file():
        raise ConfigError(f"{archive}: no such file; give a model archive (model pack writes dist/models/*.oci.tar)")
    try:
        with tarfile.open(archive) as tar:
            layout = _json_member(tar, "index.json", archive)
            descriptor = (layout.get("manifests") or [{}])[0]
            digest = descriptor.get("digest")
            if not is_sha256(digest):
                raise BundleDamaged(f"{archive}: index.json names no manifest digest")
            manifest_bytes = _member(tar, "blobs/sha256/" + digest[7:], archive)
            config = (json.loads(manifest_bytes).get("config") or {}).get("digest", "")
            if not is_sha256(config):
                raise ConfigError(f"{archive}: its manifest has no config digest; not a model artifact")
            config_bytes = _member(tar, "blobs/sha256/" + config[7:], archive)
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise BundleDamaged(f"{archive}: not a readable OCI archive ({exc}); copy it again") from None
    return check_artifact(digest, manifest_bytes, config_bytes, str(archive))


def _member(tar: tarfile.TarFile, name: str, archive: Path) -> bytes:
    try:
        member = tar.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise BundleDamaged(f"{archive}: {name} missing; the archive is incomplete, copy it again")
    return member.read(64 * 1024 * 1024)


def _json_member(tar: tarfile.TarFile, name: str, archive: Path) -> dict[str, Any]:
    doc = json.loads(_member(tar, name, archive))
    if not isinstance(doc, dict):
        raise BundleDamaged(f"{archive}: {name} is not a JSON object")
    return doc


# ------------------------------------------------------------------------------------------ unpack

BlobOpener = Callable[[str], contextlib.AbstractContextManager[IO[bytes]]]


@contextlib.contextmanager
def archive_blobs(archive: Path) -> Iterator[BlobOpener]:
    """A blob opener over the archive's tar members (for unpack_model), as a context."""
    tar = tarfile.open(archive)  # noqa: SIM115 - closed below, when the caller's context ends

    @contextlib.contextmanager
    def open_blob(digest: str) -> Iterator[IO[bytes]]:
        try:
            member = tar.extractfile("blobs/sha256/" + digest[7:])
        except KeyError:
            member = None
        if member is None:
            raise BundleDamaged(f"{archive}: chunk {digest} missing; the archive is incomplete, copy it again")
        yield member

    try:
        yield open_blob
    finally:
        tar.close()


def unpack_model(
    artifact: ModelArtifact,
    open_blob: BlobOpener,
    dest: Path,
    signatures: dict[str, bytes],
    *,
    source: str,
    progress: Callable[[str], None] | None = None,
) -> int:
    """Write every file of the artifact into `dest` (new or empty), each chunk checked against the
    signed manifest's digest as it streams and each file's size, then the record (`.xcforge-model/`).
    Nothing is left behind on failure. Returns the bytes written."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"model unpack {dest}: exists and is not an empty directory; give a new directory")
    config = artifact.config
    files = config.get("files")
    if not isinstance(files, list):
        raise BundleDamaged(f"{source}: the model config lists no files")
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    total = 0
    try:
        for entry in files:
            rel = str(entry.get("path", ""))
            target = (dest / rel).resolve()
            if rel.startswith("/") or ".." in Path(rel).parts or not target.is_relative_to(dest.resolve()):
                raise BundleDamaged(f"{source}: file path {rel!r} leaves the model directory; refused")
            target.parent.mkdir(parents=True, exist_ok=True)
            # Each chunk is checked against its digest in the signed manifest (through the config it
            # names by digest) as it streams: the file is those chunks in that order, so its SHA-256 in
            # the config follows from them and is not computed a second time here (the launcher checks
            # it before serving). Three steps overlap: this thread reads, a worker hashes
            # (ocicore.hashing) and another writes the previous block, syncing as it goes.
            with target.open("wb") as out, ThreadPoolExecutor(max_workers=1) as pool:
                writer = SyncedWriter(out)
                pending: Future[None] | None = None
                for index, chunk in enumerate(entry.get("chunks") or []):
                    got = 0
                    with open_blob(chunk["digest"]) as blob, ThreadedSha256() as chunk_hash:
                        while data := blob.read(_BUFFER):
                            if pending is not None:
                                pending.result()
                            pending = pool.submit(writer.write, data)
                            chunk_hash.update(data)
                            got += len(data)
                        if pending is not None:
                            pending.result()
                            pending = None
                        digest = "sha256:" + chunk_hash.hexdigest()
                    if digest != chunk["digest"] or got != chunk["size"]:
                        raise BundleDamaged(
                            f"{source}: chunk {index} of {rel} ({chunk['digest']}) differs from the signed "
                            "manifest; nothing was unpacked, copy the artifact again"
                        )
                writer.sync()
            if target.stat().st_size != entry.get("size"):
                raise BundleDamaged(f"{source}: {rel} differs from the signed config; nothing was unpacked")
            total += int(entry["size"])
            if progress:
                progress(f"unpacked {rel} ({entry['size'] / 2**20:.1f} MiB)")
        write_record(dest, artifact, signatures)
    except OSError as exc:
        _remove_unpacked(dest, created)
        raise EnvironmentProblem(
            f"model unpack {dest}: cannot write {getattr(exc, 'filename', None) or 'the files'} "
            f"({exc.strerror or exc}); free space or give another directory"
        ) from None
    except BaseException:
        _remove_unpacked(dest, created)
        raise
    return total


def _remove_unpacked(dest: Path, created: bool) -> None:
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in list(dest.iterdir()):
        shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)


def write_record(dest: Path, artifact: ModelArtifact, signatures: dict[str, bytes]) -> Path:
    """`.xcforge-model/`: manifest.json and config.json (the signed bytes), signatures/<scheme>.json
    (the detached-signature documents signing.store writes), digest. What the launcher verifies."""
    record = dest / RECORD_DIR
    (record / "signatures").mkdir(parents=True, exist_ok=True)
    (record / "manifest.json").write_bytes(artifact.manifest_bytes)
    (record / "config.json").write_bytes(artifact.config_bytes)
    (record / "digest").write_text(artifact.digest + "\n", encoding="ascii")
    for scheme, doc in signatures.items():
        (record / "signatures" / f"{scheme}.json").write_bytes(doc)
    return record


def summary_lines(artifact: ModelArtifact) -> list[str]:
    config = artifact.config
    quant = config.get("quantization") or {}
    q = ", ".join(f"{k}={v}" for k, v in quant.items()) if quant else "none"
    files = config.get("files") or []
    chunks = sum(len(f.get("chunks") or []) for f in files)
    return [
        f"model        {config.get('name')}:{config.get('tag')}",
        f"digest       {artifact.digest}",
        f"format       {config.get('format')}",
        f"architecture {config.get('architecture')}",
        f"parameters   {config.get('parameters'):,}",
        f"dtype        {config.get('dtype')}",
        f"quantization {q}",
        f"size         {int(config.get('total_size') or 0) / 2**20:.1f} MiB in {len(files)} file(s), {chunks} chunk(s) "
        f"of at most {int(config.get('chunk_size') or 0) / 2**20:.0f} MiB",
    ]


def read_bytes_io(data: bytes) -> IO[bytes]:
    return io.BytesIO(data)
