"""Promotion: an image (index, manifests, blobs) and its signature tags, within and across registries."""

from __future__ import annotations

import pytest
from signing_helpers import push_synthetic_image

from ocicore.registry import Reference, RegistryClient
from signing.errors import InvalidSigningRequest
from signing.keyless import attach_bundle
from signing.promote import promote
from signing.sign import sign_digest
from signing.store import signature_tag
from signing.verify import verify_image
from tests.registry_process import RegistryProcess


@pytest.fixture
def signed_index(registry, sm2_key, cosign_key):
    client = RegistryClient(registry.address)
    img = push_synthetic_image(client, "staging/vllm", index=True)
    sign_digest(img.name, img.digest, sm2_key=sm2_key, cosign_key=cosign_key, client=client)
    sign_digest(img.name, img.children[0], sm2_key=sm2_key, client=client)  # a per-platform signature too
    manifest = client.get_manifest(img.repository, img.digest)
    attach_bundle(client, Reference.parse(img.name), img.digest, b'{"fake":"bundle"}', manifest.descriptor())
    return client, img


def _tags(client, repository):
    return set(client.list_tags(repository))


def test_promote_within_a_registry_copies_everything_and_keeps_the_digest(signed_index, sm2_key, cosign_key):
    client, img = signed_index
    result = promote(img.ref, f"{img.registry}/prod/vllm:1.0", source_client=client)
    assert result.digest == img.digest
    assert client.resolve("prod/vllm", "1.0") == img.digest
    for child in img.children:
        assert client.head_manifest("prod/vllm", child) is not None
    expected = {
        signature_tag(img.digest, "sm2"),
        signature_tag(img.digest, "cosign"),
        signature_tag(img.children[0], "sm2"),
        img.digest.replace(":", "-"),  # referrers fallback index with the bundle
    }
    assert expected <= _tags(client, "prod/vllm") and set(result.tags) == expected
    # Identity: the copies name staging/vllm, so strict verification under prod/vllm fails...
    dst = f"{img.registry}/prod/vllm@{img.digest}"
    assert not verify_image(dst, [sm2_key.public_key], [cosign_key.public_key], client=client).ok
    # ...until the verifier allows the source name,
    allowed = verify_image(
        dst, [sm2_key.public_key], [cosign_key.public_key], client=client, allowed_identities=[img.name]
    )
    assert allowed.ok
    # ...or the destination is re-signed for its own name.
    promote(img.ref, f"{img.registry}/prod/vllm", source_client=client, sm2_key=sm2_key, cosign_key=cosign_key)
    report = verify_image(dst, [sm2_key.public_key], [cosign_key.public_key], client=client)
    assert report.ok and sum(c.valid for c in report.checks) == 2  # the copies stay listed, invalid here


def test_promote_across_registries_and_merge_existing_signatures(signed_index, other_sm2_key, sm2_key):
    client, img = signed_index
    with RegistryProcess() as other:
        target = RegistryClient(other.address)
        dst = f"{other.address}/mirror/vllm"
        # The destination already holds a signature of its own for this digest (signed earlier there).
        promote(img.ref, dst, source_client=client, target_client=target, sm2_key=other_sm2_key)
        result = promote(img.ref, dst, source_client=client, target_client=target)
        assert result.manifests == 3
        sm2 = target.get_manifest("mirror/vllm", signature_tag(img.digest, "sm2")).json()
        assert len(sm2["layers"]) == 2  # ours from the destination + the copied one, merged
        report = verify_image(
            f"{dst}@{img.digest}",
            [sm2_key.public_key, other_sm2_key.public_key],
            client=target,
            allowed_identities=[img.name],
        )
        assert report.ok and sum(c.valid for c in report.checks) == 2


def test_promote_refuses_tags_and_same_repository(signed_index):
    client, img = signed_index
    with pytest.raises(InvalidSigningRequest, match="digest"):
        promote(f"{img.name}:v1", f"{img.registry}/prod/x", source_client=client)
    with pytest.raises(InvalidSigningRequest, match="same repository"):
        promote(img.ref, img.name, source_client=client)
