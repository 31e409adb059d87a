#!/usr/bin/env bash
# Two builds of the service, A/B on one database server, alternated round by round:
# what one change does to throughput and to CPU per call, with the spread.
#
#   scripts/binary-ab.sh BEFORE AFTER     two `ledger` binaries (e.g. one built from
#                                         the commit before a change, one after)
#   BEFORE_ARGS="--batch-writers 4" AFTER_ARGS="--batch-writers 1" \
#     scripts/binary-ab.sh BIN BIN          one binary, two settings
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh, started by BEFORE) serves
# both, each on a database of its own (its migrations applied by its own binary;
# each one's change-stream assigner numbers only its own entries). Each round runs
# every scenario against both, the order alternating from round to round, with
# `ledger bench --cpu-of`: the service's, the database server's and the load
# generator's CPU per measured call, over the measured calls only.
#
# Environment: SCENARIOS ("unique hot-merchant transfer post"; NAME@N runs NAME at
# concurrency N), ROUNDS (3), SECS (10), CONCURRENCY (16), ACCOUNTS (10000),
# BEFORE_ARGS and AFTER_ARGS (extra `ledger serve` arguments of each side),
# BENCH_ARGS (extra `ledger bench` arguments of both, e.g. `--limits`) and
# BEFORE_BENCH_ARGS / AFTER_BENCH_ARGS (of one side: one binary, two loads, e.g.
# AFTER_BENCH_ARGS="--metadata 3"),
# RATIOS (e.g. "post/hot-merchant": each side's calls/s of one scenario over
# another's, round by round), UNCHECKED (`before` or `after`: that side's runs end
# without the journal check, for a build that leaves writes out on purpose to
# measure what they cost).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 2 ] || { echo "usage: scripts/binary-ab.sh BEFORE-BINARY AFTER-BINARY" >&2; exit 2; }
before_bin=$(realpath "$1")
after_bin=$(realpath "$2")
rounds=${ROUNDS:-3}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}
scenarios=${SCENARIOS:-unique hot-merchant transfer post}

fail() { echo "binary-ab: $*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

# shellcheck disable=SC2206
serve_args=(${BEFORE_ARGS:-})
# shellcheck disable=SC2206
after_args=(${AFTER_ARGS:-})
LEDGER_BIN=$before_bin
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
db_pid=$(pgrep -P "$server" | head -1)
[ -n "$db_pid" ] || fail "no database server under ledger serve"

after_url=${db_url%/*}/ledger_ab_after
"$after_bin" migrate --database-url "$after_url" >/dev/null
after_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn "$after_bin" serve --listen "127.0.0.1:$after_port" --database-url "$after_url" \
  --pool-size 32 "${after_args[@]}" >"$work/after.log" 2>&1 &
after_server=$!
trap 'kill $server $after_server 2>/dev/null; wait $server $after_server 2>/dev/null; rm -rf "$work"' EXIT
wait_serving "$after_port" "$after_server" "$work/after.log"

results=$work/results.jsonl
measure() { # round side scenario
  local round=$1 side=$2 name=$3 url=$target database=$db_url pid=$server
  [ "$side" = after ] && { url=http://127.0.0.1:$after_port; database=$after_url; pid=$after_server; }
  local line scenario=${name%@*} c=$conc
  [ "$scenario" != "$name" ] && c=${name#*@}
  # The same load generator for both sides: AFTER's (`--cpu-of` is newer than some builds).
  local check=(--database-url "$database") side_args=${BEFORE_BENCH_ARGS:-}
  [ "$side" = after ] && side_args=${AFTER_BENCH_ARGS:-}
  [ "$side" = "${UNCHECKED:-}" ] && check=()
  line=$("$after_bin" bench --target "$url" --concurrency "$c" --accounts "$accounts" --duration "${secs}s" \
           --warmup 2s --json "${check[@]}" --scenario "$scenario" ${BENCH_ARGS:-} $side_args \
           --cpu-of "service=$pid" --cpu-of "database=$db_pid") || fail "$side $name failed"
  python3 - "$line" "$round" "$side" "$name" >>"$results" <<'PY' || fail "$side $name: $line"
import json, sys
line = json.loads(sys.argv[1])
if line["errors"]:
    sys.exit(1)
line.update(round=int(sys.argv[2]), side=sys.argv[3], name=sys.argv[4])
print(json.dumps(line))
PY
}

for round in $(seq 1 "$rounds"); do
  order="before after"; [ $((round % 2)) = 0 ] && order="after before"
  log "round $round of $rounds ($order)"
  for name in $scenarios; do
    for side in $order; do measure "$round" "$side" "$name"; done
  done
done

python3 - "$results" "$rounds" "$flavor" "$conc" "$accounts" "$scenarios" \
  "$before_bin" "${BEFORE_ARGS:-}" "$after_bin" "${AFTER_ARGS:-}" "${RATIOS:-}" "${UNCHECKED:-}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, flavor, conc, accounts, scenarios = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6].split()
get = {(r["round"], r["side"], r["name"]): r for r in rows}
R = range(1, rounds + 1)
def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}-{fmt(values[-1])})"
def cpu(r):
    c = r["cpu_ms_per_call"]
    return c["service"], c["database"], c["bench"], c["service"] + c["database"] + c["bench"]
print(f"{flavor}, concurrency {conc} (NAME@N: N), {accounts} accounts, {rounds} rounds; median (min-max)")
print(f"before: {sys.argv[7]} {sys.argv[8]}\nafter:  {sys.argv[9]} {sys.argv[10]}\n")
print(f"{'':<34} {'before':>26} {'after':>26} {'after / before':>24}")
for name in scenarios:
    b = [get[(r, "before", name)] for r in R]
    a = [get[(r, "after", name)] for r in R]
    rate = lambda x: f"{x:,.0f}"
    x = lambda v: f"{v:.2f}x"
    ms = lambda v: f"{v:.3f}"
    print(f"{name + ' calls/s':<34} {spread([r['calls_per_second'] for r in b], rate):>26} "
          f"{spread([r['calls_per_second'] for r in a], rate):>26} "
          f"{spread([ar['calls_per_second'] / br['calls_per_second'] for ar, br in zip(a, b)], x):>24}")
    print(f"{'  p50 ms':<34} {spread([r['p50_ms'] for r in b], ms):>26} "
          f"{spread([r['p50_ms'] for r in a], ms):>26} "
          f"{spread([ar['p50_ms'] / br['p50_ms'] for ar, br in zip(a, b)], x):>24}")
    for i, part in enumerate(("service", "database", "bench", "total")):
        print(f"{'  CPU ms/call, ' + part:<34} {spread([cpu(r)[i] for r in b], ms):>26} "
              f"{spread([cpu(r)[i] for r in a], ms):>26} "
              f"{spread([cpu(ar)[i] / cpu(br)[i] for ar, br in zip(a, b)], x):>24}")
for ratio in sys.argv[11].split():
    top, bottom = ratio.split("/")
    each = lambda side: [get[(r, side, top)]["calls_per_second"] / get[(r, side, bottom)]["calls_per_second"] for r in R]
    print(f"{ratio + ' calls/s':<34} {spread(each('before'), x):>26} {spread(each('after'), x):>26}")
print("\n(CPU per measured call, over the measured calls only, from /proc; every scenario ended with its journal check"
      + (f" but the {sys.argv[12]} side's)" if sys.argv[12] else ")"))
PY
