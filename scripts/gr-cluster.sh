#!/usr/bin/env bash
# gr-cluster.sh - 3-member MySQL Group Replication cluster, MULTI-PRIMARY, loopback only,
# using the Oracle MySQL (Debian sid .debs) unpacked by mysql-sid.sh under /opt/mysql-sid.
# mysqld/mysql run through sid's own dynamic loader, exactly like mysql-sid.sh does.
#
# Usage: gr-cluster.sh start|stop|status|wipe|kill N|restart-node N|sql N [mysql args...]
#   start  : initialize missing datadirs (--initialize-insecure), start the 3 mysqld, bootstrap
#            the group on the member with the most GTIDs (member 1 on a fresh cluster), join the
#            others, wait until 3 members are ONLINE. Idempotent (running members are kept).
#   stop   : STOP GROUP_REPLICATION on members 3,2,1 in turn (last one out holds all GTIDs),
#            then mysqladmin shutdown of all three in parallel.
#   status : replication_group_members as seen by the first reachable member + pid/RSS.
#   wipe   : stop, then delete all datadirs (next start is from scratch).
#   kill N : SIGKILL member N (the group expels it after group_replication_member_expel_timeout).
#   restart-node N : start member N's mysqld again and rejoin it (distributed recovery), until ONLINE.
#   sql N  : mysql client connected to member N over TCP (root, no password).
#   start --netns : each member in its own network namespace, at 10.232.0.N (same ports), reached
#            from this host over a bridge (scripts/lib/netns.sh); stop removes them (also after a
#            failed run). Then also:
#   partition N [service] : cut member N off from the other members (and from this host);
#   partition-oneway N    : lose what member N sends to the others, not the reverse;
#   heal   : remove every cut and delay, rejoin members that left (ERROR/OFFLINE), wait until all
#            running members are ONLINE;
#   slow N MS : delay what member N sends (netem); exit 2 if the kernel lacks netem.
#   urls   : the members' URLs as this host reaches them, comma-separated.
# Env: GR_BASE ($TMPDIR/gr-cluster)  GR_PREFIX (/opt/mysql-sid)  GR_PORT_BASE (3320 -> 3321..3323)
#      GR_XCOM_BASE (24900 -> 24901..24903)  GR_GROUP_NAME (fixed uuid)  GR_START_TIMEOUT (120)
#      GR_EXTRA_CNF (extra [mysqld] lines for all members)
#      CLOCK_OFFSET (seconds, e.g. -30: the wall clock of the members this run starts, under
#      libfaketime; `CLOCK_OFFSET=-30 gr-cluster.sh restart-node 3`: a member whose clock drifted)
set -euo pipefail

BASE=${GR_BASE:-${TMPDIR:-/tmp}/gr-cluster}
PREFIX=${GR_PREFIX:-/opt/mysql-sid}
PORT_BASE=${GR_PORT_BASE:-3320}
# Below the kernel's ephemeral ports (32768-60999 by default): in that range a
# client's outgoing connection can take a killed member's group port before the
# member restarts, and it then cannot rejoin ("Unable to announce tcp port").
XCOM_BASE=${GR_XCOM_BASE:-24900}
GROUP_NAME=${GR_GROUP_NAME:-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee}
START_TIMEOUT=${GR_START_TIMEOUT:-120}
N=3
RPL_USER=gr_rpl RPL_PASS=gr_rpl_pw
NETNS_PREFIX=lgr NETNS_SUBNET=10.232.0 NETNS_NODES=(1 2 3)
# shellcheck source=lib/netns.sh
. "$(dirname "$0")/lib/netns.sh"

ROOT=$PREFIX/root
LIB=$ROOT/usr/lib/x86_64-linux-gnu
LDSO=$LIB/ld-linux-x86-64.so.2
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
MYSQLD=$ROOT/usr/sbin/mysqld

log() { printf '[gr %(%T)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ ! -x $LDSO || ! -x $MYSQLD ]]; then  # a fresh machine: unpack MySQL first
  log "no MySQL in $PREFIX: mysql-sid.sh install"
  MYSQL_SID_PREFIX=$PREFIX "$(dirname "$0")/mysql-sid.sh" install
fi
[[ -x $LDSO && -x $MYSQLD ]] || die "no MySQL install in $PREFIX (run mysql-sid.sh install first)"
GR_SO=$ROOT/usr/lib/mysql/plugin/group_replication.so
[[ -f $GR_SO ]] || die "group_replication.so missing"
# group_replication.so loads libtirpc and the Kerberos libraries from the host, not from the
# sid install: make sure a fresh machine has them (asked of the loader itself, as mysqld will).
gr_missing_libs() { "$LDSO" --library-path "$LIB" --list "$GR_SO" 2>&1 | grep 'not found' || true; }
if [[ -n $(gr_missing_libs) ]]; then
  log "group_replication.so lacks: $(gr_missing_libs | awk '{print $1}' | xargs); installing the host libraries"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    libtirpc3 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 >/dev/null
  [[ -z $(gr_missing_libs) ]] || die "group_replication.so still lacks: $(gr_missing_libs)"
fi

dir()  { echo "$BASE/m$1"; }
cnf()  { echo "$BASE/m$1/my.cnf"; }
port() { echo $((PORT_BASE + $1)); }
xcom() { echo $((XCOM_BASE + $1)); }
pidfile() { echo "$BASE/m$1/run/mysqld.pid"; }
netns_mode() { [[ -e $BASE/netns ]]; }
addr() { if netns_mode; then netns_addr "$1"; else echo 127.0.0.1; fi; }
host_pattern() { if netns_mode; then echo "$NETNS_SUBNET.%"; else echo 127.0.0.1; fi; }

run_bin() {  # run a sid binary through sid's loader, clean environment (as mysql-sid.sh)
  local bin=$1; shift
  env -i PATH=/usr/bin:/bin HOME="$BASE" LC_ALL=C GCONV_PATH="$LIB/gconv" ${TZ:+TZ="$TZ"} \
    "$LDSO" --library-path "$LIB" "$ROOT/$bin" "$@"
}
# SQL on stdin to member $1 over its unix socket (root@localhost, no password)
sql()  { local i=$1; shift; run_bin usr/bin/mysql --defaults-file="$(cnf "$i")" --protocol=SOCKET -uroot -N -B "$@"; }
q()    { sql "$1" -e "$2"; }
admin() { local i=$1; shift; run_bin usr/bin/mysqladmin --defaults-file="$(cnf "$i")" --protocol=SOCKET -uroot "$@"; }

member_pid() {  # pid of OUR mysqld for member $1, or fail
  local pf pid; pf=$(pidfile "$1")
  [[ -f $pf ]] || return 1
  pid=$(cat "$pf" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] && tr '\0' '\n' < "/proc/$pid/cmdline" | grep -qxF -e "--defaults-file=$(cnf "$1")" || return 1
  echo "$pid"
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_cnf() {
  local i=$1 d seeds="" j
  d=$(dir "$i")
  for j in $(seq 1 $N); do seeds+="${seeds:+,}$(addr "$j"):$(xcom "$j")"; done
  mkdir -p "$d"/{data,run,log,tmp,files}; chmod 700 "$d/tmp" "$d/files"
  cat > "$(cnf "$i")" <<EOF
# generated by gr-cluster.sh (member $i)
[mysqld]
user                 = $(id -un)
basedir              = $ROOT/usr
datadir              = $d/data
plugin_dir           = $ROOT/usr/lib/mysql/plugin
lc_messages_dir      = $ROOT/usr/share/mysql
character_sets_dir   = $ROOT/usr/share/mysql/charsets
tmpdir               = $d/tmp
secure_file_priv     = $d/files
socket               = $d/run/mysqld.sock
pid_file             = $d/run/mysqld.pid
log_error            = $d/log/mysqld.log
port                 = $(port "$i")
bind_address         = $(addr "$i")
mysqlx               = OFF
skip_name_resolve    = ON
# --- small footprint (3 servers on one box)
innodb_buffer_pool_size = 128M
# --- replication / GR prerequisites
server_id            = $i
gtid_mode            = ON
enforce_gtid_consistency = ON
log_bin              = binlog
log_replica_updates  = ON
relay_log            = relay-bin
binlog_checksum      = NONE
disabled_storage_engines = "MyISAM,BLACKHOLE,FEDERATED,ARCHIVE,MEMORY"
report_host          = $(addr "$i")
report_port          = $(port "$i")
plugin_load_add      = group_replication.so
# A member starts read-only and the group makes it writable once it is ONLINE: a
# client that reaches a restarted member before START GROUP_REPLICATION cannot
# commit there what the group lacks (the member could then never rejoin:
# "more executed transactions than those present in the group").
super_read_only      = ON
loose-group_replication_group_name     = $GROUP_NAME
loose-group_replication_start_on_boot  = OFF
loose-group_replication_bootstrap_group = OFF
loose-group_replication_local_address  = $(addr "$i"):$(xcom "$i")
loose-group_replication_group_seeds    = $seeds
loose-group_replication_ip_allowlist   = 127.0.0.1/8$(netns_mode && echo ",$NETNS_SUBNET.0/24")
$(partition_cnf)
loose-group_replication_single_primary_mode        = OFF
loose-group_replication_enforce_update_everywhere_checks = ON
loose-group_replication_recovery_use_ssl           = ON
loose-group_replication_recovery_get_public_key    = ON
${GR_EXTRA_CNF:-}

[client]
user                 = root
socket               = $d/run/mysqld.sock
port                 = $(port "$i")
EOF
}

# On its own network a member can be cut off. A member that cannot reach a
# majority leaves the group (ERROR, read-only, its pending transactions rolled
# back) after unreachable_majority_timeout s instead of blocking writes for ever;
# the majority expels a member as soon as it is suspected (5 s of silence,
# fixed), so it goes on without it; heal rejoins members that left, so no
# automatic rejoin competes with it.
partition_cnf() {
  netns_mode || return 0
  cat <<EOF
loose-group_replication_unreachable_majority_timeout = ${GR_UNREACHABLE_MAJORITY_TIMEOUT:-5}
loose-group_replication_member_expel_timeout         = 0
loose-group_replication_autorejoin_tries             = 0
loose-group_replication_exit_state_action            = READ_ONLY
EOF
}

init_member() {  # --initialize-insecure + users (not binlogged) + recovery channel credentials
  local i=$1 d; d=$(dir "$i")
  [[ -f $d/.initialized ]] && return 0
  log "m$i: initialize-insecure $d/data"
  rm -rf "$d/data"; mkdir -p "$d/data"
  run_bin usr/sbin/mysqld --defaults-file="$(cnf "$i")" --initialize-insecure --super-read-only=OFF \
    || { tail -20 "$d/log/mysqld.log" >&2; die "m$i: initialize failed"; }
  touch "$d/.needs-users"
  date -u +%FT%TZ > "$d/.initialized"
}

launch_member() {
  local i=$1 d; d=$(dir "$i")
  if member_pid "$i" >/dev/null; then log "m$i: already running (pid $(member_pid "$i"))"; return 0; fi
  local netns=()
  if netns_mode; then
    netns=(ip netns exec "$(netns_name "$i")")   # execs: the PID is the server's
  else
    port_busy "$(port "$i")" && die "port $(port "$i") in use by another process"
    port_busy "$(xcom "$i")" && die "port $(xcom "$i") in use by another process"
  fi
  rm -f "$(pidfile "$i")"
  log "m$i: starting mysqld on $(addr "$i"):$(port "$i") (xcom $(xcom "$i"))"
  # With CLOCK_OFFSET (seconds, e.g. -30), the server runs under libfaketime: its wall clock
  # that far off, its monotonic clock left alone, as a member whose clock drifted.
  local clock=()
  if [ -n "${CLOCK_OFFSET:-}" ]; then
    [ -e "$FAKETIME_LIB" ] || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libfaketime >/dev/null; }
    clock=(LD_PRELOAD="$FAKETIME_LIB" FAKETIME="$CLOCK_OFFSET" FAKETIME_DONT_FAKE_MONOTONIC=1)
  fi
  setsid "${netns[@]}" env -i PATH=/usr/bin:/bin HOME="$BASE" LC_ALL=C GCONV_PATH="$LIB/gconv" ${TZ:+TZ="$TZ"} "${clock[@]}" \
    "$LDSO" --library-path "$LIB" "$MYSQLD" --defaults-file="$(cnf "$i")" \
    </dev/null >>"$d/log/mysqld.stdout" 2>&1 &
  echo $! > "$d/run/launcher.pid"
}

wait_member() {
  local i=$1 d launcher deadline=$((SECONDS + START_TIMEOUT)); d=$(dir "$i")
  launcher=$(cat "$d/run/launcher.pid" 2>/dev/null || echo 0)
  until member_pid "$i" >/dev/null && admin "$i" --connect-timeout=2 ping >/dev/null 2>&1; do
    if ! kill -0 "$launcher" 2>/dev/null && ! member_pid "$i" >/dev/null; then
      tail -25 "$d/log/mysqld.log" >&2; die "m$i: mysqld exited during startup"; fi
    (( SECONDS < deadline )) || { tail -25 "$d/log/mysqld.log" >&2; die "m$i: not ready after ${START_TIMEOUT}s"; }
    sleep 0.3
  done
  if [[ -f $d/.needs-users ]]; then
    # Local-only accounts: not written to the binlog, so every member keeps an empty GTID set.
    sql "$i" <<EOF
SET GLOBAL super_read_only=OFF;
SET SQL_LOG_BIN=0;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS '$RPL_USER'@'%' IDENTIFIED WITH caching_sha2_password BY '$RPL_PASS';
GRANT REPLICATION SLAVE, CONNECTION_ADMIN, BACKUP_ADMIN, GROUP_REPLICATION_STREAM ON *.* TO '$RPL_USER'@'%';
FLUSH PRIVILEGES;
SET SQL_LOG_BIN=1;
CHANGE REPLICATION SOURCE TO SOURCE_USER='$RPL_USER', SOURCE_PASSWORD='$RPL_PASS' FOR CHANNEL 'group_replication_recovery';
SET GLOBAL super_read_only=ON;
EOF
    rm -f "$d/.needs-users"
  fi
  if netns_mode; then  # this host reaches the member from the bridge's address
    sql "$i" <<EOF
SET @was = @@GLOBAL.super_read_only;
SET GLOBAL super_read_only=OFF;
SET SQL_LOG_BIN=0;
CREATE USER IF NOT EXISTS 'root'@'$(host_pattern)' IDENTIFIED WITH caching_sha2_password BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'$(host_pattern)' WITH GRANT OPTION;
SET SQL_LOG_BIN=1;
SET GLOBAL super_read_only=@was;
EOF
  fi
  log "m$i: up (pid $(member_pid "$i"))"
}

gr_state() { q "$1" "SELECT MEMBER_STATE FROM performance_schema.replication_group_members WHERE MEMBER_ID=@@server_uuid" 2>/dev/null || true; }

wait_online() {  # member $1 reaches ONLINE
  local i=$1 s deadline=$((SECONDS + START_TIMEOUT))
  while :; do
    s=$(gr_state "$i")
    [[ $s == ONLINE ]] && return 0
    [[ $s == ERROR ]] && { tail -20 "$(dir "$i")/log/mysqld.log" >&2; die "m$i: group replication state ERROR"; }
    (( SECONDS < deadline )) || die "m$i: not ONLINE after ${START_TIMEOUT}s (state '$s')"
    sleep 0.3
  done
}

pick_bootstrap() {  # member whose gtid_executed contains every other member's
  local i j ok gi
  for i in $(seq 1 $N); do
    ok=1
    for j in $(seq 1 $N); do
      [[ $i == "$j" ]] && continue
      gi=$(q "$j" "SELECT REPLACE(@@GLOBAL.gtid_executed, '\n', '')")
      [[ $(q "$i" "SELECT GTID_SUBSET('$gi', @@GLOBAL.gtid_executed)") == 1 ]] || { ok=0; break; }
    done
    (( ok )) && { echo "$i"; return 0; }
  done
  die "no member holds all others' GTIDs (diverged datadirs?); use '$0 wipe' to start from scratch"
}

any_running() { local i; for i in $(seq 1 $N); do member_pid "$i" >/dev/null && return 0; done; return 1; }

choose_network() {  # start [--netns]: the members' network, fixed while any member runs
  local want=${1:-}
  [[ -z $want || $want == --netns ]] || die "start: unknown option '$want' (only --netns)"
  if any_running; then
    [[ -n $want ]] && ! netns_mode && die "the group runs on loopback; '$0 stop' first"
    [[ -z $want ]] && netns_mode && die "the group runs on its own network; '$0 stop' first"
  fi
  if [[ -n $want ]]; then touch "$BASE/netns"; netns_up; else rm -f "$BASE/netns"; netns_down; fi
}

cmd_start() {
  local t0=$SECONDS t i boot="" s
  mkdir -p "$BASE"
  exec 9>>"$BASE/.lock"; flock -w 60 9 || die "another gr-cluster.sh holds $BASE/.lock"
  choose_network "${1:-}"
  for i in $(seq 1 $N); do write_cnf "$i"; done
  t=$SECONDS
  local pids=() p
  for i in $(seq 1 $N); do member_pid "$i" >/dev/null || { init_member "$i" 9>&- & pids+=($!); }; done
  for p in "${pids[@]}"; do wait "$p" || die "initialize failed"; done
  log "init phase: $((SECONDS - t))s"; t=$SECONDS
  for i in $(seq 1 $N); do launch_member "$i" 9>&-; done
  for i in $(seq 1 $N); do wait_member "$i"; done
  log "mysqld start phase: $((SECONDS - t))s"; t=$SECONDS
  # An existing group? (some member already ONLINE)
  for i in $(seq 1 $N); do [[ $(gr_state "$i") == ONLINE ]] && { boot=$i; break; }; done
  if [[ -z $boot ]]; then
    boot=$(pick_bootstrap)
    log "m$boot: bootstrapping group $GROUP_NAME"
    sql "$boot" <<'EOF'
SET GLOBAL group_replication_bootstrap_group=ON;
START GROUP_REPLICATION;
SET GLOBAL group_replication_bootstrap_group=OFF;
EOF
    wait_online "$boot"
    log "m$boot: ONLINE (bootstrap $((SECONDS - t))s)"; t=$SECONDS
  fi
  for i in $(seq 1 $N); do
    s=$(gr_state "$i")
    [[ $s == ONLINE ]] && continue
    [[ $s == RECOVERING ]] || { log "m$i: joining"; q "$i" "START GROUP_REPLICATION"; }
    wait_online "$i"
    log "m$i: ONLINE (join $((SECONDS - t))s)"; t=$SECONDS
  done
  cmd_status
  log "start total: $((SECONDS - t0))s"
}

# Runs "$@" (a function of this script or a command) for at most $1 seconds; false
# if it failed or was stopped. A member whose group is broken can leave STOP
# GROUP_REPLICATION or a shutdown waiting for ever: a stop must still end.
bounded() {
  local secs=$1 pid waited=0; shift
  "$@" & pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if (( waited >= secs * 10 )); then
      log "gave up after ${secs}s: $*"
      pkill -KILL -P "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      return 1
    fi
    sleep 0.1; waited=$((waited + 1))
  done
  wait "$pid"
}

shutdown_member() {  # mysqladmin shutdown (SIGTERM fallback), SIGKILL if it is not gone in 120 s
  local i=$1 pid deadline
  pid=$(member_pid "$i") || return 0
  # mysqladmin waits (up to an hour by default) for the server to go: bound it, the loop below waits.
  bounded 10 admin "$i" --shutdown-timeout=1 shutdown 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 120))
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS >= deadline )); then
      log "m$i: pid $pid still running after 120s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 30))
      while kill -0 "$pid" 2>/dev/null; do
        (( SECONDS < deadline )) || die "m$i: pid $pid survived SIGKILL"
        sleep 0.1
      done
      break
    fi
    sleep 0.1
  done
  log "m$i: stopped (pid $pid)"
}

cmd_stop() {  # leave the group one by one (3,2,1: the last one out holds every GTID), then shut down in parallel
  local t0=$SECONDS i pids=() rc=0
  netns_mode && netns_heal   # a cut member would wait for the others to leave
  for i in $(seq $N -1 1); do
    member_pid "$i" >/dev/null || { log "m$i: not running"; continue; }
    if [[ $(gr_state "$i") =~ ^(ONLINE|RECOVERING|ERROR)$ ]]; then
      log "m$i: STOP GROUP_REPLICATION"
      bounded 60 q "$i" "STOP GROUP_REPLICATION" >/dev/null 2>&1 || log "m$i: left without leaving the group"
    fi
  done
  for i in $(seq 1 $N); do shutdown_member "$i" & pids+=($!); done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  rm -f "$BASE/netns"
  netns_down
  log "stop total: $((SECONDS - t0))s"
  return $rc
}

cmd_status() {
  local i pid any="" rc=3
  for i in $(seq 1 $N); do
    if pid=$(member_pid "$i"); then
      log "m$i: pid $pid port $(port "$i") rss $(awk '/VmRSS/{print $2" "$3}' "/proc/$pid/status") state $(gr_state "$i")"
      any=${any:-$i}; rc=0
    else log "m$i: stopped"; fi
  done
  [[ -n $any ]] && q "$any" "SELECT MEMBER_HOST, MEMBER_PORT, MEMBER_STATE, MEMBER_ROLE, MEMBER_VERSION FROM performance_schema.replication_group_members ORDER BY MEMBER_PORT" | sed 's/^/    /' >&2
  return $rc
}

cmd_kill() {
  local pid; pid=$(member_pid "$1") || die "m$1: not running"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  log "m$1: killed (pid $pid)"
}

cmd_restart_node() {
  local i=$1 t0=$SECONDS
  exec 9>>"$BASE/.lock"; flock -w 60 9 || die "another gr-cluster.sh holds $BASE/.lock"
  write_cnf "$i"
  launch_member "$i" 9>&-
  wait_member "$i"
  [[ $(gr_state "$i") =~ ^(ONLINE|RECOVERING)$ ]] || { log "m$i: rejoining"; q "$i" "START GROUP_REPLICATION"; }
  wait_online "$i"
  log "m$i: ONLINE again in $((SECONDS - t0))s"
}

cmd_urls() {
  local i out=""
  for i in $(seq 1 $N); do out+="${out:+,}mysql://root@$(addr "$i"):$(port "$i")"; done
  echo "$out"
}

online_seen_by() { q "$1" "SELECT COUNT(*) FROM performance_schema.replication_group_members WHERE MEMBER_STATE='ONLINE'" 2>/dev/null || echo 0; }

kill_clients() {  # ends member $1's client sessions but this one
  local id
  for id in $(q "$1" "SELECT ID FROM performance_schema.processlist WHERE USER IS NOT NULL \
      AND USER NOT IN ('system user', 'event_scheduler') AND ID <> CONNECTION_ID()" 2>/dev/null || true); do
    q "$1" "KILL $id" >/dev/null 2>&1 || true
  done
}

cmd_heal() {  # no cut, no delay; members that left rejoin; until every running member is ONLINE in one group
  local i s running whole deadline=$((SECONDS + START_TIMEOUT)) t0=$SECONDS
  netns_mode || die "heal: the group is not on its own network (start --netns)"
  netns_heal
  while :; do
    running=0 whole=1
    for i in $(seq 1 $N); do
      member_pid "$i" >/dev/null || continue
      running=$((running + 1))
      s=$(gr_state "$i")
      if [[ $s == ERROR || $s == OFFLINE || -z $s ]]; then
        log "m$i: ${s:-not a member}: rejoining"
        # A client session waiting for the group's sync holds STOP GROUP_REPLICATION
        # up (for minutes); the member's clients lose their connections, as a
        # member that leaves its group would drop them.
        kill_clients "$i"
        q "$i" "STOP GROUP_REPLICATION" >/dev/null 2>&1 || true
        q "$i" "START GROUP_REPLICATION" >/dev/null 2>&1 || log "m$i: START GROUP_REPLICATION failed; trying again"
        whole=0
      fi
    done
    for i in $(seq 1 $N); do
      member_pid "$i" >/dev/null || continue
      [[ $(gr_state "$i") == ONLINE && $(online_seen_by "$i") == "$running" ]] || whole=0
    done
    (( whole )) && break
    (( SECONDS < deadline )) || die "heal: the group is not whole after ${START_TIMEOUT}s"
    sleep 0.5
  done
  log "healed: $running members ONLINE after $((SECONDS - t0))s"
}

valid_member() { [[ ${1:-} =~ ^[1-3]$ ]] || die "member must be 1..$N"; }

cmd_wipe() { cmd_stop; local i; for i in $(seq 1 $N); do rm -rf "$(dir "$i")"; done; log "wiped $BASE/m*"; }

case "${1:-}" in
  start)  cmd_start "${2:-}" ;;
  urls)   cmd_urls ;;
  partition) valid_member "${2:-}"; netns_partition "$2" both "${3:+service}" ;;
  partition-oneway) valid_member "${2:-}"; netns_partition "$2" oneway ;;
  heal)   cmd_heal ;;
  slow)   valid_member "${2:-}"; netns_slow "$2" "${3:-}" ;;
  stop)   cmd_stop ;;
  status) cmd_status ;;
  wipe)   cmd_wipe ;;
  kill)   valid_member "${2:-}"; cmd_kill "$2" ;;
  restart-node) valid_member "${2:-}"; cmd_restart_node "$2" ;;
  sql)    i=${2:?member}; shift 2
          exec env -i PATH=/usr/bin:/bin HOME="$BASE" LC_ALL=C GCONV_PATH="$LIB/gconv" \
            "$LDSO" --library-path "$LIB" "$ROOT/usr/bin/mysql" --no-defaults --protocol=TCP \
            -h"$(addr "$i")" -P"$(port "$i")" -uroot --ssl-mode=DISABLED "$@" ;;
  *) echo "usage: $0 start [--netns]|stop|status|wipe|kill N|restart-node N|sql N [mysql args]|urls|partition N [service]|partition-oneway N|heal|slow N MS" >&2; exit 2 ;;
esac
