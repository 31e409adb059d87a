//! The `entries` journal: append-only, one row per successful Credit or Charge.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use super::accounts::last_insert_id;
use super::failure::{AtStep, Failure, Step};
use super::pool::Conn;
use super::schema::entries;
use crate::ledger::{EntryKind, Posting, ScopedKey};

/// Appends an entry and returns its id.
pub(crate) async fn append(
    conn: &mut Conn,
    key: &ScopedKey,
    kind: EntryKind,
    posting: &Posting,
    balance_after: i64,
    now: NaiveDateTime,
) -> Result<u64, Failure> {
    diesel::insert_into(entries::table)
        .values((
            entries::account_id.eq(posting.account_id.get()),
            entries::kind.eq(kind.code()),
            entries::amount.eq(posting.amount.get()),
            entries::currency.eq(posting.currency.as_str()),
            entries::balance_after.eq(balance_after),
            entries::namespace.eq(key.namespace.as_str().as_bytes()),
            entries::idempotency_key.eq(key.key.as_str().as_bytes()),
            entries::description.eq(posting.description.as_str()),
            entries::created_at.eq(now),
        ))
        .execute(conn)
        .await
        .at(Step::Write)?;
    let id = diesel::select(last_insert_id())
        .get_result(conn)
        .await
        .at(Step::Write)?;
    Ok(id)
}
