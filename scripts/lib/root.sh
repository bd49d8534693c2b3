# Shared by the scripts a user runs first (quickstart.sh, test.sh, provision.sh; sourced, not run).
# They install packages, start daemons and talk to the Docker socket, so they run as root: as they are
# on a root machine (a fresh Debian, where sudo is often not installed), again under sudo otherwise.
# shellcheck shell=bash

# become_root SCRIPT [ARGS...]: return when already root; else exec SCRIPT ARGS under sudo, keeping the
# environment the scripts read (XCFORGE_*, proxies); a one-line error when there is no sudo.
become_root() {
    ((EUID == 0)) && return 0
    if command -v sudo >/dev/null 2>&1; then
        printf '+ sudo --preserve-env %s\n' "$*" >&2
        exec sudo --preserve-env "$@"
    fi
    printf '%s: error: this needs root and there is no sudo here; run it as root (su -c %q)\n' \
        "$(basename "$1")" "$*" >&2
    exit 1
}
