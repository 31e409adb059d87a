//! The change stream's assigner (SPEC 3.8): every committed entry gets its
//! ledger-wide `sequence`, 1, 2, 3, ... with no hole, after its commit.
//!
//! Writers never touch the stream: they insert entries without a sequence
//! (NULL), so no writing transaction waits for another over a counter, and on a
//! multi-primary cluster none conflicts with another node's over one. One
//! assigner for the whole fleet numbers them instead, in rounds:
//!
//! ```text
//! SELECT owner, lease_until > UTC_TIMESTAMP(6), next_sequence FROM ledger_stream
//!   WHERE id = 1 FOR UPDATE                     (not ours, or expired: stop)
//! SELECT ... FROM entries WHERE sequence IS NULL ORDER BY created_at, entry_id LIMIT n
//!   (the first plain read: its snapshot is taken after every earlier round
//!    committed, and holds only committed entries)
//! [SELECT the predecessors of each account's first entry that are numbered]
//! order them (`order`)
//! UPDATE ledger_stream SET next_sequence = ..., lease_until = ... WHERE id = 1 AND
//!   owner = me AND next_sequence = <read>;
//! UPDATE entries SET sequence = CASE entry_id WHEN ... END WHERE entry_id IN (...)
//!   AND <ledger_stream's next_sequence is the new one>;  ...; COMMIT
//! ```
//!
//! A round sees only committed entries, and numbers them after every entry of
//! the rounds before, so an entry that commits after a round's snapshot gets a
//! higher number than everything that round numbered; a round's numbers become
//! visible together, at its COMMIT, so a reader that sees one sees every lower one.
//!
//! Who assigns is a lease in the `ledger_stream` row, by the database's clock:
//! every instance runs a candidate that takes the lease when it has expired (or
//! renews its own) about every second, and rounds run only while it is held. A
//! lease row rather than `GET_LOCK`, which is per node on Galera; a killed owner
//! is replaced once its lease runs out. Rounds of two assigners cannot
//! interleave: each starts by locking the row (on a cluster, certification
//! refuses the second to commit), and the guards of the final writes make them
//! no-ops outside the transaction that read the row (a Galera transaction
//! aborted mid-batch can see the rest of its batch run in a new one).
//!
//! A round runs about every [`IDLE_TICK`] while the ledger is quiet, and
//! [`MIN_GAP`] after the last when it found entries or when a local writer
//! committed (`Signals::wake`).

mod order;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Unsigned, Varbinary};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::db::conn::failure::{AttemptError, Failure, Step};
use crate::db::conn::pool::{self, CheckoutError, Pool, PoolSettings, Role, Session};
use crate::db::conn::sql::{Bind, Sql, datetime, hex};
use crate::db::conn::tx::{Committed, Tx};
use crate::telemetry::metrics;
use order::Unnumbered;

/// How long a lease lasts without renewal: a killed owner is replaced within
/// about this long.
pub const LEASE: Duration = Duration::from_secs(3);
/// How often a candidate takes or renews the lease: a third of it, so two
/// renewals can fail before it runs out.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// The least time between the starts of two rounds.
const MIN_GAP: Duration = Duration::from_millis(5);
/// Between rounds while they find nothing and no local writer commits: entries
/// written through other instances wait at most about this long.
const IDLE_TICK: Duration = Duration::from_millis(20);
/// After a failed round or lease attempt (the database down, say).
const ERROR_PAUSE: Duration = Duration::from_millis(250);
/// Rounds failed in a row before it is worth a warning (about 5 s of them).
const FAILURES_REPORTED: u32 = 20;
/// The most entries one round reads (and numbers).
pub const ROUND_LIMIT: u64 = 10_000;
/// The most entries a round reads of one instant, when that instant alone
/// fills [`ROUND_LIMIT`]: more than one group-commit batch can write (64 calls
/// of at most 512 entries), so a batch is never held back for ever.
const INSTANT_LIMIT: u64 = 65_536;
/// Entries per `UPDATE` of a round, and accounts per look-up of predecessors.
const CHUNK: usize = 1_000;
/// A round waits at most this long for a row lock (an entry a refund holds).
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// What the assigner and this instance's writers and readers share.
#[derive(Debug)]
pub struct Signals {
    /// Notified after a local keyed COMMIT: entries may wait for a round.
    wake: Notify,
    /// The highest sequence assigned, as this instance last learned it: after
    /// each round it committed, and from the lease row about every second.
    assigned: watch::Sender<u64>,
}

impl Default for Signals {
    fn default() -> Self {
        Self {
            wake: Notify::new(),
            assigned: watch::Sender::new(0),
        }
    }
}

impl Signals {
    /// A local writer committed.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn assigned(&self) -> watch::Receiver<u64> {
        self.assigned.subscribe()
    }

    fn publish(&self, highest: u64) {
        self.assigned.send_if_modified(|seen| {
            let newer = highest > *seen;
            if newer {
                *seen = highest;
            }
            newer
        });
        #[expect(clippy::cast_precision_loss, reason = "a gauge")]
        metrics::stream_sequence(highest as f64);
    }
}

/// The lease row, as a round locks it.
#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = Varbinary)]
    owner: Vec<u8>,
    #[diesel(sql_type = Unsigned<BigInt>)]
    valid: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    next_sequence: u64,
}

#[derive(QueryableByName)]
struct Next {
    #[diesel(sql_type = Unsigned<BigInt>)]
    next_sequence: u64,
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_seq: u64,
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = Unsigned<BigInt>)]
    leg: u64,
    #[diesel(sql_type = Datetime)]
    created_at: NaiveDateTime,
    #[diesel(sql_type = Datetime)]
    now: NaiveDateTime,
}

#[derive(QueryableByName)]
struct Numbered {
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
}

const UNNUMBERED_COLUMNS: &str = "entry_id, account_id, account_seq, namespace, \
    idempotency_key, CAST(leg AS UNSIGNED) AS leg, created_at, UTC_TIMESTAMP(6) AS now";

/// The read of a round's unnumbered entries: through the index of sequences,
/// whose NULLs are exactly the entries to number, however the statistics count
/// them (MariaDB, told by them that most entries lack a number, as after a
/// migration, scans the whole journal instead, every round).
pub fn unnumbered_sql() -> String {
    format!(
        "SELECT {UNNUMBERED_COLUMNS} FROM entries FORCE INDEX (entries_sequence) \
         WHERE sequence IS NULL ORDER BY created_at, entry_id LIMIT {ROUND_LIMIT}"
    )
}

/// The read of the unnumbered entries of one instant.
fn instant_sql(at: NaiveDateTime) -> String {
    format!(
        "SELECT {UNNUMBERED_COLUMNS} FROM entries FORCE INDEX (entries_sequence) \
         WHERE sequence IS NULL AND created_at = {at} \
         ORDER BY entry_id LIMIT {INSTANT_LIMIT}",
        at = datetime(at.and_utc())
    )
}

/// The look-up of which of `predecessors` (account, account_seq) are numbered.
pub fn numbered_sql(predecessors: &[(u64, u64)]) -> String {
    let mut sql = "SELECT account_id FROM entries FORCE INDEX (entries_account_seq) \
        WHERE sequence IS NOT NULL AND ("
        .to_owned();
    for (n, (account, seq)) in predecessors.iter().enumerate() {
        let or = if n == 0 { "" } else { " OR " };
        let _ = write!(sql, "{or}(account_id = {account} AND account_seq = {seq})");
    }
    sql.push(')');
    sql
}

/// What a round did.
enum Round {
    /// The lease is not (or no longer) this instance's.
    NotOurs,
    Done {
        numbered: usize,
        held_back: usize,
    },
}

/// What the rounds in a row have done, for the log.
#[derive(Debug, Default)]
struct Rounds {
    /// The last round could number none of the entries it read.
    stuck: bool,
    /// Rounds failed in a row.
    failures: u32,
}

impl Rounds {
    /// Logs what deserves it, and says how long to wait before the next round
    /// (`None`: the lease is lost).
    fn judge(&mut self, round: Result<Round, AttemptError>) -> Option<Duration> {
        match round {
            Ok(Round::NotOurs) => None,
            Ok(Round::Done {
                numbered,
                held_back,
            }) => {
                if self.failures >= FAILURES_REPORTED {
                    tracing::info!(
                        failures = self.failures,
                        "rounds of the change stream succeed again"
                    );
                }
                self.failures = 0;
                let stuck = numbered == 0 && held_back > 0;
                if stuck && !self.stuck {
                    tracing::warn!(
                        held_back,
                        "a round of the change stream can number none of the entries it read"
                    );
                }
                self.stuck = stuck;
                Some(if numbered > 0 {
                    Duration::ZERO
                } else {
                    IDLE_TICK
                })
            }
            Err(e) => {
                self.failures += 1;
                if self.failures == FAILURES_REPORTED {
                    tracing::warn!(failures = self.failures, error = ?e, "rounds of the change stream keep failing; entries wait for their numbers");
                } else {
                    tracing::debug!(error = ?e, "a round of the change stream failed; trying again");
                }
                // A deadlock or a certification conflict clears at once; the
                // database gone does not.
                Some(if matches!(e, AttemptError::Conflict) {
                    Duration::ZERO
                } else {
                    ERROR_PAUSE
                })
            }
        }
    }
}

/// This instance's candidate for the assigner's lease, and the rounds it runs
/// while it holds it.
#[derive(Debug)]
pub struct Assigner {
    /// One connection, set up and self-checked as keyed ones are (no autocommit,
    /// REPEATABLE READ, causal reads on a cluster node).
    pool: Pool,
    /// Who this process is in the lease row: host, process and a random part,
    /// so a restarted process on the same host is someone else.
    owner: Vec<u8>,
    signals: Arc<Signals>,
}

impl Assigner {
    pub fn new(urls: &[String], session: &Session, signals: Arc<Signals>) -> Self {
        let settings = PoolSettings {
            size: 1,
            checkout_timeout: pool::CONNECT_TIMEOUT,
        };
        let role = Role::Keyed {
            lock_wait_secs: LOCK_WAIT.as_secs(),
        };
        Self {
            pool: pool::build(urls, settings, role, session),
            owner: owner_id(),
            signals,
        }
    }

    /// Takes the lease whenever it is free, and numbers entries while it holds
    /// it, until `stop`; then gives the lease up, so another instance takes it
    /// at once.
    pub async fn run(self, stop: CancellationToken) {
        let mut holding = false;
        let mut next_lease = Instant::now();
        let mut last_round = Instant::now();
        let mut rounds = Rounds::default();
        loop {
            let mut pause = IDLE_TICK;
            if Instant::now() >= next_lease {
                next_lease = Instant::now() + RENEW_EVERY;
                let held = self.take_lease().await.unwrap_or_else(|e| {
                    tracing::debug!(error = ?e, "the stream's lease could not be taken or renewed");
                    pause = ERROR_PAUSE;
                    false
                });
                if held != holding {
                    tracing::info!(owner = %String::from_utf8_lossy(&self.owner), held, "the change stream's assigner lease");
                    metrics::stream_assigner(held);
                }
                holding = held;
            }
            if holding {
                last_round = Instant::now();
                if let Some(after) = rounds.judge(self.round().await) {
                    pause = after;
                } else {
                    holding = false;
                    metrics::stream_assigner(false);
                }
            } else {
                pause = pause.max(next_lease.saturating_duration_since(Instant::now()));
            }
            let woken = async {
                if holding {
                    self.signals.wake.notified().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                () = woken => {}
                () = tokio::time::sleep(pause) => {}
            }
            // However often it is woken, rounds start at least MIN_GAP apart.
            tokio::time::sleep_until(last_round + MIN_GAP).await;
        }
        if holding {
            self.release().await;
            metrics::stream_assigner(false);
        }
    }

    /// Takes the lease if it is free or ours (renewing it), and learns the
    /// highest sequence assigned. True if this instance holds it now.
    async fn take_lease(&self) -> Result<bool, AttemptError> {
        let mut conn = self.checkout().await?;
        let mut tx = Tx::new(&mut conn, &self.pool, LOCK_WAIT);
        let take = Sql::new(
            "UPDATE ledger_stream SET owner = ?, \
             lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE id = 1 AND (owner = ? OR lease_until < UTC_TIMESTAMP(6))",
        )
        .bind(Bind::Bytes(&self.owner))
        .bind(Bind::U64(lease_micros()))
        .bind(Bind::Bytes(&self.owner));
        // Affected rows, not found rows: 1 only if the row was ours to take.
        let taken = match tx.execute(Step::Stream, take).await {
            Ok(rows) => rows == 1,
            Err(failure) => return Err(tx.fail(failure).await),
        };
        let next: Vec<Next> = match tx
            .load(
                Step::Stream,
                Sql::new("SELECT next_sequence FROM ledger_stream WHERE id = 1"),
            )
            .await
        {
            Ok(next) => next,
            Err(failure) => return Err(tx.fail(failure).await),
        };
        match tx.commit("COMMIT", false).await {
            Committed::Yes => {}
            Committed::No(e) | Committed::Unknown(e) => return Err(e),
        }
        if let Some(next) = next.first() {
            self.signals.publish(next.next_sequence.saturating_sub(1));
        }
        Ok(taken)
    }

    /// Ends this instance's lease, if it still holds it.
    async fn release(&self) {
        let Ok(mut conn) = self.checkout().await else {
            return;
        };
        let tx = Tx::new(&mut conn, &self.pool, LOCK_WAIT);
        let sql = format!(
            "UPDATE ledger_stream SET lease_until = '1970-01-01 00:00:00' \
             WHERE id = 1 AND owner = {}; COMMIT",
            hex(&self.owner)
        );
        if let Committed::No(e) | Committed::Unknown(e) = tx.commit(&sql, false).await {
            tracing::debug!(error = ?e, "the stream's lease was not given up; it runs out");
        }
    }

    async fn checkout(&self) -> Result<pool::Pooled<'_>, AttemptError> {
        self.pool.get().await.map_err(|e| match e {
            CheckoutError::Unreachable(reason) => AttemptError::ConnectionLost(reason),
            CheckoutError::TimedOut => AttemptError::NoConnection(e.to_string()),
        })
    }

    /// One round, in one transaction.
    async fn round(&self) -> Result<Round, AttemptError> {
        let mut conn = self.checkout().await?;
        let mut tx = Tx::new(&mut conn, &self.pool, LOCK_WAIT);
        let read = match self.read(&mut tx).await {
            Ok(Some(read)) => read,
            Ok(None) => {
                tx.finish().await?;
                return Ok(Round::NotOurs);
            }
            Err(failure) => return Err(tx.fail(failure).await),
        };
        let plan = order::plan(&read.rows, read.cut_at, &read.blocked);
        if plan.order.is_empty() {
            tx.finish().await?;
            return Ok(Round::Done {
                numbered: 0,
                held_back: plan.held_back,
            });
        }
        let numbers: Vec<(u64, u64)> = plan
            .order
            .iter()
            .zip(read.next..)
            .filter_map(|(&r, seq)| read.rows.get(r).map(|u| (u.entry_id, seq)))
            .collect();
        let last = read.next + u64::try_from(numbers.len()).unwrap_or(u64::MAX);
        let sql = self.assign_sql(read.next, last, numbers);
        match tx.commit(&sql, false).await {
            Committed::Yes => {}
            Committed::No(e) | Committed::Unknown(e) => return Err(e),
        }
        self.signals.publish(last - 1);
        for row in plan.order.iter().filter_map(|&r| read.rows.get(r)) {
            let lag = (read.now - row.created_at).num_microseconds().unwrap_or(0);
            #[expect(clippy::cast_precision_loss, reason = "seconds for a histogram")]
            metrics::stream_lag(lag.max(0) as f64 / 1e6);
        }
        Ok(Round::Done {
            numbered: plan.order.len(),
            held_back: plan.held_back,
        })
    }

    /// A round's reads: the lease row, locked (`None` unless the lease is this
    /// instance's), then the unnumbered entries and whether their accounts'
    /// entries before them are numbered, in the snapshot of the first plain read.
    async fn read(&self, tx: &mut Tx<'_>) -> Result<Option<Read>, Failure> {
        let lease: Vec<LeaseRow> = tx
            .load(
                Step::Stream,
                Sql::new(
                    "SELECT owner, CAST(lease_until > UTC_TIMESTAMP(6) AS UNSIGNED) AS valid, \
                     next_sequence FROM ledger_stream WHERE id = 1 FOR UPDATE",
                ),
            )
            .await?;
        let Some(lease) = lease.into_iter().next() else {
            return Ok(None);
        };
        if lease.owner != self.owner || lease.valid == 0 {
            return Ok(None);
        }
        let mut rows: Vec<Row> = tx.load(Step::Stream, Sql::new(unnumbered_sql())).await?;
        let mut limit = ROUND_LIMIT;
        let last = rows.last().map(|r| r.created_at);
        let mut full = u64::try_from(rows.len()).unwrap_or(u64::MAX) >= limit;
        // One instant fills the read (a batch of large posts): holding it back as
        // possibly cut would hold it forever, so read all of it.
        if let (true, Some(last)) = (full, last)
            && rows.first().is_some_and(|r| r.created_at == last)
        {
            limit = INSTANT_LIMIT;
            rows = tx.load_text(Step::Stream, instant_sql(last)).await?;
            full = u64::try_from(rows.len()).unwrap_or(u64::MAX) >= limit;
        }
        let now = rows.first().map(|r| r.now).unwrap_or_default();
        let rows: Vec<Unnumbered> = rows.into_iter().map(Row::unnumbered).collect();
        let blocked = unnumbered_predecessors(tx, &rows).await?;
        Ok(Some(Read {
            next: lease.next_sequence,
            cut_at: full.then(|| rows.last().map(|u| u.created_at)).flatten(),
            rows,
            now,
            blocked,
        }))
    }

    /// The final batch of a round: `next_sequence` from `next` to `last`, the
    /// lease renewed, and each entry's number, then COMMIT. Every write is
    /// guarded by the row this transaction read, so none can take effect outside
    /// it.
    fn assign_sql(&self, next: u64, last: u64, mut numbers: Vec<(u64, u64)>) -> String {
        let mut sql = format!(
            "UPDATE ledger_stream SET next_sequence = {last}, \
             lease_until = UTC_TIMESTAMP(6) + INTERVAL {lease} MICROSECOND \
             WHERE id = 1 AND owner = {owner} AND next_sequence = {next};",
            lease = lease_micros(),
            owner = hex(&self.owner),
        );
        // In entry_id order, as a refund locks entries, so the two never wait
        // for each other in a cycle.
        numbers.sort_unstable();
        for chunk in numbers.chunks(CHUNK) {
            sql.push_str(" UPDATE entries SET sequence = CASE entry_id");
            for (id, seq) in chunk {
                let _ = write!(sql, " WHEN {id} THEN {seq}");
            }
            sql.push_str(" END WHERE entry_id IN (");
            for (n, (id, _)) in chunk.iter().enumerate() {
                let comma = if n == 0 { "" } else { ", " };
                let _ = write!(sql, "{comma}{id}");
            }
            let _ = write!(
                sql,
                ") AND (SELECT next_sequence FROM ledger_stream WHERE id = 1) = {last};"
            );
        }
        sql.push_str(" COMMIT");
        sql
    }
}

impl Row {
    fn unnumbered(self) -> Unnumbered {
        Unnumbered {
            entry_id: self.entry_id,
            account_id: self.account_id,
            account_seq: self.account_seq,
            namespace: self.namespace,
            idempotency_key: self.idempotency_key,
            leg: self.leg,
            created_at: self.created_at,
        }
    }
}

/// What a round read.
struct Read {
    /// The lease row's next sequence.
    next: u64,
    rows: Vec<Unnumbered>,
    /// The database's clock at the read.
    now: NaiveDateTime,
    /// The instant of the last row, when the read stopped at its limit.
    cut_at: Option<NaiveDateTime>,
    /// The accounts whose entry before their first in `rows` is not numbered.
    blocked: HashSet<u64>,
}

/// The accounts of `rows` whose entry before their first in `rows` has no
/// sequence (a plain read, in the round's snapshot).
async fn unnumbered_predecessors(
    tx: &mut Tx<'_>,
    rows: &[Unnumbered],
) -> Result<HashSet<u64>, Failure> {
    let predecessors = order::predecessors(rows);
    let mut unnumbered: HashSet<u64> = predecessors.iter().map(|(a, _)| *a).collect();
    for chunk in predecessors.chunks(CHUNK) {
        let found: Vec<Numbered> = tx.load_text(Step::Stream, numbered_sql(chunk)).await?;
        for numbered in found {
            unnumbered.remove(&numbered.account_id);
        }
    }
    Ok(unnumbered)
}

fn lease_micros() -> u64 {
    u64::try_from(LEASE.as_micros()).unwrap_or(u64::MAX)
}

/// `host/pid/random`, at most 64 bytes (the owner column's size).
fn owner_id() -> Vec<u8> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let mut owner = format!(
        "{}/{}/{:08x}",
        host.trim(),
        std::process::id(),
        rand::random::<u32>()
    )
    .into_bytes();
    let keep = owner.len().saturating_sub(64);
    owner.drain(..keep);
    owner
}
