"""Stage 9, report: results → report.json, report.md, the summary table, $GITHUB_STEP_SUMMARY."""
