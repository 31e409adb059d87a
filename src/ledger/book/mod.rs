//! The rows a transaction holds locked, as its decisions see them, and what the
//! decisions change.
//!
//! The executor locks every row the calls of a transaction name, loads them into a
//! [`Book`], and lets each call's operation decide against it in turn: a call sees
//! the changes of the calls decided before it in the same transaction. A call that
//! is refused leaves the book as it found it ([`Book::finish_call`]). What is left
//! at the end ([`Book::into_changes`]) is what the transaction writes.
//!
//! New rows take their ids from [`NewIds`], reserved by the executor before the
//! decisions, so a reply can name them before anything is written.
//!
//! - `rows`: the rows as loaded, what a call needs, and what the decisions
//!   changed.
//! - `calls`: the book itself: the calls decided in turn, each one's changes
//!   undone if it is refused, and the look-ups every decision makes.
//! - `journal`: accounts opened and entries appended, within the limits.
//! - `holds`: holds placed, resolved, and released once expired.
//! - `originals`: the operations calls name by key, and their reversals.
//! - `subscriptions`: subscriptions created and their states changed.

mod calls;
mod holds;
mod journal;
mod originals;
mod rows;
mod subscriptions;

pub use calls::{Book, Caller};
pub use holds::NewHold;
pub use journal::Posting;
pub use rows::{
    AccountRow, ChangedAccount, Changes, EntryRow, Needs, NewEntry, NewIds, NewReversal, Original,
    Record, ResolvedHold, RowCounts,
};
