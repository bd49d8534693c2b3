"""Against the real registry (distribution 2.8, XCFORGE_TEST_REGISTRY, default 127.0.0.1:5000) and the
real cosign binary: our signatures must satisfy `cosign verify`, and the documented by-hand SM2 check.

Opt-in: `pytest --docker` (scripts/provision.sh starts the registry and installs cosign).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest
from signing_helpers import cosign_payloads, cosign_verify, push_synthetic_image

from ocicore.registry import OCI_MANIFEST, RegistryClient, sha256_digest
from signing.payload import simple_signing_payload
from signing.promote import promote
from signing.sign import sign_digest
from signing.store import signature_tag
from signing.verify import verify_image

pytestmark = pytest.mark.docker
DOCS = Path(__file__).resolve().parents[2] / "docs" / "signing.md"


@pytest.fixture
def client(real_registry):
    return RegistryClient(real_registry)


@pytest.fixture
def repo():
    return f"xcforge-test/signing-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def key_files(tmp_path, sm2_key, cosign_key, other_cosign_key):
    (tmp_path / "sm2.pub").write_bytes(sm2_key.public_key.to_pem())
    (tmp_path / "cosign.pub").write_bytes(cosign_key.public_key.to_pem())
    (tmp_path / "other-cosign.pub").write_bytes(other_cosign_key.public_key.to_pem())
    (tmp_path / "cosign.key").write_bytes(cosign_key.to_cosign_pem("pw"))
    return tmp_path


@pytest.mark.parametrize("index", [False, True], ids=["manifest", "index"])
def test_real_cosign_accepts_our_signatures(client, repo, sm2_key, cosign_key, key_files, cosign_bin, index):
    img = push_synthetic_image(client, repo, index=index)
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    result = cosign_verify(cosign_bin, key_files / "cosign.pub", img.ref)
    assert result.returncode == 0, result.stderr
    [claims] = cosign_payloads(result)
    assert claims["critical"]["image"]["docker-manifest-digest"] == img.digest
    assert claims["critical"]["identity"]["docker-reference"] == img.name
    assert verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client).ok
    # cosign must reject a key that did not sign: it really checks what we wrote.
    assert cosign_verify(cosign_bin, key_files / "other-cosign.pub", img.ref).returncode != 0


def test_cosign_and_xcforge_signatures_accumulate_in_one_sig_tag(
    client, repo, sm2_key, cosign_key, other_cosign_key, key_files, cosign_bin
):
    img = push_synthetic_image(client, repo)
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=other_cosign_key, client=client)
    # The real cosign appends its signature (with our key file, in cosign's own format).
    subprocess.run(
        [cosign_bin, "sign", "--key", str(key_files / "cosign.key"), "--tlog-upload=false", "--yes",
         "--allow-insecure-registry", img.ref],
        env={**os.environ, "COSIGN_PASSWORD": "pw"}, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    sig = client.get_manifest(repo, signature_tag(img.digest, "cosign")).json()
    assert len(sig["layers"]) == 2
    # Same payload bytes: cosign's blob digest equals ours.
    assert {layer["digest"] for layer in sig["layers"]} == {sha256_digest(simple_signing_payload(img.name, img.digest))}
    for pub in ("cosign.pub", "other-cosign.pub"):
        assert cosign_verify(cosign_bin, key_files / pub, img.ref).returncode == 0
    report = verify_image(
        img.ref, [sm2_key.public_key], [cosign_key.public_key, other_cosign_key.public_key], client=client
    )
    assert report.ok and sum(c.valid for c in report.checks) == 3
    # Ours again after cosign: idempotent, and the SM2 tag was never touched by cosign.
    again = sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=other_cosign_key, client=client)
    assert not any(r.added for r in again)
    assert len(client.get_manifest(repo, signature_tag(img.digest, "sm2")).json()["layers"]) == 1


def test_tampered_signature_fails_in_cosign_and_in_xcforge(client, repo, sm2_key, cosign_key, key_files, cosign_bin):
    img = push_synthetic_image(client, repo)
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    tag = signature_tag(img.digest, "cosign")
    doc = client.get_manifest(repo, tag).json()
    forged = simple_signing_payload(img.name, img.digest, {"tampered": "yes"})
    doc["layers"][0]["digest"] = client.push_blob(repo, forged)
    doc["layers"][0]["size"] = len(forged)
    client.put_manifest(repo, tag, json.dumps(doc).encode(), OCI_MANIFEST)
    assert cosign_verify(cosign_bin, key_files / "cosign.pub", img.ref).returncode != 0
    assert not verify_image(img.ref, [], [cosign_key.public_key], client=client).ok


def _documented_script() -> str:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    [script] = [b for b in blocks if b.startswith("# verify-sm2-by-hand")]
    return script


def test_documented_curl_jq_openssl_check_verifies_our_sm2_signature(
    client, repo, sm2_key, other_sm2_key, key_files, tmp_path, real_registry
):
    img = push_synthetic_image(client, repo, index=True)
    sign_digest(img.name, img.digest, sm2_key=other_sm2_key, client=client)  # another signer first
    sign_digest(img.name, img.digest, sm2_key=sm2_key, client=client)
    script = tmp_path / "verify.sh"
    script.write_text(_documented_script())
    env = {
        **os.environ,
        "REGISTRY": real_registry,
        "REPO": repo,
        "DIGEST": img.digest,
        "PUB": str(key_files / "sm2.pub"),
    }
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Signature Verified Successfully" in run.stdout and "is valid for" in run.stdout
    # The same script refuses a key that did not sign, and a payload for another image.
    (tmp_path / "stranger.pub").write_bytes(type(sm2_key).generate().public_key.to_pem())
    refused = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env={**env, "PUB": str(tmp_path / "stranger.pub")}, capture_output=True
    )
    assert refused.returncode != 0
    other = push_synthetic_image(client, repo, tag="v2")
    sm2_manifest = client.get_manifest(repo, signature_tag(img.digest, "sm2"))
    client.put_manifest(repo, signature_tag(other.digest, "sm2"), sm2_manifest.data, OCI_MANIFEST)
    replay = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env={**env, "DIGEST": other.digest}, capture_output=True
    )
    assert replay.returncode != 0


def test_promote_then_cosign_and_xcforge_verify_at_the_destination(
    client, repo, sm2_key, cosign_key, key_files, cosign_bin
):
    img = push_synthetic_image(client, repo, index=True)
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    destination = f"{img.registry}/{repo}-prod"
    promote(img.ref, f"{destination}:1.0", source_client=client)
    dst_ref = f"{destination}@{img.digest}"
    assert cosign_verify(cosign_bin, key_files / "cosign.pub", dst_ref).returncode == 0  # cosign: no identity check
    assert not verify_image(dst_ref, [sm2_key.public_key], [cosign_key.public_key], client=client).ok
    promote(img.ref, destination, source_client=client, sm2_key=sm2_key, cosign_key=cosign_key)
    assert verify_image(dst_ref, [sm2_key.public_key], [cosign_key.public_key], client=client).ok
    assert cosign_verify(cosign_bin, key_files / "cosign.pub", dst_ref).returncode == 0
