#!/usr/bin/env bash
# Quick start on a fresh Debian/Ubuntu machine, as root or as a user with sudo: provision, then build
# the cpu image with the embedded default (no registry: an OCI archive under dist/, also in the local
# engine). Vendor bases cannot be pulled here, so the build uses local stand-in bases (sites/standin.yaml)
# and the report says "stand-in"; only the stand-ins of the targets being built are made now (the test
# suite makes the rest). Extra arguments go to build.py (e.g. --target ascend; default --target cpu).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/root.sh
source scripts/lib/root.sh
become_root "$0" "$@"

if [ $# -eq 0 ]; then
    set -- --target cpu
fi
# The targets this build names (--target T, --target=T); --all or none named: every target's stand-in.
targets=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
        --target) targets+=("${args[i + 1]:-}") ;;
        --target=*) targets+=("${args[i]#--target=}") ;;
        --all) targets=() && break ;;
    esac
done
provision=()
if ((${#targets[@]})); then
    provision=(--targets "$(IFS=,; echo "${targets[*]}")")
fi
bash scripts/provision.sh "${provision[@]}"
exec .venv/bin/python build.py --site sites/standin.yaml "$@"
