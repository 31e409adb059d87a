//! Test harness shared by the test binaries, one module per concern:
//!
//! - `server`: the database server, a fresh database per test, direct SQL;
//! - `app`: service instances in the test process, on random ports;
//! - `gate`: holding a transaction open before its COMMIT;
//! - `http`: the console through reqwest, its pages read by CSS selectors, its
//!   event streams;
//! - `wire`: request builders, raw replies, the replay marker;
//! - `process`: the `ledger` binary as separate processes;
//! - `proxy`: a TCP proxy that black-holes the database, cuts a connection or
//!   holds a statement back;
//! - `storm`: many calls released at once, and the check their replies pass;
//! - `stream`: waiting for the change stream's numbers, and its promises in SQL;
//! - `follow`: a reader of the change stream that checks every entry continues it;
//! - `cluster`: the multi-primary cluster under test, its engine and its script;
//! - `limits`: limits moved under load, and the journal walk that checks them;
//! - `receiver`: a webhook receiver that verifies every signature, scriptable
//!   to fail, answer late or go down.
//!
//! Each test binary uses a part of it.

#![allow(
    unreachable_pub,
    missing_debug_implementations,
    dead_code,
    unused_imports
)]

pub mod app;
pub mod balances;
pub mod cluster;
pub mod follow;
pub mod gate;
pub mod http;
pub mod limits;
pub mod metadata;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod server;
pub mod storm;
pub mod stream;
pub mod wire;

pub use app::{
    Config, TestApp, charge_refused_for_room, open_funded, park_charges, until_in_flight,
    until_waiting,
};
pub use gate::{Gate, HeldCharge};
pub use process::{LedgerProcess, free_port, run_ledger, until_health};
pub use server::{
    TestDb, assert_audit_passes, assert_each_key_charged_once, is_mariadb, private_server,
    server_url,
};
pub use storm::{HeldStorm, RawReply, assert_one_did_the_work, at_once, storm_config};
pub use stream::{
    NUMBERED, UNNUMBERED_COUNT, add_commits, assert_stream_sound, number_entries, until_lease_free,
    until_sequenced,
};
pub use wire::{
    Bearer, capture, charge, credit, hex, info, leg, limits, open_account, place_hold, post,
    raw_call, reason, refund, replayed, reverse, scrape, set_limits, silent_call, token_line,
    transfer, void, with_deadline, with_token,
};
