//! The change stream's lease, held by the migrations while they run.
//!
//! The stream's assigner numbers entries only while the lease in `ledger_stream`
//! is its own: each round reads the lease row locked and stops unless it owns a
//! valid lease, and every write of a round is guarded by its owner (`db::stream`).
//! A migration can change what those rounds read and write: 2026-12-04 moved
//! every number from a column of `entries` to `stream_commits`, and a round of an
//! older instance committed between its copy and its drop lost its numbers, a
//! hole no later round fills. So the migrations take the lease from whoever holds
//! it, an instance of this version or of an older one, and keep it until they
//! end: a round in flight commits first (the take waits for the row's lock), and
//! none runs until the lease is handed back. Every run that applies a migration
//! takes it, rather than the ones said to touch the stream: whether one does is
//! what 2026-12-04 got wrong, and the stream only waits while they run.
//!
//! The lease is taken for [`FENCE_LEASE`] and renewed every [`RENEW_EVERY`], so
//! a migration killed midway holds the stream up for at most that long; handed
//! back, it is expired at once, for the next assigner to take.

use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Unsigned, Varbinary};
use diesel_async::RunQueryDsl as _;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::db::conn::connection::{Conn, connect};
use crate::db::conn::sql::{Bind, Sql};

/// How far ahead the migrations' lease runs: long enough that a cluster whose
/// commits a migration's DDL holds up for a while does not let it run out
/// between two renewals.
const FENCE_LEASE: Duration = Duration::from_secs(60);
/// How often the migrations renew their lease.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// The longest one statement on the lease row may take: it waits at most for a
/// round in flight, whose own lock wait is a second.
const STATEMENT_BOUND: Duration = Duration::from_secs(30);

/// The stream's lease, held for the migrations until [`Fence::release`].
#[derive(Debug)]
pub struct Fence {
    url: String,
    owner: Vec<u8>,
    stop: oneshot::Sender<()>,
    /// Renews the lease; ends with whether it stayed the migrations'.
    renewing: JoinHandle<bool>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Holder {
    #[diesel(sql_type = Varbinary)]
    owner: Vec<u8>,
    #[diesel(sql_type = Unsigned<BigInt>)]
    valid: u64,
}

impl Fence {
    /// Takes the stream's lease from whoever holds it, after the round in
    /// flight; `None` when the database has no stream yet, which nothing can
    /// be numbering.
    pub async fn take(url: &str) -> Result<Option<Self>, String> {
        let mut conn = connect(url).await.map_err(|e| e.to_string())?;
        let exists: Vec<Count> = bounded(
            Sql::new(
                "SELECT COUNT(*) AS n FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'ledger_stream'",
            )
            .load(&mut conn),
        )
        .await?;
        if exists.iter().all(|c| c.n == 0) {
            return Ok(None);
        }
        let held: Vec<Holder> = bounded(
            Sql::new(
                "SELECT owner, CAST(lease_until > UTC_TIMESTAMP(6) AS UNSIGNED) AS valid \
                 FROM ledger_stream WHERE id = 1",
            )
            .load(&mut conn),
        )
        .await?;
        let owner = owner_id();
        let taken = bounded(
            Sql::new(
                "UPDATE ledger_stream SET owner = ?, \
                 lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE id = 1",
            )
            .bind(Bind::Bytes(&owner))
            .bind(Bind::U64(lease_micros()))
            .execute(&mut conn),
        )
        .await?;
        if taken == 0 {
            return Ok(None);
        }
        if let Some(held) = held.iter().find(|h| h.valid != 0 && !h.owner.is_empty()) {
            tracing::info!(
                from = %String::from_utf8_lossy(&held.owner),
                "the change stream's lease is the migrations' until they end: no assigner numbers entries meanwhile"
            );
        }
        let (stop, stopped) = oneshot::channel();
        let renewing = tokio::spawn(renew(url.to_owned(), owner.clone(), conn, stopped));
        Ok(Some(Self {
            url: url.to_owned(),
            owner,
            stop,
            renewing,
        }))
    }

    /// Hands the lease back, expired, so an assigner takes it at once. An error
    /// when it was lost while the migrations ran: an assigner may have numbered
    /// entries meanwhile.
    pub async fn release(self) -> Result<(), String> {
        let _ = self.stop.send(());
        let kept = self.renewing.await.unwrap_or(false);
        let mut conn = connect(&self.url).await.map_err(|e| e.to_string())?;
        let released = bounded(
            Sql::new(
                "UPDATE ledger_stream SET lease_until = '1970-01-01 00:00:00' \
                 WHERE id = 1 AND owner = ?",
            )
            .bind(Bind::Bytes(&self.owner))
            .execute(&mut conn),
        )
        .await?;
        if kept && released == 1 {
            Ok(())
        } else {
            Err(
                "the change stream's lease was taken from the migrations while they ran: \
                 an assigner may have numbered entries meanwhile; check the stream with \
                 `ledger audit`"
                    .to_owned(),
            )
        }
    }
}

/// Renews the lease every [`RENEW_EVERY`] until told to stop; false once a
/// renewal found it taken.
async fn renew(
    url: String,
    owner: Vec<u8>,
    conn: Conn,
    mut stopped: oneshot::Receiver<()>,
) -> bool {
    let mut conn = Some(conn);
    loop {
        tokio::select! {
            _ = &mut stopped => return true,
            () = tokio::time::sleep(RENEW_EVERY) => {}
        }
        let open = match conn.as_mut() {
            Some(open) => open,
            None => match connect(&url).await {
                Ok(fresh) => conn.insert(fresh),
                Err(e) => {
                    tracing::debug!(error = %e, "the migrations' stream lease was not renewed");
                    continue;
                }
            },
        };
        let renewed = bounded(
            Sql::new(
                "UPDATE ledger_stream SET lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE id = 1 AND owner = ?",
            )
            .bind(Bind::U64(lease_micros()))
            .bind(Bind::Bytes(&owner))
            .execute(open),
        )
        .await;
        match renewed {
            Ok(1) => {}
            Ok(_) => {
                tracing::warn!("the change stream's lease was taken from the migrations");
                return false;
            }
            Err(e) => {
                tracing::debug!(error = %e, "the migrations' stream lease was not renewed");
                // A statement cut off, or failed, leaves the connection unknown.
                conn = None;
            }
        }
    }
}

/// A statement on the lease row, within [`STATEMENT_BOUND`].
async fn bounded<T>(statement: impl Future<Output = diesel::QueryResult<T>>) -> Result<T, String> {
    match tokio::time::timeout(STATEMENT_BOUND, statement).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {STATEMENT_BOUND:?}")),
    }
}

fn lease_micros() -> u64 {
    u64::try_from(FENCE_LEASE.as_micros()).unwrap_or(u64::MAX)
}

/// `migration/host/pid/random`, at most 64 bytes (the owner column's size): an
/// operator reading the lease row sees who holds the stream up.
fn owner_id() -> Vec<u8> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String = host.trim().chars().take(32).collect();
    format!(
        "migration/{host}/{}/{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
    .into_bytes()
}
