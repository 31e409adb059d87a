//! Retention (SPEC 3.5): deletes key rows older than a cutoff, oldest first, in
//! batches of at most [`BATCH_ROWS`] with a pause between ([`PAUSE`]), so no keyed call ever
//! waits on the purge for longer than one statement.
//!
//! A purged key cannot make its operation run twice: every effect carries its key
//! under a unique index (`db::tables::effects`), so a retry whose row is gone is refused
//! as expired. The purge itself only has to stay out of the way:
//!
//! * one instance at a time across a fleet: a round runs under the named lock
//!   `ledger.purge.<database>`, and an instance that cannot take it skips the round;
//! * its session runs in READ COMMITTED and autocommit, so each DELETE locks only
//!   the rows it deletes (no gap locks in front of new keys) and commits alone;
//! * batches are ranges of the `created_at` index, found by a read of the index
//!   first, so no batch scans what an earlier one kept;
//! * before deleting, it records its cutoff (`ledger_marks`, `keys-purged-before`):
//!   `ledger audit` then knows which effects may have lost their key rows;
//! * the key rows of accounts opened and holds voided before their effects carried
//!   keys (the `effect-keys` mark) are the only record of those keys: it keeps them.

use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{Datetime, Integer, Nullable};
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};
use tokio_util::sync::CancellationToken;

use crate::db::conn::connection::{self, Conn};
use crate::db::conn::sql::datetime;
use crate::ops::Method;
use crate::telemetry::metrics;

/// The most key rows one DELETE removes.
pub const BATCH_ROWS: u64 = 1_000;
/// The least pause after a full batch; the pause is as long as the batch took, if
/// longer, so a purge works at most half the time, and keyed calls get the server
/// between its statements.
pub const PAUSE: Duration = Duration::from_millis(20);
/// The named lock a round runs under, per database (`GET_LOCK` names are the
/// server's).
const LOCK: &str = "CONCAT('ledger.purge.', DATABASE())";
/// The most often a serving instance starts a round.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The least often.
const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Key rows deleted.
    pub rows: u64,
    /// DELETE statements run.
    pub batches: u64,
    /// The most rows one of them deleted.
    pub largest: u64,
    /// Key rows created before this were purged.
    pub cutoff: chrono::DateTime<chrono::Utc>,
}

/// Purges key rows older than a retention, on the first of `urls` that answers.
#[derive(Debug, Clone)]
pub struct Purger {
    urls: Arc<[String]>,
    retention: Duration,
}

#[derive(QueryableByName)]
struct At {
    #[diesel(sql_type = Nullable<Datetime>)]
    at: Option<NaiveDateTime>,
}

#[derive(QueryableByName)]
struct Locked {
    #[diesel(sql_type = Nullable<Integer>)]
    locked: Option<i32>,
}

impl Purger {
    pub fn new(urls: &[String], retention: Duration) -> Self {
        Self {
            urls: urls.into(),
            retention,
        }
    }

    /// How often a serving instance starts a round: a quarter of the retention,
    /// within [`MIN_INTERVAL`] and [`MAX_INTERVAL`].
    pub fn interval(&self) -> Duration {
        (self.retention / 4).clamp(MIN_INTERVAL, MAX_INTERVAL)
    }

    /// Runs rounds until `stop`; a failed round is logged and the next one tries
    /// again.
    pub async fn run(self, stop: CancellationToken) {
        tracing::info!(retention = ?self.retention, every = ?self.interval(), "key retention on");
        loop {
            match self.round(Duration::ZERO, &stop).await {
                Ok(Some(purged)) if purged.rows > 0 => {
                    tracing::info!(rows = purged.rows, batches = purged.batches, cutoff = %purged.cutoff, "purged key rows");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "key purge failed; trying again later"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.interval()) => {}
            }
        }
    }

    /// One round: every key row older than the retention, in batches. `None` when
    /// another instance held the purge lock for `wait`. Stops early, between
    /// batches, once `stop` is cancelled.
    pub async fn round(
        &self,
        wait: Duration,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<Purged>> {
        let mut conn = self.connect().await?;
        let locked: Vec<Locked> = diesel::sql_query(format!(
            "SELECT GET_LOCK({LOCK}, {}) AS locked",
            wait.as_secs()
        ))
        .load(&mut conn)
        .await?;
        if locked.into_iter().next().and_then(|l| l.locked) != Some(1) {
            return Ok(None);
        }
        let retention = self.retention.as_micros();
        let cutoff = one_instant(
            &mut conn,
            &format!("SELECT UTC_TIMESTAMP(6) - INTERVAL {retention} MICROSECOND AS at"),
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("the database has no clock"))?;
        let effect_keys = one_instant(
            &mut conn,
            "SELECT at FROM ledger_marks WHERE name = 'effect-keys'",
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("the effect-keys mark is missing: migrate first"))?;
        conn.batch_execute(&format!(
            "INSERT INTO ledger_marks (name, at) VALUES ('keys-purged-before', {cutoff}) \
             ON DUPLICATE KEY UPDATE at = GREATEST(at, VALUES(at))",
            cutoff = datetime(cutoff.and_utc()),
        ))
        .await?;
        let purged = self.batches(&mut conn, cutoff, effect_keys, stop).await?;
        report_oldest(&mut conn).await?;
        Ok(Some(purged))
    }

    async fn batches(
        &self,
        conn: &mut Conn,
        cutoff: NaiveDateTime,
        effect_keys: NaiveDateTime,
        stop: &CancellationToken,
    ) -> anyhow::Result<Purged> {
        let before = datetime(cutoff.and_utc());
        // Kept: the only record of the keys of effects from before effects had keys.
        let keep = format!(
            "method IN ({methods}) AND outcome_code = 0 AND created_at < {effect_keys}",
            methods = keyed_since_effect_keys(),
            effect_keys = datetime(effect_keys.and_utc()),
        );
        let mut purged = Purged {
            rows: 0,
            batches: 0,
            largest: 0,
            cutoff: cutoff.and_utc(),
        };
        let mut after: Option<String> = None;
        loop {
            let from = after
                .as_ref()
                .map_or_else(String::new, |a| format!("created_at > {a} AND "));
            // The batch's last instant: the BATCH_ROWS-th oldest row's, else the cutoff.
            let upper = one_instant(
                conn,
                &format!(
                    "SELECT created_at AS at FROM idempotency_keys \
                     WHERE {from}created_at < {before} \
                     ORDER BY created_at LIMIT 1 OFFSET {}",
                    BATCH_ROWS - 1
                ),
            )
            .await?;
            let to = upper.map_or_else(
                || format!("created_at < {before}"),
                |u| format!("created_at <= {}", datetime(u.and_utc())),
            );
            let began = tokio::time::Instant::now();
            let deleted = diesel::sql_query(format!(
                "DELETE FROM idempotency_keys WHERE {from}{to} AND NOT ({keep})"
            ))
            .execute(conn)
            .await?;
            let deleted = u64::try_from(deleted).unwrap_or(u64::MAX);
            purged.rows += deleted;
            purged.batches += 1;
            purged.largest = purged.largest.max(deleted);
            metrics::keys_purged(deleted);
            let Some(upper) = upper else {
                return Ok(purged);
            };
            after = Some(datetime(upper.and_utc()));
            tokio::select! {
                () = stop.cancelled() => return Ok(purged),
                () = tokio::time::sleep(began.elapsed().max(PAUSE)) => {}
            }
        }
    }

    /// A session of its own: autocommit, READ COMMITTED, UTC.
    async fn connect(&self) -> anyhow::Result<Conn> {
        let mut last = None;
        for url in self.urls.iter() {
            match connection::connect(url).await {
                Ok(mut conn) => {
                    conn.batch_execute(
                        "SET SESSION autocommit = 1, time_zone = '+00:00'; \
                         SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await?;
                    return Ok(conn);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(
            || anyhow::anyhow!("no database URL"),
            |e| anyhow::anyhow!("cannot reach the database: {e}"),
        ))
    }
}

async fn one_instant(conn: &mut Conn, sql: &str) -> anyhow::Result<Option<NaiveDateTime>> {
    let rows: Vec<At> = diesel::sql_query(sql).load(conn).await?;
    Ok(rows.into_iter().next().and_then(|r| r.at))
}

/// Sets the gauge of the oldest key row's age (zero without any).
async fn report_oldest(conn: &mut Conn) -> anyhow::Result<()> {
    #[derive(QueryableByName)]
    struct Age {
        #[diesel(sql_type = Nullable<diesel::sql_types::BigInt>)]
        micros: Option<i64>,
    }
    let rows: Vec<Age> = diesel::sql_query(
        "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)) AS micros \
         FROM idempotency_keys",
    )
    .load(conn)
    .await?;
    let micros = rows.into_iter().next().and_then(|r| r.micros).unwrap_or(0);
    #[expect(clippy::cast_precision_loss, reason = "a gauge of seconds")]
    metrics::oldest_key_age(micros.max(0) as f64 / 1e6);
    Ok(())
}

/// The codes of the methods none of whose effects carried a key before the
/// `effect-keys` migration (an opened account, a resolved hold): for their calls
/// before it, the key row is the only record of the key.
fn keyed_since_effect_keys() -> String {
    use strum::IntoEnumIterator as _;
    let codes: Vec<String> = Method::iter()
        .filter(|m| !m.effects().is_empty() && !m.effects().iter().any(|e| e.always_keyed()))
        .map(|m| m.code().to_string())
        .collect();
    if codes.is_empty() {
        "NULL".to_owned()
    } else {
        codes.join(", ")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_keys_kept_are_those_of_opened_accounts_and_voided_holds() {
        use crate::ops::Method;
        let kept = super::keyed_since_effect_keys();
        assert_eq!(
            kept,
            format!(
                "{}, {}",
                Method::OpenAccount.code(),
                Method::VoidHold.code()
            )
        );
    }
}
