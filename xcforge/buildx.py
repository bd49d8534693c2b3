"""docker buildx, the way xcforge drives it: the command line for a plan, and a runner that streams
its plain progress with a target prefix while counting steps and cache hits."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from xcforge.plan import BuildPlan
from xcforge.shell import DOCKER, echo

# buildx/registry failures worth another try (the registry client has its own list for pushes).
RETRYABLE = re.compile(
    r"(connection refused|connection reset|i/o timeout|tls handshake timeout|EOF|"
    r"\b50[0234]\b|\b429\b|too many requests|bad gateway|service unavailable|no such host)",
    re.IGNORECASE,
)
_print_lock = threading.Lock()


def say(message: str) -> None:
    with _print_lock:
        print(message, file=sys.stderr, flush=True)


def buildx_command(
    plan: BuildPlan, *, build_args: dict[str, str], secret_files: dict[str, Path], output: str, metadata: Path
) -> list[str]:
    cmd = [DOCKER, "buildx", "build", "--progress=plain", "--platform", ",".join(plan.platforms)]
    cmd += ["--file", str(plan.dockerfile)]
    for name, path in sorted(plan.named_contexts.items()):
        cmd += ["--build-context", f"{name}={path}"]
    for key, value in sorted(build_args.items()):
        cmd += ["--build-arg", f"{key}={value}"]
    for secret_id, path in sorted(secret_files.items()):
        cmd += ["--secret", f"id={secret_id},src={path}"]
    # One flag per level: buildx 0.13 reads "index,manifest:" as part of the key.
    for key, value in annotations(plan, build_args).items():
        cmd += ["--annotation", f"index:{key}={value}", "--annotation", f"manifest:{key}={value}"]
    if plan.output != "archive" and plan.site.registry_cache:
        cache_ref = f"{plan.image_repo}:buildcache-{'-'.join(p.split('/')[1] for p in plan.platforms)}"
        cmd += [
            "--cache-from",
            f"type=registry,ref={cache_ref}",
            "--cache-to",
            f"type=registry,ref={cache_ref},mode=max",
        ]
    cmd += ["--provenance=mode=max", "--metadata-file", str(metadata), "--output", output, str(plan.context)]
    return cmd


def annotations(plan: BuildPlan, build_args: dict[str, str]) -> dict[str, str]:
    target = plan.target
    return {
        "org.opencontainers.image.title": f"xcforge vLLM {target.name}",
        "org.opencontainers.image.description": target.description,
        "org.opencontainers.image.version": f"{plan.engine_version}-{target.variant}",
        "org.opencontainers.image.revision": build_args.get("BUILD_REVISION", ""),
        "org.opencontainers.image.created": build_args.get("BUILD_CREATED", ""),
        "org.opencontainers.image.source": build_args.get("BUILD_SOURCE", ""),
        "org.opencontainers.image.base.name": plan.base_original,
        "org.opencontainers.image.base.digest": build_args.get("BASE_DIGEST", ""),
        "io.xcforge.target": target.name,
    }


def output_spec(plan: BuildPlan, archive: Path) -> str:
    """Every build writes an OCI layout archive; pushing uploads that same archive (xcforge/push.py),
    so the digest operators `docker load` offline is the digest in the registry."""
    names = ",".join(plan.refs) if plan.refs else plan.image_repo
    return f'type=oci,dest={archive},"name={names}"'


@dataclass
class BuildxRun:
    returncode: int
    tail: list[str]
    cache_hits: int
    steps: int


def stream_buildx(cmd: list[str], prefix: str) -> BuildxRun:
    """Run buildx, echoing its plain progress with a target prefix; count steps and cache hits."""
    echo(cmd)
    tail: deque[str] = deque(maxlen=60)
    steps: set[str] = set()
    cached: set[str] = set()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            match = re.match(r"^#(\d+) (\[.*?\]|CACHED|DONE)", line)
            if match:
                if match.group(2).startswith("[") and "internal" not in match.group(2):
                    steps.add(match.group(1))
                elif match.group(2) == "CACHED":
                    cached.add(match.group(1))
            if line.strip():
                say(f"[{prefix}] {line}")
        proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return BuildxRun(proc.returncode, list(tail), len(cached & steps), len(steps))


def failure_reason(tail: list[str]) -> str:
    for line in reversed(tail):
        if line.startswith("ERROR:") or "error:" in line.lower():
            return re.sub(r"^#\d+ [\d.]+ ", "", line).strip()[:400]
    return (tail[-1] if tail else "no output")[:400]
