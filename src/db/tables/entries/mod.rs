//! The `entries` table, the append-only journal: finding and locking the entries a
//! refund names, reading entries, pages of an account's journal and numbered
//! entries in sequence order (the change stream), and the SQL of the writes.
//!
//! An entry's sequence is not a column of its own: it is its commit's first
//! sequence (`stream_commits`, see `commits`) plus its place in the commit, so
//! every read of one joins the entry's commit row by its primary key.

mod locks;
mod reads;
mod rows;
mod stream;
mod writes;

pub(crate) use locks::*;
pub(crate) use reads::*;
pub(crate) use stream::*;
pub(crate) use writes::*;
