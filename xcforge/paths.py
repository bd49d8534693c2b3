"""Where the checkout is: the committed inputs (matrix.yaml, templates/, images/) and outputs (dist/)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DIST_DIR = REPO_ROOT / "dist"
