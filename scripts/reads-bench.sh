#!/usr/bin/env bash
# Reads on a large ledger, alternated round by round: what a read costs when the
# ledger is big, against a read that the ledger's size cannot change.
#
#   scripts/reads-bench.sh                SCENARIOS="search get-entry" on a ledger
#                                         of LEDGER_ENTRIES (1,000,000) entries
#
# One `ledger serve` on a fresh private database (scripts/lib/private-serve.sh);
# the first scenario's set-up posts the ledger (`ledger bench`'s seeding, tagged
# 10 entries per order id, once), and every later run finds it in place. Each
# round runs every scenario, in an order that alternates from round to round, and
# the report gives each one's calls/s and p50 with their spread, and their ratio
# to the first scenario's, round by round.
#
# Environment: SCENARIOS ("search get-entry"; each a `ledger bench` scenario,
# NAME:ARGS adds arguments, e.g. "balance-deep:--balance-entries 1000000"),
# ROUNDS (3), SECS (10), CONCURRENCY (16), ACCOUNTS (1000), LEDGER_ENTRIES (1000000),
# BENCH_BIN (the `ledger` that runs the bench: by default the one served, whose
# scenarios a build before them lacks).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-1000}
entries=${LEDGER_ENTRIES:-1000000}
scenarios=${SCENARIOS:-search get-entry}

fail() { echo "reads-bench: $*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

serve_args=()
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh

results=$work/results.jsonl
measure() { # round spec
  local round=$1 spec=$2 name=${2%%:*} extra=()
  [ "$spec" != "$name" ] && read -r -a extra <<<"${spec#*:}"
  local line
  line=$("${BENCH_BIN:-$bin}" bench --target "$target" --concurrency "$conc" --accounts "$accounts" \
           --duration "${secs}s" --warmup 2s --json --scenario "$name" \
           --ledger-entries "$entries" "${extra[@]}") || fail "$name failed"
  python3 - "$line" "$round" "$spec" >>"$results" <<'PY' || fail "$spec: $line"
import json, sys
line = json.loads(sys.argv[1])
if line["errors"]:
    sys.exit(1)
line.update(round=int(sys.argv[2]), spec=sys.argv[3])
print(json.dumps(line))
PY
}

read -r -a specs <<<"$scenarios"
log "set-up: a ledger of $entries entries (posted on the first run, then found)"
for round in $(seq 1 "$rounds"); do
  order=("${specs[@]}")
  if [ $((round % 2)) = 0 ]; then
    order=(); for ((i=${#specs[@]}-1; i>=0; i--)); do order+=("${specs[$i]}"); done
  fi
  log "round $round of $rounds (${order[*]})"
  for spec in "${order[@]}"; do measure "$round" "$spec"; done
done

python3 - "$results" "$rounds" "$flavor" "$conc" "$entries" "${specs[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds, flavor, conc, entries, specs = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
get = {(r["round"], r["spec"]): r for r in rows}
R = range(1, rounds + 1)
def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}-{fmt(values[-1])})"
print(f"{flavor}, concurrency {conc}, a ledger of {entries} entries, {rounds} rounds; median (min-max)\n")
print(f"{'':<44} {'calls/s':>24} {'p50 ms':>24} {'/ ' + specs[0] + ' calls/s':>24}")
for spec in specs:
    mine = [get[(r, spec)] for r in R]
    first = [get[(r, specs[0])] for r in R]
    print(f"{spec:<44} {spread([m['calls_per_second'] for m in mine], lambda v: f'{v:,.0f}'):>24} "
          f"{spread([m['p50_ms'] for m in mine], lambda v: f'{v:.3f}'):>24} "
          f"{spread([m['calls_per_second'] / f['calls_per_second'] for m, f in zip(mine, first)], lambda v: f'{v:.2f}x'):>24}")
PY
