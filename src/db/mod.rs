//! All SQL lives here. [`Persistence`] owns the pools; each public method is one
//! named operation.
//!
//! The folders are layers; each builds only on those below it:
//!
//! - `exec`: the exactly-once executor, the same for every operation.
//! - `tables`: one file per table, and the plain reads.
//! - `watch`: WatchEntries' watchers and the tail they share.
//! - `stream`: the change stream's assigner, a task beside the request path
//!   that numbers committed entries; writers never touch it.
//! - `admin`: migrations, retention, the audit, the shared secret; work outside
//!   the request path.
//! - `conn`: connections, pools, the self-check, routing, bounded transactions,
//!   failure classification, statements as text.

pub mod admin;
pub mod conn;
mod exec;
pub mod stream;
mod tables;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

use crate::call::Call;
use crate::error::Error;
use crate::ledger::{DeclineEncoder, KeyedOutcome, ScopedKey};
use crate::ops::{Command, Method};
pub use conn::pool::{MultiPrimary, Pool, PoolSettings, Role, Session};
pub use conn::route::{Nodes, Routing};
use exec::{group, ids, keyed, writes};
pub use tables::idempotency::KeyRow;
pub use tables::reads::Page;
pub use watch::{Entries, WatchStats};

/// The reads of the exactly-once transaction that lock or check rows by lists of
/// keys, over these rows, as the service sends them (with their values written
/// in), to check their plans with `EXPLAIN`: each must reach its rows through an
/// index, never a scan, or a locking one would lock rows of other transactions.
pub fn keyed_reads(
    accounts: &[u64],
    entries: &[u64],
    holds: &[u64],
    keys: &[ScopedKey],
) -> Vec<(&'static str, String)> {
    use tables::idempotency::{claimed_condition, committed_count_sql};
    let refs: Vec<&ScopedKey> = keys.iter().collect();
    let none = crate::ledger::StoredOutcome::reply(Vec::new());
    let mut reads = vec![
        (
            "lock accounts",
            tables::accounts::lock_sql(accounts).literal(),
        ),
        ("lock holds", tables::holds::lock_sql(holds).literal()),
        ("lock entries", tables::entries::lock_sql(entries).literal()),
        (
            "lock claimed keys",
            tables::idempotency::lock_claimed_sql(&refs).literal(),
        ),
    ];
    if let Some(first) = keys.first() {
        reads.push((
            "guard of a multi-primary batch",
            format!(
                "SELECT 1 FROM idempotency_keys WHERE {}",
                claimed_condition(first)
            ),
        ));
        let committed: Vec<_> = keys.iter().map(|k| (k, &none)).collect();
        reads.push((
            "check after a multi-primary COMMIT",
            committed_count_sql(&committed),
        ));
    }
    reads
}

/// The change stream's reads (`watch`), with their values written in, to check
/// their plans with `EXPLAIN`: the highest sequence, a page of every account's
/// entries and of `account`'s after `after` (after a sequence, and after a place
/// in its journal), and the tail's read. Each must reach its rows through an
/// index: the tail runs one every few milliseconds.
pub fn stream_reads(account: u64, after: u64, through: u64) -> Vec<(&'static str, String)> {
    use tables::entries::{After, HIGHEST_SQL, numbered_of_sql, numbered_sql};
    let Ok(account) = crate::ledger::AccountId::parse("account_id", account) else {
        return Vec::new();
    };
    vec![
        ("highest sequence", HIGHEST_SQL.to_owned()),
        (
            "a page of every account",
            numbered_sql(after, through, watch::PAGE).literal(),
        ),
        (
            "a page of one account, after a sequence",
            numbered_of_sql(account, After::Sequence(after), through, watch::PAGE).literal(),
        ),
        (
            "a page of one account, after a place",
            numbered_of_sql(account, After::Place(1), through, watch::PAGE).literal(),
        ),
        (
            "the tail",
            numbered_sql(through, u64::MAX, watch::BATCH_LIMIT).literal(),
        ),
    ]
}

/// Bounds on waiting and retrying. Every wait in a transaction is bounded by one of
/// these or by the caller's deadline, whichever is shorter.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The longest a transaction waits for a row lock (`innodb_lock_wait_timeout`).
    pub lock_wait: Duration,
    /// Attempts per call, across deadlocks and lost connections. Sized for
    /// multi-primary clusters, where a hot row written through several nodes
    /// conflicts at COMMIT often (SPEC 3.2.7).
    pub max_attempts: u32,
    /// Writers of group commit (`group`); 0 runs one transaction per call.
    pub batch_writers: usize,
    /// How long a writer waits for its batch before it goes on without it
    /// (`group`): a batch that takes longer runs on in a task of its own, and
    /// the writer serves its other accounts meanwhile.
    pub batch_stall: Duration,
}

/// Called inside each new-key transaction after its outcome is stored and before
/// COMMIT is decided. A fault-injection point: tests and the chaos suite use it to
/// hold a transaction open at the point where a race matters. Unset in production.
pub type BeforeCommit = Arc<dyn Fn(BeforeCommitEvent) -> BoxFuture<'static, ()> + Send + Sync>;

/// What [`BeforeCommit`] is told about the transaction it holds.
#[derive(Debug, Clone)]
pub struct BeforeCommitEvent {
    pub method: Method,
    pub key: ScopedKey,
    /// The call being served, to wait for its abandonment.
    pub call: Call,
}

/// The pools a `Persistence` uses.
#[derive(Debug, Clone)]
pub struct Pools {
    /// Keyed transactions; sessions without autocommit (see `pool::build`), one
    /// pool per node when routed by account (`route`).
    pub keyed: Nodes,
    /// Plain reads and health checks, in autocommit.
    pub reads: Pool,
}

impl Pools {
    /// Builds both over the nodes `urls`: `settings.size` keyed connections (per
    /// node, routed by account), and a quarter as many (at least 2) for reads,
    /// which take no locks and are over in one round trip, on the first node
    /// that answers.
    pub fn build(
        urls: &[String],
        settings: PoolSettings,
        lock_wait: std::time::Duration,
        session: &Session,
        routing: Routing,
    ) -> Self {
        let reads = PoolSettings {
            size: (settings.size / 4).max(2),
            ..settings
        };
        let keyed = Role::Keyed {
            lock_wait_secs: crate::call::whole_secs(lock_wait),
        };
        Self {
            keyed: Nodes::build(urls, settings, keyed, session, routing),
            reads: conn::pool::build(urls, reads, Role::Reads, session),
        }
    }
}

/// The ledger's storage: the pools and the named operations on them.
#[derive(Clone)]
pub struct Persistence {
    inner: Arc<Inner>,
}

struct Inner {
    keyed: Nodes,
    reads: Pool,
    ids: Arc<ids::Ids>,
    /// The transaction tasks, so shutdown can wait for them to commit or roll back.
    tasks: TaskTracker,
    limits: Limits,
    /// Encodes outcomes for the key rows; provided by the wire layer.
    encoder: Arc<dyn DeclineEncoder>,
    before_commit: Option<BeforeCommit>,
    /// Where keyed calls wait for a batch, with group commit on.
    group: Option<group::Queue>,
    /// The change stream's tail, shared by every watcher of this instance.
    tail: watch::Tail,
    /// Between the writers and the change stream's assigner: committed entries
    /// to number, and the highest number assigned.
    stream: Arc<stream::Signals>,
}

/// A [`Persistence`] that does not keep it alive (for its own background tasks).
#[derive(Clone)]
struct WeakPersistence(std::sync::Weak<Inner>);

impl WeakPersistence {
    fn upgrade(&self) -> Option<Persistence> {
        self.0.upgrade().map(|inner| Persistence { inner })
    }
}

impl std::fmt::Debug for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistence")
            .field("pool", &self.inner.keyed.first().pool().state())
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl Persistence {
    pub fn new(
        pools: Pools,
        limits: Limits,
        encoder: Arc<dyn DeclineEncoder>,
        before_commit: Option<BeforeCommit>,
    ) -> Self {
        let (group, writers) = if limits.batch_writers > 0 {
            let (queue, writers) = group::Queue::start(limits.batch_writers);
            (Some(queue), Some(writers))
        } else {
            (None, None)
        };
        let this = Self {
            inner: Arc::new(Inner {
                keyed: pools.keyed,
                reads: pools.reads,
                ids: Arc::default(),
                tasks: TaskTracker::new(),
                limits,
                encoder,
                before_commit,
                group,
                tail: watch::Tail::default(),
                stream: Arc::default(),
            }),
        };
        if let Some(writers) = writers {
            writers.run(&this);
        }
        this
    }

    fn weak(&self) -> WeakPersistence {
        WeakPersistence(Arc::downgrade(&self.inner))
    }

    /// How final batches are sent on `pool`'s connections.
    fn batch(pool: &Pool) -> writes::Batch {
        if pool.multi_primary() {
            writes::Batch::Guarded
        } else {
            writes::Batch::Plain
        }
    }

    /// The pool of plain reads, which also serves health checks.
    pub fn reads(&self) -> &Pool {
        &self.inner.reads
    }

    /// The pools of keyed transactions.
    pub fn keyed(&self) -> &Nodes {
        &self.inner.keyed
    }

    /// Runs a keyed command exactly once (SPEC 3.2). The work runs in a batch
    /// writer's task (`group`) or in its own, so it completes (commits or rolls
    /// back) even when the caller goes away and this future is dropped; no
    /// half-finished transaction returns to the pool.
    pub async fn execute(
        &self,
        call: &Call,
        key: ScopedKey,
        command: Command,
    ) -> Result<KeyedOutcome, Error> {
        let (key, command) = match &self.inner.group {
            Some(queue) => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                let member = group::Member::new(call.clone(), key, command, answer);
                match queue.push(member)? {
                    None => {
                        return answered
                            .await
                            .map_err(|_| Error::internal("a batch dropped its call unanswered"))?;
                    }
                    Some(alone) => (alone.key, alone.command),
                }
            }
            None => (key, command),
        };
        let this = self.clone();
        let call = call.clone();
        self.inner
            .tasks
            .spawn(async move { keyed::run(&this, &call, &key, &command).await })
            .await
            .map_err(|e| Error::internal(format!("transaction task failed: {e}")))?
    }

    /// What the change stream's assigner shares with this instance (`stream`).
    pub fn stream(&self) -> Arc<stream::Signals> {
        self.inner.stream.clone()
    }

    /// The highest change-stream sequence assigned, as this instance knows it:
    /// changed after each round its assigner commits, and about every second
    /// from the database while another instance assigns.
    pub fn assigned(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.stream.assigned()
    }

    /// Keyed calls waiting for a group-commit writer (0 without group commit).
    pub fn waiting_calls(&self) -> usize {
        self.inner.group.as_ref().map_or(0, group::Queue::waiting)
    }

    /// Stops taking new transactions and waits, until `deadline`, for those running
    /// to commit or roll back. False if some were still running at the deadline.
    pub async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        self.inner.tasks.close();
        tokio::time::timeout_at(deadline, self.inner.tasks.wait())
            .await
            .is_ok()
    }
}
