"""`sbom`: a readable summary of an image's SBOM (package counts by ecosystem, engine versions).

Reads the SBOM attached next to each platform manifest in the registry (`sha256-<hex>.sbom`), the
files beside an OCI archive (`--archive`), or a CycloneDX file given directly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xcforge.attest import sbom
from xcforge.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "sbom",
        parents=[common],
        help="summarize the SBOM of IMAGE@DIGEST, an archive's SBOMs, or a .cdx.json file",
        description="Print package counts by ecosystem and the engine, torch and plugin versions.",
    )
    parser.add_argument("image", metavar="IMAGE@DIGEST|FILE.cdx.json", nargs="?")
    parser.add_argument("--archive", type=Path, help="read the SBOMs written beside this OCI archive")
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    parser.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    parser.set_defaults(func=run)


def _documents(args: argparse.Namespace) -> list[tuple[str, bytes]]:
    """(where, CycloneDX bytes) for each SBOM the arguments name."""
    if (args.image is None) == (args.archive is None):
        raise ConfigError("sbom: give IMAGE@DIGEST, a .cdx.json file, or --archive ARCHIVE (one of them)")
    if args.archive is not None:
        return _archive_documents(args.archive)
    path = Path(args.image)
    if args.image.endswith(sbom.SUFFIX) or (path.exists() and "@" not in args.image):
        try:
            return [(str(path), path.read_bytes())]
        except OSError as exc:
            raise ConfigError(
                f"sbom: {path}: {exc.strerror or exc}; give a CycloneDX JSON file or IMAGE@DIGEST"
            ) from None
    return _registry_documents(args.image, insecure=args.insecure)


def _archive_documents(archive: Path) -> list[tuple[str, bytes]]:
    from ocicore.layout import attestation_dir

    if not archive.is_file():
        raise ConfigError(f"sbom --archive {archive}: not a file; give the .oci.tar a build wrote")
    directory = attestation_dir(archive)
    files = sorted(directory.glob(f"*{sbom.SUFFIX}"))
    if not files:
        raise ConfigError(f"sbom --archive: no SBOMs in {directory}; rebuild the target (build writes them)")
    return [(str(f), f.read_bytes()) for f in files]


def _registry_documents(image: str, *, insecure: bool) -> list[tuple[str, bytes]]:
    from ocicore.registry import Reference, RegistryClient
    from signing.attest import read_sbom
    from signing.verify import registry_platform_digests

    ref = Reference.parse(image)
    if ref.digest is None:
        raise ConfigError(f"sbom: {image} has no digest; give IMAGE@sha256:<64 hex> (tags can move)")
    client = RegistryClient(ref.registry, insecure=insecure)
    out = []
    for digest, platform in registry_platform_digests(client, ref.repository, ref.digest).items():
        data = read_sbom(client, ref.repository, digest)
        if data is None:
            raise ConfigError(
                f"sbom: no SBOM attached to {ref.name}@{digest} ({platform}); build and push it with xcforge"
            )
        out.append((f"{ref.name}@{digest}", data))
    return out


def run(args: argparse.Namespace) -> int:
    summaries = [sbom.summarize(data, where=where) for where, data in _documents(args)]
    if args.json:
        json.dump([vars(s) for s in summaries], sys.stdout, indent=2)
        print()
        return 0
    for summary in summaries:
        for line in summary.lines():
            print(line)
    return 0
