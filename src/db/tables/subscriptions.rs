//! The `subscriptions` table (SPEC 3.15): the rows the keyed calls lock and
//! write, the reads of GetSubscription and ListSubscriptions, and the
//! deliverer's statements: its lease, its cursor and its failures.
//!
//! A keyed call changes a row only under the row's lock (`lock`), and the
//! deliverer moves a row's cursor only while its lease stands, in one statement
//! that checks it, so a pause, a resume and a delivery never overwrite each
//! other's columns: each writes only its own.

use std::fmt::Write as _;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Blob, Datetime, Nullable, TinyInt, Unsigned, Varbinary};
use diesel_async::{RunQueryDsl as _, SimpleAsyncConnection as _};

use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, datetime, hex};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{Namespace, ScopedKey, SubscriptionId, SubscriptionRow, SubscriptionState};

/// The columns a [`Row`] reads.
const COLUMNS: &str = "subscription_id, namespace, definition, secret, state, acked_sequence, \
     last_error, failing_since, next_attempt_at";

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Unsigned<BigInt>)]
    subscription_id: u64,
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Blob)]
    definition: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    secret: Vec<u8>,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    state: u8,
    #[diesel(sql_type = Unsigned<BigInt>)]
    acked_sequence: u64,
    #[diesel(sql_type = Varbinary)]
    last_error: Vec<u8>,
    #[diesel(sql_type = Nullable<Datetime>)]
    failing_since: Option<NaiveDateTime>,
    #[diesel(sql_type = Nullable<Datetime>)]
    next_attempt_at: Option<NaiveDateTime>,
}

impl Row {
    fn into_row(self) -> Result<SubscriptionRow, Error> {
        let broken = |what: &str| {
            Error::internal(format!(
                "subscription {} has a broken {what}",
                self.subscription_id
            ))
        };
        let id = std::num::NonZeroU64::new(self.subscription_id)
            .map(SubscriptionId::new)
            .ok_or_else(|| broken("id"))?;
        let namespace = String::from_utf8(self.namespace.clone())
            .ok()
            .and_then(|n| Namespace::client(&n))
            .ok_or_else(|| broken("namespace"))?;
        let secret = String::from_utf8(self.secret.clone()).map_err(|_| broken("secret"))?;
        let state = SubscriptionState::from_code(self.state).ok_or_else(|| broken("state"))?;
        Ok(SubscriptionRow {
            id,
            namespace,
            definition: self.definition,
            secret,
            state,
            cursor: self.acked_sequence,
            last_error: String::from_utf8_lossy(&self.last_error).into_owned(),
        })
    }
}

fn parse(rows: Vec<Row>) -> Result<Vec<SubscriptionRow>, Error> {
    rows.into_iter().map(Row::into_row).collect()
}

/// Locks the named subscriptions that exist, in id order.
pub(crate) async fn lock(
    tx: &mut Tx<'_>,
    ids: &[SubscriptionId],
) -> Result<Vec<SubscriptionRow>, Failure> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    let sql = Sql::with_ids(
        &format!("SELECT {COLUMNS} FROM subscriptions WHERE subscription_id"),
        &ids,
        " ORDER BY subscription_id FOR UPDATE",
    );
    Ok(parse(tx.load(Step::Read, sql).await?)?)
}

/// `INSERT` of the subscriptions created, each with the key of the call that
/// created it.
pub(crate) fn insert_sql<'k>(
    created: &[(usize, SubscriptionRow)],
    key_of: impl Fn(usize) -> Option<&'k ScopedKey>,
    now: DateTime<Utc>,
    guard: Option<&str>,
) -> Result<Option<String>, Error> {
    let mut rows = Vec::with_capacity(created.len());
    for (call, row) in created {
        let key = key_of(*call)
            .ok_or_else(|| Error::internal("a subscription created by an unknown call"))?;
        rows.push(format!(
            "{id}, {namespace}, {definition}, {secret}, {state}, {cursor}, {key}, {now}",
            id = row.id,
            namespace = hex(row.namespace.as_str().as_bytes()),
            definition = hex(&row.definition),
            secret = hex(row.secret.as_bytes()),
            state = row.state.code(),
            cursor = row.cursor,
            key = hex(key.key.as_str().as_bytes()),
            now = datetime(now),
        ));
    }
    Ok(crate::db::conn::sql::insert(
        "subscriptions",
        "subscription_id, namespace, definition, secret, state, acked_sequence, \
         idempotency_key, created_at",
        &rows,
        guard,
    ))
}

/// `UPDATE` of a subscription whose state a call changed: its state, and, when
/// it is resumed, its failures forgotten so it is delivered at once.
pub(crate) fn update_sql(row: &SubscriptionRow, guard: Option<&str>) -> String {
    let mut sql = format!(
        "UPDATE subscriptions SET state = {state}",
        state = row.state.code()
    );
    if row.state == SubscriptionState::Active {
        sql.push_str(", last_error = '', failing_since = NULL, next_attempt_at = NULL");
    }
    let _ = write!(sql, " WHERE subscription_id = {}", row.id);
    if let Some(guard) = guard {
        let _ = write!(sql, " AND {guard}");
    }
    sql
}

/// A subscription of `namespace`, outside any transaction.
pub(crate) async fn find(
    conn: &mut Conn,
    namespace: &Namespace,
    id: SubscriptionId,
) -> Result<Option<SubscriptionRow>, Error> {
    let sql = Sql::new(format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE subscription_id = ? AND namespace = ?"
    ))
    .bind(Bind::U64(id.get()))
    .bind(Bind::Bytes(namespace.as_str().as_bytes()));
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, sql).await?;
    Ok(parse(rows)?.into_iter().next())
}

/// Up to `limit` subscriptions of `namespace` with ids above `after`, in id
/// order (on `subscriptions_namespace`).
pub(crate) async fn page(
    conn: &mut Conn,
    namespace: &Namespace,
    after: u64,
    limit: u32,
) -> Result<Vec<SubscriptionRow>, Error> {
    let sql = Sql::new(format!(
        "SELECT {COLUMNS} FROM subscriptions FORCE INDEX (subscriptions_namespace) \
         WHERE namespace = ? AND subscription_id > ? ORDER BY subscription_id LIMIT ?"
    ))
    .bind(Bind::Bytes(namespace.as_str().as_bytes()))
    .bind(Bind::U64(after))
    .bind(Bind::U64(u64::from(limit)));
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, sql).await?;
    parse(rows)
}

/// A subscription as its deliverer holds it: the row, and when its current run
/// of failures began and when it may next be tried.
#[derive(Debug, Clone)]
pub struct Leased {
    pub row: SubscriptionRow,
    pub failing_since: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Takes the lease of every subscription that delivers and whose lease is free,
/// has lapsed or is `owner`'s already, until `for_ms` from now on the database's
/// clock; returns every subscription `owner` now holds. One autocommit statement
/// takes them: two instances taking at once each get those the other did not.
pub(crate) async fn take_leases(
    conn: &mut Conn,
    owner: &str,
    for_ms: u64,
) -> Result<Vec<Leased>, Error> {
    let delivering = [SubscriptionState::Active, SubscriptionState::Failing]
        .map(|s| s.code().to_string())
        .join(", ");
    let owner_hex = hex(owner.as_bytes());
    conn.batch_execute(&format!(
        "UPDATE subscriptions SET lease_owner = {owner_hex}, \
         lease_until = UTC_TIMESTAMP(6) + INTERVAL {for_ms} * 1000 MICROSECOND \
         WHERE state IN ({delivering}) AND (lease_until IS NULL \
           OR lease_until < UTC_TIMESTAMP(6) OR lease_owner = {owner_hex})"
    ))
    .await
    .map_err(|e| failed(&e))?;
    let sql = Sql::new(format!(
        "SELECT {COLUMNS} FROM subscriptions \
         WHERE lease_owner = ? AND state IN ({delivering}) AND lease_until > UTC_TIMESTAMP(6)"
    ))
    .bind(Bind::Bytes(owner.as_bytes()));
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, sql).await?;
    rows.into_iter()
        .map(|r| {
            let failing_since = r.failing_since.map(|t| t.and_utc());
            let next_attempt_at = r.next_attempt_at.map(|t| t.and_utc());
            Ok(Leased {
                row: r.into_row()?,
                failing_since,
                next_attempt_at,
            })
        })
        .collect()
}

/// Gives back `owner`'s leases (an instance shutting down), so another takes
/// them over at once.
pub(crate) async fn release_leases(conn: &mut Conn, owner: &str) -> Result<(), Error> {
    conn.batch_execute(&format!(
        "UPDATE subscriptions SET lease_owner = NULL, lease_until = NULL \
         WHERE lease_owner = {}",
        hex(owner.as_bytes())
    ))
    .await
    .map_err(|e| failed(&e))?;
    Ok(())
}

/// Moves the cursor to `through` after a delivery was acknowledged (or past
/// entries that match nothing), clearing the failures, while `owner` holds the
/// lease. False when it no longer does: the delivery's entries will be sent
/// again by the instance that does.
pub(crate) async fn advance(
    conn: &mut Conn,
    id: SubscriptionId,
    owner: &str,
    through: u64,
) -> Result<bool, Error> {
    let done = diesel::sql_query(format!(
        "UPDATE subscriptions SET acked_sequence = GREATEST(acked_sequence, {through}), \
             last_error = '', failing_since = NULL, next_attempt_at = NULL, \
             state = IF(state = {failing}, {active}, state) \
             WHERE subscription_id = {id} AND lease_owner = {owner} \
             AND lease_until > UTC_TIMESTAMP(6)",
        failing = SubscriptionState::Failing.code(),
        active = SubscriptionState::Active.code(),
        owner = hex(owner.as_bytes()),
    ))
    .execute(conn)
    .await
    .map_err(|e| failed(&e))?;
    Ok(done == 1)
}

#[derive(Debug, QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Whether `owner` may deliver the subscription now: it holds the lease, and
/// the subscription is neither paused nor deleted. Asked before each request,
/// so a pause stops every delivery that had not begun when it was answered.
pub(crate) async fn may_deliver(
    conn: &mut Conn,
    id: SubscriptionId,
    owner: &str,
) -> Result<bool, Error> {
    let sql = Sql::new(format!(
        "SELECT COUNT(*) AS n FROM subscriptions WHERE subscription_id = ? \
         AND lease_owner = ? AND state IN ({}, {}) AND lease_until > UTC_TIMESTAMP(6)",
        SubscriptionState::Active.code(),
        SubscriptionState::Failing.code(),
    ))
    .bind(Bind::U64(id.get()))
    .bind(Bind::Bytes(owner.as_bytes()));
    let rows: Vec<Count> = crate::db::conn::tx::load(conn, sql).await?;
    Ok(rows.iter().any(|c| c.n == 1))
}

/// Records a failed delivery: its error, when the run of failures began, when
/// to try next; `FAILING` once the run is `failing_after` old.
pub(crate) async fn record_failure(
    conn: &mut Conn,
    id: SubscriptionId,
    owner: &str,
    error: &str,
    retry_in_ms: u64,
    failing_after_s: u64,
) -> Result<(), Error> {
    let mut error = error.to_owned();
    if error.len() > 1000 {
        let mut cut = 1000;
        while !error.is_char_boundary(cut) {
            cut -= 1;
        }
        error.truncate(cut);
    }
    diesel::sql_query(format!(
        "UPDATE subscriptions SET last_error = {error}, \
         failing_since = COALESCE(failing_since, UTC_TIMESTAMP(6)), \
         next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL {retry_in_ms} * 1000 MICROSECOND, \
         state = IF(state = {active} AND failing_since IS NOT NULL \
           AND failing_since < UTC_TIMESTAMP(6) - INTERVAL {failing_after_s} SECOND, \
           {failing}, state) \
         WHERE subscription_id = {id} AND lease_owner = {owner} \
         AND lease_until > UTC_TIMESTAMP(6)",
        error = hex(error.as_bytes()),
        failing = SubscriptionState::Failing.code(),
        active = SubscriptionState::Active.code(),
        owner = hex(owner.as_bytes()),
    ))
    .execute(conn)
    .await
    .map_err(|e| failed(&e))?;
    Ok(())
}

/// A deliverer's statement that failed: the database is unavailable to it (it
/// tries again on its next round).
fn failed(e: &diesel::result::Error) -> Error {
    Error::unavailable(format!("a subscription's statement failed: {e}"))
}
