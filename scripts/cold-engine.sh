#!/usr/bin/env bash
# A throwaway Docker engine that shares no image state with this machine's, for timing a cold
# `docker pull` (bench/bench_zstd.py --cold-engine). As root.
#
#   scripts/cold-engine.sh start   # progress on stderr; on success one JSON line on stdout
#   scripts/cold-engine.sh stop    # removes everything start made; safe to run again
#
# Isolated from the machine's engine wherever a pull could skip work or leave traces:
# - its own containerd: dockerd runs without --containerd and so starts (and stops) a managed one,
#   root under $root, state and socket under $run/exec/containerd. dockerd would use the machine's
#   /run/containerd/containerd.sock whenever that exists, so it runs in a private mount namespace
#   with an empty tmpfs over /run/containerd (runc and shim state land there too);
# - the classic overlay2 graph driver (no containerd-snapshotter feature) in its own data root: no
#   snapshots, content store or BuildKit cache in common with the machine's engine;
# - its own network namespace, as scripts/second-engine.sh does (other names and subnet, so both
#   can run): its bridge (bip 172.30.0.1/24) and iptables rules are made and deleted in there,
#   never this machine's docker0. Reached through its unix socket; 127.0.0.1:5000 inside is
#   forwarded to this machine's registry (tcp-forward.py), NAT for the rest.
set -euo pipefail
action=${1:?start or stop}
name=xcforge-cold
ns=$name
veth=v-$name
subnet=10.232.0.0/24
host_ip=10.232.0.1
node_ip=10.232.0.2
bip=172.30.0.1/24
root=/var/lib/$name
run=/run/$name
docker=/usr/bin/docker
python=${PYTHON:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

say() { echo "cold engine: $*" >&2; }
x() {  # echo an external command, then run it
  echo "+ $*" >&2
  "$@"
}

# Pid in $1 if that process is still alive and its command line contains $2 (a recycled pid is not).
owned_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2" || return 1
  echo "$pid"
}

wait_gone() {  # wait_gone SECONDS PID...: true once none of them is alive
  local i pid alive
  for ((i = 0; i < $1 * 5; i++)); do
    alive=0
    for pid in "${@:2}"; do [[ -d /proc/$pid ]] && alive=1; done
    ((alive)) || return 0
    sleep 0.2
  done
  return 1
}

iptables_del() {  # delete a rule if it is there
  if iptables -C "$@" 2>/dev/null; then x iptables -D "$@"; fi
}

stop() {
  local pid pids
  # dockerd first: it stops its containers and its containerd, and deletes its bridge in the namespace.
  if pid=$(owned_pid "$run/dockerd.pid" "--exec-root $run/exec"); then
    x kill -TERM "$pid"
    wait_gone 60 "$pid" || { say "dockerd $pid did not stop in 60 s; killing it"; x kill -KILL "$pid" || true; }
  fi
  # Anything still in the namespace was started by this script or that dockerd (the forwarder, a
  # containerd or shim that outlived it): TERM, then KILL.
  if [[ -e /var/run/netns/$ns ]]; then
    mapfile -t pids < <(ip netns pids "$ns")
    if ((${#pids[@]})); then
      x kill -TERM "${pids[@]}" || true
      wait_gone 10 "${pids[@]}" || x kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
  fi
  if pid=$(owned_pid "$run/forward-host.pid" "tcp-forward.py $host_ip:5000"); then
    x kill -TERM "$pid"
  fi
  iptables_del POSTROUTING -t nat -s "$subnet" ! -o "$veth" -j MASQUERADE
  iptables_del FORWARD -s "$subnet" -j ACCEPT
  iptables_del FORWARD -d "$subnet" -j ACCEPT
  if ip link show "$veth" >/dev/null 2>&1; then x ip link del "$veth"; fi
  if [[ -e /var/run/netns/$ns ]]; then x ip netns del "$ns"; fi
  # The overlay mounts lived in dockerd's private mount namespace, gone with its processes.
  if [[ -e $root || -e $run ]]; then x rm -rf "$root" "$run"; fi
}

if [[ $action == stop ]]; then
  stop
  say "stopped"
  exit 0
fi
[[ $action == start ]] || { echo "usage: $0 start|stop" >&2; exit 2; }

failed() {
  local status=$?
  trap - ERR
  say "start failed (exit $status); cleaning up"
  [[ -f $run/dockerd.log ]] && tail -5 "$run/dockerd.log" >&2
  stop
  exit "$status"
}
set -E
trap failed ERR
stop
mkdir -p "$root" "$run/empty"

say "network namespace $ns ($node_ip), veth $veth, NAT through $host_ip"
x ip netns add "$ns"
x ip link add "$veth" type veth peer name eth0 netns "$ns"
x ip addr add "$host_ip/24" dev "$veth"
x ip link set "$veth" up
x ip -n "$ns" addr add "$node_ip/24" dev eth0
x ip -n "$ns" link set eth0 up
x ip -n "$ns" link set lo up
x ip -n "$ns" route add default via "$host_ip"
x sysctl -qw net.ipv4.ip_forward=1
x iptables -t nat -A POSTROUTING -s "$subnet" ! -o "$veth" -j MASQUERADE
x iptables -I FORWARD -s "$subnet" -j ACCEPT
x iptables -I FORWARD -d "$subnet" -j ACCEPT

# Background processes run under setsid: a Ctrl-C meant for the caller (the bench) does not reach
# them, and the caller's own cleanup (this script's stop) ends them in order.
# The registry as 127.0.0.1:5000 inside the namespace too, so image references stay the same.
echo "+ setsid $python $here/tcp-forward.py $host_ip:5000 127.0.0.1:5000 &" >&2
setsid "$python" "$here/tcp-forward.py" "$host_ip:5000" 127.0.0.1:5000 >"$run/forward-host.log" 2>&1 &
echo $! >"$run/forward-host.pid"
echo "+ setsid nsenter --net=/var/run/netns/$ns $python $here/tcp-forward.py 127.0.0.1:5000 $host_ip:5000 &" >&2
setsid nsenter --net="/var/run/netns/$ns" "$python" "$here/tcp-forward.py" 127.0.0.1:5000 "$host_ip:5000" \
  >"$run/forward-node.log" 2>&1 &

# nsenter, not `ip netns exec` (that one remounts /sys; dockerd needs the cgroup mounts). No
# --containerd and the machine's socket hidden: dockerd starts its own containerd.
cat >"$run/daemon.json" <<EOF
{"storage-driver": "overlay2", "features": {"containerd-snapshotter": false}, "bip": "$bip", "ip6tables": false}
EOF
cmd=(setsid nsenter --net="/var/run/netns/$ns" unshare --mount --propagation private
  sh -c 'mount -t tmpfs -o mode=0711 xcforge-cold /run/containerd && exec "$@"' sh
  dockerd --config-file "$run/daemon.json" --data-root "$root" --exec-root "$run/exec"
  --pidfile "$run/dockerd.pid" -H "unix://$run/docker.sock")
echo "+ ${cmd[*]} &" >&2
"${cmd[@]}" >"$run/dockerd.log" 2>&1 &
for i in $(seq 1 60); do
  if "$docker" -H "unix://$run/docker.sock" version >/dev/null 2>&1; then break; fi
  if ((i == 60)); then say "dockerd did not answer in 60 s; see $run/dockerd.log"; false; fi
  sleep 1
done

# Checks, not hopes: its own containerd, overlay2, the bridge in the namespace, the registry reachable.
grep -q "starting managed containerd" "$run/dockerd.log" || { say "dockerd did not start its own containerd"; false; }
containerd_sock=$run/exec/containerd/containerd.sock
[[ -S $containerd_sock ]] || { say "no $containerd_sock"; false; }
containerd_pid=$(pgrep -f "^containerd --config $run/exec/containerd/" | head -1)
[[ -n $containerd_pid ]] || { say "no containerd process with its config under $run/exec"; false; }
driver=$("$docker" -H "unix://$run/docker.sock" info --format '{{.Driver}}')
[[ $driver == overlay2 ]] || { say "storage driver is $driver, not overlay2"; false; }
ip -n "$ns" link show docker0 >/dev/null || { say "its docker0 is not in namespace $ns"; false; }
nsenter --net="/var/run/netns/$ns" curl -fsS -m 10 -o /dev/null http://127.0.0.1:5000/v2/ ||
  { say "the registry is not reachable from namespace $ns"; false; }

say "ready: DOCKER_HOST=unix://$run/docker.sock (containerd $containerd_pid on $containerd_sock, data root $root)"
printf '{"netns": "%s", "veth": "%s", "host_ip": "%s", "node_ip": "%s", "bip": "%s", "docker_host": "%s", ' \
  "$ns" "$veth" "$host_ip" "$node_ip" "$bip" "unix://$run/docker.sock"
printf '"data_root": "%s", "exec_root": "%s", "storage_driver": "%s", "containerd": {"managed_by_dockerd": true, ' \
  "$root" "$run/exec" "$driver"
printf '"pid": %s, "address": "%s", "system_socket_hidden": "/run/containerd (tmpfs, private mount namespace)"}, ' \
  "$containerd_pid" "$containerd_sock"
printf '"registry": "127.0.0.1:5000 inside, forwarded by tcp-forward.py through %s:5000"}\n' "$host_ip"
