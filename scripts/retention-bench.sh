#!/usr/bin/env bash
# What key retention costs and does, on one fresh private database:
#
# 1. bytes on disk per charge: unique charges for SECS, then InnoDB's own sizes
#    of every index of idempotency_keys and entries (mysql.innodb_index_stats,
#    after ANALYZE), per row;
# 2. the purge rate: OLD_ROWS key rows two days old, purged by `ledger purge`;
# 3. its effect on charges, on the same database: the unique-charge rate without a
#    purge (A); with `ledger purge` working through a backlog of OLD_ROWS (B); and
#    in the steady state of a retention, where each round deletes what the calls
#    created since the last (C: a round every second, of rows older than 2 s).
#
# Environment: SECS (15), OLD_ROWS (1000000), CONCURRENCY (16), ACCOUNTS (10000).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${SECS:-15}
old_rows=${OLD_ROWS:-1000000}
conc=${CONCURRENCY:-16}
accounts=${ACCOUNTS:-10000}

fail() { echo "retention-bench: $*" >&2; exit 1; }
log() { printf '\n== %s\n' "$*" >&2; }

serve_args=()
# shellcheck source=scripts/lib/private-serve.sh
. scripts/lib/private-serve.sh
sql() { mysql -h127.0.0.1 -P"$db_port" -uroot -N -B "$db_name" -e "$1"; }

bench() {
  "$bin" bench --target "$target" --concurrency "$conc" --accounts "$accounts" \
    --duration "${secs}s" --warmup 2s --json --scenario unique "$@" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f %.2f" % (r["calls_per_second"], r["p50_ms"], r["p99_ms"]))'
}

log "1. bytes per charge: unique charges for ${secs} s"
read -r rate _ _ < <(bench)
sql "ANALYZE TABLE idempotency_keys, entries" >/dev/null
echo "charges: $rate/s"
sql "SELECT s.table_name, s.index_name,
            ROUND(s.stat_value * @@innodb_page_size / t.n) AS bytes_per_row, t.n AS \`rows\`
     FROM mysql.innodb_index_stats s
     JOIN (SELECT 'idempotency_keys' AS tn, COUNT(*) AS n FROM idempotency_keys
           UNION ALL SELECT 'entries', COUNT(*) FROM entries) t ON t.tn = s.table_name
     WHERE s.database_name = DATABASE() AND s.stat_name = 'size'
       AND s.table_name IN ('idempotency_keys', 'entries')
     ORDER BY s.table_name, s.index_name" \
  | awk 'BEGIN {printf "%-18s %-26s %14s %10s\n", "table", "index", "bytes/row", "rows"}
         {printf "%-18s %-26s %14s %10s\n", $1, $2, $3, $4; total[$1] += $3}
         END {for (t in total) printf "total %-18s %8d bytes/row\n", t, total[t]}'

seed() {
  sql "INSERT INTO idempotency_keys
         (namespace, idempotency_key, method, fingerprint, outcome_code, outcome, created_at)
       SELECT '', CONCAT('old-$1-', n), 3, UNHEX(SHA2(n, 256)), 9, REPEAT('x', 60),
              UTC_TIMESTAMP(6) - INTERVAL 2 DAY + INTERVAL n MICROSECOND
       FROM (SELECT a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d + 100000*g.d + 1000000*h.d AS n
             FROM (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                   UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a,
                  (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                   UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b,
                  (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                   UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c,
                  (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                   UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e,
                  (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                   UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) f,
                  (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                   UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) g,
                  (SELECT 0 d UNION ALL SELECT 1) h) s
       WHERE n < $old_rows"
}

log "2. purge rate: $old_rows key rows two days old"
seed a
started=$(date +%s.%N)
"$bin" purge --database-url "$db_url" --older-than 1h
ended=$(date +%s.%N)
python3 -c "print(f'purge alone: {$old_rows / ($ended - $started):.0f} rows/s over {$ended - $started:.1f} s')"

log "3. charges without (A) and with (B) a purge running"
read -r a_rate a_p50 a_p99 < <(bench)
seed b
"$bin" purge --database-url "$db_url" --older-than 1h >"$work/purge.out" 2>&1 &
purge=$!
p_started=$(date +%s.%N)
read -r b_rate b_p50 b_p99 < <(bench)
b_ended=$(date +%s.%N)
running=yes; kill -0 $purge 2>/dev/null || running="no (it finished first)"
wait $purge
p_ended=$(date +%s.%N)
cat "$work/purge.out"
( while :; do "$bin" purge --database-url "$db_url" --older-than 2s >>"$work/steady.out" 2>&1; sleep 1; done ) &
steady=$!
sleep 3
read -r c_rate c_p50 c_p99 < <(bench)
kill $steady; wait $steady 2>/dev/null || true
steady_rows=$(awk '{s += $2} END {print s + 0}' "$work/steady.out")
python3 - <<PY
a, b, c = $a_rate, $b_rate, $c_rate
print(f"A no purge:   {a:.0f} charges/s  p50 $a_p50 ms  p99 $a_p99 ms")
print(f"B backlog:    {b:.0f} charges/s  p50 $b_p50 ms  p99 $b_p99 ms  ({b / a:.2f}x A)")
print(f"C steady:     {c:.0f} charges/s  p50 $c_p50 ms  p99 $c_p99 ms  ({c / a:.2f}x A), $steady_rows rows purged meanwhile")
print(f"purge under load: {$old_rows / ($p_ended - $p_started):.0f} rows/s; still running when B ended: $running")
PY
