#!/usr/bin/env bash
# Runs the README's tour with ledgerctl against a live `ledger serve`, as
# docs/client.md shows it: accounts opened, a credit, a charge and its replay,
# the account read, the key looked up (its stored reply decoded), a post, a
# decline with exit code 1, and the change stream read with watch-entries
# --limit (as a table and as JSON Lines), the post reversed and a second reversal
# declined, and limits: accounts opened with them, a debit past a floor, set-limits.
#
#   scripts/ledgerctl-smoke.sh [path/to/ledger [path/to/ledgerctl]]
#       (default: target/release/ledger and target/release/ledgerctl; the latter
#        is built with `cargo build --release --locked -p ledgerctl` when missing)
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${CARGO_TARGET_DIR:-target}
LEDGER=${1:-$TARGET/release/ledger}
LEDGERCTL=${2:-$TARGET/release/ledgerctl}
fail() { echo "ledgerctl-smoke: $*" >&2; exit 1; }

[ -x "$LEDGER" ] || fail "no $LEDGER: cargo build --release first"
if [ ! -x "$LEDGERCTL" ] && [ $# -lt 2 ]; then
  cargo build --release --locked -p ledgerctl
fi
[ -x "$LEDGERCTL" ] || fail "no $LEDGERCTL"

# shellcheck source=scripts/lib/dev-serve.sh
. scripts/lib/dev-serve.sh

export LEDGER_SERVER=http://$ADDR
unset LEDGER_TOKEN
# Every command is bounded: a watch that never ends fails the run instead.
ctl() { timeout 60 "$LEDGERCTL" "$@"; }

# expect <description> <exit code> <pattern> <command...>: the command exits with
# the code and its output (stdout and stderr) matches.
expect() {
  local what=$1 code=$2 pattern=$3; shift 3
  local out status=0
  out=$("$@" 2>&1) || status=$?
  [ "$status" = "$code" ] || { echo "$out" >&2; fail "$what: exit $status, not $code"; }
  grep -qE -- "$pattern" <<<"$out" || { echo "$out" >&2; fail "$what: no match for /$pattern/"; }
  echo "ok: $what"
}

expect "open-account" 0 '^  account_id +1$' ctl open-account --key open-1 --currency USD
expect "open-account (merchant)" 0 '^  account_id +2$' ctl open-account --key open-2 --currency USD
expect "open-account (platform)" 0 '^  account_id +3$' ctl open-account --key open-3 --currency USD
expect "credit" 0 '^  balance_after +1\.00 USD$' \
  ctl credit --key fund-1 --account-id 1 --amount 1.00 --currency USD --description top-up
expect "charge" 0 '^  balance_after +0\.70 USD$' \
  ctl charge --key req-42 --account-id 1 --amount 0.30 --currency USD
expect "its retry replays" 0 '^replayed: ' \
  ctl charge --key req-42 --account-id 1 --amount 0.30 --currency USD
expect "a charge without a key prints the one it made" 0 '^idempotency key: [0-9a-f-]{36}$' \
  ctl charge --account-id 1 --amount-minor 1 --currency USD
expect "an amount with other decimals than its currency's exits 2" 2 'exactly 2 decimals' \
  ctl charge --account-id 1 --amount 30 --currency USD
expect "get-account" 0 '^balance +0\.69 USD$' ctl get-account --account-id 1
expect "get-account as JSON" 0 '^  "balance": "69",$' ctl -o json get-account --account-id 1
expect "lookup-key, the reply decoded" 0 '^    balance_after +0\.70 USD$' ctl lookup-key --key req-42
expect "lookup-key names the method" 0 '^method +/ledger\.v1\.Ledger/Charge$' ctl lookup-key --key req-42
expect "post, a row per entry" 0 '^ +[0-9]+ +3 +TRANSFER_IN +0\.05 USD .* 1$' \
  ctl post --key sale-17 --leg 1:2:50:USD --leg 1:3:5:USD
expect "a decline exits 1" 1 '^reason +INSUFFICIENT_FUNDS$' \
  ctl charge --key req-43 --account-id 1 --amount 10.00 --currency USD
expect "a declined leg names it" 1 '^leg +1$' \
  ctl post --key sale-18 --leg 1:2:1:USD --leg 1:3:1000:USD
expect "a decline as JSON" 1 '"reason": "INSUFFICIENT_FUNDS"' \
  ctl -o json charge --key req-43 --account-id 1 --amount 10.00 --currency USD
# The credit, two charges and the post's four entries: sequences 1 to 7.
out=$(ctl watch-entries --after-sequence 0 --limit 7) || fail "watch-entries: exit $?: $out"
[ "$(grep -cE '^[0-9]+ ' <<<"$out")" = 7 ] || fail "watch-entries: not 7 entries: $out"
grep -qE '^7 +[0-9]+ +3 +TRANSFER_IN +0\.05 USD ' <<<"$out" || fail "watch-entries: no 7th: $out"
echo "ok: watch-entries --limit 7"
out=$(ctl -o json watch-entries --after-sequence 2 --account-id 1 --limit 3) || fail "watch-entries -o json: $out"
[ "$(wc -l <<<"$out")" = 3 ] || fail "watch-entries -o json: not 3 lines: $out"
grep -q '"kind":"ENTRY_KIND_TRANSFER_OUT".*"sequence":"6"' <<<"$(tail -n1 <<<"$out")" \
  || fail "watch-entries -o json: $out"
echo "ok: watch-entries -o json, one account"
expect "watch-entries of an unknown account exits 1" 1 'ACCOUNT_NOT_FOUND' \
  ctl watch-entries --account-id 999 --limit 1
# The post reversed, each mirror naming the entry it undoes; a second reversal
# exits 1 naming the first.
expect "reverse" 0 'REVERSES_ENTRY_ID$' \
  ctl reverse --key undo-sale-17 --original-key sale-17
expect "a second reversal exits 1" 1 '^reversal_key +undo-sale-17$' \
  ctl reverse --key undo-sale-17-again --original-key sale-17
# Limits: a funding account with no floor, a customer on a credit line, a transfer
# between them, a debit past the floor and the line widened.
expect "open-account with no floor" 0 '^  limits +no floor, no ceiling$' \
  ctl open-account --key open-funding --currency USD --no-min-balance
expect "open-account on a credit line" 0 '^  limits +floor -50\.00 USD, ceiling 2500\.00 USD$' \
  ctl open-account --key open-customer --currency USD --min-balance -50.00 --max-balance 2500.00
expect "a transfer from the funding account" 0 '^  balance_after +-10\.00 USD$' \
  ctl transfer --key fund-customer --from-account-id 4 --to-account-id 5 --amount 10.00 --currency USD
expect "a debit past the floor exits 1" 1 '^min_balance +-5000$' \
  ctl charge --key big-buy --account-id 5 --amount 60.01 --currency USD
expect "set-limits, its amounts read in the currency given" 0 '^  kind +LIMITS$' \
  ctl set-limits --key line-2 --account-id 5 --min-balance -100.00 --max-balance 2500.00 --currency USD
expect "a charge tagged with metadata" 0 'order_id' \
  ctl charge --key order-1001 --account-id 5 --amount 0.25 --currency USD --metadata order_id=A-1001
expect "search-entries, a table" 0 ' CHARGE +0\.25 USD +9\.75 USD +order-1001 ' \
  ctl search-entries --metadata order_id=A-1001
expect "list-accounts, a table" 0 '^ +5 +9\.75 USD ' ctl list-accounts
expect "get-balance now" 0 '^balance +9\.75 USD$' ctl get-balance --account-id 5
expect "get-balance not reached exits 1" 1 '^reason +POINT_NOT_REACHED$' \
  ctl get-balance --account-id 5 --as-of-sequence 999999

kill -TERM $pid
wait $pid || fail "ledger serve exited with $? on SIGTERM"
echo "ok: SIGTERM exits 0"
