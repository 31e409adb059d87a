//! Bounds on waiting and retrying, set once at start, for every layer above
//! (the executor, the reads, the watchers).

use std::time::Duration;

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
