//! All SQL lives here. [`Persistence`] owns the pools, the executor and the
//! reads; each public method is one named operation.
//!
//! The rooms are layers; each builds only on those below it:
//!
//! - `persistence`: [`Persistence`], the storage the service holds.
//! - `exec`: the exactly-once executor, the same for every operation.
//! - `reads`: the read-only operations ([`Reads`]), composed from the tables'
//!   statements.
//! - `watch`: WatchEntries' watchers and the tail they share.
//! - `deliveries`: what the deliverer of subscriptions reads and writes: its
//!   leases, the entries after a cursor, the cursor's moves.
//! - `stream`: the change stream's assigner, a task beside the request path
//!   that numbers committed entries; writers never touch it.
//! - `tables`: one file per table: its rows and its statements.
//! - `admin`: migrations, retention, the audit, the shared secret; work outside
//!   the request path.
//! - `conn`: connections, pools, the self-check, routing, bounded transactions,
//!   failure classification, statements as text, bounds and backoff.
//!
//! `plans` lists the statements whose plans the tests check with `EXPLAIN`.

pub mod admin;
pub mod conn;
mod deliveries;
mod exec;
mod persistence;
pub mod plans;
mod reads;
pub mod stream;
mod tables;
mod watch;

pub use conn::limits::Limits;
pub use conn::pool::{MultiPrimary, Pool, PoolSettings, Role, Session};
pub use conn::route::{Nodes, Routing};
pub(crate) use conn::tx::within;
pub use deliveries::{Deliveries, Leased};
pub use exec::core::{BeforeCommit, BeforeCommitEvent};
pub use persistence::{Persistence, Pools};
pub use reads::{Found, HoldPage, Page, Reads};
pub use tables::holds::OpenAfter;
pub use tables::idempotency::KeyRow;
pub use watch::{Entries, WatchStats};
