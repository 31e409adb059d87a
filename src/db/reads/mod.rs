//! The reads: the read-only operations of the ledger's storage, composed from
//! the tables' statements (`tables`), on the read pool (plain autocommit reads,
//! bounded like every round trip), and on the keyed pool for the reads that wait
//! on a row's lock (a key's look-up, a balance for a time). A [`Reads`] is all a
//! holder can do: the console holds one and can change nothing.
//!
//! - `handle`: [`Reads`] itself, its pages, and the change stream's watchers.
//! - `rows`: rows by id, and pages of journals, open holds and accounts.
//! - `search`: entries by metadata.
//! - `balances`: a balance at a point.
//! - `keys`: a key's stored outcome.
//! - `numbering`: the waits for the change stream's numbers.
//! - `subscriptions`: a client's subscriptions.

mod balances;
mod handle;
mod keys;
mod numbering;
mod rows;
mod search;
mod subscriptions;

pub use handle::{Found, HoldPage, Page, Reads};
