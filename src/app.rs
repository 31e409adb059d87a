//! Builds the service (database, migrations, pool, self-check, listener) and serves
//! it, with health and reflection, until a shutdown future completes; then drains.
//! Tests drive the same code on port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use crate::config::Settings;
use crate::console::{self, Console, ConsoleSettings};
use crate::db::admin::migrate;
use crate::db::admin::purge::Purger;
use crate::db::stream::Assigner;
use crate::db::{self, BeforeCommit, Deliveries, Persistence};
use crate::deliver::{Deliverer, DeliverySettings};
use crate::grpc::auth::Authenticator;
use crate::grpc::connections;
use crate::grpc::{
    Admission, LedgerService, PageTokens, ProtoEncoder, Reader, ResourceExhausted, Weighed,
};
use crate::health;
use crate::memory;
use crate::proto::pb;
use crate::telemetry::metrics;

/// The startup self-check (SPEC 3.3) against every configured node that answers,
/// on a connection set up as the keyed pool's are; one that does not answer is
/// checked when a connection to it is first opened (every new connection is).
async fn check_every_node(urls: &[String], settings: &Settings) -> anyhow::Result<()> {
    let keyed = db::conn::pool::Setup::new(
        db::Role::Keyed {
            lock_wait_secs: crate::call::whole_secs(settings.limits.lock_wait),
        },
        &settings.session,
    );
    for url in urls {
        let at = migrate::describe(url);
        let mut conn = match db::conn::connection::connect(url).await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(%at, error = %e, "node unreachable; checked when first used");
                continue;
            }
        };
        if db::conn::self_check::read_only(&mut conn).await? {
            tracing::warn!(%at, "node is read-only (a replica or a secondary): no keyed transaction goes there while it is");
            continue;
        }
        let (_, multi_primary) = db::conn::pool::open(url, &keyed)
            .await
            .with_context(|| format!("the self-check failed on {at}"))?;
        if multi_primary {
            tracing::info!(%at, "a multi-primary node: final batches are guarded and checked after COMMIT");
        }
    }
    Ok(())
}

/// Opens a keyed connection to some node, to fail at start rather than at the
/// first call; routed by account, a node that does not answer yet is not needed.
async fn open_a_keyed_connection(nodes: &db::Nodes) -> anyhow::Result<()> {
    let mut last = None;
    for node in nodes.iter() {
        match node.pool().get().await {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow::anyhow!(
        "cannot open a pooled database connection: {}",
        last.map_or_else(|| "no database URL".to_owned(), |e| e.to_string())
    ))
}

/// Tokens sent in the clear can be read off the network: say so at start.
fn warn_about_plaintext_tokens(settings: &Settings) {
    if settings.auth.is_some() && settings.tls.is_none() && !settings.listen.ip().is_loopback() {
        tracing::warn!(
            listen = %settings.listen,
            "bearer tokens are accepted without TLS on a non-loopback address: they cross the \
             network in the clear; set --tls-cert and --tls-key"
        );
    }
}

/// The console's listener on its address; in the development setup, on the next
/// free port when that one is taken.
async fn bind_console(console: &ConsoleSettings) -> anyhow::Result<TcpListener> {
    /// Ports tried after a taken one, in the development setup.
    const NEXT_PORTS: u16 = 20;
    let mut addr = console.addr;
    let tries = if console.next_free_port {
        NEXT_PORTS
    } else {
        0
    };
    for _ in 0..tries {
        match TcpListener::bind(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                addr.set_port(addr.port().saturating_add(1));
            }
            bound => return bound.with_context(|| format!("cannot listen on {addr} (console)")),
        }
    }
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (console)"))
}

/// An unauthenticated console off loopback was asked for (`config`); say what it
/// shows and to whom. Tokens from a browser cross the network in the clear too.
fn warn_about_a_remote_console(settings: &Settings, addr: SocketAddr) {
    if addr.ip().is_loopback() {
        return;
    }
    if settings.auth.is_none() {
        tracing::warn!(console = %addr, "the console is not on a loopback address and asks for no token: anyone who reaches it reads every account");
    } else {
        tracing::warn!(console = %addr, "the console serves plain HTTP on a non-loopback address: tokens typed into it cross the network in the clear; put it behind a TLS proxy");
    }
}

#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    /// The web console's, when it is on, and its settings.
    console: Option<(TcpListener, ConsoleSettings)>,
    persistence: Persistence,
    admission: Admission,
    pages: PageTokens,
    settings: Settings,
}

impl Application {
    /// Waits for the database (up to the connect timeout), creates it if missing,
    /// migrates it, checks that connections report affected rows as the probe needs
    /// (refusing to start otherwise) and binds.
    pub async fn build(
        settings: Settings,
        before_commit: Option<BeforeCommit>,
    ) -> anyhow::Result<Self> {
        let urls: Vec<String> = std::iter::once(settings.database_url.clone())
            .chain(settings.failover_urls.iter().cloned())
            .collect();
        let url = &migrate::wait_for_any(&urls, settings.connect_timeout, settings.migrate).await?;
        if settings.migrate {
            let applied = migrate::run_migrations(url).await?;
            if !applied.is_empty() {
                tracing::info!(?applied, "migrations applied");
            }
        } else {
            let pending = migrate::pending(url).await?;
            anyhow::ensure!(
                pending.is_empty(),
                "the database has pending migrations {pending:?}: run `ledger migrate` first"
            );
        }
        check_every_node(&urls, &settings).await?;
        warn_about_plaintext_tokens(&settings);
        let pages = PageTokens::new(&db::admin::secrets::page_token_key(url).await?)
            .map_err(|e| anyhow::anyhow!("the page-token key: {e}"))?;
        let pools = db::Pools::build(
            &urls,
            settings.pool,
            settings.limits.lock_wait,
            &settings.session,
            settings.routing,
        );
        open_a_keyed_connection(&pools.keyed).await?;
        if let Some(addr) = settings.metrics_listen {
            metrics::install(addr)?;
            tracing::info!(%addr, "serving Prometheus metrics at /metrics");
        }
        let persistence = Persistence::new(
            pools,
            settings.limits,
            Arc::new(ProtoEncoder),
            before_commit,
        );
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let console = match &settings.console {
            Some(console) => Some((bind_console(console).await?, console.clone())),
            None => None,
        };
        let admission = Admission::new(
            settings.max_concurrent_calls,
            settings.max_call_memory,
            settings.pool.checkout_timeout,
        );
        Ok(Self {
            listener,
            console,
            persistence,
            admission,
            pages,
            settings,
        })
    }

    /// The bound address (the real port when built with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener always has a local address.
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The console's bound address, when it is on.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    pub fn persistence(&self) -> &Persistence {
        &self.persistence
    }

    /// What every call is admitted through.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Serves until `shutdown` completes. Then: end the WatchEntries streams (they
    /// never end by themselves), report NOT_SERVING (and keep serving for the
    /// shutdown delay), stop accepting calls, let those in flight finish within the
    /// shutdown grace, and close the pool.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            listener,
            console,
            persistence,
            admission,
            pages,
            settings,
        } = self;
        let addr = listener.local_addr()?;
        let reporter = HealthReporter::new();
        health::set_all(&reporter, ServingStatus::Serving).await;
        let background = Background::start(&settings, &persistence, &reporter);

        let reader = Reader::new(persistence.read_only(), pages, admission);
        let router = router(&settings, &persistence, reader.clone(), &reporter)?;
        let stop_accepting = CancellationToken::new();
        let console = console
            .map(|console| spawn_console(console, &settings, reader, &reporter, &stop_accepting));
        let incoming = connections::capped(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            settings.max_connections,
        );
        let serving =
            router.serve_with_incoming_shutdown(incoming, stop_accepting.clone().cancelled_owned());
        let mut serving = std::pin::pin!(serving);
        let bound = memory::Bound::of(&settings, memory::resident().unwrap_or(0));
        metrics::memory_bound(bound.total());
        tracing::info!(memory_bound_bytes = bound.total(), "memory bound {bound}");
        tracing::info!(%addr, tls = settings.tls.is_some(), auth = settings.auth.is_some(), "serving ledger.v1.Ledger");
        tokio::select! {
            failed = &mut serving => {
                background.stop().await;
                return failed.context("gRPC server failed");
            }
            () = shutdown => {}
        }

        let (delay, grace) = (settings.shutdown_delay, settings.shutdown_grace);
        tracing::info!(
            ?delay,
            ?grace,
            "shutting down: NOT_SERVING, then draining calls in flight"
        );
        persistence.close_watchers();
        background.stop().await;
        health::set_all(&reporter, ServingStatus::NotServing).await;
        tokio::select! {
            failed = &mut serving => return failed.context("gRPC server failed"),
            () = tokio::time::sleep(delay) => {}
        }
        stop_accepting.cancel();
        let deadline = tokio::time::Instant::now() + grace;
        if let Ok(drained) = tokio::time::timeout_at(deadline, &mut serving).await {
            drained.context("gRPC server failed")?;
        } else {
            tracing::warn!("calls still in flight after the shutdown grace; stopping");
        }
        if let Some(console) = console {
            // Its pages' reads are over within their deadline, and its tails end
            // with their watchers, ended above.
            if tokio::time::timeout_at(deadline, console).await.is_err() {
                tracing::warn!("console requests still in flight after the shutdown grace");
            }
        }
        if !persistence.drain(deadline).await {
            tracing::warn!("transactions still running after the shutdown grace");
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// The tasks beside the request path: the database's health watch, the
/// deliverer of subscriptions, and, where configured, retention's purge and the
/// change stream's assigner. They stop
/// together, at shutdown or when serving fails.
struct Background {
    stop: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

impl Background {
    fn start(settings: &Settings, persistence: &Persistence, reporter: &HealthReporter) -> Self {
        let stop = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        let urls: Vec<String> = std::iter::once(settings.database_url.clone())
            .chain(settings.failover_urls.iter().cloned())
            .collect();
        tasks.spawn(health::watch_database(
            persistence.clone(),
            reporter.clone(),
            stop.clone(),
        ));
        if let Some(retention) = settings.key_retention {
            tasks.spawn(Purger::new(&urls, retention).run(stop.clone()));
        }
        if settings.stream_assigner {
            let assigner = Assigner::new(&urls, &settings.session, persistence.stream());
            tasks.spawn(assigner.run(stop.clone()));
        }
        let delivery = DeliverySettings {
            allow_private: settings.webhook_allow_private,
        };
        match Deliverer::new(Deliveries::new(persistence.reads().clone()), delivery) {
            Ok(deliverer) => {
                tasks.spawn(deliverer.run(stop.clone()));
            }
            Err(e) => tracing::error!(error = %e, "cannot deliver to subscribers"),
        }
        Self { stop, tasks }
    }

    /// Stops every task, and waits until each has.
    async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Serves the console on `listener` until `stop` (when the gRPC server stops
/// accepting calls).
fn spawn_console(
    (listener, options): (TcpListener, ConsoleSettings),
    settings: &Settings,
    reader: Reader,
    reporter: &HealthReporter,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let bound = listener.local_addr().unwrap_or(options.addr);
    warn_about_a_remote_console(settings, bound);
    tracing::info!(console = %format!("http://{bound}/"), "serving the console");
    let pages = Console::new(
        reader,
        HealthService::from_health_reporter(reporter.clone()),
        settings.auth.clone(),
        &options,
        bound,
    )
    .router();
    tokio::spawn(console::serve(
        listener,
        pages,
        stop.clone().cancelled_owned(),
    ))
}

fn router(
    settings: &Settings,
    persistence: &Persistence,
    reader: Reader,
    reporter: &HealthReporter,
) -> anyhow::Result<tonic::transport::server::Router> {
    let mut builder = Server::builder()
        .max_concurrent_streams(settings.max_concurrent_streams)
        .initial_connection_window_size(connections::CONNECTION_WINDOW)
        .initial_stream_window_size(connections::STREAM_WINDOW);
    if let Some(tls) = &settings.tls {
        builder = builder.tls_config(tls.config())?;
    }
    let admission = reader.admission().clone();
    let ledger = LedgerService::new(persistence.clone(), reader)
        .into_server()
        .max_decoding_message_size(settings.max_message_bytes);
    let ledger = Weighed::new(ledger, admission, settings.max_message_bytes);
    let ledger = InterceptedService::new(
        ResourceExhausted(ledger),
        Authenticator::new(settings.auth.clone()),
    );
    // Each version lists both reflection services, so `grpcurl list` shows them
    // whichever version it speaks.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    Ok(builder
        .add_service(HealthServer::new(HealthService::from_health_reporter(
            reporter.clone(),
        )))
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(ledger))
}
