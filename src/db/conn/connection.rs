//! One connection, the way every connection of the service is opened.
//!
//! `CLIENT_FOUND_ROWS` is off (SPEC 3.3): with it on, the probe's `ON DUPLICATE KEY
//! UPDATE k = k` reports 1 for an unchanged duplicate and every retry would charge
//! again. diesel-async's own `establish` turns the flag on, so the `mysql_async`
//! connection is built here and wrapped.

use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::AsyncMysqlConnection;
use mysql_async::{Opts, OptsBuilder};

/// How much longer than its lock wait a statement may go unanswered before the
/// database counts as silent. No statement of the service does work that takes
/// seconds; only a lock wait does.
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_secs(3);

/// The longest a plain read may go unanswered: it takes no locks.
pub(crate) const READ_BOUND: Duration = ANSWER_MARGIN;

pub type Conn = AsyncMysqlConnection;

/// TCP keepalive on every connection, so an idle connection to a vanished host is
/// noticed in seconds rather than at the kernel's default of hours.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// Opens one connection that reports affected rows, not found rows. An operator's
/// URL cannot turn `CLIENT_FOUND_ROWS` back on: the flag is set after parsing it.
pub async fn connect(url: &str) -> Result<Conn, ConnectionError> {
    let opts =
        Opts::from_url(url).map_err(|e| ConnectionError::InvalidConnectionUrl(e.to_string()))?;
    let keepalive = u32::try_from(KEEPALIVE.as_millis()).unwrap_or(u32::MAX);
    let opts = OptsBuilder::from_opts(opts)
        .client_found_rows(false)
        .tcp_keepalive(Some(keepalive))
        // diesel-async keeps its own prepared-statement cache.
        .stmt_cache_size(0);
    let conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    AsyncMysqlConnection::try_from(conn).await
}

/// Marks a connection so the pool drops it instead of handing it out again: its
/// last statement failed as if the connection were gone.
pub fn discard(conn: &mut Conn) {
    use diesel_async::{AnsiTransactionManager, TransactionManager as _};
    AnsiTransactionManager::transaction_manager_status_mut(conn).set_in_error();
}
