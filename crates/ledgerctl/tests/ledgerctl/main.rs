//! `ledgerctl` as a process against a live service: its output (golden files,
//! with ids, timestamps and made keys redacted), its exit codes, a first server
//! that never answers, and a process killed between sending a charge and its
//! reply.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../../../ledger-client/tests/support/mod.rs"]
mod support;

mod exit_codes;
mod failover;
mod golden;
mod import;
mod killed;

use std::process::Stdio;
use std::time::Duration;

/// What one run of `ledgerctl` printed, and how it exited.
pub(crate) struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `ledgerctl` against `server` with `args`; fails after 60 s.
pub(crate) async fn ledgerctl(server: &str, args: &[&str]) -> Run {
    ledgerctl_within(server, args, Duration::from_secs(60)).await
}

/// Runs `ledgerctl` against `server` with `args`; fails after `limit`.
pub(crate) async fn ledgerctl_within(server: &str, args: &[&str], limit: Duration) -> Run {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledgerctl"))
        .args(args)
        .env("LEDGER_SERVER", server)
        .env_remove("LEDGER_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(limit, output)
        .await
        .unwrap_or_else(|_| panic!("ledgerctl {args:?} did not exit within {limit:?}"))
        .unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}
