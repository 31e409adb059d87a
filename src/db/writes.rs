//! A transaction's writes after its locks are held, sent with its COMMIT as one
//! multi-statement round trip: the stored outcome in the key's row, and for a
//! successful Credit or Charge also the account's new balance and the journal
//! entry. Every row they touch is already locked by this transaction, so they
//! cannot wait, and the account's lock is held for one round trip fewer.
//!
//! On a single server a batch stops at its first error, so a batch either commits
//! whole or reports why not. On a multi-primary cluster it need not: on Galera, a
//! conflicting write set from another node can abort the transaction while its
//! batch runs; the server may then go on with the rest of the batch in a new
//! transaction, and report success for a COMMIT with nothing in it (both measured
//! on MariaDB 10.11 with galera-4). There the batch is [`Batch::Guarded`]:
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
//! The guards and the check cost a single server about a third of its charge rate
//! (README, Performance), so it is spared them.
//!
//! A batch is text, so values cannot be bound: every value is either an integer
//! this code formats, or bytes written as a hexadecimal literal (`x'...'`), which
//! no input can escape.

use std::fmt::Write as _;

use chrono::NaiveDateTime;

use super::accounts::LockedAccount;
use crate::ledger::{Entry, ScopedKey, StoredOutcome};

/// How a batch protects itself (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batch {
    /// For a single server, where a batch stops at its first error.
    Plain,
    /// For a multi-primary cluster: guarded writes, and a check after COMMIT.
    Guarded,
}

/// The writes of a new key's outcome; none for a replay.
#[derive(Debug, Default)]
pub(crate) struct Writes(Option<Pending>);

#[derive(Debug)]
struct Pending {
    claimed: Claimed,
    posting: Option<PostingWrites>,
    code: i32,
    /// The encoded reply, as a hexadecimal literal.
    body: String,
}

/// A successful Credit or Charge's balance and journal entry.
#[derive(Debug)]
struct PostingWrites {
    account_id: u64,
    balance: i64,
    seq: u64,
    /// The account's entry count as read under its lock.
    before: u64,
    /// The entry's column values, in `ENTRY_COLUMNS` order.
    entry: String,
}

const ENTRY_COLUMNS: &str = "entry_id, account_id, account_seq, kind, amount, currency, \
    balance_after, namespace, idempotency_key, description, created_at";

impl Writes {
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Records the outcome in the key's row, inserted by this transaction's probe.
    pub(crate) fn outcome(key: &ScopedKey, outcome: &StoredOutcome) -> Self {
        Self(Some(Pending::new(Claimed::new(key), outcome, None)))
    }

    /// A successful Credit or Charge: balance, entry (numbered after the account's
    /// last one) and stored reply.
    pub(crate) fn posting(
        key: &ScopedKey,
        account: LockedAccount,
        entry: &Entry,
        outcome: &StoredOutcome,
    ) -> Self {
        let claimed = Claimed::new(key);
        let account_id = entry.account_id.get();
        let seq = account.entry_count + 1;
        let values = format!(
            "{entry_id}, {account_id}, {seq}, {kind}, {amount}, CONVERT({currency} USING ascii), \
             {balance}, {namespace}, {idempotency_key}, CONVERT({description} USING utf8mb4), \
             {created_at}",
            entry_id = entry.id,
            kind = entry.kind.code(),
            amount = entry.amount.get(),
            currency = hex(entry.currency.as_str().as_bytes()),
            balance = entry.balance_after,
            namespace = claimed.namespace,
            idempotency_key = claimed.key,
            description = hex(entry.description.as_str().as_bytes()),
            created_at = datetime(entry.created_at.naive_utc()),
        );
        let posting = PostingWrites {
            account_id,
            balance: entry.balance_after,
            seq,
            before: account.entry_count,
            entry: values,
        };
        Self(Some(Pending::new(claimed, outcome, Some(posting))))
    }

    /// The writes and COMMIT as one batch; guarded, also the check that they
    /// committed (which reads in a transaction of its own, ended by the last
    /// COMMIT).
    pub(crate) fn then_commit(&self, batch: Batch) -> String {
        let Some(pending) = &self.0 else {
            return "COMMIT".to_owned();
        };
        let Pending {
            claimed,
            posting,
            code,
            body,
        } = pending;
        let mut sql = String::new();
        match batch {
            Batch::Plain => {
                if let Some(posting) = posting {
                    let _ = write!(sql, "{}; {}; ", posting.update(), posting.insert());
                }
                let _ = write!(
                    sql,
                    "UPDATE idempotency_keys SET outcome_code = {code}, outcome = {body} \
                     WHERE {key}; COMMIT",
                    key = claimed.row,
                );
            }
            Batch::Guarded => {
                if let Some(posting) = posting {
                    let _ = write!(
                        sql,
                        "{update} AND entry_count = {before} \
                         AND EXISTS (SELECT 1 FROM idempotency_keys WHERE {claimed}); \
                         INSERT INTO entries ({ENTRY_COLUMNS}) \
                         SELECT {entry} FROM idempotency_keys WHERE {claimed}; ",
                        update = posting.update(),
                        before = posting.before,
                        entry = posting.entry,
                    );
                }
                // Committed is "the key's reply is this transaction's own": a
                // posting's reply names its entry, and an opened account's its id,
                // so no other transaction's is equal; a decline equal to another's
                // declines the same.
                let _ = write!(
                    sql,
                    "UPDATE idempotency_keys SET outcome_code = {code}, outcome = {body} \
                     WHERE {claimed}; COMMIT; \
                     CALL ledger_require_committed((SELECT outcome_code = {code} \
                     AND outcome = {body} FROM idempotency_keys WHERE {key})); COMMIT",
                    key = claimed.row,
                );
            }
        }
        sql
    }
}

impl Pending {
    fn new(claimed: Claimed, outcome: &StoredOutcome, posting: Option<PostingWrites>) -> Self {
        Self {
            claimed,
            posting,
            code: outcome.code,
            body: hex(&outcome.body),
        }
    }
}

impl PostingWrites {
    fn update(&self) -> String {
        format!(
            "UPDATE accounts SET balance = {balance}, entry_count = {seq} \
             WHERE account_id = {account_id}",
            balance = self.balance,
            seq = self.seq,
            account_id = self.account_id,
        )
    }

    fn insert(&self) -> String {
        format!(
            "INSERT INTO entries ({ENTRY_COLUMNS}) VALUES ({})",
            self.entry
        )
    }
}

/// The condition that holds only inside the transaction that claimed the key: its
/// row exists and has no outcome yet.
#[derive(Debug)]
struct Claimed {
    namespace: String,
    key: String,
    /// The condition that selects the key's row, whoever wrote it.
    row: String,
}

impl Claimed {
    fn new(key: &ScopedKey) -> Self {
        let namespace = hex(key.namespace.as_str().as_bytes());
        let key = hex(key.key.as_str().as_bytes());
        let row = format!("namespace = {namespace} AND idempotency_key = {key}");
        Self {
            namespace,
            key,
            row,
        }
    }
}

impl std::fmt::Display for Claimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} AND outcome IS NULL", self.row)
    }
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
    fn only_a_guarded_batch_is_guarded_and_checked() {
        let key = ScopedKey {
            namespace: crate::ledger::Namespace::anonymous(),
            key: crate::ledger::IdempotencyKey::parse("k", "k1".into()).unwrap(),
        };
        let outcome = StoredOutcome {
            code: 9,
            body: vec![0xab],
        };
        let writes = Writes::outcome(&key, &outcome);
        assert_eq!(
            writes.then_commit(Batch::Plain),
            "UPDATE idempotency_keys SET outcome_code = 9, outcome = x'ab' \
             WHERE namespace = x'' AND idempotency_key = x'6b31'; COMMIT"
        );
        assert_eq!(
            writes.then_commit(Batch::Guarded),
            "UPDATE idempotency_keys SET outcome_code = 9, outcome = x'ab' \
             WHERE namespace = x'' AND idempotency_key = x'6b31' AND outcome IS NULL; \
             COMMIT; CALL ledger_require_committed((SELECT outcome_code = 9 \
             AND outcome = x'ab' FROM idempotency_keys \
             WHERE namespace = x'' AND idempotency_key = x'6b31')); COMMIT"
        );
    }

    #[test]
    fn a_replay_commits_alone() {
        for batch in [Batch::Plain, Batch::Guarded] {
            assert_eq!(Writes::none().then_commit(batch), "COMMIT");
        }
    }
}
