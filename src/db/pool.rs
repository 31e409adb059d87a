//! Connections and the pool.
//!
//! Every connection is opened here, with `CLIENT_FOUND_ROWS` off (SPEC 3.3): with it
//! on, the probe's `ON DUPLICATE KEY UPDATE k = k` reports 1 for an unchanged
//! duplicate and every retry would charge again. diesel-async's own `establish`
//! turns the flag on, so the `mysql_async` connection is built here and wrapped.

use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::AsyncMysqlConnection;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use mysql_async::{Opts, OptsBuilder};

pub type Conn = AsyncMysqlConnection;
pub type Pool = bb8::Pool<AsyncDieselConnectionManager<Conn>>;
pub type Pooled<'a> = bb8::PooledConnection<'a, AsyncDieselConnectionManager<Conn>>;

/// How the pool is sized and how long a call may wait for a connection.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    /// Connections kept open to the database, across all calls of this instance.
    pub size: u32,
    /// The longest a call waits for a free connection; a call's own deadline can
    /// only shorten it.
    pub checkout_timeout: Duration,
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

/// Builds the pool. Connections are opened lazily, so this succeeds while the
/// database is down; callers check it with a first checkout.
pub fn build(url: &str, settings: PoolSettings) -> Pool {
    let mut config = ManagerConfig::default();
    config.custom_setup = Box::new(|url| Box::pin(connect(url)));
    let manager = AsyncDieselConnectionManager::new_with_config(url, config);
    bb8::Pool::builder()
        .max_size(settings.size)
        .connection_timeout(settings.checkout_timeout)
        // Report a failed connect at once instead of retrying until the timeout: the
        // transaction loop retries with backoff and knows the caller's deadline.
        .retry_connection(false)
        .build_unchecked(manager)
}
