//! Connections and the pool.
//!
//! Every connection is opened here, with `CLIENT_FOUND_ROWS` off (SPEC 3.3): with it
//! on, the probe's `ON DUPLICATE KEY UPDATE k = k` reports 1 for an unchanged
//! duplicate and every retry would charge again. diesel-async's own `establish`
//! turns the flag on, so the `mysql_async` connection is built here and wrapped.
//!
//! bb8 keeps a failed connect to itself and lets callers wait out their timeout.
//! The pool here also watches connect failures, so a caller waiting for a
//! connection while the database is unreachable learns it at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::AsyncMysqlConnection;
use diesel_async::SimpleAsyncConnection as _;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, PoolError, RecyclingMethod,
};
use mysql_async::{Opts, OptsBuilder};
use tokio::sync::watch;

use super::self_check;

pub type Conn = AsyncMysqlConnection;
type Manager = AsyncDieselConnectionManager<Conn>;
pub type Pooled<'a> = bb8::PooledConnection<'a, Manager>;

/// How the pool is sized and how long a call may wait for a connection.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    /// Connections kept open to the database, across all calls of this instance.
    pub size: u32,
    /// The longest a call waits for a free connection; a call's own deadline can
    /// only shorten it.
    pub checkout_timeout: Duration,
}

/// Why no connection was handed out.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    #[error("cannot connect to the database: {0}")]
    Unreachable(String),
    #[error("no pooled connection became free in time")]
    TimedOut,
}

/// Whether the database may abort a transaction from another node, between the
/// statements of a batch (a multi-primary cluster: Galera, Group Replication).
/// Final batches are then guarded and checked after COMMIT (`db::writes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MultiPrimary {
    /// Ask every server a connection is opened to
    #[default]
    Auto,
    /// Assume it, e.g. behind a proxy that hides the servers' settings
    On,
}

#[derive(Debug, Clone)]
pub struct Pool {
    inner: bb8::Pool<Manager>,
    /// The latest connect failure; every new one changes the value.
    connect_failures: Arc<watch::Sender<String>>,
    /// Set, for good, before the first connection to a multi-primary node is
    /// handed out.
    multi_primary: Arc<AtomicBool>,
}

/// Opens one connection that reports affected rows, not found rows. An operator's
/// URL cannot turn `CLIENT_FOUND_ROWS` back on: the flag is set after parsing it.
pub async fn connect(url: &str) -> Result<Conn, ConnectionError> {
    let opts =
        Opts::from_url(url).map_err(|e| ConnectionError::InvalidConnectionUrl(e.to_string()))?;
    let opts = OptsBuilder::from_opts(opts)
        .client_found_rows(false)
        // diesel-async keeps its own prepared-statement cache.
        .stmt_cache_size(0);
    let conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    AsyncMysqlConnection::try_from(conn).await
}

/// Builds the pool of keyed transactions. Connections are opened lazily, so this
/// succeeds while the database is down.
///
/// Its sessions run with `autocommit = 0`, so a transaction starts with its first
/// statement (the probe) and ends with the COMMIT or ROLLBACK that
/// `keyed::transaction` always sends: no BEGIN round trip. Their
/// `innodb_lock_wait_timeout` rests at `lock_wait`, so only a call with a shorter
/// deadline has to change it.
///
/// Connections are not tested with a query at checkout: that would cost a round
/// trip per call. A connection that fails is discarded ([`discard`]) and the
/// transaction retried on another.
pub fn build(
    urls: &[String],
    settings: PoolSettings,
    lock_wait: Duration,
    session: &Session,
) -> Pool {
    let setup = format!(
        "SET SESSION autocommit = 0, innodb_lock_wait_timeout = {}",
        lock_wait.as_secs().max(1)
    );
    let setup = [Some(setup), session.init.clone()]
        .into_iter()
        .flatten()
        .collect();
    build_with(urls, settings, setup, session.multi_primary)
}

/// Builds a pool of plain (autocommit) connections, for reads and health checks.
pub fn build_reads(urls: &[String], settings: PoolSettings, session: &Session) -> Pool {
    build_with(
        urls,
        settings,
        session.init.iter().cloned().collect(),
        session.multi_primary,
    )
}

/// What every connection of a pool is told or asked when it is opened.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// SQL run on every new connection (e.g. causal reads on a cluster).
    pub init: Option<String>,
    pub multi_primary: MultiPrimary,
}

/// Every new connection goes to the first of `urls` that answers, runs `setup`,
/// and passes the self-check (SPEC 3.3) before the pool hands it out.
fn build_with(
    urls: &[String],
    settings: PoolSettings,
    setup: Vec<String>,
    multi_primary: MultiPrimary,
) -> Pool {
    let urls: Arc<[String]> = urls.into();
    let setup: Arc<[String]> = setup.into();
    let multi_primary = Arc::new(AtomicBool::new(multi_primary == MultiPrimary::On));
    let seen = multi_primary.clone();
    let mut config = ManagerConfig::default();
    config.recycling_method = RecyclingMethod::Fast;
    config.custom_setup = Box::new(move |_| {
        let (urls, setup, seen) = (urls.clone(), setup.clone(), seen.clone());
        Box::pin(async move {
            let (conn, multi_primary) = open_first(&urls, &setup).await?;
            if multi_primary {
                seen.store(true, Ordering::Release);
            }
            Ok(conn)
        })
    });
    // The manager's own URL is unused: `open_first` chooses among the nodes.
    let manager = AsyncDieselConnectionManager::new_with_config("", config);
    let connect_failures = Arc::new(watch::Sender::new(String::new()));
    let inner = bb8::Pool::builder()
        .max_size(settings.size)
        .connection_timeout(settings.checkout_timeout)
        // The transaction loop retries with backoff and knows the caller's deadline.
        .retry_connection(false)
        .error_sink(Box::new(FailureSink(connect_failures.clone())))
        .build_unchecked(manager);
    Pool {
        inner,
        connect_failures,
        multi_primary,
    }
}

/// A connection, and whether its server is a multi-primary node.
async fn open_first(urls: &[String], setup: &[String]) -> Result<(Conn, bool), ConnectionError> {
    let mut last = ConnectionError::BadConnection("no database URL".into());
    for url in urls {
        match open(url, setup).await {
            Ok(opened) => return Ok(opened),
            Err(e) => last = e,
        }
    }
    Err(last)
}

async fn open(url: &str, setup: &[String]) -> Result<(Conn, bool), ConnectionError> {
    let mut conn = connect(url).await?;
    for sql in setup {
        conn.batch_execute(sql)
            .await
            .map_err(ConnectionError::CouldntSetupConfiguration)?;
    }
    let multi_primary = self_check::check(&mut conn)
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    Ok((conn, multi_primary))
}

/// Marks a connection so the pool drops it instead of handing it out again: its
/// last statement failed as if the connection were gone.
pub fn discard(conn: &mut Conn) {
    use diesel_async::{AnsiTransactionManager, TransactionManager as _};
    AnsiTransactionManager::transaction_manager_status_mut(conn).set_in_error();
}

impl Pool {
    /// A connection, waiting at most the pool's checkout timeout.
    pub async fn get(&self) -> Result<Pooled<'_>, CheckoutError> {
        self.checkout(None).await
    }

    /// A connection within `limit` (and the pool's checkout timeout). Fails as soon
    /// as a connect attempt fails while no connection is free.
    pub async fn checkout(&self, limit: Option<Duration>) -> Result<Pooled<'_>, CheckoutError> {
        let mut failures = self.connect_failures.subscribe();
        failures.mark_unchanged();
        let get = async {
            match limit {
                Some(limit) => tokio::time::timeout(limit, self.inner.get())
                    .await
                    .unwrap_or(Err(bb8::RunError::TimedOut)),
                None => self.inner.get().await,
            }
        };
        tokio::select! {
            got = get => got.map_err(|e| match e {
                bb8::RunError::User(e) => CheckoutError::Unreachable(e.to_string()),
                bb8::RunError::TimedOut => CheckoutError::TimedOut,
            }),
            Ok(()) = failures.changed() => {
                Err(CheckoutError::Unreachable(failures.borrow().clone()))
            }
        }
    }

    /// Whether any connection of this pool has gone to a multi-primary node (or
    /// one is assumed). Read after checkout, it covers the connection checked out.
    pub fn multi_primary(&self) -> bool {
        self.multi_primary.load(Ordering::Acquire)
    }

    pub fn state(&self) -> bb8::State {
        self.inner.state()
    }
}

/// Records connect failures. Failed health checks of idle connections are not
/// outages (after a database restart every old connection fails once), so only
/// failures to open a connection count.
#[derive(Debug, Clone)]
struct FailureSink(Arc<watch::Sender<String>>);

impl bb8::ErrorSink<PoolError> for FailureSink {
    fn sink(&self, error: PoolError) {
        if let PoolError::ConnectionError(e) = error {
            tracing::debug!(error = %e, "database connect failed");
            // Every failure notifies, also one with the same message as before.
            self.0.send_modify(|reason| *reason = e.to_string());
        }
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<PoolError>> {
        Box::new(self.clone())
    }
}
