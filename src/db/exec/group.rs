//! Group commit: keyed calls that arrive while earlier ones are being written are
//! collected and served by one transaction, so a hot account pays one COMMIT per
//! batch rather than one per call.
//!
//! Batching is natural: each writer serves the calls of a share of the accounts
//! (by account id) and takes every call waiting when it becomes free (up to
//! [`MAX_BATCH`]); an idle service runs each call at once, alone. All the calls on
//! a hot account meet in one writer's queue, and share its COMMITs. A batch's transaction is the one of `keyed`, for many
//! keys:
//!
//! ```text
//! INSERT INTO idempotency_keys VALUES (k1), (k2), ... ON DUPLICATE KEY UPDATE ...   (keys sorted)
//!   a row inserted for every key -> all new; otherwise:
//!   SELECT ... FROM idempotency_keys WHERE (namespace, key) IN (...) FOR UPDATE
//!     no outcome -> this batch inserted it: new;  an outcome -> a duplicate: replay
//! lock what the new calls need (accounts ascending, holds, entries), once
//! decide each new call in arrival order against the running rows (`Book`)
//! the entries; each account's and each key's UPDATE, by primary key; COMMIT
//!                                                        (one round trip)
//! ```
//!
//! Anything out of the ordinary splits the batch: its calls rerun one by one on
//! `keyed`'s path, where the probe settles each (SPEC 3.6). That covers a key whose
//! original is still in flight elsewhere (the probe's lock wait passed), a call
//! whose caller left or whose deadline passed before the COMMIT, a write that met
//! a purged key's effect, a decline whose key may have had an effect, or a lost
//! connection. Deadlocks, certification conflicts and a COMMIT whose outcome is
//! not known (on a cluster, any failure of a guarded batch) retry the whole batch
//! first: its probe settles each member, replaying the keys that committed.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::sync::{mpsc, oneshot};

use super::keyed;
use super::load;
use super::writes::{self, KeyOutcome};
use crate::call::Call;
use crate::db::Persistence;
use crate::db::conn::failure::{AttemptError, Failure};
use crate::db::conn::lease::{LockWait, checkout};
use crate::db::conn::tx::{Committed, Tx};
use crate::db::tables::effects;
use crate::db::tables::idempotency::{self, BatchKeyRow};
use crate::error::Error;
use crate::ledger::{Command, Fingerprint, KeyedOutcome, Refusal, ScopedKey, StoredOutcome};
use crate::telemetry::metrics;

/// The most calls one transaction serves.
pub(crate) const MAX_BATCH: usize = 64;

/// A keyed call waiting for, or in, a batch.
pub(crate) struct Member {
    pub(crate) call: Call,
    pub(crate) key: ScopedKey,
    pub(crate) command: Command,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) answer: oneshot::Sender<Result<KeyedOutcome, Error>>,
    /// Keeps the key marked as queued or in a batch until the member is dropped.
    claim: Option<Claimed>,
}

impl Member {
    pub(crate) fn new(
        call: Call,
        key: ScopedKey,
        command: Command,
        answer: oneshot::Sender<Result<KeyedOutcome, Error>>,
    ) -> Self {
        Self {
            fingerprint: Fingerprint::of(&command),
            call,
            key,
            command,
            answer,
            claim: None,
        }
    }
}

/// A key this instance has queued or in a batch.
struct Claimed {
    key: ScopedKey,
    keys: Arc<std::sync::Mutex<HashSet<ScopedKey>>>,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.remove(&self.key);
        }
    }
}

/// One writer's queue.
struct Shard {
    sender: mpsc::UnboundedSender<Member>,
    waiting: Arc<AtomicUsize>,
}

/// The writers' queues. Each writer serves the calls of a share of the accounts,
/// so all the calls on one account meet in one queue and batch there, while a
/// writer that waits (on a key still in flight elsewhere, on a lock) holds up
/// only its own share.
pub(crate) struct Queue {
    shards: Vec<Shard>,
    /// Keys queued or in a batch here: a second call with one of them does not
    /// queue behind the first (it would wait on it without the lock-wait bound),
    /// but goes to the database alone and waits on the key's row there.
    keys: Arc<std::sync::Mutex<HashSet<ScopedKey>>>,
}

impl Queue {
    /// The queues, and their writers to run once the storage exists. A writer
    /// stops when the queue is dropped.
    pub(crate) fn start(writers: usize) -> (Self, Writers) {
        let mut shards = Vec::with_capacity(writers);
        let mut receivers = Vec::with_capacity(writers);
        for _ in 0..writers.max(1) {
            let (sender, receiver) = mpsc::unbounded_channel();
            let waiting = Arc::new(AtomicUsize::new(0));
            shards.push(Shard {
                sender,
                waiting: waiting.clone(),
            });
            receivers.push((receiver, waiting));
        }
        let queue = Self {
            shards,
            keys: Arc::default(),
        };
        (queue, Writers { receivers })
    }

    /// Queues a call for its writer; gives it back when a call with its key is
    /// already queued or in a batch here.
    pub(crate) fn push(&self, mut member: Member) -> Result<Option<Member>, Error> {
        {
            let mut keys = self
                .keys
                .lock()
                .map_err(|_| Error::internal("the batch keys' lock is poisoned"))?;
            if !keys.insert(member.key.clone()) {
                return Ok(Some(member));
            }
        }
        member.claim = Some(Claimed {
            key: member.key.clone(),
            keys: self.keys.clone(),
        });
        let shard = self
            .shards
            .get(route(&member, self.shards.len()))
            .ok_or_else(|| Error::internal("no batch writer"))?;
        shard.waiting.fetch_add(1, Ordering::SeqCst);
        metrics::batch_waiting(1);
        shard.sender.send(member).map(|()| None).map_err(|_| {
            shard.waiting.fetch_sub(1, Ordering::SeqCst);
            metrics::batch_waiting(-1);
            Error::internal("the batch writers have stopped")
        })
    }

    /// Calls waiting for a writer.
    pub(crate) fn waiting(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.waiting.load(Ordering::SeqCst))
            .sum()
    }
}

/// The writer of a call: by the lowest account it names, else the lowest entry
/// or hold (whose account is found only under lock), else its key.
fn route(member: &Member, writers: usize) -> usize {
    use std::hash::{BuildHasher as _, BuildHasherDefault, DefaultHasher};
    let needs = member.command.operation().needs();
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    let hash = if let Some(account) = needs.accounts.iter().min() {
        hasher.hash_one(("account", account.get()))
    } else if let Some(entry) = needs.entries.iter().min() {
        hasher.hash_one(("entry", entry.get()))
    } else if let Some(hold) = needs.holds.iter().min() {
        hasher.hash_one(("hold", hold.get()))
    } else {
        hasher.hash_one(("key", member.key.key.as_str()))
    };
    usize::try_from(hash % u64::try_from(writers.max(1)).unwrap_or(1)).unwrap_or(0)
}

/// Writers not yet running: [`Writers::run`] spawns them once the storage they
/// write to exists.
pub(crate) struct Writers {
    receivers: Vec<(mpsc::UnboundedReceiver<Member>, Arc<AtomicUsize>)>,
}

impl Writers {
    pub(crate) fn run(self, db: &Persistence) {
        for (mut receiver, waiting) in self.receivers {
            let db = db.weak();
            tokio::spawn(async move {
                while let Some(batch) = next_batch(&mut receiver).await {
                    waiting.fetch_sub(batch.len(), Ordering::SeqCst);
                    metrics::batch_waiting(-isize::try_from(batch.len()).unwrap_or(isize::MAX));
                    let Some(db) = db.upgrade() else { return };
                    // Tracked, so shutdown waits for the batch to commit or roll
                    // back; run in the writer's own task, so a lone call crosses no
                    // more tasks than without group commit. A panic is caught, so
                    // the writer goes on (its members are answered as dropped).
                    let served = db.inner.tasks.track_future(serve(&db, batch));
                    if AssertUnwindSafe(served).catch_unwind().await.is_err() {
                        tracing::error!("a batch panicked; its calls were dropped");
                    }
                }
            });
        }
    }
}

/// Waits for one call, then takes every call already waiting, up to [`MAX_BATCH`].
async fn next_batch(receiver: &mut mpsc::UnboundedReceiver<Member>) -> Option<Vec<Member>> {
    let first = receiver.recv().await?;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(member) => batch.push(member),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// Serves a batch: every member is answered.
async fn serve(db: &Persistence, batch: Vec<Member>) {
    let mut members = Vec::with_capacity(batch.len());
    let mut keys = HashSet::new();
    for member in batch {
        if let Err(e) = member.call.ensure_live() {
            let _ = member.answer.send(Err(e));
        } else if keys.insert(member.key.clone()) {
            members.push(member);
        } else {
            // A second call with a key already in the batch waits for the first on
            // the key's row, then replays it.
            alone(db, member);
        }
    }
    if members.len() <= 1 {
        // Alone, on the one-call path, but in this writer: calls arriving
        // meanwhile form the next batch.
        for member in members {
            let result = keyed::run(db, &member.call, &member.key, &member.command).await;
            let _ = member.answer.send(result);
        }
        return;
    }
    metrics::batch(members.len());
    let max_attempts = db.inner.limits.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        match attempt_batch(db, &members).await {
            Ok(outcomes) => {
                for (member, outcome) in members.into_iter().zip(outcomes) {
                    let _ = member.answer.send(Ok(outcome));
                }
                return;
            }
            Err(Split::Retry(reason)) if attempt < max_attempts => {
                metrics::retry(reason);
                // Backs off as one call would; a delay the tightest deadline
                // cannot afford splits the batch instead.
                let Some(tightest) = tightest(members.iter().map(|m| &m.call)) else {
                    return;
                };
                if !keyed::backoff(attempt, tightest).await {
                    break;
                }
                attempt += 1;
            }
            Err(Split::Retry(_) | Split::Apart) => break,
            Err(Split::Unavailable(reason)) => {
                for member in members {
                    let recorded = member.call.recorded();
                    let reason = reason.clone();
                    let _ = member
                        .answer
                        .send(Err(Error::Unavailable { reason, recorded }));
                }
                return;
            }
        }
    }
    metrics::batch_split();
    for member in members {
        alone(db, member);
    }
}

/// Runs a member on the one-call path, in its own tracked task.
fn alone(db: &Persistence, member: Member) {
    let db = db.clone();
    db.inner.tasks.clone().spawn(async move {
        let Member {
            call,
            key,
            command,
            answer,
            ..
        } = member;
        let _ = answer.send(keyed::run(&db, &call, &key, &command).await);
    });
}

/// Why a batch did not commit.
enum Split {
    /// A deadlock or conflict rolled it back, or its COMMIT's outcome is not
    /// known: try the whole batch again (the reason, for the retry metric).
    Retry(&'static str),
    /// Serve each member alone.
    Apart,
    /// The database is silent or no connection was free: every member is
    /// answered UNAVAILABLE.
    Unavailable(String),
}

impl From<AttemptError> for Split {
    fn from(e: AttemptError) -> Self {
        match e {
            // The next attempt's probe settles every member, as `keyed`'s does:
            // a committed key replays, a free one is decided again.
            AttemptError::Conflict => Self::Retry("conflict"),
            AttemptError::Unsettled(_) => Self::Retry("unsettled"),
            AttemptError::Silent(reason) | AttemptError::NoConnection(reason) => {
                Self::Unavailable(reason)
            }
            _ => Self::Apart,
        }
    }
}

/// One transaction for the batch, on the node its first member routes to; on
/// success, each member's outcome in order.
async fn attempt_batch(db: &Persistence, members: &[Member]) -> Result<Vec<KeyedOutcome>, Split> {
    let first = members.first().ok_or(Split::Apart)?;
    let route = db
        .inner
        .keyed
        .route(
            &first.command.operation().needs(),
            &first.key,
            &db.inner.reads,
        )
        .await;
    let node = db.inner.keyed.choose(&route);
    let pool = node.pool();
    let tightest = tightest(members.iter().map(|m| &m.call)).unwrap_or(&first.call);
    let result = async {
        let mut conn = checkout(pool, tightest).await?;
        let lock_wait =
            LockWait::lower(&mut conn, pool, tightest, db.inner.limits.lock_wait).await?;
        // Read after checkout, it covers the connection checked out.
        let batch = Persistence::batch(pool);
        let tx = Tx::new(&mut conn, pool, lock_wait.duration());
        let result = transaction(db, tx, batch, members).await;
        lock_wait.restore(&mut conn, pool).await;
        result
    }
    .await;
    if let Err(Attempt(AttemptError::ConnectionLost(_) | AttemptError::Silent(_))) = &result {
        pool.report_lost();
        db.inner.keyed.pass_over(node);
    }
    result.map_err(|Attempt(e)| Split::from(e))
}

/// The call with the least time left, which bounds the batch's waits; a call
/// without a deadline has the most.
fn tightest<'a>(calls: impl Iterator<Item = &'a Call>) -> Option<&'a Call> {
    calls.min_by_key(|call| call.remaining().unwrap_or(Duration::MAX))
}

/// A failed attempt at a batch, before it is turned into what to do next.
struct Attempt(AttemptError);

impl From<AttemptError> for Attempt {
    fn from(e: AttemptError) -> Self {
        Self(e)
    }
}

async fn transaction(
    db: &Persistence,
    mut tx: Tx<'_>,
    batch_kind: writes::Batch,
    members: &[Member],
) -> Result<Vec<KeyedOutcome>, Attempt> {
    let rows = match claim(&mut tx, members).await {
        Ok(rows) => rows,
        Err(failure) => return Err(tx.fail(failure).await.into()),
    };
    let mut found = Vec::with_capacity(members.len());
    for member in members {
        let Some(rows) = &rows else {
            member.call.settled_nothing();
            found.push(Found::New);
            continue;
        };
        let Some(row) = rows.iter().find(|r| r.is(&member.key)) else {
            return Err(tx
                .fail(Error::internal("a probed key has no row").into())
                .await
                .into());
        };
        found.push(match row.row.outcome() {
            None => {
                // The key was free: whatever an earlier attempt's COMMIT did, it
                // did not commit.
                member.call.settled_nothing();
                Found::New
            }
            Some(_) if !row.row.binds(member.command.method(), &member.fingerprint) => {
                Found::Reused
            }
            Some(stored) => Found::Replay(stored),
        });
    }
    let decided = match decide(db, &mut tx, batch_kind, members, &found).await {
        Ok(decided) => decided,
        Err(failure) => return Err(tx.fail(failure).await.into()),
    };
    let Decided { outcomes, batch } = decided;
    let fresh: Vec<&Member> = members
        .iter()
        .zip(&found)
        .filter(|(_, f)| matches!(f, Found::New))
        .map(|(m, _)| m)
        .collect();
    for member in &fresh {
        keyed::before_commit(db, &member.call, &member.key, &member.command).await;
    }
    for (i, member) in fresh.iter().enumerate() {
        if member.call.begin_commit().is_err() {
            for committing in fresh.iter().take(i) {
                committing.call.end_commit();
            }
            return Err(tx.fail(Failure::Final(Error::Cancelled)).await.into());
        }
    }
    match tx
        .commit(&batch, batch_kind == writes::Batch::Guarded)
        .await
    {
        Committed::Yes => Ok(members
            .iter()
            .zip(found)
            .zip(outcomes)
            .map(|((_, found), outcome)| KeyedOutcome {
                outcome,
                replayed: !matches!(found, Found::New),
            })
            .collect()),
        Committed::No(failure) => {
            for member in &fresh {
                member.call.end_commit();
            }
            Err(failure.into())
        }
        Committed::Unknown(failure) => {
            for member in &fresh {
                member.call.commit_unknown();
            }
            // Whatever the failure, every member settles through its key.
            Err(Attempt(match failure {
                lost @ (AttemptError::ConnectionLost(_) | AttemptError::Silent(_)) => lost,
                other => AttemptError::Unsettled(format!("{other:?}")),
            }))
        }
    }
}

/// What the batch found under a member's key.
enum Found {
    New,
    Replay(StoredOutcome),
    /// The key was first used for a different request.
    Reused,
}

/// Claims the members' keys (their keys are distinct). When the probe inserted a
/// row for every key, all are new and nothing needs reading back (`None`);
/// otherwise the key rows, read under lock.
async fn claim(tx: &mut Tx<'_>, members: &[Member]) -> Result<Option<Vec<BatchKeyRow>>, Failure> {
    let mut keys: Vec<_> = members
        .iter()
        .map(|m| (&m.key, m.command.method(), &m.fingerprint))
        .collect();
    keys.sort_by(|a, b| {
        (a.0.namespace.as_str(), a.0.key.as_str()).cmp(&(b.0.namespace.as_str(), b.0.key.as_str()))
    });
    if idempotency::probe_all(tx, &keys).await? == keys.len() {
        return Ok(None);
    }
    let keys: Vec<&ScopedKey> = keys.iter().map(|k| k.0).collect();
    idempotency::lock_claimed(tx, &keys).await.map(Some)
}

struct Decided {
    /// Each member's outcome, in order.
    outcomes: Vec<StoredOutcome>,
    batch: String,
}

/// Locks what the new members need, decides each in arrival order, and builds the
/// batch. A member whose key was reused cannot be answered inside the batch (its
/// answer is an error, not an outcome): the batch splits.
async fn decide(
    db: &Persistence,
    tx: &mut Tx<'_>,
    batch_kind: writes::Batch,
    members: &[Member],
    found: &[Found],
) -> Result<Decided, Failure> {
    if found.iter().any(|f| matches!(f, Found::Reused)) {
        return Err(Failure::Final(Error::KeyReused));
    }
    let fresh: Vec<&Member> = members
        .iter()
        .zip(found)
        .filter(|(_, f)| matches!(f, Found::New))
        .map(|(m, _)| m)
        .collect();
    let needs: Vec<_> = fresh
        .iter()
        .map(|m| m.command.operation().needs())
        .collect();
    let mut book = if fresh.is_empty() {
        None
    } else {
        Some(load::book(tx, &needs, &db.inner.ids, &db.inner.reads).await?)
    };
    let encoder = &db.inner.encoder;
    let mut decided = Vec::with_capacity(fresh.len());
    if let Some(book) = book.as_mut() {
        for member in &fresh {
            let operation = member.command.operation();
            book.start_call(member.key.key.clone());
            let result = operation.decide(book);
            book.finish_call(result.is_ok());
            let outcome = match result {
                Ok(reply) => encoder.reply(&reply),
                Err(Refusal::Declined(decline)) => {
                    // A decline writes no effect: a purged key's effect must be looked for.
                    if effects::purged_use(tx, &member.key).await?.is_some() {
                        return Err(Failure::Final(Error::internal("a purged key in a batch")));
                    }
                    encoder.declined(&decline)
                }
                Err(Refusal::Internal(detail)) => return Err(Error::internal(detail).into()),
            };
            decided.push(outcome);
        }
    }
    let changes = book
        .map(crate::ledger::Book::into_changes)
        .unwrap_or_default();
    db.inner.ids.give_back(&changes.unused);
    let keys: Vec<KeyOutcome<'_>> = fresh
        .iter()
        .zip(&decided)
        .map(|(m, outcome)| KeyOutcome {
            key: &m.key,
            outcome,
        })
        .collect();
    let batch = writes::commit_batch(&changes, &keys, batch_kind)?;
    let mut fresh_outcomes = decided.into_iter();
    let outcomes = found
        .iter()
        .map(|f| match f {
            Found::Replay(stored) => Ok(stored.clone()),
            Found::New => fresh_outcomes
                .next()
                .ok_or_else(|| Error::internal("a new key without an outcome")),
            Found::Reused => Err(Error::KeyReused),
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Decided { outcomes, batch })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::tightest;
    use crate::call::Call;

    #[tokio::test]
    async fn the_tightest_call_is_the_one_with_least_time_left() {
        let unbounded = Call::unbounded();
        let later = Call::new(Some(Instant::now() + Duration::from_secs(60)));
        let soon = Call::new(Some(Instant::now() + Duration::from_secs(2)));
        let calls = [&unbounded, &later, &soon, &Call::unbounded()];
        let found = tightest(calls.into_iter()).map(Call::deadline);
        assert_eq!(found, Some(soon.deadline()));
        let found = tightest([&unbounded, &later].into_iter()).map(Call::deadline);
        assert_eq!(found, Some(later.deadline()));
        assert!(tightest(std::iter::empty()).is_none());
    }
}
