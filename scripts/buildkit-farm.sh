#!/usr/bin/env bash
# A multi-node buildx builder on this machine: two BuildKit daemons behind buildx's remote driver,
# one node per platform, so that buildx itself picks the node by platform (what a BuildKit farm
# with a Kunpeng node does). Node amd64 runs here; node arm64 runs in the second engine's network
# namespace (scripts/second-engine.sh start first) and is reached over TCP. As root.
#
#   scripts/buildkit-farm.sh start [NAME]   # daemons + buildx builder NAME (default xcforge-farm)
#   scripts/buildkit-farm.sh stop [NAME]
#   scripts/buildkit-farm.sh binary         # only build/find buildkitd; prints its path
#
# Each node is declared for one platform (`buildx create --platform`): buildx sends that platform
# there. Both daemons run on this x86 machine, so the arm64 node's worker still reports linux/amd64
# as its own platform and builds arm64 under QEMU; xcforge's report says so (emulated, node arm64).
#
# buildkitd is not packaged by Debian. It is built once from source into
# /var/lib/xcforge/buildkit/bin: BuildKit v0.13.2, the release of buildx 0.13's time (its Dockerfile
# frontend knows HEALTHCHECK --start-interval, which v0.11 does not), vendored, so the build
# downloads no modules; compiled with Debian's golang-1.24-go (bookworm-backports; its Go 1.19 is
# too old for v0.13's go.mod). The source is $XCFORGE_BUILDKIT_SRC (a checkout or a bare git
# repository) or a clone of https://github.com/moby/buildkit.
set -euo pipefail
action=${1:?start, stop or binary}
name=${2:-xcforge-farm}
node2=${XCFORGE_NODE2:-xcforge-node2}
node2_ip=10.231.0.2
port=12340
version=v0.13.2
bin=/var/lib/xcforge/buildkit/bin
state=/var/lib/xcforge/buildkit/$name
run=/run/$name

say() { echo "buildkit farm $name: $*"; }

buildkitd_binary() {
  if [ -x "$bin/buildkitd" ] && "$bin/buildkitd" --version 2>/dev/null | grep -q "$version"; then
    return 0
  fi
  local go=/usr/lib/go-1.24/bin/go
  [ -x "$go" ] || { say "installing golang-1.24-go (to build buildkitd)"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-1.24-go >/dev/null; }
  local src
  src=$(mktemp -d /var/tmp/buildkit-src.XXXXXX)
  trap 'rm -rf "$src"' RETURN
  if [ -n "${XCFORGE_BUILDKIT_SRC:-}" ] && git --git-dir="$XCFORGE_BUILDKIT_SRC" rev-parse -q --verify "$version^{commit}" >/dev/null 2>&1; then
    git --git-dir="$XCFORGE_BUILDKIT_SRC" archive "$version" | tar -x -C "$src"
  elif [ -n "${XCFORGE_BUILDKIT_SRC:-}" ] && [ -d "$XCFORGE_BUILDKIT_SRC/.git" ]; then
    git -C "$XCFORGE_BUILDKIT_SRC" archive "$version" | tar -x -C "$src"
  else
    git clone -q --depth 1 --branch "$version" https://github.com/moby/buildkit "$src"
  fi
  say "building buildkitd $version from source (a few minutes, once)"
  mkdir -p "$bin"
  local started=$SECONDS
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=vendor GOCACHE=/var/cache/xcforge-go GOPATH=/var/tmp/xcforge-gopath \
    "$go" build -trimpath -ldflags "-X github.com/moby/buildkit/version.Version=$version" -o "$bin/" ./cmd/buildkitd ./cmd/buildctl) &
  local build=$!
  while kill -0 "$build" 2>/dev/null; do
    sleep 15
    kill -0 "$build" 2>/dev/null && say "still compiling ($((SECONDS - started)) s)"
  done
  wait "$build"
  say "buildkitd built in $((SECONDS - started)) s"
}

stop() {
  docker buildx rm "$name" >/dev/null 2>&1 || true
  for pidfile in "$run"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$run"
}

if [ "$action" = binary ]; then
  buildkitd_binary
  echo "$bin/buildkitd"
  exit 0
fi
if [ "$action" = stop ]; then
  stop
  say "stopped"
  exit 0
fi

[ -e "/var/run/netns/$node2" ] || { say "needs the second engine's namespace: run scripts/second-engine.sh start $node2" >&2; exit 1; }
buildkitd_binary
stop
mkdir -p "$run" "$state"

# One daemon per node: its own state, one platform, the loopback registry over plain HTTP
# (127.0.0.1:5000 is the same registry inside the namespace: second-engine.sh forwards it).
start_node() {
  local node=$1 platform=$2 addr=$3 netns=$4
  cat >"$run/$node.toml" <<EOF
root = "$state/$node"
[grpc]
  address = ["$addr"]
[worker.oci]
  enabled = true
  platforms = ["$platform"]
  gc = true
  gckeepstorage = 8000
[worker.containerd]
  enabled = false
[registry."127.0.0.1:5000"]
  http = true
  insecure = true
EOF
  local launch=()
  [ -n "$netns" ] && launch=(nsenter --net="/var/run/netns/$netns")
  "${launch[@]}" "$bin/buildkitd" --config "$run/$node.toml" >"$run/$node.log" 2>&1 &
  echo $! >"$run/$node.pid"
  for i in $(seq 1 60); do
    if "${launch[@]}" "$bin/buildctl" --addr "$addr" debug workers >/dev/null 2>&1; then
      say "node $node ($platform) on $addr"
      return 0
    fi
    [ "$i" = 60 ] && { say "node $node did not start; see $run/$node.log" >&2; tail -5 "$run/$node.log" >&2; exit 1; }
    sleep 1
  done
}

start_node amd64 linux/amd64 "tcp://127.0.0.1:$port" ""
start_node arm64 linux/arm64 "tcp://$node2_ip:$port" "$node2"

docker buildx create --name "$name" --driver remote --node amd64 --platform linux/amd64 "tcp://127.0.0.1:$port" >/dev/null
docker buildx create --append --name "$name" --node arm64 --platform linux/arm64 "tcp://$node2_ip:$port" >/dev/null
docker buildx inspect --bootstrap "$name" >/dev/null
say "ready; buildx builder '$name' (nodes amd64, arm64)"
