//! The change stream's assigner (SPEC 3.8): every committed entry gets its
//! ledger-wide `sequence`, 1, 2, 3, ... with no hole, after its commit.
//!
//! Writers never touch the stream's counter: each writing transaction adds one
//! row for its entries to `stream_commits` (`db::tables::commits`), without a
//! number, so no writing transaction waits for another over a counter, and on a
//! multi-primary cluster none conflicts with another node's over one. One
//! assigner for the whole fleet numbers those rows instead, in rounds, each
//! commit taking as many consecutive numbers as it has entries:
//!
//! ```text
//! SELECT owner, lease_until > UTC_TIMESTAMP(6), next_sequence FROM ledger_stream
//!   WHERE id = 1 FOR UPDATE                     (not ours, or expired: stop)
//! SELECT ... FROM stream_commits WHERE first_sequence IS NULL
//!   ORDER BY created_at, commit_id LIMIT n
//!   (the first plain read: its snapshot is taken after every earlier round
//!    committed, and holds only committed rows)
//! [cut at n: SELECT the predecessors of each account's first entry that are numbered]
//! order them (`order`)
//! UPDATE ledger_stream SET next_sequence = ..., lease_until = ... WHERE id = 1 AND
//!   owner = me AND next_sequence = <read>;
//! UPDATE stream_commits SET first_sequence = CASE commit_id WHEN ... END
//!   WHERE commit_id IN (...) AND <ledger_stream's owner is me, and its
//!   next_sequence the new one>;  ...; COMMIT
//! ```
//!
//! A round sees only committed commits, and numbers them after every commit of
//! the rounds before, so an entry that commits after a round's snapshot gets a
//! higher number than everything that round numbered; a round's numbers become
//! visible together, at its COMMIT, so a reader that sees one sees every lower one.
//!
//! Each account's entries are numbered in the order they were applied. The
//! commits before a visible one on any of its accounts are visible too: the
//! later one locked the account after the earlier committed, and InnoDB makes a
//! transaction visible before it releases its locks; a cluster node applies
//! write sets that touch the same rows in their commit order. So a round that
//! read every unnumbered commit holds each one's predecessors, numbered or in the
//! round; only a read cut at its limit needs to look the predecessors up.
//!
//! Who assigns is a lease in the `ledger_stream` row, by the database's clock:
//! every instance runs a candidate that takes the lease when it has expired (or
//! renews its own) about every second, and rounds run only while it is held. A
//! lease row rather than `GET_LOCK`, which is per node on Galera; a killed owner
//! is replaced once its lease runs out. Rounds of two assigners cannot
//! interleave: each starts by locking the row (on a cluster, certification
//! refuses the second to commit), and the guards of the final writes, on the
//! owner and the next sequence, make them no-ops outside the transaction that
//! read the row (a Galera transaction aborted mid-batch can see the rest of its
//! batch run in a new one). The migrations hold the lease while they run
//! (`db::admin::fence`), so no round runs while the tables change shape.
//!
//! A round runs about every [`IDLE_TICK`] while the ledger is quiet, and
//! [`MIN_GAP`] after the last when it found commits or when a local writer
//! committed (`Signals::wake`).

mod order;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Text, Unsigned, Varbinary};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::db::conn::failure::{AttemptError, Failure, Step};
use crate::db::conn::pool::{self, CheckoutError, Pool, PoolSettings, Role, Session};
use crate::db::conn::sql::{Bind, Sql, hex};
use crate::db::conn::tx::{Committed, Tx};
use crate::db::tables::commits::parse_spans;
use crate::telemetry::metrics;
use order::Pending;

/// How long a lease lasts without renewal: a killed owner is replaced within
/// about this long.
pub const LEASE: Duration = Duration::from_secs(3);
/// How often a candidate takes or renews the lease: a third of it, so two
/// renewals can fail before it runs out.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// The least time between the starts of two rounds. Each round costs the
/// database a few statements and a durable COMMIT, however many commits it
/// numbers, so under load this sets the assigner's cost; about half of it is
/// the stream's median lag.
const MIN_GAP: Duration = Duration::from_millis(10);
/// Between rounds while they find nothing and no local writer commits: entries
/// written through other instances wait at most about this long.
const IDLE_TICK: Duration = Duration::from_millis(20);
/// After a failed round or lease attempt (the database down, say).
const ERROR_PAUSE: Duration = Duration::from_millis(250);
/// Rounds failed in a row before it is worth a warning (about 5 s of them).
const FAILURES_REPORTED: u32 = 20;
/// The most commits one round reads (and numbers).
pub const ROUND_LIMIT: u64 = 2_000;
/// The most a round reads after rounds cut at their limit numbered nothing:
/// each such round doubles the read, so the commits that come first on their
/// accounts, when the instants and ids of the rest put them past the limit (a
/// migrated ledger of one instant, a clock that stepped back), are reached.
const MAX_ROUND_LIMIT: u64 = 262_144;
/// Commits per `UPDATE` of a round, and accounts per look-up of predecessors.
const CHUNK: usize = 1_000;
/// A round waits at most this long for a row lock.
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
    commit_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_count: u64,
    #[diesel(sql_type = Text)]
    accounts: String,
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

/// The read of a round's unnumbered commits: through the index of numbers,
/// whose NULLs, by instant, are exactly the commits to number, however the
/// statistics count them.
pub fn unnumbered_sql(limit: u64) -> String {
    format!(
        "SELECT commit_id, CAST(entry_count AS UNSIGNED) AS entry_count, accounts, created_at, \
         UTC_TIMESTAMP(6) AS now FROM stream_commits FORCE INDEX (stream_commits_sequence) \
         WHERE first_sequence IS NULL ORDER BY created_at, commit_id LIMIT {limit}"
    )
}

/// The write of `numbers` (commit id, first sequence), guarded by the lease
/// row's being `owner`'s and its `next_sequence` being `last`: a round whose
/// lease was taken meanwhile (by a migration, say) numbers nothing. Through the
/// primary key, however few rows the statistics count: run as a scan, it would
/// wait on the row of every commit not yet committed, and the stream with it.
pub fn numbering_sql(numbers: &[(u64, u64)], last: u64, owner: &[u8]) -> String {
    let mut sql = "UPDATE stream_commits FORCE INDEX (PRIMARY) SET first_sequence = CASE commit_id"
        .to_owned();
    for (id, seq) in numbers {
        let _ = write!(sql, " WHEN {id} THEN {seq}");
    }
    sql.push_str(" END WHERE commit_id IN (");
    for (n, (id, _)) in numbers.iter().enumerate() {
        let comma = if n == 0 { "" } else { ", " };
        let _ = write!(sql, "{comma}{id}");
    }
    let _ = write!(
        sql,
        ") AND (SELECT next_sequence FROM ledger_stream WHERE id = 1 AND owner = {}) = {last}",
        hex(owner)
    );
    sql
}

/// The look-up of which of `predecessors` (account, account_seq) are numbered.
pub fn numbered_sql(predecessors: &[(u64, u64)]) -> String {
    let mut sql = "SELECT e.account_id FROM entries e FORCE INDEX (entries_account_seq) \
        STRAIGHT_JOIN stream_commits c ON c.commit_id = e.commit_id \
        WHERE c.first_sequence IS NOT NULL AND ("
        .to_owned();
    for (n, (account, seq)) in predecessors.iter().enumerate() {
        let or = if n == 0 { "" } else { " OR " };
        let _ = write!(
            sql,
            "{or}(e.account_id = {account} AND e.account_seq = {seq})"
        );
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
        /// The read stopped at its limit.
        cut: bool,
    },
}

/// What the rounds in a row have done: for the log, and the next one's limit.
#[derive(Debug)]
struct Rounds {
    /// The last round could number none of the commits it read.
    stuck: bool,
    /// Rounds failed in a row.
    failures: u32,
    /// How many commits the next round reads.
    limit: u64,
}

impl Default for Rounds {
    fn default() -> Self {
        Self {
            stuck: false,
            failures: 0,
            limit: ROUND_LIMIT,
        }
    }
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
                cut,
            }) => {
                if self.failures >= FAILURES_REPORTED {
                    tracing::info!(
                        failures = self.failures,
                        "rounds of the change stream succeed again"
                    );
                }
                self.failures = 0;
                let stuck = numbered == 0 && held_back > 0;
                if !cut {
                    self.limit = ROUND_LIMIT;
                } else if stuck && self.limit < MAX_ROUND_LIMIT {
                    self.limit = (self.limit * 2).min(MAX_ROUND_LIMIT);
                    tracing::debug!(
                        limit = self.limit,
                        "the commits first on their accounts are past the round's limit; reading more"
                    );
                    return Some(Duration::ZERO);
                }
                if stuck && !self.stuck {
                    tracing::warn!(
                        held_back,
                        "a round of the change stream can number none of the commits it read"
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
                if let Some(after) = rounds.judge(self.round(rounds.limit).await) {
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

    /// One round, in one transaction, of at most `limit` commits.
    async fn round(&self, limit: u64) -> Result<Round, AttemptError> {
        let mut conn = self.checkout().await?;
        let mut tx = Tx::new(&mut conn, &self.pool, LOCK_WAIT);
        let read = match self.read(&mut tx, limit).await {
            Ok(Some(read)) => read,
            Ok(None) => {
                tx.finish().await?;
                return Ok(Round::NotOurs);
            }
            Err(failure) => return Err(tx.fail(failure).await),
        };
        let plan = order::plan(&read.commits, &read.blocked);
        if plan.order.is_empty() {
            tx.finish().await?;
            return Ok(Round::Done {
                numbered: 0,
                held_back: plan.held_back,
                cut: read.cut,
            });
        }
        let mut numbers: Vec<(u64, u64)> = Vec::with_capacity(plan.order.len());
        let mut next = read.next;
        for commit in plan.order.iter().filter_map(|&n| read.commits.get(n)) {
            numbers.push((commit.commit_id, next));
            next += commit.entries;
        }
        let sql = self.assign_sql(read.next, next, numbers);
        match tx.commit(&sql, false).await {
            Committed::Yes => {}
            Committed::No(e) | Committed::Unknown(e) => return Err(e),
        }
        self.signals.publish(next - 1);
        for commit in plan.order.iter().filter_map(|&n| read.commits.get(n)) {
            let lag = (read.now - commit.created_at)
                .num_microseconds()
                .unwrap_or(0);
            #[expect(clippy::cast_precision_loss, reason = "seconds for a histogram")]
            metrics::stream_lag(lag.max(0) as f64 / 1e6, commit.entries);
        }
        Ok(Round::Done {
            numbered: plan.order.len(),
            held_back: plan.held_back,
            cut: read.cut,
        })
    }

    /// A round's reads: the lease row, locked (`None` unless the lease is this
    /// instance's), then the unnumbered commits and, when the read was cut at
    /// its limit, whether their accounts' entries before them are numbered, in
    /// the snapshot of the first plain read.
    async fn read(&self, tx: &mut Tx<'_>, limit: u64) -> Result<Option<Read>, Failure> {
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
        let rows: Vec<Row> = tx
            .load(Step::Stream, Sql::new(unnumbered_sql(limit)))
            .await?;
        let cut = u64::try_from(rows.len()).unwrap_or(u64::MAX) >= limit;
        let now = rows.first().map(|r| r.now).unwrap_or_default();
        let commits = rows
            .into_iter()
            .map(Row::pending)
            .collect::<Result<Vec<Pending>, Failure>>()?;
        let blocked = if cut {
            unnumbered_predecessors(tx, &commits).await?
        } else {
            HashSet::new()
        };
        Ok(Some(Read {
            next: lease.next_sequence,
            commits,
            now,
            cut,
            blocked,
        }))
    }

    /// The final batch of a round: `next_sequence` from `next` to `last`, the
    /// lease renewed, and each commit's first number, then COMMIT. Every write is
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
        numbers.sort_unstable();
        for chunk in numbers.chunks(CHUNK) {
            sql.push(' ');
            sql.push_str(&numbering_sql(chunk, last, &self.owner));
            sql.push(';');
        }
        sql.push_str(" COMMIT");
        sql
    }
}

impl Row {
    fn pending(self) -> Result<Pending, Failure> {
        let spans = parse_spans(&self.accounts).ok_or_else(|| {
            Failure::from(crate::error::Error::internal(format!(
                "commit {} lists its accounts as {:?}",
                self.commit_id, self.accounts
            )))
        })?;
        Ok(Pending {
            commit_id: self.commit_id,
            entries: self.entry_count,
            spans,
            created_at: self.created_at,
        })
    }
}

/// What a round read.
struct Read {
    /// The lease row's next sequence.
    next: u64,
    commits: Vec<Pending>,
    /// The database's clock at the read.
    now: NaiveDateTime,
    /// The read stopped at its limit.
    cut: bool,
    /// The accounts whose entry before their first in `commits` is not numbered
    /// (looked up only when the read was cut).
    blocked: HashSet<u64>,
}

/// The accounts of `commits` whose entry before their first in `commits` has no
/// sequence (a plain read, in the round's snapshot).
async fn unnumbered_predecessors(
    tx: &mut Tx<'_>,
    commits: &[Pending],
) -> Result<HashSet<u64>, Failure> {
    let predecessors = order::predecessors(commits);
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
