"""Models travel in the same signed bundle as images (xcforge/transfer/): a pushed, signed model
artifact is bundled, a new version's delta (`--since`) carries only the chunks that changed, `import`
verifies every blob and signature before publishing into a second registry, and the model unpacked
from there passes the launcher's check. Real registries (distribution 2.8), real keys, real openssl."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from xcforge_engine.modelverify import load_key, verify_model

from tests.model.model_helpers import KeyFiles, safetensors_model, write_keys, write_safetensors
from tests.registry_process import RegistryProcess
from xcforge.cli import main

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_keys(tmp_path_factory.mktemp("keys"))


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the launcher's check needs the openssl CLI")
def test_a_model_bundle_and_its_delta_import_verified_and_serve_after_the_check(tmp_path, capsys, keys):
    model = safetensors_model(tmp_path / "m", big=3 * MiB)
    sign = ["--sm2-key", keys.sm2_key, "--cosign-key", keys.cosign_key]
    trust = ["--sm2-key", keys.sm2_pub, "--cosign-key", keys.cosign_pub]
    with RegistryProcess() as source, RegistryProcess() as inside:
        repo = f"{source.address}/wt34-transfer"

        def publish(tag: str) -> str:
            out = cli(capsys, "model", "pack", model, "--name", f"qwen-t:{tag}", "--dist", tmp_path / tag,
                      "--chunk-size", "1M", "--registry", repo, "--push", *sign, "--no-audit")  # fmt: skip
            digest = next(line.split()[1] for line in out.splitlines() if line.startswith("digest"))
            return f"{repo}/qwen-t@{digest}"

        first = publish("1")
        cli(capsys, "bundle", "--model", first, "--out", tmp_path / "b1.tar", *sign, "--json", tmp_path / "b1.json",
            "--report", tmp_path / "no-report", "--no-audit")  # fmt: skip
        # Version 2: one shard retrained; the other chunks are already inside.
        write_safetensors(model / "model-00002-of-00002.safetensors", {"lm_head": ("BF16", [256, 512])})
        second = publish("2")
        cli(capsys, "bundle", second, "--out", tmp_path / "b2.tar", "--since", tmp_path / "b1.tar", *sign,
            "--json", tmp_path / "b2.json", "--no-audit")  # fmt: skip
        full, delta = (json.loads((tmp_path / n).read_text()) for n in ("b1.json", "b2.json"))
        shard = (model / "model-00002-of-00002.safetensors").stat().st_size
        assert full["carried_bytes"] > MiB + 2 * shard  # both shards and the (one, deduplicated) zero chunk
        assert delta["carried_bytes"] < shard + 64 * 1024  # the new shard, its config, manifest, signatures
        for bundle in ("b1.tar", "b2.tar"):
            cli(capsys, "import", tmp_path / bundle, "--registry", inside.address, *trust, "--no-audit")
        moved = second.replace(source.address, inside.address)
        out = cli(capsys, "model", "verify", moved, *trust, "--allow-identity", second.split("@")[0], "--no-audit")
        assert out.count("VALID ") == 2
        dest = tmp_path / "served"
        cli(capsys, "model", "unpack", moved, dest, *trust, "--allow-identity", second.split("@")[0], "--no-audit")
    env = {"XCFORGE_VERIFY_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    verified = verify_model(dest, [load_key(keys.sm2_pub), load_key(keys.cosign_pub)], env)
    assert verified.digest == second.split("@")[1]
    assert verified.hashed == len(verified.config["files"])


def test_a_flipped_byte_in_a_model_bundle_publishes_nothing(tmp_path, capsys, keys):
    model = safetensors_model(tmp_path / "m")
    sign = ["--sm2-key", keys.sm2_key, "--cosign-key", keys.cosign_key]
    with RegistryProcess() as source, RegistryProcess() as inside:
        repo = f"{source.address}/wt34-tamper"
        out = cli(capsys, "model", "pack", model, "--name", "qwen-x:1", "--dist", tmp_path / "d", "--registry", repo,
                  "--push", *sign, "--no-audit")  # fmt: skip
        digest = next(line.split()[1] for line in out.splitlines() if line.startswith("digest"))
        bundle = tmp_path / "b.tar"
        cli(capsys, "bundle", "--model", f"{repo}/qwen-x@{digest}", "--out", bundle, *sign,
            "--report", tmp_path / "none", "--no-audit")  # fmt: skip
        shard = (model / "model-00001-of-00002.safetensors").read_bytes()
        data = bytearray(bundle.read_bytes())
        at = data.find(shard[4096:4160])  # inside the shard's chunk, as carried in the bundle
        assert at > 0
        data[at] ^= 0x01
        bundle.write_bytes(bytes(data))
        code = main(["import", str(bundle), "--registry", inside.address, "--sm2-key", str(keys.sm2_pub), "--no-audit"])
        _, err = capsys.readouterr()
        assert code == 11
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "does not match its digest in the signed manifest" in errors[0]
        from ocicore.registry import RegistryClient

        assert RegistryClient(inside.address).list_tags("wt34-tamper/qwen-x") == []


def test_the_launcher_fetches_from_a_registry_that_needs_a_login(tmp_path, capsys, keys):
    """htpasswd (HTTP Basic) as a site registry has it; the launcher reads the names build.py reads."""
    from xcforge_engine.modelfetch import fetch
    from xcforge_engine.modelverify import ModelRefused

    from ocicore.registry import RegistryClient
    from tests.model.model_helpers import write_gguf

    (tmp_path / "g").mkdir()
    write_gguf(tmp_path / "g" / "m-q8_0.gguf")
    login = {"XCFORGE_REGISTRY_USERNAME": "operator", "XCFORGE_REGISTRY_PASSWORD": "pw-1"}
    with RegistryProcess(htpasswd={"operator": "pw-1"}) as locked, pytest.MonkeyPatch.context() as patch:
        for name, value in login.items():
            patch.setenv(name, value)  # build.py's registry client (push) reads them from the environment
        cli(capsys, "model", "pack", tmp_path / "g", "--name", "g:1", "--dist", tmp_path / "d", "--registry",
            f"{locked.address}/site", "--push", "--sm2-key", keys.sm2_key, "--no-audit")  # fmt: skip
        digest = RegistryClient(locked.address).resolve("site/g", "1")
        ref = f"oci://{locked.address}/site/g@{digest}"
        with pytest.raises(ModelRefused, match="asks for a login: set XCFORGE_REGISTRY_USERNAME"):
            fetch(ref, tmp_path / "anonymous", {})
        with pytest.raises(ModelRefused, match="refused the login"):
            fetch(ref, tmp_path / "wrong", {**login, "XCFORGE_REGISTRY_PASSWORD": "nope"})
        assert not (tmp_path / "wrong").exists() or not any((tmp_path / "wrong").iterdir())  # nothing left
        assert fetch(ref, tmp_path / "ok", login) == digest
    env = {"XCFORGE_VERIFY_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    assert verify_model(tmp_path / "ok", [load_key(keys.sm2_pub)], env).digest == digest
