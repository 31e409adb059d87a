#!/usr/bin/env bash
# Unique charges through the service against the raw transaction, alternated
# round by round on one database server: the ratios the CPU-per-charge targets
# are stated in, with their spread.
#
#   scripts/ceiling-ab.sh       3 rounds, 10 s per measurement, about 6 minutes
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh). Each round runs, in
# an order that alternates from round to round:
#   - sysbench full-transaction.lua (scripts/sql-ceilings: the transaction of
#     SPEC 3.2 statement by statement, one transaction per charge) over ACCOUNTS
#     accounts at CONCURRENCY, with the database server's CPU per transaction;
#   - `ledger bench --scenario unique` at CONCURRENCY, with the service's and
#     the database server's CPU per call;
#   - sysbench seed-minimal.lua at CONCURRENCY (the ceiling scripts/bench.sh
#     compares every scenario with), and unique charges at HIGH concurrency.
# CPU is read from /proc over the steady part of each run: the measured calls
# for the bench (`--cpu-of`), and for sysbench the seconds after its first two.
#
# Environment: ROUNDS (3), SECS (10), CONCURRENCY (16), HIGH (256), ACCOUNTS
# (10000), SERVE_ARGS (extra `ledger serve` arguments).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
high=${HIGH:-256}
accounts=${ACCOUNTS:-10000}

fail() { echo "ceiling-ab: $*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

command -v sysbench >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sysbench >/dev/null
}
# shellcheck disable=SC2206
serve_args=(${SERVE_ARGS:-})
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
db_pid=$(pgrep -P "$server" | head -1)
[ -n "$db_pid" ] || fail "no database server under ledger serve"

# A database of their own for the sysbench scripts' tables.
mysql -h127.0.0.1 -P"$db_port" -uroot -e 'CREATE DATABASE IF NOT EXISTS sql_ceilings' \
  || fail "cannot create the sql_ceilings database (needs the mysql client)"
sb="sysbench --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port=$db_port --mysql-user=root --mysql-db=sql_ceilings"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
results=$work/results.jsonl

# raw ROUND SCRIPT THREADS: tx/s and the database's CPU ms per transaction.
raw() {
  local round=$1 script=$2 threads=$3 out=$work/sysbench.txt a b
  $sb "scripts/sql-ceilings/$script.lua" --accounts="$accounts" prepare >/dev/null
  $sb "scripts/sql-ceilings/$script.lua" --accounts="$accounts" --threads="$threads" --time="$secs" \
    --report-interval=1 run >"$out" &
  local load=$!
  sleep 2; a=$(ticks "$db_pid")
  sleep "$((secs - 3))"; b=$(ticks "$db_pid")
  wait "$load" || fail "sysbench $script failed"
  $sb "scripts/sql-ceilings/$script.lua" cleanup >/dev/null
  python3 - "$out" "$a" "$b" "$hz" "$((secs - 3))" "$round" "$script" "$threads" >>"$results" <<'PY'
import json, re, sys
out, a, b, hz, window, round_, script, threads = sys.argv[1:]
# The per-second reports inside the CPU window (seconds 3 .. secs - 1).
rates = [float(m.group(2)) for m in re.finditer(r"\[ (\d+)s \].*?tps: ([\d.]+)", open(out).read())
         if 3 <= int(m.group(1)) <= 2 + int(window)]
tps = sum(rates) / len(rates)
db_ms = (float(b) - float(a)) / float(hz) * 1000 / (tps * float(window))
print(json.dumps({"round": int(round_), "name": f"{script}@{threads}", "rate": tps, "db": db_ms}))
PY
}

# service ROUND THREADS: calls/s and the service's and database's CPU ms per call.
service() {
  local round=$1 threads=$2 line
  line=$("$bin" bench --target "$target" --concurrency "$threads" --accounts "$accounts" \
           --duration "${secs}s" --warmup 2s --json --database-url "$db_url" --scenario unique \
           --cpu-of "service=$server" --cpu-of "database=$db_pid") || fail "bench failed"
  python3 - "$line" "$round" "$threads" >>"$results" <<'PY'
import json, sys
line = json.loads(sys.argv[1])
if line["errors"]:
    sys.exit(1)
cpu = line["cpu_ms_per_call"]
print(json.dumps({"round": int(sys.argv[2]), "name": f"unique@{sys.argv[3]}",
                  "rate": line["calls_per_second"], "db": cpu["database"], "service": cpu["service"]}))
PY
}

for round in $(seq 1 "$rounds"); do
  log "round $round of $rounds"
  if [ $((round % 2)) = 1 ]; then
    raw "$round" full-transaction "$conc"; service "$round" "$conc"
    raw "$round" seed-minimal "$conc"; service "$round" "$high"
  else
    service "$round" "$conc"; raw "$round" full-transaction "$conc"
    service "$round" "$high"; raw "$round" seed-minimal "$conc"
  fi
done

python3 - "$results" "$rounds" "$flavor" "$conc" "$high" "$accounts" "${SERVE_ARGS:-}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, flavor, conc, high, accounts, args = int(sys.argv[2]), *sys.argv[3:]
get = {(r["round"], r["name"]): r for r in rows}
R = range(1, rounds + 1)
def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}-{fmt(values[-1])})"
x = lambda v: f"{v:.2f}x"
ms = lambda v: f"{v:.3f}"
rate = lambda v: f"{v:,.0f}"
full, uniq = f"full-transaction@{conc}", f"unique@{conc}"
seed, uniq_high = f"seed-minimal@{conc}", f"unique@{high}"
print(f"{flavor}, {accounts} accounts, {rounds} rounds, ledger serve {args}; median (min-max)\n")
for name in (full, uniq, seed, uniq_high):
    print(f"{name + ' per second':<44} {spread([get[(r, name)]['rate'] for r in R], rate):>24}")
for name in (full, uniq, seed, uniq_high):
    print(f"{name + ' CPU ms, database':<44} {spread([get[(r, name)]['db'] for r in R], ms):>24}")
for name in (uniq, uniq_high):
    print(f"{name + ' CPU ms, service':<44} {spread([get[(r, name)]['service'] for r in R], ms):>24}")
print()
total = lambda r: r["service"] + r["db"]
print(f"{'CPU per charge, service + database, / raw (target <= 0.80x)':<64} "
      f"{spread([total(get[(r, uniq)]) / get[(r, full)]['db'] for r in R], x)}")
print(f"{'unique / full-transaction at ' + conc + ' (target >= 1.20x)':<64} "
      f"{spread([get[(r, uniq)]['rate'] / get[(r, full)]['rate'] for r in R], x)}")
print(f"{'unique at ' + high + ' / seed-minimal at ' + conc + ' (target >= 1.00x)':<64} "
      f"{spread([get[(r, uniq_high)]['rate'] / get[(r, seed)]['rate'] for r in R], x)}")
print("\n(raw: the database server's CPU per sysbench transaction over seconds 3 to SECS - 1 of its run;"
      " service: CPU per measured call from `ledger bench --cpu-of`)")
PY
