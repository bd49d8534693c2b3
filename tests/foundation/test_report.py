"""The build report: what a person reads (Markdown) and a machine reads (JSON) say the same thing."""

from __future__ import annotations

import json

from xcforge.bake.result import BuildResult, PlatformResult
from xcforge.report.results import load_results, markdown, merge_into_report, write_reports


def _result(target: str, **kw) -> BuildResult:
    return BuildResult(
        target=target,
        status=kw.pop("status", "built"),
        platforms=[PlatformResult("linux/amd64", "sha256:" + "a" * 64, 3 * 2**20)],
        image_repo=f"r/vllm-{target}",
        digest="sha256:" + "b" * 64,
        **kw,
    )


def test_markdown_says_stand_in_and_which_platform_skipped_the_engine():
    text = markdown(
        [
            _result("ascend", base_kind="stand-in", engine_install="skip"),
            _result("cpu", base_kind="stand-in", engine_install="skip-arm64"),
            _result("cuda", base_kind="real"),
        ]
    )
    assert "| ascend | built |" in text and "stand-in (engine skipped) |" in text
    assert "stand-in (engine skipped on arm64)" in text
    assert "| real |" in text
    assert "amd64: 3.0 MiB" in text


def test_failures_and_notes_are_listed(tmp_path):
    failed = _result(
        "mlu",
        status="failed",
        error="mlu: build failed: E: Unable to locate package x",
        error_code=5,
        notes=["built on a stand-in"],
    )
    text = markdown([failed])
    assert "### Failures" in text and "Unable to locate package x" in text
    assert "### Notes" in text


def test_json_round_trip_and_merge_keeps_other_targets(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    write_reports([_result("cpu"), _result("cuda")], tmp_path)
    assert "xcforge build report" in summary.read_text()
    merged = merge_into_report([_result("cpu", status="skipped")], tmp_path)
    assert {r.target: r.status for r in merged} == {"cpu": "skipped", "cuda": "built"}
    write_reports(merged, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["schema"] == 1 and len(data["results"]) == 2
    again = load_results(tmp_path)
    assert again[0].platforms[0].compressed_bytes == 3 * 2**20


def test_report_json_reads_into_typed_records_and_writes_the_same_dicts(tmp_path):
    """Other tools read report.json: the typed records write exactly the dicts it has always held
    (an absent key stays absent), and read them back."""
    digest = "sha256:" + "c" * 64
    record = {
        **_result("cpu").as_dict(),
        "signatures": [
            {"scheme": "sm2", "digest": digest, "key_id": "0123456789abcdef", "location": "t.sm2", "result": "signed"},
            {
                "scheme": "cosign",
                "digest": digest,
                "key_id": "fedcba9876543210",
                "location": "t.att",
                "result": "attested",
                "attestation": "https://cyclonedx.org/bom",
            },
            {"scheme": "sigstore", "digest": digest, "key_id": "ci@example.org", "result": "signed"},
        ],
        "variants": [
            {
                "compression": "zstd",
                "digest": digest,
                "source_digest": digest,
                "refs": ["r/x:1-zstd"],
                "level": 9,
                "layers_transcoded": 2,
                "layers_reused": 0,
                "platforms": [
                    {
                        "platform": "linux/amd64",
                        "digest": digest,
                        "source_digest": digest,
                        "gzip_bytes": 10,
                        "compressed_bytes": 8,
                    }
                ],
            }
        ],
        "attestations": [
            {
                "platform": "linux/amd64",
                "digest": digest,
                "media_type": "application/vnd.oci.image.manifest.v1+json",
                "size": 500,
                "sbom": "/d/linux-amd64.cdx.json",
                "provenance": None,
                "provenance_type": None,
                "components": 3,
            },
            {
                "platform": "linux/arm64",
                "digest": digest,
                "media_type": "application/vnd.oci.image.manifest.v1+json",
                "size": 500,
                "sbom": "/d/linux-arm64.cdx.json",
                "provenance": "/d/p.json",
                "provenance_type": "https://slsa.dev/provenance/v0.2",
                "components": 3,
                "sbom_ref": "r/x:sha256-c.sbom",
            },
        ],
        "smoke": [{"check": "health", "platform": "linux/amd64", "status": "pass", "detail": ""}],
        "verification": [{"platform": "linux/amd64", "level": "served-cpu", "lock": "locked", "skipped": ["a: b"]}],
        "notes": ["n"],
    }
    (tmp_path / "report.json").write_text(json.dumps({"schema": 1, "results": [record]}))
    [loaded] = load_results(tmp_path)
    assert loaded.signatures[2].key_id == "ci@example.org" and loaded.variants[0].platforms[0].gzip_bytes == 10
    assert loaded.attestations[1].sbom_ref and loaded.verification[0].skipped == ("a: b",)
    write_reports([loaded], tmp_path / "again")
    assert json.loads((tmp_path / "again" / "report.json").read_text())["results"] == [record]
