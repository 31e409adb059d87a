//! The executor of an instance: how a keyed call enters it, alone or through
//! the group-commit writers.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use super::core::{BeforeCommit, Core, Inner};
use super::{group, keyed, locate, writer};
use crate::call::Call;
use crate::db::conn::limits::Limits;
use crate::db::conn::pool::Pool;
use crate::db::conn::route::Nodes;
use crate::db::stream;
use crate::error::Error;
use crate::ledger::{DeclineEncoder, KeyedOutcome, ScopedKey};
use crate::ops::Command;

/// The exactly-once executor of an instance.
#[derive(Clone)]
pub(crate) struct Executor {
    core: Core,
    /// Where keyed calls wait for a batch, with group commit on.
    group: Option<Arc<writer::Queue>>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("core", &self.core)
            .field("group_commit", &self.group.is_some())
            .finish()
    }
}

impl Executor {
    /// The executor over the keyed `nodes` (and the read pool for its look-ups),
    /// with its writers started when `limits` asks for group commit.
    pub(crate) fn new(
        keyed: Nodes,
        reads: Pool,
        limits: Limits,
        encoder: Arc<dyn DeclineEncoder>,
        before_commit: Option<BeforeCommit>,
        stream: Arc<stream::Signals>,
    ) -> Self {
        let (group, writers) = if limits.batch_writers > 0 {
            let (queue, writers) = writer::Queue::start(limits.batch_writers);
            (Some(queue), Some(writers))
        } else {
            (None, None)
        };
        let core = Core {
            inner: Arc::new(Inner {
                keyed,
                reads,
                ids: Arc::default(),
                locator: locate::Locator::default(),
                tasks: TaskTracker::new(),
                limits,
                encoder,
                before_commit,
                stream,
            }),
        };
        if let Some(writers) = writers {
            writers.run(&core);
        }
        Self {
            core,
            group: group.map(Arc::new),
        }
    }

    /// Runs a keyed command exactly once (SPEC 3.2). The work runs in a batch
    /// writer's task (`group`) or in its own, so it completes (commits or rolls
    /// back) even when the caller goes away and this future is dropped; no
    /// half-finished transaction returns to the pool. The accounts it touches
    /// are found first (`locate`): its writer and its node go by them.
    pub(crate) async fn execute(
        &self,
        call: &Call,
        key: ScopedKey,
        command: Command,
    ) -> Result<KeyedOutcome, Error> {
        let needs = command.needs();
        let reach = self
            .core
            .inner
            .locator
            .reach(&needs, &key.namespace, &self.core.inner.reads, call)
            .await;
        let (key, command, reach) = match &self.group {
            Some(queue) => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                let member = group::Member::new(call.clone(), key, command, reach, needs, answer);
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
        let core = self.core.clone();
        let call = call.clone();
        self.core
            .inner
            .tasks
            .spawn(async move { keyed::run(&core, &call, &key, &command, &reach).await })
            .await
            .map_err(|e| Error::internal(format!("transaction task failed: {e}")))?
    }

    /// The group-commit writer (of `--batch-writers`) that serves the calls whose
    /// lowest account is `account_id`; `None` without group commit.
    pub(crate) fn batch_writer(&self, account_id: u64) -> Option<usize> {
        self.group.as_ref().map(|queue| queue.writer_of(account_id))
    }

    /// Keyed calls waiting for a group-commit writer (0 without group commit).
    pub(crate) fn waiting_calls(&self) -> usize {
        self.group.as_deref().map_or(0, writer::Queue::waiting)
    }

    /// Stops taking new transactions and waits, until `deadline`, for those running
    /// to commit or roll back. False if some were still running at the deadline.
    pub(crate) async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        self.core.inner.tasks.close();
        tokio::time::timeout_at(deadline, self.core.inner.tasks.wait())
            .await
            .is_ok()
    }
}
