//! This instance's candidate for the assigner's lease, and the rounds it runs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::index;
use super::order::{self, Pending};
use super::rounds::{ERROR_PAUSE, IDLE_TICK, Round, Rounds};
use super::rows::{LeaseRow, Next, Numbered, Row};
use super::signals::Signals;
use super::statements::{numbered_sql, numbering_sql, unnumbered_sql};
use crate::db::conn::failure::{AttemptError, Failure, Step};
use crate::db::conn::pool::{self, CheckoutError, Pool, PoolSettings, Role, Session};
use crate::db::conn::sql::{Bind, Sql, hex};
use crate::db::conn::tx::{Committed, Tx};
use crate::telemetry::metrics;

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
/// Commits per `UPDATE` of a round, and accounts per look-up of predecessors.
const CHUNK: usize = 1_000;
/// A round waits at most this long for a row lock.
const LOCK_WAIT: Duration = Duration::from_secs(1);

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
            // The pool holds one connection: the index's transaction takes it.
            drop(conn);
            if read.indexed < read.next {
                self.index_round().await?;
            }
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
        // An index that holds every number so far keeps up with this round's
        // in its COMMIT when none of its commits carries metadata (the common
        // case): no second transaction.
        let ids: Vec<u64> = numbers.iter().map(|(id, _)| *id).collect();
        let untagged = read.indexed >= read.next
            && match index::any_tagged(&mut tx, &ids).await {
                Ok(tagged) => !tagged,
                Err(failure) => return Err(tx.fail(failure).await),
            };
        let watermark = untagged.then(|| index::watermark_sql(next, next, &self.owner));
        let sql = self.assign_sql(read.next, next, numbers, watermark);
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
        drop(conn);
        if !untagged {
            self.index_round().await?;
        }
        Ok(Round::Done {
            numbered: plan.order.len(),
            held_back: plan.held_back,
            cut: read.cut,
        })
    }

    /// Indexes for search (`index`) what rounds numbered and the index lacks,
    /// in a transaction of its own after the numbers' COMMIT: watchers never
    /// wait for the index, and a search waits for it as for the numbers.
    async fn index_round(&self) -> Result<(), AttemptError> {
        let mut conn = self.checkout().await?;
        let mut tx = Tx::new(&mut conn, &self.pool, LOCK_WAIT);
        let lease = match self.lease(&mut tx).await {
            Ok(Some(lease)) if lease.indexed < lease.next_sequence => lease,
            Ok(_) => return tx.finish().await,
            Err(failure) => return Err(tx.fail(failure).await),
        };
        let next = lease.next_sequence;
        let indexed = match index::write(&mut tx, lease.indexed, next).await {
            Ok(indexed) => indexed,
            Err(failure) => return Err(tx.fail(failure).await),
        };
        let sql = format!(
            "{}; COMMIT",
            index::watermark_sql(indexed, next, &self.owner)
        );
        match tx.commit(&sql, false).await {
            Committed::Yes => Ok(()),
            Committed::No(e) | Committed::Unknown(e) => Err(e),
        }
    }

    /// The lease row, locked; `None` unless the lease is this instance's.
    async fn lease(&self, tx: &mut Tx<'_>) -> Result<Option<LeaseRow>, Failure> {
        let lease: Vec<LeaseRow> = tx
            .load(
                Step::Stream,
                Sql::new(
                    "SELECT owner, CAST(lease_until > UTC_TIMESTAMP(6) AS UNSIGNED) AS valid, \
                     next_sequence, COALESCE((SELECT i.next_sequence FROM search_index i \
                     WHERE i.id = 1), next_sequence) AS indexed \
                     FROM ledger_stream WHERE id = 1 FOR UPDATE",
                ),
            )
            .await?;
        Ok(lease
            .into_iter()
            .next()
            .filter(|lease| lease.owner == self.owner && lease.valid != 0))
    }

    /// A round's reads: the lease row, locked (`None` unless the lease is this
    /// instance's), then the unnumbered commits and, when the read was cut at
    /// its limit, whether their accounts' entries before them are numbered, in
    /// the snapshot of the first plain read.
    async fn read(&self, tx: &mut Tx<'_>, limit: u64) -> Result<Option<Read>, Failure> {
        let Some(lease) = self.lease(tx).await? else {
            return Ok(None);
        };
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
            indexed: lease.indexed,
            commits,
            now,
            cut,
            blocked,
        }))
    }

    /// The final batch of a round: `next_sequence` from `next` to `last`, the
    /// lease renewed, each commit's first number, and the search index's next
    /// sequence with them when `watermark` says so, then COMMIT. Every write is
    /// guarded by the row this transaction read, so none can take effect outside
    /// it.
    fn assign_sql(
        &self,
        next: u64,
        last: u64,
        mut numbers: Vec<(u64, u64)>,
        watermark: Option<String>,
    ) -> String {
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
        // Guarded, as the numbers are, by the lease row moved above.
        if let Some(watermark) = watermark {
            sql.push(' ');
            sql.push_str(&watermark);
            sql.push(';');
        }
        sql.push_str(" COMMIT");
        sql
    }
}

/// What a round read.
struct Read {
    /// The lease row's next sequence.
    next: u64,
    /// The search index's next sequence.
    indexed: u64,
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
