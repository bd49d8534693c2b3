"""Signing benchmark: how long SM2/cosign signatures, registry signing and the audit log take.

    .venv/bin/python bench/bench_signing.py [--runs 200] [--process-runs 50] [--registry-runs 20]
                                            [--audit-entries 10000] [--no-registry]

Measures, each as median and p95 over N runs (after one untimed warm-up call):

1. SM2 sign / verify of a real simple-signing payload (~250 bytes): ours (signing.sm2 through gmssl),
   snowland-smx (another pure-Python SM2), `openssl pkeyutl` run once per operation (a new process
   each time, as a shell script would: about half of it is process start-up, so `openssl version`
   is timed as the baseline) and `openssl speed sm2` (OpenSSL's in-process C speed, for scale); and SM3 alone
   (gmssl's pure-Python SM3, which signatures and the audit chain use, next to OpenSSL's).
2. ECDSA P-256 / SHA-256 sign / verify (cosign keys, through `cryptography`).
3. `sign_digest` (SM2 + cosign, both signatures pushed), the same again (a no-op: already signed)
   and `verify_image` against the local registry, on small synthetic images pushed with ocicore.registry
   under 127.0.0.1:5000/xcforge-bench/signing (one new image per run).
4. The audit log: appending 10 000 entries (each append locks, fsyncs and rewrites the head file)
   and verifying the whole chain.

Prints Markdown tables; writes bench/results/bench_signing.json.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    BENCH_PREFIX,
    fmt_bytes,
    fmt_time,
    load_note,
    log,
    markdown_table,
    measuring,
    summarize,
    time_calls,
    write_results,
)
from cryptography.hazmat.primitives import hashes
from gmssl import sm3 as gmssl_sm3

from ocicore.registry import OCI_CONFIG, OCI_MANIFEST, Reference, RegistryClient, canonical_json, sha256_digest
from signing import sm2
from signing.audit import AuditLog, verify_audit_log
from signing.cosign_keys import CosignPrivateKey
from signing.payload import simple_signing_payload
from signing.sign import sign_digest
from signing.sm2_keys import Sm2PrivateKey
from signing.sm3 import sm3
from signing.verify import verify_image

DISTID = sm2.DEFAULT_DIST_ID.decode()
SAMPLE_DIGEST = "sha256:" + hashlib.sha256(b"xcforge bench").hexdigest()
PAYLOAD = simple_signing_payload("127.0.0.1:5000/xcforge/vllm-cpu", SAMPLE_DIGEST)


def row(name: str, seconds: list[float], note: str = "") -> dict[str, Any]:
    stats = summarize(seconds)
    return {"operation": name, **stats, "ops_per_s": 1 / stats["median_s"], "note": note}


# --------------------------------------------------------------------------- in-process crypto


def bench_ours(runs: int) -> list[dict[str, Any]]:
    key = Sm2PrivateKey.generate()
    signature = key.sign(PAYLOAD)
    assert key.public_key.verify(PAYLOAD, signature)
    kib = bytes(1024)
    assert openssl_sm3(kib) == sm3(kib)
    return [
        row("SM2 sign: ours (gmssl)", time_calls(lambda: key.sign(PAYLOAD), runs)),
        row("SM2 verify: ours (gmssl)", time_calls(lambda: key.public_key.verify(PAYLOAD, signature), runs)),
        row(
            "e = SM3(Z ‖ M) alone (inside sign and verify)",
            time_calls(lambda: sm2.message_hash(PAYLOAD, key.public_key.point), runs),
            "SM3 of 210 B (Z), then of 279 B (e)",
        ),
        row("SM3 of 1 KiB (signing.sm3: cryptography)", time_calls(lambda: sm3(kib), runs), "audit chain, Z and e"),
        row(
            "SM3 of 1 KiB (gmssl, pure Python)",
            time_calls(lambda: gmssl_sm3.sm3_hash(list(kib)), runs),
            "what signing.sm3 used before",
        ),
    ]


def openssl_sm3(data: bytes) -> bytes:
    """SM3 through `cryptography` (OpenSSL's C code): not what signing/ uses; here for scale."""
    digest = hashes.Hash(hashes.SM3())
    digest.update(data)
    return digest.finalize()


def bench_snowland(runs: int) -> list[dict[str, Any]]:
    try:
        from pysmx.SM2 import Sign as snowland_sign
        from pysmx.SM2 import Verify as snowland_verify
    except ImportError:
        log("snowland-smx is not installed; skipped")
        return []
    d = sm2.generate_private_scalar()
    public = sm2.public_point(d)
    public_hex = f"{public[0]:064x}{public[1]:064x}"

    def sign() -> bytes:
        k = secrets.randbelow(sm2.SM2P256V1.n - 1) + 1
        signature: bytes = snowland_sign(PAYLOAD, f"{d:064x}", f"{k:064x}", 64, uid=DISTID)
        return signature

    signature = sign()
    assert snowland_verify(signature.hex(), PAYLOAD, public_hex, 64, uid=DISTID)
    # Same (r, s) format as ours: check that our verify accepts it, so both sides do the same work.
    assert sm2.verify_raw(public, PAYLOAD, int(signature[:32].hex(), 16), int(signature[32:].hex(), 16))
    return [
        row("SM2 sign: snowland-smx", time_calls(sign, runs)),
        row(
            "SM2 verify: snowland-smx",
            time_calls(lambda: snowland_verify(signature.hex(), PAYLOAD, public_hex, 64, uid=DISTID), runs),
        ),
    ]


def bench_ecdsa(runs: int) -> list[dict[str, Any]]:
    key = CosignPrivateKey.generate()
    public = key.public_key
    sig = key.sign(PAYLOAD)
    assert public.verify(PAYLOAD, sig)
    return [
        row("ECDSA P-256 sign (cosign key, cryptography)", time_calls(lambda: key.sign(PAYLOAD), runs)),
        row("ECDSA P-256 verify (cosign key, cryptography)", time_calls(lambda: public.verify(PAYLOAD, sig), runs)),
    ]


# --------------------------------------------------------------------------- openssl


def bench_openssl_processes(runs: int, work: Path) -> list[dict[str, Any]]:
    """One `openssl` process per operation, as a shell pipeline would run it."""
    key = work / "sm2.pem"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:SM2", "-out", str(key)],
        check=True,
        capture_output=True,
    )
    pub = work / "sm2.pub"
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    message, signature = work / "payload.json", work / "payload.sig"
    message.write_bytes(PAYLOAD)
    common = ["-rawin", "-digest", "sm3", "-pkeyopt", f"distid:{DISTID}", "-in", str(message)]
    sign_cmd = ["openssl", "pkeyutl", "-sign", "-inkey", str(key), *common, "-out", str(signature)]
    verify_cmd = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(pub), *common, "-sigfile", str(signature)]

    def call(cmd: list[str]) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    call(sign_cmd)
    call(verify_cmd)  # exit 0 only when the signature verifies
    from signing.sm2_keys import load_sm2_private_key

    # OpenSSL's signature must verify with ours too: the two sides are doing the same operation.
    assert load_sm2_private_key(key.read_bytes()).public_key.verify(PAYLOAD, signature.read_bytes())
    return [
        row("process start: `openssl version`", time_calls(lambda: call(["openssl", "version"]), runs)),
        row("SM2 sign: `openssl pkeyutl` (one process per call)", time_calls(lambda: call(sign_cmd), runs)),
        row("SM2 verify: `openssl pkeyutl` (one process per call)", time_calls(lambda: call(verify_cmd), runs)),
    ]


def bench_openssl_speed(seconds: int) -> list[dict[str, Any]]:
    """OpenSSL's own in-process numbers (`openssl speed`), for scale; one value each, not a distribution."""
    rows = []
    for algorithm, label in (("sm2", "SM2"), ("ecdsap256", "ECDSA P-256")):
        out = subprocess.run(
            ["openssl", "speed", "-seconds", str(seconds), algorithm], capture_output=True, text=True, check=False
        ).stdout
        match = re.search(r"^\s*256 bits .*?\s([\d.]+)\s+([\d.]+)\s*$", out, re.MULTILINE)
        if not match:
            log(f"could not read `openssl speed {algorithm}` output; skipped")
            continue
        sign_per_s, verify_per_s = float(match.group(1)), float(match.group(2))
        for op, per_s in (("sign", sign_per_s), ("verify", verify_per_s)):
            rows.append(
                {
                    "operation": f"{label} {op}: `openssl speed` (in-process C)",
                    "n": None,
                    "median_s": 1 / per_s,
                    "p95_s": None,
                    "ops_per_s": per_s,
                    "note": f"mean over {seconds} s, from `openssl speed`",
                }
            )
    return rows


# --------------------------------------------------------------------------- registry


def push_synthetic_image(client: RegistryClient, repository: str) -> str:
    """A tiny image (config + one random layer + manifest), pushed by digest only; returns the digest."""
    config = canonical_json(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}, "config": {}}
    )
    layer = f"xcforge bench layer {uuid.uuid4().hex}".encode()
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": client.push_blob(repository, config), "size": len(config)},
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": client.push_blob(repository, layer),
                    "size": len(layer),
                }
            ],
        }
    )
    return client.put_manifest(repository, sha256_digest(manifest), manifest, OCI_MANIFEST)


def bench_registry(runs: int) -> list[dict[str, Any]]:
    ref = Reference.parse(f"{BENCH_PREFIX}/signing")
    client = RegistryClient(ref.registry)
    sm2_key, cosign_key = Sm2PrivateKey.generate(), CosignPrivateKey.generate()
    digests = [push_synthetic_image(client, ref.repository) for _ in range(runs + 1)]  # +1: the warm-up

    def timed(fn: Callable[[str], None]) -> list[float]:
        out = []
        for digest in digests:
            started = time.perf_counter()
            fn(digest)
            out.append(time.perf_counter() - started)
        return out[1:]  # the first one warms up the connection and the code paths

    def sign(digest: str) -> None:
        records = sign_digest(ref.name, digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
        assert all(r.added for r in records) and len(records) == 2

    def sign_again(digest: str) -> None:
        records = sign_digest(ref.name, digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
        assert not any(r.added for r in records)

    def verify(digest: str) -> None:
        report = verify_image(f"{ref.name}@{digest}", [sm2_key.public_key], [cosign_key.public_key], client=client)
        assert report.ok, report.lines()

    return [
        row("sign_digest: SM2 + cosign, new digest (2 signatures pushed)", timed(sign)),
        row("sign_digest again: already signed (no-op)", timed(sign_again)),
        row("verify_image: SM2 + cosign", timed(verify)),
    ]


# --------------------------------------------------------------------------- audit log


def bench_audit(entries: int, work: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    log_path = work / "audit.log.jsonl"
    audit = AuditLog(log_path)
    per_append = []
    started_all = time.perf_counter()
    for i in range(entries):
        digest = "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()
        started = time.perf_counter()
        audit.record("sign", digest=digest, key_id="0123456789abcdef", subject=f"bench/image@{digest}", result="ok")
        per_append.append(time.perf_counter() - started)
    append_total = time.perf_counter() - started_all

    def verify() -> None:
        result = verify_audit_log(log_path)
        assert result.ok and result.count == entries, result

    verify_times = time_calls(verify, 3)
    rows = [
        row(f"audit log append (1 of {entries})", per_append, "flock + fsync + head file, each"),
        row(f"audit log verify ({entries} entries)", verify_times, "whole SM3 chain + head"),
    ]
    extra = {"entries": entries, "append_total_s": append_total, "file_bytes": log_path.stat().st_size}
    return rows, extra


# --------------------------------------------------------------------------- main


def render(rows: list[dict[str, Any]]) -> str:
    return markdown_table(
        ["operation", "n", "median", "p95", "ops/s (median)", "note"],
        [
            [
                r["operation"],
                r["n"] if r["n"] is not None else "-",
                fmt_time(r["median_s"]),
                fmt_time(r["p95_s"]),
                f"{r['ops_per_s']:,.0f}" if r["ops_per_s"] >= 10 else f"{r['ops_per_s']:.2f}",
                r["note"],
            ]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="in-process sign/verify calls per operation")
    parser.add_argument("--process-runs", type=int, default=50, help="openssl processes per operation")
    parser.add_argument("--registry-runs", type=int, default=20, help="images signed/verified in the registry")
    parser.add_argument("--audit-entries", type=int, default=10_000)
    parser.add_argument("--speed-seconds", type=int, default=3, help="`openssl speed -seconds`")
    parser.add_argument("--no-registry", action="store_true", help="skip the registry part (no registry here)")
    parser.add_argument("--wait-minutes", type=float, default=20, help="wait this long for a quiet machine (0: no)")
    args = parser.parse_args(argv)

    phases: list[dict[str, Any]] = []
    sections: dict[str, Any] = {}
    wait_s = args.wait_minutes * 60
    with tempfile.TemporaryDirectory(prefix="xcforge-bench-signing-") as tmp:
        work = Path(tmp)
        with measuring(phases, "in-process crypto", limit_s=wait_s):
            log("SM2 and ECDSA in-process")
            sections["crypto"] = bench_ours(args.runs) + bench_snowland(args.runs) + bench_ecdsa(args.runs)
        with measuring(phases, "openssl", limit_s=wait_s):
            log("openssl processes and openssl speed")
            sections["openssl"] = bench_openssl_processes(args.process_runs, work)
            sections["openssl"] += bench_openssl_speed(args.speed_seconds)
        if not args.no_registry:
            with measuring(phases, "registry", limit_s=wait_s):
                log(f"sign_digest / verify_image against {BENCH_PREFIX}/signing")
                sections["registry"] = bench_registry(args.registry_runs)
        with measuring(phases, "audit log", limit_s=wait_s):
            log(f"audit log: {args.audit_entries} appends, then verify")
            sections["audit"], audit_extra = bench_audit(args.audit_entries, work)

    titles = {
        "crypto": "SM2 and ECDSA, in process (payload: a ~250-byte simple-signing JSON)",
        "openssl": "OpenSSL",
        "registry": f"Signing in the registry ({BENCH_PREFIX}/signing, loopback)",
        "audit": "Audit log",
    }
    print(f"## bench_signing ({load_note(phases)})\n")
    for key, rows in sections.items():
        print(f"### {titles[key]}\n\n{render(rows)}\n")
    print(
        f"audit log: {audit_extra['entries']} appends took {audit_extra['append_total_s']:.1f} s in all; "
        f"file {fmt_bytes(audit_extra['file_bytes'])}\n"
    )
    write_results(
        "bench_signing",
        {
            "parameters": vars(args),
            "payload_bytes": len(PAYLOAD),
            "phases": phases,
            "results": sections,
            "audit": audit_extra,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
