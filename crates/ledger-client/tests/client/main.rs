//! The client against a live service (the test database: one private server per
//! run, or `LEDGER_TEST_DATABASE_URL`), one file per capability.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../support/mod.rs"]
mod support;

mod answers;
mod batch;
mod budget;
mod connection;
mod failover;
mod faults;
mod overload;
mod service_config;
mod watch;
