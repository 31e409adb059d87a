//! The `ledger` subcommands: what each runs. Part of the binary, not the library,
//! since without a database URL they run the private development server
//! (`ledger_devtools::managed`), which is not part of the service.

use std::process::ExitCode;

use anyhow::Context as _;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use ledger::app::Application;
use ledger::config::{AuditArgs, DatabaseArgs, HealthcheckArgs, MigrateArgs, PurgeArgs, ServeArgs};
use ledger::db::admin::migrate;
use ledger_devtools::managed::{ManagedOptions, ManagedServer};

/// The database the service uses on its private development server.
const DEV_DATABASE: &str = "ledger";

/// `ledger serve`: serves until SIGTERM or SIGINT, then drains and exits. The
/// development setup (no database URL) turns the console on, on loopback, and
/// delivers to subscribers on loopback and private addresses.
pub(crate) async fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let development = args.database.database_url.is_empty();
    with_database(&args.database, |url| async move {
        let mut settings = args.settings(url)?;
        if development && settings.console.is_none() {
            settings.console = Some(args.development_console());
        }
        if development {
            settings.webhook_allow_private = true;
        }
        let app = Application::build(settings, None).await?;
        app.run_until(shutdown_signal()).await
    })
    .await
}

/// `ledger migrate`: applies pending migrations and exits.
pub(crate) async fn migrate(args: &MigrateArgs) -> anyhow::Result<()> {
    with_database(&args.database, |url| async move {
        // Any node of a cluster will do: the schema replicates.
        let urls = match args.database.database_url.as_slice() {
            [] => vec![url],
            given => given.to_vec(),
        };
        let url = migrate::wait_for_any(&urls, args.database.connect_timeout, true).await?;
        let applied = migrate::run_migrations(&url).await?;
        tracing::info!(database = %migrate::describe(&url), ?applied, "migrations applied");
        Ok(())
    })
    .await
}

/// `ledger audit`: prints every violation and a summary; fails if any.
pub(crate) async fn audit(args: &AuditArgs) -> anyhow::Result<()> {
    with_database(&args.database, |url| async move {
        let report = ledger::audit::audit(&url).await?;
        println!("{report}");
        anyhow::ensure!(report.passed(), "the ledger breaks its invariants");
        Ok(())
    })
    .await
}

/// How long `ledger purge` waits for a serving instance's round to end.
const PURGE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `ledger purge`: one round of retention, then a summary.
pub(crate) async fn purge(args: &PurgeArgs) -> anyhow::Result<()> {
    with_database(&args.database, |url| async move {
        let urls = match args.database.database_url.as_slice() {
            [] => vec![url],
            given => given.to_vec(),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let purged = ledger::db::admin::purge::Purger::new(&urls, args.older_than)
            .round(PURGE_LOCK_WAIT, &stop)
            .await?
            .with_context(|| {
                format!("another instance held the purge lock for {PURGE_LOCK_WAIT:?}")
            })?;
        println!(
            "purged {} key rows created before {} in {} batches",
            purged.rows,
            purged
                .cutoff
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            purged.batches
        );
        Ok(())
    })
    .await
}

/// `ledger healthcheck`: exit 0 if the server reports SERVING, 1 otherwise.
pub(crate) async fn healthcheck(args: &HealthcheckArgs) -> ExitCode {
    match check_health(args).await {
        Ok(ServingStatus::Serving) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("{}: {}", args.target(), status.as_str_name());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{}: {e:#}", args.target());
            ExitCode::FAILURE
        }
    }
}

async fn check_health(args: &HealthcheckArgs) -> anyhow::Result<ServingStatus> {
    let scheme = if args.tls_ca.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", args.target()))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    if let Some(ca) = &args.tls_ca {
        let pem = std::fs::read(ca).with_context(|| format!("cannot read {}", ca.display()))?;
        endpoint = endpoint.tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(pem))
                .domain_name(&args.tls_domain),
        )?;
    }
    let channel: Channel = endpoint.connect().await.context("cannot connect")?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: args.service.clone(),
        })
        .await
        .context("health check failed")?;
    Ok(response.into_inner().status())
}

/// Runs `work` on the configured database, or, without a URL, on the private
/// development server in the data directory, stopping that server afterwards.
async fn with_database<F, Fut>(args: &DatabaseArgs, work: F) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    if let Some(url) = args.database_url.first() {
        let name = migrate::database_name(url)?;
        for other in &args.database_url {
            anyhow::ensure!(
                migrate::database_name(other)? == name,
                "every --database-url must name the same database"
            );
        }
        return work(url.clone()).await;
    }
    let dir = &args.data_dir;
    tracing::warn!(
        data_dir = %dir.display(),
        "DEVELOPMENT SETUP: no --database-url given, so ledger runs a private database \
         server in the data directory; pass --database-url (LEDGER_DATABASE_URL) in production"
    );
    let mut server = ManagedServer::start(ManagedOptions::in_dir(dir))
        .await
        .context("cannot run the development database")?;
    tracing::info!(url = %server.url(DEV_DATABASE), flavor = server.flavor_name(), "development database ready");
    let outcome = work(server.url(DEV_DATABASE)).await;
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
