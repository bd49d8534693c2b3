"""`bundle` and `import`: signed transfers into networks without internet (xcforge/transfer/)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xcforge.commands._audit import add_audit, open_audit
from xcforge.commands._keys import add_private_keys, add_public_keys
from xcforge.errors import ConfigError, EnvironmentProblem
from xcforge.sign import keys

if TYPE_CHECKING:
    from xcforge.transfer.collect import Source


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser | None = None
) -> None:
    parents = [common] if common is not None else []
    bundle = subparsers.add_parser(
        "bundle", parents=parents, help="write one signed transfer of images, signatures and attestations"
    )
    bundle.add_argument("images", metavar="IMAGE@DIGEST", nargs="*", help="default: every target of the last build")
    bundle.add_argument("--target", action="append", default=[], help="a target of the last build (repeatable)")
    bundle.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="REF@DIGEST",
        help="also carry this pushed model artifact (build.py model pack --push; docs/models.md), repeatable",
    )
    bundle.add_argument("--report", type=Path, default=Path("dist"), help="directory holding report.json")
    bundle.add_argument("--out", type=Path, default=Path("dist/bundle"), help="FILE[.tar] or a directory")
    add_private_keys(bundle, "to sign the bundle's manifest with", distid=True)
    bundle.add_argument("--chunk-size", help="split into chunks of this size (e.g. 4G, 700M) for media limits")
    bundle.add_argument("--since", type=Path, metavar="BUNDLE", help="a delta: leave out blobs BUNDLE carried")
    bundle.add_argument("--force", action="store_true", help="replace an existing bundle of the same name")
    bundle.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    bundle.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(bundle)
    bundle.set_defaults(func=run_bundle)

    imp = subparsers.add_parser("import", parents=parents, help="verify a bundle whole, then publish all of it")
    imp.add_argument("bundle", type=Path, metavar="BUNDLE", help="BUNDLE.tar, BUNDLE.chunks.json or any chunk")
    where = imp.add_mutually_exclusive_group()
    where.add_argument("--registry", help="the inner registry (host[:port]) to push to, by digest")
    where.add_argument("--docker", action="store_true", help="load into the local docker engine instead")
    add_public_keys(imp, "the sender's")
    imp.add_argument(
        "--rewrite", action="append", default=[], metavar="OLD=NEW", help="repository path prefix (Harbor projects)"
    )
    imp.add_argument("--check-only", action="store_true", help="verify the bundle, publish nothing")
    imp.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    imp.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(imp)
    imp.set_defaults(func=run_import)


def _sources(args: argparse.Namespace) -> list[Source]:
    from ocicore.registry import Reference
    from xcforge.report.results import load_results
    from xcforge.transfer.collect import Source

    sources = []
    for text in args.images:
        ref = Reference.parse(text)
        if ref.digest is None:
            raise ConfigError(f"bundle {text}: a tag, not a digest; pass {ref.name}@sha256:... (what was signed)")
        sources.append(Source(ref, (ref.tag,) if ref.tag else ()))
    sources += _models(args.model)
    only_models = args.model and not (args.report / "report.json").exists()
    if (args.images or only_models) and not args.target:
        return sources
    results = {r.target: r for r in load_results(args.report)}
    wanted = args.target or [name for name, r in results.items() if r.status == "built"]
    for name in wanted:
        result = results.get(name)
        if result is None or not result.digest:
            raise ConfigError(
                f"bundle --target {name}: no built digest in {args.report / 'report.json'}; build it first"
            )
        if not result.output.pushes:
            raise ConfigError(
                f"bundle --target {name}: the last build wrote an archive, not a registry image; "
                "build with --push (the bundle reads images and their signatures from the registry)"
            )
        ref = Reference.parse(f"{result.image_repo}@{result.digest}")
        tags = tuple(tag for r in result.refs if (tag := Reference.parse(r).tag))
        sources.append(Source(ref, tags, name))
    return sources


def _models(refs: list[str]) -> list[Source]:
    """`--model REF@DIGEST`: a model artifact travels as an image does (its chunks are its blobs)."""
    from ocicore.registry import Reference
    from xcforge.transfer.collect import Source

    out = []
    for text in refs:
        ref = Reference.parse(text)
        if ref.digest is None:
            raise ConfigError(
                f"bundle --model {text}: a tag, not a digest; pass {ref.name}@sha256:... "
                f"(`build.py model inspect {text}` prints it)"
            )
        out.append(Source(ref, (ref.tag,) if ref.tag else ()))
    return out


def run_bundle(args: argparse.Namespace) -> int:
    from xcforge.transfer.archive import parse_size
    from xcforge.transfer.bundle import write_bundle

    chunk_size = parse_size(args.chunk_size) if args.chunk_size else None
    if args.since is not None and not args.since.exists() and not args.since.with_suffix(".chunks.json").exists():
        raise ConfigError(f"--since {args.since}: no such bundle; give the .tar or .chunks.json of the earlier bundle")
    sm2 = keys.load_sm2_signing_key(args.sm2_key)
    cosign = keys.load_cosign_signing_key(args.cosign_key)
    audit = open_audit(args)
    written = write_bundle(
        _sources(args),
        args.out,
        sm2_key=sm2,
        cosign_key=cosign,
        sm2_dist_id=args.sm2_distid.encode(),
        chunk_size=chunk_size,
        since=args.since,
        insecure=args.insecure,
        force=args.force,
    )
    lines = written.lines()
    print("\n".join(lines))
    if audit is not None:
        audit.record(
            "bundle",
            digest="sha256:" + written.manifest_sha256,
            subject=f"bundle {written.manifest.name}",
            details={"images": ",".join(f"{i['repository']}@{i['digest']}" for i in written.manifest.images)},
        )
    _outputs(args.json, lines, {
        "bundle": written.manifest.name,
        "manifest_sha256": written.manifest_sha256,
        "files": [str(p) for p in written.files],
        "size": written.size,
        "carried_bytes": written.carried_bytes,
        "omitted_bytes": written.omitted_bytes,
        "images": written.manifest.images,
        "tags": [t["tag"] for t in written.manifest.tags],
        "base": written.manifest.base,
        "keys": written.manifest.keys,
    })  # fmt: skip
    return 0


def run_import(args: argparse.Namespace) -> int:
    from xcforge.transfer.importer import Rewrite, check_bundle, import_to_docker, import_to_registry

    if not (args.registry or args.docker or args.check_only):
        raise ConfigError("import: say where to: --registry HOST[:PORT] (the inner registry) or --docker")
    rewrites = [Rewrite.parse(text) for text in args.rewrite]
    if args.docker and shutil.which(os.environ.get("DOCKER", "docker")) is None:
        raise EnvironmentProblem("import --docker: no docker CLI on PATH; install Docker or import into a --registry")
    sm2_keys = keys.public_keys(args.sm2_key, keys.SM2_KEY_ENV, "sm2")
    cosign_keys = keys.public_keys(args.cosign_key, keys.COSIGN_KEY_ENV, "cosign")
    audit = open_audit(args)
    checked = check_bundle(
        args.bundle, sm2_keys=sm2_keys, cosign_keys=cosign_keys, sm2_dist_id=args.sm2_distid.encode()
    )
    if args.check_only:
        print("\n".join(checked.lines))
        _outputs(args.json, checked.lines, {"bundle": checked.manifest.name, "verified": True})
        return 0
    if args.docker:
        result = import_to_docker(checked, rewrites=rewrites, audit=audit, docker=os.environ.get("DOCKER", "docker"))
    else:
        result = import_to_registry(checked, args.registry, rewrites=rewrites, insecure=args.insecure, audit=audit)
    print("\n".join(result.lines))
    _outputs(args.json, result.lines, {
        "bundle": result.bundle,
        "manifest_sha256": checked.manifest_sha256,
        "destination": result.destination,
        "images": result.images,
        "blobs_pushed": result.blobs_pushed,
        "bytes_pushed": result.bytes_pushed,
        "blobs_present": result.blobs_present,
        "manifests_created": result.manifests_created,
        "tags": result.tags,
    })  # fmt: skip
    return 0


def _outputs(path: Path | None, lines: list[str], doc: dict[str, Any]) -> None:
    from xcforge.console import write_step_summary

    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    write_step_summary("```\n" + "\n".join(lines) + "\n```\n")
