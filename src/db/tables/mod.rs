//! One file per table: its rows, the statements that read, lock and write them,
//! and how a row becomes a domain value. The tables build only on the connection
//! layer (`conn`); the executor and the reads above them (`exec`, `reads`)
//! combine them.
//!
//! - `accounts`, `entries`, `holds`: the ledger's own rows; `commits`: each
//!   writing transaction's place in the change stream, which numbers its entries;
//!   `limits`: every account's limits over its history.
//! - `idempotency`: the key rows, the probe that claims a key and the stored
//!   outcomes; `effects`: what a key changed, found through the rows that carry it.
//!   Both are tables the executor and the key look-up read alike, so they live
//!   here rather than with the executor.
//! - `balances`: an account's balance at a point, from its journal.
//! - `reversals`: the operations reversed, whose primary key lets none be
//!   reversed twice.
//! - `metadata`: a call's pairs, and the pairs searches start from.
//! - `subscriptions`: the endpoints told of entries, their leases and cursors.

pub(crate) mod accounts;
pub(crate) mod balances;
pub(crate) mod commits;
pub(crate) mod effects;
pub(crate) mod entries;
pub(crate) mod holds;
pub(crate) mod idempotency;
pub(crate) mod limits;
pub(crate) mod metadata;
pub(crate) mod reversals;
pub(crate) mod subscriptions;
