//! The writes of a successful Credit or Charge, in one round trip: the account's
//! new balance, the journal entry and the stored reply, as one multi-statement
//! batch inside the transaction that holds the account's and the key's rows.
//!
//! A batch is text, so values cannot be bound: every value is either an integer
//! this code formats, or bytes written as a hexadecimal literal (`x'...'`), which
//! no input can escape.

use std::fmt::Write as _;

use chrono::NaiveDateTime;
use diesel_async::SimpleAsyncConnection as _;

use super::accounts::LockedAccount;
use super::failure::{AtStep, Failure, Step};
use super::pool::Conn;
use crate::ledger::{Entry, ScopedKey, StoredOutcome};

pub(crate) async fn write(
    conn: &mut Conn,
    key: &ScopedKey,
    account: LockedAccount,
    entry: &Entry,
    outcome: &StoredOutcome,
) -> Result<(), Failure> {
    conn.batch_execute(&batch(key, account, entry, outcome))
        .await
        .at(Step::Write)?;
    Ok(())
}

fn batch(
    key: &ScopedKey,
    account: LockedAccount,
    entry: &Entry,
    outcome: &StoredOutcome,
) -> String {
    let account_id = entry.account_id.get();
    let seq = account.entry_count + 1;
    let namespace = hex(key.namespace.as_str().as_bytes());
    let idempotency_key = hex(key.key.as_str().as_bytes());
    format!(
        "UPDATE accounts SET balance = {balance}, entry_count = {seq} WHERE account_id = {account_id}; \
         INSERT INTO entries (entry_id, account_id, account_seq, kind, amount, currency, balance_after, \
         namespace, idempotency_key, description, created_at) VALUES ({entry_id}, {account_id}, {seq}, \
         {kind}, {amount}, CONVERT({currency} USING ascii), {balance}, {namespace}, {idempotency_key}, \
         CONVERT({description} USING utf8mb4), {created_at}); \
         UPDATE idempotency_keys SET outcome_code = {code}, outcome = {body} \
         WHERE namespace = {namespace} AND idempotency_key = {idempotency_key}",
        balance = entry.balance_after,
        entry_id = entry.id,
        kind = entry.kind.code(),
        amount = entry.amount.get(),
        currency = hex(entry.currency.as_str().as_bytes()),
        description = hex(entry.description.as_str().as_bytes()),
        created_at = datetime(entry.created_at.naive_utc()),
        code = outcome.code,
        body = hex(&outcome.body),
    )
}

/// A hexadecimal literal: `x'0aff'`.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    out.push_str("x'");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\'');
    out
}

fn datetime(at: NaiveDateTime) -> String {
    format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_become_hex_literals_that_nothing_escapes() {
        assert_eq!(hex(b""), "x''");
        assert_eq!(
            hex(b"'; DROP TABLE accounts; --"),
            "x'273b2044524f50205441424c45206163636f756e74733b202d2d'"
        );
    }
}
