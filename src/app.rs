//! Builds the service (database, migrations, pool, self-check, listener) and serves
//! it until a shutdown future completes. Tests drive the same code on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

use crate::db::{self, BeforeCommit, Limits, Persistence, PoolSettings, migrate, self_check};
use crate::grpc::{LedgerService, ProtoEncoder};

/// Everything `Application::build` needs, already validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub database_url: String,
    pub pool: PoolSettings,
    pub limits: Limits,
}

#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    service: LedgerService,
    persistence: Persistence,
}

impl Application {
    /// Creates the database if missing, migrates it, checks that connections report
    /// affected rows as the probe needs (refusing to start otherwise) and binds.
    pub async fn build(
        settings: &Settings,
        before_commit: Option<BeforeCommit>,
    ) -> anyhow::Result<Self> {
        let url = &settings.database_url;
        migrate::ensure_database(url).await?;
        let applied = migrate::run_migrations(url).await?;
        if !applied.is_empty() {
            tracing::info!(?applied, "migrations applied");
        }
        let pool = db::pool::build(url, settings.pool);
        {
            let mut conn = pool
                .get()
                .await
                .context("cannot open a pooled database connection")?;
            self_check::verify_affected_rows(&mut conn).await?;
        }
        let persistence =
            Persistence::new(pool, settings.limits, Arc::new(ProtoEncoder), before_commit);
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        Ok(Self {
            listener,
            service: LedgerService::new(persistence.clone()),
            persistence,
        })
    }

    /// The bound address (the real port when built with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener always has a local address.
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    pub fn persistence(&self) -> &Persistence {
        &self.persistence
    }

    /// Serves until `shutdown` completes, then stops accepting calls and lets those
    /// in flight finish.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let addr = self.local_addr();
        tracing::info!(%addr, "serving ledger.v1.Ledger");
        let incoming = TcpIncoming::from(self.listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(self.service.into_server())
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .context("gRPC server failed")?;
        tracing::info!("stopped");
        Ok(())
    }
}
