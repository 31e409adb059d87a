//! What every part of the executor shares: the keyed pools, the ids, the cache
//! of the accounts calls name, the transaction tasks, the bounds, and the hooks.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

use super::{ids, locate, writes};
use crate::call::Call;
use crate::db::conn::limits::Limits;
use crate::db::conn::pool::Pool;
use crate::db::conn::route::Nodes;
use crate::db::stream;
use crate::ledger::{DeclineEncoder, ScopedKey};
use crate::ops::Method;

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

/// What the executor's parts share, cheap to clone.
#[derive(Clone)]
pub(crate) struct Core {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) keyed: Nodes,
    /// Plain reads: the accounts of named rows, blocks of ids.
    pub(super) reads: Pool,
    pub(super) ids: Arc<ids::Ids>,
    /// The accounts of the entries and holds calls name.
    pub(super) locator: locate::Locator,
    /// The transaction tasks, so shutdown can wait for them to commit or roll back.
    pub(super) tasks: TaskTracker,
    pub(super) limits: Limits,
    /// Encodes outcomes for the key rows; provided by the wire layer.
    pub(super) encoder: Arc<dyn DeclineEncoder>,
    pub(super) before_commit: Option<BeforeCommit>,
    /// Woken after each COMMIT: committed entries wait for the assigner's round.
    pub(super) stream: Arc<stream::Signals>,
}

/// A [`Core`] that does not keep it alive (for the writers).
#[derive(Clone)]
pub(super) struct WeakCore(std::sync::Weak<Inner>);

impl WeakCore {
    pub(super) fn upgrade(&self) -> Option<Core> {
        self.0.upgrade().map(|inner| Core { inner })
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("pool", &self.inner.keyed.first().pool().state())
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

impl Core {
    pub(super) fn weak(&self) -> WeakCore {
        WeakCore(Arc::downgrade(&self.inner))
    }

    /// How final batches are sent on `pool`'s connections.
    pub(super) fn batch(pool: &Pool) -> writes::Batch {
        if pool.multi_primary() {
            writes::Batch::Guarded
        } else {
            writes::Batch::Plain
        }
    }
}
