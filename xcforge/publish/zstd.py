"""The zstd variant of a pushed image: every gzip layer recompressed with zstd, in the registry.

vLLM publishes each image twice, gzip under its tag and zstd under `<tag>-zstd`: zstd layers are
smaller and decompress several times faster (upstream: 8.66 → 7.00 GB, pull to first answer
144.5 → 118.0 s), but a zstd-only tag strands clients that cannot read zstd layers (Docker < 23,
containerd < 1.5, older registries' tooling). So the gzip image stays what the tags name, and this
module writes its variant next to it, after the gzip image is pushed:

* each platform manifest's `tar+gzip` layers are streamed out of the registry, gunzipped, hashed
  (the sha256 of the tar must be the config's diff_id for that layer, else the layer is refused)
  and zstd-compressed into a spool file on disk (never a whole layer in memory), which is checked
  by decompressing it again and then pushed as `tar+zstd`;
* the config blob is reused as it is: diff_ids are digests of the uncompressed tars, which the
  recompression does not change;
* each new manifest is the gzip one with new layer descriptors (their annotations kept, plus
  `io.xcforge.zstd.source`: the gzip layer it was made from) and one more annotation,
  `io.xcforge.zstd.variant-of`: the gzip manifest's digest; the new index likewise names the gzip
  index;
* BuildKit's attestation manifests (platform unknown/unknown: SBOM and provenance) stay in the new
  index byte for byte, with their descriptors unchanged: their in-toto statements name the gzip
  manifests as their subjects, and pointing `vnd.docker.reference.digest` at a zstd manifest would
  make the index claim a provenance that its statement does not make (rewriting them would need a
  provenance of the transcode, which BuildKit did not build). Pulling clients skip unknown/unknown
  entries; the zstd manifests name their gzip source, whose attestations cover the same files;
* everything is pushed by digest (blobs, manifests, index) and the `-zstd` tags are written last,
  so a failure leaves no tag pointing at a half-made variant.

Idempotent: the layers of the variants the `-zstd` tags already point to are read first (their
`io.xcforge.zstd.source` annotations map gzip digests to zstd blobs), and a gzip layer already
transcoded, whose zstd blob is still in the repository and whose diff_id still matches, is reused
without downloading it. The descriptors are written the same way either way, so a second run
writes the same manifests and index (same digests).

Docker schema 2 manifests and docker layer media types are refused with a ConfigError (Docker's
schema has no zstd layer type); foreign layers (with `urls`) and layers already zstd are kept as
they are; uncompressed `tar` layers are compressed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ocicore import media
from ocicore.errors import RegistryError
from ocicore.registry import Manifest, Reference, RegistryClient, RegistryNotFound, canonical_json, parse_reference
from xcforge.bake.result import BuildResult
from xcforge.console import say
from xcforge.errors import KNOWN_ERRORS, BuildFailed, ConfigError, exit_code
from xcforge.publish.options import ZstdOptions
from xcforge.records import VariantPlatform, VariantRecord

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_MEDIA_PREFIX = "application/vnd.docker."

# Level 9, multi-threaded. Decompression speed (what a pull pays) hardly depends on the level; the
# level is paid once, in CI, per new layer. On a 300 MB tar of Python packages (2 cores): gzip -6
# 71.5 MB; zstd 3: 62.0 MB in 1.8 s; 9: 51.1 MB in 6.1 s; 12: 50.3 MB in 11 s; 15: 49.2 MB in 79 s.
# 9 is the knee: most of what higher levels gain, at a few times the cost of 3, and its window
# (4 MiB) is within the 8 MiB every decoder must accept (RFC 8878); levels above 19 need more.
ZSTD_LEVEL = 9
TAG_SUFFIX = "-zstd"
VARIANT_OF = "io.xcforge.zstd.variant-of"  # on the zstd index and manifests: the gzip one's digest
SOURCE_LAYER = "io.xcforge.zstd.source"  # on each zstd layer: the gzip layer it was made from
COMPRESSION = "zstd"

_CHUNK = 1 << 20


@dataclass(frozen=True)
class PlatformVariant:
    platform: str
    digest: str  # the zstd manifest
    source_digest: str  # the gzip manifest
    gzip_bytes: int  # config + layers, as pushed
    zstd_bytes: int


@dataclass(frozen=True)
class ZstdVariant:
    """The zstd variant written for one gzip image."""

    repository: str  # host/path
    source_digest: str
    digest: str
    tags: tuple[str, ...]
    platforms: tuple[PlatformVariant, ...]
    transcoded: int = 0  # layers compressed by this run
    reused: int = 0  # layers found already transcoded
    level: int = ZSTD_LEVEL

    @property
    def refs(self) -> list[str]:
        return [f"{self.repository}:{tag}" for tag in self.tags]

    def record(self) -> VariantRecord:
        """The report's record of the variant (BuildResult.variants)."""
        return VariantRecord(
            compression=COMPRESSION,
            digest=self.digest,
            source_digest=self.source_digest,
            refs=tuple(self.refs),
            level=self.level,
            layers_transcoded=self.transcoded,
            layers_reused=self.reused,
            platforms=tuple(
                VariantPlatform(p.platform, p.digest, p.source_digest, p.gzip_bytes, p.zstd_bytes)
                for p in self.platforms
            ),
        )


# --------------------------------------------------------------------------- one layer


class _Damaged(Exception):
    """A layer's bytes are not what its descriptor and the config say."""


class _HashingWriter:
    """The spool file, counting and hashing what the zstd writer puts into it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.hasher, self.size = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.out.write(data)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()

    @property
    def digest(self) -> str:
        return f"sha256:{self.hasher.hexdigest()}"


class _LayerSink:
    """What the registry client streams a gzip layer into: gunzip → sha256 of the tar (its
    diff_id) → zstd → the spool. Output of the inflater is bounded per call (`_CHUNK`), so a
    highly compressible layer does not balloon in memory either."""

    def __init__(self, spool: IO[bytes], level: int, gzipped: bool) -> None:
        import zstandard

        self.diff = hashlib.sha256()
        self.out = _HashingWriter(spool)
        compressor = zstandard.ZstdCompressor(level=level, threads=-1, write_checksum=True)
        # zstandard writes to it and flushes it, nothing else; its stub asks for a whole IO[bytes].
        self._zstd = compressor.stream_writer(self.out, closefd=False)  # type: ignore[arg-type]  # write/flush only
        self._gunzip = zlib.decompressobj(wbits=31) if gzipped else None
        self._fed = False  # the current gzip member has had input
        self._members = 0

    def _plain(self, data: bytes) -> None:
        if data:
            self.diff.update(data)
            self._zstd.write(data)

    def write(self, chunk: bytes) -> int:
        if self._gunzip is None:
            self._plain(chunk)
            return len(chunk)
        data = chunk
        try:
            while data:
                inflater = self._gunzip
                self._fed = True
                self._plain(inflater.decompress(data, _CHUNK))
                if inflater.eof:  # a gzip file may hold several members, one after the other
                    self._members += 1
                    data = inflater.unused_data
                    self._gunzip, self._fed = zlib.decompressobj(wbits=31), False
                else:
                    data = inflater.unconsumed_tail
        except zlib.error as exc:
            raise _Damaged(f"not valid gzip ({exc})") from None
        return len(chunk)

    def finish(self) -> None:
        if self._gunzip is not None:
            try:
                self._plain(self._gunzip.flush())
            except zlib.error as exc:
                raise _Damaged(f"not valid gzip ({exc})") from None
            if self._fed and not self._gunzip.eof:
                raise _Damaged("truncated gzip (the stream ends inside a member)")
            if self._members == 0:
                raise _Damaged("empty: no gzip member")
        # Ends the frame; closefd=False keeps the spool open.
        self._zstd.close()  # type: ignore[no-untyped-call]  # zstandard's stub leaves close() unannotated

    @property
    def diff_id(self) -> str:
        return f"sha256:{self.diff.hexdigest()}"


def _check_zstd(spool: IO[bytes], diff_id: str) -> None:
    """The blob about to be pushed decompresses to the very tar the config names."""
    import zstandard

    spool.seek(0)
    hasher = hashlib.sha256()
    with zstandard.ZstdDecompressor().stream_reader(spool, closefd=False) as reader:
        while chunk := reader.read(_CHUNK):
            hasher.update(chunk)
    if f"sha256:{hasher.hexdigest()}" != diff_id:
        raise _Damaged("its zstd recompression does not decompress to the same tar")
    spool.seek(0)


def _zstd_descriptor(layer: dict[str, Any], digest: str, size: int) -> dict[str, Any]:
    """The zstd layer's descriptor, written the same way whether made now or reused."""
    annotations = {**(layer.get("annotations") or {}), SOURCE_LAYER: layer["digest"]}
    return {"mediaType": LAYER_ZSTD, "digest": digest, "size": size, "annotations": annotations}


# --------------------------------------------------------------------------- the image


@dataclass
class _Run:
    client: RegistryClient
    repository: str  # path in the registry
    name: str  # host/path, for messages
    level: int
    work_dir: Path | None
    say: Callable[[str], None]
    known: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)  # gzip → (zstd descriptor, diff_id)
    transcoded: int = 0
    reused: int = 0

    def refuse_docker(self, media_type: str, what: str) -> None:
        if media_type.startswith(DOCKER_MEDIA_PREFIX):
            raise ConfigError(
                f"{self.name}@{what}: Docker media type {media_type}; zstd layers exist only in OCI manifests "
                "(Docker's schema 2 has no zstd layer type): build with xcforge (buildx's OCI exporter) or convert "
                "the image with `skopeo copy --format oci` first"
            )

    def layer(self, platform: str, layer: dict[str, Any], diff_id: str) -> dict[str, Any]:
        media_type = layer.get("mediaType", "")
        if "urls" in layer or media_type == LAYER_ZSTD:
            return layer  # foreign layers stay where they are; zstd ones already are
        self.refuse_docker(media_type, f"{layer.get('digest')} ({platform})")
        if media_type not in (LAYER_GZIP, LAYER_TAR):
            raise ConfigError(
                f"{self.name}: layer {layer.get('digest')} of {platform} has media type {media_type!r}; "
                f"only {LAYER_GZIP} (and uncompressed tar) layers can be recompressed"
            )
        gzip_digest = layer["digest"]
        found = self.known.get(gzip_digest)
        if found and found[1] == diff_id and self.client.blob_exists(self.repository, found[0]["digest"]):
            self.reused += 1
            return _zstd_descriptor(layer, found[0]["digest"], found[0]["size"])
        with tempfile.TemporaryFile(prefix="xcforge-zstd-", dir=self.work_dir) as spool:
            sink = _LayerSink(spool, self.level, gzipped=media_type == LAYER_GZIP)
            try:
                self.client.download_blob(self.repository, gzip_digest, sink)
                sink.finish()
                if sink.diff_id != diff_id:
                    raise _Damaged(f"its tar has digest {sink.diff_id}, but the config's diff_id is {diff_id}")
                _check_zstd(spool, diff_id)
            except _Damaged as exc:
                raise BuildFailed(
                    f"{self.name}: layer {gzip_digest} of {platform} is damaged: {exc}; rebuild the image "
                    "(`--force`); nothing was tagged -zstd"
                ) from None
            self.client.push_blob(self.repository, spool, sink.out.digest)
            descriptor = _zstd_descriptor(layer, sink.out.digest, sink.out.size)
        self.transcoded += 1
        self.known[gzip_digest] = (descriptor, diff_id)
        self.say(
            f"zstd {platform}: {gzip_digest[:19]}… {layer.get('size', 0) / 2**20:.1f} MiB → "
            f"{sink.out.digest[:19]}… {sink.out.size / 2**20:.1f} MiB"
        )
        return descriptor

    def manifest(self, digest: str, platform: str) -> tuple[Manifest, PlatformVariant]:
        source = self.client.get_manifest(self.repository, digest)
        self.refuse_docker(source.media_type, digest)
        if source.is_index:
            raise ConfigError(f"{self.name}@{digest}: an index inside an index; only one level is supported")
        doc = source.json()
        config = json.loads(self.client.get_blob(self.repository, doc["config"]["digest"]))
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
        layers = doc.get("layers") or []
        if len(diff_ids) != len(layers):
            raise BuildFailed(
                f"{self.name}@{digest} ({platform}): {len(layers)} layers but {len(diff_ids)} diff_ids in its "
                "config; rebuild the image (`--force`); nothing was tagged -zstd"
            )
        new_layers = [self.layer(platform, layer, diff_id) for layer, diff_id in zip(layers, diff_ids, strict=True)]
        new = {**doc, "layers": new_layers, "annotations": {**(doc.get("annotations") or {}), VARIANT_OF: digest}}
        data = canonical_json(new)
        media_type = source.media_type or media.OCI_MANIFEST
        pushed = self.client.put_manifest(self.repository, _digest(data), data, media_type)
        config_size = int(doc["config"].get("size", 0))
        sizes = (
            config_size + sum(int(x.get("size", 0)) for x in layers),
            config_size + sum(int(x.get("size", 0)) for x in new_layers),
        )
        return Manifest(data, media_type, pushed), PlatformVariant(platform, pushed, digest, *sizes)

    def read_known(self, tags: Iterable[str]) -> None:
        """gzip layer → zstd layer, from the variants the tags point to now (an earlier run)."""
        for tag in tags:
            try:
                top = self.client.get_manifest(self.repository, tag)
            except RegistryNotFound:
                continue
            doc = top.json()
            if VARIANT_OF not in (doc.get("annotations") or {}):
                continue  # not a variant this module wrote: overwritten, nothing read from it
            children = [c["digest"] for c in doc.get("manifests") or [] if not media.is_attestation(c)]
            for digest in children if top.is_index else [top.digest]:
                manifest = self.client.get_manifest(self.repository, digest).json()
                config = json.loads(self.client.get_blob(self.repository, manifest["config"]["digest"]))
                diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
                for layer, diff_id in zip(manifest.get("layers") or [], diff_ids, strict=False):
                    source = (layer.get("annotations") or {}).get(SOURCE_LAYER)
                    if source and layer.get("mediaType") == LAYER_ZSTD:
                        self.known.setdefault(source, (layer, diff_id))


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _platform_name(descriptor: dict[str, Any]) -> str:
    platform = descriptor.get("platform") or {}
    name = f"{platform.get('os', 'linux')}/{platform.get('architecture', '?')}"
    return f"{name}/{platform['variant']}" if platform.get("variant") else name


def variant_tags(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f"{tag}{TAG_SUFFIX}" for tag in tags if not tag.endswith(TAG_SUFFIX)))


def transcode(
    client: RegistryClient,
    repository: str,
    digest: str,
    tags: Iterable[str] = (),
    *,
    level: int = ZSTD_LEVEL,
    work_dir: Path | None = None,
    say: Callable[[str], None] = say,
) -> ZstdVariant:
    """Write the zstd variant of `repository@digest` (an index or one manifest, in `client`'s
    registry) and point `tags` at it (last). Returns what was written."""
    name = f"{client.registry}/{repository}"
    tags = tuple(tags)
    for tag in tags:
        Reference.parse(f"{name}:{tag}")  # a tag too long or malformed is refused before any work
    run = _Run(client, repository, name, level, work_dir, say)
    top = client.get_manifest(repository, digest)
    run.refuse_docker(top.media_type, digest)
    run.read_known(tags)
    if top.is_index:
        doc = top.json()
        children, platforms = [], []
        for child in doc.get("manifests") or []:
            if media.is_attestation(child):
                children.append(child)  # kept as it is: see the module docstring
                continue
            if child.get("mediaType") in media.INDEX_MEDIA_TYPES:
                raise ConfigError(f"{name}@{digest}: an index inside an index; only one level is supported")
            manifest, platform = run.manifest(child["digest"], _platform_name(child))
            children.append({**child, "digest": manifest.digest, "size": len(manifest.data)})
            platforms.append(platform)
        new = {**doc, "manifests": children, "annotations": {**(doc.get("annotations") or {}), VARIANT_OF: digest}}
        data = canonical_json(new)
        media_type = top.media_type or media.OCI_INDEX
        variant_digest = client.put_manifest(repository, _digest(data), data, media_type)
    else:
        config = json.loads(client.get_blob(repository, top.json()["config"]["digest"]))
        manifest, platform = run.manifest(digest, f"{config.get('os', 'linux')}/{config.get('architecture', '?')}")
        data, media_type, variant_digest, platforms = manifest.data, manifest.media_type, manifest.digest, [platform]
    for tag in tags:  # last: until now nothing names the variant
        client.put_manifest(repository, tag, data, media_type)
        say(f"tagged {name}:{tag} → {variant_digest}")
    return ZstdVariant(name, digest, variant_digest, tags, tuple(platforms), run.transcoded, run.reused, level)


# --------------------------------------------------------------------------- the stage


@dataclass(frozen=True)
class PublishOutcome:
    """The publish stage's result for one target: the variants it wrote (as report.json records
    them), notes, and the error that stopped it. The build record is not touched: the report
    stage puts the two together (xcforge/report/results.py, `with_outcomes`)."""

    target: str
    variants: tuple[VariantRecord, ...] = ()
    notes: tuple[str, ...] = ()
    error: str | None = None
    error_code: int = 0

    def variants_over(self, recorded: Iterable[VariantRecord]) -> tuple[VariantRecord, ...]:
        """A record's variants with this outcome's in place of those of the same compression."""
        replaced = {v.compression for v in self.variants}
        return (*(v for v in recorded if v.compression not in replaced), *self.variants)


def _tags_of(result: BuildResult) -> list[str]:
    out = []
    for ref in result.refs:
        parsed = parse_reference(ref)
        if parsed.tag:
            out.append(parsed.tag)
    return out


def why_not_publishable(result: BuildResult) -> str | None:
    """Why this recorded result has no gzip image in a registry to make a variant of (None: it has)."""
    if result.error:
        return f"its build failed ({result.error.splitlines()[0]})"
    if not result.digest:
        return "no digest recorded"
    if not result.output.pushes:
        return "it was built into an archive, not pushed: rebuild with --registry R --push"
    if not result.output.tagged:
        return "it was pushed by digest for `merge` (split CI mode): run `zstd` after `merge` has tagged the index"
    return None


def publish_zstd(
    result: BuildResult, *, level: int = ZSTD_LEVEL, work_dir: Path | None = None, say: Callable[[str], None] = say
) -> PublishOutcome:
    """The zstd variant of one pushed build result; errors are the outcome's, not raised."""
    problem = why_not_publishable(result)
    if problem:
        return PublishOutcome(
            result.target, error=f"zstd: {result.target}: {problem}", error_code=ConfigError.exit_code
        )
    try:
        ref = parse_reference(result.image_repo)
        client = RegistryClient(ref.registry)
        variant = transcode(
            client,
            ref.repository,
            result.digest or "",
            variant_tags(_tags_of(result)),
            level=level,
            work_dir=work_dir,
            say=lambda m: say(f"[{result.target}] {m}"),
        )
    except KNOWN_ERRORS as exc:
        prefix = "zstd variant: " if not isinstance(exc, RegistryError) else "zstd variant: registry: "
        print(f"error: {result.target}: {prefix}{exc.message}", file=sys.stderr)
        return PublishOutcome(result.target, error=f"{prefix}{exc.message}", error_code=exit_code(exc))
    saved = sum(p.gzip_bytes - p.zstd_bytes for p in variant.platforms)
    note = (
        f"zstd variant {variant.digest[:19]}… ({', '.join(variant.tags) or 'untagged'}): "
        f"{variant.transcoded} layer(s) recompressed, {variant.reused} reused, {saved / 2**20:.1f} MiB smaller"
    )
    say(f"[{result.target}] {note}")
    return PublishOutcome(result.target, (variant.record(),), (note,))


def publish_results(results: list[BuildResult], options: ZstdOptions) -> list[PublishOutcome]:
    """The publish stage of `build --push --zstd`: each pushed result's zstd variant."""
    options.work_dir.mkdir(parents=True, exist_ok=True)
    return [publish_zstd(r, work_dir=options.work_dir) for r in results if not r.error and r.digest]


def variant(result: BuildResult, compression: str = COMPRESSION) -> VariantRecord | None:
    return next((v for v in result.variants if v.compression == compression), None)


__all__ = [
    "LAYER_ZSTD",
    "TAG_SUFFIX",
    "VARIANT_OF",
    "ZSTD_LEVEL",
    "PublishOutcome",
    "ZstdVariant",
    "publish_results",
    "publish_zstd",
    "transcode",
    "variant",
    "variant_tags",
    "why_not_publishable",
]
