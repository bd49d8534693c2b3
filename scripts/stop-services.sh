#!/usr/bin/env bash
# Stop the registry, dockerd and containerd that scripts/provision.sh started (by their recorded
# pids; anything started another way is left alone). Safe to run when nothing is running.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/services.sh
source "$REPO_ROOT/scripts/lib/services.sh"

# Reverse start order: dockerd's containers and builds need containerd until dockerd is gone.
for name in registry dockerd containerd; do
    if stop_service "$name"; then
        printf '%-16s %s\n' "$name:" "stopped"
    else
        printf '%-16s %s\n' "$name:" "not running (or not started by provision.sh)"
    fi
done
