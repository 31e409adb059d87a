#!/usr/bin/env bash
# Group commit on and off, A/B on one database, several rounds: the spread of each
# rate and of the ratios the group-commit targets are stated in.
#
#   scripts/batch-ab.sh        3 rounds, 10 s per measurement, about 8 minutes
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh) serves two `ledger
# serve` processes: "on" with the default --batch-writers, "off" with
# --batch-writers 0 (one transaction per call). Each round measures the
# seed-minimal ceilings (sysbench, scripts/sql-ceilings) for 1 and ACCOUNTS
# accounts, then each scenario against "off" and "on" in turn, so both modes
# see the same database, the same data and the same moment of a shared machine.
#
# Scenarios: unique keys over ACCOUNTS accounts, one hot account, hot-merchant
# (every payment to one account), all at CONCURRENCY, and unique keys at
# concurrency 1 (its p50: what batching costs a lone call).
#
# Environment: ROUNDS (3), SECS (10), CONCURRENCY (16), ACCOUNTS (10000).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}

fail() { echo "batch-ab: $*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

serve_args=()
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
on=$target

off_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn "$bin" serve --listen "127.0.0.1:$off_port" --database-url "$db_url" \
  --pool-size 32 --batch-writers 0 >"$work/off.log" 2>&1 &
off_server=$!
trap 'kill $server $off_server 2>/dev/null; wait $server $off_server 2>/dev/null; rm -rf "$work"' EXIT
wait_serving "$off_port" "$off_server" "$work/off.log"
off=http://127.0.0.1:$off_port

command -v sysbench >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sysbench >/dev/null
}
mysql -h127.0.0.1 -P"$db_port" -uroot -e 'CREATE DATABASE IF NOT EXISTS sql_ceilings' 2>/dev/null \
  || "$bin" migrate --database-url "mysql://root@127.0.0.1:$db_port/sql_ceilings" >/dev/null
sb="sysbench --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port=$db_port --mysql-user=root --mysql-db=sql_ceilings"

db_pid=$(pgrep -P "$server" | head -1)
[ -n "$db_pid" ] || fail "no database server under ledger serve"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

results=$work/results.jsonl
record() { # round mode name rate [cores p50]
  printf '{"round": %s, "mode": "%s", "name": "%s", "rate": %s, "cores": %s, "p50": %s}\n' \
    "$1" "$2" "$3" "$4" "${5:-null}" "${6:-null}" >>"$results"
}
ceiling() { # round accounts
  $sb scripts/sql-ceilings/seed-minimal.lua --accounts="$2" prepare >/dev/null
  local tps
  tps=$($sb scripts/sql-ceilings/seed-minimal.lua --accounts="$2" --threads="$conc" --time="$secs" run \
          | awk '/transactions:/ {gsub(/\(/, "", $3); print $3}')
  $sb scripts/sql-ceilings/seed-minimal.lua cleanup >/dev/null
  record "$1" ceiling "seed-minimal/$2" "$tps"
}
# The CPU the service, the database server and the load generator use together
# while a scenario runs, in cores (warm-up included): how close it is to the
# machine's limit.
scenario() { # round mode target name concurrency accounts bench-args...
  local round=$1 mode=$2 url=$3 name=$4 c=$5 a=$6; shift 6
  local pid=$server; [ "$mode" = off ] && pid=$off_server
  local line before start TIMEFORMAT='%U %S %R'
  before=$(( $(ticks "$pid") + $(ticks "$db_pid") ))
  { time line=$("$bin" bench --target "$url" --concurrency "$c" --accounts "$a" --duration "${secs}s" \
           --warmup 2s --json --database-url "$db_url" "$@"); } 2>"$work/gen-time"
  local used=$(( $(ticks "$pid") + $(ticks "$db_pid") - before ))
  python3 - "$line" "$used" "$hz" "$(cat "$work/gen-time")" >"$work/measured" <<'PY' || fail "$mode $name: $line"
import json, sys
line, used, hz, (user, system, wall) = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), map(float, sys.argv[4].split())
if line["errors"]:
    sys.exit(1)
print(line["calls_per_second"], (used / hz + user + system) / wall, line["p50_ms"])
PY
  read -r rate cores p50 <"$work/measured"
  record "$round" "$mode" "$name" "$rate" "$cores" "$p50"
}

for round in $(seq 1 "$rounds"); do
  log "round $round of $rounds"
  ceiling "$round" 1
  ceiling "$round" "$accounts"
  for mode in off on; do
    url=$on; [ $mode = off ] && url=$off
    scenario "$round" $mode "$url" unique "$conc" "$accounts" --scenario unique
    scenario "$round" $mode "$url" hot "$conc" 1 --scenario unique
    scenario "$round" $mode "$url" hot-merchant "$conc" "$accounts" --scenario hot-merchant
    scenario "$round" $mode "$url" alone 1 "$accounts" --scenario unique
  done
done

python3 - "$results" "$rounds" "$conc" "$accounts" "$flavor" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, conc, accounts, flavor = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rate = {(r["round"], r["mode"], r["name"]): r["rate"] for r in rows}
def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}-{fmt(values[-1])})"
per_s = lambda v: f"{v:,.0f}"
times = lambda v: f"{v:.2f}x"
print(f"{flavor}, concurrency {conc}, {rounds} rounds; median (min-max)\n")
print(f"{'':<34} {'off (one transaction per call)':>32} {'on (group commit)':>32}")
for name in ("unique", "hot", "hot-merchant"):
    label = {"unique": f"unique, {accounts} accounts", "hot": "unique, 1 hot account",
             "hot-merchant": f"hot-merchant, {accounts} payers"}[name]
    cells = [spread([rate[(r, m, name)] for r in range(1, rounds + 1)], per_s) for m in ("off", "on")]
    print(f"{label + ' calls/s':<34} {cells[0]:>32} {cells[1]:>32}")
for name in ("seed-minimal/1", f"seed-minimal/{accounts}"):
    cell = spread([rate[(r, "ceiling", name)] for r in range(1, rounds + 1)], per_s)
    print(f"{'ceiling ' + name + ' tx/s':<34} {cell:>32}")
print()
ratios = {
    "hot / unique (target 0.9x)": lambda r, m: rate[(r, m, "hot")] / rate[(r, m, "unique")],
    "hot / seed-minimal hot (1.0x)": lambda r, m: rate[(r, m, "hot")] / rate[(r, "ceiling", "seed-minimal/1")],
    "unique / seed-minimal (0.75x)": lambda r, m: rate[(r, m, "unique")] / rate[(r, "ceiling", f"seed-minimal/{accounts}")],
    "hot-merchant / unique (0.9x)": lambda r, m: rate[(r, m, "hot-merchant")] / rate[(r, m, "unique")],
}
for label, f in ratios.items():
    cells = [spread([f(r, m) for r in range(1, rounds + 1)], times) for m in ("off", "on")]
    print(f"{label:<34} {cells[0]:>32} {cells[1]:>32}")
print()
cores = {r["mode"] + " " + r["name"]: [] for r in rows if r["cores"] is not None}
for r in rows:
    if r["cores"] is not None:
        cores[r["mode"] + " " + r["name"]].append(r["cores"])
in_cores = lambda v: f"{v:.2f}"
alone = [[r["p50"] for r in rows if r["mode"] == m and r["name"] == "alone"] for m in ("off", "on")]
cells = [spread(v, lambda x: f"{x:.2f}") for v in alone]
print(f"{'p50 ms at concurrency 1':<34} {cells[0]:>32} {cells[1]:>32}")
print()
for name in ("unique", "hot", "hot-merchant"):
    cells = [spread(cores[f"{m} {name}"], in_cores) for m in ("off", "on")]
    print(f"{'CPU in use, cores: ' + name:<34} {cells[0]:>32} {cells[1]:>32}")
print("(service, database server and load generator together, over warm-up and run, of "
      f"{__import__('os').cpu_count()} cores)")
PY
