#!/usr/bin/env bash
# Quick start on a fresh Debian/Ubuntu machine: provision, then build the cpu image with the
# embedded default (no registry: an OCI archive under dist/, also loaded into the local engine).
# Vendor bases cannot be pulled here, so the build uses the local stand-in bases (sites/standin.yaml)
# and the report says "stand-in". Extra arguments go to build.py (e.g. --target ascend).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/provision.sh
if [ $# -eq 0 ]; then
    set -- --target cpu
fi
exec .venv/bin/python build.py --site sites/standin.yaml "$@"
