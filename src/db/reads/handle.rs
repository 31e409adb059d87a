//! The reads' handle: what every read needs below it (the read pool, the keyed
//! pools for the reads that wait on a lock, the bounds, the stream's signals
//! and its tail), and the pages reads answer with.

use std::sync::Arc;

use crate::call::Call;
use crate::db::conn::lease;
use crate::db::conn::limits::Limits;
use crate::db::conn::pool::{Pool, Pooled};
use crate::db::conn::route::Nodes;
use crate::db::stream::Signals;
use crate::db::watch::{self, Entries, Source, Tail, WatchStats};
use crate::error::Error;
use crate::ledger::{AccountId, Entry, Hold};

/// The ledger's reads, and nothing else. It holds no way to the keyed path
/// (`Persistence::execute`), so what holds only this, the console, cannot
/// change anything.
#[derive(Debug, Clone)]
pub struct Reads {
    pub(super) pool: Pool,
    /// The key look-up and a balance for a time wait on a row's lock there.
    pub(super) keyed: Nodes,
    pub(super) limits: Limits,
    pub(super) stream: Arc<Signals>,
    /// The change stream's tail, shared by every watcher of this instance.
    tail: Tail,
}

impl Reads {
    pub(crate) fn new(pool: Pool, keyed: Nodes, limits: Limits, stream: Arc<Signals>) -> Self {
        Self {
            pool,
            keyed,
            stream,
            tail: Tail::new(limits.max_watchers),
            limits,
        }
    }

    /// The read pool, which also serves health checks.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The keyed pools, by node.
    pub(crate) fn keyed(&self) -> &Nodes {
        &self.keyed
    }

    /// A connection of the read pool, within the call's deadline.
    pub(super) async fn read_conn(&self, call: &Call) -> Result<Pooled<'_>, Error> {
        lease::plain(&self.pool, call).await
    }

    /// The highest change-stream sequence assigned, as this instance knows it:
    /// changed after each round its assigner commits, and about every second
    /// from the database while another instance assigns.
    pub fn assigned(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stream.assigned()
    }

    /// Streams the numbered entries after `after` (only `account`'s, when given),
    /// until the receiver is dropped or the instance shuts down (`db::watch`).
    pub async fn watch(&self, account: Option<AccountId>, after: u64) -> Result<Entries, Error> {
        let source = Source {
            pool: self.pool.clone(),
            stream: self.stream.clone(),
        };
        watch::watch(&source, &self.tail, account, after).await
    }

    /// What the change stream has done, and its watchers.
    pub fn watch_stats(&self) -> WatchStats {
        self.tail.stats()
    }

    /// Ends every watcher (each is told to resume elsewhere) and refuses new ones:
    /// a stream never ends by itself, and would hold up a graceful shutdown.
    pub fn close_watchers(&self) {
        self.tail.close();
    }
}

/// A page of search results or of accounts, and whether more follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<T> {
    pub items: Vec<T>,
    pub more: bool,
}

/// A page of an account's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Each entry with its place in the account's journal.
    pub entries: Vec<(u64, Entry)>,
    /// Whether entries follow the last one.
    pub more: bool,
}

/// A page of an account's open holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldPage {
    /// Oldest first.
    pub holds: Vec<Hold>,
    /// Whether holds follow the last one.
    pub more: bool,
}
