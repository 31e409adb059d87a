# Sourced by the smoke scripts: starts `$LEDGER serve` on a free local port with
# its development database (nothing else has to run), waits until it reports
# SERVING, and stops it and removes its data when the script exits.
#
# Needs LEDGER (the binary) and `fail` defined. Sets: ADDR (host:port), pid, data,
# log.

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$port
data=$(mktemp -d)
log=$data/ledger.log
RUST_LOG=warn "$LEDGER" serve --listen "$ADDR" --data-dir "$data/db" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$data"' EXIT

for _ in $(seq 1 300); do
  "$LEDGER" healthcheck --listen "$ADDR" --timeout 1s 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "ledger serve exited"; }
  sleep 0.2
done
"$LEDGER" healthcheck --listen "$ADDR" || fail "never healthy"
