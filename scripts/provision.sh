#!/usr/bin/env bash
# Provision a Debian 12 machine (CI runner or developer box) for xcforge:
#   apt packages (Docker 26 + buildx + cosign from trixie, the rest from bookworm),
#   QEMU binfmt for arm64, dockerd with the containerd image store, a loopback OCI registry,
#   the project's .venv, and the stand-in base images.
# Idempotent and quiet; a second run only checks and takes a few seconds.
# See docs/provisioning.md.
#
# Usage: scripts/provision.sh [--no-python] [--no-bases] [--status]
# Env:   XCFORGE_REGISTRY_PORT (default 5000)
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/services.sh
source "$REPO_ROOT/scripts/lib/services.sh"

TRIXIE_PACKAGES=(docker.io docker-cli docker-buildx cosign)
# runc, tini: trixie's builds need libc6 >= 2.38 and would drag trixie's libc (and base-files)
# in; bookworm's satisfy docker.io 26's dependencies. arch-test: mmdebstrap uses it to check that
# a foreign architecture can run (binfmt). iptables: dockerd's bridge network.
# skopeo, jq: independent registry inspection in tests.
BOOKWORM_PACKAGES=(
    ca-certificates curl jq iptables runc tini
    qemu-user-static binfmt-support arch-test
    docker-registry mmdebstrap skopeo
)
# Docker 20.10 (bookworm's own docker.io) has no buildx plugin: the engine must be 26 or newer.
MIN_DOCKER_VERSION=26

TRIXIE_SOURCES=/etc/apt/sources.list.d/xcforge-trixie.sources
TRIXIE_PIN=/etc/apt/preferences.d/xcforge-trixie
DAEMON_JSON=/etc/docker/daemon.json
PROVISION_LOG=$XCFORGE_LOG_DIR/provision.log

WANT_PYTHON=1
WANT_BASES=1
STATUS_ONLY=0

usage() {
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while (($#)); do
    case $1 in
        --no-python) WANT_PYTHON=0 ;;
        --no-bases) WANT_BASES=0 ;;
        --status) STATUS_ONLY=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "provision: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { printf '%-16s %s\n' "$1:" "$2"; }
die() { printf 'provision: error: %s\n' "$*" >&2; exit 1; }

# Run a command with its output going to the provision log; on failure show the log's tail.
logged() {
    local what=$1
    shift
    printf '+ %s\n' "$*" >>"$PROVISION_LOG"
    if ! "$@" >>"$PROVISION_LOG" 2>&1; then
        printf 'provision: error: %s failed; last lines of %s:\n' "$what" "$PROVISION_LOG" >&2
        tail -n 30 "$PROVISION_LOG" | sed 's/^/  | /' >&2
        exit 1
    fi
}

# ---------------------------------------------------------------- apt packages

missing_packages() {
    local pkg status
    for pkg in "${BOOKWORM_PACKAGES[@]}" "${TRIXIE_PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
        [[ $status == ii* ]] || printf '%s\n' "$pkg"
    done
    local engine
    engine=$(dpkg-query -W -f='${Version}' docker.io 2>/dev/null || true)
    if [[ -n $engine ]] && dpkg --compare-versions "$engine" lt "$MIN_DOCKER_VERSION"; then
        printf 'docker.io(%s<%s)\n' "$engine" "$MIN_DOCKER_VERSION"
    fi
}

# Print "<URIs>\t<Signed-By>" of the machine's own bookworm entry (deb822 or one-line format), so
# the trixie entry uses the same mirror and keyring without the archive's name written anywhere.
bookworm_entry() {
    local file entry
    for file in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
        [[ -f $file && $file != "$TRIXIE_SOURCES" ]] || continue
        entry=$(awk 'BEGIN { RS = ""; FS = "\n" }
            {
                uris = ""; signed = ""; types = ""; main = 0
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
                    else if ($i ~ /^Signed-By:/) { signed = $i; sub(/^Signed-By:[ \t]*/, "", signed) }
                    else if ($i ~ /^Types:/) { types = $i }
                    else if ($i ~ /^Suites:/ && $i ~ /[ \t]bookworm([ \t]|$)/) { main = 1 }
                }
                if (main && uris != "" && types ~ /[ \t]deb([ \t]|$)/) { printf "%s\t%s\n", uris, signed; exit }
            }' "$file")
        if [[ -n $entry ]]; then
            printf '%s\n' "$entry"
            return
        fi
    done
    [[ -f /etc/apt/sources.list ]] || return 0
    awk '$1 == "deb" {
            signed = ""; uri = ""; suite = ""; n = 2
            if ($2 ~ /^\[/) {
                for (; n <= NF; n++) {
                    if ($n ~ /signed-by=/) { signed = $n; sub(/.*signed-by=/, "", signed); sub(/\]$/, "", signed) }
                    if ($n ~ /\]$/) { n++; break }
                }
            }
            uri = $n; suite = $(n + 1)
            if (suite == "bookworm") { printf "%s\t%s\n", uri, signed; exit }
        }' /etc/apt/sources.list
}

write_if_changed() { # path content
    if [[ ! -f $1 ]] || [[ $(cat "$1") != "$2" ]]; then
        mkdir -p "$(dirname "$1")"
        printf '%s\n' "$2" >"$1"
    fi
}

setup_trixie_source() {
    local entry uris signed content
    entry=$(bookworm_entry)
    if [[ -z $entry ]]; then
        local os
        os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}") || os=unknown
        die "no Debian 12 (bookworm) entry in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list (this is $os); provision.sh installs packages on Debian 12 only"
    fi
    IFS=$'\t' read -r uris signed <<<"$entry"
    content="# Written by xcforge scripts/provision.sh: Docker 26, buildx and cosign come from trixie.
Types: deb
URIs: $uris
Suites: trixie
Components: main"
    [[ -z $signed ]] || content+=$'\n'"Signed-By: $signed"
    write_if_changed "$TRIXIE_SOURCES" "$content"
    write_if_changed "$TRIXIE_PIN" "# Written by xcforge scripts/provision.sh: trixie only for what is asked for with -t trixie.
Package: *
Pin: release n=trixie
Pin-Priority: 100"
}

install_packages() {
    local missing count
    missing=$(missing_packages)
    if [[ -z $missing ]]; then
        say "apt packages" "installed ($(dpkg-query -W -f='docker.io ${Version}' docker.io))"
        return
    fi
    count=$(wc -w <<<"$missing")
    local started=$SECONDS
    setup_trixie_source
    # Packages' maintainer scripts would start their own daemons (docker, docker-registry on :5000)
    # with the distribution's config; this script starts them itself, with its own.
    local policy_created=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_created=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    local apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    export DEBIAN_FRONTEND=noninteractive
    logged "apt-get update" apt-get update -q
    logged "apt-get install (bookworm)" apt-get install "${apt_opts[@]}" "${BOOKWORM_PACKAGES[@]}"
    # Trixie is there for four Go programs; refuse to change the machine's C library for them.
    local plan
    plan=$(apt-get install -s "${apt_opts[@]}" -t trixie "${TRIXIE_PACKAGES[@]}" 2>&1) ||
        die "apt-get cannot plan the trixie install: $(tail -n 1 <<<"$plan")"
    if grep -qE '^Inst (libc6|base-files) ' <<<"$plan"; then
        printf '%s\n' "$plan" >>"$PROVISION_LOG"
        die "installing ${TRIXIE_PACKAGES[*]} from trixie would upgrade libc6/base-files; see $PROVISION_LOG"
    fi
    logged "apt-get install -t trixie" apt-get install "${apt_opts[@]}" -t trixie "${TRIXIE_PACKAGES[@]}"
    if ((policy_created)); then
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    fi
    missing=$(missing_packages)
    [[ -z $missing ]] || die "still missing after apt-get install: ${missing//$'\n'/ }"
    say "apt packages" "installed $count missing in $((SECONDS - started)) s ($(dpkg-query -W -f='docker.io ${Version}' docker.io))"
}

# ---------------------------------------------------------------- binfmt (arm64 under QEMU)

setup_binfmt() {
    local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
    if [[ $(uname -m) == aarch64 ]]; then
        say "binfmt" "native aarch64, no emulation needed"
        return
    fi
    if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
        logged "mount binfmt_misc" mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    fi
    if [[ ! -f $entry ]] || ! grep -qx enabled "$entry"; then
        if ! update-binfmts --display qemu-aarch64 >/dev/null 2>&1; then
            logged "update-binfmts --import" update-binfmts --import qemu-aarch64
        fi
        logged "update-binfmts --enable" update-binfmts --enable qemu-aarch64
    fi
    grep -qx enabled "$entry" 2>/dev/null || die "qemu-aarch64 is not enabled in binfmt_misc after update-binfmts"
    # F (fix binary): the kernel opens the interpreter now, so it works inside containers too.
    local flags
    flags=$(sed -n 's/^flags: //p' "$entry")
    [[ $flags == *F* ]] || die "qemu-aarch64 binfmt entry lacks the F flag (flags: $flags); containers cannot use it"
    say "binfmt" "qemu-aarch64 enabled (flags $flags)"
}

# ---------------------------------------------------------------- docker engine

# Merge {"features": {"containerd-snapshotter": true}} into daemon.json, keeping other keys.
# Prints "changed" when the file was rewritten.
merge_daemon_json() {
    mkdir -p "$(dirname "$DAEMON_JSON")"
    python3 - "$DAEMON_JSON" <<'PY'
import json, sys
path = sys.argv[1]
try:
    with open(path) as f:
        text = f.read()
    data = json.loads(text) if text.strip() else {}
except FileNotFoundError:
    data = {}
except json.JSONDecodeError as exc:
    sys.exit(f"provision: error: {path} is not valid JSON ({exc}); fix or remove it")
if not isinstance(data, dict):
    sys.exit(f"provision: error: {path} must hold a JSON object")
features = data.setdefault("features", {})
if features.get("containerd-snapshotter") is not True:
    features["containerd-snapshotter"] = True
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print("changed")
PY
}

start_engine() {
    local changed
    changed=$(merge_daemon_json)
    if docker_up; then
        if [[ -n $changed || $(docker_store) != containerd ]]; then
            if [[ -f $XCFORGE_RUN_DIR/dockerd.pid ]]; then
                stop_service dockerd
            else
                die "dockerd is running without the containerd image store and was not started by this script; restart it after reading $DAEMON_JSON"
            fi
        else
            say "docker engine" "running ($(docker_version), containerd image store)"
            return
        fi
    fi
    local started=$SECONDS
    if ! containerd_up; then
        start_service containerd containerd
        wait_for 30 containerd_up || die "containerd did not start; see $XCFORGE_LOG_DIR/containerd.log"
    fi
    start_service dockerd dockerd --containerd=/run/containerd/containerd.sock
    wait_for 60 docker_up || die "dockerd did not answer within 60 s; see $XCFORGE_LOG_DIR/dockerd.log"
    [[ $(docker_store) == containerd ]] || die "dockerd started without the containerd image store; check $DAEMON_JSON"
    say "docker engine" "started ($(docker_version), containerd image store) in $((SECONDS - started)) s"
}

check_buildx() {
    local version platforms
    version=$("$DOCKER" buildx version 2>/dev/null) || die "docker buildx is missing (package docker-buildx from trixie)"
    platforms=$("$DOCKER" buildx inspect default 2>/dev/null | sed -n 's/^Platforms: *//p' | head -n 1)
    [[ $platforms == *linux/arm64* ]] || die "the default buildx builder does not offer linux/arm64 (platforms: $platforms); is binfmt set up?"
    say "buildx" "$(awk '{print $2}' <<<"$version"), default builder: linux/amd64 + linux/arm64"
}

# ---------------------------------------------------------------- registry

start_registry() {
    if registry_up; then
        say "registry" "running at $XCFORGE_REGISTRY ($(registry_owner))"
        return
    fi
    mkdir -p "$XCFORGE_STATE_DIR/registry"
    local config=$XCFORGE_STATE_DIR/registry-$XCFORGE_REGISTRY_PORT.yml
    write_if_changed "$config" "# Written by xcforge scripts/provision.sh
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $XCFORGE_STATE_DIR/registry
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $XCFORGE_REGISTRY"
    start_service registry docker-registry serve "$config"
    wait_for 30 registry_up || die "the registry did not answer at http://$XCFORGE_REGISTRY/v2/; see $XCFORGE_LOG_DIR/registry.log"
    say "registry" "started at $XCFORGE_REGISTRY (storage $XCFORGE_STATE_DIR/registry)"
}

# ---------------------------------------------------------------- python

python_stamp() {
    local files=("$REPO_ROOT/pyproject.toml")
    [[ -f $REPO_ROOT/images/engine/pyproject.toml ]] && files+=("$REPO_ROOT/images/engine/pyproject.toml")
    { python3 --version; cat "${files[@]}"; } | sha256sum | cut -d' ' -f1
}

setup_python() {
    local venv=$REPO_ROOT/.venv stamp_file=$REPO_ROOT/.venv/.xcforge-provisioned stamp
    stamp=$(python_stamp)
    if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c '' 2>/dev/null &&
        [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]]; then
        say "python" ".venv up to date ($("$venv/bin/python" --version))"
        return
    fi
    local started=$SECONDS
    if ! { [[ -x $venv/bin/python ]] && "$venv/bin/python" -c '' 2>/dev/null; }; then
        logged "python3 -m venv" python3 -m venv --clear "$venv"
    fi
    local targets=(-e "${REPO_ROOT}[dev]")
    [[ -f $REPO_ROOT/images/engine/pyproject.toml ]] && targets+=(-e "$REPO_ROOT/images/engine")
    logged "pip install" "$venv/bin/python" -m pip install -q "${targets[@]}"
    printf '%s\n' "$stamp" >"$stamp_file"
    say "python" ".venv installed in $((SECONDS - started)) s ($("$venv/bin/python" --version))"
}

# ---------------------------------------------------------------- stand-in bases

standin_python() {
    if [[ -x $REPO_ROOT/.venv/bin/python ]]; then
        printf '%s\n' "$REPO_ROOT/.venv/bin/python"
    fi
}

build_bases() {
    local check=${1:-}
    local py
    py=$(standin_python)
    if [[ -z $py ]]; then
        say "stand-in bases" "skipped (no .venv; run without --no-python)"
        return
    fi
    if [[ ! -f $REPO_ROOT/matrix.yaml ]] || ! (cd "$REPO_ROOT" && "$py" -c 'import xcforge.matrix' 2>/dev/null); then
        say "stand-in bases" "skipped (matrix.yaml or xcforge.matrix not there yet)"
        return
    fi
    local started=$SECONDS summary rc=0
    if [[ -n $check ]]; then
        summary=$(cd "$REPO_ROOT" && "$py" -m xcforge.standin --registry "$XCFORGE_REGISTRY" --matrix matrix.yaml --check 2>/dev/null) || rc=$?
        say "stand-in bases" "${summary##*$'\n'}"
        return
    fi
    printf '+ python -m xcforge.standin --registry %s --matrix matrix.yaml\n' "$XCFORGE_REGISTRY" >>"$PROVISION_LOG"
    summary=$(cd "$REPO_ROOT" && "$py" -m xcforge.standin --registry "$XCFORGE_REGISTRY" --matrix matrix.yaml 2>>"$PROVISION_LOG") || rc=$?
    if ((rc)); then
        printf 'provision: error: stand-in bases failed (exit %s); last lines of %s:\n' "$rc" "$PROVISION_LOG" >&2
        tail -n 30 "$PROVISION_LOG" | sed 's/^/  | /' >&2
        exit "$rc"
    fi
    say "stand-in bases" "${summary##*$'\n'} ($((SECONDS - started)) s)"
}

# ---------------------------------------------------------------- --status

show_status() {
    local missing
    missing=$(missing_packages)
    if [[ -z $missing ]]; then
        say "apt packages" "installed ($(dpkg-query -W -f='docker.io ${Version}' docker.io))"
    else
        say "apt packages" "missing: ${missing//$'\n'/ }"
    fi
    local entry=/proc/sys/fs/binfmt_misc/qemu-aarch64
    if [[ $(uname -m) == aarch64 ]]; then
        say "binfmt" "native aarch64"
    elif [[ -f $entry ]] && grep -qx enabled "$entry"; then
        say "binfmt" "qemu-aarch64 enabled (flags $(sed -n 's/^flags: //p' "$entry"))"
    elif mountpoint -q /proc/sys/fs/binfmt_misc; then
        say "binfmt" "qemu-aarch64 not enabled"
    else
        say "binfmt" "binfmt_misc not mounted"
    fi
    if containerd_up; then say "containerd" "running"; else say "containerd" "not running"; fi
    if docker_up; then
        say "docker engine" "running ($(docker_version), $(docker_store) image store)"
        local bx
        bx=$("$DOCKER" buildx version 2>/dev/null | awk '{print $2}') || true
        say "buildx" "${bx:-missing}"
    else
        say "docker engine" "not running"
    fi
    if registry_up; then
        say "registry" "running at $XCFORGE_REGISTRY ($(registry_owner))"
    else
        say "registry" "not running at $XCFORGE_REGISTRY"
    fi
    local stamp_file=$REPO_ROOT/.venv/.xcforge-provisioned
    if [[ ! -x $REPO_ROOT/.venv/bin/python ]]; then
        say "python" "no .venv"
    elif [[ -f $stamp_file && $(cat "$stamp_file") == "$(python_stamp)" ]]; then
        say "python" ".venv up to date"
    else
        say "python" ".venv out of date"
    fi
    if registry_up; then
        build_bases check
    else
        say "stand-in bases" "unknown (registry not running)"
    fi
}

# ---------------------------------------------------------------- main

if ((STATUS_ONLY)); then
    show_status
    exit 0
fi

[[ $EUID -eq 0 ]] || die "run as root (it installs packages and starts daemons)"
mkdir -p "$XCFORGE_LOG_DIR" "$XCFORGE_RUN_DIR" "$XCFORGE_STATE_DIR"
printf '\n=== provision %s\n' "$(date -Is)" >>"$PROVISION_LOG"
T0=$SECONDS

install_packages
setup_binfmt
start_engine
check_buildx
start_registry
if ((WANT_PYTHON)); then setup_python; fi
if ((WANT_BASES)); then build_bases; fi
printf 'provision: done in %s s\n' "$((SECONDS - T0))"
