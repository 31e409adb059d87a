#!/usr/bin/env bash
# The change stream's numbers (issue 25), several rounds on one database server:
# the lag from a call's reply to its entry reaching a live watcher, what the
# stream costs the writers, and what idle watchers cost the database.
#
#   scripts/stream-ab.sh       3 rounds, 10 s per measurement, about 4 minutes
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh) serves two `ledger
# serve` processes, each on its own database of that server: "on", the default
# (the stream's assigner running), loaded with 4 WatchEntries streams attached;
# "off", `--stream-assigner off`, no watchers. Separate databases because the
# assigner numbers every entry of its database, whichever instance wrote it: on
# one database, "off" would pay for the numbering too. Each round runs unique
# keys over ACCOUNTS accounts and hot-merchant (every payment to one account) at
# CONCURRENCY against both, the order alternating from round to round; "on"
# reports the lag (reply to arrival in watcher 0) of every measured entry, and
# fails if a watcher sees a hole. Then the database server's CPU over SECS with
# no stream, then with 64 idle streams on "on" (no calls: the assigner idle).
#
# Environment: ROUNDS (3), SECS (10), CONCURRENCY (16), ACCOUNTS (10000),
# WATCHERS (4), IDLE_WATCHERS (64).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}
watchers=${WATCHERS:-4}
idle=${IDLE_WATCHERS:-64}

fail() { echo "stream-ab: $*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

serve_args=()
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
# shellcheck source=scripts/lib/idle-watchers.sh
. scripts/lib/idle-watchers.sh
on=$target
db_pid=$(pgrep -P "$server" | head -1)
[ -n "$db_pid" ] || fail "no database server under ledger serve"

off_url=${db_url%/*}/ledger_stream_off
"$bin" migrate --database-url "$off_url" >/dev/null
off_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn "$bin" serve --listen "127.0.0.1:$off_port" --database-url "$off_url" \
  --pool-size 32 --stream-assigner off >"$work/off.log" 2>&1 &
off_server=$!
trap 'kill $server $off_server 2>/dev/null; wait $server $off_server 2>/dev/null; rm -rf "$work"' EXIT
wait_serving "$off_port" "$off_server" "$work/off.log"
off=http://127.0.0.1:$off_port

results=$work/results.jsonl
scenario() { # round mode name bench-args...
  local round=$1 mode=$2 name=$3 url=$on database=$db_url pid=$server extra=(--watchers "$watchers"); shift 3
  [ "$mode" = off ] && { url=$off; database=$off_url; pid=$off_server; extra=(); }
  local line
  line=$("$bin" bench --target "$url" --concurrency "$conc" --duration "${secs}s" --warmup 2s --json \
           --database-url "$database" --cpu-of "service=$pid" --cpu-of "database=$db_pid" "${extra[@]}" "$@") || fail "$mode $name failed"
  python3 - "$line" "$round" "$mode" "$name" >>"$results" <<'PY' || fail "$mode $name: $line"
import json, sys
line = json.loads(sys.argv[1])
if line["errors"]:
    sys.exit(1)
line.update(round=int(sys.argv[2]), mode=sys.argv[3], name=sys.argv[4])
print(json.dumps(line))
PY
}

for round in $(seq 1 "$rounds"); do
  order="off on"; [ $((round % 2)) = 0 ] && order="on off"
  log "round $round of $rounds ($order)"
  for mode in $order; do
    scenario "$round" "$mode" unique --accounts "$accounts" --scenario unique
    scenario "$round" "$mode" hot-merchant --accounts "$accounts" --scenario hot-merchant
  done
  log "round $round: database CPU, no stream vs $idle idle streams"
  read -r none held <<<"$(idle_watchers_cpu "$idle" "$secs" "$on" "$db_url" "$db_pid")"
  [ -n "${held:-}" ] || fail "no idle-watchers sample"
  printf '{"round": %s, "mode": "idle", "none": %s, "held": %s}\n' "$round" "$none" "$held" >>"$results"
done

python3 - "$results" "$rounds" "$conc" "$accounts" "$flavor" "$watchers" "$idle" "$secs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, conc, accounts, flavor, watchers, idle, secs = sys.argv[2:]
rounds = int(rounds)
def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}-{fmt(values[-1])})"
get = {(r["round"], r["mode"], r.get("name")): r for r in rows}
R = range(1, rounds + 1)
per_s, times, ms, pct = (lambda v: f"{v:,.0f}"), (lambda v: f"{v:.2f}x"), (lambda v: f"{v:.1f}"), (lambda v: f"{v:.2f}%")
print(f"{flavor}, concurrency {conc}, {accounts} accounts, {rounds} rounds; median (min-max)\n")
print(f"{'':<40} {'off (no assigner, no watcher)':>30} {f'on (assigner, {watchers} watchers)':>30}")
for name in ("unique", "hot-merchant"):
    cells = [spread([get[(r, m, name)]["calls_per_second"] for r in R], per_s) for m in ("off", "on")]
    print(f"{name + ' calls/s':<40} {cells[0]:>30} {cells[1]:>30}")
print()
for name in ("unique", "hot-merchant"):
    ratio = spread([get[(r, "on", name)]["calls_per_second"] / get[(r, "off", name)]["calls_per_second"] for r in R], times)
    print(f"{name + ' on / off (target >= 0.90x)':<40} {ratio:>30}")
print()
for name in ("unique", "hot-merchant"):
    for part in ("service", "database", "bench"):
        cells = [spread([get[(r, m, name)]["cpu_ms_per_call"][part] for r in R], lambda v: f"{v:.3f}") for m in ("off", "on")]
        print(f"{f'{name} CPU ms/call, {part}':<40} {cells[0]:>30} {cells[1]:>30}")
print("(CPU per measured call, over the measured calls only; `bench` is the load generator with its watchers)")
print()
for name in ("unique", "hot-merchant"):
    for q, target in (("p50", 20), ("p99", 100)):
        cell = spread([get[(r, "on", name)][f"lag_{q}_ms"] for r in R], ms)
        print(f"{f'{name} lag {q} ms (target <= {target})':<40} {cell:>30}")
    cell = spread([get[(r, "on", name)]["lag_max_ms"] for r in R], ms)
    n = sum(get[(r, "on", name)]["lag_entries"] for r in R)
    print(f"{f'{name} lag max ms':<40} {cell:>30}   ({n:,} entries matched)")
print()
idle_rows = [r for r in rows if r["mode"] == "idle"]
print(f"{'database CPU, no stream':<40} {spread([r['none'] for r in idle_rows], pct):>30}")
print(f"{f'database CPU, {idle} idle streams':<40} {spread([r['held'] for r in idle_rows], pct):>30}")
print(f"{f'{idle} idle streams cost (target <= 5%)':<40} {spread([r['held'] - r['none'] for r in idle_rows], pct):>30}")
print(f"(% of one core over {secs} s, from /proc; the assigner idle in both; "
      f"every watcher saw contiguous sequences)")
PY
