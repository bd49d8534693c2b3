"""Build results → the summary a person reads and the JSON a machine reads.

Written to dist/report.json and dist/report.md, appended to $GITHUB_STEP_SUMMARY in Actions, and
printed as a table. The report is where the stages' results meet: `with_outcomes` puts each build
record together with what the sign and smoke stages returned for it (report.json keeps one record
per target, as before).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.table import Table

from xcforge import console
from xcforge.bake.result import BuildResult
from xcforge.errors import ConfigError, SmokeFailed
from xcforge.records import VariantRecord

if TYPE_CHECKING:
    from xcforge.publish.push import PushOutcome
    from xcforge.publish.zstd import PublishOutcome
    from xcforge.sign.stage import SignOutcome
    from xcforge.smoke.checks import SmokeOutcome

REPORT_SCHEMA = 1


def with_outcomes(
    builds: Iterable[BuildResult],
    signed: Iterable[SignOutcome] = (),
    smoked: Iterable[SmokeOutcome] = (),
    published: Iterable[PublishOutcome] = (),
    pushed: Iterable[PushOutcome] = (),
) -> list[BuildResult]:
    """The report's records: each build record with its target's push, publish, sign and smoke
    outcomes, as new records (the build stage's own are frozen and stay as they were).

    The first error stands (a target whose signing failed is not smoke-tested). A smoke error is
    the verdict of the last smoke run, so a later passing `smoke` clears an earlier one. A
    published variant replaces the record's earlier one of the same compression.
    """
    by_sign = {o.target: o for o in signed}
    by_smoke = {o.target: o for o in smoked}
    by_publish = {o.target: o for o in published}
    by_push = {o.target: o for o in pushed}
    records = []
    for build in builds:
        record = _with_push(build, by_push.get(build.target))
        record = _with_publish(record, by_publish.get(build.target))
        record = _with_sign(record, by_sign.get(build.target))
        records.append(_with_smoke(record, by_smoke.get(build.target)))
    return records


def _first_error(record: BuildResult, error: str | None, error_code: int) -> dict[str, Any]:
    return {"error": error, "error_code": error_code} if error and not record.error else {}


def _with_push(record: BuildResult, push: PushOutcome | None) -> BuildResult:
    """The pushed record: its SBOMs' registry tags and the push's time; a failed push fails it."""
    if push is None:
        return record
    duration = record.duration_s + push.duration_s
    if push.error:
        return replace(
            record, status="failed", duration_s=duration, **_first_error(record, push.error, push.error_code)
        )
    return replace(record, attestations=push.attestations, duration_s=duration)


def _with_publish(record: BuildResult, publish: PublishOutcome | None) -> BuildResult:
    if publish is None:
        return record
    return replace(
        record,
        variants=publish.variants_over(record.variants),
        notes=(*record.notes, *publish.notes),
        **_first_error(record, publish.error, publish.error_code),
    )


def _with_sign(record: BuildResult, sign: SignOutcome | None) -> BuildResult:
    if sign is None:
        return record
    return replace(
        record,
        signatures=(*record.signatures, *sign.signed),
        notes=(*record.notes, *sign.notes),
        **_first_error(record, sign.error, sign.error_code),
    )


def _with_smoke(record: BuildResult, smoke: SmokeOutcome | None) -> BuildResult:
    if smoke is None:
        return record
    record = replace(record.with_levels(smoke.levels), smoke=smoke.checks)
    if smoke.error and not record.error:
        return replace(record, error=smoke.error, error_code=smoke.error_code)
    if not smoke.error and record.error_code == SmokeFailed.exit_code:
        return replace(record, error=None, error_code=0)
    return record


def format_bytes(n: float | None) -> str:
    """1536 → '1.5 KiB'; None → '-'."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _base_cell(result: BuildResult) -> str:
    skipped = ""
    if result.engine_install == "skip":
        skipped = " (engine skipped)"
    elif result.engine_install.startswith("skip-"):
        skipped = f" (engine skipped on {result.engine_install.removeprefix('skip-')})"
    return result.base_kind + skipped


def _verified_cell(result: BuildResult) -> str:
    return "<br>".join(f"{v.platform.split('/')[-1]}: {v.level}" for v in result.verification) or "-"


def _variant_sizes(variant: VariantRecord, sep: str) -> str:
    """`amd64: 1.2 GiB → 1.0 GiB (0.83)` per platform: the gzip image's compressed size → the variant's."""
    cells = []
    for p in variant.platforms:
        gzip, other = p.gzip_bytes, p.compressed_bytes
        ratio = f" ({other / gzip:.2f})" if gzip and other else ""
        cells.append(f"{p.platform.split('/')[-1]}: {format_bytes(gzip)} → {format_bytes(other)}{ratio}")
    return sep.join(cells) or "-"


def markdown(results: list[BuildResult]) -> str:
    lines = [
        "## xcforge build report",
        "",
        "| target | status | platforms | digest | compressed size | duration | cache hits | base | verified |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        platforms = "<br>".join(p.platform for p in r.platforms)
        sizes = "<br>".join(f"{p.platform.split('/')[-1]}: {format_bytes(p.compressed_bytes)}" for p in r.platforms)
        digest = f"`{r.digest[:19]}…`" if r.digest else "-"
        lines.append(
            f"| {r.target} | {r.status} | {platforms} | {digest} | {sizes} | {r.duration_s:.0f} s | "
            f"{r.cache_hits}/{r.steps} | {_base_cell(r)} | {_verified_cell(r)} |"
        )
    failures = [r for r in results if r.error]
    if failures:
        lines += ["", "### Failures", ""]
        lines += [f"- **{r.target}**: {r.error}" for r in failures]
    skipped = [(r.target, v.platform, s) for r in results for v in r.verification for s in v.skipped]
    if skipped:
        lines += ["", "### Not verified (skipped steps and why)", ""]
        lines += [f"- **{t}** {p}: {s}" for t, p, s in skipped]
    built_where = [(r.target, p) for r in results for p in r.platforms if p.builder]
    if built_where:
        lines += ["", "### Where each platform was built", ""]
        lines += ["| target | platform | builder | how |", "|---|---|---|---|"]
        for t, p in built_where:
            how = "native" if p.native else "emulated (QEMU)" if p.native is False else "-"
            lines.append(f"| {t} | {p.platform} | {p.builder} | {how} |")
    variants = [(r, v) for r in results for v in r.variants]
    if variants:
        lines += ["", "### Compression variants", "", "| target | compression | tags | digest | size per platform |"]
        lines.append("|---|---|---|---|---|")
        for r, v in variants:
            tags = "<br>".join(f"`{ref.rpartition(':')[2]}`" for ref in v.refs) or "-"
            lines.append(
                f"| {r.target} | {v.compression} | {tags} | `{v.digest[:19]}…` | {_variant_sizes(v, '<br>')} |"
            )
    notes = [(r.target, n) for r in results for n in r.notes]
    if notes:
        lines += ["", "### Notes", ""]
        lines += [f"- **{t}**: {n}" for t, n in notes]
    sboms = [(r.target, a) for r in results for a in r.attestations]
    if sboms:
        lines += ["", "### SBOM and provenance", "", "| target | platform | components | SBOM | provenance |"]
        lines.append("|---|---|---|---|---|")
        for t, a in sboms:
            where = a.sbom_ref or a.sbom
            lines.append(f"| {t} | {a.platform} | {a.components} | `{where}` | {a.provenance_type or '-'} |")
    signed = [(r.target, s) for r in results for s in r.signatures]
    if signed:
        lines += ["", "### Signatures", "", "| target | scheme | what | digest | key id | result |"]
        lines.append("|---|---|---|---|---|---|")
        for t, signature in signed:
            what = signature.attestation or "image"
            lines.append(
                f"| {t} | {signature.scheme} | {what} | `{signature.digest[:19]}…` | {signature.key_id} "
                f"| {signature.result} |"
            )
    smoked = [(r.target, s) for r in results for s in r.smoke]
    if smoked:
        lines += ["", "### Smoke tests", "", "| target | platform | check | result | detail |", "|---|---|---|---|---|"]
        for t, s in smoked:
            lines.append(f"| {t} | {s.platform} | {s.check} | {s.status} | {s.detail} |")
    return "\n".join(lines) + "\n"


def print_table(results: list[BuildResult], stream: TextIO | None = None) -> None:
    console = Console(file=stream or sys.stderr, width=160)
    table = Table(title="xcforge build summary")
    for column in ("target", "status", "platforms", "digest", "size (compressed)", "duration", "cache", "base"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.target,
            r.status if not r.error else f"[red]{r.status}[/red]",
            "\n".join(p.platform for p in r.platforms),
            (r.digest[:19] + "…") if r.digest else "-",
            "\n".join(format_bytes(p.compressed_bytes) for p in r.platforms),
            f"{r.duration_s:.0f} s",
            f"{r.cache_hits}/{r.steps}",
            _base_cell(r),
        )
    console.print(table)
    for r in results:
        for v in r.variants:
            tags = ", ".join(ref.rpartition(":")[2] for ref in v.refs) or "untagged"
            console.print(
                f"{r.target} {v.compression} variant ({tags}): {r.image_repo}@{v.digest}; {_variant_sizes(v, ', ')}",
                highlight=False,
            )
    for r in results:
        if r.error:
            console.print(f"[red]{r.target}[/red]: {r.error}", highlight=False)


def write_reports(results: list[BuildResult], dist: Path) -> tuple[Path, Path]:
    dist.mkdir(parents=True, exist_ok=True)
    json_path = dist / "report.json"
    md_path = dist / "report.md"
    payload = {"schema": REPORT_SCHEMA, "results": [r.as_dict() for r in results]}
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(json_path)
    text = markdown(results)
    md_path.write_text(text, encoding="utf-8")
    console.write_step_summary(text)
    return json_path, md_path


def load_results(dist: Path) -> list[BuildResult]:
    """The records of dist/report.json ([] when there is none); a file that is not a report xcforge
    wrote is one ConfigError, for every command that reads it."""
    path = dist / "report.json"
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        results = [BuildResult.from_dict(item) for item in data.get("results", [])]
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"{path}: not a build report xcforge can read ({detail}); rebuild, or name the image by its digest"
        ) from None
    return results


def merge_into_report(new: list[BuildResult], dist: Path) -> list[BuildResult]:
    """Replace the records of the targets just built, keep the others (several invocations, one report)."""
    by_target = {r.target: r for r in load_results(dist)}
    for result in new:
        by_target[result.target] = result
    return list(by_target.values())
