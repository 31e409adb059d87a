//! Integration tests against a real MySQL or MariaDB (`LEDGER_TEST_DATABASE_URL`,
//! default `mysql://root@127.0.0.1:3306`). Each test gets its own database and its
//! own service instances on random ports.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../support/mod.rs"]
mod support;

mod audit;
mod balances;
mod batch;
mod bounded_waits;
mod capacity;
mod commit_check;
mod console;
mod declines;
mod driver_trap;
mod exactly_once;
mod faults;
mod group_commit;
mod holds;
mod hostile;
mod journal;
mod limits;
mod lookup;
mod metadata;
mod neighbours;
mod open_holds;
mod operations;
mod outage;
mod plans;
mod posts;
mod process;
mod races;
mod refunds;
mod retention;
mod reversals;
mod search;
mod sequence;
mod stalls;
mod stream;
mod stream_faults;
mod subscriptions;
mod teardown;
mod transfers;
mod truthful;
mod validation;
