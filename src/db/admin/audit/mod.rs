//! The ledger's invariants as queries, for `ledger audit`.
//!
//! Every check runs in one read-only transaction with a consistent snapshot, so a
//! live service can keep writing while it runs. The set checks are aggregated by
//! the server and return only violating rows (at most [`MAX_REPORTED`] each); the
//! stored outcomes are streamed, so memory stays bounded however large the ledger.
//! Every code in the SQL (entry kinds, hold states, methods) is written from the
//! domain's enums.
//!
//! - `check`: a check as a query, and the SQL the checks share.
//! - `money`: balances and journals, limits, movements of money, holds.
//! - `keys`: keys and their outcomes, metadata, reversals.
//! - `stream`: the change stream's numbers and the journal's times.
//! - `run`: every check in one snapshot, and the stored outcomes streamed
//!   through the wire layer's judgement.

mod check;
mod keys;
mod money;
mod run;
mod stream;

pub use run::{EntryFacts, MAX_REPORTED, Sizes, StoredKey, Violation, run};
pub use stream::SEQUENCE_LAG_BOUND_SECS;
