//! What watchers and the tail read from.

use std::sync::Arc;

use crate::call::Call;
use crate::db::conn::lease;
use crate::db::conn::pool::{Pool, Pooled};
use crate::db::stream::Signals;
use crate::error::Error;

/// What watchers read from: the read pool, and the stream's signals (the
/// highest sequence assigned). Each watcher and the tail hold one.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) pool: Pool,
    pub(crate) stream: Arc<Signals>,
}

impl Source {
    pub(super) async fn read_conn(&self, call: &Call) -> Result<Pooled<'_>, Error> {
        lease::plain(&self.pool, call).await
    }

    pub(super) fn assigned(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stream.assigned()
    }
}
