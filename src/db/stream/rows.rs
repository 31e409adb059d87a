//! The rows a round reads.

use chrono::NaiveDateTime;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Datetime, Text, Unsigned, Varbinary};

use super::order::Pending;
use crate::db::conn::failure::Failure;
use crate::db::tables::commits::parse_spans;

/// The lease row, as a round locks it.
#[derive(QueryableByName)]
pub(super) struct LeaseRow {
    #[diesel(sql_type = Varbinary)]
    pub(super) owner: Vec<u8>,
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) valid: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) next_sequence: u64,
    /// The search index's next sequence (`index`).
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) indexed: u64,
}

#[derive(QueryableByName)]
pub(super) struct Next {
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) next_sequence: u64,
}

#[derive(QueryableByName)]
pub(super) struct Row {
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) commit_id: u64,
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) entry_count: u64,
    #[diesel(sql_type = Text)]
    pub(super) accounts: String,
    #[diesel(sql_type = Datetime)]
    pub(super) created_at: NaiveDateTime,
    #[diesel(sql_type = Datetime)]
    pub(super) now: NaiveDateTime,
}

#[derive(QueryableByName)]
pub(super) struct Numbered {
    #[diesel(sql_type = Unsigned<BigInt>)]
    pub(super) account_id: u64,
}

impl Row {
    pub(super) fn pending(self) -> Result<Pending, Failure> {
        let spans = parse_spans(&self.accounts).ok_or_else(|| {
            Failure::from(crate::error::Error::internal(format!(
                "commit {} lists its accounts as {:?}",
                self.commit_id, self.accounts
            )))
        })?;
        Ok(Pending {
            commit_id: self.commit_id,
            entries: self.entry_count,
            spans,
            created_at: self.created_at,
        })
    }
}
