# Which OS and architecture scripts/provision.sh is on (sourced, not run).
# The os-release file is read from $XCFORGE_OS_RELEASE when set (tests point it at fake ones),
# else /etc/os-release. It is parsed, never sourced.
# shellcheck shell=bash
# shellcheck disable=SC2034  # OS_FAMILY, OS_ERROR, ... are read by provision.sh

# Sets OS_ID, OS_VERSION_ID, OS_PRETTY and OS_FAMILY (debian | ubuntu). Returns 1 with OS_ERROR set
# when the OS is not one provision.sh supports.
#   debian: any ID=debian; the machine's bookworm apt entry then decides, as it always has (a Debian 12
#           whose base-files went to trixie says VERSION_ID=13 and still works).
#   ubuntu: ID=ubuntu with VERSION_ID 22.04 or 24.04.
detect_os() {
    OS_ID='' OS_VERSION_ID='' OS_PRETTY='' OS_FAMILY='' OS_ERROR=''
    local file=${XCFORGE_OS_RELEASE:-/etc/os-release} key value
    if [[ ! -r $file ]]; then
        OS_ERROR="cannot read $file; provision.sh supports Debian 12 and Ubuntu 22.04/24.04"
        return 1
    fi
    while IFS='=' read -r key value || [[ -n $key ]]; do
        value=${value%\"} value=${value#\"} value=${value%\'} value=${value#\'}
        case $key in
            ID) OS_ID=$value ;;
            VERSION_ID) OS_VERSION_ID=$value ;;
            PRETTY_NAME) OS_PRETTY=$value ;;
        esac
    done <"$file"
    OS_PRETTY=${OS_PRETTY:-${OS_ID:-unknown} ${OS_VERSION_ID}}
    case $OS_ID in
        debian) OS_FAMILY=debian ;;
        ubuntu)
            case $OS_VERSION_ID in
                22.04 | 24.04) OS_FAMILY=ubuntu ;;
                *)
                    OS_ERROR="unsupported OS: $OS_PRETTY (ubuntu $OS_VERSION_ID); provision.sh supports Debian 12 and Ubuntu 22.04/24.04"
                    return 1
                    ;;
            esac
            ;;
        *)
            OS_ERROR="unsupported OS: $OS_PRETTY (ID=${OS_ID:-none} in $file); provision.sh supports Debian 12 and Ubuntu 22.04/24.04"
            return 1
            ;;
    esac
}

# Debian/Docker name of an architecture: x86_64 -> amd64, aarch64 -> arm64 (default: this machine's).
host_arch() {
    local machine=${1:-$(uname -m)}
    case $machine in
        x86_64 | amd64) echo amd64 ;;
        aarch64 | arm64) echo arm64 ;;
        *) echo "$machine" ;;
    esac
}

# The other architecture of the pair every image is built for (amd64 <-> arm64): it runs under QEMU.
foreign_arch() {
    case $1 in
        amd64) echo arm64 ;;
        arm64) echo amd64 ;;
        *) return 1 ;;
    esac
}

# The binfmt_misc entry (and update-binfmts format) that runs an architecture's binaries.
qemu_binfmt() {
    case $1 in
        arm64) echo qemu-aarch64 ;;
        amd64) echo qemu-x86_64 ;;
        *) return 1 ;;
    esac
}

# systemd is PID 1 (sd_booted(3)'s test).
systemd_running() { [[ -d /run/systemd/system ]]; }
