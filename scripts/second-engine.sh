#!/usr/bin/env bash
# A second Docker engine on this machine, in its own network namespace, reached over TCP through a
# docker context: a stand-in for a remote build node (a Kunpeng server, a BuildKit farm), so that
# named builders are tested against a real, separate engine. As root.
#
#   scripts/second-engine.sh start [NAME]   # engine + docker context NAME (default xcforge-node2)
#   scripts/second-engine.sh stop [NAME]
#
# The namespace reaches the outside through NAT (apt, PyPI) and this machine's registry
# (127.0.0.1:5000 inside the namespace is forwarded to the one outside).
set -euo pipefail
action=${1:?start or stop}
name=${2:-xcforge-node2}
ns=$name
host_ip=10.231.0.1
node_ip=10.231.0.2
root=/var/lib/$name
run=/run/$name
python=${PYTHON:-python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

stop() {
  for pidfile in "$run"/*.pid; do
    [ -e "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 1
  docker context rm -f "$name" >/dev/null 2>&1 || true
  iptables -t nat -D POSTROUTING -s 10.231.0.0/24 ! -o "v-$name" -j MASQUERADE 2>/dev/null || true
  iptables -D FORWARD -s 10.231.0.0/24 -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -d 10.231.0.0/24 -j ACCEPT 2>/dev/null || true
  ip link del "v-$name" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$run"
}

if [ "$action" = stop ]; then
  stop
  echo "second engine $name: stopped"
  exit 0
fi

stop
mkdir -p "$root" "$run" "/etc/netns/$ns"
echo "second engine $name: network namespace $ns ($node_ip), NAT through $host_ip"
ip netns add "$ns"
ip link add "v-$name" type veth peer name eth0 netns "$ns"
ip addr add "$host_ip/24" dev "v-$name"
ip link set "v-$name" up
ip netns exec "$ns" ip addr add "$node_ip/24" dev eth0
ip netns exec "$ns" ip link set eth0 up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip route add default via "$host_ip"
cp /etc/resolv.conf "/etc/netns/$ns/resolv.conf"
sysctl -qw net.ipv4.ip_forward=1
iptables -t nat -A POSTROUTING -s 10.231.0.0/24 ! -o "v-$name" -j MASQUERADE
iptables -I FORWARD -s 10.231.0.0/24 -j ACCEPT
iptables -I FORWARD -d 10.231.0.0/24 -j ACCEPT

# The local registry, as 127.0.0.1:5000 inside the namespace too (image refs stay the same).
"$python" "$here/tcp-forward.py" "$host_ip:5000" 127.0.0.1:5000 >"$run/forward-host.log" 2>&1 &
echo $! >"$run/forward-host.pid"
nsenter --net="/var/run/netns/$ns" "$python" "$here/tcp-forward.py" 127.0.0.1:5000 "$host_ip:5000" >"$run/forward-node.log" 2>&1 &
echo $! >"$run/forward-node.pid"

# nsenter, not `ip netns exec`: that one remounts /sys, and dockerd needs the cgroup mounts.
# Its own data root, exec root and containerd namespace (the machine's containerd is shared; the
# namespaces keep the two engines' images and containers apart); its own bridge and iptables rules
# live in its network namespace. Plain TCP, reachable from this machine only.
cat >"$run/daemon.json" <<EOF
{"features": {"containerd-snapshotter": true}, "bip": "172.31.0.1/24", "ip6tables": false}
EOF
echo "second engine $name: dockerd on tcp://$node_ip:2375 (data root $root)"
nsenter --net="/var/run/netns/$ns" dockerd --config-file "$run/daemon.json" --data-root "$root" --exec-root "$run/exec" \
  --pidfile "$run/dockerd.pid" --containerd /run/containerd/containerd.sock \
  --containerd-namespace "$name" --containerd-plugins-namespace "$name-plugins" \
  -H "unix://$run/docker.sock" -H "tcp://$node_ip:2375" --tls=false >"$run/dockerd.log" 2>&1 &
for i in $(seq 1 60); do
  if docker -H "tcp://$node_ip:2375" version >/dev/null 2>&1; then break; fi
  [ "$i" = 60 ] && { echo "second engine $name: dockerd did not start; see $run/dockerd.log" >&2; tail -5 "$run/dockerd.log" >&2; exit 1; }
  sleep 1
done
docker context create "$name" --description "xcforge second engine (netns $ns)" \
  --docker "host=tcp://$node_ip:2375" >/dev/null
echo "second engine $name: ready; docker context and buildx builder '$name'"
