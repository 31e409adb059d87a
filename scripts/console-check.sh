#!/usr/bin/env bash
# The console in a real browser: Debian's Chromium driven by Playwright (from
# PyPI, told to use that Chromium: it downloads no browser of its own), against a
# live `ledger serve` with its development database (scripts/console_check.py
# says what it checks). Installs Chromium and Playwright when they are missing.
#
#   scripts/console-check.sh [path/to/ledger [path/to/ledgerctl]] [--screenshots DIR] [--measure]
#
# (default: target/release/ledger and target/release/ledgerctl)
set -euo pipefail
cd "$(dirname "$0")/.."

LEDGER=target/release/ledger
LEDGERCTL=target/release/ledgerctl
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then LEDGER=$1; shift; fi
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then LEDGERCTL=$1; shift; fi
fail() { echo "console-check: $*" >&2; exit 1; }
[ -x "$LEDGER" ] || fail "no ledger binary at $LEDGER"
[ -x "$LEDGERCTL" ] || fail "no ledgerctl binary at $LEDGERCTL"

if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
fi
if ! python3 -c 'import playwright' 2>/dev/null; then
  python3 -m pip install -q playwright
fi

exec python3 scripts/console_check.py "$LEDGER" "$LEDGERCTL" "$@"
