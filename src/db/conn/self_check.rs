//! The self-check every connection passes before use (SPEC 3.3): the service
//! refuses to serve unless a live connection reports affected rows the way the
//! probe relies on, 1 for a new key and 0 for a duplicate. It runs in a temporary
//! table, so it leaves no trace in the ledger's tables.
//!
//! It also checks that the session is what its pool needs once the operator's
//! `--session-init` has run: keyed sessions without autocommit and in REPEATABLE
//! READ, read sessions in autocommit (a read session without it would hold one
//! snapshot and serve stale reads forever). And it asks whether the server is a
//! node of a multi-primary cluster, where another node's write can abort a
//! transaction between the statements of a batch (`db::exec::writes`); on such a node a
//! keyed session calls the check procedure once, so a missing EXECUTE grant stops
//! the service at start rather than failing calls after their COMMIT, and every
//! session must read causally (`db::conn::cluster`).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};

use super::cluster::{self, Engine, NotCausal};
use super::connection::Conn;

#[derive(Debug, thiserror::Error)]
pub enum SelfCheckError {
    #[error(
        "the database connection reports {new} then {duplicate} affected rows for a new and \
         a duplicate key (expected 1 then 0); is CLIENT_FOUND_ROWS on, or is a proxy \
         rewriting affected rows? Serving would charge retries twice"
    )]
    AffectedRows { new: usize, duplicate: usize },
    #[error(
        "the session has autocommit {found} after --session-init; the ledger's {pool} sessions \
         need it {expected}"
    )]
    Autocommit {
        found: &'static str,
        expected: &'static str,
        pool: &'static str,
    },
    #[error(
        "the session's isolation level is {0} after --session-init; keyed transactions need \
         REPEATABLE-READ"
    )]
    Isolation(String),
    #[error(
        "cannot call ledger_require_committed on this multi-primary node ({0}); grant EXECUTE \
         on the ledger's database to the service's account (and run the migrations)"
    )]
    Procedure(String),
    #[error(transparent)]
    NotCausal(#[from] NotCausal),
    #[error(
        "the server is read-only (a replica, or a Group Replication secondary); keyed \
         transactions need a node that takes writes"
    )]
    ReadOnly,
    #[error("the self-check could not run: {0}")]
    Query(#[from] diesel::result::Error),
}

/// Which pool a session is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Keyed transactions: autocommit off, REPEATABLE READ; on a multi-primary
    /// node, the check procedure must be callable.
    Keyed,
    /// Plain reads: autocommit on.
    Reads,
}

/// What a session must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    pub kind: Kind,
    /// Treat the server as multi-primary whatever it says.
    pub assume_multi_primary: bool,
}

/// The check every connection passes before use, on a server of `engine`.
/// Returns whether its server is (or is assumed to be) a multi-primary node.
pub async fn check(
    conn: &mut Conn,
    expect: Expect,
    engine: Engine,
) -> Result<bool, SelfCheckError> {
    verify_affected_rows(conn).await?;
    verify_session(conn, expect).await?;
    cluster::verify_causal(conn, engine).await?;
    let multi_primary = expect.assume_multi_primary || engine.multi_primary();
    if multi_primary && expect.kind == Kind::Keyed {
        conn.batch_execute("CALL ledger_require_committed(TRUE); COMMIT")
            .await
            .map_err(|e| SelfCheckError::Procedure(e.to_string()))?;
    }
    Ok(multi_primary)
}

pub async fn verify_affected_rows(conn: &mut Conn) -> Result<(), SelfCheckError> {
    conn.batch_execute(
        "DROP TEMPORARY TABLE IF EXISTS ledger_self_check; \
         CREATE TEMPORARY TABLE ledger_self_check (k TINYINT PRIMARY KEY, v TINYINT NOT NULL)",
    )
    .await?;
    let probe = || {
        diesel::sql_query(
            "INSERT INTO ledger_self_check (k, v) VALUES (1, 0) ON DUPLICATE KEY UPDATE v = v",
        )
    };
    let new = probe().execute(conn).await;
    let duplicate = probe().execute(conn).await;
    // COMMIT ends the transaction the probes began on a session without autocommit.
    conn.batch_execute("COMMIT; DROP TEMPORARY TABLE ledger_self_check")
        .await?;
    match (new?, duplicate?) {
        (1, 0) => Ok(()),
        (new, duplicate) => Err(SelfCheckError::AffectedRows { new, duplicate }),
    }
}

#[derive(QueryableByName)]
struct SessionRow {
    #[diesel(sql_type = BigInt)]
    autocommit: i64,
    #[diesel(sql_type = Nullable<Text>)]
    isolation: Option<String>,
    #[diesel(sql_type = BigInt)]
    read_only: i64,
}

async fn verify_session(conn: &mut Conn, expect: Expect) -> Result<(), SelfCheckError> {
    // MySQL 8 and MariaDB 11.1 name it transaction_isolation; MariaDB 10 tx_isolation.
    let row = match diesel::sql_query(
        "SELECT @@autocommit AS autocommit, @@transaction_isolation AS isolation, \
         @@read_only AS read_only",
    )
    .get_result::<SessionRow>(conn)
    .await
    {
        Ok(row) => row,
        Err(_) => {
            diesel::sql_query(
                "SELECT @@autocommit AS autocommit, @@tx_isolation AS isolation, \
                 @@read_only AS read_only",
            )
            .get_result::<SessionRow>(conn)
            .await?
        }
    };
    let on_off = |on: bool| if on { "on" } else { "off" };
    let (autocommit, pool) = match expect.kind {
        Kind::Keyed => (false, "keyed"),
        Kind::Reads => (true, "read"),
    };
    if (row.autocommit == 1) != autocommit {
        return Err(SelfCheckError::Autocommit {
            found: on_off(row.autocommit == 1),
            expected: on_off(autocommit),
            pool,
        });
    }
    let isolation = row.isolation.unwrap_or_default();
    if expect.kind == Kind::Keyed && isolation != "REPEATABLE-READ" {
        return Err(SelfCheckError::Isolation(isolation));
    }
    // An account with SUPER writes to a read-only server anyway: a replica
    // listed among the URLs would then take writes its primary never sees.
    if expect.kind == Kind::Keyed && row.read_only != 0 {
        return Err(SelfCheckError::ReadOnly);
    }
    Ok(())
}

/// Whether the server refuses writes (`read_only`), as a replica or a Group
/// Replication secondary does.
pub async fn read_only(conn: &mut Conn) -> Result<bool, SelfCheckError> {
    #[derive(QueryableByName)]
    struct ReadOnly {
        #[diesel(sql_type = BigInt)]
        read_only: i64,
    }
    let row: ReadOnly = diesel::sql_query("SELECT @@read_only AS read_only")
        .get_result(conn)
        .await?;
    Ok(row.read_only != 0)
}

/// True on a Galera node (`wsrep_on`) and on a MySQL server configured for Group
/// Replication (a group name set), whether or not it is the group's primary now.
pub async fn is_multi_primary(conn: &mut Conn) -> Result<bool, SelfCheckError> {
    Ok(cluster::engine(conn).await?.multi_primary())
}
