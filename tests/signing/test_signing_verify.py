"""Signing into a registry and verifying: accumulation, and every way a signature must be rejected.

Runs against the in-process registry (real HTTP, real client code); the docker-marked tests repeat
the main flows against distribution 2.8 and the real cosign binary.
"""

from __future__ import annotations

import base64
import json

import pytest
from signing_helpers import push_synthetic_image

from ocicore.registry import OCI_MANIFEST, RegistryClient
from signing import cosign_format, sm2_format
from signing.errors import InvalidSigningRequest, SigningError
from signing.payload import SIMPLE_SIGNING_MEDIA_TYPE, simple_signing_payload
from signing.sign import sign_archive, sign_digest
from signing.store import detached_path, signature_tag
from signing.verify import verify_archive, verify_image


@pytest.fixture
def image(registry):
    client = RegistryClient(registry.address)
    return client, push_synthetic_image(client, "team/vllm-cpu", index=True)


def _manifest(client, repository, digest, scheme):
    return client.get_manifest(repository, signature_tag(digest, scheme)).json()


def _rewrite_layer(client, repository, digest, scheme, index, *, payload=None, annotations=None):
    """Tamper with one stored signature the way an attacker with registry write access could."""
    doc = _manifest(client, repository, digest, scheme)
    layer = doc["layers"][index]
    if payload is not None:
        layer["digest"] = client.push_blob(repository, payload)
        layer["size"] = len(payload)
    if annotations is not None:
        layer["annotations"] = annotations
    data = json.dumps(doc).encode()
    client.put_manifest(repository, signature_tag(digest, scheme), data, OCI_MANIFEST)


def test_sign_both_schemes_and_verify(image, sm2_key, cosign_key):
    client, img = image
    records = sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    assert {(r.scheme, r.added) for r in records} == {("sm2", True), ("cosign", True)}
    report = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert report.ok, report.lines()
    assert [c.scheme for c in report.checks if c.valid] == ["cosign", "sm2"]
    assert report.lines()[-1].startswith("OK: ")


def test_layouts_keep_cosign_tag_pure_and_sm2_in_its_own_namespace(image, sm2_key, cosign_key):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    sig = _manifest(client, img.repository, img.digest, "cosign")
    assert [set(layer["annotations"]) for layer in sig["layers"]] == [{cosign_format.SIGNATURE_ANNOTATION}]
    assert "annotations" not in sig
    sm2_doc = _manifest(client, img.repository, img.digest, "sm2")
    layer = sm2_doc["layers"][0]
    assert layer["mediaType"] == SIMPLE_SIGNING_MEDIA_TYPE
    assert layer["annotations"][sm2_format.KEYID_ANNOTATION] == sm2_key.key_id
    assert layer["annotations"][sm2_format.DISTID_ANNOTATION] == "1234567812345678"
    assert sm2_doc["annotations"] == {"cn.xcforge.sm2/format": "1"}
    payload = client.get_blob(img.repository, layer["digest"])
    assert payload == simple_signing_payload(img.name, img.digest)
    assert signature_tag(img.digest, "sm2") == img.digest.replace(":", "-") + ".sm2"


def test_signatures_accumulate_and_resigning_is_idempotent(image, sm2_key, other_sm2_key, cosign_key, other_cosign_key):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    before = {s: client.resolve(img.repository, signature_tag(img.digest, s)) for s in ("sm2", "cosign")}
    again = sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    assert [r.added for r in again] == [False, False]
    assert {s: client.resolve(img.repository, signature_tag(img.digest, s)) for s in before} == before
    sign_digest(img.name, img.digest, sm2_key=other_sm2_key, cosign_key=other_cosign_key, client=client)
    assert len(_manifest(client, img.repository, img.digest, "sm2")["layers"]) == 2
    assert len(_manifest(client, img.repository, img.digest, "cosign")["layers"]) == 2
    report = verify_image(
        img.ref, [sm2_key.public_key, other_sm2_key.public_key], [other_cosign_key.public_key], client=client
    )
    assert report.ok
    assert sum(c.valid for c in report.checks) == 3  # the first cosign key is not trusted here


def test_signature_by_another_key_is_rejected(image, sm2_key, other_sm2_key, cosign_key, other_cosign_key):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=other_sm2_key, cosign_key=other_cosign_key, client=client)
    report = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not report.ok and report.missing == ("cosign", "sm2")
    reasons = {c.scheme: c.reason for c in report.checks}
    assert "not a trusted key" in reasons["sm2"]
    assert "no trusted key verifies" in reasons["cosign"]


def test_payload_for_another_digest_is_rejected(registry, sm2_key, cosign_key):
    client = RegistryClient(registry.address)
    first = push_synthetic_image(client, "team/app")
    second = push_synthetic_image(client, "team/app", tag="v2")
    sign_digest(first.name, first.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    # Replay: the first image's (valid) signature manifests placed under the second image's tags.
    for scheme in ("sm2", "cosign"):
        data = client.get_manifest(first.repository, signature_tag(first.digest, scheme))
        client.put_manifest(first.repository, signature_tag(second.digest, scheme), data.data, OCI_MANIFEST)
    report = verify_image(second.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not report.ok
    assert all("payload is for another image" in c.reason for c in report.checks)


def test_identity_rule_rejects_copies_unless_allowed(registry, sm2_key):
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "staging/app")
    sign_digest(img.name, img.digest, sm2_key=sm2_key, client=client)
    # A copy under another name with the same digest and the signatures (no re-signing).
    for digest in (img.digest,):
        manifest = client.get_manifest("staging/app", digest)
        for blob in [manifest.json()["config"], *manifest.json()["layers"]]:
            client.push_blob("prod/app", client.get_blob("staging/app", blob["digest"]))
        client.put_manifest("prod/app", digest, manifest.data, manifest.media_type)
    sig = client.get_manifest("staging/app", signature_tag(img.digest, "sm2"))
    for blob in [sig.json()["config"], *sig.json()["layers"]]:
        client.push_blob("prod/app", client.get_blob("staging/app", blob["digest"]))
    client.put_manifest("prod/app", signature_tag(img.digest, "sm2"), sig.data, OCI_MANIFEST)
    copied = f"{registry.address}/prod/app@{img.digest}"
    strict = verify_image(copied, [sm2_key.public_key], client=client)
    assert not strict.ok and "names repository" in strict.checks[0].reason
    assert verify_image(copied, [sm2_key.public_key], client=client, allowed_identities=[img.name]).ok
    assert verify_image(copied, [sm2_key.public_key], client=client, check_identity=False).ok


def test_modified_payload_and_signature_are_rejected(image, sm2_key, cosign_key):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    forged = simple_signing_payload(img.name, img.digest, {"approved": "yes"})
    for scheme in ("sm2", "cosign"):
        _rewrite_layer(client, img.repository, img.digest, scheme, 0, payload=forged)
    report = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not report.ok
    assert "modified" in report.checks[1].reason  # sm2 names its key: the verdict can say "modified"

    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)  # fresh, valid layer
    for scheme, fmt in (("sm2", sm2_format), ("cosign", cosign_format)):
        doc = _manifest(client, img.repository, img.digest, scheme)
        annotations = dict(doc["layers"][1]["annotations"])
        raw = bytearray(base64.b64decode(annotations[fmt.SIGNATURE_ANNOTATION]))
        raw[-1] ^= 0x01
        annotations[fmt.SIGNATURE_ANNOTATION] = base64.b64encode(bytes(raw)).decode()
        _rewrite_layer(client, img.repository, img.digest, scheme, 1, annotations=annotations)
    report = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not report.ok and not any(c.valid for c in report.checks)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda sig: sig[:-4],  # truncated
        lambda sig: sig[: len(sig) // 2],
        lambda sig: base64.b64encode(b"garbage" * 10).decode(),
        lambda sig: "not base64 !!!",
        lambda sig: "",
        lambda sig: base64.b64encode(bytes(64)).decode(),  # raw zero r||s, not DER
    ],
    ids=["truncated-b64", "half", "garbage", "not-base64", "empty", "raw-zeros"],
)
def test_truncated_or_garbage_signatures_are_invalid_not_errors(image, sm2_key, cosign_key, mangle):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    for scheme, fmt in (("sm2", sm2_format), ("cosign", cosign_format)):
        doc = _manifest(client, img.repository, img.digest, scheme)
        annotations = dict(doc["layers"][0]["annotations"])
        annotations[fmt.SIGNATURE_ANNOTATION] = mangle(annotations[fmt.SIGNATURE_ANNOTATION])
        _rewrite_layer(client, img.repository, img.digest, scheme, 0, annotations=annotations)
    report = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not report.ok
    assert len(report.checks) == 2 and not any(c.valid for c in report.checks)


def test_missing_tags_missing_image_and_foreign_layers(image, sm2_key, cosign_key, registry):
    client, img = image
    report = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not report.ok and {c.found for c in report.checks} == {False}
    assert any(line.startswith("MISSING sm2") for line in report.lines())
    absent = f"{registry.address}/team/vllm-cpu@sha256:" + "0" * 64
    report = verify_image(absent, [sm2_key.public_key], client=client)
    assert not report.ok and "not found" in report.problems[0]
    # A layer of another media type inside .sm2 is reported, and does not hide the valid one.
    sign_digest(img.name, img.digest, sm2_key=sm2_key, client=client)
    doc = _manifest(client, img.repository, img.digest, "sm2")
    doc["layers"].insert(0, {"mediaType": "text/plain", "digest": client.push_blob(img.repository, b"x"), "size": 1})
    client.put_manifest(img.repository, signature_tag(img.digest, "sm2"), json.dumps(doc).encode(), OCI_MANIFEST)
    report = verify_image(img.ref, [sm2_key.public_key], client=client)
    assert report.ok and not report.checks[0].valid and "media type" in report.checks[0].reason


def test_distinguishing_id_is_part_of_the_signature(image, sm2_key):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=sm2_key, sm2_dist_id=b"xcforge-release", client=client)
    default = verify_image(img.ref, [sm2_key.public_key], client=client)
    assert not default.ok and "distinguishing ID 'xcforge-release'" in default.checks[0].reason
    assert verify_image(img.ref, [sm2_key.public_key], client=client, sm2_dist_id=b"xcforge-release").ok


def test_require_semantics(image, sm2_key, cosign_key):
    client, img = image
    sign_digest(img.name, img.digest, sm2_key=sm2_key, client=client)
    both = verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert not both.ok and both.missing == ("cosign",)
    assert verify_image(img.ref, [sm2_key.public_key], [cosign_key.public_key], require=["sm2"], client=client).ok
    with pytest.raises(InvalidSigningRequest, match="no cosign public key"):
        verify_image(img.ref, [sm2_key.public_key], require=["sm2", "cosign"], client=client)
    with pytest.raises(InvalidSigningRequest, match="no trusted keys"):
        verify_image(img.ref, client=client)


def test_sign_refuses_unpushed_digests_and_bad_input(image, sm2_key):
    client, img = image
    with pytest.raises(SigningError, match="push the image"):
        sign_digest(img.name, "sha256:" + "1" * 64, sm2_key=sm2_key, client=client)
    with pytest.raises(InvalidSigningRequest):
        sign_digest(img.name, "latest", sm2_key=sm2_key, client=client)
    with pytest.raises(InvalidSigningRequest, match="nothing to sign"):
        sign_digest(img.name, img.digest, client=client)


def test_archive_signatures_beside_an_oci_layout(tmp_path, sm2_key, cosign_key, other_sm2_key):
    archive = tmp_path / "vllm-cpu.oci.tar"
    archive.write_bytes(b"an OCI layout tarball")
    digest = "sha256:" + "ab" * 32
    records = sign_archive(archive, "registry.example/team/vllm-cpu", digest, sm2_key=sm2_key, cosign_key=cosign_key)
    assert detached_path(archive, digest, "sm2").name == f"sha256-{'ab' * 32}.sm2.json"
    assert {r.location for r in records} == {
        str(detached_path(archive, digest, "sm2")),
        str(detached_path(archive, digest, "cosign")),
    }
    assert not any(r.added for r in sign_archive(archive, "registry.example/team/vllm-cpu", digest, sm2_key=sm2_key))
    args = (archive, digest, "registry.example/team/vllm-cpu", [sm2_key.public_key], [cosign_key.public_key])
    assert verify_archive(*args).ok
    assert not verify_archive(archive, digest, "registry.example/team/other", [sm2_key.public_key]).ok
    assert not verify_archive(archive, digest, "registry.example/team/vllm-cpu", [other_sm2_key.public_key]).ok
    path = detached_path(archive, digest, "sm2")
    doc = json.loads(path.read_text())
    doc["signatures"][0]["payload"] = base64.b64encode(b'{"critical":{}}').decode()
    path.write_text(json.dumps(doc))
    assert not verify_archive(*args).ok
    path.unlink()
    missing = verify_archive(*args)
    assert not missing.ok and missing.missing == ("sm2",)
