"""`model pack|inspect|unpack|sign|verify`: models as signed OCI artifacts (xcforge/model/, docs/models.md).

Signing and verifying go through the images' own code: `xcforge.sign.stage.sign_subject` (SM2 +
cosign, audit log) and `signing.verify.verify` over the artifact's SignatureStore (the files beside
its archive, or its registry), with the model manifest's digest as the subject. The artifact has
no SBOM or provenance, so no attestations are made or asked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from xcforge.commands._audit import add_audit, open_audit
from xcforge.commands._keys import add_identities, add_private_keys, add_public_keys, trust_from_args
from xcforge.errors import ConfigError
from xcforge.sign import keys

if TYPE_CHECKING:
    from ocicore.registry import Reference
    from signing.store import SignatureStore
    from xcforge.model.artifact import BlobOpener, ModelArtifact

_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser | None = None
) -> None:
    parents = [common] if common is not None else []
    model = subparsers.add_parser("model", parents=parents, help="models as signed OCI artifacts (docs/models.md)")
    sub = model.add_subparsers(dest="model_command", metavar="ACTION", parser_class=type(model))

    pack = sub.add_parser("pack", parents=parents, help="a model directory (or .gguf) → a chunked OCI artifact")
    pack.add_argument("source", type=Path, metavar="DIR", help="model directory (safetensors + tokenizer) or a .gguf")
    pack.add_argument("--name", required=True, metavar="NAME:TAG", help="artifact name, e.g. qwen2.5-0.5b:1.0")
    pack.add_argument("--out", type=Path, help="archive path (default DIST/models/NAME-TAG.model.oci.tar)")
    pack.add_argument("--dist", type=Path, default=Path("dist"), help="output directory (default dist)")
    pack.add_argument("--chunk-size", default="512M", help="largest chunk (one layer each), e.g. 512M, 1G")
    pack.add_argument("--registry", help="registry/path to push to (with --push), e.g. 127.0.0.1:5000/models")
    pack.add_argument("--push", action="store_true", help="push the artifact to --registry, by digest, tag last")
    add_private_keys(pack, "to sign the artifact with", distid=True)
    pack.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    add_audit(pack)
    pack.set_defaults(func=run_pack)

    inspect = sub.add_parser("inspect", parents=parents, help="what a model artifact holds (archive or REF)")
    inspect.add_argument("source", metavar="ARCHIVE|REF", help="model archive, or registry/repo@sha256:… or :tag")
    inspect.add_argument("--json", action="store_true", help="the signed config as JSON")
    inspect.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    inspect.set_defaults(func=run_inspect)

    unpack = sub.add_parser("unpack", parents=parents, help="write a model artifact's files, every chunk verified")
    unpack.add_argument("source", metavar="ARCHIVE|REF@DIGEST")
    unpack.add_argument("dest", type=Path, metavar="DIR", help="a new (or empty) directory")
    _trust_flags(unpack, "verify the signatures first with a trusted")
    unpack.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(unpack)
    unpack.set_defaults(func=run_unpack)

    sign = sub.add_parser("sign", parents=parents, help="sign a model artifact (archive, or REF@DIGEST)")
    sign.add_argument("source", metavar="ARCHIVE|REF@DIGEST")
    add_private_keys(sign, "to sign with", distid=True)
    sign.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(sign)
    sign.set_defaults(func=run_sign)

    verify = sub.add_parser("verify", parents=parents, help="verify a model artifact's signatures")
    verify.add_argument("source", metavar="ARCHIVE|REF@DIGEST")
    _trust_flags(verify, "a trusted")
    verify.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(verify)
    verify.set_defaults(func=run_verify)
    model.set_defaults(func=lambda args: _missing_action())


def _missing_action() -> int:
    raise ConfigError("model: choose an action (pack, inspect, unpack, sign, verify)")


def _trust_flags(parser: argparse.ArgumentParser, whose: str) -> None:
    add_public_keys(parser, whose)
    add_identities(parser)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ sources


def _is_archive(source: str) -> bool:
    path = Path(source)
    return path.suffix == ".tar" or path.exists() or source.startswith(("./", "/", "../"))


def _reference(source: str, *, digest_required: bool) -> Reference:
    from ocicore.registry import Reference

    ref = Reference.parse(source)
    if digest_required and ref.digest is None:
        raise ConfigError(
            f"{source}: a tag, not a digest; pass {ref.name}@sha256:<digest> (`build.py model inspect {source}` "
            "prints it): a tag can move between the check and the use"
        )
    return ref


def _archive_identity(artifact: ModelArtifact) -> str:
    """The name an archive's model is signed for: its --name, as images' archives use theirs."""
    from ocicore.registry import Reference

    return Reference.parse(str(artifact.config.get("name") or "model")).name


def _store(artifact: ModelArtifact, archive: Path | None, ref: Reference | None, insecure: bool) -> SignatureStore:
    """Where the artifact's signatures are: beside its archive, or next to it in the registry."""
    from signing.store import open_store

    return open_store(ref or _archive_identity(artifact), archive, insecure=insecure)


def _load(source: str, insecure: bool) -> tuple[ModelArtifact, Path | None, Reference | None]:
    """(artifact, archive, reference): from an archive file, or from the registry."""
    from ocicore.registry import RegistryClient
    from xcforge.model.artifact import check_artifact, read_archive

    if _is_archive(source):
        path = Path(source)
        return read_archive(path), path, None
    ref = _reference(source, digest_required=False)
    client = RegistryClient(ref.registry, insecure=insecure)
    digest = ref.digest or client.resolve(ref.repository, ref.tag or "latest")
    manifest = client.get_manifest(ref.repository, digest)
    config_digest = (manifest.json().get("config") or {}).get("digest", "")
    config = client.get_blob(ref.repository, config_digest, max_size=64 * 1024 * 1024) if config_digest else b""
    return check_artifact(digest, manifest.data, config, f"{ref.name}@{digest}"), None, ref.with_digest(digest)


# ------------------------------------------------------------------------------------------ commands


def run_pack(args: argparse.Namespace) -> int:
    from ocicore.push import push_layout
    from xcforge.model.artifact import pack_model, read_archive, summary_lines
    from xcforge.transfer.archive import parse_size

    name, sep, tag = args.name.rpartition(":")
    if not sep or "/" in tag:
        name, tag = args.name, ""
    if not _NAME.match(name or "") or not _TAG.match(tag):
        raise ConfigError(
            f"model pack --name {args.name!r}: give NAME:TAG in lower case, e.g. --name qwen2.5-0.5b-instruct:1.0"
        )
    if args.push and not args.registry:
        raise ConfigError("model pack --push: give --registry R (e.g. 127.0.0.1:5000/models) to push to")
    chunk_size = parse_size(args.chunk_size)
    signing_keys = _signing_keys(args, required=False)
    audit = open_audit(args)
    out = args.out or args.dist / "models" / f"{name.replace('/', '-')}-{tag}.model.oci.tar"
    if not args.source.exists():
        raise ConfigError(f"model pack {args.source}: no such directory; give the model directory (or a .gguf file)")
    packed = pack_model(args.source, name, tag, out, chunk_size=chunk_size, progress=_say)
    artifact = read_archive(packed.archive)
    for line in summary_lines(artifact):
        print(line)
    print(f"archive      {packed.archive}")
    pushed = None
    if args.push:
        repository = f"{args.registry.rstrip('/')}/{name}"
        push_layout(packed.archive, repository, [tag], progress=_say)
        pushed = f"{repository}@{packed.digest}"
        print(f"pushed       {pushed} (tag {tag})")
    if audit is not None:
        audit.record(
            "model-pack",
            digest=packed.digest,
            subject=pushed or str(packed.archive),
            details={"name": f"{name}:{tag}", "bytes": str(packed.bytes), "chunks": str(packed.chunks)},
        )
    if signing_keys is not None:
        _sign(artifact, packed.archive if pushed is None else None, pushed, signing_keys, audit, insecure=False)
    if args.json:
        result = {"archive": str(packed.archive), "digest": packed.digest, "pushed": pushed, "config": packed.config}
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from xcforge.model.artifact import summary_lines

    artifact, _, _ = _load(args.source, args.insecure)
    if args.json:
        print(json.dumps({"digest": artifact.digest, "config": artifact.config}, indent=2))
        return 0
    for line in summary_lines(artifact):
        print(line)
    for entry in artifact.config.get("files") or []:
        print(f"  {entry['sha256'][:16]}  {entry['size']:>14,}  {entry['path']}  ({len(entry['chunks'])} chunk(s))")
    return 0


def _signing_keys(args: argparse.Namespace, *, required: bool) -> object | None:
    from xcforge.sign.stage import SigningKeys

    signing_keys = SigningKeys(
        sm2=keys.load_sm2_signing_key(args.sm2_key),
        cosign=keys.load_cosign_signing_key(args.cosign_key),
        sm2_dist_id=args.sm2_distid.encode("utf-8"),
    )
    if not signing_keys.any_key:
        if required:
            raise ConfigError(
                f"model sign: give --sm2-key and/or --cosign-key (or ${keys.SM2_KEY_ENV} / ${keys.COSIGN_KEY_ENV})"
            )
        return None
    return signing_keys


def _sign(
    artifact: ModelArtifact,
    archive: Path | None,
    pushed: str | None,
    signing_keys: object,
    audit: object,
    *,
    insecure: bool,
) -> None:
    from signing.audit import AuditLog
    from xcforge.sign.audit_log import checkpoint
    from xcforge.sign.stage import SigningKeys, SignSubject, sign_subject

    assert isinstance(signing_keys, SigningKeys)
    assert audit is None or isinstance(audit, AuditLog)
    repository = pushed.split("@", 1)[0] if pushed is not None else _archive_identity(artifact)
    subject = SignSubject(repository=repository, digests=[artifact.digest], archive=archive, insecure=insecure)
    for record in sign_subject(subject, signing_keys, audit):
        print(record.line())
    checkpoint(audit, signing_keys)


def run_sign(args: argparse.Namespace) -> int:
    signing_keys = _signing_keys(args, required=True)
    if not _is_archive(args.source):
        _reference(args.source, digest_required=True)
    audit = open_audit(args)
    artifact, archive, ref = _load(args.source, args.insecure)
    _sign(artifact, archive, str(ref) if ref else None, signing_keys, audit, insecure=args.insecure)
    return 0


def _verify(args: argparse.Namespace, artifact: ModelArtifact, archive: Path | None, ref: Reference | None) -> None:
    """The images' verification (xcforge.sign.check) of the artifact's manifest digest; VerificationFailed
    when a scheme given a key has no valid signature by one of its keys."""
    from xcforge.sign.check import check_signatures

    trust = trust_from_args(args)
    if not trust.sm2_keys and not trust.cosign_keys:
        raise ConfigError("model verify: give --sm2-key and/or --cosign-key (the sender's public keys)")
    store = _store(artifact, archive, ref, args.insecure)
    check_signatures(store, artifact.digest, trust, attestations=False, audit=lambda: open_audit(args))


def run_verify(args: argparse.Namespace) -> int:
    if not _is_archive(args.source):
        _reference(args.source, digest_required=True)
    artifact, archive, ref = _load(args.source, args.insecure)
    _verify(args, artifact, archive, ref)
    return 0


def _signature_docs(
    artifact: ModelArtifact, archive: Path | None, ref: Reference | None, insecure: bool
) -> dict[str, bytes]:
    """The detached-signature documents (signing.store's format) that go into `.xcforge-model/`."""
    from signing.store import FORMATS

    store = _store(artifact, archive, ref, insecure)
    docs = {scheme: store.signature_document(artifact.digest, scheme) for scheme in FORMATS}
    return {scheme: doc for scheme, doc in docs.items() if doc is not None}


@contextlib.contextmanager
def _blobs(archive: Path | None, ref: Reference | None, insecure: bool) -> Iterator[BlobOpener]:
    from xcforge.model.artifact import archive_blobs

    if archive is not None:
        with archive_blobs(archive) as opener:
            yield opener
        return
    import tempfile

    from ocicore.registry import RegistryClient

    assert ref is not None
    client = RegistryClient(ref.registry, insecure=insecure)

    @contextlib.contextmanager
    def open_blob(digest: str) -> Iterator[object]:
        # download_blob checks the digest as it writes; the spool keeps memory bounded.
        with tempfile.TemporaryFile() as spool:
            client.download_blob(ref.repository, digest, spool)
            spool.seek(0)
            yield spool

    yield open_blob  # type: ignore[misc]


def run_unpack(args: argparse.Namespace) -> int:
    from xcforge.model.artifact import unpack_model

    if not _is_archive(args.source):
        _reference(args.source, digest_required=True)
    if args.dest.exists() and (not args.dest.is_dir() or any(args.dest.iterdir())):
        raise ConfigError(f"model unpack {args.dest}: exists and is not an empty directory; give a new directory")
    artifact, archive, ref = _load(args.source, args.insecure)
    if args.sm2_key or args.cosign_key:
        _verify(args, artifact, archive, ref)
    else:
        _say("note: no --sm2-key/--cosign-key: chunks are checked against the manifest, signatures are not")
    docs = _signature_docs(artifact, archive, ref, args.insecure)
    if not docs:
        _say("note: the artifact carries no signatures: the launcher will refuse it when given a key")
    with _blobs(archive, ref, args.insecure) as opener:
        total = unpack_model(artifact, opener, args.dest, docs, source=args.source, progress=_say)
    print(
        f"unpacked {artifact.digest} into {args.dest} ({total / 2**20:.1f} MiB), record in {args.dest}/.xcforge-model/"
    )
    audit = open_audit(args)
    if audit is not None:
        audit.record("model-unpack", digest=artifact.digest, subject=args.source, details={"dest": str(args.dest)})
    return 0
