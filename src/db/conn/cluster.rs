//! What kind of server a connection reached, and the causal reads a
//! multi-primary node needs.
//!
//! On a single server a transaction reads the latest committed state. On a node of
//! a multi-primary cluster it reads what that node has applied, which can lag
//! behind what another node has committed. Certification catches a stale read that
//! leads to a write of the same rows, but not one that leads to a decline: a
//! decline writes only its key row, so a charge that read a balance before a
//! credit committed elsewhere was applied would be declined, and the decline
//! stored and replayed for good. So every session the service opens on a
//! cluster node is made causal here, by the service itself: keyed transactions,
//! which decide; plain reads, so a client reads its own writes through any
//! instance; migrations and the pending-migrations check, which must see the
//! tables and their record together. Each transaction first waits until its
//! node has applied everything the cluster had committed when it began. The
//! self-check verifies the setting after the operator's `--session-init`.

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};

use super::connection::Conn;

/// The kind of server behind a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// One server, or a primary with replicas: a transaction reads the latest
    /// committed state.
    Single,
    /// A MariaDB Galera node (`wsrep_on`).
    Galera,
    /// A MySQL server configured for Group Replication (a group name set).
    GroupReplication,
}

impl Engine {
    /// Whether another node's write can abort a transaction between the
    /// statements of a batch (`db::exec::writes`), and reads can lag behind commits.
    pub fn multi_primary(self) -> bool {
        self != Self::Single
    }

    /// The statement that makes every transaction of a session read causally,
    /// or `None` where reads are causal already.
    ///
    /// Galera: `wsrep_sync_wait` bit 1 makes every read wait and bit 4 every
    /// INSERT; a keyed transaction begins with an INSERT (the probe), and the
    /// key look-up and plain reads are reads. Group Replication: 'BEFORE' makes every
    /// transaction wait, when it begins, for what the group committed before.
    pub fn causal_reads(self) -> Option<&'static str> {
        match self {
            Self::Single => None,
            Self::Galera => Some("SET SESSION wsrep_sync_wait = 5"),
            Self::GroupReplication => Some("SET SESSION group_replication_consistency = 'BEFORE'"),
        }
    }
}

/// The `wsrep_sync_wait` bits a keyed session needs (see [`Engine::causal_reads`]).
const GALERA_CAUSAL_BITS: i64 = 1 | 4;
/// The Group Replication consistency levels that wait for earlier transactions.
const GR_CAUSAL_LEVELS: [&str; 2] = ["BEFORE", "BEFORE_AND_AFTER"];

#[derive(QueryableByName)]
struct Variable {
    #[diesel(sql_type = Text, column_name = Variable_name)]
    name: String,
    #[diesel(sql_type = Text, column_name = Value)]
    value: String,
}

/// Asks the server what it is.
pub async fn engine(conn: &mut Conn) -> diesel::QueryResult<Engine> {
    let variables: Vec<Variable> = diesel::sql_query(
        "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'group_replication_group_name')",
    )
    .load(conn)
    .await?;
    let set =
        |name: &str, on: fn(&str) -> bool| variables.iter().any(|v| v.name == name && on(&v.value));
    Ok(if set("wsrep_on", |v| v.eq_ignore_ascii_case("ON")) {
        Engine::Galera
    } else if set("group_replication_group_name", |v| !v.is_empty()) {
        Engine::GroupReplication
    } else {
        Engine::Single
    })
}

/// Asks the server what it is and makes the session's reads causal on it.
pub async fn make_causal(conn: &mut Conn) -> diesel::QueryResult<Engine> {
    let engine = engine(conn).await?;
    if let Some(sql) = engine.causal_reads() {
        conn.batch_execute(sql).await?;
    }
    Ok(engine)
}

/// Galera's `wsrep_local_state` of a node synced with its cluster, and of one
/// sending a joiner what it missed (still applying every write set in order).
const SYNCED: &str = "4";
const DONOR: &str = "2";

/// Whether the node behind `conn` can take writes its cluster keeps, as it sees
/// its cluster now: a Galera node that is ready, in the primary component, and
/// synced with it (or its donor: `wsrep_local_state` 4 or 2), not one that
/// rejoined and is still applying what it missed (Joining, Joined), whose reads
/// may not show what the cluster committed meanwhile even under
/// `wsrep_sync_wait`;
/// a Group Replication member that is ONLINE and sees a majority of the group's
/// members ONLINE. A node cut off from the others fails this within seconds,
/// while it still accepts connections (Galera: non-primary, refusing statements
/// with 1047; Group Replication: a minority member whose writes wait for a
/// majority). Both reads answer on such a node at once: `SHOW STATUS` and
/// performance_schema are exempt from causal waits and from 1047.
pub async fn takes_writes(conn: &mut Conn, engine: Engine) -> diesel::QueryResult<bool> {
    match engine {
        Engine::Single => Ok(true),
        Engine::Galera => {
            let status: Vec<Variable> = diesel::sql_query(
                "SHOW GLOBAL STATUS WHERE Variable_name IN \
                 ('wsrep_ready', 'wsrep_cluster_status', 'wsrep_local_state')",
            )
            .load(conn)
            .await?;
            let is = |name: &str, want: &str| {
                status
                    .iter()
                    .any(|v| v.name == name && v.value.eq_ignore_ascii_case(want))
            };
            Ok(is("wsrep_ready", "ON")
                && is("wsrep_cluster_status", "Primary")
                && (is("wsrep_local_state", SYNCED) || is("wsrep_local_state", DONOR)))
        }
        Engine::GroupReplication => {
            #[derive(QueryableByName)]
            struct Members {
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                online: i64,
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                total: i64,
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                me_online: i64,
            }
            let seen: Members = diesel::sql_query(
                "SELECT CAST(SUM(MEMBER_STATE = 'ONLINE') AS SIGNED) AS online,                  CAST(COUNT(*) AS SIGNED) AS total,                  CAST(SUM(MEMBER_ID = @@server_uuid AND MEMBER_STATE = 'ONLINE') AS SIGNED)                  AS me_online                  FROM performance_schema.replication_group_members",
            )
            .get_result(conn)
            .await?;
            Ok(seen.me_online == 1 && 2 * seen.online > seen.total)
        }
    }
}

/// Why a session on a cluster node may not be used.
#[derive(Debug, thiserror::Error)]
pub enum NotCausal {
    #[error(
        "the session's wsrep_sync_wait is {0} after --session-init; the ledger's sessions on a \
         Galera node need bits 1 and 4 (causal reads and inserts), or a stale read could be \
         stored as a decline"
    )]
    Galera(i64),
    #[error(
        "the session's group_replication_consistency is {0} after --session-init; the \
         ledger's sessions need BEFORE or BEFORE_AND_AFTER, or a stale read could be stored \
         as a decline"
    )]
    GroupReplication(String),
    #[error(
        "this Group Replication member is {0}, not an ONLINE member of its group: it cannot \
         take writes the group will keep"
    )]
    NotOnline(String),
    #[error("the causal-read check could not run: {0}")]
    Query(#[from] diesel::result::Error),
}

/// Checks that a session on `engine` reads causally, and that a Group
/// Replication member is ONLINE in its group (a member that left it, or has not
/// rejoined since a restart, must not take writes).
pub async fn verify_causal(conn: &mut Conn, engine: Engine) -> Result<(), NotCausal> {
    #[derive(QueryableByName)]
    struct Value {
        #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
        value: Option<String>,
    }
    let read = |sql: &'static str| diesel::sql_query(sql);
    match engine {
        Engine::Single => Ok(()),
        Engine::Galera => {
            let row: Value = read("SELECT CAST(@@SESSION.wsrep_sync_wait AS CHAR) AS value")
                .get_result(conn)
                .await?;
            let bits = row.value.and_then(|v| v.parse().ok()).unwrap_or(0);
            if bits & GALERA_CAUSAL_BITS == GALERA_CAUSAL_BITS {
                Ok(())
            } else {
                Err(NotCausal::Galera(bits))
            }
        }
        Engine::GroupReplication => {
            let row: Value = read("SELECT @@SESSION.group_replication_consistency AS value")
                .get_result(conn)
                .await?;
            let level = row.value.unwrap_or_default();
            if !GR_CAUSAL_LEVELS.contains(&level.as_str()) {
                return Err(NotCausal::GroupReplication(level));
            }
            let state: Option<Value> = read(
                "SELECT MEMBER_STATE AS value FROM performance_schema.replication_group_members \
                 WHERE MEMBER_ID = @@server_uuid",
            )
            .get_result(conn)
            .await
            .map(Some)
            .or_else(|e| match e {
                diesel::result::Error::NotFound => Ok(None),
                e => Err(e),
            })?;
            match state.and_then(|s| s.value) {
                Some(state) if state == "ONLINE" => Ok(()),
                other => Err(NotCausal::NotOnline(
                    other.unwrap_or_else(|| "not in the group".into()),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_sets_what_the_check_requires() {
        assert_eq!(
            Engine::Galera.causal_reads(),
            Some("SET SESSION wsrep_sync_wait = 5")
        );
        assert_eq!(5 & GALERA_CAUSAL_BITS, GALERA_CAUSAL_BITS);
        assert!(
            Engine::GroupReplication
                .causal_reads()
                .is_some_and(|sql| sql.ends_with("'BEFORE'"))
        );
        assert_eq!(Engine::Single.causal_reads(), None);
    }
}
