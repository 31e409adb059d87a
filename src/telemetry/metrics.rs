//! Every metric the service records, by name, and the Prometheus exporter.

use std::net::SocketAddr;
use std::time::Duration;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::proto::code_name;

/// A metric: its name, its kind and its help, declared once.
#[derive(Debug, Clone, Copy)]
struct Metric {
    name: &'static str,
    kind: Kind,
    help: &'static str,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    /// A gauge of seconds.
    GaugeSeconds,
    Histogram,
    /// A histogram of seconds.
    HistogramSeconds,
}

impl Metric {
    const fn new(kind: Kind, name: &'static str, help: &'static str) -> Self {
        Self { name, kind, help }
    }
}

const SUBSCRIPTIONS_HELD: Metric = Metric::new(
    Kind::Gauge,
    "ledger_subscriptions_delivering",
    "subscriptions this instance holds the lease of and delivers",
);
const DELIVERIES: Metric = Metric::new(
    Kind::Counter,
    "ledger_deliveries_total",
    "requests sent to subscribers, by subscription and result (ok, failed)",
);
const SUBSCRIPTION_STATE: Metric = Metric::new(
    Kind::Gauge,
    "ledger_subscription_state",
    "the state of each subscription this instance delivers (1 active, 3 failing), by subscription",
);
const SUBSCRIPTION_LAG: Metric = Metric::new(
    Kind::Gauge,
    "ledger_subscription_lag_sequences",
    "sequences read but not yet acknowledged, by subscription",
);
const SUBSCRIPTION_LAG_SECONDS: Metric = Metric::new(
    Kind::GaugeSeconds,
    "ledger_subscription_lag_seconds",
    "age of the oldest entry of the last delivery when it was acknowledged, by subscription",
);

const RPCS: Metric = Metric::new(
    Kind::Counter,
    "ledger_rpcs_total",
    "RPCs answered, by method and gRPC status code",
);
const RPC_SECONDS: Metric = Metric::new(
    Kind::HistogramSeconds,
    "ledger_rpc_duration_seconds",
    "RPC latency, by method",
);
const REPLAYS: Metric = Metric::new(
    Kind::Counter,
    "ledger_replays_total",
    "keyed calls answered from a stored outcome, by method",
);
const KEY_REUSES: Metric = Metric::new(
    Kind::Counter,
    "ledger_key_reuses_total",
    "keys reused for a different request, by method",
);
const LOCK_WAIT_TIMEOUTS: Metric = Metric::new(
    Kind::Counter,
    "ledger_lock_wait_timeouts_total",
    "transactions that waited past the lock-wait bound, by the row waited on",
);
const RETRIES: Metric = Metric::new(
    Kind::Counter,
    "ledger_transaction_retries_total",
    "transactions retried whole, by reason",
);
const POOL_CONNECTIONS: Metric = Metric::new(
    Kind::Gauge,
    "ledger_db_pool_connections",
    "database pool connections, by state",
);
const DB_UP: Metric = Metric::new(
    Kind::Gauge,
    "ledger_db_up",
    "1 while the database answers the health check",
);
const NODE_TAKES_WRITES: Metric = Metric::new(
    Kind::Gauge,
    "ledger_node_takes_writes",
    "1 while a node is in its cluster's primary component (the health check), by node",
);
const BATCH_CALLS: Metric = Metric::new(
    Kind::Histogram,
    "ledger_batch_calls",
    "keyed calls served by one group-commit transaction",
);
const PHASE_SECONDS: Metric = Metric::new(
    Kind::HistogramSeconds,
    "ledger_transaction_phase_seconds",
    "each phase of a keyed transaction attempt, lone or batched: claim (the entries and holds its calls name found, its keys probed), lock (what its calls need, locked and read), decide (its calls decided and its writes written out), commit (the writes and COMMIT)",
);
const BATCH_SPLITS: Metric = Metric::new(
    Kind::Counter,
    "ledger_batch_splits_total",
    "group-commit batches whose calls were run one by one",
);
const BATCH_WAITING: Metric = Metric::new(
    Kind::Gauge,
    "ledger_batch_waiting_calls",
    "keyed calls waiting for a group-commit writer",
);
const BATCH_STALLS: Metric = Metric::new(
    Kind::Counter,
    "ledger_batch_stalls_total",
    "group-commit batches that outlasted the stall bound while a call waited, and ran on apart from their writer",
);
const MEMORY_WAITS: Metric = Metric::new(
    Kind::Counter,
    "ledger_call_memory_waits_total",
    "calls that found no room for their weight in --max-call-memory and waited for it",
);
const MEMORY_WAITING: Metric = Metric::new(
    Kind::Gauge,
    "ledger_calls_waiting_for_memory",
    "calls waiting now for room for their weight in --max-call-memory",
);
const CONNECTIONS_RETIRED: Metric = Metric::new(
    Kind::Counter,
    "ledger_db_connections_retired_total",
    "keyed connections closed after a commit rather than pooled, because its batch was large enough to leave megabytes of buffers on them",
);
const ID_BLOCK_WAITS: Metric = Metric::new(
    Kind::Counter,
    "ledger_id_block_waits_total",
    "blocks of ids a reservation waited for, by kind (accounts, entries, holds): the block taken ahead was not there yet",
);
const KEYS_PURGED: Metric = Metric::new(
    Kind::Counter,
    "ledger_keys_purged_total",
    "idempotency key rows deleted by retention",
);
const OLDEST_KEY_AGE: Metric = Metric::new(
    Kind::GaugeSeconds,
    "ledger_oldest_key_age_seconds",
    "age of the oldest idempotency key row, as of the last purge",
);
const STREAM_WATCHERS: Metric = Metric::new(
    Kind::Gauge,
    "ledger_stream_watchers",
    "WatchEntries streams connected",
);
const MEMORY_BOUND: Metric = Metric::new(
    Kind::Gauge,
    "ledger_memory_bound_bytes",
    "the memory the instance can come to hold, computed at start from its limits",
);
const STREAM_ENTRIES: Metric = Metric::new(
    Kind::Counter,
    "ledger_stream_entries_total",
    "entries sent to WatchEntries streams",
);
const STREAM_LAG: Metric = Metric::new(
    Kind::HistogramSeconds,
    "ledger_stream_lag_seconds",
    "per entry numbered by this instance's assigner: the database's clock at the round less the entry's created_at",
);
const STREAM_SEQUENCE: Metric = Metric::new(
    Kind::Gauge,
    "ledger_stream_sequence",
    "the highest change-stream sequence assigned, as this instance last learned it",
);
const STREAM_ASSIGNER: Metric = Metric::new(
    Kind::Gauge,
    "ledger_stream_assigner",
    "1 while this instance holds the change stream's assigner lease",
);

/// Every metric, for `describe`.
const ALL: &[Metric] = &[
    RPCS,
    RPC_SECONDS,
    REPLAYS,
    KEY_REUSES,
    LOCK_WAIT_TIMEOUTS,
    RETRIES,
    POOL_CONNECTIONS,
    DB_UP,
    NODE_TAKES_WRITES,
    BATCH_CALLS,
    PHASE_SECONDS,
    BATCH_SPLITS,
    BATCH_WAITING,
    BATCH_STALLS,
    MEMORY_WAITS,
    MEMORY_WAITING,
    CONNECTIONS_RETIRED,
    ID_BLOCK_WAITS,
    KEYS_PURGED,
    OLDEST_KEY_AGE,
    STREAM_WATCHERS,
    MEMORY_BOUND,
    STREAM_ENTRIES,
    STREAM_LAG,
    STREAM_SEQUENCE,
    STREAM_ASSIGNER,
    SUBSCRIPTIONS_HELD,
    DELIVERIES,
    SUBSCRIPTION_STATE,
    SUBSCRIPTION_LAG,
    SUBSCRIPTION_LAG_SECONDS,
];

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
            metrics_exporter_prometheus::Matcher::Full(RPC_SECONDS.name.into()),
            LATENCY_BUCKETS,
        )?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(PHASE_SECONDS.name.into()),
            PHASE_BUCKETS,
        )?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(STREAM_LAG.name.into()),
            LAG_BUCKETS,
        )?
        .install()
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    describe();
    Ok(())
}

/// Registers every metric's help and unit with the exporter.
fn describe() {
    for metric in ALL {
        let (name, help) = (metric.name, metric.help);
        match metric.kind {
            Kind::Counter => describe_counter!(name, help),
            Kind::Gauge => describe_gauge!(name, help),
            Kind::GaugeSeconds => describe_gauge!(name, metrics::Unit::Seconds, help),
            Kind::Histogram => describe_histogram!(name, help),
            Kind::HistogramSeconds => describe_histogram!(name, metrics::Unit::Seconds, help),
        }
    }
}

pub fn rpc(method: &'static str, code: tonic::Code, elapsed: Duration) {
    counter!(RPCS.name, "method" => method, "code" => code_name(code)).increment(1);
    histogram!(RPC_SECONDS.name, "method" => method).record(elapsed.as_secs_f64());
}

/// An RPC refused before its handler ran, named by its request's path.
pub fn rpc_refused(method: &str, code: tonic::Code, elapsed: Duration) {
    counter!(RPCS.name, "method" => method.to_owned(), "code" => code_name(code)).increment(1);
    histogram!(RPC_SECONDS.name, "method" => method.to_owned()).record(elapsed.as_secs_f64());
}

/// A call began to wait for room in the memory budget.
pub fn call_memory_wait_began() {
    counter!(MEMORY_WAITS.name).increment(1);
    gauge!(MEMORY_WAITING.name).increment(1.0);
}

/// A call stopped waiting for room: it has its share, or gave up.
pub fn call_memory_wait_ended() {
    gauge!(MEMORY_WAITING.name).decrement(1.0);
}

pub fn replay(method: &'static str) {
    counter!(REPLAYS.name, "method" => method).increment(1);
}

pub fn key_reuse(method: &'static str) {
    counter!(KEY_REUSES.name, "method" => method).increment(1);
}

/// `row` is `key` or `account`.
pub fn lock_wait_timeout(row: &'static str) {
    counter!(LOCK_WAIT_TIMEOUTS.name, "row" => row).increment(1);
}

/// `reason` is `conflict` (deadlock, certification failure), `connection` (a
/// connection lost before COMMIT) or `unsettled` (a COMMIT whose outcome was not
/// known, settled through the key).
pub fn retry(reason: &'static str) {
    counter!(RETRIES.name, "reason" => reason).increment(1);
}

pub fn pool(idle: u32, in_use: u32) {
    gauge!(POOL_CONNECTIONS.name, "state" => "idle").set(f64::from(idle));
    gauge!(POOL_CONNECTIONS.name, "state" => "in_use").set(f64::from(in_use));
}

#[expect(clippy::cast_precision_loss, reason = "a batch holds at most 64 calls")]
pub fn batch(calls: usize) {
    histogram!(BATCH_CALLS.name).record(calls as f64);
}

/// A phase of a keyed transaction attempt (see [`Phase`]), and how long it took.
pub fn transaction_phase(phase: Phase, elapsed: Duration) {
    histogram!(PHASE_SECONDS.name, "phase" => phase.name()).record(elapsed.as_secs_f64());
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
    gauge!(BATCH_WAITING.name).increment(calls as f64);
}

pub fn connection_retired() {
    counter!(CONNECTIONS_RETIRED.name).increment(1);
}

pub fn batch_split() {
    counter!(BATCH_SPLITS.name).increment(1);
}

pub fn batch_stalled() {
    counter!(BATCH_STALLS.name).increment(1);
}

/// A reservation of ids of `kind` found too few free and waits for a block.
pub fn id_block_wait(kind: &'static str) {
    counter!(ID_BLOCK_WAITS.name, "kind" => kind).increment(1);
}

pub fn keys_purged(rows: u64) {
    counter!(KEYS_PURGED.name).increment(rows);
}

pub fn oldest_key_age(seconds: f64) {
    gauge!(OLDEST_KEY_AGE.name).set(seconds);
}

/// `watchers` more (or, negative, fewer) WatchEntries streams are connected.
#[expect(clippy::cast_precision_loss, reason = "a count of watchers")]
pub fn stream_watchers(watchers: isize) {
    gauge!(STREAM_WATCHERS.name).increment(watchers as f64);
}

#[expect(clippy::cast_precision_loss, reason = "a size in bytes")]
pub fn memory_bound(bytes: usize) {
    gauge!(MEMORY_BOUND.name).set(bytes as f64);
}

pub fn stream_entries(entries: u64) {
    counter!(STREAM_ENTRIES.name).increment(entries);
}

/// The lag of `entries` entries numbered together.
pub fn stream_lag(seconds: f64, entries: u64) {
    histogram!(STREAM_LAG.name)
        .record_many(seconds, usize::try_from(entries).unwrap_or(usize::MAX));
}

pub fn stream_sequence(highest: f64) {
    gauge!(STREAM_SEQUENCE.name).set(highest);
}

pub fn stream_assigner(held: bool) {
    gauge!(STREAM_ASSIGNER.name).set(if held { 1.0 } else { 0.0 });
}

pub fn database_up(up: bool) {
    gauge!(DB_UP.name).set(if up { 1.0 } else { 0.0 });
}

pub fn node_takes_writes(node: &str, takes: bool) {
    gauge!(NODE_TAKES_WRITES.name, "node" => node.to_owned()).set(if takes { 1.0 } else { 0.0 });
}

pub fn subscriptions_held(held: usize) {
    #[allow(clippy::cast_precision_loss)]
    gauge!(SUBSCRIPTIONS_HELD.name).set(held as f64);
}

/// A request sent to a subscriber, acknowledged or not.
pub fn delivery(subscription: u64, ok: bool) {
    counter!(
        DELIVERIES.name,
        "subscription" => subscription.to_string(),
        "result" => if ok { "ok" } else { "failed" }
    )
    .increment(1);
}

/// How far a subscription is behind: sequences read and not acknowledged, and
/// the age of the oldest entry of its last acknowledged delivery.
pub fn subscription_lag(
    subscription: u64,
    sequences: u64,
    oldest: Option<chrono::DateTime<chrono::Utc>>,
) {
    let id = subscription.to_string();
    #[allow(clippy::cast_precision_loss)]
    gauge!(SUBSCRIPTION_LAG.name, "subscription" => id.clone()).set(sequences as f64);
    if let Some(oldest) = oldest {
        let age = (chrono::Utc::now() - oldest)
            .num_microseconds()
            .unwrap_or(0);
        #[allow(clippy::cast_precision_loss)]
        gauge!(SUBSCRIPTION_LAG_SECONDS.name, "subscription" => id).set(age as f64 / 1e6);
    }
}

/// The state of a subscription this instance delivers, by its code.
pub fn subscription_state(subscription: u64, code: u8) {
    gauge!(SUBSCRIPTION_STATE.name, "subscription" => subscription.to_string())
        .set(f64::from(code));
}
