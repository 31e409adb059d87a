//! A transaction's writes after its locks are held, sent with its COMMIT as one
//! multi-statement round trip: the stored outcome in the key's row, and for a
//! successful Credit or Charge also the account's new balance and the journal
//! entry. Every row they touch is already locked by this transaction, so they
//! cannot wait, and the account's lock is held for one round trip fewer.
//!
//! A batch is text, so values cannot be bound: every value is either an integer
//! this code formats, or bytes written as a hexadecimal literal (`x'...'`), which
//! no input can escape.

use std::fmt::Write as _;

use chrono::NaiveDateTime;

use super::accounts::LockedAccount;
use crate::ledger::{Entry, ScopedKey, StoredOutcome};

/// The statements to run before COMMIT; none for a replay.
#[derive(Debug, Default)]
pub(crate) struct Writes(String);

impl Writes {
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Records the outcome in the key's row, inserted by this transaction's probe.
    pub(crate) fn outcome(key: &ScopedKey, outcome: &StoredOutcome) -> Self {
        Self(store_outcome(key, outcome))
    }

    /// A successful Credit or Charge: balance, entry (numbered after the account's
    /// last one) and stored reply.
    pub(crate) fn posting(
        key: &ScopedKey,
        account: LockedAccount,
        entry: &Entry,
        outcome: &StoredOutcome,
    ) -> Self {
        let account_id = entry.account_id.get();
        let seq = account.entry_count + 1;
        Self(format!(
            "UPDATE accounts SET balance = {balance}, entry_count = {seq} \
             WHERE account_id = {account_id}; \
             INSERT INTO entries (entry_id, account_id, account_seq, kind, amount, currency, \
             balance_after, namespace, idempotency_key, description, created_at) \
             VALUES ({entry_id}, {account_id}, {seq}, {kind}, {amount}, \
             CONVERT({currency} USING ascii), {balance}, {namespace}, {idempotency_key}, \
             CONVERT({description} USING utf8mb4), {created_at}); {store}",
            balance = entry.balance_after,
            entry_id = entry.id,
            kind = entry.kind.code(),
            amount = entry.amount.get(),
            currency = hex(entry.currency.as_str().as_bytes()),
            namespace = hex(key.namespace.as_str().as_bytes()),
            idempotency_key = hex(key.key.as_str().as_bytes()),
            description = hex(entry.description.as_str().as_bytes()),
            created_at = datetime(entry.created_at.naive_utc()),
            store = store_outcome(key, outcome),
        ))
    }

    /// The writes followed by COMMIT, as one batch.
    pub(crate) fn then_commit(&self) -> String {
        if self.0.is_empty() {
            "COMMIT".to_owned()
        } else {
            format!("{}; COMMIT", self.0)
        }
    }
}

fn store_outcome(key: &ScopedKey, outcome: &StoredOutcome) -> String {
    format!(
        "UPDATE idempotency_keys SET outcome_code = {code}, outcome = {body} \
         WHERE namespace = {namespace} AND idempotency_key = {idempotency_key}",
        code = outcome.code,
        body = hex(&outcome.body),
        namespace = hex(key.namespace.as_str().as_bytes()),
        idempotency_key = hex(key.key.as_str().as_bytes()),
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

    #[test]
    fn a_replay_commits_alone() {
        assert_eq!(Writes::none().then_commit(), "COMMIT");
    }
}
