#!/usr/bin/env bash
# What each call costs the database, in counts rather than time: the statements,
# handler calls, InnoDB rows and page reads per measured call of each scenario
# (`ledger bench --status`: SHOW GLOBAL STATUS before and after the measured calls),
# on a private, freshly initialized database server. Counts do not depend on how
# busy the machine is, so they compare two builds where timings cannot.
#
#   scripts/db-counters.sh                  unique, hot, hot-merchant, transfer, post
#   SCENARIOS="unique post" scripts/db-counters.sh
#
# Environment: SCENARIOS, SECS (5), CONCURRENCY (16), ACCOUNTS (10000), and any
# `ledger serve` arguments in SERVE_ARGS (e.g. "--batch-writers 0").
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${SECS:-5}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}
scenarios=${SCENARIOS:-unique hot hot-merchant transfer post}
fail() { echo "db-counters: $*" >&2; exit 1; }

# shellcheck disable=SC2206
serve_args=(${SERVE_ARGS:-})
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh

results=$work/results.jsonl
for name in $scenarios; do
  args=(--scenario "$name" --accounts "$accounts")
  [ "$name" = hot ] && args=(--scenario unique --accounts 1)
  "$bin" bench --target "$target" --concurrency "$conc" --duration "${secs}s" --warmup 1s --json \
    --database-url "$db_url" --status "${args[@]}" | python3 -c '
import json, sys
line = json.loads(sys.stdin.read()); line["name"] = sys.argv[1]; print(json.dumps(line))' "$name" >>"$results" \
    || fail "$name failed"
done

python3 - "$results" "$flavor" "$conc" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = sorted({k for r in rows for k in r["status_per_call"]})
print(f"{sys.argv[2]}, concurrency {sys.argv[3]}: per measured call\n")
print(f"{'counter':<36}" + "".join(f"{r['name']:>14}" for r in rows))
for n in names:
    print(f"{n:<36}" + "".join(f"{r['status_per_call'].get(n, 0):>14.2f}" for r in rows))
print(f"{'calls/s (on this machine, now)':<36}" + "".join(f"{r['calls_per_second']:>14.0f}" for r in rows))
PY
