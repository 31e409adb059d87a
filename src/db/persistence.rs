//! The ledger's storage: the pools, the executor of keyed calls, and the reads.

use std::sync::Arc;

use super::conn::limits::Limits;
use super::conn::pool::{self, Pool, PoolSettings, Role, Session};
use super::conn::route::{Nodes, Routing};
use super::exec::core::BeforeCommit;
use super::exec::executor::Executor;
use super::reads::Reads;
use super::stream;
use super::watch::WatchStats;
use crate::call::Call;
use crate::error::Error;
use crate::ledger::{DeclineEncoder, KeyedOutcome, ScopedKey};
use crate::ops::Command;

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
            reads: pool::build(urls, reads, Role::Reads, session),
        }
    }
}

/// The ledger's storage: the keyed path and the reads, over the pools.
#[derive(Debug, Clone)]
pub struct Persistence {
    exec: Executor,
    reads: Reads,
    /// Between the writers and the change stream's assigner: committed entries
    /// to number, and the highest number assigned.
    stream: Arc<stream::Signals>,
}

impl Persistence {
    pub fn new(
        pools: Pools,
        limits: Limits,
        encoder: Arc<dyn DeclineEncoder>,
        before_commit: Option<BeforeCommit>,
    ) -> Self {
        let stream: Arc<stream::Signals> = Arc::default();
        let reads = Reads::new(
            pools.reads.clone(),
            pools.keyed.clone(),
            limits,
            stream.clone(),
        );
        let exec = Executor::new(
            pools.keyed,
            pools.reads,
            limits,
            encoder,
            before_commit,
            stream.clone(),
        );
        Self {
            exec,
            reads,
            stream,
        }
    }

    /// The reads alone, for what must not write.
    pub fn read_only(&self) -> Reads {
        self.reads.clone()
    }

    /// The pool of plain reads, which also serves health checks.
    pub fn reads(&self) -> &Pool {
        self.reads.pool()
    }

    /// The pools of keyed transactions.
    pub fn keyed(&self) -> &Nodes {
        self.reads.keyed()
    }

    /// Runs a keyed command exactly once (SPEC 3.2; `exec`).
    pub async fn execute(
        &self,
        call: &Call,
        key: ScopedKey,
        command: Command,
    ) -> Result<KeyedOutcome, Error> {
        self.exec.execute(call, key, command).await
    }

    /// What the change stream's assigner shares with this instance (`stream`).
    pub fn stream(&self) -> Arc<stream::Signals> {
        self.stream.clone()
    }

    /// The highest change-stream sequence assigned, as this instance knows it.
    pub fn assigned(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stream.assigned()
    }

    /// The group-commit writer (of `--batch-writers`) that serves the calls whose
    /// lowest account is `account_id`; `None` without group commit.
    pub fn batch_writer(&self, account_id: u64) -> Option<usize> {
        self.exec.batch_writer(account_id)
    }

    /// Keyed calls waiting for a group-commit writer (0 without group commit).
    pub fn waiting_calls(&self) -> usize {
        self.exec.waiting_calls()
    }

    /// What the change stream has done, and its watchers.
    pub fn watch_stats(&self) -> WatchStats {
        self.reads.watch_stats()
    }

    /// Ends every watcher (each is told to resume elsewhere) and refuses new ones.
    pub fn close_watchers(&self) {
        self.reads.close_watchers();
    }

    /// Stops taking new transactions and waits, until `deadline`, for those running
    /// to commit or roll back. False if some were still running at the deadline.
    pub async fn drain(&self, deadline: tokio::time::Instant) -> bool {
        self.exec.drain(deadline).await
    }
}
