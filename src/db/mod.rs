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
use exec::{group, ids, keyed, locate, writer, writes};
pub use tables::holds::OpenAfter;
pub use tables::idempotency::KeyRow;
pub use tables::reads::{Found, HoldPage, Page};
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

/// The reads of ListHolds (a first page and a later one of `account`) and of a
/// hold's capture entry, with their values written in, to check their plans with
/// `EXPLAIN`: each reaches the account's open holds, or the hold and its entry,
/// through an index.
pub fn hold_reads(account: u64, hold: u64) -> Vec<(&'static str, String)> {
    use tables::holds::{OpenAfter, capture_of_sql, open_page_sql};
    let (Ok(account), Ok(hold)) = (
        crate::ledger::AccountId::parse("account_id", account),
        crate::ledger::HoldId::parse("hold_id", hold),
    ) else {
        return Vec::new();
    };
    let later = OpenAfter {
        created_micros: 1_790_000_000_000_000,
        hold_id: 1,
    };
    vec![
        (
            "a first page of open holds",
            open_page_sql(account, OpenAfter::default(), 101).literal(),
        ),
        (
            "a later page of open holds",
            open_page_sql(account, later, 101).literal(),
        ),
        ("a hold's capture", capture_of_sql(hold).literal()),
    ]
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

/// The reads of metadata (SPEC 3.11) over `pairs` (at least one), for an
/// account's search and an account listing, with their values written in, to
/// check their plans with `EXPLAIN`: each must reach its rows through an index,
/// so a search costs what its driving pair matches, not what the ledger holds.
pub fn metadata_reads(
    pairs: &crate::ledger::Metadata,
    account: u64,
    keys: &[(Vec<u8>, Vec<u8>)],
    commits: &[u64],
) -> Vec<(&'static str, String)> {
    use tables::metadata::{Filter, counts_sql, of_accounts_sql, of_keys_sql};
    let Some(filter) = Filter::driven_by_first(pairs) else {
        return Vec::new();
    };
    let all: Vec<(String, String)> = pairs
        .pairs()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let id = crate::ledger::AccountId::parse("account_id", account).ok();
    vec![
        ("each pair's matches", counts_sql(&all).literal()),
        (
            "a search of every account",
            tables::entries::search_sql(&filter, None, 0, u64::MAX, 100).literal(),
        ),
        (
            "a search of one account",
            tables::entries::search_sql(&filter, id, 0, u64::MAX, 100).literal(),
        ),
        (
            "accounts by metadata",
            tables::accounts::list_sql(Some(&filter), 0, 100).literal(),
        ),
        (
            "every account",
            tables::accounts::list_sql(None, 0, 100).literal(),
        ),
        ("the pairs of calls", of_keys_sql(keys).literal()),
        (
            "the pairs of accounts",
            of_accounts_sql(&[account]).literal(),
        ),
        (
            "the commits still unnumbered",
            tables::commits::still_unnumbered_sql(commits).literal(),
        ),
        (
            "the commits unnumbered",
            tables::commits::UNNUMBERED_SQL.to_owned(),
        ),
    ]
}

/// The reads of a balance at a point (SPEC 3.10) of `account`, with their values written in, to check their plans with `EXPLAIN`:
/// each must reach its rows through an index, so the answer costs the same
/// whatever the journal's length.
pub fn balance_reads(account: u64) -> Vec<(&'static str, String)> {
    use tables::balances::{Place, Upto, balance_sql, lock_sql, stamp_past_sql};
    let Ok(id) = crate::ledger::AccountId::parse("account_id", account) else {
        return Vec::new();
    };
    let search = |upto| balance_sql(id, Place::Search(upto)).literal();
    vec![
        ("the balance at a sequence", search(Upto::Sequence(3))),
        (
            "the balance at a time",
            search(Upto::Micros(1_800_000_000_000_000)),
        ),
        ("the balance now", balance_sql(id, Place::Last).literal()),
        (
            "the balance at a place",
            balance_sql(id, Place::At(7)).literal(),
        ),
        ("the account locked for a time", lock_sql(id).literal()),
        (
            "the account's time moved past a point",
            stamp_past_sql(id, 1_800_000_000_000_000).literal(),
        ),
    ]
}

/// The reads of a reversal (SPEC 3.12) of the operations under `originals`,
/// with their values written in, to check their plans with `EXPLAIN`: the
/// originals' entries (located, then loaded once their accounts are locked)
/// and whether a reversal of each committed. Each must reach its rows through
/// an index, on `entries_key` and the `reversals` primary key.
pub fn reversal_reads(originals: &[ScopedKey]) -> Vec<(&'static str, String)> {
    let refs: Vec<&ScopedKey> = originals.iter().collect();
    vec![
        (
            "the originals' entries",
            tables::entries::of_keys_sql(&refs).literal(),
        ),
        (
            "the originals' reversals",
            tables::reversals::reversed_by_sql(&refs).literal(),
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
    /// WatchEntries streams served at once.
    pub max_watchers: usize,
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
    /// The accounts of the entries and holds calls name.
    locator: locate::Locator,
    /// The transaction tasks, so shutdown can wait for them to commit or roll back.
    tasks: TaskTracker,
    limits: Limits,
    /// Encodes outcomes for the key rows; provided by the wire layer.
    encoder: Arc<dyn DeclineEncoder>,
    before_commit: Option<BeforeCommit>,
    /// Where keyed calls wait for a batch, with group commit on.
    group: Option<writer::Queue>,
    /// The change stream's tail, shared by every watcher of this instance.
    tail: watch::Tail,
    /// Between the writers and the change stream's assigner: committed entries
    /// to number, and the highest number assigned.
    stream: Arc<stream::Signals>,
}

/// The ledger's reads, and nothing else: the read-only operations of
/// [`Persistence`] (`tables::reads`, and `watch`'s streams). It holds no way to
/// the keyed path (`Persistence::execute`), so what holds only this, the console,
/// cannot change anything.
#[derive(Debug, Clone)]
pub struct Reads {
    db: Persistence,
}

impl Reads {
    /// The highest change-stream sequence assigned, as this instance knows it
    /// ([`Persistence::assigned`]).
    pub fn assigned(&self) -> tokio::sync::watch::Receiver<u64> {
        self.db.assigned()
    }
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
            let (queue, writers) = writer::Queue::start(limits.batch_writers);
            (Some(queue), Some(writers))
        } else {
            (None, None)
        };
        let tail = watch::Tail::new(limits.max_watchers);
        let this = Self {
            inner: Arc::new(Inner {
                keyed: pools.keyed,
                reads: pools.reads,
                ids: Arc::default(),
                locator: locate::Locator::default(),
                tasks: TaskTracker::new(),
                limits,
                encoder,
                before_commit,
                group,
                tail,
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

    /// The reads alone, for what must not write.
    pub fn read_only(&self) -> Reads {
        Reads { db: self.clone() }
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
    /// half-finished transaction returns to the pool. The accounts it touches
    /// are found first (`locate`): its writer and its node go by them.
    pub async fn execute(
        &self,
        call: &Call,
        key: ScopedKey,
        command: Command,
    ) -> Result<KeyedOutcome, Error> {
        let reach = self
            .inner
            .locator
            .reach(&command.needs(), &key.namespace, &self.inner.reads, call)
            .await;
        let (key, command, reach) = match &self.inner.group {
            Some(queue) => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                let member = group::Member::new(call.clone(), key, command, reach, answer);
                match queue.push(member)? {
                    None => {
                        return answered
                            .await
                            .map_err(|_| Error::internal("a batch dropped its call unanswered"))?;
                    }
                    Some(alone) => (alone.key, alone.command, alone.reach),
                }
            }
            None => (key, command, reach),
        };
        let this = self.clone();
        let call = call.clone();
        self.inner
            .tasks
            .spawn(async move { keyed::run(&this, &call, &key, &command, &reach).await })
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

    /// The group-commit writer (of `--batch-writers`) that serves the calls whose
    /// lowest account is `account_id`; `None` without group commit.
    pub fn batch_writer(&self, account_id: u64) -> Option<usize> {
        self.inner
            .group
            .as_ref()
            .map(|queue| queue.writer_of(account_id))
    }

    /// Keyed calls waiting for a group-commit writer (0 without group commit).
    pub fn waiting_calls(&self) -> usize {
        self.inner.group.as_ref().map_or(0, writer::Queue::waiting)
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
