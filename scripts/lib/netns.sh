# Sourced by galera-cluster.sh and gr-cluster.sh: the nodes of a cluster on their
# own addresses, so that a network link between them can be cut.
#
# Node N runs in the network namespace ${NETNS_PREFIX}N with the address
# ${NETNS_SUBNET}.N on a veth whose other end is on the bridge ${NETNS_PREFIX}br;
# the host has ${NETNS_SUBNET}.254 on the bridge, which is how `ledger serve` and
# the tests on this machine reach the nodes. The namespaces have no default
# route, so nothing they send leaves this machine.
#
# Partitions are nftables rules inside the node's own namespace (a table of our
# own, `ledger_partition`, in that namespace only): the host's firewall is never
# touched, and deleting the namespace deletes the rules.
#
# Needs NETNS_PREFIX, NETNS_SUBNET, NETNS_NODES (array of node numbers), log, die.

NETNS_TABLE=ledger_partition

netns_name()   { echo "${NETNS_PREFIX}$1"; }
netns_addr()   { echo "${NETNS_SUBNET}.$1"; }
netns_host()   { echo "${NETNS_SUBNET}.254"; }
netns_bridge() { echo "${NETNS_PREFIX}br"; }
netns_veth()   { echo "${NETNS_PREFIX}v$1"; }
netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$(netns_name "$1")"; }

# nft is missing on a fresh machine (CI): install it, as the scripts do their
# other packages.
netns_ensure_tools() {
  command -v ip >/dev/null || die "ip (iproute2) missing"
  if ! command -v nft >/dev/null; then
    log "installing nftables with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null
  fi
  command -v nft >/dev/null || die "nft missing after installing nftables"
}

# The bridge and one namespace per node; idempotent.
netns_up() {
  netns_ensure_tools
  local br i ns; br=$(netns_bridge)
  if ! ip link show "$br" >/dev/null 2>&1; then
    ip link add "$br" type bridge
    ip addr add "$(netns_host)/24" dev "$br"
  fi
  ip link set "$br" up
  for i in "${NETNS_NODES[@]}"; do
    netns_exists "$i" && continue
    ns=$(netns_name "$i")
    ip netns add "$ns"
    ip link add "$(netns_veth "$i")" type veth peer name eth0 netns "$ns"
    ip link set "$(netns_veth "$i")" master "$br" up
    ip -n "$ns" addr add "$(netns_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  log "network: nodes at $(for i in "${NETNS_NODES[@]}"; do printf '%s ' "$(netns_addr "$i")"; done)on bridge $br (host $(netns_host))"
}

# Everything netns_up made; safe to call when none of it exists.
netns_down() {
  local i
  for i in "${NETNS_NODES[@]}"; do
    netns_exists "$i" && ip netns del "$(netns_name "$i")"
  done
  ip link show "$(netns_bridge)" >/dev/null 2>&1 && ip link del "$(netns_bridge)"
  return 0
}

netns_require() { netns_exists "$1" || die "node $1 is not on its own network (start with --netns)"; }

# netns_partition N both|oneway [service]
#   both:    node N neither hears from nor reaches the other nodes;
#   oneway:  what node N sends to the other nodes is lost; what they send arrives;
#   service: also cut node N off from this host (the service instances, the tests).
netns_partition() {
  local i=$1 how=$2 service=${3:-} j peers="" ns; ns=$(netns_name "$i")
  netns_require "$i"
  for j in "${NETNS_NODES[@]}"; do [ "$j" = "$i" ] || peers="${peers:+$peers, }$(netns_addr "$j")"; done
  [ -n "$service" ] && peers="$peers, $(netns_host)"
  ip netns exec "$ns" nft delete table inet "$NETNS_TABLE" 2>/dev/null || true
  {
    echo "table inet $NETNS_TABLE {"
    echo "  chain output { type filter hook output priority 0; policy accept; ip daddr { $peers } drop; }"
    [ "$how" = both ] && echo "  chain input { type filter hook input priority 0; policy accept; ip saddr { $peers } drop; }"
    echo "}"
  } | ip netns exec "$ns" nft -f -
  log "node $i: partitioned ($how) from { $peers }"
}

# Removes every node's partition rules and delays.
netns_heal() {
  local i ns
  for i in "${NETNS_NODES[@]}"; do
    netns_exists "$i" || continue
    ns=$(netns_name "$i")
    ip netns exec "$ns" nft delete table inet "$NETNS_TABLE" 2>/dev/null || true
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  done
  log "network healed: no partition rules, no delays"
}

# netns_slow N MS: delays everything node N sends by MS ms (netem). Exits 2 with
# one line when the kernel has no netem: no delay is faked.
netns_slow() {
  local i=$1 ms=$2 out ns; ns=$(netns_name "$i")
  [[ $ms =~ ^[0-9]+$ ]] || die "slow: MS must be a whole number of milliseconds (got '$ms')"
  netns_require "$i"
  command -v tc >/dev/null || { echo "slow: tc is not installed (iproute2)" >&2; exit 2; }
  if ! out=$(ip netns exec "$ns" tc qdisc replace dev eth0 root netem delay "${ms}ms" 2>&1); then
    if grep -qi 'unknown' <<<"$out"; then
      echo "slow: netem is not available on this kernel" >&2
      exit 2
    fi
    die "slow: tc failed: $out"
  fi
  log "node $i: every packet it sends is delayed ${ms} ms"
}
