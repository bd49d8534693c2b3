#!/usr/bin/env bash
# Pre-deploy gate: refuse manifests whose images are not pinned by digest or whose SM2 (and,
# when a key is given, cosign) signatures do not verify. No admission controller speaks SM2, so
# this runs in the deploy pipeline before `kubectl apply`; the cosign signature can additionally be
# enforced in the cluster (kyverno-verify-cosign.yaml, policy-controller-cosign.yaml).
#
# Usage: deploy/policy/verify-before-deploy.sh --sm2-key sm2.pub [--cosign-key cosign.pub]
#            [--insecure] [--apply] MANIFEST.yaml...
#   --apply   run `kubectl apply -f` on the manifests once every image verified
# Exit: 0 all verified (and applied), 1 a signature is missing or invalid, 2 usage or a tag.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${XCFORGE_BUILD:-$REPO_ROOT/build.py}
PYTHON=${PYTHON:-python3}

usage() { sed -n '7,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { printf 'verify-before-deploy: error: %s\n' "$*" >&2; exit 2; }

sm2_keys=() cosign_keys=() extra=() manifests=() apply=0
while (($#)); do
    case $1 in
        --sm2-key) [[ $# -ge 2 ]] || die "--sm2-key needs a file"; sm2_keys+=(--sm2-key "$2"); shift ;;
        --cosign-key) [[ $# -ge 2 ]] || die "--cosign-key needs a file"; cosign_keys+=(--cosign-key "$2"); shift ;;
        --insecure) extra+=(--insecure) ;;
        --apply) apply=1 ;;
        -h | --help) usage; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) manifests+=("$1") ;;
    esac
    shift
done
((${#sm2_keys[@]})) || die "--sm2-key PUB is required: every xcforge image must carry a valid SM2 signature"
((${#manifests[@]})) || die "no manifests given (see --help)"

# Every `image:` value in the manifests (containers, initContainers, ephemeralContainers).
mapfile -t images < <(
    sed -n -E 's/^[[:space:]-]*image:[[:space:]]*["'\'']?([^"'\''[:space:]#]+).*/\1/p' "${manifests[@]}" | sort -u
)
((${#images[@]})) || die "no image: lines found in ${manifests[*]}"

failed=0
for image in "${images[@]}"; do
    if [[ ! $image =~ @sha256:[0-9a-f]{64}$ ]]; then
        printf 'REFUSED %s: not pinned by digest (use REGISTRY/REPO@sha256:...)\n' "$image" >&2
        exit 2
    fi
    printf '+ %s %s verify %s\n' "$PYTHON" "$BUILD" "$image" >&2
    if "$PYTHON" "$BUILD" verify "$image" "${sm2_keys[@]}" "${cosign_keys[@]}" "${extra[@]}"; then
        printf 'VERIFIED %s\n' "$image"
    else
        printf 'REFUSED %s: signature verification failed\n' "$image" >&2
        failed=1
    fi
done
((failed == 0)) || exit 1

if ((apply)); then
    printf '+ kubectl apply -f %s\n' "${manifests[*]}" >&2
    args=()
    for manifest in "${manifests[@]}"; do args+=(-f "$manifest"); done
    kubectl apply "${args[@]}"
fi
