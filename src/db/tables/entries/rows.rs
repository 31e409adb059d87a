//! An entry as stored, and the read of entries with their metadata.

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Nullable, SmallInt, Text, TinyInt, Unsigned, Varbinary};

use crate::db::conn::connection::Conn;
use crate::db::conn::sql::Sql;
use crate::db::tables::metadata::{self};
use crate::error::Error;
use crate::ledger::{
    AccountId, Currency, Description, Entry, EntryId, EntryKind, HoldId, IdempotencyKey, Limits,
    Metadata, Namespace,
};

pub(super) fn kind(code: u8) -> Result<EntryKind, Error> {
    EntryKind::from_code(code).ok_or_else(|| Error::internal(format!("unknown entry kind {code}")))
}

/// An entry as stored, for reads.
#[derive(Debug, QueryableByName)]
pub(super) struct FullRow {
    #[diesel(sql_type = Unsigned<BigInt>)]
    entry_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    account_seq: u64,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    kind: u8,
    #[diesel(sql_type = BigInt)]
    amount: i64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = BigInt)]
    balance_after: i64,
    #[diesel(sql_type = Varbinary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Varbinary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = Text)]
    description: String,
    #[diesel(sql_type = Datetime)]
    created_at: NaiveDateTime,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    counterparty_account_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    refunded_entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    hold_id: Option<u64>,
    #[diesel(sql_type = Unsigned<SmallInt>)]
    post_leg: u16,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    reverses_entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    sequence: Option<u64>,
    /// A LIMITS entry's limits (`limits::ENTRY_LIMITS_JOIN`).
    #[diesel(sql_type = Nullable<BigInt>)]
    limit_min: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    limit_max: Option<i64>,
}

/// The columns of [`FullRow`], of `entries e`, its commit `c` and its limits `l`
/// ([`ENTRY_LIMITS_JOIN`]).
pub(super) const FULL_COLUMNS: &str = "e.entry_id, e.account_id, e.account_seq, e.kind, e.amount, \
    e.currency, e.balance_after, e.namespace, e.idempotency_key, e.description, e.created_at, \
    e.counterparty_account_id, e.refunded_entry_id, e.hold_id, e.post_leg, e.reverses_entry_id, \
    c.first_sequence + e.commit_pos AS sequence, l.min_balance AS limit_min, \
    l.max_balance AS limit_max";

/// Entries with their commits, numbered or not.
pub(super) const WITH_COMMITS: &str =
    "entries e LEFT JOIN stream_commits c ON c.commit_id = e.commit_id";

impl FullRow {
    /// A LIMITS entry's limits; nothing for the others.
    pub(super) fn limits(&self) -> Result<Option<Limits>, Error> {
        if self.kind != EntryKind::Limits.code() {
            return Ok(None);
        }
        Limits::new(self.limit_min, self.limit_max)
            .map(Some)
            .ok_or_else(|| {
                Error::internal(format!(
                    "entry {} sets a floor above its ceiling",
                    self.entry_id
                ))
            })
    }

    pub(super) fn into_entry(self) -> Result<(u64, Entry), Error> {
        let limits = self.limits()?;
        let bad = |v: crate::ledger::FieldViolation| Error::internal_row(&v);
        let key = String::from_utf8(self.idempotency_key)
            .map_err(|_| Error::internal("a stored idempotency key is not UTF-8"))?;
        let client = String::from_utf8(self.namespace)
            .ok()
            .and_then(|id| Namespace::client(&id))
            .ok_or_else(|| Error::internal("a stored namespace is not a client's"))?;
        let entry = Entry {
            id: EntryId::parse("entry_id", self.entry_id).map_err(bad)?,
            account_id: AccountId::parse("account_id", self.account_id).map_err(bad)?,
            kind: kind(self.kind)?,
            amount: self.amount,
            currency: Currency::parse("currency", &self.currency).map_err(bad)?,
            balance_after: self.balance_after,
            idempotency_key: IdempotencyKey::parse("idempotency_key", key).map_err(bad)?,
            client,
            metadata: Metadata::NONE,
            description: Description::parse("description", self.description).map_err(bad)?,
            created_at: self.created_at.and_utc(),
            counterparty: self
                .counterparty_account_id
                .map(|id| AccountId::parse("counterparty_account_id", id))
                .transpose()
                .map_err(bad)?,
            refunded_entry: self
                .refunded_entry_id
                .map(|id| EntryId::parse("refunded_entry_id", id))
                .transpose()
                .map_err(bad)?,
            hold: self
                .hold_id
                .map(|id| HoldId::parse("hold_id", id))
                .transpose()
                .map_err(bad)?,
            leg: self.post_leg,
            limits,
            reverses: self
                .reverses_entry_id
                .map(|id| EntryId::parse("reverses_entry_id", id))
                .transpose()
                .map_err(bad)?,
            sequence: self.sequence,
        };
        Ok((self.account_seq, entry))
    }
}

/// The entries `sql` reads (its columns [`FULL_COLUMNS`]), each with its place in
/// its account's journal, in the order read, with the metadata of their calls
/// (one more read, by key).
pub(super) async fn load(conn: &mut Conn, sql: Sql<'_>) -> Result<Vec<(u64, Entry)>, Error> {
    let rows: Vec<FullRow> = crate::db::conn::tx::load(conn, sql).await?;
    let mut entries: Vec<(u64, Entry)> = rows
        .into_iter()
        .map(FullRow::into_entry)
        .collect::<Result<_, _>>()?;
    let keys = metadata::distinct_keys(
        entries
            .iter()
            .map(|(_, e)| (e.client.as_str(), e.idempotency_key.as_str())),
    );
    let found = metadata::of_keys(conn, &keys).await?;
    if !found.is_empty() {
        for (_, entry) in &mut entries {
            let key = (
                entry.client.as_str().as_bytes().to_vec(),
                entry.idempotency_key.as_str().as_bytes().to_vec(),
            );
            if let Some(pairs) = found.get(&key) {
                entry.metadata = pairs.clone();
            }
        }
    }
    Ok(entries)
}
