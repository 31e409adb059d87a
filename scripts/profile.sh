#!/usr/bin/env bash
# Where the service's CPU goes under one bench scenario: a flamegraph of
# `ledger serve` (perf, sampling its CPU clock with DWARF call stacks; inferno
# draws it), and the functions that take the most of it, by self time.
#
#   scripts/profile.sh OUT.svg          unique charges, 10 s, concurrency 16;
#                                       the folded stacks go to OUT.folded
#
# One private MariaDB/MySQL (scripts/lib/private-serve.sh); the profile starts
# after the bench's set-up and warm-up and covers SECS of its steady part.
# Installs what it lacks: perf (Debian's linux-perf) and inferno (crates.io).
#
# Environment: SCENARIO (unique), SECS (10), CONCURRENCY (16), ACCOUNTS (10000),
# WATCHERS (0), LEDGER_BIN (the service profiled: the release build, made if
# missing), BENCH_BIN (the `ledger` that runs the bench: LEDGER_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { echo "usage: scripts/profile.sh OUT.svg" >&2; exit 2; }
out=$(realpath -m "$1")
scenario=${SCENARIO:-unique}
secs=${SECS:-10}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}
watchers=${WATCHERS:-0}

fail() { echo "profile: $*" >&2; exit 1; }
log() { printf '== %s\n' "$*" >&2; }

if ! command -v perf >/dev/null; then
  log "installing linux-perf"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi
if ! command -v inferno-flamegraph >/dev/null; then
  log "installing inferno"
  cargo install --locked -q inferno
fi

serve_args=()
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh

log "$scenario, concurrency $conc, $accounts accounts, $watchers watchers: profiling $secs s"
# perf samples the measured calls only: `--during` starts it after the set-up
# and the warm-up.
"${BENCH_BIN:-$bin}" bench --target "$target" --concurrency "$conc" --duration "${secs}s" --warmup 2s \
  --accounts "$accounts" --scenario "$scenario" --watchers "$watchers" --database-url "$db_url" \
  --during "perf record -q -F 499 -e cpu-clock --call-graph dwarf,16384 -p $server \
    -o $work/perf.data -- sleep $secs 2>/dev/null" --json >"$work/bench.json" \
  || fail "the bench failed"
folded=${out%.svg}.folded
perf script -i "$work/perf.data" 2>/dev/null | inferno-collapse-perf >"$folded"
inferno-flamegraph --title "ledger serve: $scenario, c=$conc" <"$folded" >"$out"
python3 - "$work/bench.json" "$folded" <<'PY'
import collections, json, sys
bench = json.load(open(sys.argv[1]))
total, self_time = 0, collections.Counter()
for line in open(sys.argv[2]):
    stack, _, count = line.rstrip().rpartition(" ")
    total += int(count)
    self_time[stack.split(";")[-1]] += int(count)
print(f"{bench['calls_per_second']:.0f} calls/s while profiled; self time of the busiest functions:")
for name, n in self_time.most_common(25):
    print(f"{100 * n / total:5.1f}%  {name[:110]}")
PY
echo "flamegraph: $out (stacks: $folded, for inferno-diff-folded)"
