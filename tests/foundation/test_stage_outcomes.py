"""Each stage returns its own result; the report stage puts them together. The sign and smoke
stages never change a build record (the records the build stage returned are as they were)."""

from __future__ import annotations

import copy

from xcforge.bake.result import BuildResult, PlatformResult
from xcforge.publish.push import PushOutcome
from xcforge.records import AttestationRecord, SignatureRecord
from xcforge.report.results import with_outcomes
from xcforge.sign.stage import SignOutcome
from xcforge.smoke.checks import FAIL, PASS, SKIP, SmokeCheck, smoke_outcome

DIGEST = "sha256:" + "b" * 64


def _build(target: str = "cpu", **kw) -> BuildResult:
    return BuildResult(
        target=target,
        status="built",
        platforms=[
            PlatformResult("linux/amd64", "sha256:" + "a" * 64),
            PlatformResult("linux/arm64", "sha256:" + "c" * 64),
        ],
        image_repo=f"r/vllm-{target}",
        digest=DIGEST,
        verification=[
            {"platform": "linux/amd64", "level": "built", "lock": "locked", "skipped": []},
            {"platform": "linux/arm64", "level": "built", "lock": "locked", "skipped": []},
        ],
        **kw,
    )


def test_smoke_outcome_raises_served_platforms_and_names_failures():
    checks = [
        SmokeCheck("serve-completion", "linux/amd64", PASS),
        SmokeCheck("serve-completion", "linux/arm64", SKIP, "emulated"),
        SmokeCheck("health", "linux/arm64", FAIL, "no answer"),
    ]
    outcome = smoke_outcome("cpu", checks, device=False)
    assert outcome.levels == (("linux/amd64", "served-cpu"),)
    assert outcome.error == "1 smoke check(s) failed: health (linux/arm64)" and outcome.error_code == 9
    assert [c.check for c in outcome.failed] == ["health"]
    assert smoke_outcome("cpu", checks[:1], device=True).levels == (("linux/amd64", "device-tested"),)
    assert smoke_outcome("cpu", checks[:1], device=False).error is None


def test_the_report_record_joins_build_sign_and_smoke_without_touching_the_build():
    build = _build(notes=["built on a stand-in"])
    before = copy.deepcopy(build)
    signed = SignOutcome("cpu", (SignatureRecord("sm2", DIGEST, "0123456789abcdef"),), ("no SBOM recorded",))
    smoked = smoke_outcome("cpu", [SmokeCheck("serve-completion", "linux/amd64", PASS)], device=False)
    [record] = with_outcomes([build], [signed], [smoked])
    assert build == before  # the build stage's record is its own
    assert record.signatures == (SignatureRecord("sm2", DIGEST, "0123456789abcdef", result="signed"),)
    assert record.notes == ("built on a stand-in", "no SBOM recorded")
    assert [c.check for c in record.smoke] == ["serve-completion"]
    assert [v.level for v in record.verification] == ["served-cpu", "built"]
    assert record.error is None


def test_the_first_error_stands_and_a_passing_smoke_clears_an_earlier_smoke_error():
    signing_failed = SignOutcome("cpu", error="signing failed: key locked", error_code=7)
    smoke_failed = smoke_outcome("cpu", [SmokeCheck("health", "linux/amd64", FAIL)], device=False)
    [record] = with_outcomes([_build()], [signing_failed], [smoke_failed])
    assert (record.error, record.error_code) == ("signing failed: key locked", 7)

    [failed] = with_outcomes([_build()], smoked=[smoke_failed])
    assert failed.error_code == 9
    [passed] = with_outcomes(
        [failed], smoked=[smoke_outcome("cpu", [SmokeCheck("health", "linux/amd64", PASS)], device=False)]
    )
    assert passed.error is None and passed.error_code == 0

    built_failed = _build(error="build failed", error_code=5)
    [kept] = with_outcomes([built_failed], smoked=[smoke_outcome("cpu", [], device=False)])
    assert (kept.error, kept.error_code) == ("build failed", 5)


def test_outcomes_of_other_targets_are_not_applied():
    [record] = with_outcomes([_build("cpu")], [SignOutcome("mlu", error="x", error_code=7)])
    assert record.error is None and record.signatures == ()


def test_a_push_adds_where_the_sboms_went_and_a_failed_push_fails_the_record():
    attested = AttestationRecord("linux/amd64", DIGEST, "m", 1, "/s.json", None, None, 3)
    build = _build(attestations=[attested], duration_s=10.0)
    pushed = PushOutcome(
        "cpu", (AttestationRecord("linux/amd64", DIGEST, "m", 1, "/s.json", None, None, 3, "r:x.sbom"),), 2.0
    )
    [record] = with_outcomes([build], pushed=[pushed])
    assert record.attestations[0].sbom_ref == "r:x.sbom" and record.duration_s == 12.0
    assert build.attestations == (attested,)  # the build stage's record is its own

    failed = PushOutcome("cpu", duration_s=1.0, error="cpu: registry down", error_code=6)
    [record] = with_outcomes([build], pushed=[failed])
    assert (record.status, record.error, record.error_code) == ("failed", "cpu: registry down", 6)
    assert record.attestations == (attested,)
