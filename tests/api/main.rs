//! Integration tests against a real MySQL or MariaDB (`LEDGER_TEST_DATABASE_URL`,
//! default `mysql://root@127.0.0.1:3306`). Each test gets its own database and its
//! own service instances on random ports.

// helpers.rs is shared with the other test binaries, each of which uses a part.
#![allow(unreachable_pub, missing_debug_implementations, dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod helpers;

mod audit;
mod bounded_waits;
mod commit_check;
mod declines;
mod driver_trap;
mod exactly_once;
mod faults;
mod hostile;
mod operations;
mod outage;
mod process;
mod races;
mod teardown;
mod validation;
