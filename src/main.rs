use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use ledger::app::Application;
use ledger::config::{Cli, Command, ServeArgs};
use ledger::managed::{ManagedOptions, ManagedServer};

/// The database the service uses on its private development server.
const DEV_DATABASE: &str = "ledger";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    ledger::telemetry::init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let Some(url) = args.database.database_url.clone() else {
        return serve_on_managed_server(args).await;
    };
    let app = Application::build(&args.settings(url), None).await?;
    app.run_until(shutdown_signal()).await
}

/// Development setup: no database URL, so the service runs a private server.
async fn serve_on_managed_server(args: ServeArgs) -> anyhow::Result<()> {
    let dir = &args.database.data_dir;
    tracing::warn!(
        data_dir = %dir.display(),
        "DEVELOPMENT SETUP: no --database-url given, so ledger runs a private database \
         server in the data directory; pass --database-url (LEDGER_DATABASE_URL) in production"
    );
    let mut server = ManagedServer::start(ManagedOptions::in_dir(dir))
        .await
        .context("cannot run the development database")?;
    tracing::info!(url = %server.url(DEV_DATABASE), flavor = ?server.flavor(), "development database ready");
    let outcome = async {
        let app = Application::build(&args.settings(server.url(DEV_DATABASE)), None).await?;
        app.run_until(shutdown_signal()).await
    }
    .await;
    server
        .stop()
        .await
        .context("stopping the development database")?;
    outcome
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown signal received");
}
