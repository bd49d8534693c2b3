# The Ubuntu 22.04 / 24.04 steps of scripts/provision.sh (sourced by it, not run; they use its say,
# die, logged and friends). Written for GitHub's hosted ubuntu-24.04 and ubuntu-24.04-arm runners:
# systemd, Docker CE with the buildx plugin preinstalled, full internet.
# NOT RUN ON REAL UBUNTU WHERE IT WAS WRITTEN (Debian machines that cannot pull images); only
# `provision.sh --plan` with fake os-release files is tested there. See docs/provisioning.md.
# shellcheck shell=bash

# Everything from Ubuntu's own archive (main + universe); no Debian archive is added to apt.
# gpg: mmdebstrap checks signed-by with it, and the keyring check below reads the keyring with it.
UBUNTU_PACKAGES=(
    ca-certificates curl gpg jq iptables
    qemu-user-static binfmt-support
    docker-registry mmdebstrap debian-archive-keyring skopeo
)
# Installed when this release's apt sources offer them, else skipped with a note.
UBUNTU_OPTIONAL_PACKAGES=(arch-test cosign)
# Only when the machine has no usable Docker (server >= UBUNTU_MIN_DOCKER with buildx).
UBUNTU_DOCKER_PACKAGES=(docker.io docker-buildx)
UBUNTU_MIN_DOCKER=24
DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
POLICY_RC_D=/usr/sbin/policy-rc.d

# Ubuntu 22.04's python3 is 3.10 and the project needs >= 3.11: use its python3.11 (universe).
ubuntu_python() {
    case $OS_VERSION_ID in
        22.04) echo python3.11 ;;
        *) echo python3 ;;
    esac
}

ubuntu_python_packages() {
    case $OS_VERSION_ID in
        22.04) echo python3.11 python3.11-venv ;;
        *) echo python3 python3-venv ;;
    esac
}

pkg_installed() { [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) == ii* ]]; }

# The version apt would install, or nothing when no apt source offers the package.
apt_candidate() {
    apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2; exit }'
}

ubuntu_missing_packages() {
    local pkg py_pkgs
    read -ra py_pkgs <<<"$(ubuntu_python_packages)"
    for pkg in "${UBUNTU_PACKAGES[@]}" "${py_pkgs[@]}"; do
        pkg_installed "$pkg" || printf '%s\n' "$pkg"
    done
}

APT_UPDATED=0
ubuntu_apt_update() {
    ((APT_UPDATED)) && return
    export DEBIAN_FRONTEND=noninteractive
    logged "apt-get update" apt-get update -q
    APT_UPDATED=1
}

# apt-get install with the daemons' start-up blocked (policy-rc.d), as on Debian: the packages'
# own docker-registry (on :5000, with the distribution's config) must not start.
ubuntu_apt_install() { # what packages...
    local what=$1 pkg unavailable=()
    shift
    for pkg in "$@"; do
        [[ -n $(apt_candidate "$pkg") ]] || unavailable+=("$pkg")
    done
    if ((${#unavailable[@]})); then
        die "no apt source of this machine offers ${unavailable[*]}: these come from Ubuntu's universe component; enable it (add-apt-repository universe) and run again"
    fi
    local policy_created=0
    if [[ ! -e $POLICY_RC_D ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$POLICY_RC_D"
        chmod +x "$POLICY_RC_D"
        policy_created=1
        trap 'rm -f "$POLICY_RC_D"' EXIT
    fi
    local apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    logged "$what" apt-get install "${apt_opts[@]}" "$@"
    if ((policy_created)); then
        rm -f "$POLICY_RC_D"
        trap - EXIT
    fi
}

ubuntu_install_packages() {
    local missing pkg optional=() skipped=() started=$SECONDS
    missing=$(ubuntu_missing_packages)
    for pkg in "${UBUNTU_OPTIONAL_PACKAGES[@]}"; do
        pkg_installed "$pkg" || optional+=("$pkg")
    done
    if [[ -n $missing ]] || ((${#optional[@]})); then
        # Without anything required missing, an optional package no apt list offers is not worth an
        # `apt-get update` on every run.
        if [[ -n $missing ]] || [[ -n $(for pkg in "${optional[@]}"; do apt_candidate "$pkg"; done) ]]; then
            ubuntu_apt_update
        fi
        local install=()
        [[ -z $missing ]] || mapfile -t install <<<"$missing"
        for pkg in "${optional[@]}"; do
            if [[ -n $(apt_candidate "$pkg") ]]; then install+=("$pkg"); else skipped+=("$pkg"); fi
        done
        if ((${#install[@]})); then
            ubuntu_apt_install "apt-get install" "${install[@]}"
            missing=$(ubuntu_missing_packages)
            [[ -z $missing ]] || die "still missing after apt-get install: ${missing//$'\n'/ }"
            say "apt packages" "installed ${install[*]} in $((SECONDS - started)) s"
        else
            say "apt packages" "installed"
        fi
    else
        say "apt packages" "installed"
    fi
    if pkg_installed cosign; then
        say "cosign" "$(dpkg-query -W -f='${Version}' cosign)"
    else
        say "cosign" "skipped: no apt source of this machine offers cosign (apt-cache policy cosign); the tests that run cosign (tests/signing) fail without it"
    fi
    for pkg in "${skipped[@]}"; do
        [[ $pkg == cosign ]] || say "$pkg" "skipped: no apt source of this machine offers it"
    done
}

# ---------------------------------------------------------------- docker (reuse or install)

# The engine's version: the running server's, else that of the installed dockerd binary.
docker_server_version() {
    if docker_up; then
        docker_version
    elif command -v dockerd >/dev/null; then
        dockerd --version 2>/dev/null | sed -n 's/^Docker version \([^, ]*\).*/\1/p'
    fi
}

version_at_least() { # version major
    local major=${1%%.*}
    [[ $major =~ ^[0-9]+$ ]] && ((major >= $2))
}

# Why the installed Docker cannot be used as it is (nothing when it can).
docker_unusable() {
    local version
    if [[ ! -x $DOCKER ]]; then
        echo "no $DOCKER"
        return
    fi
    version=$(docker_server_version)
    if ! version_at_least "$version" "$UBUNTU_MIN_DOCKER"; then
        echo "engine ${version:-unknown} < $UBUNTU_MIN_DOCKER"
    elif ! "$DOCKER" buildx version >/dev/null 2>&1; then
        echo "no buildx plugin"
    fi
}

ubuntu_docker() {
    if [[ -x $DOCKER ]] && ! docker_up && systemd_running; then
        systemctl start docker >>"$PROVISION_LOG" 2>&1 || true
    fi
    local reason started=$SECONDS
    reason=$(docker_unusable)
    if [[ -z $reason ]]; then
        say "docker" "reusing the installed Docker $(docker_server_version) ($("$DOCKER" buildx version 2>/dev/null | awk '{print "buildx " $2}'))"
        return
    fi
    ubuntu_apt_update
    ubuntu_apt_install "apt-get install docker.io docker-buildx" "${UBUNTU_DOCKER_PACKAGES[@]}"
    if systemd_running; then
        logged "systemctl restart docker" systemctl restart docker
    fi
    local still
    still=$(docker_unusable)
    [[ -z $still ]] || die "Docker from Ubuntu is not usable either ($still); see $PROVISION_LOG"
    say "docker" "installed ${UBUNTU_DOCKER_PACKAGES[*]} ($reason before) in $((SECONDS - started)) s"
}

# ---------------------------------------------------------------- engine with the containerd store

buildx_offers() { # platform
    "$DOCKER" buildx inspect default 2>/dev/null | sed -n 's/^Platforms: *//p' | head -n 1 | grep -q "$1"
}

ubuntu_engine() {
    if ! systemd_running; then
        start_engine # the Debian path: containerd + dockerd in the background
        return
    fi
    local changed reason='' started=$SECONDS
    changed=$(merge_daemon_json)
    if [[ -n $changed ]]; then
        reason="$DAEMON_JSON changed"
    elif ! docker_up; then
        reason="not running"
    elif [[ $(docker_store) != containerd ]]; then
        reason="classic image store"
    elif ! buildx_offers "linux/$FOREIGN_ARCH"; then
        # BuildKit lists the emulators it found when dockerd started (binfmt came later).
        reason="default builder lacks linux/$FOREIGN_ARCH"
    fi
    if [[ -z $reason ]]; then
        say "docker engine" "running ($(docker_version), containerd image store, systemd)"
        return
    fi
    logged "systemctl restart docker" systemctl restart docker
    wait_for 60 docker_up || die "docker did not answer within 60 s of systemctl restart docker; see journalctl -u docker"
    [[ $(docker_store) == containerd ]] ||
        die "docker info shows no containerd snapshotter after systemctl restart docker; check $DAEMON_JSON"
    say "docker engine" "restarted by systemctl ($reason) in $((SECONDS - started)) s ($(docker_version), containerd image store)"
}

# ---------------------------------------------------------------- stand-in prerequisites

# The stand-in rootfs is Debian bookworm: on Ubuntu its mirror comes from XCFORGE_DEBIAN_MIRROR
# (CI's workflow sets it); the archive's host name is written in no file of this repository.
ubuntu_check_mirror() {
    local mirror=${XCFORGE_DEBIAN_MIRROR:-}
    if [[ -z $mirror ]]; then
        die "XCFORGE_DEBIAN_MIRROR is not set: on $OS_PRETTY the stand-in bases (a Debian bookworm rootfs made by mmdebstrap) need a Debian archive URL, e.g. XCFORGE_DEBIAN_MIRROR=http://<debian mirror>/debian (with sudo: sudo env XCFORGE_DEBIAN_MIRROR=... scripts/provision.sh); or pass --no-bases"
    fi
    [[ $mirror =~ ^https?://[^[:space:]]+$ ]] ||
        die "XCFORGE_DEBIAN_MIRROR=$mirror is not an http:// or https:// URL of a Debian archive"
}

# mmdebstrap verifies bookworm's Release file with Ubuntu's debian-archive-keyring. It is signed by
# the archive keys of Debian 12 and later (and Debian 12's release key): a keyring that stops at
# Debian 11's keys (Ubuntu 22.04 shipped 2021.1.1) cannot verify it.
ubuntu_check_keyring() {
    [[ -f $DEBIAN_KEYRING ]] || die "$DEBIAN_KEYRING is missing (package debian-archive-keyring)"
    local home uids version
    version=$(dpkg-query -W -f='${Version}' debian-archive-keyring 2>/dev/null || echo unknown)
    home=$(mktemp -d)
    uids=$(gpg --homedir "$home" --batch --show-keys --with-colons "$DEBIAN_KEYRING" 2>/dev/null |
        awk -F: '$1 == "uid" { print $10 }') || true
    rm -rf "$home"
    if ! grep -qE 'Debian (Archive Automatic Signing Key \((1[2-9]|[2-9][0-9])/|Stable Release Key \(12/)' <<<"$uids"; then
        die "debian-archive-keyring $version has no Debian 12 (or later) archive key, so mmdebstrap cannot verify bookworm: install a newer debian-archive-keyring (Ubuntu 24.04 has one), or pass --no-bases"
    fi
    say "debian keyring" "debian-archive-keyring $version (has Debian 12+ archive keys)"
}

# ---------------------------------------------------------------- the Ubuntu run and its plan

provision_ubuntu() {
    ubuntu_install_packages
    ubuntu_docker
    setup_binfmt_foreign
    ubuntu_engine
    check_buildx
    start_registry
    if ((WANT_PYTHON)); then setup_python; fi
    if ((WANT_BASES)); then
        ubuntu_check_keyring
        build_bases
    fi
}

plan_ubuntu() {
    local py py_pkgs engine
    py=$(ubuntu_python)
    py_pkgs=$(ubuntu_python_packages)
    if ((PLAN_SYSTEMD)); then
        engine="merge {\"features\": {\"containerd-snapshotter\": true}} into $DAEMON_JSON; systemctl restart docker when it changed or the store is not containerd; docker info must show the containerd snapshotter"
    else
        engine="merge {\"features\": {\"containerd-snapshotter\": true}} into $DAEMON_JSON; start containerd + dockerd in the background (no systemd); docker info must show the containerd snapshotter"
    fi
    say "apt packages" "apt-get install ${UBUNTU_PACKAGES[*]} $py_pkgs (Ubuntu main + universe; nothing from Debian's archive)"
    say "apt optional" "${UBUNTU_OPTIONAL_PACKAGES[*]}: installed when apt-cache policy offers them, else skipped with a note"
    say "docker" "reuse the installed Docker if its server is >= $UBUNTU_MIN_DOCKER and docker buildx works; else apt-get install ${UBUNTU_DOCKER_PACKAGES[*]}"
    plan_binfmt
    say "docker engine" "$engine"
    say "buildx" "the default builder must offer linux/amd64 + linux/arm64"
    plan_registry
    if ((WANT_PYTHON)); then
        say "python" "$py -m venv .venv; pip install -e .[dev]"
    fi
    if ((WANT_BASES)); then
        say "debian keyring" "$DEBIAN_KEYRING must hold Debian 12+ archive keys"
        say "stand-in bases" "python -m xcforge.provision.standin: mmdebstrap bookworm from XCFORGE_DEBIAN_MIRROR=$XCFORGE_DEBIAN_MIRROR"
    fi
}
