"""ocicore/registry.py against an in-process registry: references, auth flows, retries, errors, blobs."""

from __future__ import annotations

import base64
import json

import pytest
from oci_fake_registry import FakeRegistry
from signing_helpers import push_synthetic_image

from ocicore.errors import InvalidReference, RegistryError
from ocicore.registry import (
    OCI_INDEX,
    Reference,
    RegistryClient,
    RegistryNotFound,
    copy_blob,
    is_loopback,
    sha256_digest,
)

D = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest", "name"),
    [
        ("ubuntu", "index.docker.io", "library/ubuntu", None, None, "index.docker.io/library/ubuntu"),
        ("ubuntu:22.04", "index.docker.io", "library/ubuntu", "22.04", None, "index.docker.io/library/ubuntu"),
        ("docker.io/org/app", "index.docker.io", "org/app", None, None, "index.docker.io/org/app"),
        ("127.0.0.1:5000/x/vllm:cpu", "127.0.0.1:5000", "x/vllm", "cpu", None, "127.0.0.1:5000/x/vllm"),
        (f"localhost:5000/a@{D}", "localhost:5000", "a", None, D, "localhost:5000/a"),
        (f"ghcr.io/o/r:t@{D}", "ghcr.io", "o/r", "t", D, "ghcr.io/o/r"),
        ("localhost/a", "localhost", "a", None, None, "localhost/a"),
        ("registry.cn-hangzhou.aliyuncs.com/ns/img", "registry.cn-hangzhou.aliyuncs.com", "ns/img", None, None, None),
    ],
)
def test_reference_parsing(text, registry, repository, tag, digest, name):
    ref = Reference.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.name == (name or f"{registry}/{repository}")
    assert Reference.parse(str(ref)) == ref


@pytest.mark.parametrize(
    "bad", ["", "host.example/UPPER", "a b", "x@sha256:short", "x:tag:tag", "x@md5:00", "-x/y", "x/../y"]
)
def test_bad_references_are_config_errors(bad):
    with pytest.raises(InvalidReference):
        Reference.parse(bad)


def test_loopback_registries_use_http():
    assert is_loopback("127.0.0.1:5000") and is_loopback("127.4.5.6") and is_loopback("localhost:5000")
    assert is_loopback("[::1]:5000")
    assert not is_loopback("registry.example:5000") and not is_loopback("10.0.0.1:5000")
    assert RegistryClient("127.0.0.1:5000").scheme == "http"
    assert RegistryClient("registry.example").scheme == "https"
    assert RegistryClient("registry.example", insecure=True).scheme == "http"


def test_push_pull_resolve_tags_and_delete(registry):
    client = RegistryClient(registry.address)
    image = push_synthetic_image(client, "team/app", index=True)
    manifest = client.get_manifest("team/app", image.digest)
    assert manifest.media_type == OCI_INDEX and manifest.is_index and manifest.digest == image.digest
    assert client.resolve("team/app", "v1") == image.digest
    assert client.head_manifest("team/app", "nope") is None
    assert client.list_tags("team/app") == ["v1"]
    assert client.list_tags("never/pushed") == []
    blob = client.push_blob("team/app", b"data")
    assert client.get_blob("team/app", blob) == b"data"
    assert client.push_blob("team/app", b"data") == blob  # exists: skipped
    client.delete_manifest("team/app", image.digest)
    with pytest.raises(RegistryNotFound):
        client.get_manifest("team/app", image.digest)


def test_tag_listing_follows_link_pagination(fault_registry):
    client = RegistryClient(fault_registry.address)
    image = push_synthetic_image(client, "many/tags")
    data = client.get_manifest("many/tags", image.digest)
    for i in range(7):
        client.put_manifest("many/tags", f"t{i}", data.data, data.media_type)
    fault_registry.tag_page_size = 3
    assert client.list_tags("many/tags") == sorted(["v1", *[f"t{i}" for i in range(7)]])


def test_bearer_token_flow_with_basic_credentials():
    with FakeRegistry(auth="bearer", user="alice", password="pw") as registry:
        client = RegistryClient(registry.address, credentials=("alice", "pw"))
        image = push_synthetic_image(client, "private/app")
        assert client.resolve("private/app", "v1") == image.digest
        assert ("GET", "/token") in registry.requests
        denied = RegistryClient(registry.address, credentials=("alice", "wrong"))
        with pytest.raises(RegistryError, match="token request"):
            denied.list_tags("private/app")


def test_basic_auth_and_credentials_from_env_and_docker_config(tmp_path, monkeypatch):
    with FakeRegistry(auth="basic", user="bob", password="s3") as registry:
        monkeypatch.setenv("XCFORGE_REGISTRY_USERNAME", "bob")
        monkeypatch.setenv("XCFORGE_REGISTRY_PASSWORD", "s3")
        push_synthetic_image(RegistryClient(registry.address), "a/b")
        monkeypatch.delenv("XCFORGE_REGISTRY_USERNAME")
        monkeypatch.delenv("XCFORGE_REGISTRY_PASSWORD")
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
        auth = base64.b64encode(b"bob:s3").decode()
        (tmp_path / "config.json").write_text(json.dumps({"auths": {registry.address: {"auth": auth}}}))
        assert RegistryClient(registry.address).list_tags("a/b") == ["v1"]
        (tmp_path / "config.json").write_text("{}")
        with pytest.raises(RegistryError, match="access denied"):
            RegistryClient(registry.address).list_tags("a/b")


def test_retries_on_5xx_and_429_then_gives_up_with_the_registry_message(fault_registry):
    client = RegistryClient(fault_registry.address, retries=3, backoff=0.01)
    push_synthetic_image(client, "flaky/app")
    fault_registry.fail_next = [503, 429, 502]
    assert client.list_tags("flaky/app") == ["v1"]
    fault_registry.fail_next = [500] * 10
    with pytest.raises(RegistryError, match=r"failed after 4 attempts: HTTP 500: UNAVAILABLE: injected"):
        client.list_tags("flaky/app")


def test_connection_refused_is_a_registry_error_with_a_hint():
    client = RegistryClient("127.0.0.1:1", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(RegistryError, match="is the registry running"):
        client.list_tags("x")


def test_content_is_checked_against_digests(fault_registry):
    client = RegistryClient(fault_registry.address)
    digest = client.push_blob("a/b", b"real content")
    fault_registry.blobs[digest] = b"swapped content"
    with pytest.raises(RegistryError, match="does not match its digest"):
        client.get_blob("a/b", digest)
    with pytest.raises(RegistryError, match="digest"):
        client.put_manifest("a/b", sha256_digest(b"other"), b"{}", OCI_INDEX)


def test_a_large_blob_is_hashed_on_its_own_thread_and_still_checked(fault_registry):
    """From 16 MiB download_blob hashes on a worker thread (ocicore.hashing): same bytes out, and a
    swapped blob of the same size is still refused."""
    import io
    import os

    client = RegistryClient(fault_registry.address)
    content = os.urandom(17 << 20)
    digest = client.push_blob("a/big", content)
    out = io.BytesIO()
    assert client.download_blob("a/big", digest, out) == len(content) and out.getvalue() == content
    fault_registry.blobs[digest] = content[:-1] + bytes([content[-1] ^ 1])
    with pytest.raises(RegistryError, match="does not match its digest"):
        client.download_blob("a/big", digest, io.BytesIO())


def test_threaded_sha256_is_hashlibs_digest():
    import hashlib
    import os

    from ocicore.hashing import ThreadedSha256

    blocks = [os.urandom(n) for n in (0, 1, 1 << 20, 12345, 3 << 20)]
    with ThreadedSha256(depth=2) as threaded:
        for block in blocks:
            threaded.update(block)
        assert threaded.hexdigest() == hashlib.sha256(b"".join(blocks)).hexdigest()
        with pytest.raises(ValueError, match="after hexdigest"):
            threaded.update(b"more")
    abandoned = ThreadedSha256()
    abandoned.update(b"x")
    abandoned.close()  # the stream failed: the worker stops, nothing hangs


def test_copy_blob_mounts_within_a_registry_and_streams_across(fault_registry):
    source = RegistryClient(fault_registry.address)
    digest = source.push_blob("src/app", b"x" * 100_000)
    copy_blob(source, "src/app", source, "dst/app", digest)
    assert ("POST", "/v2/dst/app/blobs/uploads/") in fault_registry.requests
    assert source.get_blob("dst/app", digest) == b"x" * 100_000
    with FakeRegistry() as other:
        target = RegistryClient(other.address)
        copy_blob(source, "src/app", target, "elsewhere/app", digest)
        assert target.get_blob("elsewhere/app", digest) == b"x" * 100_000
