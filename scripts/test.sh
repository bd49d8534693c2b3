#!/usr/bin/env bash
# The full test suite: lint, unit tests, then the docker-marked integration tests (real engine,
# buildx, QEMU, registry) and the slow ones (real vLLM CPU engine install and serve).
# As root or as a user with sudo. It provisions first (seconds when already done; the stand-in base of
# every target, which the quick start leaves for here). Fast unit tests only: `.venv/bin/pytest`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/root.sh
source scripts/lib/root.sh
become_root "$0" "$@"
bash scripts/provision.sh
export PATH="$PWD/.venv/bin:/usr/bin:$PATH"

ruff check .
ruff format --check .
mypy
python build.py render --all --check
python build.py deps --all --check
python build.py workflows --check
python build.py deploy --examples --check
exec python -m pytest --docker --slow -q -p no:cacheprovider "$@"
