"""The operator's side: a target's runtime contract (matrix.yaml `runtime`) → `docker run` and Kubernetes.

Everything an operator must get right to run an image — devices, driver mounts, groups, shared
memory, port, health endpoint — is already data in the matrix; this module only arranges it, so a
new device or mount in the matrix shows up in the docs, the examples and the manifests together.

Images are deployed by digest only: a tag can move between the review of a manifest and the
rollout (or between the signature check and the pull), a digest cannot.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ocicore.digest import SHA256_DIGEST
from ocicore.registry import Reference
from signing.errors import VerificationFailed
from xcforge import __version__
from xcforge.config.matrix import Matrix, Target
from xcforge.errors import ConfigError
from xcforge.generated import Generated, remove_or_check, write_or_check
from xcforge.paths import REPO_ROOT
from xcforge.plan.build_plan import image_repository

_DIGEST_REF_RE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?@(?P<digest>" + SHA256_DIGEST + ")$"
)
_DNS_LABEL_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")

HEALTH_PATH = "/health"
# Loading a large model onto accelerators (or compiling vllm-ascend's graphs) takes long: the startup
# probe allows this multiple of the image's HEALTHCHECK start period before Kubernetes restarts it.
STARTUP_BUDGET_FACTOR = 3
STARTUP_PERIOD_S = 10

# Example manifests and docs use this placeholder: a well-formed digest reference nobody can pull.
EXAMPLE_REGISTRY = "registry.example.com/xcforge"
EXAMPLE_DIGEST = "sha256:" + "0" * 64
EXAMPLE_MODEL = "/models/qwen"
EXAMPLES_DIR = REPO_ROOT / "deploy" / "examples"
OPERATORS_DOC = REPO_ROOT / "docs" / "operators.md"
DOC_BEGIN = "<!-- BEGIN GENERATED: python build.py deploy --examples (edit matrix.yaml, not this section) -->"
DOC_END = "<!-- END GENERATED -->"

# docker flags in matrix.yaml → what they mean for a pod. Each flag must be mapped (or explicitly
# dropped with the reason): an unknown flag fails, so no requirement is silently lost.
_DROPPED_IN_K8S = {
    "--gpus": "the device plugin hands out the GPUs (resource limit)",
    "--ipc=host": "/dev/shm is a memory-backed emptyDir instead",
}


def parse_digest_ref(text: str, *, what: str = "--image") -> Reference:
    """REGISTRY/REPO@sha256:<hex> (a tag before the digest is allowed and dropped). A tag alone is
    refused. The reference is ocicore's, normalised as the docker CLI and cosign name images (a
    Docker Hub name gets `index.docker.io/`), so what is verified is what cosign signed."""
    match = _DIGEST_REF_RE.match(text.strip())
    if match:
        return Reference.parse(f"{match['name']}@{match['digest']}")
    if "@" not in text:
        raise ConfigError(
            f"{what} must be pinned by digest (REGISTRY/REPO@sha256:<64 hex>), not '{text}': a tag can move after "
            f"review; find the digest with `docker buildx imagetools inspect {text}`"
        )
    raise ConfigError(
        f"{what} '{text}' is not a valid REGISTRY/REPO@sha256:<64 lower-case hex> reference; pass the image by "
        "digest as the build printed it (`<target> <repo>@sha256:...`)"
    )


def shm_quantity(size: str) -> str:
    """Docker's --shm-size (1g, 512m, 65536k, bytes) → a Kubernetes quantity (1Gi, 512Mi, ...)."""
    match = re.fullmatch(r"([0-9]+)([kmg]?)", size.strip().lower())
    if not match:
        raise ConfigError(f"shm_size '{size}' is not a size like 1g or 512m; write it so in runtime.shm_size")
    number, unit = match.groups()
    return number + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def duration_seconds(value: str) -> int:
    match = re.fullmatch(r"([0-9]+)(ms|s|m|h)", value)
    if not match:
        raise ConfigError(f"'{value}' is not a duration like 30s or 5m; write it with one of the units ms, s, m, h")
    number, unit = int(match[1]), match[2]
    seconds = {"ms": number / 1000, "s": number, "m": number * 60, "h": number * 3600}[unit]
    return max(1, math.ceil(seconds))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _gid_variable(group_name: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", group_name.upper()).strip("_") + "_GID"


# --------------------------------------------------------------------------- docker run


def docker_run(
    target: Target,
    image: Reference | None = None,
    model: str | None = None,
    name: str | None = None,
    *,
    doctor: bool = False,
) -> str:
    """A copy-pastable bash snippet: the variables to set, then one `docker run` line.

    doctor=True: the same devices, mounts, groups and environment, but `docker run --rm IMAGE doctor`,
    which checks them (exit 0: serve's preflight will pass) — the hardware CI job runs exactly this.
    """
    runtime = target.runtime
    flags = [shlex.split(flag) for flag in runtime.docker_flags]
    flat = [token for tokens in flags for token in tokens]
    injects_gpus = "--gpus" in flat
    host_ipc = "--ipc=host" in flat
    container = name or image_repository(target, None).split("/", 1)[1]
    model_container = model or "/model"

    lines = [f"# {target.name}: {target.description}"]
    if image is None:
        lines.append(f"IMAGE={image_repository(target, EXAMPLE_REGISTRY)}@sha256:DIGEST  # yours, always by digest")
    else:
        lines.append(f"IMAGE={shlex.quote(str(image))}")
    if model is None and not doctor:
        lines.append(
            "MODEL_DIR=/path/to/model  # a directory with config.json, tokenizer and weights"
            if target.engine.is_vllm
            else "MODEL_DIR=/path/to/model  # a directory with one .gguf file (Q4_K_M/Q8_0: see `presets`)"
        )
    for group in runtime.user.groups:
        lines.append(
            f"{_gid_variable(group.name)}=$(getent group {group.name} | cut -d: -f3)"
            f"  # the device nodes' group on this host ({group.gid} on most)"
        )
    if injects_gpus and runtime.devices:
        lines.append(f"# --gpus makes the NVIDIA container toolkit add {', '.join(runtime.devices)}")
    for var in runtime.env:
        lines.append(f"# optional: {var.name}: {var.description} (passed through when set)")

    if doctor:
        args: list[str] = ["docker run --rm"]
    else:
        args = ["docker run -d", f"--name {shlex.quote(container)}", "--restart unless-stopped"]
        args.append(f"-p {runtime.port}:{runtime.port}")
    if host_ipc:
        args.append("--ipc=host")
    else:
        args.append(f"--shm-size={runtime.shm_size}")
    for tokens in flags:
        if tokens == ["--ipc=host"]:
            continue
        args.append(" ".join(shlex.quote(t) for t in tokens))
    if not injects_gpus:
        for device in runtime.devices:
            if any(ch in device for ch in "*?["):
                # One --device per node that exists on this host (cards are numbered from 0).
                args.append(f"$(printf -- '--device=%s ' {device})")
            else:
                args.append(f"--device={device}")
    for group in runtime.user.groups:
        args.append(f'--group-add "${{{_gid_variable(group.name)}:-{group.gid}}}"')
    for mount in runtime.mounts:
        args.append(f"-v {shlex.quote(mount.host)}:{shlex.quote(mount.container)}{':ro' if mount.readonly else ''}")
    for var in runtime.env:
        args.append(f"-e {var.name}")
    if doctor:
        args.append('"$IMAGE" doctor')
    else:
        if model is None:
            args.append(f'-v "$MODEL_DIR":{model_container}:ro')
        else:
            args.append(f"-v {shlex.quote(model)}:{shlex.quote(model)}:ro")
        args.append(f'"$IMAGE" --model {shlex.quote(model_container)}')
    lines.append(" \\\n  ".join(args))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- kubernetes


@dataclass(frozen=True)
class DeployOptions:
    image: Reference
    model: str
    model_pvc: str | None = None
    replicas: int = 1
    max_replicas: int | None = None
    arch: str | None = None
    accelerators: int = 1
    cpu: str = "8"
    memory: str = "32Gi"
    namespace: str | None = None
    name: str | None = None
    cpu_utilization: int = 80
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    # A signed model artifact (REGISTRY/REPO@sha256:…, docs/models.md): an init container fetches it
    # into an emptyDir at `model` and verifies it with `model_keys` (PEM text by file name) first.
    model_artifact: Reference | None = None
    model_keys: tuple[tuple[str, str], ...] = ()
    model_size: int = 0  # bytes, for the emptyDir's sizeLimit


def _check_options(target: Target, options: DeployOptions) -> tuple[str, str]:
    name = options.name or image_repository(target, None).split("/", 1)[1]
    if not _DNS_LABEL_RE.match(name) or len(name) > 52:
        raise ConfigError(
            f"--name '{name}': use lower-case letters, digits and '-' (at most 52), starting with a letter"
        )
    arch = options.arch or target.archs[0]
    if arch not in target.archs:
        raise ConfigError(
            f"--arch {arch}: target {target.name} is built for {', '.join(target.archs)}; pass one of those"
        )
    if options.replicas < 1:
        raise ConfigError("--replicas must be at least 1; pass --replicas 1 or more")
    if options.max_replicas is not None and options.max_replicas < options.replicas:
        raise ConfigError(
            f"--max-replicas {options.max_replicas} is below --replicas {options.replicas}; raise --max-replicas "
            "or lower --replicas"
        )
    if options.accelerators < 1:
        raise ConfigError("--accelerators must be at least 1; pass --accelerators 1 or more")
    for flag, value in (("--cpu", options.cpu), ("--memory", options.memory)):
        if not _QUANTITY_RE.match(value):
            raise ConfigError(f"{flag} '{value}' is not a Kubernetes quantity; write it like 8, 500m or 32Gi")
    if not options.model.startswith("/"):
        raise ConfigError(
            f"--model '{options.model}' must be an absolute path (where the model is in the container); "
            "start it with /, e.g. /models/qwen"
        )
    return name, arch


def _security(target: Target) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod securityContext, container securityContext) from the matrix user and docker flags."""
    user = target.runtime.user
    caps: list[str] = []
    seccomp = "RuntimeDefault"
    for flag in target.runtime.docker_flags:
        tokens = shlex.split(flag)
        head = tokens[0].split("=", 1)[0]
        value = tokens[1] if len(tokens) > 1 else (tokens[0].split("=", 1)[1] if "=" in tokens[0] else "")
        if head == "--cap-add":
            caps.append(value.upper())
        elif head == "--security-opt" and value == "seccomp=unconfined":
            # vLLM's CPU backend binds threads to cores and uses mbind/set_mempolicy (NUMA).
            seccomp = "Unconfined"
        elif tokens[0] in _DROPPED_IN_K8S or head in _DROPPED_IN_K8S:
            continue
        else:
            raise ConfigError(
                f"targets.{target.name}.runtime.docker_flags: '{flag}' has no Kubernetes equivalent in "
                "xcforge/deploy/manifests.py; map it there (or drop it with a reason)"
            )
    pod: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": user.uid,
        "runAsGroup": user.gid,
        "seccompProfile": {"type": seccomp},
    }
    if user.groups:
        # Device nodes belong to these groups on the host (e.g. HwHiAiUser, gid 1000 on most hosts;
        # change the number where `getent group` on the nodes says otherwise).
        pod["supplementalGroups"] = [g.gid for g in user.groups]
    container: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], **({"add": caps} if caps else {})},
    }
    return pod, container


MODEL_KEYS_DIR = "/etc/xcforge/model-keys"
VERIFY_CACHE_DIR = "/var/cache/xcforge/models"


def _model_fetch(
    name: str,
    metadata: dict[str, Any],
    options: DeployOptions,
    volumes: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    env: list[dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The init container that fetches the signed model (`xcforge-engine fetch-model`, standard
    library) into an emptyDir and verifies it; the ConfigMap of public keys both containers read; the
    verified-state volume they share, so the engine's own check before it starts rehashes nothing."""
    assert options.model_artifact is not None
    keys_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**metadata, "name": f"{name}-model-keys"},
        "data": dict(options.model_keys),
    }
    size_gi = max(1, math.ceil(options.model_size / 2**30) + 1)
    volumes.append({"name": "model", "emptyDir": {"sizeLimit": f"{size_gi}Gi"}})
    volumes.append({"name": "model-keys", "configMap": {"name": f"{name}-model-keys"}})
    volumes.append({"name": "verified-state", "emptyDir": {"sizeLimit": "16Mi"}})
    key_files = ":".join(f"{MODEL_KEYS_DIR}/{file}" for file, _ in options.model_keys)
    env.append({"name": "XCFORGE_MODEL_KEY", "value": key_files})
    shared: list[dict[str, Any]] = [
        {"name": "model-keys", "mountPath": MODEL_KEYS_DIR, "readOnly": True},
        {"name": "verified-state", "mountPath": VERIFY_CACHE_DIR},
    ]
    mounts.extend(shared)
    init = {
        "name": "model-fetch",
        "imagePullPolicy": "IfNotPresent",
        "args": ["fetch-model", f"oci://{options.model_artifact}", options.model, "--clean"],
        "env": list(env),
        "volumeMounts": [{"name": "model", "mountPath": options.model}, *shared],
    }
    return init, keys_map


def _probe(port_name: str, *, period: int, timeout: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": port_name},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def kubernetes_manifests(matrix: Matrix, target: Target, options: DeployOptions) -> list[dict[str, Any]]:
    name, arch = _check_options(target, options)
    runtime = target.runtime
    labels = {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "xcforge",
        "app.kubernetes.io/version": f"{matrix.engine_version(target)}-{target.variant}",
        "xcforge.io/target": target.name,
    }
    selector = {"app.kubernetes.io/instance": name, "xcforge.io/target": target.name}
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if options.namespace:
        metadata["namespace"] = options.namespace

    healthcheck = target.healthcheck
    timeout = duration_seconds(healthcheck.timeout)
    startup_failures = math.ceil(STARTUP_BUDGET_FACTOR * duration_seconds(healthcheck.start_period) / STARTUP_PERIOD_S)

    accelerated = runtime.k8s_resource is not None
    requests: dict[str, Any] = {"cpu": options.cpu, "memory": options.memory}
    limits: dict[str, Any] = {"memory": options.memory}
    if runtime.k8s_resource is not None:  # accelerated
        requests[runtime.k8s_resource] = options.accelerators
        limits[runtime.k8s_resource] = options.accelerators
    else:
        # CPU-only: a CPU limit equal to the request gives Guaranteed QoS (exclusive cores under the
        # static CPU manager), and the launcher sizes OpenMP threads from the quota/cpuset.
        limits["cpu"] = options.cpu

    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(runtime.shm_size)}}
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    init_containers: list[dict[str, Any]] = []
    extra_objects: list[dict[str, Any]] = []
    model_env: list[dict[str, Any]] = []
    if options.model_artifact is not None:
        init, keys_map = _model_fetch(name, metadata, options, volumes, mounts, model_env)
        init_containers.append(init)
        extra_objects.append(keys_map)
    elif options.model_pvc:
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": options.model_pvc, "readOnly": True}})
    else:
        volumes.append({"name": "model", "hostPath": {"path": options.model, "type": "Directory"}})
    mounts.append({"name": "model", "mountPath": options.model, "readOnly": True})
    for mount in runtime.mounts:
        volume = f"host-{_slug(mount.container)}"[:63].rstrip("-")
        volumes.append({"name": volume, "hostPath": {"path": mount.host}})
        mounts.append({"name": volume, "mountPath": mount.container, "readOnly": mount.readonly})

    pod_security, container_security = _security(target)
    container = {
        "name": "vllm",
        "image": str(options.image),
        "imagePullPolicy": "IfNotPresent",
        "args": ["serve", "--model", options.model, *options.extra_args],
        "ports": [{"name": "http", "containerPort": runtime.port, "protocol": "TCP"}],
        "resources": {"requests": requests, "limits": limits},
        "startupProbe": _probe("http", period=STARTUP_PERIOD_S, timeout=timeout, failures=startup_failures),
        "readinessProbe": _probe("http", period=10, timeout=timeout, failures=3),
        "livenessProbe": _probe(
            "http", period=duration_seconds(healthcheck.interval), timeout=timeout, failures=healthcheck.retries
        ),
        "securityContext": container_security,
        "volumeMounts": mounts,
    }
    if model_env:
        container["env"] = model_env
    for init in init_containers:
        init["image"], init["securityContext"] = str(options.image), container_security
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": selector},
            # With accelerators there is rarely a spare card for a surge pod: replace one at a time.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}
                if accelerated
                else {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"xcforge.io/image-digest": options.image.digest},
                },
                "spec": {
                    "nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch},
                    "securityContext": pod_security,
                    "automountServiceAccountToken": False,
                    # Service links would put e.g. VLLM_ASCEND_PORT=tcp://... into the environment,
                    # where vLLM and its plugins read their own VLLM_* settings.
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 60,
                    **({"initContainers": init_containers} if init_containers else {}),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": runtime.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": options.replicas,
            "maxReplicas": options.max_replicas or options.replicas * 2,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": options.cpu_utilization},
                    },
                }
            ],
            # A new replica loads a model for minutes: add one at a time, and keep it a while.
            "behavior": {
                "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]},
                "scaleDown": {"stabilizationWindowSeconds": 600},
            },
        },
    }
    return [deployment, service, hpa, *extra_objects]


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # shared dicts are written out in full: no &id001 anchors in files people read


def render_manifests(docs: list[dict[str, Any]], header: str = "") -> str:
    body = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, explicit_start=True, width=4096)
    return header + body


def manifest_header(command: str) -> str:
    return (
        f"# Made by `{command}`\n"
        f"# (xcforge {__version__}, from matrix.yaml's runtime contract). Deployment + Service + HPA.\n"
    )


# --------------------------------------------------------------------------- signature gate


def verify_before_deploy(
    image: Reference, sm2_keys: list[Path], cosign_keys: list[Path], *, insecure: bool = False
) -> list[str]:
    """Refuse (VerificationFailed) unless the digest carries valid signatures for every key kind given."""
    try:
        from signing.cosign_keys import load_cosign_public_key
        from signing.sm2_keys import load_sm2_public_key
        from signing.verify import verify_image
    except ImportError as exc:  # the signing package is optional at import time only
        raise ConfigError(f"signature verification needs the signing package ({exc.name} is missing)") from exc

    def read(path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"cannot read public key {path}: {exc.strerror}; give a readable public key file (PEM)"
            ) from None

    sm2 = [load_sm2_public_key(read(p), source=str(p)) for p in sm2_keys]
    cosign = [load_cosign_public_key(read(p), source=str(p)) for p in cosign_keys]
    report = verify_image(str(image), sm2, cosign, insecure=insecure)
    lines = report.lines()
    if not report.ok:
        missing = ", ".join(report.missing) or "see above"
        raise VerificationFailed(
            "\n".join([*lines, f"{image}: refusing to deploy: required signatures missing or invalid ({missing})"])
        )
    return lines


# --------------------------------------------------------------------------- committed examples


def example_image(target: Target) -> Reference:
    return Reference.parse(f"{image_repository(target, EXAMPLE_REGISTRY)}@{EXAMPLE_DIGEST}")


def example_command(target: Target) -> str:
    return f"python build.py deploy --target {target.name} --model {EXAMPLE_MODEL} --image {example_image(target)}"


def example_manifest(matrix: Matrix, target: Target) -> str:
    docs = kubernetes_manifests(matrix, target, DeployOptions(image=example_image(target), model=EXAMPLE_MODEL))
    return render_manifests(docs, manifest_header(example_command(target)))


EXAMPLE_MODEL_KEY = (
    "-----BEGIN PUBLIC KEY-----\n(the model signer's sm2.pub: `deploy --model-key sm2.pub` puts it here)\n"
    "-----END PUBLIC KEY-----\n"
)


def example_model_artifact() -> Reference:
    return Reference.parse(f"{EXAMPLE_REGISTRY}/models/qwen2.5-0.5b-instruct@{EXAMPLE_DIGEST}")


def signed_model_example(matrix: Matrix, target: Target) -> str:
    """The same target with a signed model artifact fetched and verified by an init container."""
    options = DeployOptions(
        image=example_image(target),
        model=EXAMPLE_MODEL,
        model_artifact=example_model_artifact(),
        model_keys=(("0-sm2.pub", EXAMPLE_MODEL_KEY),),
        model_size=1024**3,
    )
    command = f"{example_command(target)} --model-artifact {example_model_artifact()} --model-key sm2.pub"
    return render_manifests(kubernetes_manifests(matrix, target, options), manifest_header(command))


def operators_section(matrix: Matrix) -> str:
    parts = [DOC_BEGIN, ""]
    for name, target in matrix.targets.items():
        parts += [
            f"### {name}",
            "",
            f"{target.hardware}. Platforms: {', '.join(target.platforms)}."
            + (f" Kubernetes resource: `{target.runtime.k8s_resource}`." if target.runtime.k8s_resource else ""),
            "",
            "```bash",
            docker_run(target).rstrip("\n"),
            "```",
            "",
            f"`python build.py deploy --docker-run --target {name}` prints this; Kubernetes: "
            f"[deploy/examples/{name}.yaml](../deploy/examples/{name}.yaml).",
            "",
        ]
        if target.runtime.mounts:
            parts += ["| host path | why |", "|---|---|"]
            parts += [f"| `{m.host}` | {m.why} |" for m in target.runtime.mounts]
            parts.append("")
    parts.append(DOC_END)
    return "\n".join(parts)


def _replace_section(text: str, section: str, path: Path) -> str:
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        raise ConfigError(f"{path}: the markers for the generated section are missing ({DOC_BEGIN} ... {DOC_END})")
    return text[:start] + section + text[end + len(DOC_END) :]


def write_or_check_examples(matrix: Matrix, root: Path = REPO_ROOT, *, check: bool = False) -> list[Generated]:
    wanted: dict[Path, str] = {}
    examples = root / "deploy" / "examples"
    for name, target in matrix.targets.items():
        wanted[examples / f"{name}.yaml"] = example_manifest(matrix, target)
        wanted[examples / "signed-model" / f"{name}.yaml"] = signed_model_example(matrix, target)
    doc = root / "docs" / "operators.md"
    current_doc = doc.read_text(encoding="utf-8") if doc.exists() else None
    if current_doc is not None:
        wanted[doc] = _replace_section(current_doc, operators_section(matrix), doc)
    out = [write_or_check(path, text, check=check) for path, text in wanted.items()]
    if current_doc is None:
        out.append(Generated(doc, "missing"))
    # Examples of targets no longer in the matrix are stale too.
    if examples.is_dir():
        stale = [*examples.glob("*.yaml"), *examples.glob("signed-model/*.yaml")]
        out += [remove_or_check(path, check=check) for path in sorted(stale) if path not in wanted]
    return out
