# Shared by scripts/provision.sh and scripts/stop-services.sh (sourced, not run).
# Background services without systemd: each one is started with setsid, logs to
# $XCFORGE_LOG_DIR/<name>.log and records its pid in $XCFORGE_RUN_DIR/<name>.pid, so only
# what provisioning started is ever stopped.
# shellcheck shell=bash

XCFORGE_LOG_DIR=/var/log/xcforge
XCFORGE_RUN_DIR=/run/xcforge
# shellcheck disable=SC2034  # used by provision.sh
XCFORGE_STATE_DIR=/var/lib/xcforge
XCFORGE_REGISTRY_PORT=${XCFORGE_REGISTRY_PORT:-5000}
XCFORGE_REGISTRY=127.0.0.1:$XCFORGE_REGISTRY_PORT
# /usr/local/bin/docker on these machines is a client without the buildx plugin.
DOCKER=/usr/bin/docker

docker_up() { [[ -x $DOCKER ]] && timeout 10 "$DOCKER" info >/dev/null 2>&1; }
docker_version() { "$DOCKER" version -f '{{.Server.Version}}' 2>/dev/null; }

# "containerd" when dockerd uses the containerd image store, else the graph driver's name.
docker_store() {
    local status
    status=$("$DOCKER" info -f '{{json .DriverStatus}}' 2>/dev/null || true)
    if [[ $status == *io.containerd.snapshotter* ]]; then
        echo containerd
    else
        "$DOCKER" info -f '{{.Driver}}' 2>/dev/null || echo unknown
    fi
}

containerd_up() {
    [[ -S /run/containerd/containerd.sock ]] && command -v ctr >/dev/null &&
        timeout 5 ctr version >/dev/null 2>&1
}

registry_up() { curl -fsS -m 3 -o /dev/null "http://$XCFORGE_REGISTRY/v2/" 2>/dev/null; }

# Pid of a service this script started, if it is still that process.
service_pid() {
    local name=$1 pid_file=$XCFORGE_RUN_DIR/$1.pid pid comm
    [[ -f $pid_file ]] || return 1
    read -r pid comm <"$pid_file" || return 1
    [[ -n $pid && -r /proc/$pid/comm ]] || return 1
    # A recycled pid belongs to some other program: never signal it.
    [[ $(cat "/proc/$pid/comm") == "$comm" ]] || return 1
    printf '%s\n' "$pid"
}

registry_owner() {
    local pid
    if pid=$(service_pid registry); then
        echo "pid $pid"
    else
        echo "not started by provision.sh"
    fi
}

start_service() { # name argv...
    local name=$1
    shift
    mkdir -p "$XCFORGE_LOG_DIR" "$XCFORGE_RUN_DIR"
    printf '=== %s start: %s\n' "$(date -Is)" "$*" >>"$XCFORGE_LOG_DIR/$name.log"
    setsid nohup "$@" >>"$XCFORGE_LOG_DIR/$name.log" 2>&1 </dev/null &
    # /proc/<pid>/comm holds at most 15 characters of the program's name.
    local comm
    comm=$(basename "$1")
    printf '%s %s\n' "$!" "${comm:0:15}" >"$XCFORGE_RUN_DIR/$name.pid"
}

stop_service() { # name; prints nothing when it was not running
    local name=$1 pid i
    if ! pid=$(service_pid "$name"); then
        rm -f "$XCFORGE_RUN_DIR/$name.pid"
        return 1
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do
        [[ -d /proc/$pid ]] || break
        sleep 0.5
    done
    if [[ -d /proc/$pid ]]; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$XCFORGE_RUN_DIR/$name.pid"
}

wait_for() { # seconds command...
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}
