#!/usr/bin/env bash
# Where a batch's time goes, scenario by scenario: the mean of each phase of the
# transaction attempts (`ledger_transaction_phase_seconds`: claim, lock, decide,
# commit) and of the calls per batch (`ledger_batch_calls`) over the measured
# calls, from /metrics before and after each scenario; with the calls/s and the
# CPU per call of `ledger bench --cpu-of`.
#
#   scripts/phases.sh
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh). Environment:
# SCENARIOS ("hot-merchant post"; NAME@N runs NAME at concurrency N), ROUNDS (3),
# SECS (10), CONCURRENCY (16), ACCOUNTS (10000), RATIOS (e.g. "post/hot-merchant":
# one scenario's calls/s over another's, round by round), LEDGER_BIN (the release
# build, made if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}
scenarios=${SCENARIOS:-hot-merchant post}

fail() { echo "phases: $*" >&2; exit 1; }
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
serve_args=(--metrics-listen "127.0.0.1:$metrics_port")
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
db_pid=$(pgrep -P "$server" | head -1)
[ -n "$db_pid" ] || fail "no database server under ledger serve"

results=$work/results.jsonl
for round in $(seq 1 "$rounds"); do
  for name in $scenarios; do
    scenario=${name%@*} c=$conc
    [ "$scenario" != "$name" ] && c=${name#*@}
    # The bench's set-up and warm-up come first; the counters are read around
    # the measured calls (`--during` starts with them and lasts as long).
    line=$("$bin" bench --target "$target" --concurrency "$c" --accounts "$accounts" --duration "${secs}s" \
             --warmup 2s --json --database-url "$db_url" --scenario "$scenario" \
             --cpu-of "service=$server" --cpu-of "database=$db_pid" \
             --during "curl -fsS http://127.0.0.1:$metrics_port/metrics >$work/before.prom; sleep $secs; curl -fsS http://127.0.0.1:$metrics_port/metrics >$work/after.prom") \
      || fail "$name failed"
    python3 - "$line" "$round" "$name" "$work/before.prom" "$work/after.prom" >>"$results" <<'PY'
import json, re, sys
line = json.loads(sys.argv[1])
def read(path):
    values = {}
    for l in open(path):
        m = re.match(r'^(ledger_(?:transaction_phase_seconds|batch_calls)_(?:sum|count))(\{[^}]*\})? (\S+)$', l)
        if m:
            values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values
before, after = read(sys.argv[4]), read(sys.argv[5])
delta = lambda k: after.get(k, 0.0) - before.get(k, 0.0)
phases = {}
for p in ("claim", "lock", "decide", "commit"):
    n = delta(f'ledger_transaction_phase_seconds_count{{phase="{p}"}}')
    phases[p] = 1e6 * delta(f'ledger_transaction_phase_seconds_sum{{phase="{p}"}}') / n if n else 0.0
batches = delta("ledger_batch_calls_count")
line.update(round=int(sys.argv[2]), name=sys.argv[3], phases_us=phases,
            calls_per_batch=delta("ledger_batch_calls_sum") / batches if batches else 0.0)
print(json.dumps(line))
PY
  done
done

python3 - "$results" "$rounds" "$flavor" "$conc" "$accounts" "$scenarios" "${RATIOS:-}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{sys.argv[3]}, concurrency {sys.argv[4]} (NAME@N: N), {sys.argv[5]} accounts, {sys.argv[2]} rounds; median (min-max)")
def spread(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}-{fmt(values[-1])})"
n0 = lambda v: f"{v:,.0f}"
n1 = lambda v: f"{v:.1f}"
n3 = lambda v: f"{v:.3f}"
print(f"{'':<14} {'calls/s':>22} {'calls/batch':>18} {'claim us':>16} {'lock us':>16} {'decide us':>16} {'commit us':>18} {'sum us':>18} {'CPU ms/call svc / db':>22}")
for name in sys.argv[6].split():
    r = [x for x in rows if x["name"] == name]
    p = lambda k: [x["phases_us"][k] for x in r]
    total = [sum(x["phases_us"].values()) for x in r]
    cpu = lambda k: statistics.median(x["cpu_ms_per_call"][k] for x in r)
    print(f"{name:<14} {spread([x['calls_per_second'] for x in r], n0):>22} {spread([x['calls_per_batch'] for x in r], n1):>18} "
          f"{spread(p('claim'), n0):>16} {spread(p('lock'), n0):>16} {spread(p('decide'), n0):>16} {spread(p('commit'), n0):>18} "
          f"{spread(total, n0):>18} {n3(cpu('service')) + ' / ' + n3(cpu('database')):>22}")
get = {(x["round"], x["name"]): x for x in rows}
for ratio in sys.argv[7].split():
    top, bottom = ratio.split("/")
    each = [get[(r, top)]["calls_per_second"] / get[(r, bottom)]["calls_per_second"] for r in range(1, int(sys.argv[2]) + 1)]
    print(f"{ratio} calls/s, round by round: {spread(each, lambda v: f'{v:.2f}x')}")
PY
