//! The pools, and a pool's connection opened, set up and self-checked
//! (`connection::connect` opens the bare connection).
//!
//! bb8 keeps a failed connect to itself and lets callers wait out their timeout.
//! The pool here also watches connect failures, so a caller waiting for a
//! connection while the database is unreachable learns it at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::SimpleAsyncConnection as _;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, PoolError, RecyclingMethod,
};
use futures::FutureExt as _;
use tokio::sync::watch;

use super::cluster;
use super::connection::{Conn, READ_BOUND, connect};
use super::self_check::{self, Expect, Kind};

type Manager = AsyncDieselConnectionManager<Conn>;
pub type Pooled<'a> = bb8::PooledConnection<'a, Manager>;

/// The longest a new connection may take to open, set up and pass the self-check:
/// a node that accepts TCP but never answers must not hold a caller for longer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// After a connection was lost or a statement went unanswered, connections are
/// pinged before use for this long (the others may be dead too).
const VERIFY_WINDOW: Duration = Duration::from_secs(10);
/// The longest a ping before use may take.
const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// How a connect that timed out is reported.
const NO_ANSWER: &str = "the database did not answer";

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
/// Final batches are then guarded and checked after COMMIT (`db::exec::writes`).
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
    health: Arc<Health>,
}

/// What the pool knows of the database's recent answers.
#[derive(Debug, Default)]
struct Health {
    /// A statement went unanswered, and no connection has answered since.
    silent: AtomicBool,
    /// Until when connections are pinged before use.
    verify_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Health {
    fn verifying(&self) -> bool {
        let until = self.verify_until.lock().map_or(None, |u| *u);
        until.is_some_and(|until| tokio::time::Instant::now() < until)
    }

    fn suspect(&self) {
        if let Ok(mut until) = self.verify_until.lock() {
            *until = Some(tokio::time::Instant::now() + VERIFY_WINDOW);
        }
    }
}

/// What every connection of a pool is told or asked when it is opened.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// SQL run on every new connection, after the service's own setup.
    pub init: Option<String>,
    pub multi_primary: MultiPrimary,
}

/// The two kinds of connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Keyed transactions: sessions without autocommit, so a transaction starts
    /// with its first statement (the probe) and ends with the COMMIT or ROLLBACK
    /// that `db::conn::tx` always sends: no BEGIN round trip. REPEATABLE READ, the level
    /// the transaction is written for. Their `innodb_lock_wait_timeout` rests at the
    /// configured bound, so only a call with a shorter deadline changes it.
    Keyed { lock_wait_secs: u64 },
    /// Plain reads and health checks, in autocommit, so no read holds a snapshot.
    /// On MariaDB every statement of the session is stopped by the server after
    /// [`READ_BOUND`] (`max_statement_time`, in an executable comment MySQL
    /// skips; there each read carries its hint, `Sql::hinted_only`).
    Reads,
}

impl Role {
    /// The statements that set a new session up, before the operator's.
    fn setup(self) -> String {
        match self {
            Self::Keyed { lock_wait_secs } => format!(
                "SET SESSION autocommit = 0, innodb_lock_wait_timeout = {lock_wait_secs}, \
                 time_zone = '+00:00'; \
                 SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"
            ),
            Self::Reads => {
                let millis = READ_BOUND.as_millis();
                format!(
                    "SET SESSION autocommit = 1, time_zone = '+00:00' \
                     /*M!100301 , max_statement_time = {}.{:03} */",
                    millis / 1000,
                    millis % 1000
                )
            }
        }
    }

    /// What the self-check must find once the operator's statements have run too.
    fn expect(self, multi_primary: MultiPrimary) -> Expect {
        Expect {
            kind: match self {
                Self::Keyed { .. } => Kind::Keyed,
                Self::Reads => Kind::Reads,
            },
            assume_multi_primary: multi_primary == MultiPrimary::On,
        }
    }
}

/// Builds a pool. Connections are opened lazily, so this succeeds while the
/// database is down.
///
/// Connections are not tested with a query at checkout: that would cost a round
/// trip per call. A connection that fails is discarded ([`connection::discard`](super::connection::discard)) and the
/// transaction retried on another; after a failure, connections are pinged before
/// use for a while.
pub fn build(urls: &[String], settings: PoolSettings, role: Role, session: &Session) -> Pool {
    let urls: Arc<[String]> = urls.into();
    let setup = Arc::new(Setup::new(role, session));
    let multi_primary = Arc::new(AtomicBool::new(session.multi_primary == MultiPrimary::On));
    let health = Arc::new(Health::default());
    let seen = multi_primary.clone();
    let mut config = ManagerConfig::default();
    let pinged = health.clone();
    config.recycling_method = RecyclingMethod::CustomFunction(Box::new(move |conn| {
        let health = pinged.clone();
        async move { ping_if_suspect(conn, &health).await }.boxed()
    }));
    let opening = health.clone();
    config.custom_setup = Box::new(move |_| {
        let (urls, setup, seen) = (urls.clone(), setup.clone(), seen.clone());
        let health = opening.clone();
        Box::pin(async move {
            let opened = open_first(&urls, &setup).await;
            // A node that accepts TCP but never answers is as silent as a lost
            // statement: callers stop retrying until one answers.
            if matches!(&opened, Err(ConnectionError::BadConnection(e)) if e.starts_with(NO_ANSWER))
            {
                health.silent.store(true, Ordering::Release);
                health.suspect();
            }
            let (conn, multi_primary) = opened?;
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
        health,
    }
}

/// While connections are suspect, each is pinged before use; an answer clears
/// the silence.
async fn ping_if_suspect(conn: &mut Conn, health: &Health) -> diesel::QueryResult<()> {
    if !health.verifying() {
        return Ok(());
    }
    match tokio::time::timeout(PING_TIMEOUT, conn.batch_execute("DO 1")).await {
        Ok(Ok(())) => {
            health.silent.store(false, Ordering::Release);
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UnableToSendCommand,
            Box::new(format!("no answer to a ping within {PING_TIMEOUT:?}")),
        )),
    }
}

/// How a new connection is set up and what it must pass.
#[derive(Debug)]
pub struct Setup {
    /// The role's own statements.
    role: String,
    /// The operator's `--session-init`, run last.
    init: Option<String>,
    expect: Expect,
}

impl Setup {
    pub fn new(role: Role, session: &Session) -> Self {
        Self {
            role: role.setup(),
            init: session.init.clone(),
            expect: role.expect(session.multi_primary),
        }
    }
}

/// A connection to the first of `urls` that answers, and whether its server is
/// a multi-primary node.
async fn open_first(urls: &[String], setup: &Setup) -> Result<(Conn, bool), ConnectionError> {
    let mut last = ConnectionError::BadConnection("no database URL".into());
    for url in urls {
        match open(url, setup).await {
            Ok(opened) => return Ok(opened),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Opens a connection as a pool of `setup`'s role would, within
/// [`CONNECT_TIMEOUT`], and runs the self-check (SPEC 3.3) on it.
pub async fn open(url: &str, setup: &Setup) -> Result<(Conn, bool), ConnectionError> {
    let opening = async {
        let mut conn = connect(url).await?;
        let setup_failed = ConnectionError::CouldntSetupConfiguration;
        conn.batch_execute(&setup.role)
            .await
            .map_err(setup_failed)?;
        // Before the operator's statements, which may strengthen it but not
        // weaken it (the self-check refuses that).
        let engine = cluster::make_causal(&mut conn)
            .await
            .map_err(setup_failed)?;
        if let Some(init) = &setup.init {
            // The service's clock is UTC whatever the operator's statements set:
            // decisions read SYSDATE(6), which follows the session's time zone,
            // and every other instant the service reads or writes is UTC.
            let init = format!("{init}; SET SESSION time_zone = '+00:00'");
            conn.batch_execute(&init).await.map_err(setup_failed)?;
        }
        let multi_primary = self_check::check(&mut conn, setup.expect, engine)
            .await
            .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
        Ok((conn, multi_primary))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, opening)
        .await
        .unwrap_or_else(|_| {
            Err(ConnectionError::BadConnection(format!(
                "{NO_ANSWER} within {CONNECT_TIMEOUT:?}"
            )))
        })
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

    /// A statement on one of the pool's connections went unanswered: the database
    /// may have gone silent. Until a connection answers again, health reports it,
    /// and connections are pinged before use.
    pub fn report_silence(&self) {
        self.health.silent.store(true, Ordering::Release);
        self.health.suspect();
    }

    /// A connection was lost: the others may be too, so they are pinged before use
    /// for a while.
    pub fn report_lost(&self) {
        self.health.suspect();
    }

    /// Whether a statement went unanswered and no connection has answered since.
    pub fn silent(&self) -> bool {
        self.health.silent.load(Ordering::Acquire)
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
