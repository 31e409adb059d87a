//! Every metric the service records, by name, and the Prometheus exporter.

use std::net::SocketAddr;
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::proto::code_name;

const RPCS: &str = "ledger_rpcs_total";
const RPC_SECONDS: &str = "ledger_rpc_duration_seconds";
const REPLAYS: &str = "ledger_replays_total";
const KEY_REUSES: &str = "ledger_key_reuses_total";
const LOCK_WAIT_TIMEOUTS: &str = "ledger_lock_wait_timeouts_total";
const RETRIES: &str = "ledger_transaction_retries_total";
const POOL_CONNECTIONS: &str = "ledger_db_pool_connections";
const DB_UP: &str = "ledger_db_up";
const NODE_TAKES_WRITES: &str = "ledger_node_takes_writes";
const BATCH_CALLS: &str = "ledger_batch_calls";
const PHASE_SECONDS: &str = "ledger_transaction_phase_seconds";
const BATCH_SPLITS: &str = "ledger_batch_splits_total";
const BATCH_WAITING: &str = "ledger_batch_waiting_calls";
const BATCH_STALLS: &str = "ledger_batch_stalls_total";
const MEMORY_WAITS: &str = "ledger_call_memory_waits_total";
const MEMORY_WAITING: &str = "ledger_calls_waiting_for_memory";
const CONNECTIONS_RETIRED: &str = "ledger_db_connections_retired_total";
const ID_BLOCK_WAITS: &str = "ledger_id_block_waits_total";
const KEYS_PURGED: &str = "ledger_keys_purged_total";
const OLDEST_KEY_AGE: &str = "ledger_oldest_key_age_seconds";
const STREAM_WATCHERS: &str = "ledger_stream_watchers";
const MEMORY_BOUND: &str = "ledger_memory_bound_bytes";
const STREAM_ENTRIES: &str = "ledger_stream_entries_total";
const STREAM_LAG: &str = "ledger_stream_lag_seconds";
const STREAM_SEQUENCE: &str = "ledger_stream_sequence";
const STREAM_ASSIGNER: &str = "ledger_stream_assigner";

/// Latency buckets, in seconds: a durable commit takes about a millisecond, a lock
/// wait up to the configured bound.
const LATENCY_BUCKETS: &[f64] = &[
    0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Transaction phase buckets, in seconds: a round trip takes a tenth of a
/// millisecond or more, a batch's writes a few milliseconds, a lock wait up to the
/// configured bound.
const PHASE_BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Stream lag buckets, in seconds: a round follows a local commit within
/// milliseconds, one through another instance within the idle tick, and a
/// killed assigner's entries within its lease.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Serves `/metrics` on `addr` and makes it the process's metrics recorder.
pub fn install(addr: SocketAddr) -> anyhow::Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(RPC_SECONDS.into()),
            LATENCY_BUCKETS,
        )?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(PHASE_SECONDS.into()),
            PHASE_BUCKETS,
        )?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(STREAM_LAG.into()),
            LAG_BUCKETS,
        )?
        .install()
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    describe();
    Ok(())
}

fn describe() {
    describe_counter!(RPCS, "RPCs answered, by method and gRPC status code");
    describe_histogram!(
        RPC_SECONDS,
        metrics::Unit::Seconds,
        "RPC latency, by method"
    );
    describe_counter!(
        REPLAYS,
        "keyed calls answered from a stored outcome, by method"
    );
    describe_counter!(KEY_REUSES, "keys reused for a different request, by method");
    describe_counter!(
        LOCK_WAIT_TIMEOUTS,
        "transactions that waited past the lock-wait bound, by the row waited on"
    );
    describe_counter!(RETRIES, "transactions retried whole, by reason");
    describe_gauge!(POOL_CONNECTIONS, "database pool connections, by state");
    describe_gauge!(DB_UP, "1 while the database answers the health check");
    describe_gauge!(
        NODE_TAKES_WRITES,
        "1 while a node is in its cluster's primary component (the health check), by node"
    );
    describe_histogram!(
        BATCH_CALLS,
        "keyed calls served by one group-commit transaction"
    );
    describe_histogram!(
        PHASE_SECONDS,
        metrics::Unit::Seconds,
        "each phase of a keyed transaction attempt, lone or batched: claim (the entries and holds its calls name found, its keys probed), lock (what its calls need, locked and read), decide (its calls decided and its writes written out), commit (the writes and COMMIT)"
    );
    describe_counter!(
        BATCH_SPLITS,
        "group-commit batches whose calls were run one by one"
    );
    describe_gauge!(
        BATCH_WAITING,
        "keyed calls waiting for a group-commit writer"
    );
    describe_counter!(
        MEMORY_WAITS,
        "calls that found no room for their weight in --max-call-memory and waited for it"
    );
    describe_gauge!(
        MEMORY_WAITING,
        "calls waiting now for room for their weight in --max-call-memory"
    );
    describe_counter!(
        BATCH_STALLS,
        "group-commit batches that outlasted the stall bound while a call waited, and ran on apart from their writer"
    );
    describe_counter!(
        CONNECTIONS_RETIRED,
        "keyed connections closed after a commit rather than pooled, because its batch was large enough to leave megabytes of buffers on them"
    );
    describe_counter!(
        ID_BLOCK_WAITS,
        "blocks of ids a reservation waited for, by kind (accounts, entries, holds): the block taken ahead was not there yet"
    );
    describe_counter!(KEYS_PURGED, "idempotency key rows deleted by retention");
    describe_gauge!(
        OLDEST_KEY_AGE,
        metrics::Unit::Seconds,
        "age of the oldest idempotency key row, as of the last purge"
    );
    describe_gauge!(STREAM_WATCHERS, "WatchEntries streams connected");
    describe_gauge!(
        MEMORY_BOUND,
        "the memory the instance can come to hold, computed at start from its limits"
    );
    describe_counter!(STREAM_ENTRIES, "entries sent to WatchEntries streams");
    describe_histogram!(
        STREAM_LAG,
        metrics::Unit::Seconds,
        "per entry numbered by this instance's assigner: the database's clock at the round less the entry's created_at"
    );
    describe_gauge!(
        STREAM_SEQUENCE,
        "the highest change-stream sequence assigned, as this instance last learned it"
    );
    describe_gauge!(
        STREAM_ASSIGNER,
        "1 while this instance holds the change stream's assigner lease"
    );
}

pub fn rpc(method: &'static str, code: tonic::Code, elapsed: Duration) {
    counter!(RPCS, "method" => method, "code" => code_name(code)).increment(1);
    histogram!(RPC_SECONDS, "method" => method).record(elapsed.as_secs_f64());
}

/// An RPC refused before its handler ran, named by its request's path.
pub fn rpc_refused(method: &str, code: tonic::Code, elapsed: Duration) {
    counter!(RPCS, "method" => method.to_owned(), "code" => code_name(code)).increment(1);
    histogram!(RPC_SECONDS, "method" => method.to_owned()).record(elapsed.as_secs_f64());
}

/// A call began to wait for room in the memory budget.
pub fn call_memory_wait_began() {
    counter!(MEMORY_WAITS).increment(1);
    gauge!(MEMORY_WAITING).increment(1.0);
}

/// A call stopped waiting for room: it has its share, or gave up.
pub fn call_memory_wait_ended() {
    gauge!(MEMORY_WAITING).decrement(1.0);
}

pub fn replay(method: &'static str) {
    counter!(REPLAYS, "method" => method).increment(1);
}

pub fn key_reuse(method: &'static str) {
    counter!(KEY_REUSES, "method" => method).increment(1);
}

/// `row` is `key` or `account`.
pub fn lock_wait_timeout(row: &'static str) {
    counter!(LOCK_WAIT_TIMEOUTS, "row" => row).increment(1);
}

/// `reason` is `conflict` (deadlock, certification failure), `connection` (a
/// connection lost before COMMIT) or `unsettled` (a COMMIT whose outcome was not
/// known, settled through the key).
pub fn retry(reason: &'static str) {
    counter!(RETRIES, "reason" => reason).increment(1);
}

pub fn pool(idle: u32, in_use: u32) {
    gauge!(POOL_CONNECTIONS, "state" => "idle").set(f64::from(idle));
    gauge!(POOL_CONNECTIONS, "state" => "in_use").set(f64::from(in_use));
}

#[expect(clippy::cast_precision_loss, reason = "a batch holds at most 64 calls")]
pub fn batch(calls: usize) {
    histogram!(BATCH_CALLS).record(calls as f64);
}

/// A phase of a keyed transaction attempt (see [`Phase`]), and how long it took.
pub fn transaction_phase(phase: Phase, elapsed: Duration) {
    histogram!(PHASE_SECONDS, "phase" => phase.name()).record(elapsed.as_secs_f64());
}

/// The phases of a keyed transaction attempt, in order.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    /// Finding the entries and holds its calls name, and probing their keys.
    Claim,
    /// Locking and reading what its new calls need.
    Lock,
    /// Deciding each call and writing out the batch of writes.
    Decide,
    /// The writes and COMMIT, one round trip.
    Commit,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Lock => "lock",
            Self::Decide => "decide",
            Self::Commit => "commit",
        }
    }
}

/// `calls` more (or, negative, fewer) calls wait for a group-commit writer.
#[expect(clippy::cast_precision_loss, reason = "a count of waiting calls")]
pub fn batch_waiting(calls: isize) {
    gauge!(BATCH_WAITING).increment(calls as f64);
}

pub fn connection_retired() {
    counter!(CONNECTIONS_RETIRED).increment(1);
}

pub fn batch_split() {
    counter!(BATCH_SPLITS).increment(1);
}

pub fn batch_stalled() {
    counter!(BATCH_STALLS).increment(1);
}

/// A reservation of ids of `kind` found too few free and waits for a block.
pub fn id_block_wait(kind: &'static str) {
    counter!(ID_BLOCK_WAITS, "kind" => kind).increment(1);
}

pub fn keys_purged(rows: u64) {
    counter!(KEYS_PURGED).increment(rows);
}

pub fn oldest_key_age(seconds: f64) {
    gauge!(OLDEST_KEY_AGE).set(seconds);
}

/// `watchers` more (or, negative, fewer) WatchEntries streams are connected.
#[expect(clippy::cast_precision_loss, reason = "a count of watchers")]
pub fn stream_watchers(watchers: isize) {
    gauge!(STREAM_WATCHERS).increment(watchers as f64);
}

#[expect(clippy::cast_precision_loss, reason = "a size in bytes")]
pub fn memory_bound(bytes: usize) {
    gauge!(MEMORY_BOUND).set(bytes as f64);
}

pub fn stream_entries(entries: u64) {
    counter!(STREAM_ENTRIES).increment(entries);
}

/// The lag of `entries` entries numbered together.
pub fn stream_lag(seconds: f64, entries: u64) {
    histogram!(STREAM_LAG).record_many(seconds, usize::try_from(entries).unwrap_or(usize::MAX));
}

pub fn stream_sequence(highest: f64) {
    gauge!(STREAM_SEQUENCE).set(highest);
}

pub fn stream_assigner(held: bool) {
    gauge!(STREAM_ASSIGNER).set(if held { 1.0 } else { 0.0 });
}

pub fn database_up(up: bool) {
    gauge!(DB_UP).set(if up { 1.0 } else { 0.0 });
}

pub fn node_takes_writes(node: &str, takes: bool) {
    gauge!(NODE_TAKES_WRITES, "node" => node.to_owned()).set(if takes { 1.0 } else { 0.0 });
}
