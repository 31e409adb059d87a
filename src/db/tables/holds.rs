//! The `holds` table: finding and locking holds for a transaction, reading one,
//! and the SQL of the writes.
//!
//! A hold's `state` column says HELD until a capture or void resolves it; whether
//! a held hold has expired is decided against the database's clock wherever it is
//! read (`Hold::state_at`), never by a background job.

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Nullable, Text, TinyInt, Unsigned, Varbinary};

use super::entries::Located;
use crate::db::conn::connection::Conn;
use crate::db::conn::failure::{Failure, Step};
use crate::db::conn::sql::{Bind, Sql, datetime, hex, text};
use crate::db::conn::tx::Tx;
use crate::error::Error;
use crate::ledger::{
    AccountId, Amount, Currency, Description, Hold, HoldId, HoldState, IdempotencyKey, Metadata,
    Namespace, ScopedKey,
};

/// The named holds that exist, with their accounts (a plain read: a hold's
/// account never changes).
pub(crate) async fn locate(tx: &mut Tx<'_>, ids: &[HoldId]) -> Result<Vec<Located>, Failure> {
    tx.load(Step::Locate, locate_sql(ids)).await
}

/// [`locate`] on a read connection.
pub(crate) async fn locate_read(conn: &mut Conn, ids: &[HoldId]) -> Result<Vec<Located>, Error> {
    crate::db::conn::tx::load(conn, locate_sql(ids)).await
}

fn locate_sql(ids: &[HoldId]) -> Sql<'static> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    Sql::with_ids(
        "SELECT hold_id AS id, account_id FROM holds WHERE hold_id",
        &ids,
        "",
    )
}

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Unsigned<BigInt>)]
    hold_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = BigInt)]
    amount: i64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    state: u8,
    #[diesel(sql_type = BigInt)]
    captured_amount: i64,
    #[diesel(sql_type = Text)]
    description: String,
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = Datetime)]
    created_at: NaiveDateTime,
    #[diesel(sql_type = Datetime)]
    expires_at: NaiveDateTime,
    /// The database's clock, when a read asks for it.
    #[diesel(sql_type = Nullable<Datetime>)]
    now: Option<NaiveDateTime>,
}

const COLUMNS: &str = "hold_id, account_id, amount, currency, state, captured_amount, \
    description, namespace, idempotency_key, created_at, expires_at";
/// The columns of [`Row`] when locking, without the clock.
const LOCK_COLUMNS: &str = "hold_id, account_id, amount, currency, state, captured_amount, \
    description, namespace, idempotency_key, created_at, expires_at, NULL AS now";

impl Row {
    fn into_hold(self) -> Result<Hold, Error> {
        let bad = |v: crate::ledger::FieldViolation| Error::internal_row(&v);
        let key = String::from_utf8(self.idempotency_key)
            .map_err(|_| Error::internal("a stored idempotency key is not UTF-8"))?;
        let client = String::from_utf8(self.namespace)
            .ok()
            .and_then(|id| Namespace::client(&id))
            .ok_or_else(|| Error::internal("a stored namespace is not a client's"))?;
        Ok(Hold {
            id: HoldId::parse("hold_id", self.hold_id).map_err(bad)?,
            account_id: AccountId::parse("account_id", self.account_id).map_err(bad)?,
            amount: Amount::parse("amount", self.amount).map_err(bad)?,
            currency: Currency::parse("currency", &self.currency).map_err(bad)?,
            state: HoldState::from_code(self.state)
                .ok_or_else(|| Error::internal(format!("unknown hold state {}", self.state)))?,
            captured_amount: self.captured_amount,
            description: Description::parse("description", self.description).map_err(bad)?,
            idempotency_key: IdempotencyKey::parse("idempotency_key", key).map_err(bad)?,
            client,
            metadata: Metadata::NONE,
            created_at: self.created_at.and_utc(),
            expires_at: self.expires_at.and_utc(),
        })
    }
}

fn parse(rows: Vec<Row>) -> Result<Vec<Hold>, Error> {
    rows.into_iter().map(Row::into_hold).collect()
}

/// The holds still in state HELD (expired or not) of the accounts, which the
/// transaction has locked: a plain read, which locks nothing.
///
/// Every change to an account's holds is made holding the account's lock, so
/// once the transaction holds it the account's holds stay as they are, and a
/// snapshot taken after the lock was granted is exact. This must be the
/// transaction's first plain read, or come after it with nothing but locking
/// reads before: the first fixes the snapshot (`load` keeps every earlier read
/// a locking one). A locking read here would lock the index's gaps around these
/// holds, and with them the inserts of the neighbouring accounts' holds.
pub(crate) async fn read_held(
    tx: &mut Tx<'_>,
    accounts: &[AccountId],
) -> Result<Vec<Hold>, Failure> {
    let ids: Vec<u64> = accounts.iter().map(|id| id.get()).collect();
    let sql = Sql::with_ids(
        &format!(
            "SELECT {LOCK_COLUMNS} FROM holds WHERE state = {held} AND account_id",
            held = HoldState::Held.code()
        ),
        &ids,
        "",
    );
    Ok(parse(tx.load(Step::ReadHolds, sql).await?)?)
}

/// Locks the named holds, which exist (see `entries::lock`).
pub(crate) async fn lock(tx: &mut Tx<'_>, ids: &[HoldId]) -> Result<Vec<Hold>, Failure> {
    let ids: Vec<u64> = ids.iter().map(|id| id.get()).collect();
    Ok(parse(tx.load(Step::LockHolds, lock_sql(&ids)).await?)?)
}

/// The statement of [`lock`].
pub(crate) fn lock_sql(ids: &[u64]) -> Sql<'static> {
    Sql::with_ids(
        &format!("SELECT {LOCK_COLUMNS} FROM holds WHERE hold_id"),
        ids,
        " ORDER BY hold_id FOR UPDATE",
    )
}

/// Reads a hold outside any transaction, with the database's clock.
pub(crate) async fn find(
    conn: &mut Conn,
    id: HoldId,
) -> Result<Option<(Hold, chrono::DateTime<chrono::Utc>)>, Error> {
    let sql = Sql::new(format!(
        "SELECT {COLUMNS}, UTC_TIMESTAMP(6) AS now FROM holds WHERE hold_id = ?"
    ))
    .bind(Bind::U64(id.get()));
    let rows: Vec<Row> = crate::db::conn::tx::load(conn, sql).await?;
    rows.into_iter()
        .next()
        .map(|row| {
            let now = row
                .now
                .ok_or_else(|| Error::internal("a hold read without the clock"))?;
            Ok((row.into_hold()?, now.and_utc()))
        })
        .transpose()
}

/// Where a page of an account's open holds starts: after the hold placed at
/// `created_micros` (microseconds since the epoch) with id `hold_id`; zeros for
/// the first page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenAfter {
    pub created_micros: u64,
    pub hold_id: u64,
}

/// The statement of [`open_page`]: the account's holds in state HELD that have not
/// expired by the database's clock, by `created_at` then `hold_id`, after the
/// cursor. It reaches them through `holds_by_account` (account, state, expiry), so
/// it reads only the account's open holds, and sorts those. The cursor's instant is
/// made from its microseconds with date arithmetic, which no session time zone
/// changes, and the text is one for every page.
pub(crate) fn open_page_sql(account: AccountId, after: OpenAfter, limit: u32) -> Sql<'static> {
    Sql::new(format!(
        "SELECT {COLUMNS}, UTC_TIMESTAMP(6) AS now FROM holds WHERE account_id = ? \
         AND state = {held} AND expires_at > UTC_TIMESTAMP(6) \
         AND (created_at, hold_id) > (TIMESTAMPADD(MICROSECOND, ?, '1970-01-01'), ?) \
         ORDER BY created_at, hold_id LIMIT ?",
        held = HoldState::Held.code()
    ))
    .bind(Bind::U64(account.get()))
    .bind(Bind::U64(after.created_micros))
    .bind(Bind::U64(after.hold_id))
    .bind(Bind::U64(u64::from(limit)))
}

/// Up to `limit` of the account's open holds after `after`, oldest first.
///
/// Placements on an account are serialized by its row lock and stamped with the
/// database's clock read once that lock is granted (a batch's with one instant,
/// in id order), so a hold placed while a client pages sorts after every hold it
/// has been shown, and none is skipped or repeated, as long as the database's
/// clock does not step back.
pub(crate) async fn open_page(
    conn: &mut Conn,
    account: AccountId,
    after: OpenAfter,
    limit: u32,
) -> Result<Vec<Hold>, Error> {
    let rows: Vec<Row> =
        crate::db::conn::tx::load(conn, open_page_sql(account, after, limit)).await?;
    parse(rows)
}

/// The statement of [`capture_of`]: the hold's capture entry, found through the
/// key the hold keeps of the call that resolved it (`holds_resolved_key`), which
/// is its capture entry's (`entries_key`); both by index.
pub(crate) fn capture_of_sql(hold: HoldId) -> Sql<'static> {
    Sql::new(format!(
        "SELECT e.entry_id AS id, e.account_id FROM holds h JOIN entries e \
         ON e.namespace = h.resolved_namespace AND e.idempotency_key = h.resolved_key \
         WHERE h.hold_id = ? AND h.state = {captured} AND e.hold_id = h.hold_id \
         AND e.kind = {capture}",
        captured = HoldState::Captured.code(),
        capture = crate::ledger::EntryKind::Capture.code(),
    ))
    .bind(Bind::U64(hold.get()))
}

/// The entry that captured the hold; `None` unless it was captured.
pub(crate) async fn capture_of(
    conn: &mut Conn,
    hold: HoldId,
) -> Result<Option<crate::ledger::EntryId>, Error> {
    let rows: Vec<Located> = crate::db::conn::tx::load(conn, capture_of_sql(hold)).await?;
    rows.into_iter()
        .next()
        .map(|row| {
            crate::ledger::EntryId::parse("entry_id", row.id).map_err(|v| Error::internal_row(&v))
        })
        .transpose()
}

const INSERT_COLUMNS: &str = "hold_id, account_id, amount, currency, state, captured_amount, \
    description, namespace, idempotency_key, created_at, expires_at";

/// The column values of new holds, one `(...)` row each.
pub(crate) fn values<'k>(
    new: &[(usize, Hold)],
    key_of: impl Fn(usize) -> Option<&'k ScopedKey>,
) -> Result<Vec<String>, Error> {
    new.iter()
        .map(|(call, h)| {
            let key = key_of(*call).ok_or_else(|| Error::internal("a hold of an unknown call"))?;
            Ok(format!(
                "{id}, {account}, {amount}, {currency}, {state}, {captured}, \
                 {description}, {namespace}, {key}, {created}, {expires}",
                id = h.id,
                account = h.account_id,
                amount = h.amount.get(),
                currency = text(h.currency.as_str(), "ascii"),
                state = h.state.code(),
                captured = h.captured_amount,
                description = text(h.description.as_str(), "utf8mb4"),
                namespace = hex(key.namespace.as_str().as_bytes()),
                key = hex(key.key.as_str().as_bytes()),
                created = datetime(h.created_at),
                expires = datetime(h.expires_at),
            ))
        })
        .collect()
}

pub(crate) fn insert_sql(rows: &[String], guard: Option<&str>) -> Option<String> {
    crate::db::conn::sql::insert("holds", INSERT_COLUMNS, rows, guard)
}

/// `UPDATE` of a hold resolved at `now` by the call under `key`, which the hold
/// keeps (SPEC 3.5).
/// `UPDATE` of a hold released because its time ran out: expired since its
/// `expires_at`, resolved by no call.
pub(crate) fn expired_sql(hold: &Hold, guard: Option<&str>) -> String {
    let mut sql = format!(
        "UPDATE holds SET state = {expired}, resolved_at = {at} WHERE hold_id = {id} \
         AND state = {held}",
        expired = HoldState::Expired.code(),
        at = datetime(hold.expires_at),
        id = hold.id,
        held = HoldState::Held.code(),
    );
    if let Some(guard) = guard {
        let _ = write!(sql, " AND {guard}");
    }
    sql
}

pub(crate) fn resolved_sql(
    hold: &Hold,
    key: &ScopedKey,
    now: chrono::DateTime<chrono::Utc>,
    guard: Option<&str>,
) -> String {
    let mut sql = format!(
        "UPDATE holds SET state = {state}, captured_amount = {captured}, resolved_at = {now}, \
         resolved_namespace = {namespace}, resolved_key = {key} WHERE hold_id = {id}",
        state = hold.state.code(),
        captured = hold.captured_amount,
        now = datetime(now),
        namespace = hex(key.namespace.as_str().as_bytes()),
        key = hex(key.key.as_str().as_bytes()),
        id = hold.id,
    );
    if let Some(guard) = guard {
        let _ = write!(sql, " AND {guard}");
    }
    sql
}
