# Sourced by the benchmark scripts after scripts/lib/private-serve.sh: what idle
# WatchEntries streams cost the database server, and idle subscriptions the service.
#
# idle_watchers_cpu N SECS TARGET DATABASE_URL DB_PID: prints two numbers, the database server's
# CPU in % of one core over SECS with nothing attached, then over SECS with N
# streams of `ledger bench --scenario idle` held open on TARGET (sampled after
# they are open, their set-up excluded). The streams start after the highest
# sequence, read from DATABASE_URL: from 0 they would be catching up, not idle.
# No calls are made in either: the
# stream's assigner runs idle in both.
idle_watchers_cpu() {
  local n=$1 secs=$2 url=$3 database=$4 pid=$5 hz a b c d gen
  hz=$(getconf CLK_TCK)
  a=$(awk '{print $14 + $15}' "/proc/$pid/stat"); sleep "$secs"
  b=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$bin" bench --target "$url" --scenario idle --watchers "$n" --accounts 1 --concurrency 1 \
    --database-url "$database" \
    --warmup 2s --duration "$((secs + 1))s" --json >"$work/idle.json" &
  gen=$!
  sleep 2.5
  c=$(awk '{print $14 + $15}' "/proc/$pid/stat"); sleep "$secs"
  d=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  wait "$gen" || fail "ledger bench --scenario idle --watchers $n failed"
  python3 -c 'import sys; a,b,c,d,hz,s = map(float, sys.argv[1:]); print(f"{(b-a)*100/hz/s:.2f} {(d-c)*100/hz/s:.2f}")' \
    "$a" "$b" "$c" "$d" "$hz" "$secs"
}

# idle_subscriptions_cpu N SECS TARGET DATABASE_URL SERVICE_PID: prints the service's
# CPU in % of one core over SECS with no subscription, then over SECS with N
# subscriptions of `ledger bench --scenario idle --subscriptions N` that have
# nothing to deliver (sampled once they exist and their leases are taken; the
# bench deletes them when it ends).
idle_subscriptions_cpu() {
  local n=$1 secs=$2 url=$3 database=$4 pid=$5 hz a b c d gen
  hz=$(getconf CLK_TCK)
  a=$(awk '{print $14 + $15}' "/proc/$pid/stat"); sleep "$secs"
  b=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$bin" bench --target "$url" --scenario idle --subscriptions "$n" --accounts 1 --concurrency 1 \
    --database-url "$database" \
    --warmup 3s --duration "$((secs + 1))s" --json >"$work/idle-subscriptions.json" \
    2>"$work/idle-subscriptions.err" &
  gen=$!
  until grep -q '^subscribed' "$work/idle-subscriptions.err" 2>/dev/null; do
    kill -0 "$gen" 2>/dev/null || { cat "$work/idle-subscriptions.err" >&2; fail "ledger bench --subscriptions $n failed"; }
    sleep 0.1
  done
  # Every lease taken (renewed every 2 s), and the deliverers reading nothing.
  sleep 3
  c=$(awk '{print $14 + $15}' "/proc/$pid/stat"); sleep "$secs"
  d=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  wait "$gen" || fail "ledger bench --scenario idle --subscriptions $n failed"
  python3 -c 'import sys; a,b,c,d,hz,s = map(float, sys.argv[1:]); print(f"{(b-a)*100/hz/s:.2f} {(d-c)*100/hz/s:.2f}")' \
    "$a" "$b" "$c" "$d" "$hz" "$secs"
}
