"""CI: GitHub Actions integration (groups, annotations, runner detection) and the generated workflows."""
