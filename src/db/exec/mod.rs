//! The executor: the exactly-once transaction of SPEC 3.2, the same for every
//! operation, and the only code that runs an operation's decision. It builds on
//! the tables (`tables`) and the connection layer (`conn`), and never names an
//! operation.
//!
//! - `executor`: the executor, and how a keyed call enters it.
//! - `core`: what the executor's parts share.
//! - `attempt`: one attempt at the transaction, for a lone call or a batch:
//!   probe, decide, write, COMMIT, settle.
//! - `keyed`: one keyed call's attempts, with its retries.
//! - `writer`: group commit's writers: the queues, which writer serves a call,
//!   batches taken, and a stalled one left to finish apart, holding back only
//!   the calls that touch its accounts.
//! - `group`: group commit, a batch's attempts, retried whole or split.
//! - `locate`: the accounts of the entries and holds calls name, cached, found
//!   before a call is queued and by its attempt.
//! - `load`: locks what an operation needs, in ascending id order.
//! - `writes`: what a decision changed, sent with the COMMIT.
//! - `ids`: new ids, taken from the database in blocks.

mod attempt;
pub(crate) mod core;
pub(crate) mod executor;
pub(crate) mod group;
pub(crate) mod ids;
pub(crate) mod keyed;
pub(crate) mod load;
pub(crate) mod locate;
pub(crate) mod writer;
pub(crate) mod writes;
