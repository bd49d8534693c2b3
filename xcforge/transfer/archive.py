"""The bytes of a transfer: one tar stream, written once, optionally cut into chunks for media limits.

Written as a stream (header, data, padding) so that a multi-gigabyte layer goes from the registry
into the bundle without a spool file, and so that chunking is a property of the sink, not of the
tar. Chunks are plain byte ranges `<name>.tar.000`, `.001`, … and `<name>.chunks.json` lists each
one's size and SHA-256: a damaged or missing chunk is named before anything is read from it. The
chunk list itself is not trusted — the signed bundle manifest inside the tar covers every byte that
matters — it only says which piece to copy again.

Reading joins the chunks into one seekable file object, so `tarfile` can index members and the
importer can read the whole bundle twice (verify, then publish) without unpacking it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import queue
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from xcforge.errors import BundleDamaged, ConfigError
from xcforge.files import SyncedWriter, sync_directory, write_synced

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

BLOCK = tarfile.BLOCKSIZE
CHUNKS_SUFFIX = ".chunks.json"
CHUNKS_FORMAT = "xcforge-bundle-chunks/v1"
_COPY = 1 << 20
_DEPTH = 8  # buffers queued for the bundle writer (1 MiB each from a registry download)


def parse_size(text: str, *, flag: str = "--chunk-size") -> int:
    """`700M`, `4G`, `4.7GB`, `1048576` → bytes (binary units: what `split -b` and media labels mean)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = value, ""
    if value and value[-1] in units:
        number, unit = value[:-1], value[-1]
    try:
        size = int(float(number) * units[unit])
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: not a size; give bytes or a number with K/M/G/T (e.g. 4G)") from None
    if size < 1 << 20:
        raise ConfigError(f"{flag} {text!r}: chunks must be at least 1M; give a larger size (e.g. 4G)")
    return size


# ------------------------------------------------------------------------------------------ write


@dataclass
class Chunk:
    file: str
    size: int = 0
    sha256: str = ""


class ChunkedSink(io.RawIOBase):
    """A write-only file that rolls over to a new chunk file every `chunk_size` bytes (or never).

    Files are written under `.partial` names and renamed by `commit()`: an interrupted bundle leaves
    no file that looks complete. `abort()` removes everything written.
    """

    def __init__(self, base: Path, chunk_size: int | None) -> None:
        super().__init__()
        self.base, self.chunk_size = base, chunk_size
        self.chunks: list[Chunk] = []
        self.total = 0
        # Chunked, the chunk list names each chunk's SHA-256 and the whole one's. Unchunked there is no
        # list and nothing to hash: the signed bundle manifest inside covers every byte that matters.
        self._whole = hashlib.sha256() if chunk_size is not None else None
        self._fh: BinaryIO | None = None
        self._hash = hashlib.sha256() if chunk_size is not None else None
        self._synced: SyncedWriter | None = None  # self._fh, on the disk as it is written (xcforge.files)
        self._partials: list[Path] = []
        # Write-behind: the caller (a registry download that hashes what it receives) fills one buffer
        # while this worker writes and hashes the previous one; hashlib and file writes release the GIL,
        # so the two overlap on two cores. At most _DEPTH buffers wait: memory stays bounded.
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=_DEPTH)
        self._failed: BaseException | None = None
        self._worker: threading.Thread | None = None

    def writable(self) -> bool:
        return True

    def _name(self, index: int) -> str:
        return f"{self.base.name}.tar" if self.chunk_size is None else f"{self.base.name}.tar.{index:03d}"

    def _open_next(self) -> None:
        self._close_current()
        chunk = Chunk(self._name(len(self.chunks)))
        path = self.base.parent / (chunk.file + ".partial")
        self._partials.append(path)
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by _close_current
        self._synced = SyncedWriter(self._fh)
        if self._hash is not None:
            self._hash = hashlib.sha256()
        self.chunks.append(chunk)

    def _close_current(self) -> None:
        if self._fh is not None:
            assert self._synced is not None  # opened with self._fh
            self._synced.sync()
            self._fh.close()
            if self._hash is not None:
                self.chunks[-1].sha256 = self._hash.hexdigest()
            self._fh = None

    def write(self, data: ReadableBuffer) -> int:
        """Queue `data` for the worker; bytes are taken as they are, anything mutable is copied first."""
        self._raise_failure()
        piece = data if isinstance(data, bytes) else bytes(data)
        if not piece:
            return 0
        if self._worker is None:
            self._worker = threading.Thread(target=self._drain, name="bundle-writer", daemon=True)
            self._worker.start()
        while True:
            try:
                self._queue.put(piece, timeout=0.5)
                break
            except queue.Full:
                self._raise_failure()
        self.total += len(piece)
        return len(piece)

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._failed is not None:
                continue  # keep taking buffers so that the writer never blocks; the error is raised there
            try:
                self._write_now(item)
            except BaseException as exc:  # handed to the caller by _raise_failure
                self._failed = exc

    def _raise_failure(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _finish_worker(self) -> None:
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None

    def _write_now(self, data: bytes) -> None:
        view = memoryview(data)
        written = 0
        while written < len(view):
            if self._fh is None or (self.chunk_size is not None and self.chunks[-1].size >= self.chunk_size):
                self._open_next()
            assert self._synced is not None  # _open_next opened one
            room = len(view) - written if self.chunk_size is None else self.chunk_size - self.chunks[-1].size
            piece = view[written : written + room]
            self._synced.write(piece)
            if self._hash is not None:
                self._hash.update(piece)
            if self._whole is not None:
                self._whole.update(piece)
            self.chunks[-1].size += len(piece)
            written += len(piece)

    def commit(self) -> list[Path]:
        """Close, rename the chunks to their final names and write the chunk list; the files made."""
        self._finish_worker()
        self._raise_failure()
        self._close_current()
        final: list[Path] = []
        for partial in self._partials:
            target = partial.with_name(partial.name.removesuffix(".partial"))
            os.replace(partial, target)
            final.append(target)
        self._partials = []
        if self.chunk_size is not None:
            index = self.base.parent / (self.base.name + CHUNKS_SUFFIX)
            doc = {
                "format": CHUNKS_FORMAT,
                "bundle": f"{self.base.name}.tar",
                "size": self.total,
                "sha256": self._whole.hexdigest() if self._whole is not None else "",
                "chunks": [chunk.__dict__ for chunk in self.chunks],
            }
            write_synced(index, (json.dumps(doc, indent=2) + "\n").encode())
            final.append(index)
        sync_directory(self.base.parent)  # the renames, too, survive a power cut
        return final

    def abort(self) -> None:
        self._finish_worker()
        with contextlib.suppress(OSError):
            if self._fh is not None:
                self._fh.close()
        self._fh = None
        for path in self._partials:
            with contextlib.suppress(OSError):
                path.unlink()
        self._partials = []


class Sink(Protocol):
    """Where a TarStream goes: a file, a pipe, a ChunkedSink (`write` may return None, as a raw file's may)."""

    def write(self, data: bytes, /) -> int | None: ...


class TarStream:
    """tar members written one after another into a sink, data streamed (no seek, no spool)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def _header(self, name: str, size: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o644, 0  # mtime 0: the same content, the same bytes
        self.sink.write(info.tobuf(format=tarfile.PAX_FORMAT))

    def _pad(self, size: int) -> None:
        if size % BLOCK:
            self.sink.write(b"\0" * (BLOCK - size % BLOCK))

    def add_bytes(self, name: str, data: bytes) -> None:
        self._header(name, len(data))
        self.sink.write(data)
        self._pad(len(data))

    def add_stream(self, name: str, size: int, fill: Callable[[_CountingWriter], object]) -> None:
        """`fill(out)` writes exactly `size` bytes (e.g. a registry download that checks the digest)."""
        self._header(name, size)
        counter = _CountingWriter(self.sink)
        fill(counter)
        if counter.count != size:
            raise BundleDamaged(f"{name}: wrote {counter.count} bytes where its descriptor says {size}")
        self._pad(size)

    def close(self) -> None:
        self.sink.write(b"\0" * (2 * BLOCK))


class _CountingWriter:
    def __init__(self, sink: Sink) -> None:
        self.sink, self.count = sink, 0

    def write(self, data: bytes) -> int:
        self.count += len(data)
        return self.sink.write(data) or len(data)


# ------------------------------------------------------------------------------------------- read


@dataclass
class BundleFiles:
    """Where a bundle's bytes are: one .tar, or its chunks in order."""

    parts: list[Path]
    sizes: list[int] = field(default_factory=list)
    name: str = ""


def locate(path: Path) -> BundleFiles:
    """A bundle given as `X.tar`, `X.chunks.json` or any chunk `X.tar.NNN` → its parts, each checked
    (present, the listed size, the listed SHA-256) before a byte of it is used."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give the bundle's .tar or .chunks.json file")
    name = path.name
    if not name.endswith(CHUNKS_SUFFIX) and name[-4:-3] == "." and name[-3:].isdigit() and ".tar." in name:
        path = path.with_name(name.rsplit(".tar.", 1)[0] + CHUNKS_SUFFIX)
        name = path.name
    if name.endswith(CHUNKS_SUFFIX):
        return _chunked(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such bundle; give the .tar (or .chunks.json) that `build.py bundle` wrote")
    return BundleFiles([path], [path.stat().st_size], name.removesuffix(".tar"))


def _chunked(index: Path) -> BundleFiles:
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
        chunks = doc["chunks"]
        if doc.get("format") != CHUNKS_FORMAT or not isinstance(chunks, list) or not chunks:
            raise ValueError("not a chunk list")
        listed = [(str(c["file"]), int(c["size"]), str(c["sha256"])) for c in chunks]
    except FileNotFoundError:
        raise ConfigError(f"{index}: no such chunk list; give the .chunks.json that `build.py bundle` wrote") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BundleDamaged(f"{index}: not a bundle chunk list ({exc}); copy it again from the source") from None
    parts, sizes = [], []
    for number, (file, size, sha256) in enumerate(listed, 1):
        part = index.parent / Path(file).name  # a name only: a chunk list cannot point outside its folder
        where = f"chunk {number} of {len(listed)} ({part.name})"
        if not part.exists():
            raise BundleDamaged(f"{where} is missing; copy it next to {index.name}")
        if part.stat().st_size != size:
            raise BundleDamaged(
                f"{where} has {part.stat().st_size} bytes, the chunk list says {size}; copy that chunk again"
            )
        if _file_sha256(part) != sha256:
            raise BundleDamaged(f"{where} is corrupt (its SHA-256 differs from the chunk list); copy that chunk again")
        parts.append(part)
        sizes.append(size)
    return BundleFiles(parts, sizes, index.name.removesuffix(CHUNKS_SUFFIX))


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_COPY), b""):
            digest.update(block)
    return digest.hexdigest()


class JoinedReader(io.RawIOBase):
    """The parts of a bundle as one seekable, read-only file."""

    def __init__(self, files: BundleFiles) -> None:
        super().__init__()
        self.files = files
        self._handles = [open(p, "rb") for p in files.parts]  # noqa: SIM115 - closed in close()
        self._starts: list[int] = []
        offset = 0
        for size in files.sizes:
            self._starts.append(offset)
            offset += size
        self._size, self._pos = offset, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            index = max(i for i, start in enumerate(self._starts) if start <= self._pos)
            handle = self._handles[index]
            handle.seek(self._pos - self._starts[index])
            room = min(len(view) - done, self._starts[index] + self.files.sizes[index] - self._pos)
            got = handle.readinto(view[done : done + room])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
        super().close()


class MemberReader:
    """One tar member's bytes through file handles of its own, so that several threads can each read
    (and hash, and upload) a different member of the same bundle at once. Iterating yields blocks of
    1 MiB, and len() is the member's size: requests then sends it with a Content-Length in those blocks
    (a file object would be read 16 KiB at a time by urllib3)."""

    def __init__(self, files: BundleFiles, member: tarfile.TarInfo) -> None:
        self._joined = JoinedReader(files)
        self._joined.seek(member.offset_data)
        self.size = self._left = member.size

    def read(self, size: int = -1) -> bytes:
        want = self._left if size < 0 else min(size, self._left)
        data = self._joined.read(want) or b""
        self._left -= len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while block := self.read(_COPY):
            yield block

    def __len__(self) -> int:
        return self.size

    def close(self) -> None:
        self._joined.close()

    def __enter__(self) -> MemberReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def open_tar(files: BundleFiles) -> Iterator[tarfile.TarFile]:
    reader = io.BufferedReader(JoinedReader(files), buffer_size=_COPY)
    try:
        with tarfile.open(fileobj=reader, mode="r:") as tar:
            yield tar
    except tarfile.TarError as exc:
        raise BundleDamaged(f"{files.parts[0]}: not a readable tar ({exc}); copy the bundle again") from None
    finally:
        reader.close()
