"""Keyless (Sigstore) signing: what we sign and where it goes. The live flow needs an OIDC token."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from signing_helpers import push_synthetic_image

from ocicore.registry import OCI_EMPTY, OCI_INDEX, OCI_MANIFEST, Reference, RegistryClient, sha256_digest
from signing.errors import InvalidSigningRequest, SigningError
from signing.keyless import (
    BUNDLE_MEDIA_TYPE,
    PREDICATE_TYPE,
    attach_bundle,
    build_statement,
    bundle_manifest,
    detect_identity_token,
    read_bundles,
    referrers_index,
    sign_keyless,
)

DIGEST = "sha256:" + "ef" * 32


def test_statement_is_cosign_v3_sign_statement_and_valid_for_sigstore():
    from sigstore.dsse import Statement

    raw = build_statement("ghcr.io/org/vllm", DIGEST)
    doc = json.loads(raw)
    assert doc == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "ghcr.io/org/vllm", "digest": {"sha256": "ef" * 32}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1",
        "predicate": {},
    }
    statement = Statement(raw)  # sigstore-python's own validation accepts it
    assert statement._contents == raw
    with pytest.raises(InvalidSigningRequest):
        build_statement("ghcr.io/org/vllm", "latest")


def test_bundle_manifest_and_referrers_index_follow_the_bundle_spec():
    subject = {"mediaType": OCI_INDEX, "digest": DIGEST, "size": 512}
    bundle = b'{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}'
    manifest = bundle_manifest(bundle, subject, created=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC))
    doc = json.loads(manifest)
    assert doc["artifactType"] == BUNDLE_MEDIA_TYPE and doc["mediaType"] == OCI_MANIFEST
    assert doc["config"] == {"mediaType": OCI_EMPTY, "digest": sha256_digest(b"{}"), "size": 2}
    assert doc["layers"][0]["digest"] == sha256_digest(bundle) and doc["layers"][0]["mediaType"] == BUNDLE_MEDIA_TYPE
    assert doc["layers"][0]["annotations"]["org.opencontainers.image.title"].endswith(".sigstore.json")
    assert doc["subject"] == subject
    assert doc["annotations"] == {
        "dev.sigstore.bundle.content": "dsse-envelope",
        "dev.sigstore.bundle.predicateType": PREDICATE_TYPE,
        "org.opencontainers.image.created": "2026-01-02T03:04:05.678Z",
    }
    index = json.loads(referrers_index(None, manifest))
    assert index["mediaType"] == OCI_INDEX
    assert index["manifests"] == [
        {
            "mediaType": OCI_MANIFEST,
            "digest": sha256_digest(manifest),
            "size": len(manifest),
            "artifactType": BUNDLE_MEDIA_TYPE,
            "annotations": doc["annotations"],
        }
    ]
    again = json.loads(referrers_index(index, manifest))
    assert len(again["manifests"]) == 1  # idempotent
    other = bundle_manifest(b"{}", subject)
    assert len(json.loads(referrers_index(index, other))["manifests"]) == 2


def test_bundles_are_stored_under_the_referrers_tag(registry):
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/keyless", index=True)
    ref = Reference.parse(img.name)
    subject = client.get_manifest(img.repository, img.digest).descriptor()
    record = attach_bundle(client, ref, img.digest, b'{"one":1}', subject, identity="ci@example")
    attach_bundle(client, ref, img.digest, b'{"two":2}', subject)
    assert record.index_tag.endswith(":" + img.digest.replace(":", "-"))
    assert sorted(read_bundles(client, ref, img.digest)) == [b'{"one":1}', b'{"two":2}']


def test_signing_without_a_token_fails_cleanly(registry, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("ACTIONS_ID_TOKEN_REQUEST_URL", raising=False)
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/keyless")
    with pytest.raises(SigningError, match="id-token: write"):
        sign_keyless(img.name, img.digest, client=client)


def test_live_keyless_signing_with_ci_oidc_token(real_or_registry_for_keyless):
    token = detect_identity_token()
    if not token:
        pytest.skip(
            "no OIDC identity token (keyless needs GitHub Actions with `permissions: id-token: write` and network "
            "access to Fulcio/Rekor); statement/manifest construction is covered above"
        )
    client, img = real_or_registry_for_keyless
    record = sign_keyless(img.name, img.digest, identity_token=token, client=client)
    assert read_bundles(client, Reference.parse(img.name), img.digest)
    assert record.identity


@pytest.fixture
def real_or_registry_for_keyless(registry):
    client = RegistryClient(registry.address)
    return client, push_synthetic_image(client, "team/keyless-live")


def test_verify_image_checks_keyless_bundles_offline(registry, sm2_key):
    from signing.sign import sign_digest
    from signing.verify import verify_image

    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "team/keyless-verify")
    workflow = "https://github.com/org/xcforge/.github/workflows/build.yml@refs/heads/main"
    report = verify_image(img.ref, keyless_identity=workflow, client=client)
    assert not report.ok and report.checks[0].scheme == "keyless" and not report.checks[0].found
    subject = client.get_manifest(img.repository, img.digest).descriptor()
    attach_bundle(client, Reference.parse(img.name), img.digest, b'{"not": "a bundle"}', subject)
    sign_digest(img.name, img.digest, sm2_key=sm2_key, client=client)
    report = verify_image(img.ref, [sm2_key.public_key], keyless_identity=workflow, client=client)
    keyless = [c for c in report.checks if c.scheme == "keyless"]
    assert len(keyless) == 1 and not keyless[0].valid and "does not verify" in keyless[0].reason
    assert report.missing == ("keyless",)
    assert verify_image(img.ref, [sm2_key.public_key], require=["sm2"], keyless_identity=workflow, client=client).ok
    with pytest.raises(InvalidSigningRequest, match="--keyless-identity"):
        verify_image(img.ref, [sm2_key.public_key], require=["keyless"], client=client)
