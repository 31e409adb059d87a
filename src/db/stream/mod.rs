//! The change stream's assigner (SPEC 3.8): every committed entry gets its
//! ledger-wide `sequence`, 1, 2, 3, ... with no hole, after its commit.
//!
//! Writers never touch the stream's counter: each writing transaction adds one
//! row for its entries to `stream_commits` (`db::tables::commits`), without a
//! number, so no writing transaction waits for another over a counter, and on a
//! multi-primary cluster none conflicts with another node's over one. One
//! assigner for the whole fleet numbers those rows instead, in rounds, each
//! commit taking as many consecutive numbers as it has entries:
//!
//! ```text
//! SELECT owner, lease_until > UTC_TIMESTAMP(6), next_sequence FROM ledger_stream
//!   WHERE id = 1 FOR UPDATE                     (not ours, or expired: stop)
//! SELECT ... FROM stream_commits WHERE first_sequence IS NULL
//!   ORDER BY created_at, commit_id LIMIT n
//!   (the first plain read: its snapshot is taken after every earlier round
//!    committed, and holds only committed rows)
//! [cut at n: SELECT the predecessors of each account's first entry that are numbered]
//! order them (`order`)
//! UPDATE ledger_stream SET next_sequence = ..., lease_until = ... WHERE id = 1 AND
//!   owner = me AND next_sequence = <read>;
//! UPDATE stream_commits SET first_sequence = CASE commit_id WHEN ... END
//!   WHERE commit_id IN (...) AND <ledger_stream's owner is me, and its
//!   next_sequence the new one>;  ...;
//! [none of them carries metadata, and the index held every number before:
//!  UPDATE search_index SET next_sequence = <the new one> WHERE <the same guard>;]
//! COMMIT
//! else, then, in a transaction of its own (`index`, the search index):
//! SELECT ... FROM ledger_stream WHERE id = 1 FOR UPDATE   (ours, and how far
//!   the index reaches)
//! the commits numbered past it, their entries that carry metadata and their
//!   calls' pairs; INSERT INTO search_entries ...;
//! UPDATE search_index SET next_sequence = ... WHERE <the lease is ours and its
//!   next_sequence the one read>; COMMIT
//! ```
//!
//! A round sees only committed commits, and numbers them after every commit of
//! the rounds before, so an entry that commits after a round's snapshot gets a
//! higher number than everything that round numbered; a round's numbers become
//! visible together, at its COMMIT, so a reader that sees one sees every lower one.
//!
//! Each account's entries are numbered in the order they were applied. The
//! commits before a visible one on any of its accounts are visible too: the
//! later one locked the account after the earlier committed, and InnoDB makes a
//! transaction visible before it releases its locks; a cluster node applies
//! write sets that touch the same rows in their commit order. So a round that
//! read every unnumbered commit holds each one's predecessors, numbered or in the
//! round; only a read cut at its limit needs to look the predecessors up.
//!
//! Who assigns is a lease in the `ledger_stream` row, by the database's clock:
//! every instance runs a candidate that takes the lease when it has expired (or
//! renews its own) about every second, and rounds run only while it is held. A
//! lease row rather than `GET_LOCK`, which is per node on Galera; a killed owner
//! is replaced once its lease runs out. Rounds of two assigners cannot
//! interleave: each starts by locking the row (on a cluster, certification
//! refuses the second to commit), and the guards of the final writes, on the
//! owner and the next sequence, make them no-ops outside the transaction that
//! read the row (a Galera transaction aborted mid-batch can see the rest of its
//! batch run in a new one). The migrations hold the lease while they run
//! (`db::admin::fence`), so no round runs while the tables change shape.
//!
//! A round runs about every `rounds::IDLE_TICK` while the ledger is quiet, and
//! `assigner::MIN_GAP` after the last when it found commits or when a local writer
//! committed (`Signals::wake`).

mod assigner;
pub mod index;
mod order;
mod rounds;
mod rows;
mod signals;
mod statements;

pub use assigner::{Assigner, LEASE};
pub use rounds::ROUND_LIMIT;
pub use signals::Signals;
pub use statements::{numbered_sql, numbering_sql, unnumbered_sql};
