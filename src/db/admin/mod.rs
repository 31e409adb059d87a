//! Work on the database outside the request path, each run by a `ledger`
//! subcommand or once at start: creating and migrating the schema, retention of
//! key rows, the audit of the invariants, and the page-token secret. Each builds
//! only on the connection layer (`conn`).
//!
//! - `migrate`: database creation and the embedded migrations.
//! - `fence`: the change stream's lease, held by the migrations while they run.
//! - `purge`: retention of key rows.
//! - `audit`: the invariants, read from a live database.
//! - `secrets`: the key that signs page tokens, kept in the database so every
//!   instance signs alike.

pub mod audit;
pub mod fence;
pub mod migrate;
pub mod purge;
pub mod secrets;
