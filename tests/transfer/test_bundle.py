"""bundle → import between two real registries: what arrives is what was signed, or nothing arrives.

Independent checks: skopeo reads the bundle's OCI layout, cosign verifies the manifest's cosign
signature (verify-blob), openssl verifies its SM2 signature through the bundled verify tool run by
the system's Python with no xcforge on its path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ocicore.registry import RegistryClient
from signing.audit import AuditLog
from signing.store import signature_tag
from signing.verify import verify_image
from tests.transfer.conftest import push_image, tags_of
from xcforge.cli import main

REPO = Path(__file__).resolve().parents[2]


def run(*argv: str, capsys) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def bundle(tmp_path, keys, *refs: str, capsys, extra: tuple[str, ...] = ()) -> Path:
    out = tmp_path / "b"
    code, _stdout, err = run(
        "bundle", *refs, "--out", str(out), "--sm2-key", str(keys.sm2_key), "--cosign-key", str(keys.cosign_key),
        "--audit-log", str(tmp_path / "audit.jsonl"), *extra, capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    return out


def do_import(path: Path, registry: str, keys, capsys, *extra: str, audit: Path | None = None) -> tuple[int, str, str]:
    return run(
        "import", str(path), "--registry", registry, "--sm2-key", str(keys.sm2_pub),
        "--cosign-key", str(keys.cosign_pub), *(("--audit-log", str(audit)) if audit else ("--no-audit",)), *extra,
        capsys=capsys,
    )  # fmt: skip


def test_bundle_then_import_carries_image_and_signatures_and_verifies_there(tmp_path, signed, inner, keys, capsys):
    out = bundle(tmp_path, keys, f"{signed.name}:0.32.0-cpu@{signed.digest}", capsys=capsys)
    tar_path = out.with_name("b.tar")
    assert tar_path.exists() and (tmp_path / "verify-bundle.py").exists()
    audit = tmp_path / "inner-audit.jsonl"
    code, stdout, err = do_import(tar_path, inner.address, keys, capsys, "--rewrite", "xcforge=ai/xcforge", audit=audit)
    assert code == 0, err
    client = RegistryClient(inner.address)
    assert client.resolve("ai/xcforge/vllm-cpu", "0.32.0-cpu") == signed.digest  # the digest is unchanged
    tags = set(tags_of(client, "ai/xcforge/vllm-cpu"))
    assert {signature_tag(signed.digest, "sm2"), signature_tag(signed.digest, "cosign")} <= tags
    assert signature_tag(signed.children[0], "sm2") in tags
    # Verified at the destination by the ordinary verifier, against the sender's name.
    report = verify_image(
        f"{inner.address}/ai/xcforge/vllm-cpu@{signed.digest}",
        [keys.sm2.public_key],
        [keys.cosign.public_key],
        client=client,
        allowed_identities=[signed.name],
    )
    assert report.ok, report.lines()
    assert f"--allow-identity {signed.name}" in stdout
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert entries[-1]["action"] == "import" and inner.address in entries[-1]["subject"]
    assert AuditLog(audit).head() is not None


def test_the_bundle_is_an_oci_layout_skopeo_reads(tmp_path, signed, keys, capsys):
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo not installed (scripts/provision.sh installs it)")
    out = bundle(tmp_path, keys, f"{signed.name}:0.32.0-cpu@{signed.digest}", capsys=capsys)
    proc = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci-archive:{out.with_name('b.tar')}:0.32.0-cpu"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {m["digest"] for m in json.loads(proc.stdout)["manifests"]} == set(signed.children)


def test_manifest_signatures_verify_with_cosign_and_with_the_standalone_tool(
    tmp_path, signed, keys, capsys, cosign_bin
):
    out = bundle(tmp_path, keys, f"{signed.name}@{signed.digest}", capsys=capsys)
    tar_path = out.with_name("b.tar")
    with tarfile.open(tar_path) as tar:
        tar.extractall(tmp_path / "x", filter="data", members=[tar.getmember(n) for n in (
            "xcforge-bundle.json", "xcforge-bundle.json.sig")])  # fmt: skip
    proc = subprocess.run(
        [cosign_bin, "verify-blob", "--key", str(keys.cosign_pub), "--insecure-ignore-tlog",
         "--signature", str(tmp_path / "x/xcforge-bundle.json.sig"), str(tmp_path / "x/xcforge-bundle.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # The system's python3, outside the venv and the checkout: standard library and openssl only.
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    tool = tmp_path / "verify-bundle.py"
    ok = subprocess.run([python, "-I", str(tool), str(tar_path), "--sm2-key", str(keys.sm2_pub),
                         "--cosign-key", str(keys.cosign_pub)], capture_output=True, text=True, cwd="/")  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "SM2 signature" in ok.stdout and "VERIFIED" in ok.stdout


def test_standalone_tool_refuses_another_key_and_a_swapped_blob(tmp_path, signed, keys, other_keys, capsys):
    out = bundle(tmp_path, keys, f"{signed.name}@{signed.digest}", capsys=capsys)
    tar_path = out.with_name("b.tar")
    tool = [sys.executable, "-I", str(tmp_path / "verify-bundle.py")]
    wrong = subprocess.run([*tool, str(tar_path), "--sm2-key", str(other_keys.sm2_pub)], capture_output=True, text=True)
    assert wrong.returncode == 1 and "REFUSED" in wrong.stderr and "SM2" in wrong.stderr
    swapped = _swap_a_layer(tar_path, tmp_path / "swapped.tar")
    bad = subprocess.run([*tool, str(swapped), "--sm2-key", str(keys.sm2_pub)], capture_output=True, text=True)
    assert bad.returncode == 1 and "does not match" in bad.stderr


def _swap_a_layer(src: Path, dst: Path) -> Path:
    """Same names, same sizes, one layer's bytes replaced (the attack a size check does not catch)."""
    with tarfile.open(src) as tar:
        manifest = json.loads(tar.extractfile("xcforge-bundle.json").read())
        victim = max(manifest["blobs"], key=lambda e: e["size"])["digest"].replace(":", "/")
        with tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as out:
            for member in tar.getmembers():
                data = tar.extractfile(member).read()
                if member.name == f"blobs/{victim}":
                    data = bytes(b ^ 0x01 for b in data[:16]) + data[16:]
                out.addfile(member, __import__("io").BytesIO(data))
    return dst


def test_swapped_blob_is_refused_before_anything_is_published(tmp_path, signed, inner, keys, capsys):
    out = bundle(tmp_path, keys, f"{signed.name}:0.32.0-cpu@{signed.digest}", capsys=capsys)
    swapped = _swap_a_layer(out.with_name("b.tar"), tmp_path / "swapped.tar")
    code, _, err = do_import(swapped, inner.address, keys, capsys)
    assert code == 11, err
    assert err.count("\n") == 1 and "does not match its digest" in err and "Traceback" not in err
    assert tags_of(RegistryClient(inner.address), "xcforge/vllm-cpu") == []


def test_manifest_signed_by_another_key_is_refused(tmp_path, signed, inner, keys, other_keys, capsys):
    out = bundle(tmp_path, other_keys, f"{signed.name}@{signed.digest}", capsys=capsys)
    code, _, err = do_import(out.with_name("b.tar"), inner.address, keys, capsys)
    assert code == 8, err
    assert "does not verify with the trusted key" in err and other_keys.sm2.public_key.short_id in err
    assert tags_of(RegistryClient(inner.address), "xcforge/vllm-cpu") == []


@pytest.mark.parametrize("tamper", ["extra-file", "edited-manifest", "dropped-blob", "edited-index"])
def test_other_tampering_is_refused(tmp_path, signed, inner, keys, capsys, tamper):
    out = bundle(tmp_path, keys, f"{signed.name}@{signed.digest}", capsys=capsys)
    src, dst = out.with_name("b.tar"), tmp_path / f"{tamper}.tar"
    import io

    with tarfile.open(src) as tar, tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as new:
        members = tar.getmembers()
        blobs = [m for m in members if m.name.startswith("blobs/")]
        for member in members:
            data = tar.extractfile(member).read()
            if tamper == "dropped-blob" and member.name == blobs[-1].name:
                continue
            if tamper == "edited-manifest" and member.name == "xcforge-bundle.json":
                data = data.replace(b'"tags": [', b'"tags": ["latest", ', 1)
                member.size = len(data)
            if tamper == "edited-index" and member.name == "index.json":
                data = data.replace(b"}", b', "x": 1}', 1)
                member.size = len(data)
            new.addfile(member, io.BytesIO(data))
            if tamper == "extra-file" and member.name == "index.json":
                info = tarfile.TarInfo("blobs/sha256/" + "0" * 64)
                info.size = 3
                new.addfile(info, io.BytesIO(b"bad"))
    code, _, err = do_import(dst, inner.address, keys, capsys)
    assert code in (8, 11), err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert tags_of(RegistryClient(inner.address), "xcforge/vllm-cpu") == []


def test_chunks_import_and_a_corrupt_or_missing_chunk_is_named(tmp_path, source, inner, keys, capsys):
    client = RegistryClient(source.address)
    image = push_image(client, "xcforge/vllm-cpu", "big", size=3 << 20)  # ~6 MiB of layers
    out = bundle(tmp_path, keys, f"{image.name}:big@{image.digest}", capsys=capsys, extra=("--chunk-size", "1M"))
    index = out.with_name("b.chunks.json")
    chunks = json.loads(index.read_text())["chunks"]
    assert len(chunks) >= 5 and all(c["size"] <= 1 << 20 for c in chunks)
    assert not list(tmp_path.glob("*.partial"))
    # From any chunk as well as from the list.
    code, _, err = do_import(tmp_path / chunks[1]["file"], inner.address, keys, capsys, "--check-only")
    assert code == 0, err
    third = tmp_path / chunks[2]["file"]
    original = third.read_bytes()
    third.write_bytes(original[:100] + bytes([original[100] ^ 0xFF]) + original[101:])
    code, _, err = do_import(index, inner.address, keys, capsys)
    assert code == 11 and f"chunk 3 of {len(chunks)}" in err and "corrupt" in err, err
    third.unlink()
    code, _, err = do_import(index, inner.address, keys, capsys)
    assert code == 11 and "chunk 3" in err and "missing" in err, err
    assert tags_of(RegistryClient(inner.address), "xcforge/vllm-cpu") == []
    third.write_bytes(original)
    code, _, err = do_import(index, inner.address, keys, capsys)
    assert code == 0, err
    assert RegistryClient(inner.address).resolve("xcforge/vllm-cpu", "big") == image.digest


def test_delta_carries_only_new_blobs_and_needs_its_base(tmp_path, source, keys, capsys):
    client = RegistryClient(source.address)
    first = push_image(client, "xcforge/vllm-cpu", "v1", size=1 << 20)
    full = bundle(tmp_path / "one", keys, f"{first.name}:v1@{first.digest}", capsys=capsys)
    # A rebuild: the shared base layer is the same, the own layers are new.
    second = push_image(client, "xcforge/vllm-cpu", "v2", size=1 << 20, extra=b"rebuilt")
    base_layer = client.get_manifest("xcforge/vllm-cpu", second.children[0]).json()["layers"][0]["digest"]
    delta = bundle(
        tmp_path / "two", keys, f"{second.name}:v2@{second.digest}", capsys=capsys,
        extra=("--since", str(full.with_name("b.tar"))),
    )  # fmt: skip
    with tarfile.open(delta.with_name("b.tar")) as tar:
        manifest = json.loads(tar.extractfile("xcforge-bundle.json").read())
        names = tar.getnames()
    assert base_layer in {e["digest"] for e in manifest["omitted"]}
    assert f"blobs/{base_layer.replace(':', '/')}" not in names
    assert manifest["base"]["name"] == "b"
    with __import__("tests.registry_process", fromlist=["RegistryProcess"]).RegistryProcess() as fresh:
        code, _, err = do_import(delta.with_name("b.tar"), fresh.address, keys, capsys)
        assert code == 11 and "is a delta on b" in err and "import b first" in err, err
        assert tags_of(RegistryClient(fresh.address), "xcforge/vllm-cpu") == []
        assert do_import(full.with_name("b.tar"), fresh.address, keys, capsys)[0] == 0
        code, _, err = do_import(delta.with_name("b.tar"), fresh.address, keys, capsys)
        assert code == 0, err
        assert RegistryClient(fresh.address).resolve("xcforge/vllm-cpu", "v2") == second.digest


def test_a_rewrite_that_matches_nothing_and_other_bad_input(tmp_path, signed, inner, keys, capsys):
    out = bundle(tmp_path, keys, f"{signed.name}@{signed.digest}", capsys=capsys)
    tar_path = str(out.with_name("b.tar"))
    cases = [
        (("import", tar_path, "--registry", inner.address, "--sm2-key", str(keys.sm2_pub), "--rewrite", "nope=x"),
         2, "matches no repository"),
        (("import", tar_path, "--registry", inner.address, "--sm2-key", str(keys.sm2_pub), "--rewrite", "nope"),
         2, "OLD=NEW"),
        (("import", tar_path, "--registry", inner.address), 2, "sender's public key"),
        (("import", tar_path, "--sm2-key", str(keys.sm2_pub)), 2, "--registry"),
        (("import", str(tmp_path / "missing.tar"), "--registry", inner.address, "--sm2-key", str(keys.sm2_pub)),
         2, "no such bundle"),
        (("bundle", f"{signed.name}:0.32.0-cpu", "--sm2-key", str(keys.sm2_key)), 2, "digest"),
        (("bundle", f"{signed.name}@{signed.digest}"), 2, "a bundle is always signed"),
        (("bundle", f"{signed.name}@{signed.digest}", "--sm2-key", str(keys.sm2_key), "--chunk-size", "lots"),
         2, "not a size"),
        (("bundle", f"{signed.name}@{signed.digest}", "--sm2-key", str(keys.sm2_key), "--out", str(out)),
         2, "--force"),
    ]  # fmt: skip
    for argv, expected_code, words in cases:
        code, _, err = run(*argv, "--no-audit", capsys=capsys)
        assert code == expected_code and words in err and err.count("\n") == 1, (argv, err)
    assert tags_of(RegistryClient(inner.address), "xcforge/vllm-cpu") == []


def test_full_disk_on_import_publishes_nothing(tmp_path, source, keys, capsys):
    """The inner registry's storage is a 6 MiB tmpfs; the image needs more: the push fails midway."""
    import os

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs for the registry's storage")
    from tests.registry_process import RegistryProcess

    client = RegistryClient(source.address)
    image = push_image(client, "xcforge/vllm-cpu", "big", size=4 << 20)
    out = bundle(tmp_path, keys, f"{image.name}:big@{image.digest}", capsys=capsys)
    with RegistryProcess() as full:
        data = Path(full._tmp.name) / "data"
        data.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(data)], check=True)
        try:
            code, _, err = do_import(out.with_name("b.tar"), full.address, keys, capsys)
            assert code == 6 and "nothing was published" in err, err
            assert err.count("\n") <= 2
            assert tags_of(RegistryClient(full.address), "xcforge/vllm-cpu") == []
            for digest in (image.digest, *image.children):
                assert RegistryClient(full.address).head_manifest("xcforge/vllm-cpu", digest) is None
        finally:
            subprocess.run(["umount", "-l", str(data)], check=False)


def test_full_output_disk_leaves_no_partial_bundle(tmp_path, source, keys, capsys):
    """The bundle goes to a 2 MiB tmpfs and needs more: one line, exit 3, nothing left there."""
    import os

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs as the bundle's disk")
    image = push_image(RegistryClient(source.address), "xcforge/vllm-cpu", "big", size=4 << 20)
    disk = tmp_path / "usb"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        code, _, err = run(
            "bundle", f"{image.name}:big@{image.digest}", "--out", str(disk / "b"), "--sm2-key", str(keys.sm2_key),
            "--no-audit", capsys=capsys,
        )  # fmt: skip
        assert code == 3 and "No space left on device" in err and "--out" in err, err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in err, err
        assert sorted(p.name for p in disk.iterdir()) == [], "a partial bundle was left on the full disk"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_bundle_defaults_to_the_last_builds_pushed_targets(tmp_path, signed, keys, capsys):
    dist = tmp_path / "dist"
    dist.mkdir()
    report = {"results": [{
        "target": "cpu", "status": "built", "platforms": [], "image_repo": signed.name,
        "refs": [f"{signed.name}:0.32.0-cpu"], "digest": signed.digest, "output": "push",
    }]}  # fmt: skip
    (dist / "report.json").write_text(json.dumps(report))
    code, out, err = run(
        "bundle", "--report", str(dist), "--out", str(tmp_path / "last"), "--sm2-key", str(keys.sm2_key), "--no-audit",
        "--json", str(tmp_path / "bundle.json"), capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads((tmp_path / "bundle.json").read_text())
    assert doc["images"][0]["target"] == "cpu" and doc["images"][0]["tags"] == ["0.32.0-cpu"]
    assert f"{signed.name}@{signed.digest}" in out


def test_since_refuses_a_first_member_that_is_not_a_file(tmp_path):
    """`--since` reads only the first member; a directory by the manifest's name is not a bundle (it was
    an AttributeError: tarfile gives no file object for a directory; found by mypy)."""
    from xcforge.errors import ConfigError
    from xcforge.transfer import manifest as bm
    from xcforge.transfer.bundle import read_base_manifest

    odd = tmp_path / "odd.tar"
    with tarfile.open(odd, "w") as tar:
        tar.addfile(_directory(bm.MANIFEST))
    with pytest.raises(ConfigError, match="not a bundle"):
        read_base_manifest(odd)


def _directory(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def test_standalone_tool_refuses_a_first_member_that_is_not_a_file(tmp_path):
    """The standalone verifier says REFUSED (exit 1) for a bundle whose manifest is a directory; it was a
    traceback (tarfile gives no file object for a directory; found by mypy)."""
    from xcforge.transfer import manifest as bm

    odd = tmp_path / "odd.tar"
    with tarfile.open(odd, "w") as tar:
        tar.addfile(_directory(bm.MANIFEST))
    tool = [sys.executable, "-I", str(REPO / "tools" / "verify-bundle.py")]
    proc = subprocess.run([*tool, str(odd), "--sm2-key", str(tmp_path / "unused.pub")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "REFUSED: xcforge-bundle.json: not a plain file" in proc.stderr
    assert "Traceback" not in proc.stderr
