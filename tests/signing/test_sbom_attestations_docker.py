"""SBOM and signed provenance against real parts: buildx, the registry, cosign, openssl (issue 11).

Two small images are built for real from the stand-in Python base: the base with a venv, and the
same plus one Debian package (built here with dpkg-deb, installed with dpkg) and one wheel
(installed with pip). Checked:

- the SBOM read from the OCI layers equals what the running image reports about itself (dpkg-query,
  importlib.metadata in each environment): read independently, not from our own parser;
- the added .deb and wheel appear in the SBOM, and nothing else changed;
- `sign` attests SBOM and BuildKit's provenance; `cosign verify-attestation` accepts both;
  openssl verifies the SM2 DSSE signature over the PAE bytes; `verify --require-attestations`
  passes, and fails once the attached SBOM or a signed envelope is altered;
- the same offline, beside the OCI archive.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import uuid
import zipfile
from pathlib import Path

import pytest
from signing_helpers import openssl_verify_sm2_many

from ocicore.layout import attestation_dir, sbom_file_name
from ocicore.push import push_layout
from ocicore.registry import OCI_MANIFEST, RegistryClient, canonical_json, sha256_digest
from signing.attest import IN_TOTO_PAYLOAD_TYPE, attach_sbom, pae, sbom_tag
from xcforge.attest import sbom
from xcforge.attest.attestations import write_attestations
from xcforge.cli import main
from xcforge.shell import DOCKER

pytestmark = pytest.mark.docker
BASE = "127.0.0.1:5000/standin/docker.io/library/python:3.11-slim-bookworm"
PROBE_WHEEL = "xcforge_sbom_probe-1.2.3-py3-none-any.whl"


def _wheel(path: Path) -> None:
    """A minimal valid wheel (PEP 427): one module, METADATA, WHEEL, RECORD with hashes."""
    files = {
        "xcforge_sbom_probe/__init__.py": b"VALUE = 1\n",
        "xcforge_sbom_probe-1.2.3.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: xcforge-sbom-probe\nVersion: 1.2.3\nLicense-Expression: MIT\n"
        ),
        "xcforge_sbom_probe-1.2.3.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = io.StringIO()
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{name},sha256={digest},{len(data)}\n")
    record.write("xcforge_sbom_probe-1.2.3.dist-info/RECORD,,\n")
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("xcforge_sbom_probe-1.2.3.dist-info/RECORD", record.getvalue())


def _deb(work: Path) -> Path:
    root = work / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share/xcforge-probe").mkdir(parents=True)
    (root / "usr/share/xcforge-probe/README").write_text("probe\n")
    (root / "DEBIAN/control").write_text(
        "Package: xcforge-probe\nVersion: 0.1-1\nArchitecture: all\nMaintainer: xcforge <x@example.invalid>\n"
        "Description: SBOM probe package\n"
    )
    out = work / "xcforge-probe_0.1-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


def _build(context: Path, dockerfile: str, archive: Path, name: str) -> None:
    (context / "Dockerfile").write_text(dockerfile)
    cmd = [DOCKER, "buildx", "build", "--platform", "linux/amd64", "--provenance=mode=max"]
    cmd += ["--output", f"type=oci,dest={archive},name={name}", str(context)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    work = tmp_path_factory.mktemp("sbom")
    context = work / "ctx"
    context.mkdir()
    _wheel(context / PROBE_WHEEL)
    (context / "probe.deb").write_bytes(_deb(work).read_bytes())
    tag = uuid.uuid4().hex[:8]
    common = f"FROM {BASE}\nRUN python3 -m venv /opt/venv\n"
    base_archive, probe_archive = work / "base.oci.tar", work / "probe.oci.tar"
    _build(context, common, base_archive, f"xcforge-test/sbom-base:{tag}")
    _build(
        context,
        common + f"COPY {PROBE_WHEEL} probe.deb /tmp/\n"
        f"RUN /opt/venv/bin/pip install --no-index /tmp/{PROBE_WHEEL} && dpkg -i /tmp/probe.deb\n"
        "RUN rm /tmp/*.whl /tmp/*.deb\n",
        probe_archive,
        f"xcforge-test/sbom-probe:{tag}",
    )
    loaded = subprocess.run([DOCKER, "load", "--input", str(probe_archive)], capture_output=True, text=True, check=True)
    image = loaded.stdout.strip().rsplit(" ", 1)[-1]
    yield {"base": base_archive, "probe": probe_archive, "image": image, "work": work}
    subprocess.run([DOCKER, "rmi", "-f", image], capture_output=True)


def _sbom_of(archive: Path, repository: str) -> tuple[bytes, dict]:
    [entry] = write_attestations(archive, attestation_dir(archive), repository)
    return Path(entry.sbom).read_bytes(), entry.as_dict()


def _inside(image: str, *cmd: str) -> str:
    return subprocess.run(
        [DOCKER, "run", "--rm", "--entrypoint", cmd[0], image, *cmd[1:]], capture_output=True, text=True, check=True
    ).stdout


_DISTS = (
    "import importlib.metadata as m, json, re;"
    "print(json.dumps(sorted({(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(), d.version)"
    " for d in m.distributions()})))"
)


def test_sbom_matches_what_the_image_reports_itself(images):
    data, _ = _sbom_of(images["probe"], "xcforge-test/sbom-probe")
    listed = sbom.packages_of(data)
    dpkg = _inside(images["image"], "dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\\n")
    debs = {
        ("deb", name, version)
        for status, name, version in (line.split() for line in dpkg.splitlines())
        if status == "ii"
    }
    venv = {("pypi", n, v) for n, v in json.loads(_inside(images["image"], "/opt/venv/bin/python", "-c", _DISTS))}
    system = {("pypi", n, v) for n, v in json.loads(_inside(images["image"], "python3", "-c", _DISTS))}
    assert {p for p in listed if p[0] == "deb"} == debs
    assert {p for p in listed if p[0] == "pypi"} == venv | system
    doc = json.loads(data)
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    assert doc["metadata"]["component"]["type"] == "container"


def test_an_added_package_appears_in_the_sbom(images):
    base, _ = _sbom_of(images["base"], "xcforge-test/sbom-base")
    probe, _ = _sbom_of(images["probe"], "xcforge-test/sbom-probe")
    added = sbom.packages_of(probe) - sbom.packages_of(base)
    assert added == {("deb", "xcforge-probe", "0.1-1"), ("pypi", "xcforge-sbom-probe", "1.2.3")}
    assert sbom.packages_of(base) <= sbom.packages_of(probe)
    summary = sbom.summarize(probe)
    assert summary.environments == {"/opt/venv": 3}  # pip and setuptools (the venv's own) + the probe
    assert summary.by_ecosystem["deb"] == len([p for p in sbom.packages_of(probe) if p[0] == "deb"])


@pytest.fixture
def keys(tmp_path):
    assert main(["keygen", "--sm2", "--cosign", "--out", str(tmp_path / "keys"), "--no-password", "--no-audit"]) == 0
    return tmp_path / "keys"


def test_registry_attestations_verify_with_cosign_and_openssl(
    images, keys, tmp_path, capsys, real_registry, cosign_bin
):
    client = RegistryClient(real_registry)
    repository = f"xcforge-test/sbom-{uuid.uuid4().hex[:8]}"
    name = f"{real_registry}/{repository}"
    data, entry = _sbom_of(images["probe"], name)
    index = push_layout(images["probe"], name, progress=lambda _m: None)
    subject = {"mediaType": entry["media_type"], "size": entry["size"], "digest": entry["digest"]}
    attach_sbom(client, repository, subject, data, sbom.MEDIA_TYPE)
    audit = ["--audit-log", str(tmp_path / "audit.jsonl")]
    signing = ["--sm2-key", str(keys / "sm2.key"), "--cosign-key", str(keys / "cosign.key")]
    assert main(["sign", f"{name}@{index}", *signing, *audit]) == 0
    out = capsys.readouterr().out
    assert out.count("attested: ") == 4, out  # SBOM + provenance, SM2 + cosign
    trusted = ["--sm2-key", str(keys / "sm2.pub"), "--cosign-key", str(keys / "cosign.pub")]
    assert main(["verify", f"{name}@{index}", *trusted, "--require-attestations", *audit]) == 0
    assert capsys.readouterr().out.count("VALID") == 6

    platform = f"{name}@{entry['digest']}"
    for kind in ("cyclonedx", "slsaprovenance"):
        proc = subprocess.run(
            [
                *(cosign_bin, "verify-attestation", "--key", str(keys / "cosign.pub"), "--type", kind),
                *("--insecure-ignore-tlog", "--allow-insecure-registry", platform),
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        [envelope] = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        statement = json.loads(base64.b64decode(envelope["payload"]))
        assert statement["subject"][0]["digest"]["sha256"] == entry["digest"].split(":")[1]
        if kind == "cyclonedx":
            assert statement["predicate"] == json.loads(data)
        else:
            revision = statement["predicate"]["metadata"]["https://mobyproject.org/buildkit@v1#metadata"]
            assert "source" in revision

    # openssl checks the SM2 envelope: SM2-with-SM3 over PAE(payloadType, statement).
    tag = entry["digest"].replace(":", "-") + ".sm2att"
    manifest = client.get_manifest(repository, tag).json()
    items = []
    for layer in manifest["layers"]:
        env = json.loads(client.get_blob(repository, layer["digest"]))
        items.append(
            (pae(IN_TOTO_PAYLOAD_TYPE, base64.b64decode(env["payload"])), base64.b64decode(env["signatures"][0]["sig"]))
        )
    assert openssl_verify_sm2_many(tmp_path / "ossl", (keys / "sm2.pub").read_bytes(), items) == [True, True]

    # An SBOM swapped after signing no longer matches the signed one.
    doc = json.loads(data)
    doc["components"] = doc["components"][1:]
    attach_sbom(client, repository, subject, canonical_json(doc), sbom.MEDIA_TYPE)
    assert main(["verify", f"{name}@{index}", *trusted, *audit]) == 8
    assert "the signed SBOM differs" in capsys.readouterr().out
    attach_sbom(client, repository, subject, data, sbom.MEDIA_TYPE)

    # A statement rewritten inside the cosign envelope: signature no longer verifies.
    tag = entry["digest"].replace(":", "-") + ".att"
    manifest = client.get_manifest(repository, tag).json()
    env = json.loads(client.get_blob(repository, manifest["layers"][0]["digest"]))
    forged = json.loads(base64.b64decode(env["payload"]))
    forged["predicate"]["components"] = []
    env["payload"] = base64.b64encode(canonical_json(forged)).decode()
    blob = canonical_json(env)
    client.push_blob(repository, blob)
    manifest["layers"][0].update(digest=sha256_digest(blob), size=len(blob))
    client.put_manifest(repository, tag, canonical_json(manifest), OCI_MANIFEST)
    assert main(["verify", f"{name}@{index}", *trusted, *audit]) == 8
    out = capsys.readouterr().out
    assert "no trusted key verifies this envelope" in out and "no valid cosign SBOM attestation" in out
    assert client.head_manifest(repository, sbom_tag(entry["digest"])) is not None


def test_archive_attestations_offline(images, keys, tmp_path, capsys):
    archive = tmp_path / "probe.oci.tar"
    archive.write_bytes(images["probe"].read_bytes())
    _sbom_of(archive, "xcforge-test/sbom-probe")
    from ocicore.layout import OciArchive

    index, _ = OciArchive(archive).top_index()
    audit = ["--audit-log", str(tmp_path / "audit.jsonl")]
    ref = f"xcforge-test/sbom-probe@{index}"
    assert main(["sign", ref, "--archive", str(archive), "--sm2-key", str(keys / "sm2.key"), *audit]) == 0
    assert capsys.readouterr().out.count("attested: ") == 2
    trusted = ["--sm2-key", str(keys / "sm2.pub"), "--archive", str(archive), *audit]
    assert main(["verify", ref, *trusted, "--require-attestations"]) == 0
    capsys.readouterr()
    assert main(["sbom", "--archive", str(archive)]) == 0
    assert "xcforge-sbom-probe" not in capsys.readouterr().out  # the summary names only the key packages
    sbom_file = attestation_dir(archive) / sbom_file_name("linux/amd64")
    doc = json.loads(sbom_file.read_bytes())
    doc["components"].append({"type": "library", "name": "evil", "version": "1"})
    sbom_file.write_text(json.dumps(doc))
    assert main(["verify", ref, *trusted]) == 8
    assert "the signed SBOM differs" in capsys.readouterr().out
