use std::process::ExitCode;

use clap::Parser as _;
use ledger::commands;
use ledger::config::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    ledger::telemetry::init(cli.log_format);
    let result = match &cli.command {
        Command::Serve(args) => commands::serve(args).await,
        Command::Migrate(args) => commands::migrate(args).await,
        Command::Audit(args) => commands::audit(args).await,
        Command::Purge(args) => commands::purge(args).await,
        Command::Bench(args) => ledger::tools::bench::run(args).await,
        Command::Healthcheck(args) => return commands::healthcheck(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--help` and `--version` print as usual; a bad flag or value stops with its one
/// line, not clap's usage block.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    eprintln!("{}", message.join(" "));
    ExitCode::from(2)
}

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
