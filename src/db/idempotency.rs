//! The `idempotency_keys` table: the probe that claims a key, the locking read of an
//! existing key, and the stored outcome.

use chrono::NaiveDateTime;
use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{Binary, Datetime, Unsigned, Varbinary};
use diesel_async::RunQueryDsl;

use super::failure::{AtStep, Failure, Step};
use super::pool::Conn;
use super::schema::idempotency_keys as keys;
use crate::error::Error;
use crate::ledger::{Fingerprint, Method, ScopedKey, StoredOutcome};

/// What the probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The row was inserted: this transaction does the work.
    New,
    /// The row existed (and, if another transaction held it, that one has ended):
    /// replay its outcome.
    Duplicate,
}

/// SPEC 3.2 step 3. Affected rows are 1 for a new key and 0 for a duplicate, which
/// only holds on connections without `CLIENT_FOUND_ROWS` (see `pool`). A duplicate
/// whose row is still uncommitted blocks here until its transaction ends.
pub(crate) async fn probe(
    conn: &mut Conn,
    key: &ScopedKey,
    method: Method,
    fingerprint: &Fingerprint,
    now: NaiveDateTime,
) -> Result<Claim, Failure> {
    let probe = Probe {
        namespace: key.namespace.as_str().as_bytes(),
        key: key.key.as_str().as_bytes(),
        method: method.code(),
        fingerprint: fingerprint.as_bytes().as_slice(),
        created_at: now,
    };
    match probe.execute(conn).await.at(Step::Probe)? {
        1 => Ok(Claim::New),
        0 => Ok(Claim::Duplicate),
        n => Err(Error::internal(format!(
            "the probe affected {n} rows; only 1 (new) or 0 (duplicate) are meaningful"
        ))
        .into()),
    }
}

/// The probe statement, written out so the SQL the guarantee rests on reads as one
/// line, and with a static query id so the prepared statement is cached (diesel's
/// own upsert builder opts out of caching).
#[derive(Debug)]
struct Probe<'a> {
    namespace: &'a [u8],
    key: &'a [u8],
    method: u8,
    fingerprint: &'a [u8],
    created_at: NaiveDateTime,
}

impl QueryFragment<Mysql> for Probe<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO idempotency_keys \
             (namespace, idempotency_key, method, fingerprint, created_at) VALUES (",
        );
        out.push_bind_param::<Varbinary, _>(&self.namespace)?;
        out.push_sql(", ");
        out.push_bind_param::<Varbinary, _>(&self.key)?;
        out.push_sql(", ");
        out.push_bind_param::<Unsigned<diesel::sql_types::TinyInt>, _>(&self.method)?;
        out.push_sql(", ");
        out.push_bind_param::<Binary, _>(&self.fingerprint)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.created_at)?;
        out.push_sql(") ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key");
        Ok(())
    }
}

impl QueryId for Probe<'_> {
    type QueryId = ProbeId;
    const HAS_STATIC_QUERY_ID: bool = true;
}

/// The cache identity of [`Probe`]'s SQL text, which never changes.
#[derive(Debug)]
struct ProbeId;

impl diesel::query_builder::Query for Probe<'_> {
    type SqlType = diesel::sql_types::Untyped;
}

/// An existing key's row.
#[derive(Debug, Queryable)]
pub(crate) struct KeyRow {
    pub(crate) method: u8,
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) outcome_code: Option<i32>,
    pub(crate) outcome: Option<Vec<u8>>,
}

impl KeyRow {
    pub(crate) fn binds(&self, method: Method, fingerprint: &Fingerprint) -> bool {
        self.method == method.code() && self.fingerprint == fingerprint.as_bytes()
    }

    /// The stored outcome; `None` only for a row that was never completed, which a
    /// committed row cannot be.
    pub(crate) fn into_outcome(self) -> Option<StoredOutcome> {
        Some(StoredOutcome {
            code: self.outcome_code?,
            body: self.outcome?,
        })
    }
}

/// SPEC 3.2 step 5: a locking read, so it sees the original's committed outcome
/// rather than a snapshot taken before the original committed.
pub(crate) async fn lock_existing(conn: &mut Conn, key: &ScopedKey) -> Result<KeyRow, Failure> {
    keys::table
        .find((
            key.namespace.as_str().as_bytes(),
            key.key.as_str().as_bytes(),
        ))
        .select((
            keys::method,
            keys::fingerprint,
            keys::outcome_code,
            keys::outcome,
        ))
        .for_update()
        .first(conn)
        .await
        .at(Step::ReadKey)
        .map_err(Failure::from)
}
