#!/usr/bin/env bash
# Provision a Debian 12 machine (developer box, this project's CI) or an Ubuntu 22.04/24.04 one
# (GitHub's hosted runners) for xcforge: apt packages (on Debian: Docker 26 + buildx + cosign from
# trixie), QEMU binfmt for the other architecture, dockerd with the containerd image store, a
# loopback OCI registry, the project's .venv, and the stand-in base images.
# Idempotent and quiet; a second run only checks and takes a few seconds. See docs/provisioning.md.
#
# Usage: scripts/provision.sh [--no-python] [--no-bases] [--targets T1,T2] [--status | --plan]
#        --targets: stand-in bases for these matrix targets only (the quick start: its own target);
#        default every target's. Not root? It runs itself again under sudo.
# Env:   XCFORGE_REGISTRY_PORT (default 5000); XCFORGE_DEBIAN_MIRROR (Ubuntu: Debian archive URL
#        for the stand-in bases); XCFORGE_OS_RELEASE (default /etc/os-release);
#        XCFORGE_HEARTBEAT_S (seconds between the progress lines of a running step, default 15);
#        --plan only: XCFORGE_PLAN_ARCH (amd64|arm64), XCFORGE_PLAN_SYSTEMD (1|0)
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/services.sh
source "$REPO_ROOT/scripts/lib/services.sh"
# shellcheck source=scripts/lib/os.sh
source "$REPO_ROOT/scripts/lib/os.sh"
# shellcheck source=scripts/lib/ubuntu.sh
source "$REPO_ROOT/scripts/lib/ubuntu.sh"
# shellcheck source=scripts/lib/root.sh
source "$REPO_ROOT/scripts/lib/root.sh"
ARGS=("$@")

TRIXIE_PACKAGES=(docker.io docker-cli docker-buildx cosign)
# runc, tini: trixie's builds need libc6 >= 2.38 and would drag trixie's libc (and base-files)
# in; bookworm's satisfy docker.io 26's dependencies. arch-test: mmdebstrap uses it to check that
# a foreign architecture can run (binfmt). iptables: dockerd's bridge network.
# skopeo, jq: independent registry inspection in tests. python3-venv: the .venv (not in every Debian image).
BOOKWORM_PACKAGES=(
    ca-certificates curl jq iptables runc tini python3-venv
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
BASE_TARGETS=''
STATUS_ONLY=0
PLAN=0
# The interpreter of .venv (Ubuntu 22.04: python3.11) and where a missing buildx comes from.
PYTHON=python3
BUILDX_HINT="package docker-buildx from trixie"

usage() {
    sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while (($#)); do
    case $1 in
        --no-python) WANT_PYTHON=0 ;;
        --no-bases) WANT_BASES=0 ;;
        --targets)
            [[ $# -ge 2 && -n $2 && $2 != -* ]] || { echo "provision: error: --targets needs a comma-separated list of matrix targets (e.g. --targets cpu)" >&2; exit 2; }
            BASE_TARGETS=$2
            shift
            ;;
        --status) STATUS_ONLY=1 ;;
        --plan) PLAN=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "provision: error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

say() { printf '%-16s %s\n' "$1:" "$2"; }
die() { printf 'provision: error: %s\n' "$*" >&2; exit 1; }

# Seconds between the progress lines of a step that is still running (apt-get, pip, dockerd).
HEARTBEAT_S=${XCFORGE_HEARTBEAT_S:-15}
HEARTBEAT_PID=''

# While the caller works, print "<what>: still running after N s (log: <its last line>)" every
# HEARTBEAT_S seconds: plain lines, so a CI log stays readable. heartbeat_stop ends it.
heartbeat_start() { # what
    local what=$1 started=$SECONDS parent=$BASHPID
    (
        sleeper=''
        trap '[[ -n $sleeper ]] && kill "$sleeper" 2>/dev/null; exit 0' TERM
        while :; do
            sleep "$HEARTBEAT_S" >/dev/null 2>&1 &
            sleeper=$!
            wait "$sleeper" || true
            kill -0 "$parent" 2>/dev/null || exit 0 # the script died (Ctrl-C): no orphan lines
            last=$(tail -n 1 "$PROVISION_LOG" 2>/dev/null | tr -d '\r' | cut -c1-100) || last=''
            say "$what" "still running after $((SECONDS - started)) s${last:+ (log: $last)}"
        done
    ) &
    HEARTBEAT_PID=$!
}

heartbeat_stop() {
    [[ -n $HEARTBEAT_PID ]] || return 0
    kill "$HEARTBEAT_PID" 2>/dev/null || true
    wait "$HEARTBEAT_PID" 2>/dev/null || true
    HEARTBEAT_PID=''
}

# Run a command with its output going to the provision log, with a progress line every
# HEARTBEAT_S seconds while it runs; on failure show the log's tail.
logged() {
    local what=$1 rc=0
    shift
    printf '+ %s\n' "$*" >>"$PROVISION_LOG"
    heartbeat_start "$what"
    "$@" >>"$PROVISION_LOG" 2>&1 || rc=$?
    heartbeat_stop
    if ((rc)); then
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

# Enable one QEMU entry of binfmt_misc (qemu-aarch64, qemu-x86_64) and check its F flag.
enable_binfmt() { # name
    local name=$1 entry=/proc/sys/fs/binfmt_misc/$1
    if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
        logged "mount binfmt_misc" mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    fi
    if [[ ! -f $entry ]] || ! grep -qx enabled "$entry"; then
        if [[ ! -f /usr/share/binfmts/$name && -f /usr/lib/binfmt.d/$name.conf ]] &&
            ! update-binfmts --display "$name" >/dev/null 2>&1; then
            # A qemu-user-static with no binfmt-support format: register its systemd-binfmt line.
            if [[ -f $entry ]]; then
                logged "enable $name" sh -c "echo 1 > $entry"
            else
                logged "register $name" sh -c "grep -v '^[#;]' /usr/lib/binfmt.d/$name.conf > /proc/sys/fs/binfmt_misc/register"
            fi
        else
            if ! update-binfmts --display "$name" >/dev/null 2>&1; then
                logged "update-binfmts --import" update-binfmts --import "$name"
            fi
            logged "update-binfmts --enable" update-binfmts --enable "$name"
        fi
    fi
    grep -qx enabled "$entry" 2>/dev/null || die "$name is not enabled in binfmt_misc after update-binfmts"
    # F (fix binary): the kernel opens the interpreter now, so it works inside containers too.
    local flags
    flags=$(sed -n 's/^flags: //p' "$entry")
    [[ $flags == *F* ]] || die "$name binfmt entry lacks the F flag (flags: $flags); containers cannot use it"
    say "binfmt" "$name enabled (flags $flags)"
}

# Debian: arm64 under QEMU on an x86_64 machine.
setup_binfmt() {
    if [[ $(uname -m) == aarch64 ]]; then
        say "binfmt" "native aarch64, no emulation needed"
        return
    fi
    enable_binfmt qemu-aarch64
}

# Ubuntu: the other architecture of the amd64/arm64 pair (qemu-x86_64 on an arm64 runner).
setup_binfmt_foreign() {
    enable_binfmt "$(qemu_binfmt "$FOREIGN_ARCH")"
}

# ---------------------------------------------------------------- docker engine

# Merge {"features": {"containerd-snapshotter": true}} (and, unless set, a BuildKit cache bound) into
# daemon.json, keeping other keys.
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
changed = features.get("containerd-snapshotter") is not True
features["containerd-snapshotter"] = True
# BuildKit's cache is bounded (least recently used first), so repeated test runs on one machine do
# not fill its disk; an operator's own builder settings are kept.
if "builder" not in data:
    data["builder"] = {"gc": {"enabled": True, "defaultKeepStorage": "40GB"}}
    changed = True
if changed:
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
    heartbeat_start "docker engine"
    wait_for 60 docker_up || { heartbeat_stop; die "dockerd did not answer within 60 s; see $XCFORGE_LOG_DIR/dockerd.log"; }
    heartbeat_stop
    [[ $(docker_store) == containerd ]] || die "dockerd started without the containerd image store; check $DAEMON_JSON"
    say "docker engine" "started ($(docker_version), containerd image store) in $((SECONDS - started)) s"
}

check_buildx() {
    local version platforms
    version=$("$DOCKER" buildx version 2>/dev/null) || die "docker buildx is missing ($BUILDX_HINT)"
    platforms=$("$DOCKER" buildx inspect default 2>/dev/null | sed -n 's/^Platforms: *//p' | head -n 1)
    local want
    for want in linux/amd64 linux/arm64; do
        [[ $platforms == *"$want"* ]] || die "the default buildx builder does not offer $want (platforms: $platforms); is binfmt set up?"
    done
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
    { "$PYTHON" --version; cat "${files[@]}"; } | sha256sum | cut -d' ' -f1
}

setup_python() {
    local venv=$REPO_ROOT/.venv stamp_file=$REPO_ROOT/.venv/.xcforge-provisioned stamp
    stamp=$(python_stamp)
    # The project needs Python >= 3.11 (pyproject.toml); a .venv of an older one is made again.
    local works='import sys; sys.exit(sys.version_info < (3, 11))'
    if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "$works" 2>/dev/null &&
        [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]]; then
        compile_sources "$venv/bin/python"
        say "python" ".venv up to date ($("$venv/bin/python" --version))"
        return
    fi
    local started=$SECONDS
    if ! { [[ -x $venv/bin/python ]] && "$venv/bin/python" -c "$works" 2>/dev/null; }; then
        logged "$PYTHON -m venv" "$PYTHON" -m venv --clear "$venv"
    fi
    local targets=(-e "${REPO_ROOT}[dev]")
    [[ -f $REPO_ROOT/images/engine/pyproject.toml ]] && targets+=(-e "$REPO_ROOT/images/engine")
    # uv installs the same set as pip, resolved the same way, in a few seconds instead of ~35 (parallel
    # downloads; docs/benchmarks.md §5); it is a dependency of the project anyway. pip installs uv, and
    # anything uv cannot do here (an index only pip's configuration reaches, say) falls back to pip.
    local how=uv settings=()
    logged "pip install uv" "$venv/bin/python" -m pip install -q uv
    mapfile -t settings < <(uv_settings "$venv/bin/python")
    printf '+ env %s uv pip install %s\n' "${settings[*]}" "${targets[*]}" >>"$PROVISION_LOG"
    # --compile-bytecode: the installed modules' .pyc are written now, once. Without them every
    # `build.py` start compiles ~360 modules again where PYTHONDONTWRITEBYTECODE is set (0.3 s of a
    # 0.65 s `build.py --help`, docs/benchmarks.md §7); pip compiles at install anyway.
    if ! env "${settings[@]}" "$venv/bin/uv" pip install --compile-bytecode --python "$venv/bin/python" "${targets[@]}" >>"$PROVISION_LOG" 2>&1; then
        how="pip (uv failed: see $PROVISION_LOG)"
        logged "pip install" "$venv/bin/python" -m pip install -q "${targets[@]}"
    fi
    compile_sources "$venv/bin/python"
    printf '%s\n' "$stamp" >"$stamp_file"
    say "python" ".venv installed in $((SECONDS - started)) s with $how ($("$venv/bin/python" --version))"
}

# This checkout's own packages are installed editable, so their .pyc are not written at install:
# compile those that changed since the last run (compileall skips the rest; a second or less).
compile_sources() { # python
    local dirs=() dir
    for dir in xcforge ocicore signing images/engine/src; do
        [[ -d $REPO_ROOT/$dir ]] && dirs+=("$REPO_ROOT/$dir")
    done
    ((${#dirs[@]})) && logged "compileall" "$1" -m compileall -q -j 0 "${dirs[@]}"
    return 0
}

# pip's settings (pip.conf and PIP_* variables, as `pip config list` shows them) as uv's variables, which
# uv reads instead: the index, extra indexes, find-links, trusted hosts, the CA bundle and constraints.
uv_settings() { # python
    "$1" - <<'PY'
import ast, subprocess, sys

listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
names = {"index-url": ("UV_INDEX_URL", " "), "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
         "find-links": ("UV_FIND_LINKS", ","), "trusted-host": ("UV_INSECURE_HOST", " "),
         "cert": ("SSL_CERT_FILE", " "), "constraint": ("UV_CONSTRAINT", " ")}
found = {}
for line in sorted(listed.splitlines(), key=lambda l: l.startswith(":env:")):  # the environment wins
    key, _, value = line.partition("=")
    option = key.rsplit(".", 1)[-1]
    if option in names and value:
        variable, separator = names[option]
        found[variable] = separator.join(ast.literal_eval(value).split())
if "UV_EXTRA_INDEX_URL" in found or "UV_FIND_LINKS" in found:
    # pip takes the best version any index offers; uv by default takes every version of a package from
    # the first index that has it (an older copy in a local extra index would win): resolve as pip does.
    found["UV_INDEX_STRATEGY"] = "unsafe-best-match"
for variable, value in found.items():
    print(f"{variable}={value}")
PY
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
    if [[ ! -f $REPO_ROOT/matrix.yaml ]] || ! (cd "$REPO_ROOT" && "$py" -c 'import xcforge.config.matrix' 2>/dev/null); then
        say "stand-in bases" "skipped (matrix.yaml or xcforge.config.matrix not there yet)"
        return
    fi
    local started=$SECONDS summary rc=0
    if [[ -n $check ]]; then
        summary=$(cd "$REPO_ROOT" && "$py" -m xcforge.provision.standin --registry "$XCFORGE_REGISTRY" --matrix matrix.yaml --check 2>/dev/null) || rc=$?
        say "stand-in bases" "${summary##*$'\n'}"
        return
    fi
    local only=() target targets=()
    IFS=, read -ra targets <<<"$BASE_TARGETS"
    for target in "${targets[@]}"; do only+=(--target "$target"); done
    printf '+ python -m xcforge.provision.standin --registry %s --matrix matrix.yaml %s\n' "$XCFORGE_REGISTRY" "${only[*]}" >>"$PROVISION_LOG"
    # Its progress lines (which image, rootfs or build, elapsed seconds) come here on fd 3; the
    # commands' own output goes to the log; the summary is its last stdout line.
    {
        summary=$(cd "$REPO_ROOT" && XCFORGE_PROGRESS_FD=3 "$py" -m xcforge.provision.standin --registry "$XCFORGE_REGISTRY" \
            --matrix matrix.yaml "${only[@]}" 2>>"$PROVISION_LOG") || rc=$?
    } 3>&1
    if ((rc)); then
        printf 'provision: error: stand-in bases failed (exit %s); last lines of %s:\n' "$rc" "$PROVISION_LOG" >&2
        tail -n 30 "$PROVISION_LOG" | sed 's/^/  | /' >&2
        exit "$rc"
    fi
    say "stand-in bases" "${summary##*$'\n'} ($((SECONDS - started)) s)"
    # Vendor bases cannot be pulled here: make the stand-in site this checkout's default, so a plain
    # `python build.py --target cpu` works (reports say "stand-in"); --site/$XCFORGE_SITE still win.
    (cd "$REPO_ROOT" && "$py" -m xcforge.config.site >/dev/null)
    say "site default" ".xcforge/site.yaml (stand-in mirrors; --site or \$XCFORGE_SITE override it)"
}

# ---------------------------------------------------------------- --status

status_binfmt() { # name
    local entry=/proc/sys/fs/binfmt_misc/$1
    if [[ -f $entry ]] && grep -qx enabled "$entry"; then
        say "binfmt" "$1 enabled (flags $(sed -n 's/^flags: //p' "$entry"))"
    elif mountpoint -q /proc/sys/fs/binfmt_misc; then
        say "binfmt" "$1 not enabled"
    else
        say "binfmt" "binfmt_misc not mounted"
    fi
}

show_status() {
    local missing
    if [[ $OS_FAMILY == ubuntu ]]; then
        missing=$(ubuntu_missing_packages)
        if [[ -z $missing ]]; then
            say "apt packages" "installed"
        else
            say "apt packages" "missing: ${missing//$'\n'/ }"
        fi
        status_binfmt "$(qemu_binfmt "$FOREIGN_ARCH")"
    else
        missing=$(missing_packages)
        if [[ -z $missing ]]; then
            say "apt packages" "installed ($(dpkg-query -W -f='docker.io ${Version}' docker.io))"
        else
            say "apt packages" "missing: ${missing//$'\n'/ }"
        fi
        if [[ $(uname -m) == aarch64 ]]; then
            say "binfmt" "native aarch64"
        else
            status_binfmt qemu-aarch64
        fi
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

# ---------------------------------------------------------------- --plan

plan_binfmt() {
    if [[ $OS_FAMILY == debian ]]; then
        if [[ $HOST_ARCH == arm64 ]]; then
            say "binfmt" "native aarch64, no emulation needed"
        else
            say "binfmt" "update-binfmts --enable qemu-aarch64 (qemu-user-static, binfmt-support); the entry must have the F flag"
        fi
        return
    fi
    say "binfmt" "update-binfmts --enable $(qemu_binfmt "$FOREIGN_ARCH") (qemu-user-static, binfmt-support); the entry must have the F flag"
}

plan_registry() {
    say "registry" "docker-registry serve $XCFORGE_STATE_DIR/registry-$XCFORGE_REGISTRY_PORT.yml (http.addr $XCFORGE_REGISTRY, storage $XCFORGE_STATE_DIR/registry)"
}

plan_debian() {
    say "apt packages" "from bookworm: ${BOOKWORM_PACKAGES[*]}"
    say "apt packages" "from trixie (pinned at 100, entry copied from this machine's bookworm entry): ${TRIXIE_PACKAGES[*]}"
    plan_binfmt
    say "docker engine" "merge {\"features\": {\"containerd-snapshotter\": true}} into $DAEMON_JSON; start containerd + dockerd in the background (no systemd)"
    say "buildx" "the default builder must offer linux/amd64 + linux/arm64"
    plan_registry
    if ((WANT_PYTHON)); then
        say "python" "python3 -m venv .venv; pip install -e .[dev]"
    fi
    if ((WANT_BASES)); then
        say "stand-in bases" "python -m xcforge.provision.standin: mmdebstrap bookworm from this machine's own Debian apt sources"
    fi
}

# What a run would do on a fresh machine of this kind; it looks at nothing else on the machine and
# changes nothing. Steps already done are skipped when it runs.
print_plan() {
    local what="$OS_PRETTY, $HOST_ARCH"
    if [[ $OS_FAMILY == ubuntu ]]; then
        if ((PLAN_SYSTEMD)); then what+=", systemd"; else what+=", no systemd"; fi
        if ((WANT_BASES)); then ubuntu_check_mirror; fi
    fi
    printf 'provision plan for %s (changes nothing; a step already done is skipped when it runs)\n' "$what"
    if [[ $OS_FAMILY == ubuntu ]]; then plan_ubuntu; else plan_debian; fi
}

# ---------------------------------------------------------------- main

provision_debian() {
    install_packages
    setup_binfmt
    start_engine
    check_buildx
    start_registry
    if ((WANT_PYTHON)); then setup_python; fi
    if ((WANT_BASES)); then build_bases; fi
}

main() {
    detect_os || die "$OS_ERROR"
    if ((PLAN)); then
        HOST_ARCH=$(host_arch "${XCFORGE_PLAN_ARCH:-}")
        case ${XCFORGE_PLAN_SYSTEMD:-} in
            1) PLAN_SYSTEMD=1 ;;
            0) PLAN_SYSTEMD=0 ;;
            '') if systemd_running; then PLAN_SYSTEMD=1; else PLAN_SYSTEMD=0; fi ;;
            *) die "XCFORGE_PLAN_SYSTEMD must be 1 or 0, not '$XCFORGE_PLAN_SYSTEMD'" ;;
        esac
    else
        HOST_ARCH=$(host_arch)
    fi
    FOREIGN_ARCH=$(foreign_arch "$HOST_ARCH") || FOREIGN_ARCH=''
    if [[ $OS_FAMILY == ubuntu ]]; then
        [[ -n $FOREIGN_ARCH ]] || die "unsupported architecture $HOST_ARCH on $OS_PRETTY; provision.sh supports amd64 and arm64 hosts"
        PYTHON=$(ubuntu_python)
        BUILDX_HINT="the preinstalled docker-buildx-plugin, or Ubuntu's docker-buildx"
    fi

    if ((PLAN)); then
        print_plan
        exit 0
    fi

    if ((STATUS_ONLY)); then
        show_status
        exit 0
    fi

    become_root "${BASH_SOURCE[0]}" "${ARGS[@]}" # it installs packages and starts daemons
    if [[ $OS_FAMILY == ubuntu ]] && ((WANT_BASES)); then ubuntu_check_mirror; fi
    mkdir -p "$XCFORGE_LOG_DIR" "$XCFORGE_RUN_DIR" "$XCFORGE_STATE_DIR"
    printf '\n=== provision %s\n' "$(date -Is)" >>"$PROVISION_LOG"
    T0=$SECONDS

    if [[ $OS_FAMILY == ubuntu ]]; then
        say "os" "$OS_PRETTY ($HOST_ARCH, $(systemd_running && echo systemd || echo 'no systemd'))"
        provision_ubuntu
    else
        provision_debian
    fi
    printf 'provision: done in %s s\n' "$((SECONDS - T0))"
}

# Sourced (tests/provision): only define the functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main
fi
