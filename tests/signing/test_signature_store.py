"""The SignatureStore interface: the same operations, written once in signing/, give the same
signatures, attestations and verdicts in both stores (a registry's tags, the files beside an archive)."""

from __future__ import annotations

import json

import pytest
from signing_helpers import push_synthetic_image

from ocicore.registry import Reference, RegistryClient
from signing.attest import SBOM_PREDICATE, check_attestation, statement
from signing.sign import attest, sign
from signing.store import OciArchiveStore, RegistryStore, SignatureStore, open_store
from signing.verify import verify


@pytest.fixture(params=["registry", "archive"])
def store_and_digest(request, registry, tmp_path) -> tuple[SignatureStore, str]:
    client = RegistryClient(registry.address)
    image = push_synthetic_image(client, "team/store")
    if request.param == "registry":
        return RegistryStore(Reference.parse(image.name), client), image.digest
    return OciArchiveStore(tmp_path / "image.oci.tar", image.name), image.digest


def test_sign_is_written_once_and_reads_back_the_same_in_both_stores(store_and_digest, sm2_key, cosign_key):
    store, digest = store_and_digest
    first = sign(store, digest, sm2_key=sm2_key, cosign_key=cosign_key)
    again = sign(store, digest, sm2_key=sm2_key, cosign_key=cosign_key)
    assert [(r.scheme, r.added) for r in first] == [("sm2", True), ("cosign", True)]
    assert [(r.scheme, r.added) for r in again] == [("sm2", False), ("cosign", False)]
    for scheme in ("sm2", "cosign"):
        stored = store.read_signatures(digest, scheme)
        assert stored is not None and len(stored) == 1 and stored[0].problem is None
        document = json.loads(store.signature_document(digest, scheme) or b"{}")
        assert (document["subject"], document["scheme"], len(document["signatures"])) == (digest, scheme, 1)
    report = verify(store, digest, [sm2_key.public_key], [cosign_key.public_key], attestations=False)
    assert report.ok, report.lines()
    assert report.reference == store.describe(digest)


def test_an_unsigned_digest_is_missing_in_both_stores(store_and_digest, sm2_key):
    store, digest = store_and_digest
    assert store.read_signatures(digest, "sm2") is None
    assert store.signature_document(digest, "sm2") is None
    report = verify(store, digest, [sm2_key.public_key], attestations=False)
    assert not report.ok and report.missing == ("sm2",)
    assert [c.found for c in report.checks] == [False]


def test_attestations_are_written_once_in_both_stores(store_and_digest, sm2_key, cosign_key):
    store, digest = store_and_digest
    statements = [(SBOM_PREDICATE, statement(SBOM_PREDICATE, {"bomFormat": "CycloneDX"}, [("team/store", digest)]))]
    made = attest(statements, digest, store=store, sm2_key=sm2_key, cosign_key=cosign_key)
    assert [r.added for r in made] == [True, True]
    assert [r.added for r in attest(statements, digest, store=store, sm2_key=sm2_key)] == [False]
    for scheme in ("sm2", "cosign"):
        [stored] = store.read_attestations(digest, scheme) or []
        check = check_attestation(stored, digest, [sm2_key.public_key], [cosign_key.public_key])
        assert check.valid, check.reason


def test_open_store_picks_the_archive_when_one_is_given(tmp_path):
    archive = open_store("127.0.0.1:5000/team/app:v1", tmp_path / "a.oci.tar")
    registry = open_store("127.0.0.1:5000/team/app:v1")
    assert isinstance(archive, OciArchiveStore) and archive.name == "127.0.0.1:5000/team/app"
    assert isinstance(registry, RegistryStore) and registry.name == "127.0.0.1:5000/team/app"
