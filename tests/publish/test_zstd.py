"""The zstd variant (xcforge/publish/zstd.py) against a real registry process, with real gzip tar
layers and real zstd: round trip, idempotence, refusals with nothing tagged, skopeo, signatures,
and the `zstd` / `sign --target` / `verify --target` commands on a recorded report."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass

import pytest
import zstandard

from ocicore.media import DOCKER_MANIFEST, OCI_CONFIG, OCI_INDEX, OCI_MANIFEST
from ocicore.registry import RegistryClient, canonical_json, sha256_digest
from signing.cosign_keys import CosignPrivateKey
from signing.sm2_keys import Sm2PrivateKey
from signing.verify import verify_image
from tests.registry_process import RegistryProcess
from xcforge.bake.result import BuildResult, PlatformResult
from xcforge.cli import main
from xcforge.errors import BuildFailed, ConfigError
from xcforge.plan.build_plan import OutputMode
from xcforge.publish.zstd import LAYER_ZSTD, SOURCE_LAYER, VARIANT_OF, publish_zstd, transcode, variant
from xcforge.report.results import load_results, markdown, with_outcomes, write_reports
from xcforge.sign.stage import SigningKeys, sign_recorded, signed_digests

LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REPO = "xcforge/vllm-cpu"
TAG = "0.32.0-cpu"


def tar_of(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


@dataclass(frozen=True)
class Image:
    digest: str
    children: dict[str, str]  # platform → manifest digest
    tars: dict[str, bytes]  # gzip layer digest → its tar
    attestation: dict


def push_image(
    client: RegistryClient, *, extra: bytes = b"", corrupt: bool = False, wrong_diff_id: bool = False, tag: str = TAG
) -> Image:
    """An index over linux/amd64 and linux/arm64 sharing a base layer, each with its own layer (of
    compressible and random bytes, gzip'd in two members as pigz may write), plus a BuildKit-style
    attestation manifest for amd64."""
    base_tar = tar_of({"etc/xcforge-base": b"base layer\n" * 4000})
    base = gzip.compress(base_tar, mtime=0)
    base_digest = client.push_blob(REPO, base)
    tars = {base_digest: base_tar}
    children: dict[str, str] = {}
    descriptors = []
    for arch in ("amd64", "arm64"):
        own_tar = tar_of({f"opt/{arch}/lib.so": os.urandom(20000) + b"\0" * 50000 + extra})
        half = len(own_tar) // 2
        own = gzip.compress(own_tar[:half], mtime=0) + gzip.compress(own_tar[half:], mtime=0)
        if corrupt and arch == "arm64":
            own = b"\x1f\x8b\x08\x00" + os.urandom(2000)  # a gzip header, then garbage
        own_digest = client.push_blob(REPO, own)
        tars[own_digest] = own_tar
        diff_ids = [sha256_digest(base_tar), sha256_digest(own_tar)]
        if wrong_diff_id and arch == "amd64":
            diff_ids[1] = sha256_digest(b"something else")
        config = canonical_json(
            {"architecture": arch, "os": "linux", "config": {}, "rootfs": {"type": "layers", "diff_ids": diff_ids}}
        )
        manifest = canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": client.push_blob(REPO, config), "size": len(config)},
                "layers": [
                    {"mediaType": LAYER_GZIP, "digest": base_digest, "size": len(base)},
                    {
                        "mediaType": LAYER_GZIP,
                        "digest": own_digest,
                        "size": len(own),
                        "annotations": {"buildkit/rewritten-timestamp": "0"},
                    },
                ],
                "annotations": {"org.opencontainers.image.revision": "abc123"},
            }
        )
        digest = client.put_manifest(REPO, sha256_digest(manifest), manifest, OCI_MANIFEST)
        children[f"linux/{arch}"] = digest
        descriptors.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": len(manifest),
                "platform": {"os": "linux", "architecture": arch},
            }
        )
    statement = canonical_json({"_type": "https://in-toto.io/Statement/v0.1", "subject": []})
    empty = canonical_json({})
    attestation_manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": client.push_blob(REPO, empty), "size": len(empty)},
            "layers": [
                {
                    "mediaType": "application/vnd.in-toto+json",
                    "digest": client.push_blob(REPO, statement),
                    "size": len(statement),
                    "annotations": {"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"},
                }
            ],
        }
    )
    attestation = {
        "mediaType": OCI_MANIFEST,
        "digest": client.put_manifest(REPO, sha256_digest(attestation_manifest), attestation_manifest, OCI_MANIFEST),
        "size": len(attestation_manifest),
        "platform": {"os": "unknown", "architecture": "unknown"},
        "annotations": {
            "vnd.docker.reference.digest": children["linux/amd64"],
            "vnd.docker.reference.type": "attestation-manifest",
        },
    }
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [*descriptors, attestation],
            "annotations": {"org.opencontainers.image.version": "0.32.0"},
        }
    )
    digest = client.put_manifest(REPO, tag, index, OCI_INDEX)
    return Image(digest, children, tars, attestation)


@pytest.fixture
def registry():
    with RegistryProcess() as process:
        yield process


@pytest.fixture
def client(registry) -> RegistryClient:
    return RegistryClient(registry.address)


def quiet(_: str) -> None:
    pass


def test_the_variant_mirrors_the_gzip_image_and_decompresses_to_the_same_tars(client):
    image = push_image(client)
    made = transcode(client, REPO, image.digest, [f"{TAG}-zstd"], say=quiet)

    assert client.resolve(REPO, f"{TAG}-zstd") == made.digest != image.digest
    assert client.resolve(REPO, TAG) == image.digest  # the gzip tag is left alone
    gzip_index = client.get_manifest(REPO, image.digest).json()
    index = client.get_manifest(REPO, made.digest).json()
    assert index["annotations"] == {**gzip_index["annotations"], VARIANT_OF: image.digest}
    # Same entries in the same order: platforms mirrored, the attestation kept byte for byte.
    assert [d.get("platform") for d in index["manifests"]] == [d.get("platform") for d in gzip_index["manifests"]]
    assert index["manifests"][-1] == image.attestation
    assert [p.platform for p in made.platforms] == ["linux/amd64", "linux/arm64"]

    dctx = zstandard.ZstdDecompressor()
    for descriptor, platform in zip(index["manifests"][:2], made.platforms, strict=True):
        source = client.get_manifest(REPO, platform.source_digest).json()
        manifest = client.get_manifest(REPO, descriptor["digest"]).json()
        assert platform.source_digest == image.children[platform.platform]
        assert manifest["config"] == source["config"]  # the config, and so its diff_ids, unchanged
        assert manifest["annotations"] == {**source["annotations"], VARIANT_OF: platform.source_digest}
        diff_ids = json.loads(client.get_blob(REPO, manifest["config"]["digest"]))["rootfs"]["diff_ids"]
        for layer, old, diff_id in zip(manifest["layers"], source["layers"], diff_ids, strict=True):
            assert layer["mediaType"] == LAYER_ZSTD
            assert layer["annotations"] == {**old.get("annotations", {}), SOURCE_LAYER: old["digest"]}
            blob = client.get_blob(REPO, layer["digest"])
            assert len(blob) == layer["size"]
            plain = dctx.stream_reader(io.BytesIO(blob)).read()
            assert plain == image.tars[old["digest"]]
            assert sha256_digest(plain) == diff_id
        assert platform.zstd_bytes == manifest["config"]["size"] + sum(x["size"] for x in manifest["layers"])
        assert platform.gzip_bytes == source["config"]["size"] + sum(x["size"] for x in source["layers"])
    assert (made.transcoded, made.reused) == (3, 1)  # the shared base layer is recompressed once


def test_a_second_run_reuses_every_layer_and_writes_the_same_digest(client):
    image = push_image(client)
    first = transcode(client, REPO, image.digest, [f"{TAG}-zstd"], say=quiet)
    again = transcode(client, REPO, image.digest, [f"{TAG}-zstd"], say=quiet)
    assert again.digest == first.digest
    assert (again.transcoded, again.reused) == (0, 4)

    # A rebuild changes the own layers only: the base layer's zstd blob, found through the
    # variant the tag points to, is reused; the new layers are recompressed.
    rebuilt = push_image(client, extra=b"new build")
    third = transcode(client, REPO, rebuilt.digest, [f"{TAG}-zstd"], say=quiet)
    assert (third.transcoded, third.reused) == (2, 2)
    assert client.resolve(REPO, f"{TAG}-zstd") == third.digest != first.digest


def test_a_corrupt_gzip_layer_is_refused_and_nothing_is_tagged(client):
    image = push_image(client, corrupt=True)
    with pytest.raises(BuildFailed) as caught:
        transcode(client, REPO, image.digest, [f"{TAG}-zstd"], say=quiet)
    message = caught.value.message
    assert "linux/arm64" in message and "not valid gzip" in message and "nothing was tagged" in message
    assert "\n" not in message and caught.value.exit_code == 5
    assert f"{TAG}-zstd" not in client.list_tags(REPO)


def test_a_layer_whose_tar_is_not_the_configs_diff_id_is_refused(client):
    image = push_image(client, wrong_diff_id=True)
    with pytest.raises(BuildFailed, match="diff_id"):
        transcode(client, REPO, image.digest, [f"{TAG}-zstd"], say=quiet)
    assert f"{TAG}-zstd" not in client.list_tags(REPO)


def test_docker_media_types_are_refused_clearly(client):
    config = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "digest": client.push_blob(REPO, config),
                "size": len(config),
            },
            "layers": [],
        }
    )
    digest = client.put_manifest(REPO, "docker", manifest, DOCKER_MANIFEST)
    with pytest.raises(ConfigError, match=r"Docker media type.*skopeo copy --format oci"):
        transcode(client, REPO, digest, ["docker-zstd"], say=quiet)
    assert "docker-zstd" not in client.list_tags(REPO)


def test_skopeo_reads_the_zstd_image(client, registry, tmp_path):
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        pytest.skip("skopeo is not installed: the independent reading of the zstd image is not checked")
    image = push_image(client)
    made = transcode(client, REPO, image.digest, [f"{TAG}-zstd"], say=quiet)
    ref = f"docker://{registry.address}/{REPO}:{TAG}-zstd"
    base = [skopeo, "inspect", "--tls-verify=false", "--override-os", "linux", "--override-arch", "amd64"]
    proc = subprocess.run([*base, ref], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    inspected = json.loads(proc.stdout)
    amd64 = client.get_manifest(REPO, made.platforms[0].digest).json()
    assert inspected["Digest"] == made.digest  # what the tag names: the zstd index
    assert inspected["Layers"] == [layer["digest"] for layer in amd64["layers"]]
    # skopeo (containers/image) decompresses the zstd layers itself: the tars it writes are the
    # config's diff_ids.
    out = tmp_path / "copied"
    copy = [skopeo, "copy", "--src-tls-verify=false", "--override-os", "linux", "--override-arch", "amd64"]
    proc = subprocess.run([*copy, "--dest-decompress", ref, f"dir:{out}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = json.loads((out / "manifest.json").read_text())
    diff_ids = json.loads(client.get_blob(REPO, amd64["config"]["digest"]))["rootfs"]["diff_ids"]
    assert [layer["digest"] for layer in written["layers"]] == diff_ids


def _record(registry: RegistryProcess, image: Image) -> BuildResult:
    repo = f"{registry.address}/{REPO}"
    return BuildResult(
        target="cpu",
        status="built",
        platforms=[PlatformResult(p, d) for p, d in image.children.items()],
        image_repo=repo,
        refs=[f"{repo}:{TAG}", f"{repo}:{TAG}-abc123"],
        digest=image.digest,
        output=OutputMode.PUSH,
    )


def test_the_stage_records_the_variant_and_both_digests_are_signed_and_verify(client, registry, tmp_path):
    image = push_image(client)
    build = _record(registry, image)
    outcome = publish_zstd(build, work_dir=tmp_path, say=quiet)
    assert outcome.error is None
    [record] = with_outcomes([build], published=[outcome])
    assert build.variants == ()  # the build stage's record is left as it was
    zstd = variant(record)
    assert zstd is not None
    assert zstd.refs == (f"{build.image_repo}:{TAG}-zstd", f"{build.image_repo}:{TAG}-abc123-zstd")
    assert client.resolve(REPO, f"{TAG}-abc123-zstd") == zstd.digest
    assert "### Compression variants" in markdown([record]) and f"`{TAG}-zstd`" in markdown([record])

    digests = signed_digests(record)
    assert digests[:3] == [image.digest, *image.children.values()]
    assert digests[3:] == [zstd.digest, *(p.digest for p in zstd.platforms)]
    sm2, cosign = Sm2PrivateKey.generate(), CosignPrivateKey.generate()
    signed = sign_recorded(record, SigningKeys(sm2=sm2, cosign=cosign), None)
    assert signed.error is None
    assert {s.digest for s in signed.signed} == set(digests)
    for digest in (image.digest, zstd.digest, zstd.platforms[1].digest):
        report = verify_image(f"{build.image_repo}@{digest}", [sm2.public_key], [cosign.public_key], attestations=False)
        assert report.ok, report.lines()


def test_the_commands_publish_sign_and_verify_a_recorded_build(client, registry, tmp_path, capsys):
    image = push_image(client)
    dist = tmp_path / "dist"
    write_reports([_record(registry, image)], dist)
    assert main(["zstd", "--target", "cpu", "--dist", str(dist)]) == 0
    [record] = load_results(dist)
    zstd = variant(record)
    assert zstd and client.resolve(REPO, f"{TAG}-zstd") == zstd.digest
    assert f"cpu zstd {record.image_repo}@{zstd.digest}" in capsys.readouterr().out
    audit = (dist / "audit.log.jsonl").read_text()
    assert zstd.digest in audit

    keys = tmp_path / "keys"
    assert main(["keygen", "--sm2", "--cosign", "--no-password", "--out", str(keys), "--no-audit"]) == 0
    signing = ["--sm2-key", str(keys / "sm2.key"), "--cosign-key", str(keys / "cosign.key")]
    assert main(["sign", "--target", "cpu", "--report", str(dist), *signing, "--no-audit"]) == 0
    [record] = load_results(dist)
    assert {s.digest for s in record.signatures} == set(signed_digests(record))
    trusted = ["--sm2-key", str(keys / "sm2.pub"), "--cosign-key", str(keys / "cosign.pub")]
    capsys.readouterr()
    assert main(["verify", "--target", "cpu", "--report", str(dist), *trusted, "--no-audit"]) == 0
    out = capsys.readouterr().out
    assert image.digest in out and zstd.digest in out

    # Twice is the same: every layer reused, the same digest recorded.
    assert main(["zstd", "--dist", str(dist)]) == 0
    [again] = load_results(dist)
    again_zstd = variant(again)
    assert again_zstd and again_zstd.digest == zstd.digest and again_zstd.layers_transcoded == 0


def test_the_command_refuses_what_it_cannot_recompress(tmp_path, capsys):
    dist = tmp_path / "dist"
    assert main(["zstd", "--dist", str(dist)]) == 2
    archive = BuildResult("cpu", "built", [], "xcforge/vllm-cpu", digest="sha256:" + "a" * 64)
    write_reports([archive], dist)
    assert main(["zstd", "--target", "cpu", "--dist", str(dist)]) == 2
    assert "archive, not pushed" in capsys.readouterr().err
    assert main(["zstd", "--target", "cpuu", "--dist", str(dist)]) == 2
    assert main(["--target", "cpu", "--zstd"]) == 2  # --zstd needs --push
    assert "--zstd" in capsys.readouterr().err


def test_a_registry_failure_is_the_outcomes_error_with_its_exit_code(tmp_path):
    record = BuildResult(
        "cpu", "built", [], "127.0.0.1:9/xcforge/vllm-cpu", refs=["127.0.0.1:9/xcforge/vllm-cpu:t"],
        digest="sha256:" + "b" * 64, output=OutputMode.PUSH,
    )  # fmt: skip
    outcome = publish_zstd(record, work_dir=tmp_path, say=quiet)
    assert outcome.error and outcome.error_code == 6 and "\n" not in outcome.error
    [kept] = with_outcomes([record], published=[outcome])
    assert kept.error == outcome.error and kept.variants == ()


def test_old_reports_without_variants_still_load(tmp_path):
    dist = tmp_path
    write_reports([BuildResult("cpu", "built", [], "r/x")], dist)
    data = json.loads((dist / "report.json").read_text())
    del data["results"][0]["variants"]
    (dist / "report.json").write_text(json.dumps(data))
    assert load_results(dist)[0].variants == ()


def test_signed_digests_without_variants_are_the_index_and_platforms():
    platforms = [PlatformResult("linux/amd64", "sha256:" + "c" * 64)]
    record = BuildResult("cpu", "built", platforms, "r/x", digest="sha256:" + "d" * 64)
    assert signed_digests(record) == [record.digest, "sha256:" + "c" * 64]
