# Sourced by the benchmark scripts: builds the release binary (or takes the one
# LEDGER_BIN names) and starts
# `ledger serve` without a database URL, so it runs a private, freshly initialized
# MariaDB/MySQL in a temporary directory; stops both when the script exits.
#
# Needs `fail` defined; extra `ledger serve` arguments in the array `serve_args`,
# if any. Sets: bin, work, port, target, server (its PID), db_url, db_port,
# db_name, flavor; and the function wait_serving.

if [ -n "${LEDGER_BIN:-}" ]; then
  bin=$LEDGER_BIN
else
  cargo build --release --locked -q
  bin=${CARGO_TARGET_DIR:-target}/release/ledger
fi
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target=http://127.0.0.1:$port
RUST_LOG=info "$bin" serve --log-format json --listen "127.0.0.1:$port" --data-dir "$work/db" \
  --pool-size 32 "${serve_args[@]}" >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
# wait_serving PORT PID LOG: until the `ledger serve` PID answers its health check;
# fails, with its log, if it exits first.
wait_serving() {
  for _ in $(seq 1 600); do
    "$bin" healthcheck --listen "127.0.0.1:$1" --timeout 1s 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; fail "ledger serve exited"; }
    sleep 0.2
  done
  fail "ledger serve did not become healthy in 120 s"
}
wait_serving "$port" "$server" "$work/serve.log"
db_url=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try: fields = json.loads(line).get("url")
    except ValueError: continue
    if fields: print(fields); break' "$work/serve.log")
[ -n "$db_url" ] || fail "no database URL in the server log"
db_port=$(sed -E 's|.*:([0-9]+)/.*|\1|' <<<"$db_url")
db_name=${db_url##*/}
flavor=$(grep -o '"flavor":"[A-Za-z]*"' "$work/serve.log" | head -1 | cut -d'"' -f4)
