#!/usr/bin/env python3
"""Verify an xcforge transfer bundle with nothing but Python 3 (standard library) and openssl.

    python3 verify-bundle.py BUNDLE.tar|BUNDLE.chunks.json --sm2-key SENDER-sm2.pub [--cosign-key SENDER-cosign.pub]

Checks, in this order, and stops at the first failure (exit 1; exit 2 for bad arguments):
1. each chunk (if chunked) has the size and SHA-256 its chunk list gives;
2. the bundle manifest (xcforge-bundle.json, the first file) is signed by the key(s) you name:
   SM2 with SM3 and the GB/T 32918 default ID via `openssl pkeyutl -verify -rawin -digest sm3`,
   ECDSA P-256 (cosign's blob format) via `openssl dgst -sha256 -verify`;
3. every other file's SHA-256 equals the manifest's (a blob's name is its digest), none is missing
   and none is extra; every manifest's children are carried or listed as already at the far side.

It reads the bundle as one stream and writes nothing but temporary files for openssl. It is the
same check `build.py import` makes before it publishes; this copy is for the machine that has no
xcforge (and is itself listed, hashed and signed in the manifest it checks).
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import BinaryIO

MANIFEST = "xcforge-bundle.json"
SM2_SIGNATURE = MANIFEST + ".sm2"
COSIGN_SIGNATURE = MANIFEST + ".sig"
SM2_DIST_ID = "1234567812345678"  # GB/T 32918.2's default user ID, what xcforge signs with
INDEXES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
BLOCK = 1 << 20


class Refused(Exception):
    pass


class Joined:
    """The chunks of a bundle read as one stream (tarfile's streaming mode needs only read())."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = list(paths)
        self.fh: BinaryIO | None = None

    def read(self, size: int = -1) -> bytes:
        out = b""
        while size < 0 or len(out) < size:
            if self.fh is None:
                if not self.paths:
                    break
                self.fh = open(self.paths.pop(0), "rb")  # noqa: SIM115
            data = self.fh.read(-1 if size < 0 else size - len(out))
            if not data:
                self.fh.close()
                self.fh = None
                continue
            out += data
        return out


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(functools.partial(fh.read, BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def parts_of(path: str) -> list[str]:
    if not path.endswith(".chunks.json"):
        return [path]
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    folder = os.path.dirname(path)
    parts = []
    for number, chunk in enumerate(doc["chunks"], 1):
        part = os.path.join(folder, os.path.basename(chunk["file"]))
        where = f"chunk {number} of {len(doc['chunks'])} ({os.path.basename(part)})"
        if not os.path.exists(part):
            raise Refused(f"{where} is missing")
        if os.path.getsize(part) != chunk["size"] or file_sha256(part) != chunk["sha256"]:
            raise Refused(f"{where} is corrupt (size or SHA-256 differs from the chunk list)")
        parts.append(part)
    print(f"ok    {len(parts)} chunks match the chunk list")
    return parts


def openssl(args: Sequence[str], workdir: str) -> bool:
    proc = subprocess.run(["openssl", *args], cwd=workdir, capture_output=True, text=True)
    return proc.returncode == 0


def verify_signatures(
    manifest: bytes, signatures: Mapping[str, bytes], sm2_key: str | None, cosign_key: str | None
) -> None:
    with tempfile.TemporaryDirectory(prefix="verify-bundle-") as work:
        with open(os.path.join(work, "m"), "wb") as fh:
            fh.write(manifest)
        checks = []
        if sm2_key:
            if SM2_SIGNATURE not in signatures:
                raise Refused("the bundle has no SM2 signature but --sm2-key was given")
            with open(os.path.join(work, "s"), "wb") as fh:
                fh.write(signatures[SM2_SIGNATURE])
            args = ["pkeyutl", "-verify", "-pubin", "-inkey", os.path.abspath(sm2_key), "-rawin", "-digest", "sm3"]
            checks.append(("SM2", [*args, "-pkeyopt", f"distid:{SM2_DIST_ID}", "-in", "m", "-sigfile", "s"]))
        if cosign_key:
            if COSIGN_SIGNATURE not in signatures:
                raise Refused("the bundle has no cosign signature but --cosign-key was given")
            with open(os.path.join(work, "c"), "wb") as fh:
                fh.write(base64.b64decode(signatures[COSIGN_SIGNATURE].strip()))
            checks.append(
                ("cosign", ["dgst", "-sha256", "-verify", os.path.abspath(cosign_key), "-signature", "c", "m"])
            )
        for name, args in checks:
            if not openssl(args, work):
                raise Refused(f"the {name} signature of the bundle manifest does not verify with the key given")
            print(f"ok    {name} signature of {MANIFEST} verifies with the key given (openssl)")


def member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    fh = tar.extractfile(member)
    if fh is None:
        raise Refused(f"{member.name}: not a plain file")
    return fh.read()


def verify(path: str, sm2_key: str | None, cosign_key: str | None) -> None:
    stream = Joined(parts_of(path))
    # Stream mode reads only (Joined has read() alone); typeshed's tarfile asks for a whole file object.
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]  # read() is enough
        # One pass over the stream: TarFile's iterator restarts at the first member it already
        # read, so the manifest is taken from the iterator rather than from a separate next().
        members = iter(tar)
        first = next(members, None)
        if first is None or first.name != MANIFEST:
            raise Refused(f"the first file is not {MANIFEST}: not an xcforge bundle")
        manifest_bytes = member_bytes(tar, first)
        doc = json.loads(manifest_bytes)
        expected = {name: digest for name, digest in doc["files"].items()}
        sizes: dict[str, int] = {}
        for entry in doc["manifests"] + doc["blobs"]:
            algorithm, encoded = entry["digest"].split(":", 1)
            expected[f"blobs/{algorithm}/{encoded}"] = entry["digest"]
            sizes[f"blobs/{algorithm}/{encoded}"] = entry["size"]
        known = {e["digest"] for e in doc["manifests"] + doc["blobs"] + doc["omitted"]}
        signatures: dict[str, bytes] = {}
        seen: set[str] = set()
        checked_signatures = False
        for member in members:
            if member.name in (SM2_SIGNATURE, COSIGN_SIGNATURE):
                signatures[member.name] = member_bytes(tar, member)
                continue
            if not checked_signatures:
                verify_signatures(manifest_bytes, signatures, sm2_key, cosign_key)
                checked_signatures = True
            if not member.isfile() or member.name not in expected or member.name in seen:
                raise Refused(f"{member.name}: not listed in the signed manifest (or listed twice)")
            seen.add(member.name)
            digest, data = hashlib.sha256(), b""
            fh = tar.extractfile(member)
            if fh is None:  # (isfile() above: never)
                raise Refused(f"{member.name}: not a plain file")
            is_manifest = any(e["digest"] == expected[member.name] for e in doc["manifests"])
            for block in iter(functools.partial(fh.read, BLOCK), b""):
                digest.update(block)
                if is_manifest:
                    data += block
            if (
                "sha256:" + digest.hexdigest() != expected[member.name]
                or sizes.get(member.name, member.size) != member.size
            ):
                raise Refused(f"{member.name} does not match the signed manifest (swapped or corrupt)")
            if is_manifest:
                parsed = json.loads(data)
                children = parsed.get("manifests") or [parsed.get("config"), *(parsed.get("layers") or [])]
                for child in children:
                    if child and "urls" not in child and child["digest"] not in known:
                        raise Refused(f"{member.name} names {child['digest']}, which is neither carried nor held")
        if not checked_signatures:
            verify_signatures(manifest_bytes, signatures, sm2_key, cosign_key)
    missing = sorted(set(expected) - seen)
    if missing:
        raise Refused(f"{missing[0]} is listed in the signed manifest but not in the bundle")
    print(f"ok    {len(seen)} files match the signed manifest; none missing, none extra")
    for image in doc["images"]:
        print(f"image {image['repository']}@{image['digest']} {' '.join(image['tags'])}")
    if doc.get("base"):
        print(f"delta on {doc['base']['name']}: {len(doc['omitted'])} blobs must already be at the destination")
    for scheme, key in sorted(doc.get("keys", {}).items()):
        print(f"note  signed-by fingerprint ({scheme}): {key['key_id']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", help="BUNDLE.tar or BUNDLE.chunks.json")
    parser.add_argument("--sm2-key", help="the sender's SM2 public key (PEM), obtained out of band")
    parser.add_argument("--cosign-key", help="the sender's cosign public key (PEM), obtained out of band")
    args = parser.parse_args(argv)
    if not (args.sm2_key or args.cosign_key):
        parser.error("name the sender's public key: --sm2-key and/or --cosign-key")
    try:
        verify(args.bundle, args.sm2_key, args.cosign_key)
    except (Refused, OSError, ValueError, KeyError, tarfile.TarError) as exc:
        print(f"REFUSED: {exc}", file=sys.stderr)
        return 1
    print("VERIFIED: the bundle is complete and signed by the key(s) given")
    return 0


if __name__ == "__main__":
    sys.exit(main())
