"""Verify a signed model before the engine starts: signature, every file's SHA-256, nothing extra.

A model directory made by `build.py model unpack` carries `.xcforge-model/` (docs/models.md):
`manifest.json` and `config.json` (the artifact's manifest and config, as signed), and
`signatures/sm2.json` / `cosign.json` (signing.store's detached-signature documents: the
simple-signing payload naming the manifest digest, and each signature as a layer annotation).

The chain checked here, standard library and the `openssl` CLI only (no gmssl in images):

1. each given public key's scheme has a valid signature by one of those keys over a payload whose
   `docker-manifest-digest` is SHA-256(manifest.json) — SM2 with SM3 and the distinguishing ID
   (GB/T 32918.2; OpenSSL 3 `pkeyutl -rawin -digest sm3 -pkeyopt distid:…`), cosign's ECDSA P-256
   over SHA-256 (`openssl dgst -sha256 -verify`);
2. manifest.json names config.json by its SHA-256, and is a model artifact;
3. the directory holds exactly the files config.json lists, each with its size and SHA-256.

A restart must not rehash 100 GB: after a full check, each file's (dev, inode, size, mtime_ns,
ctime_ns) is kept in a verified-state record *outside* the model directory (default
/var/cache/xcforge/models/<manifest hex>.json, 0700), and a file whose stat is unchanged is not
hashed again. Writing a file changes its mtime and ctime; `touch -d`/utime can put mtime back,
but the kernel sets ctime to the current time on every change and offers no call to set it (only
changing the system clock, CAP_SYS_TIME, could), so someone who can write the model directory
cannot make a changed file look verified, and cannot reach the record, which is not in it. The
signatures are checked on every start (milliseconds).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcforge_engine import log
from xcforge_engine.errors import EngineError

ARTIFACT_TYPE = "application/vnd.xcforge.model.v1"
RECORD_DIR = ".xcforge-model"
KEY_ENV = "XCFORGE_MODEL_KEY"  # public key file(s), separated by ':' or ','
VERIFY_ENV = "XCFORGE_MODEL_VERIFY"  # auto (default) | required | off
CACHE_ENV = "XCFORGE_VERIFY_CACHE"
DEFAULT_CACHE = "/var/cache/xcforge/models"
DEFAULT_DIST_ID = "1234567812345678"
SM2_SIGNATURE = "cn.xcforge.sm2/signature"
SM2_DISTID = "cn.xcforge.sm2/distid"
SM2_KEYID = "cn.xcforge.sm2/keyid"
COSIGN_SIGNATURE = "dev.cosignproject.cosign/signature"
# AlgorithmIdentifier parameters in a SubjectPublicKeyInfo: the named curve says which scheme.
_SM2_CURVE = bytes.fromhex("06082a811ccf5501822d")  # 1.2.156.10197.1.301 (sm2p256v1)
_P256_CURVE = bytes.fromhex("06082a8648ce3d030107")  # 1.2.840.10045.3.1.7 (prime256v1)
_BUFFER = 4 * 1024 * 1024


class ModelRefused(EngineError):
    """The model is not the one that was signed, is signed by another key, or does not fit the image."""

    exit_code = 6


@dataclass(frozen=True)
class TrustedKey:
    path: Path
    scheme: str  # sm2 | cosign
    fingerprint: str  # SHA-256 of the DER SubjectPublicKeyInfo: signing's key id

    @property
    def label(self) -> str:
        return f"{self.path} ({self.scheme} {self.fingerprint[:16]})"


@dataclass(frozen=True)
class VerifiedModel:
    path: Path
    digest: str
    config: dict[str, Any]
    keys: tuple[TrustedKey, ...]
    hashed: int  # files hashed this time
    reused: int  # files whose verified state was reused

    @property
    def format(self) -> str:
        return str(self.config.get("format") or "")

    def note(self) -> str:
        keys = ", ".join(k.label for k in self.keys)
        return (
            f"model {self.path}: {self.config.get('name')}:{self.config.get('tag')} {self.digest} verified "
            f"(signature by {keys}; {self.hashed} file(s) hashed, {self.reused} unchanged since the last check)"
        )


def load_key(path: Path) -> TrustedKey:
    """A PEM public key (SPKI): SM2 or P-256, told apart by its curve."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelRefused(f"model key {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    lines = text.strip().splitlines()
    if not lines or lines[0].strip() != "-----BEGIN PUBLIC KEY-----" or "-----END PUBLIC KEY-----" not in text:
        raise ModelRefused(
            f"model key {path}: not a PEM public key (BEGIN PUBLIC KEY); give the signer's sm2.pub or cosign.pub"
        )
    body = "".join(line.strip() for line in lines[1:] if not line.startswith("-----"))
    try:
        der = base64.b64decode(body, validate=True)
    except binascii.Error:
        raise ModelRefused(f"model key {path}: its PEM body is not base64") from None
    if _SM2_CURVE in der[:40]:
        scheme = "sm2"
    elif _P256_CURVE in der[:40]:
        scheme = "cosign"
    else:
        raise ModelRefused(f"model key {path}: neither an SM2 nor a P-256 (cosign) public key")
    return TrustedKey(path, scheme, hashlib.sha256(der).hexdigest())


def key_paths(given: Sequence[str], env: Mapping[str, str]) -> list[Path]:
    paths = list(given)
    if not paths and env.get(KEY_ENV):
        paths = [p for p in env[KEY_ENV].replace(",", ":").split(":") if p.strip()]
    return [Path(p) for p in paths]


def has_record(model: Path) -> bool:
    return (model / RECORD_DIR).is_dir()


# ------------------------------------------------------------------------------------------ openssl


def _openssl(env: Mapping[str, str]) -> str:
    found = shutil.which(env.get("XCFORGE_OPENSSL", "openssl"))
    if found is None:
        raise ModelRefused(
            "openssl not found: verifying a signed model needs the openssl CLI (OpenSSL >= 3 for SM2); "
            "use an image built with it (matrix system_packages) or set XCFORGE_OPENSSL"
        )
    return found


def _verify_with_openssl(
    openssl: str, key: TrustedKey, payload: bytes, signature: bytes, dist_id: str, work: Path
) -> bool:
    payload_file, signature_file = work / "payload", work / "signature.der"
    payload_file.write_bytes(payload)
    signature_file.write_bytes(signature)
    if key.scheme == "sm2":
        # GB/T 32918.2: e = SM3(Z_A || M); OpenSSL 3 uses an empty ID unless given one.
        command = [openssl, "pkeyutl", "-verify", "-pubin", "-inkey", str(key.path), "-rawin", "-digest", "sm3"]
        command += ["-pkeyopt", f"distid:{dist_id}", "-in", str(payload_file), "-sigfile", str(signature_file)]
    else:
        command = [openssl, "dgst", "-sha256", "-verify", str(key.path), "-signature", str(signature_file)]
        command.append(str(payload_file))
    log.info(f"verify: {shlex.join(command)}")
    try:
        done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelRefused(f"cannot run {openssl}: {exc}") from None
    if done.returncode != 0 and key.scheme == "sm2" and b"distid" in done.stderr:
        raise ModelRefused(f"{openssl} cannot verify SM2 (OpenSSL >= 3 needed): {done.stderr.decode(errors='replace')}")
    return done.returncode == 0


# ------------------------------------------------------------------------------------------ the record


def _read_json(path: Path, what: str) -> tuple[bytes, dict[str, Any]]:
    try:
        data = path.read_bytes()
        doc = json.loads(data)
    except FileNotFoundError:
        raise ModelRefused(f"{path}: missing; the model's signed record is incomplete (unpack it again)") from None
    except (OSError, ValueError) as exc:
        raise ModelRefused(f"{path}: unreadable {what} ({exc})") from None
    if not isinstance(doc, dict):
        raise ModelRefused(f"{path}: not a JSON object")
    return data, doc


def _payload_digest(payload: bytes) -> str | None:
    try:
        doc = json.loads(payload)
        value = doc["critical"]["image"]["docker-manifest-digest"]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


def _check_signatures(
    model: Path, digest: str, keys: Sequence[TrustedKey], env: Mapping[str, str]
) -> tuple[TrustedKey, ...]:
    """For each scheme a key was given for, one valid signature by one of its keys; the keys that signed."""
    openssl = _openssl(env)
    signed: list[TrustedKey] = []
    with tempfile.TemporaryDirectory(prefix="xcforge-verify-") as tmp:
        for scheme in sorted({k.scheme for k in keys}):
            mine = [k for k in keys if k.scheme == scheme]
            names = ", ".join(k.label for k in mine)
            path = model / RECORD_DIR / "signatures" / f"{scheme}.json"
            if not path.is_file():
                raise ModelRefused(
                    f"model {model}: no {scheme} signature in its record ({path} missing); it is not signed for "
                    f"key {names}"
                )
            _, doc = _read_json(path, "signature file")
            if doc.get("subject") != digest:
                raise ModelRefused(f"{path}: signatures for {doc.get('subject')}, not for this model's {digest}")
            found: list[str] = []
            for entry in doc.get("signatures") or []:
                annotations = entry.get("annotations") or {} if isinstance(entry, dict) else {}
                try:
                    payload = base64.b64decode(entry["payload"], validate=True)
                    signature = base64.b64decode(
                        annotations[SM2_SIGNATURE if scheme == "sm2" else COSIGN_SIGNATURE], validate=True
                    )
                except (KeyError, TypeError, binascii.Error):
                    continue
                found.append(str(annotations.get(SM2_KEYID, "?"))[:16] if scheme == "sm2" else "?")
                if _payload_digest(payload) != digest:
                    continue
                dist_id = str(annotations.get(SM2_DISTID) or DEFAULT_DIST_ID)
                key = next(
                    (k for k in mine if _verify_with_openssl(openssl, k, payload, signature, dist_id, Path(tmp))), None
                )
                if key is not None:
                    signed.append(key)
                    break
            else:
                by = f" (signed by key {', '.join(found)})" if scheme == "sm2" and found else ""
                raise ModelRefused(
                    f"model {model}: no valid {scheme} signature by key {names} over {digest}: "
                    f"{len(found)} signature(s) in {path}{by}; signed by another key, or the record was altered"
                )
    return tuple(signed)


# ------------------------------------------------------------------------------------------ files


def _present_files(model: Path) -> set[str]:
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(model, followlinks=True):
        rel_dir = Path(dirpath).relative_to(model)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d != RECORD_DIR]
        for name in filenames:
            out.add((rel_dir / name).as_posix())
    return out


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as fh:
        buffer = bytearray(_BUFFER)
        view = memoryview(buffer)
        while n := fh.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def _cache_file(env: Mapping[str, str], digest: str) -> Path | None:
    root = env.get(CACHE_ENV, DEFAULT_CACHE)
    if root in ("", "off"):
        return None
    return Path(root) / f"{digest.removeprefix('sha256:')}.json"


def _load_state(path: Path | None, digest: str) -> dict[str, list[int]]:
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) and doc.get("digest") == digest else None
    return {k: v for k, v in (files or {}).items() if isinstance(v, list)}


def _save_state(path: Path | None, digest: str, files: Mapping[str, list[int]]) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"digest": digest, "files": dict(files)}, fh)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning(
            f"verified state not kept ({path.parent}: {exc.strerror or exc}); the next start hashes the model "
            f"again (set {CACHE_ENV} to a writable directory outside the model)"
        )


def _check_files(model: Path, digest: str, config: dict[str, Any], env: Mapping[str, str]) -> tuple[int, int]:
    files = config.get("files")
    if not isinstance(files, list):
        raise ModelRefused(f"model {model}: the signed config lists no files")
    expected = {str(f.get("path")): f for f in files if isinstance(f, dict)}
    present = _present_files(model)
    extra = sorted(present - set(expected))
    if extra:
        raise ModelRefused(
            f"model {model}: extra file {extra[0]} is not part of the signed model {digest}"
            f"{f' (+{len(extra) - 1} more)' if len(extra) > 1 else ''}; remove it or unpack the model again"
        )
    missing = sorted(set(expected) - present)
    if missing:
        raise ModelRefused(
            f"model {model}: file {missing[0]} is missing (the signed model {digest} lists it); unpack it again"
        )
    cache = _cache_file(env, digest)
    state = _load_state(cache, digest)
    kept: dict[str, list[int]] = {}
    reused = 0
    todo: list[tuple[str, list[int]]] = []
    for rel in sorted(expected):
        entry = expected[rel]
        st = (model / rel).stat()
        if st.st_size != entry.get("size"):
            raise ModelRefused(
                f"model {model}: file {rel} has {st.st_size} bytes, the signed model {digest} says {entry.get('size')}"
            )
        key = _stat_key(st)
        if state.get(rel) == key:
            reused += 1
            kept[rel] = key
        else:
            todo.append((rel, key))
    # Shards hashed side by side: hashlib and reads release the GIL, so a 2-shard model takes about
    # half the time on two cores (the disk is faster than one core's SHA-256).
    workers = max(1, min(len(todo), os.cpu_count() or 1, 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        sums = dict(zip([rel for rel, _ in todo], pool.map(lambda item: _sha256(model / item[0]), todo), strict=True))
    hashed = len(todo)
    for rel, key in todo:
        entry = expected[rel]
        path = model / rel
        actual = sums[rel]
        if actual != entry.get("sha256"):
            raise ModelRefused(
                f"model {model}: file {rel} differs from the signed model {digest} (sha256 {actual[:16]}…, "
                f"signed {str(entry.get('sha256'))[:16]}…); unpack it again"
            )
        if _stat_key(path.stat()) == key:  # not written while it was read
            kept[rel] = key
    _save_state(cache, digest, kept)
    return hashed, reused


def verify_model(model: Path, keys: Iterable[TrustedKey], env: Mapping[str, str]) -> VerifiedModel:
    """The whole check; ModelRefused (one line naming the file or key) on any difference."""
    trusted = tuple(keys)
    if not trusted:
        raise ModelRefused(f"model {model}: no public key to verify it with; pass --model-key FILE or {KEY_ENV}")
    if not has_record(model):
        raise ModelRefused(
            f"model {model}: no signed record ({RECORD_DIR}/); a key was given, so only a signed model is served: "
            "write it with `build.py model unpack ARTIFACT DIR`"
        )
    record = model / RECORD_DIR
    manifest_bytes, manifest = _read_json(record / "manifest.json", "manifest")
    digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    signed = _check_signatures(model, digest, trusted, env)
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise ModelRefused(
            f"{record / 'manifest.json'}: not an xcforge model artifact ({manifest.get('artifactType')})"
        )
    config_bytes, config = _read_json(record / "config.json", "config")
    named = (manifest.get("config") or {}).get("digest")
    if named != "sha256:" + hashlib.sha256(config_bytes).hexdigest():
        raise ModelRefused(f"{record / 'config.json'}: differs from the signed manifest {digest} (config {named})")
    hashed, reused = _check_files(model, digest, config, env)
    return VerifiedModel(model, digest, config, signed, hashed, reused)


# ------------------------------------------------------------------------------------------ fit


GGUF_REMEDY = "the feiteng (llama.cpp) image"
SAFETENSORS_REMEDY = "a vLLM image (cpu, cuda, ascend)"


def fit_problem(
    config: Mapping[str, Any],
    model_format: str,
    backend: str,
    *,
    arch: str | None = None,
    quantization_rules: Mapping[str, Mapping[str, Any]] | None = None,
    memory_bytes: int | None = None,
    gguf_remedy: str = GGUF_REMEDY,
    safetensors_remedy: str = SAFETENSORS_REMEDY,
) -> str | None:
    """Why an image of `backend` cannot serve the model the signed config describes (with the remedy),
    or None. The quantization rules are presets.json's (the same ones `--preset` obeys): a method with
    no rule for the backend, or one marked unsupported or limited to other architectures, is refused."""
    fmt = str(config.get("format") or "")
    name = f"{config.get('name')}:{config.get('tag')}"
    quant = config.get("quantization") or {}
    if fmt == "gguf" and model_format != "gguf":
        return (
            f"model {name} is GGUF ({quant.get('type', '?')}); the {backend} backend serves safetensors with "
            f"vLLM: serve it with {gguf_remedy}, or pack the safetensors model"
        )
    if fmt != "gguf" and model_format == "gguf":
        return (
            f"model {name} is {fmt or 'not GGUF'}; the {backend} backend serves GGUF with llama.cpp: serve it "
            f"with {safetensors_remedy}, or convert it to GGUF and pack that"
        )
    method = str(quant.get("method") or "")
    if fmt != "gguf" and method and quantization_rules is not None:
        rule = (quantization_rules.get(method) or {}).get(backend) or {"status": "unsupported"}
        supported = [b for b, r in (quantization_rules.get(method) or {}).items() if r.get("status") == "ok"]
        elsewhere = f"; targets that serve {method.upper()}: {', '.join(supported)}" if supported else ""
        if rule.get("status") == "unsupported":
            reason = rule.get("reason") or f"this engine build has no {method.upper()} kernels"
            return (
                f"model {name} is {method.upper()}-quantized; the {backend} backend cannot serve it: "
                f"{reason}{elsewhere}"
            )
        if arch and rule.get("arch") and arch not in rule["arch"]:
            return (
                f"model {name} is {method.upper()}-quantized; the {backend} backend serves it only on "
                f"{', '.join(rule['arch'])}, not {arch}: {rule.get('reason', '')}{elsewhere}".rstrip(": ")
            )
    total = config.get("total_size")
    if memory_bytes and isinstance(total, int) and total > memory_bytes:
        return (
            f"model {name} is {total / 2**30:.1f} GiB, more than the {memory_bytes / 2**30:.1f} GiB memory it would "
            "run in: give the pod more memory (--memory), a quantized model, or an accelerated target"
        )
    return None
