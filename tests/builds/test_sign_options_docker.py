"""`build --push --sign` with a signing option that cannot work stops before the first bake (issue 33).

Each run goes against the real registry with a target whose stand-in base is there (a build would
start and push within seconds), and checks what the user and the registry see: the documented exit
code, one `error:` line that names the mistake and the remedy, no bake started (nothing echoed, no
bake file written) and nothing pushed or tagged under the run's own repository prefix.

The keys are made by the project's own `keygen`, encrypted with a password, as an operator makes them.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.builds.conftest import SKELETON_SITE as SITE
from tests.builds.conftest import cli, registry_get, tags

pytestmark = pytest.mark.docker

TARGET = "cuda"  # its stand-in base is in the local registry: a build that starts, pushes at once
PASSWORD = "right horse battery"
CLEAN_ENV = {
    "XCFORGE_SM2_KEY": "",
    "XCFORGE_COSIGN_KEY": "",
    "XCFORGE_SM2_PASSWORD": PASSWORD,
    "XCFORGE_COSIGN_PASSWORD": PASSWORD,
    "GITHUB_ACTIONS": "",
    "ACTIONS_ID_TOKEN_REQUEST_URL": "",
}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keys")
    made = cli("keygen", "--sm2", "--cosign", "--out", str(out), "--no-audit", env=CLEAN_ENV)
    assert made.returncode == 0, made.stderr
    (out / "garbage.key").write_bytes(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nnot a key\n-----END\n")
    (out / "adir.key").mkdir()
    return out


def _sign_build(registry: str, tmp_path: Path, *flags: str, env: dict[str, str]) -> tuple[int, str, str, float]:
    """(exit code, stderr, the repository prefix, seconds) of one `build --push --sign` run."""
    prefix = f"xcforge-test-signopt-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    proc = cli(
        "build", "--target", TARGET, "--site", str(SITE), "--registry", f"{registry}/{prefix}",
        "--push", "--sign", "--dist", str(tmp_path / "dist"), *flags,
        env={**CLEAN_ENV, **env},
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert "Traceback" not in proc.stderr
    for output in (proc.stdout, proc.stderr):
        assert "buildx bake" not in output and "==> bake" not in output, output[-2000:]
    assert not (tmp_path / "dist" / "bake").exists(), "a bake file was written: the build had started"
    # The registry does not know the repository at all: no tag, no manifest pushed by digest.
    assert registry_get(f"{prefix}/vllm-{TARGET}/tags/list").status_code == 404
    assert tags(f"{prefix}/vllm-{TARGET}") == []
    return proc.returncode, proc.stderr, prefix, seconds


def _one_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


CASES = {
    "no-key": ([], {}, 2, ["--sign needs --sm2-key and/or --cosign-key", "keygen"]),
    "sm2-wrong-password": (
        ["--sm2-key", "{k}/sm2.key"],
        {"XCFORGE_SM2_PASSWORD": "wrong"},
        7,
        ["sm2.key", "wrong password"],
    ),
    "sm2-path-in-env": ([], {"XCFORGE_SM2_KEY": "{k}/sm2.key"}, 7, ["$XCFORGE_SM2_KEY holds a path", "--sm2-key FILE"]),
    "cosign-wrong-password": (
        ["--cosign-key", "{k}/cosign.key"],
        {"XCFORGE_COSIGN_PASSWORD": "wrong"},
        7,
        ["cosign.key", "wrong password"],
    ),
    "cosign-garbage": (["--sm2-key", "{k}/sm2.key", "--cosign-key", "{k}/garbage.key"], {}, 7, ["garbage.key"]),
    "cosign-not-a-file": (["--cosign-key", "{k}/adir.key"], {}, 2, ["adir.key: not a file"]),
    "cosign-missing": (["--cosign-key", "{k}/none.key"], {}, 2, ["none.key: no such file", "keygen"]),
    "keyless-without-oidc-in-actions": (
        ["--sm2-key", "{k}/sm2.key", "--keyless"],
        {"GITHUB_ACTIONS": "true"},
        2,
        ["--keyless", "id-token: write"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_signing_option_stops_the_build_before_anything_is_pushed(case, registry, keys, tmp_path):
    flags, env, code, says = CASES[case]
    fill = {"k": str(keys)}
    code_seen, stderr, _, seconds = _sign_build(
        registry,
        tmp_path,
        *(f.format(**fill) for f in flags),
        env={k: v.format(**fill) for k, v in env.items()},
    )
    assert code_seen == code, stderr
    line = _one_error(stderr)
    for words in says:
        assert words in line, line
    assert seconds < 60, f"{seconds:.0f} s: the run did more than read its options"


def test_good_keys_reach_the_build(registry, keys, tmp_path):
    """The control: with keys that load, the same run builds, pushes and signs (the checks above
    would otherwise pass for a run that never gets that far for another reason)."""
    prefix = f"xcforge-test-signopt-{uuid.uuid4().hex[:8]}"
    proc = cli(
        "build", "--target", TARGET, "--site", str(SITE), "--registry", f"{registry}/{prefix}",
        "--push", "--sign", "--dist", str(tmp_path / "dist"),
        "--sm2-key", str(keys / "sm2.key"), "--cosign-key", str(keys / "cosign.key"),
        env=CLEAN_ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "buildx bake" in proc.stdout + proc.stderr
    assert tags(f"{prefix}/vllm-{TARGET}"), "nothing tagged"
    [record] = json.loads((tmp_path / "dist" / "report.json").read_text())["results"]
    assert {s["scheme"] for s in record["signatures"]} == {"sm2", "cosign"}
