//! `ledgerctl`: the ledger from the command line, on the `ledger-client` crate, so
//! a keyed command keeps the exactly-once promise the library keeps: one key per
//! operation (made and printed before the first attempt when not given), retries
//! of the same bytes within `--timeout`, and `LookupKey` (and a resend) to
//! settle an outcome that budget left unknown.
//!
//! - `cli`: the flags and subcommands (clap);
//! - `run`: a subcommand into a request, a call, and the exit code;
//! - `render`: replies and declines as a table or protobuf JSON.

mod cli;
mod render;
mod run;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ledgerctl: cannot start: {e}");
            return ExitCode::from(run::FAILED);
        }
    };
    ExitCode::from(runtime.block_on(run::run(cli)))
}
