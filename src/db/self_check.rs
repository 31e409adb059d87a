//! The startup self-check (SPEC 3.3): the service refuses to serve unless a live
//! connection reports affected rows the way the probe relies on, 1 for a new key and
//! 0 for a duplicate. It runs in a temporary table, so it leaves no trace in the
//! ledger's tables.
//!
//! Every connection also asks whether its server is a node of a multi-primary
//! cluster, where another node's write can abort a transaction between the
//! statements of a batch (`db::writes`).

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};

use super::pool::Conn;

#[derive(Debug, thiserror::Error)]
pub enum SelfCheckError {
    #[error(
        "the database connection reports {new} then {duplicate} affected rows for a new and \
         a duplicate key (expected 1 then 0); is CLIENT_FOUND_ROWS on, or is a proxy \
         rewriting affected rows? Serving would charge retries twice"
    )]
    AffectedRows { new: usize, duplicate: usize },
    #[error("the self-check could not run: {0}")]
    Query(#[from] diesel::result::Error),
}

/// The check every connection passes before use: affected rows as the probe
/// needs them. Returns whether its server is a multi-primary node.
pub async fn check(conn: &mut Conn) -> Result<bool, SelfCheckError> {
    verify_affected_rows(conn).await?;
    is_multi_primary(conn).await
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

/// True on a Galera node (`wsrep_on`) and on a MySQL server configured for Group
/// Replication (a group name set), whether or not it is the group's primary now.
pub async fn is_multi_primary(conn: &mut Conn) -> Result<bool, SelfCheckError> {
    #[derive(QueryableByName)]
    struct Variable {
        #[diesel(sql_type = Text, column_name = Variable_name)]
        name: String,
        #[diesel(sql_type = Text, column_name = Value)]
        value: String,
    }
    let variables: Vec<Variable> = diesel::sql_query(
        "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'group_replication_group_name')",
    )
    .load(conn)
    .await?;
    Ok(variables.iter().any(|v| match v.name.as_str() {
        "wsrep_on" => v.value.eq_ignore_ascii_case("ON"),
        _ => !v.value.is_empty(),
    }))
}
