//! Creates the database when it is missing and applies the embedded migrations.
//!
//! They are applied by `ledger migrate` and by every `ledger serve` at start,
//! perhaps while instances of an older version still serve the database (a
//! rolling upgrade): instances migrating at once take turns (a named lock), and
//! a run that applies any migration holds the change stream's lease for as long
//! as it runs (`fence`), so no assigner, of any version, numbers entries while
//! the tables it numbers change shape.

use std::time::Duration;

use diesel::dsl::sql;
use diesel::migration::MigrationVersion;
use diesel::sql_types::{Integer, Nullable};
use diesel_async::AsyncMysqlConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use mysql_async::{Opts, OptsBuilder};

use super::fence::Fence;
use crate::db::conn::cluster;
use crate::db::conn::connection::connect;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// The named lock (`GET_LOCK`) that serializes instances migrating at once.
const MIGRATION_LOCK: &str = "ledger.migrations";
/// How long an instance waits for another one's migrations: they are DDL on small
/// tables, seconds at most.
const MIGRATION_LOCK_WAIT_SECS: u32 = 120;

/// Server errors that retrying cannot fix: wrong credentials or privileges.
const REFUSED: [u16; 3] = [1044, 1045, 1698];
/// The database a URL names does not exist.
const UNKNOWN_DATABASE: u16 = 1049;

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("invalid database URL: {0}")]
    Url(String),
    #[error("the database URL must name a database, e.g. mysql://root@127.0.0.1:3306/ledger")]
    NoDatabase,
    #[error("database name {0:?} must be letters, digits and underscores")]
    DatabaseName(String),
    #[error("cannot reach the database at {at}: {reason}")]
    Unreachable { at: String, reason: String },
    #[error("the database at {at} refused the connection: {reason}")]
    Refused { at: String, reason: String },
    #[error("the database {at} does not exist: run `ledger migrate` first")]
    Missing { at: String },
    #[error("cannot connect to the database: {0}")]
    Connect(#[from] diesel::ConnectionError),
    #[error("cannot create the database: {0}")]
    Create(diesel::result::Error),
    #[error("migrations failed: {0}")]
    Migrations(String),
}

/// The database a URL names, checked to need no quoting.
pub fn database_name(url: &str) -> Result<String, MigrateError> {
    let opts = Opts::from_url(url).map_err(|e| MigrateError::Url(e.to_string()))?;
    let name = opts.db_name().ok_or(MigrateError::NoDatabase)?.to_owned();
    let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if name.is_empty() || name.len() > 64 || !plain {
        return Err(MigrateError::DatabaseName(name));
    }
    Ok(name)
}

/// `host:port/database` of a URL, for messages: never the password.
pub fn describe(url: &str) -> String {
    Opts::from_url(url).map_or_else(
        |_| "an invalid URL".to_owned(),
        |o| {
            format!(
                "{}:{}/{}",
                o.ip_or_hostname(),
                o.tcp_port(),
                o.db_name().unwrap_or("")
            )
        },
    )
}

/// Keeps trying each of `urls` in order, with backoff until `timeout` while none
/// can be reached (a server may still be starting), and returns the first that
/// answers; other failures end at once. With `create`, the database is created
/// when missing ([`ensure_database`]); without, it must exist (an account that
/// only serves needs no CREATE privilege).
pub async fn wait_for_any(
    urls: &[String],
    timeout: Duration,
    create: bool,
) -> Result<String, MigrateError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(100);
    loop {
        let mut last = None;
        for url in urls {
            let reached = if create {
                ensure_database(url).await
            } else {
                reach(url).await
            };
            match reached {
                Ok(()) => return Ok(url.clone()),
                Err(MigrateError::Unreachable { at, reason }) => {
                    last = Some(MigrateError::Unreachable { at, reason });
                }
                Err(other) => return Err(other),
            }
        }
        let Some(MigrateError::Unreachable { at, reason }) = last else {
            return Err(MigrateError::NoDatabase);
        };
        if tokio::time::Instant::now() + delay >= deadline {
            return Err(MigrateError::Unreachable {
                at,
                reason: format!("{reason} (gave up after {timeout:?})"),
            });
        }
        tracing::info!(%at, %reason, retry_in = ?delay, "database not reachable yet");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Connects to the database a URL names.
async fn reach(url: &str) -> Result<(), MigrateError> {
    let opts = Opts::from_url(url).map_err(|e| MigrateError::Url(e.to_string()))?;
    let conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| refused_or_unreachable(url, e))?;
    let _ = conn.disconnect().await;
    Ok(())
}

/// A refusal (credentials, privileges, no such database) is final; anything else
/// may pass.
fn refused_or_unreachable(url: &str, e: mysql_async::Error) -> MigrateError {
    let at = describe(url);
    let reason = e.to_string();
    match e {
        mysql_async::Error::Server(s) if s.code == UNKNOWN_DATABASE => MigrateError::Missing { at },
        mysql_async::Error::Server(s) if REFUSED.contains(&s.code) => {
            MigrateError::Refused { at, reason }
        }
        _ => MigrateError::Unreachable { at, reason },
    }
}

/// `CREATE DATABASE IF NOT EXISTS` through a connection that names no database.
pub async fn ensure_database(url: &str) -> Result<(), MigrateError> {
    let name = database_name(url)?;
    let opts = Opts::from_url(url).map_err(|e| MigrateError::Url(e.to_string()))?;
    let server_only: Opts = OptsBuilder::from_opts(opts).db_name(None::<String>).into();
    let conn = mysql_async::Conn::new(server_only)
        .await
        .map_err(|e| refused_or_unreachable(url, e))?;
    let mut conn = AsyncMysqlConnection::try_from(conn).await?;
    conn.batch_execute(&format!(
        "CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    ))
    .await
    .map_err(MigrateError::Create)
}

/// Applies pending migrations; returns the versions applied.
///
/// Instances starting together take turns: a named lock, held by the migrating
/// session until it closes, serializes them, and the later ones find nothing to
/// do. With migrations to apply, the change stream's lease is taken first and
/// handed back after them, whether they succeeded or not.
pub async fn run_migrations(url: &str) -> Result<Vec<String>, MigrateError> {
    let mut conn = causal(url).await?;
    let locked: Option<i32> = diesel::select(sql::<Nullable<Integer>>(&format!(
        "GET_LOCK('{MIGRATION_LOCK}', {MIGRATION_LOCK_WAIT_SECS})"
    )))
    .get_result(&mut conn)
    .await
    .map_err(|e| MigrateError::Migrations(e.to_string()))?;
    if locked != Some(1) {
        return Err(MigrateError::Migrations(format!(
            "another instance held the migration lock for {MIGRATION_LOCK_WAIT_SECS} s"
        )));
    }
    if pending(url).await?.is_empty() {
        return Ok(Vec::new());
    }
    let fence = Fence::take(url).await.map_err(|e| {
        MigrateError::Migrations(format!("cannot take the change stream's lease: {e}"))
    })?;
    let applied = with_harness(conn, |h| {
        h.run_pending_migrations(MIGRATIONS)
            .map(|versions| versions.iter().map(MigrationVersion::to_string).collect())
    })
    .await;
    if let Some(fence) = fence
        && let Err(e) = fence.release().await
    {
        if applied.is_ok() {
            return Err(MigrateError::Migrations(format!(
                "after the migrations: {e}"
            )));
        }
        tracing::error!(error = %e, "after the migrations failed");
    }
    applied
}

/// The versions of the migrations not yet applied.
///
/// It reads diesel's table of applied versions itself: diesel's harness would
/// first create that table if missing, which takes a CREATE privilege an
/// account that only serves does not need.
pub async fn pending(url: &str) -> Result<Vec<String>, MigrateError> {
    #[derive(diesel::QueryableByName)]
    struct Applied {
        #[diesel(sql_type = diesel::sql_types::Text)]
        version: String,
    }
    let mut conn = causal(url).await?;
    let applied: Vec<Applied> = diesel::sql_query("SELECT version FROM __diesel_schema_migrations")
        .load(&mut conn)
        .await
        .unwrap_or_default();
    let embedded =
        diesel::migration::MigrationSource::<diesel::mysql::Mysql>::migrations(&MIGRATIONS)
            .map_err(|e| MigrateError::Migrations(e.to_string()))?;
    Ok(embedded
        .iter()
        .map(|m| m.name().version().to_string())
        .filter(|version| !applied.iter().any(|a| a.version == *version))
        .collect())
}

/// A connection whose reads see everything the cluster committed before they
/// began (`db::conn::cluster`): an instance started on one node right after another
/// migrated through a second must see the migrations' tables and their record
/// together, or it would apply them again.
async fn causal(url: &str) -> Result<AsyncMysqlConnection, MigrateError> {
    let mut conn = connect(url).await?;
    cluster::make_causal(&mut conn)
        .await
        .map_err(|e| MigrateError::Migrations(format!("setting causal reads: {e}")))?;
    Ok(conn)
}

type Harness = AsyncConnectionWrapper<AsyncMysqlConnection>;

/// diesel's migration harness is synchronous; the wrapper drives the async
/// connection from a blocking thread, which needs the multi-thread runtime.
async fn with_harness<T, F>(conn: AsyncMysqlConnection, f: F) -> Result<T, MigrateError>
where
    T: Send + 'static,
    F: FnOnce(&mut Harness) -> diesel::migration::Result<T> + Send + 'static,
{
    let mut harness: Harness = conn.into();
    tokio::task::spawn_blocking(move || f(&mut harness))
        .await
        .map_err(|e| MigrateError::Migrations(e.to_string()))?
        .map_err(|e| MigrateError::Migrations(e.to_string()))
}
