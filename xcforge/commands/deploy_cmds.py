"""`deploy`: Kubernetes manifests or the `docker run` line for a target, from the matrix's runtime contract."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xcforge.commands._drift import report_drift
from xcforge.commands._paths import blocking_file, unwritable_reason
from xcforge.config.matrix import Matrix, load_matrix
from xcforge.errors import ConfigError
from xcforge.paths import REPO_ROOT

if TYPE_CHECKING:
    from xcforge.config.matrix import Target


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "deploy",
        parents=[common],
        help="write Kubernetes manifests (or print the docker run line) for a target",
        description="Kubernetes manifests (Deployment, Service, HorizontalPodAutoscaler) for one target, from "
        "matrix.yaml's runtime contract: device-plugin resource, node architecture, non-root user and groups, "
        "/health probes, /dev/shm, driver mounts. The image must be pinned by digest.",
    )
    parser.add_argument("--target", "-t", help="target name (see `python build.py --list`)")
    parser.add_argument("--image", help="REGISTRY/REPO@sha256:<digest> (tags are refused)")
    parser.add_argument("--model", help="absolute path of the model in the container (and on the host for hostPath)")
    parser.add_argument("--model-pvc", metavar="CLAIM", help="mount the model from this PersistentVolumeClaim")
    parser.add_argument(
        "--model-artifact",
        metavar="REF@DIGEST",
        help="a signed model artifact (build.py model pack --push): checked to fit the target, then fetched "
        "and verified by an init container into --model (docs/models.md)",
    )
    parser.add_argument(
        "--model-key",
        type=Path,
        action="append",
        default=[],
        metavar="PUB",
        help="with --model-artifact: public key(s) the pod verifies the model with (sm2.pub, cosign.pub)",
    )
    parser.add_argument("--replicas", type=int, default=1, help="replicas (HPA minimum; default 1)")
    parser.add_argument("--max-replicas", type=int, help="HPA maximum (default 2 x --replicas)")
    parser.add_argument("--arch", help="node architecture for multi-platform targets (default: the first platform)")
    parser.add_argument("--accelerators", type=int, default=1, help="device-plugin devices per pod (default 1)")
    parser.add_argument("--cpu", default="8", help="CPU request (the limit too for CPU-only targets; default 8)")
    parser.add_argument("--memory", default="32Gi", help="memory request and limit, /dev/shm included (default 32Gi)")
    parser.add_argument("--namespace", "-n", help="metadata.namespace of every object")
    parser.add_argument("--name", help="object name (default vllm-<target>)")
    parser.add_argument(
        "--vllm-arg", action="append", default=[], metavar="ARG", help="extra argument for vLLM (repeatable)"
    )
    parser.add_argument("--out", type=Path, help="write <DIR>/<name>.yaml instead of printing")
    parser.add_argument(
        "--verify-sm2-key",
        type=Path,
        action="append",
        default=[],
        metavar="PUB",
        help="verify the image's SM2 signature with this public key first; refuse to write manifests if it fails",
    )
    parser.add_argument(
        "--verify-cosign-key",
        type=Path,
        action="append",
        default=[],
        metavar="PUB",
        help="also require a valid cosign signature for this public key",
    )
    parser.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry (verify)")
    parser.add_argument("--docker-run", action="store_true", help="print the docker run line for the target instead")
    parser.add_argument(
        "--doctor", action="store_true", help="with --docker-run: the same flags, running `doctor` (--rm) instead"
    )
    parser.add_argument(
        "--examples",
        action="store_true",
        help="write deploy/examples/<target>.yaml, deploy/monitoring/ and the generated section of docs/operators.md",
    )
    parser.add_argument("--check", action="store_true", help="with --examples: change nothing, exit 4 on drift")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    parser.set_defaults(func=run_deploy)


def run_deploy(args: argparse.Namespace) -> int:
    from xcforge.deploy import manifests as deploy

    matrix = load_matrix(args.matrix)
    if args.examples:
        return _examples(args, matrix)
    if args.check:
        raise ConfigError("--check goes with --examples; add --examples, or drop --check")
    if not args.target:
        raise ConfigError(f"name a target with --target NAME; valid targets: {', '.join(matrix.targets)}")
    target = matrix.target(args.target)
    image = deploy.parse_digest_ref(args.image) if args.image else None

    if args.doctor and not args.docker_run:
        raise ConfigError("--doctor goes with --docker-run; add --docker-run, or drop --doctor")
    if args.docker_run:
        sys.stdout.write(deploy.docker_run(target, image, args.model, args.name, doctor=args.doctor))
        return 0

    if image is None:
        raise ConfigError(
            "--image REGISTRY/REPO@sha256:<digest> is required (the image to deploy, by digest); "
            "add it as the build printed it"
        )
    if not args.model:
        raise ConfigError(
            "--model PATH is required (where the model is inside the container); add it, e.g. --model /models/qwen"
        )
    model_artifact, model_keys, model_size = _model_artifact(args, matrix, target)
    options = deploy.DeployOptions(
        image=image,
        model=args.model,
        model_artifact=model_artifact,
        model_keys=model_keys,
        model_size=model_size,
        model_pvc=args.model_pvc,
        replicas=args.replicas,
        max_replicas=args.max_replicas,
        arch=args.arch,
        accelerators=args.accelerators,
        cpu=args.cpu,
        memory=args.memory,
        namespace=args.namespace,
        name=args.name,
        extra_args=tuple(args.vllm_arg),
    )
    _check_names_and_out(args)
    docs = deploy.kubernetes_manifests(matrix, target, options)
    if args.verify_sm2_key or args.verify_cosign_key:
        for line in deploy.verify_before_deploy(
            image, args.verify_sm2_key, args.verify_cosign_key, insecure=args.insecure
        ):
            print(line, file=sys.stderr)
    elif args.out:
        print(
            "note: signatures were not checked; add --verify-sm2-key PUB "
            "(or run deploy/policy/verify-before-deploy.sh)",
            file=sys.stderr,
        )
    command = "python build.py deploy " + shlex.join(_argv_for_header(args))
    text = deploy.render_manifests(docs, deploy.manifest_header(command))
    if args.out:
        path = _write_manifest(args.out, f"{docs[0]['metadata']['name']}.yaml", text)
        print(f"wrote {path} (Deployment, Service, HorizontalPodAutoscaler)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


_UNAME = {"amd64": "x86_64", "arm64": "aarch64"}


def _memory_bytes(quantity: str) -> int | None:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    match = re.fullmatch(r"(\d+)([KMGT]i?)?", quantity)
    if match is None:
        return None
    return int(match[1]) * units.get(match[2] or "", 1)


def _model_artifact(
    args: argparse.Namespace, matrix: Matrix, target: Target
) -> tuple[Any, tuple[tuple[str, str], ...], int]:
    """--model-artifact: (reference, keys for the ConfigMap, size), after the fit check: a model the
    target's image cannot serve is refused here, with the targets that can (the launcher checks again)."""
    from xcforge.deploy import manifests as deploy

    if not args.model_artifact:
        if args.model_key:
            raise ConfigError(
                "--model-key goes with --model-artifact REF@DIGEST (the signed model to fetch); "
                "add it or drop --model-key"
            )
        return None, (), 0
    from xcforge_engine.backends import preset_book
    from xcforge_engine.errors import EngineError
    from xcforge_engine.modelverify import fit_problem, load_key

    from ocicore.registry import RegistryClient
    from xcforge.model.artifact import check_artifact

    ref = deploy.parse_digest_ref(args.model_artifact, what="--model-artifact")
    if not args.model_key:
        raise ConfigError(
            "--model-artifact needs --model-key PUB (sm2.pub and/or cosign.pub): the pod serves only a model "
            "that verifies against it; add --model-key with the public key the model was signed for"
        )
    keys: list[tuple[str, str]] = []
    for index, path in enumerate(args.model_key):
        try:
            key = load_key(path)
        except EngineError as exc:  # the launcher's own reading of the key, its message as is
            raise ConfigError(
                f"--model-key: {exc.lines[0]}; give the public key files `keygen` wrote (sm2.pub, cosign.pub)"
            ) from None
        keys.append((f"{index}-{key.scheme}.pub", path.read_text(encoding="ascii")))
    client = RegistryClient(ref.registry, insecure=args.insecure)
    assert ref.digest is not None
    manifest = client.get_manifest(ref.repository, ref.digest)
    config_digest = (manifest.json().get("config") or {}).get("digest", "")
    artifact = check_artifact(
        ref.digest, manifest.data, client.get_blob(ref.repository, config_digest), f"--model-artifact {ref}"
    )
    config = artifact.config
    by_format: dict[str, list[str]] = {}
    for name, other in matrix.targets.items():
        by_format.setdefault(other.smoke.model_format, []).append(name)
    arch = args.arch or target.archs[0]
    problem = fit_problem(
        config,
        target.smoke.model_format,
        target.backend,
        arch=_UNAME.get(arch, arch),
        quantization_rules=preset_book().quantization,
        memory_bytes=_memory_bytes(args.memory) if target.runtime.k8s_resource is None else None,
        gguf_remedy=f"target {', '.join(by_format.get('gguf', ['?']))} (llama.cpp)",
        safetensors_remedy=f"target {', '.join(by_format.get('safetensors', ['?']))} (vLLM)",
    )
    if problem:
        raise ConfigError(
            f"deploy --target {target.name} --model-artifact: {problem}; deploy it with the target named, "
            "or a model packed for this one"
        )
    return ref, tuple(keys), int(config.get("total_size") or 0)


def _write_manifest(out: Path, name: str, text: str) -> Path:
    """<out>/<name>, whole or not at all: written beside it, then renamed over it."""
    path = out / name
    partial = out / f".{name}.partial"
    try:
        out.mkdir(parents=True, exist_ok=True)
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise ConfigError(
            f"--out {out}: cannot write {name} ({exc.strerror or exc}); give a directory you can write to "
            "(or omit --out to print the manifests)"
        ) from None
    return path


# Kubernetes object names: a namespace is a DNS-1123 label, a claim name a DNS-1123 subdomain.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_names_and_out(args: argparse.Namespace) -> None:
    """What kubectl would refuse later, and an --out that cannot be a directory, before anything is checked
    against the registry or written."""
    if args.namespace is not None and not _DNS_LABEL.fullmatch(args.namespace):
        raise ConfigError(
            f"--namespace '{args.namespace}': a namespace is lower-case letters, digits and '-' (at most 63); "
            "rename it, e.g. ai-serving"
        )
    if args.model_pvc is not None and not _DNS_SUBDOMAIN.fullmatch(args.model_pvc):
        raise ConfigError(
            f"--model-pvc '{args.model_pvc}': a claim name is lower-case letters, digits, '-' and '.' (at most 253); "
            "give the PersistentVolumeClaim's name as `kubectl get pvc` lists it"
        )
    if args.out is not None:
        blocker = blocking_file(args.out)
        if blocker is not None:
            raise ConfigError(f"--out {args.out}: {blocker} is a file; give the directory the manifest goes into")
        reason = unwritable_reason(args.out)
        if reason is not None:
            raise ConfigError(
                f"--out {args.out}: {reason}; give a directory you can write to (or omit --out to print the manifests)"
            )


def _argv_for_header(args: argparse.Namespace) -> list[str]:
    argv = ["--target", args.target, "--image", args.image, "--model", args.model]
    for flag, value in (
        ("--model-artifact", args.model_artifact),
        ("--model-pvc", args.model_pvc),
        ("--arch", args.arch),
        ("--namespace", args.namespace),
        ("--name", args.name),
        ("--max-replicas", args.max_replicas),
    ):
        if value is not None:
            argv += [flag, str(value)]
    for flag, value, default in (
        ("--replicas", args.replicas, 1),
        ("--accelerators", args.accelerators, 1),
        ("--cpu", args.cpu, "8"),
        ("--memory", args.memory, "32Gi"),
    ):
        if value != default:
            argv += [flag, str(value)]
    for arg in args.vllm_arg:
        argv.append(f"--vllm-arg={arg}")
    return argv


def _examples(args: argparse.Namespace, matrix: Matrix) -> int:
    from xcforge.deploy.manifests import write_or_check_examples
    from xcforge.deploy.monitoring import write_or_check_monitoring

    results = write_or_check_examples(matrix, args.root, check=args.check)
    # deploy/monitoring/ is made from the same example objects (ServiceMonitor, rules, queue HPA, dashboards).
    results += write_or_check_monitoring(matrix, args.root, check=args.check)
    return report_drift(results, what="operator examples", fix="python build.py deploy --examples", root=args.root)
