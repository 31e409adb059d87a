//! WatchEntries (SPEC 2, 3.8): a watcher streams numbered entries in sequence
//! order, from the first after its cursor, first the backlog page by page from
//! the database, then the batches the instance's one `tail` publishes.
//!
//! The cursor is the last sequence the watcher has scanned (for an account's
//! stream too: it passes other accounts' entries), and it only ever moves forward
//! over a contiguous run, so the stream has no hole and no repeat. A page read
//! below the highest sequence assigned at its start covers everything up to it,
//! since sequences are assigned as a contiguous prefix, each round in one
//! transaction. A watcher subscribes to the tail before its last page, so the
//! first batch it takes starts at or before its cursor; a batch that starts after
//! it (the watcher lagged, and the channel dropped what it missed) sends it back
//! to the pages.
//!
//! Memory is bounded: the stream is a channel of [`BUFFER`] entries fed by a task
//! that waits for room, so it sends as fast as its reader takes, and the tail's
//! channel holds a bounded number of batches.
//!
//! - `watcher`: one watcher, from its cursor to its reader.
//! - `tail`: the one reader of new numbers an instance's watchers share.
//! - `source`: what both read from.

mod source;
mod tail;
mod watcher;

pub(crate) use source::Source;
pub use tail::WatchStats;
pub(crate) use tail::{BATCH_LIMIT, Tail};
pub use watcher::Entries;
pub(crate) use watcher::{PAGE, watch};
