//! `ledgerctl`: the ledger from the command line, on the `ledger-client` crate, so
//! a keyed command keeps the exactly-once promise the library keeps: one key per
//! operation (made and printed before the first attempt when not given), retries
//! of the same bytes within `--timeout`, and `LookupKey` (and a resend) to
//! settle an outcome that budget left unknown.
//!
//! The command line follows from the proto: its subcommands, flags and help are
//! built at run time from the contract's descriptor, and so are the requests
//! and the output, so an RPC or a field added to the proto needs no edit here.
//!
//! - `contract`: the descriptor set, read at run time;
//! - `cli`: the global flags and a subcommand per RPC (clap's builder);
//! - `flags`: a request's fields as flags, and the flags back as the request;
//! - `values`: a flag's text as a field's value;
//! - `money`: which fields are amounts, in which currency, read and written
//!   in the currency's units;
//! - `run`: the call through the client;
//! - `import`: `batch --file`, lines of items sent as Batches, a result a line;
//! - `output`: the output asked for, and the exit codes;
//! - `render`: replies and declines as a table or protobuf JSON.

mod cli;
mod contract;
mod flags;
mod import;
mod money;
mod output;
mod render;
mod run;
mod values;

use std::process::ExitCode;

fn main() -> ExitCode {
    let service = match contract::service(contract::pool()) {
        Ok(service) => service,
        Err(e) => return fail(&e),
    };
    let command_line = match cli::command(&service) {
        Ok(command_line) => command_line,
        Err(e) => return fail(&e),
    };
    let matches = command_line.clone().get_matches();
    let cli = match cli::read(&service, &matches) {
        Ok(cli) => cli,
        // A flag clap took whose value the request cannot (`--amount 10` of
        // USD): a usage error, as clap's own are.
        Err(e) => {
            eprintln!("ledgerctl: {e}");
            return ExitCode::from(output::USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start: {e}")),
    };
    ExitCode::from(runtime.block_on(run::run(cli, command_line)))
}

fn fail(error: &str) -> ExitCode {
    eprintln!("ledgerctl: {error}");
    ExitCode::from(output::FAILED)
}
