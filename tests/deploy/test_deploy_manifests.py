"""Kubernetes manifests from the matrix's runtime contract, for every target."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ocicore.registry import Reference
from signing.errors import VerificationFailed
from xcforge.config.matrix import load_matrix
from xcforge.deploy import manifests as deploy
from xcforge.errors import ConfigError, exit_code

REPO_ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
TARGETS = list(MATRIX.targets)
DIGEST = "sha256:" + "ab" * 32


def _image(target: str) -> Reference:
    return deploy.parse_digest_ref(f"registry.example.com/xcforge/vllm-{target}@{DIGEST}")


def _manifests(target: str, **options) -> dict[str, dict]:
    opts = deploy.DeployOptions(image=_image(target), model="/models/qwen", **options)
    docs = deploy.kubernetes_manifests(MATRIX, MATRIX.target(target), opts)
    return {d["kind"]: d for d in docs}


def _pod(docs: dict) -> dict:
    return docs["Deployment"]["spec"]["template"]["spec"]


def _container(docs: dict) -> dict:
    return _pod(docs)["containers"][0]


# --------------------------------------------------------------------------- the image reference


@pytest.mark.parametrize(
    "ref",
    [
        f"registry.example.com/xcforge/vllm-cpu@{DIGEST}",
        f"127.0.0.1:5000/xcforge/vllm-cpu@{DIGEST}",
        f"registry.example.com/xcforge/vllm-cpu:0.32.0-cpu@{DIGEST}",
    ],
)
def test_digest_references_are_accepted(ref):
    image = deploy.parse_digest_ref(ref)
    assert image.digest == DIGEST and str(image).endswith(f"@{DIGEST}")
    assert ":0.32.0" not in str(image)


@pytest.mark.parametrize(
    "ref", ["registry.example.com/xcforge/vllm-cpu:0.32.0-cpu", "registry.example.com/xcforge/vllm-cpu"]
)
def test_a_tag_is_refused_in_one_line(ref):
    with pytest.raises(ConfigError) as info:
        deploy.parse_digest_ref(ref)
    message = info.value.message
    assert "pinned by digest" in message and "\n" not in message
    assert f"docker buildx imagetools inspect {ref}" in message


@pytest.mark.parametrize(
    "ref", [f"registry.example.com/x@sha256:{'A' * 64}", "registry.example.com/x@sha256:abc", f"x@{DIGEST}"]
)
def test_malformed_digest_references_are_refused(ref):
    with pytest.raises(ConfigError):
        deploy.parse_digest_ref(ref)


# --------------------------------------------------------------------------- every target


@pytest.mark.parametrize("name", TARGETS)
def test_three_objects_pinned_image(name):
    docs = _manifests(name)
    assert set(docs) == {"Deployment", "Service", "HorizontalPodAutoscaler"}
    assert docs["HorizontalPodAutoscaler"]["apiVersion"] == "autoscaling/v2"
    assert _container(docs)["image"] == f"registry.example.com/xcforge/vllm-{name}@{DIGEST}"
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]


@pytest.mark.parametrize("name", TARGETS)
def test_device_plugin_resource_from_the_matrix(name):
    target = MATRIX.target(name)
    resources = _container(_manifests(name, accelerators=2))["resources"]
    resource = target.runtime.k8s_resource
    if resource is None:
        assert set(resources["limits"]) == {"cpu", "memory"}
        assert resources["limits"]["cpu"] == resources["requests"]["cpu"]
    else:
        assert resources["limits"][resource] == 2 and resources["requests"][resource] == 2
    expected = {
        "cuda": "nvidia.com/gpu",
        "ascend": "huawei.com/Ascend910",
        "mlu": "cambricon.com/mlu",
        "cpu": None,
        "feiteng": None,
    }
    # Targets added since name their resource in the matrix only.
    assert resource == expected.get(name, MATRIX.target(name).runtime.k8s_resource)
    assert name in expected or resource


@pytest.mark.parametrize("name", TARGETS)
def test_node_architecture(name):
    target = MATRIX.target(name)
    assert _pod(_manifests(name))["nodeSelector"]["kubernetes.io/arch"] == target.archs[0]
    for arch in target.archs:
        assert _pod(_manifests(name, arch=arch))["nodeSelector"]["kubernetes.io/arch"] == arch
    other = {"amd64": "arm64", "arm64": "amd64"}
    missing = [a for a in other.values() if a not in target.archs]
    for arch in missing:
        with pytest.raises(ConfigError, match="is built for"):
            _manifests(name, arch=arch)


@pytest.mark.parametrize("name", TARGETS)
def test_non_root_with_the_matrix_user_and_groups(name):
    user = MATRIX.target(name).runtime.user
    pod = _pod(_manifests(name))
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"]) == (user.uid, user.gid)
    assert security.get("supplementalGroups", []) == [g.gid for g in user.groups]
    container = _container(_manifests(name))["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"]["drop"] == ["ALL"]
    assert pod["enableServiceLinks"] is False and pod["automountServiceAccountToken"] is False


def test_ascend_runs_with_the_hwhiaiuser_group_and_cpu_with_sys_nice():
    assert _pod(_manifests("ascend"))["securityContext"]["supplementalGroups"] == [1000]
    cpu = _manifests("cpu")
    assert _container(cpu)["securityContext"]["capabilities"]["add"] == ["SYS_NICE"]
    assert _pod(cpu)["securityContext"]["seccompProfile"]["type"] == "Unconfined"
    assert _pod(_manifests("cuda"))["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


@pytest.mark.parametrize("name", TARGETS)
def test_probes_on_health(name):
    target = MATRIX.target(name)
    container = _container(_manifests(name))
    port = container["ports"][0]
    assert port == {"name": "http", "containerPort": target.runtime.port, "protocol": "TCP"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = container["startupProbe"]
    # Generous: at least the image's own start period (600 s), here three times it.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 3 * 600
    assert container["livenessProbe"]["failureThreshold"] == target.healthcheck.retries


@pytest.mark.parametrize("name", TARGETS)
def test_shm_model_and_driver_mounts(name):
    target = MATRIX.target(name)
    docs = _manifests(name)
    volumes = {v["name"]: v for v in _pod(docs)["volumes"]}
    mounts = {m["mountPath"]: m for m in _container(docs)["volumeMounts"]}
    shm = volumes[mounts["/dev/shm"]["name"]]["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": deploy.shm_quantity(target.runtime.shm_size)}
    model = mounts["/models/qwen"]
    assert model["readOnly"] is True
    assert volumes[model["name"]]["hostPath"] == {"path": "/models/qwen", "type": "Directory"}
    for mount in target.runtime.mounts:
        assert mount.container in mounts, mount.container
        volume = volumes[mounts[mount.container]["name"]]
        assert volume["hostPath"]["path"] == mount.host
        assert mounts[mount.container]["readOnly"] is mount.readonly
    assert len(volumes) == 2 + len(target.runtime.mounts)


def test_model_from_a_persistent_volume_claim():
    docs = _manifests("cpu", model_pvc="qwen-weights")
    volume = next(v for v in _pod(docs)["volumes"] if v["name"] == "model")
    assert volume == {"name": "model", "persistentVolumeClaim": {"claimName": "qwen-weights", "readOnly": True}}
    assert _container(docs)["args"] == ["serve", "--model", "/models/qwen"]


def test_replicas_namespace_and_rollout():
    docs = _manifests("ascend", replicas=2, max_replicas=5, namespace="inference", name="qwen-npu")
    assert docs["Deployment"]["spec"]["replicas"] == 2
    assert docs["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 2
    assert docs["HorizontalPodAutoscaler"]["spec"]["maxReplicas"] == 5
    assert {d["metadata"]["namespace"] for d in docs.values()} == {"inference"}
    assert {d["metadata"]["name"] for d in docs.values()} == {"qwen-npu"}
    # No spare card for a surge pod on accelerator nodes.
    assert docs["Deployment"]["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert _manifests("cpu")["Deployment"]["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"replicas": 0}, "--replicas"),
        ({"replicas": 3, "max_replicas": 2}, "--max-replicas"),
        ({"name": "Bad_Name"}, "--name"),
        ({"memory": "lots"}, "--memory"),
        ({"accelerators": 0}, "--accelerators"),
    ],
)
def test_bad_options_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        _manifests("cuda", **options)


def test_relative_model_path_is_refused():
    opts = deploy.DeployOptions(image=_image("cpu"), model="models/qwen")
    with pytest.raises(ConfigError, match="absolute"):
        deploy.kubernetes_manifests(MATRIX, MATRIX.target("cpu"), opts)


def test_unknown_docker_flag_must_be_mapped():
    target = MATRIX.target("cpu")
    runtime = target.runtime.model_copy(update={"docker_flags": ("--pids-limit 100",)})
    odd = target.model_copy(update={"runtime": runtime})
    opts = deploy.DeployOptions(image=_image("cpu"), model="/m")
    with pytest.raises(ConfigError, match="no Kubernetes equivalent"):
        deploy.kubernetes_manifests(MATRIX, odd, opts)


def test_shm_and_duration_conversions():
    assert [deploy.shm_quantity(s) for s in ("1g", "512m", "64k", "1024")] == ["1Gi", "512Mi", "64Ki", "1024"]
    assert [deploy.duration_seconds(d) for d in ("30s", "10m", "1h", "500ms")] == [30, 600, 3600, 1]


# --------------------------------------------------------------------------- schema validation


@pytest.mark.parametrize("name", TARGETS)
def test_manifests_validate_against_kubernetes_schemas(name):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed (pip install kubernetes-validate)"
    )
    version = kubernetes_validate.latest_version()
    for doc in _manifests(name, model_pvc="weights" if name == "cpu" else None).values():
        kubernetes_validate.validate(doc, version, strict=True)


def test_schema_validation_catches_mistakes():
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    doc = _manifests("cpu")["Deployment"]
    doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


# --------------------------------------------------------------------------- committed examples


def test_committed_examples_and_operator_doc_match_the_matrix():
    stale = [r for r in deploy.write_or_check_examples(MATRIX, REPO_ROOT, check=True) if r.status != "unchanged"]
    assert not stale, f"run `python build.py deploy --examples` and commit: {[(str(r.path), r.status) for r in stale]}"
    assert sorted(p.stem for p in (REPO_ROOT / "deploy" / "examples").glob("*.yaml")) == sorted(TARGETS)


@pytest.mark.parametrize("name", TARGETS)
def test_example_files_parse(name):
    docs = list(yaml.safe_load_all((REPO_ROOT / "deploy" / "examples" / f"{name}.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "HorizontalPodAutoscaler"]


def test_example_drift_is_detected(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "operators.md").write_text(f"intro\n{deploy.DOC_BEGIN}\nold\n{deploy.DOC_END}\noutro\n")
    assert {r.status for r in deploy.write_or_check_examples(MATRIX, tmp_path, check=True)} == {"missing", "stale"}
    deploy.write_or_check_examples(MATRIX, tmp_path)
    assert {r.status for r in deploy.write_or_check_examples(MATRIX, tmp_path, check=True)} == {"unchanged"}
    text = (tmp_path / "docs" / "operators.md").read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old" not in text
    (tmp_path / "deploy" / "examples" / "gone.yaml").write_text("x")
    assert any(r.status == "stale" for r in deploy.write_or_check_examples(MATRIX, tmp_path, check=True))


def test_doc_without_markers_is_an_error(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "operators.md").write_text("no markers\n")
    with pytest.raises(ConfigError, match="markers"):
        deploy.write_or_check_examples(MATRIX, tmp_path, check=True)


# --------------------------------------------------------------------------- the CLI


def _main(argv):
    from xcforge.cli import main

    return main([*argv, "--matrix", str(REPO_ROOT / "matrix.yaml")])


def test_cli_prints_manifests(capsys):
    rc = _main(["deploy", "--target", "ascend", "--model", "/models/qwen", "--image", str(_image("ascend"))])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("# Made by `python build.py deploy --target ascend --image ")
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["Deployment", "Service", "HorizontalPodAutoscaler"]


def test_cli_refuses_a_tag_and_writes_nothing(tmp_path, capsys):
    rc = _main(
        [
            "deploy",
            "--target",
            "cpu",
            "--model",
            "/m",
            "--image",
            "reg.example.com/x/vllm-cpu:1",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "pinned by digest" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_requires_image_and_model(capsys):
    assert _main(["deploy", "--target", "cpu", "--model", "/m"]) == 2
    assert "--image" in capsys.readouterr().err
    assert _main(["deploy", "--target", "cpu", "--image", str(_image("cpu"))]) == 2
    assert "--model" in capsys.readouterr().err


def test_cli_writes_to_out_dir(tmp_path, capsys):
    rc = _main(
        [
            "deploy",
            "--target",
            "cpu",
            "--model",
            "/models/qwen",
            "--image",
            str(_image("cpu")),
            "--arch",
            "amd64",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    written = tmp_path / "vllm-cpu.yaml"
    docs = list(yaml.safe_load_all(written.read_text()))
    assert docs[0]["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"] == "amd64"
    assert "signatures were not checked" in capsys.readouterr().err


class _Report:
    def __init__(self, ok: bool):
        self.ok = ok
        self.missing = () if ok else ("sm2",)

    def lines(self):
        return ["VALID   sm2" if self.ok else "MISSING sm2"]


@pytest.fixture
def fake_signing(monkeypatch):
    """Stand-ins for signing.verify/keys: the gate's control flow, not the cryptography (tests/signing)."""
    state = {"ok": False, "calls": []}
    pytest.importorskip("signing.verify", reason="the signing package is not importable")
    import signing.sm2_keys
    import signing.verify

    monkeypatch.setattr(signing.sm2_keys, "load_sm2_public_key", lambda data, source: ("sm2", source))

    def verify_image(ref, sm2, cosign, insecure=False):
        state["calls"].append((ref, sm2, cosign))
        return _Report(ok=state["ok"])

    monkeypatch.setattr(signing.verify, "verify_image", verify_image)
    return state


def test_cli_verify_gate_refuses_to_write(tmp_path, capsys, fake_signing):
    pub = tmp_path / "sm2.pub"
    pub.write_text("not checked by the stand-in")
    out = tmp_path / "out"
    argv = ["deploy", "--target", "cpu", "--model", "/m", "--image", str(_image("cpu")), "--out", str(out)]
    rc = _main([*argv, "--verify-sm2-key", str(pub)])
    err = capsys.readouterr().err
    assert rc == exit_code(VerificationFailed)
    assert "refusing to deploy" in err and "MISSING sm2" in err
    assert not out.exists()
    assert fake_signing["calls"][0][0] == str(_image("cpu"))

    fake_signing["ok"] = True
    assert _main([*argv, "--verify-sm2-key", str(pub)]) == 0
    assert (out / "vllm-cpu.yaml").exists()
    assert "VALID   sm2" in capsys.readouterr().err


def test_verify_gate_reads_the_key_file(tmp_path):
    pytest.importorskip("signing.verify", reason="the signing package is not importable")
    with pytest.raises(ConfigError, match="cannot read public key"):
        deploy.verify_before_deploy(_image("cpu"), [tmp_path / "absent.pem"], [])


def test_the_cli_help_lists_the_deploy_command(capsys):
    from xcforge.cli import main

    with pytest.raises(SystemExit):
        main(["deploy", "--help"])
    out = capsys.readouterr().out
    for flag in ("--model-pvc", "--replicas", "--arch", "--out", "--verify-sm2-key", "--docker-run", "--examples"):
        assert flag in out
