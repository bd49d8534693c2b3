#!/usr/bin/env python3
"""Verify a signed xcforge model with nothing but Python 3 (standard library) and openssl.

    python3 verify-model.py MODEL.model.oci.tar --sm2-key SIGNER-sm2.pub [--cosign-key SIGNER-cosign.pub]
    python3 verify-model.py /srv/models/qwen --sm2-key SIGNER-sm2.pub      # a directory `model unpack` wrote

An archive is checked with its signature files beside it (`MODEL.model.oci.tar.signatures/`, as
`build.py model pack --sm2-key …` writes them); a directory with its `.xcforge-model/` record.
Checks, stopping at the first failure (`REFUSED: …`, exit 1; exit 2 for bad arguments):
1. for each key given, a signature by it over the simple-signing payload naming the manifest's
   SHA-256: SM2 with SM3 and the distinguishing ID (GB/T 32918.2) via `openssl pkeyutl -verify
   -rawin -digest sm3 -pkeyopt distid:…`, cosign's ECDSA P-256 via `openssl dgst -sha256 -verify`;
2. the manifest is a model artifact and names the config by its SHA-256;
3. archive: every chunk the config lists is a member whose SHA-256 is its name, and nothing else is
   carried; directory: exactly the files the config lists, each with its size and SHA-256.

The same checks as `build.py model verify` + `model unpack` and the launcher's before serving
(docs/models.md); this copy is for a machine without xcforge.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from typing import Any

ARTIFACT_TYPE = "application/vnd.xcforge.model.v1"
RECORD = ".xcforge-model"
SIGNATURE_ANNOTATION = {"sm2": "cn.xcforge.sm2/signature", "cosign": "dev.cosignproject.cosign/signature"}
ARCHIVE_SUFFIX = {"sm2": ".sm2.json", "cosign": ".sig.json"}
DIST_ID = "1234567812345678"
BLOCK = 1 << 22


class Refused(Exception):
    pass


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while data := fh.read(BLOCK):
            digest.update(data)
    return digest.hexdigest()


def openssl_verifies(scheme: str, key: str, payload: bytes, signature: bytes, dist_id: str, work: str) -> bool:
    payload_file, signature_file = os.path.join(work, "payload"), os.path.join(work, "signature.der")
    with open(payload_file, "wb") as fh:
        fh.write(payload)
    with open(signature_file, "wb") as fh:
        fh.write(signature)
    if scheme == "sm2":
        command = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", key, "-rawin", "-digest", "sm3",
                   "-pkeyopt", f"distid:{dist_id}", "-in", payload_file, "-sigfile", signature_file]  # fmt: skip
    else:
        command = ["openssl", "dgst", "-sha256", "-verify", key, "-signature", signature_file, payload_file]
    print("+ " + " ".join(command), file=sys.stderr)
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def check_signatures(digest: str, docs: dict[str, str], keys: dict[str, list[str]]) -> None:
    with tempfile.TemporaryDirectory() as work:
        for scheme, scheme_keys in keys.items():
            if not scheme_keys:
                continue
            path = docs[scheme]
            try:
                with open(path, encoding="utf-8") as fh:
                    doc = json.load(fh)
            except (OSError, ValueError) as exc:
                raise Refused(f"{path}: no readable {scheme} signature file ({exc})") from None
            if doc.get("subject") != digest:
                raise Refused(f"{path}: signatures for {doc.get('subject')}, not for this model's {digest}")
            for entry in doc.get("signatures") or []:
                try:
                    payload = base64.b64decode(entry["payload"], validate=True)
                    annotations = entry.get("annotations") or {}
                    signature = base64.b64decode(annotations[SIGNATURE_ANNOTATION[scheme]], validate=True)
                    claimed = json.loads(payload)["critical"]["image"]["docker-manifest-digest"]
                except (KeyError, TypeError, ValueError):
                    continue
                dist_id = str(annotations.get("cn.xcforge.sm2/distid") or DIST_ID)
                if claimed == digest and any(
                    openssl_verifies(scheme, key, payload, signature, dist_id, work) for key in scheme_keys
                ):
                    print(f"VALID  {scheme} signature of {digest} by {', '.join(scheme_keys)}")
                    break
            else:
                raise Refused(f"no valid {scheme} signature by {', '.join(scheme_keys)} over {digest} in {path}")


def check_manifest(manifest_bytes: bytes, config_bytes: bytes, where: str) -> dict[str, Any]:
    manifest = json.loads(manifest_bytes)
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise Refused(f"{where}: not an xcforge model artifact ({manifest.get('artifactType')})")
    if manifest["config"]["digest"] != "sha256:" + hashlib.sha256(config_bytes).hexdigest():
        raise Refused(f"{where}: the config differs from the signed manifest")
    config: dict[str, Any] = json.loads(config_bytes)
    return config


def verify_archive(path: str, keys: dict[str, list[str]]) -> None:
    hashed: dict[str, str] = {}  # member name → its SHA-256
    small: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r|") as tar:  # one pass over the stream
            for member in tar:
                if not member.isfile():
                    raise Refused(f"{path}: member {member.name} is not a regular file")
                fh = tar.extractfile(member)
                assert fh is not None
                digest = hashlib.sha256()
                keep = member.size <= 8 * 1024 * 1024  # JSON (index, manifest, config); chunks are hashed only
                data = b""
                while block := fh.read(BLOCK):
                    digest.update(block)
                    if keep:
                        data += block
                hashed[member.name] = digest.hexdigest()
                if keep and data.startswith(b"{"):  # only JSON is read back: memory stays small
                    small[member.name] = data
    except (tarfile.TarError, OSError) as exc:
        raise Refused(f"{path}: not a readable archive ({exc}); copy it again") from None
    for name, value in hashed.items():
        if name.startswith("blobs/sha256/") and name.rsplit("/", 1)[1] != value:
            raise Refused(f"{path}: {name} differs from its digest; the archive is damaged, copy it again")
    try:
        digest = json.loads(small["index.json"])["manifests"][0]["digest"]
        manifest_bytes = small["blobs/sha256/" + digest[7:]]
        config_bytes = small["blobs/sha256/" + json.loads(manifest_bytes)["config"]["digest"][7:]]  # fmt: skip
    except (KeyError, ValueError, IndexError):
        raise Refused(f"{path}: index.json, the manifest or the config is missing; not a model archive") from None
    docs = {s: f"{path}.signatures/{digest.replace(':', '-')}{suffix}" for s, suffix in ARCHIVE_SUFFIX.items()}
    check_signatures(digest, docs, keys)
    config = check_manifest(manifest_bytes, config_bytes, path)
    wanted = {
        "oci-layout",
        "index.json",
        "blobs/sha256/" + digest[7:],
        "blobs/sha256/" + json.loads(manifest_bytes)["config"]["digest"][7:],
    }
    for entry in config.get("files") or []:
        for chunk in entry.get("chunks") or []:
            name = "blobs/sha256/" + chunk["digest"][7:]
            if name not in hashed:
                raise Refused(f"{path}: chunk {chunk['digest']} of {entry['path']} is missing; copy it again")
            wanted.add(name)
    extra = sorted(set(hashed) - wanted)
    if extra:
        raise Refused(f"{path}: extra member {extra[0]} is not part of the signed model")
    print(f"{path}: {len(config.get('files') or [])} files, every chunk matches the signed config ({digest})")


def verify_directory(path: str, keys: dict[str, list[str]]) -> None:
    record = os.path.join(path, RECORD)
    try:
        with open(os.path.join(record, "manifest.json"), "rb") as fh:
            manifest_bytes = fh.read()
        with open(os.path.join(record, "config.json"), "rb") as fh:
            config_bytes = fh.read()
    except OSError as exc:
        raise Refused(
            f"{path}: no signed record ({RECORD}/: {exc.strerror}); write it with `build.py model unpack`"
        ) from None
    digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    check_signatures(digest, {s: os.path.join(record, "signatures", f"{s}.json") for s in ("sm2", "cosign")}, keys)
    config = check_manifest(manifest_bytes, config_bytes, record)
    expected = {e["path"]: e for e in config.get("files") or []}
    present = set()
    for dirpath, dirnames, filenames in os.walk(path, followlinks=True):
        rel_dir = os.path.relpath(dirpath, path)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != RECORD]
        present |= {os.path.normpath(os.path.join(rel_dir, n)) for n in filenames}
    for rel in sorted(present - set(expected)):
        raise Refused(f"{path}: extra file {rel} is not part of the signed model {digest}")
    for rel, entry in sorted(expected.items()):
        full = os.path.join(path, rel)
        if rel not in present:
            raise Refused(f"{path}: file {rel} is missing (the signed model lists it)")
        if os.path.getsize(full) != entry["size"] or sha256_file(full) != entry["sha256"]:
            raise Refused(f"{path}: file {rel} differs from the signed model {digest}")
    print(f"{path}: {len(expected)} files match the signed model {digest}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="MODEL.model.oci.tar, or a directory with .xcforge-model/")
    parser.add_argument("--sm2-key", action="append", default=[], help="the signer's SM2 public key (PEM)")
    parser.add_argument("--cosign-key", action="append", default=[], help="the signer's cosign public key (PEM)")
    args = parser.parse_args(argv)
    if not args.sm2_key and not args.cosign_key:
        print(
            "error: give --sm2-key and/or --cosign-key (the signer's public keys, obtained out of band)",
            file=sys.stderr,
        )
        return 2
    for key in [*args.sm2_key, *args.cosign_key]:
        if not os.path.isfile(key):
            print(f"error: {key}: no such key file", file=sys.stderr)
            return 2
    keys = {"sm2": args.sm2_key, "cosign": args.cosign_key}
    try:
        if os.path.isdir(args.model):
            verify_directory(args.model, keys)
        elif os.path.isfile(args.model):
            verify_archive(args.model, keys)
        else:
            print(f"error: {args.model}: no such archive or directory", file=sys.stderr)
            return 2
    except Refused as exc:
        print(f"REFUSED: {exc}")
        return 1
    print("VERIFIED: the model is complete and signed by the key(s) given")
    return 0


if __name__ == "__main__":
    sys.exit(main())
