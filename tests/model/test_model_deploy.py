"""`deploy --model-artifact`: the fit check against the target before any manifest is written, and the
init container that fetches and verifies the signed model (real registry, real artifacts and keys)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.model.model_helpers import KeyFiles, safetensors_model, write_gguf, write_keys
from tests.registry_process import RegistryProcess
from xcforge.cli import main
from xcforge.model.artifact import read_archive

IMAGE = "127.0.0.1:5000/xcforge/vllm-cpu@sha256:" + "a" * 64


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return write_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory, keys):
    tmp = tmp_path_factory.mktemp("deploy")
    (tmp / "gguf").mkdir()
    write_gguf(tmp / "gguf" / "m-q4_k_m.gguf")
    sources = {
        "plain": safetensors_model(tmp / "plain"),
        "awq": safetensors_model(tmp / "awq", quantization={"quant_method": "awq", "bits": 4}),
        "gguf": tmp / "gguf",
        "big": safetensors_model(tmp / "big", big=3 * 1024 * 1024),
    }
    with RegistryProcess() as registry:
        refs = {}
        for name, source in sources.items():
            dist = tmp / f"dist-{name}"
            argv = ["model", "pack", str(source), "--name", f"m-{name}:1", "--dist", str(dist), "--no-audit"]
            repo = f"{registry.address}/wt34-deploy"
            assert main([*argv, "--registry", repo, "--push", "--sm2-key", str(keys.sm2_key)]) == 0
            digest = read_archive(next((dist / "models").glob("*.tar"))).digest
            refs[name] = f"{repo}/m-{name}@{digest}"
        yield refs


def deploy(capsys, target: str, artifact: str, *more: str) -> tuple[int, str, str]:
    code = main(["deploy", "--target", target, "--image", IMAGE, "--model", "/models/m", "--model-artifact", artifact,
                 *more])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def test_the_manifests_fetch_and_verify_the_model_in_an_init_container(capsys, artifacts, keys):
    code, out, err = deploy(capsys, "cpu", artifacts["plain"], "--model-key", str(keys.sm2_pub))
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"]
    pod = docs[0]["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["image"] == IMAGE
    assert init["args"] == ["fetch-model", f"oci://{artifacts['plain']}", "/models/m", "--clean"]
    keys_map = docs[3]
    assert keys_map["data"]["0-sm2.pub"] == keys.sm2_pub.read_text()
    [main_container] = pod["containers"]
    env = {e["name"]: e["value"] for e in main_container["env"]}
    assert env["XCFORGE_MODEL_KEY"] == "/etc/xcforge/model-keys/0-sm2.pub"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["model"] and volumes["model-keys"]["configMap"]["name"] == keys_map["metadata"]["name"]
    mounts = {m["name"]: m for m in main_container["volumeMounts"]}
    assert mounts["model"]["readOnly"] is True and mounts["verified-state"]["mountPath"] == "/var/cache/xcforge/models"


@pytest.mark.parametrize(
    ("target", "artifact", "more", "words"),
    [
        (
            "cpu",
            "gguf",
            [],
            "is GGUF (Q4_K_M); the cpu backend serves safetensors with vLLM: serve it with target feiteng",
        ),
        ("feiteng", "plain", [], "serves GGUF with llama.cpp: serve it with target cuda, ascend"),
        ("ascend", "awq", [], "AWQ-quantized; the ascend backend cannot serve it"),
        ("cpu", "big", ["--memory", "2Mi"], "more than the 0.0 GiB memory"),
    ],
)
def test_a_model_the_target_cannot_serve_is_refused_with_the_remedy(
    capsys, artifacts, keys, target, artifact, more, words
):
    code, out, err = deploy(capsys, target, artifacts[artifact], "--model-key", str(keys.sm2_pub), *more)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_model_artifact_arguments(capsys, artifacts, keys, tmp_path):
    code, _, err = deploy(capsys, "cpu", artifacts["plain"].split("@")[0] + ":1", "--model-key", str(keys.sm2_pub))
    assert code == 2 and "--model-artifact must be pinned by digest" in err
    code, _, err = deploy(capsys, "cpu", artifacts["plain"])
    assert code == 2 and "needs --model-key" in err
    (tmp_path / "x.pub").write_text(json.dumps({"not": "a key"}))
    code, _, err = deploy(capsys, "cpu", artifacts["plain"], "--model-key", str(tmp_path / "x.pub"))
    assert code == 2 and "x.pub: not a PEM public key" in err
