//! A transaction's writes after its locks are held, sent with its COMMIT as one
//! multi-statement round trip: the stored outcome in the key's row, and for a
//! successful Credit or Charge also the account's new balance and the journal
//! entry. Every row they touch is already locked by this transaction, so they
//! cannot wait, and the account's lock is held for one round trip fewer.
//!
//! On a Galera cluster, a conflicting write set from another node can abort the
//! transaction while its batch runs; the server may then go on with the rest of the
//! batch in a new transaction, and report success for a COMMIT with nothing in it
//! (both measured on MariaDB 10.11 with galera-4). Two things keep that harmless:
//!
//! * every write is guarded to take effect only inside the transaction that claimed
//!   the key: only while the key's row exists with no outcome yet, which is true of
//!   the claiming transaction's own uncommitted row and of no committed row. A
//!   continued batch writes nothing: no stale balance, no overwritten reply;
//! * after COMMIT, the batch reads the committed reply back and raises a deadlock
//!   error (`ledger_require_committed`) unless it is this transaction's own, so the
//!   client never reports an outcome that did not commit: it retries, and the probe
//!   replays the winner's.
//!
//! A batch is text, so values cannot be bound: every value is either an integer
//! this code formats, or bytes written as a hexadecimal literal (`x'...'`), which
//! no input can escape.

use std::fmt::Write as _;

use chrono::NaiveDateTime;

use super::accounts::LockedAccount;
use crate::ledger::{Entry, ScopedKey, StoredOutcome};

/// The statements to run before COMMIT, and the check to run after it; neither for
/// a replay.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    statements: String,
    committed: String,
}

impl Writes {
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Records the outcome in the key's row, inserted by this transaction's probe.
    pub(crate) fn outcome(key: &ScopedKey, outcome: &StoredOutcome) -> Self {
        let claimed = Claimed::new(key);
        Self {
            statements: store_outcome(&claimed, outcome),
            committed: committed(&claimed, outcome),
        }
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
        let claimed = Claimed::new(key);
        let statements = format!(
            "UPDATE accounts SET balance = {balance}, entry_count = {seq} \
             WHERE account_id = {account_id} AND entry_count = {before} \
             AND EXISTS (SELECT 1 FROM idempotency_keys WHERE {claimed}); \
             INSERT INTO entries (entry_id, account_id, account_seq, kind, amount, currency, \
             balance_after, namespace, idempotency_key, description, created_at) \
             SELECT {entry_id}, {account_id}, {seq}, {kind}, {amount}, \
             CONVERT({currency} USING ascii), {balance}, {namespace}, {idempotency_key}, \
             CONVERT({description} USING utf8mb4), {created_at} \
             FROM idempotency_keys WHERE {claimed}; {store}",
            balance = entry.balance_after,
            before = account.entry_count,
            entry_id = entry.id,
            kind = entry.kind.code(),
            amount = entry.amount.get(),
            currency = hex(entry.currency.as_str().as_bytes()),
            namespace = claimed.namespace,
            idempotency_key = claimed.key,
            description = hex(entry.description.as_str().as_bytes()),
            created_at = datetime(entry.created_at.naive_utc()),
            store = store_outcome(&claimed, outcome),
        );
        Self {
            statements,
            committed: committed(&claimed, outcome),
        }
    }

    /// The writes, COMMIT, and the check that they committed (which reads in a
    /// transaction of its own, ended by the last COMMIT), as one batch.
    pub(crate) fn then_commit(&self) -> String {
        if self.statements.is_empty() {
            "COMMIT".to_owned()
        } else {
            format!(
                "{}; COMMIT; CALL ledger_require_committed({}); COMMIT",
                self.statements, self.committed
            )
        }
    }
}

/// The condition that holds only inside the transaction that claimed the key: its
/// row exists and has no outcome yet.
struct Claimed {
    namespace: String,
    key: String,
}

impl Claimed {
    fn new(key: &ScopedKey) -> Self {
        Self {
            namespace: hex(key.namespace.as_str().as_bytes()),
            key: hex(key.key.as_str().as_bytes()),
        }
    }
}

impl std::fmt::Display for Claimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "namespace = {} AND idempotency_key = {} AND outcome IS NULL",
            self.namespace, self.key
        )
    }
}

fn store_outcome(claimed: &Claimed, outcome: &StoredOutcome) -> String {
    format!(
        "UPDATE idempotency_keys SET outcome_code = {code}, outcome = {body} WHERE {claimed}",
        code = outcome.code,
        body = hex(&outcome.body),
    )
}

/// True once the key's committed reply is `outcome`, this transaction's own: a
/// posting's reply names its entry, and an opened account's its id, so no other
/// transaction's reply is equal. A decline equal to another's declines the same.
fn committed(claimed: &Claimed, outcome: &StoredOutcome) -> String {
    format!(
        "(SELECT outcome_code = {code} AND outcome = {body} FROM idempotency_keys \
         WHERE namespace = {namespace} AND idempotency_key = {key})",
        code = outcome.code,
        body = hex(&outcome.body),
        namespace = claimed.namespace,
        key = claimed.key,
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
