//! A transaction's writes after its locks are held, sent with its COMMIT as one
//! multi-statement round trip: what the decisions changed (accounts, entries,
//! holds) and each new key's stored outcome. Every row they touch is already
//! locked by this transaction, so they cannot wait, and the locks are held for one
//! round trip fewer. The statements come from the tables' modules; this one knows
//! no operation.
//!
//! On a single server a batch stops at its first error, so a batch either commits
//! whole or reports why not. On a multi-primary cluster it need not: on Galera, a
//! conflicting write set from another node can abort the transaction while its
//! batch runs; the server may then go on with the rest of the batch in a new
//! transaction, and report success for a COMMIT with nothing in it (both measured
//! on MariaDB 10.11 with galera-4). There the batch is [`Batch::Guarded`]:
//!
//! * every write is guarded to take effect only inside the transaction that claimed
//!   the keys: only while the first key's row exists with no outcome yet, which is
//!   true of the claiming transaction's own uncommitted row and of no committed
//!   row. A continued batch writes nothing: no stale balance, no overwritten reply;
//! * after COMMIT, the batch reads the committed outcomes back and raises a
//!   deadlock error (`ledger_require_committed`) unless they are this
//!   transaction's own, so the client never reports an outcome that did not
//!   commit: it retries, and the probe replays the winner's.
//!
//! The guards and the check cost a single server about a third of its charge rate
//! (README, Performance), so it is spared them.

use crate::db::tables::idempotency;
use crate::db::tables::{
    accounts, commits, entries, holds, limits, metadata, reversals, subscriptions,
};
use crate::error::Error;
use crate::ledger::book::Changes;
use crate::ledger::{Fingerprint, Metadata, ScopedKey, StoredOutcome};
use crate::ops::Method;

/// How a batch protects itself (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batch {
    /// For a single server, where a batch stops at its first error.
    Plain,
    /// For a multi-primary cluster: guarded writes, and a check after COMMIT.
    Guarded,
}

/// A new key and the outcome to store under it, or none: its row is deleted (its
/// call left or was refused). The index of a key in a batch is the index of its
/// call in the book.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyOutcome<'a> {
    pub(crate) key: &'a ScopedKey,
    /// The outcome, with what the key's row was claimed with.
    pub(crate) outcome: Option<(Method, &'a Fingerprint, &'a StoredOutcome)>,
    /// The call's metadata, stored with a success.
    pub(crate) metadata: &'a Metadata,
}

/// The writes and COMMIT as one batch; guarded, also the check that they
/// committed (which reads in a transaction of its own, ended by the last COMMIT).
pub(crate) fn commit_batch(
    changes: &Changes,
    keys: &[KeyOutcome<'_>],
    batch: Batch,
) -> Result<String, Error> {
    let stored: Vec<idempotency::Recorded<'_>> = keys
        .iter()
        .filter_map(|k| {
            k.outcome
                .map(|(method, fingerprint, outcome)| idempotency::Recorded {
                    key: k.key,
                    method,
                    fingerprint,
                    outcome,
                })
        })
        .collect();
    let claimed = match batch {
        Batch::Plain => None,
        Batch::Guarded => stored.first().map(|first| {
            format!(
                "EXISTS (SELECT 1 FROM idempotency_keys WHERE {})",
                idempotency::claimed_condition(first.key)
            )
        }),
    };
    let guard = claimed.as_deref();
    let key_of = |call: usize| keys.get(call).map(|k| k.key);
    let mut statements = row_writes(changes, key_of, batch, guard)?;
    // After the rows: the guard holds only while the first key's row has no
    // outcome yet.
    statements.extend(key_writes(keys, &stored, batch, guard));
    statements.push("COMMIT".to_owned());
    if batch == Batch::Guarded && !stored.is_empty() {
        let committed: Vec<_> = stored.iter().map(|r| (r.key, r.outcome)).collect();
        statements.push(format!(
            "CALL ledger_require_committed((({}) = {n}))",
            idempotency::committed_count_sql(&committed),
            n = stored.len(),
        ));
        statements.push("COMMIT".to_owned());
    }
    Ok(statements.join("; "))
}

/// The writes of what the decisions changed, table by table: accounts and their
/// limits, entries, reversals, commits, refunded amounts, holds, subscriptions.
fn row_writes<'k>(
    changes: &Changes,
    key_of: impl Fn(usize) -> Option<&'k ScopedKey> + Copy,
    batch: Batch,
    guard: Option<&str>,
) -> Result<Vec<String>, Error> {
    let mut statements: Vec<String> = Vec::new();
    statements.extend(accounts::insert_sql(&changes.new_accounts, key_of, guard)?);
    match (batch, changes.accounts.as_slice()) {
        (Batch::Plain, [_, _, ..]) => {
            let rows: Vec<_> = changes.accounts.iter().map(|c| &c.row).collect();
            statements.extend(accounts::upsert_sql(&rows, changes.now));
        }
        _ => {
            for changed in &changes.accounts {
                statements.push(accounts::update_sql(
                    &changed.row,
                    changed.count_before,
                    changes.now,
                    guard,
                ));
            }
        }
    }
    statements.extend(accounts::limits_sql(&changes.accounts, guard));
    statements.extend(limits::insert_sql(
        &changes.new_accounts,
        &changes.new_entries,
        guard,
    ));
    let entry_rows = entries::values(&changes.new_entries, key_of)?;
    statements.extend(entries::insert_sql(&entry_rows, guard));
    statements.extend(reversals::insert_sql(
        &changes.reversals,
        key_of,
        changes.now,
        guard,
    )?);
    statements.extend(commits::insert_sql(
        &changes.new_entries,
        changes.now,
        guard,
    ));
    for row in &changes.refunded_entries {
        statements.push(entries::refunded_sql(row, guard));
    }
    statements.extend(hold_writes(changes, key_of, guard)?);
    statements.extend(subscriptions::insert_sql(
        &changes.new_subscriptions,
        key_of,
        changes.now,
        guard,
    )?);
    for row in &changes.subscriptions {
        statements.push(subscriptions::update_sql(row, guard));
    }
    Ok(statements)
}

/// The keys' writes: the metadata of the successes, the outcomes stored, and the
/// rows of the keys whose calls left deleted.
fn key_writes(
    keys: &[KeyOutcome<'_>],
    stored: &[idempotency::Recorded<'_>],
    batch: Batch,
    guard: Option<&str>,
) -> Vec<String> {
    let succeeded: Vec<(&ScopedKey, &Metadata)> = keys
        .iter()
        .filter(|k| k.outcome.is_some_and(|(_, _, outcome)| outcome.code == 0))
        .map(|k| (k.key, k.metadata))
        .collect();
    let mut statements: Vec<String> = Vec::new();
    statements.extend(metadata::insert_sql(&succeeded, guard));
    match batch {
        // One upsert by primary key for all of them (see `outcomes_sql`).
        Batch::Plain => statements.extend(idempotency::outcomes_sql(stored)),
        // One UPDATE per key, each by its primary key and guarded by the claim.
        Batch::Guarded => {
            for r in stored {
                statements.push(idempotency::outcome_sql(r.key, r.outcome, true));
            }
        }
    }
    for k in keys.iter().filter(|k| k.outcome.is_none()) {
        statements.push(idempotency::unclaim_sql(k.key));
    }
    statements
}

/// The writes of the holds placed, resolved and found expired.
fn hold_writes<'k>(
    changes: &Changes,
    key_of: impl Fn(usize) -> Option<&'k ScopedKey> + Copy,
    guard: Option<&str>,
) -> Result<Vec<String>, Error> {
    let mut statements = Vec::new();
    let hold_rows = holds::values(&changes.new_holds, key_of)?;
    statements.extend(holds::insert_sql(&hold_rows, guard));
    for resolved in &changes.resolved_holds {
        let key = key_of(resolved.call)
            .ok_or_else(|| Error::internal("a hold resolved by an unknown call"))?;
        statements.push(holds::resolved_sql(&resolved.hold, key, changes.now, guard));
    }
    for expired in &changes.expired_holds {
        statements.push(holds::expired_sql(expired, guard));
    }
    Ok(statements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> (Method, Fingerprint) {
        let method = Method::from_code(1).unwrap();
        (method, Fingerprint::from_bytes(&[0xee; 32]).unwrap())
    }

    fn key() -> ScopedKey {
        ScopedKey {
            namespace: crate::ledger::Namespace::anonymous(),
            key: crate::ledger::IdempotencyKey::parse("k", "k1".into()).unwrap(),
        }
    }

    #[test]
    fn only_a_guarded_batch_is_guarded_and_checked() {
        let key = key();
        let outcome = StoredOutcome {
            code: 9,
            body: vec![0xab],
        };
        let (method, fingerprint) = claim();
        let keys = [KeyOutcome {
            key: &key,
            outcome: Some((method, &fingerprint, &outcome)),
            metadata: Metadata::none(),
        }];
        let changes = Changes::default();
        assert_eq!(
            commit_batch(&changes, &keys, Batch::Plain).unwrap(),
            format!(
                "INSERT INTO idempotency_keys (namespace, idempotency_key, method, fingerprint, \
                 created_at, outcome_code, outcome) VALUES (x'', x'6b31', 1, x'{}', \
                 UTC_TIMESTAMP(6), 9, x'ab') ON DUPLICATE KEY UPDATE \
                 outcome_code = VALUES(outcome_code), outcome = VALUES(outcome); COMMIT",
                "ee".repeat(32)
            )
        );
        assert_eq!(
            commit_batch(&changes, &keys, Batch::Guarded).unwrap(),
            "UPDATE idempotency_keys SET outcome_code = 9, outcome = x'ab' \
             WHERE namespace = x'' AND idempotency_key = x'6b31' AND outcome IS NULL; \
             COMMIT; CALL ledger_require_committed(((SELECT COUNT(*) FROM idempotency_keys \
             FORCE INDEX (PRIMARY) WHERE (namespace, idempotency_key) IN ((x'', x'6b31')) \
             AND (namespace, idempotency_key, outcome_code, outcome) IN \
             ((x'', x'6b31', 9, x'ab'))) = 1)); COMMIT"
        );
    }

    #[test]
    fn a_dropped_key_is_deleted_and_not_checked() {
        let (kept, dropped) = (
            key(),
            ScopedKey {
                namespace: crate::ledger::Namespace::anonymous(),
                key: crate::ledger::IdempotencyKey::parse("k", "k2".into()).unwrap(),
            },
        );
        let outcome = StoredOutcome {
            code: 0,
            body: vec![0x01],
        };
        let (method, fingerprint) = claim();
        let keys = [
            KeyOutcome {
                key: &dropped,
                outcome: None,
                metadata: Metadata::none(),
            },
            KeyOutcome {
                key: &kept,
                outcome: Some((method, &fingerprint, &outcome)),
                metadata: Metadata::none(),
            },
        ];
        let sql = commit_batch(&Changes::default(), &keys, Batch::Guarded).unwrap();
        assert!(
            sql.starts_with(
                "UPDATE idempotency_keys SET outcome_code = 0, outcome = x'01' \
             WHERE namespace = x'' AND idempotency_key = x'6b31' AND outcome IS NULL; \
             DELETE FROM idempotency_keys WHERE namespace = x'' AND idempotency_key = x'6b32' \
             AND outcome IS NULL; COMMIT; "
            ),
            "{sql}"
        );
        assert!(
            sql.contains(") = 1)); COMMIT"),
            "only the stored key is checked: {sql}"
        );
    }

    /// Every guarded write comes before the outcomes are stored: once the
    /// claiming key's row has its outcome the guard is false, and a write after
    /// it would be dropped without a word (as a call's metadata once was).
    #[test]
    fn every_guarded_write_precedes_the_stored_outcomes() {
        let key = key();
        let outcome = StoredOutcome {
            code: 0,
            body: vec![0x01],
        };
        let (method, fingerprint) = claim();
        let pairs = Metadata::stored([("order_id".to_owned(), "A-1".to_owned())]);
        let keys = [KeyOutcome {
            key: &key,
            outcome: Some((method, &fingerprint, &outcome)),
            metadata: &pairs,
        }];
        let sql = commit_batch(&Changes::default(), &keys, Batch::Guarded).unwrap();
        let statements: Vec<&str> = sql.split("; ").collect();
        let stored = statements
            .iter()
            .position(|s| s.starts_with("UPDATE idempotency_keys SET outcome"))
            .unwrap();
        let guarded: Vec<usize> = statements
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.contains("outcome IS NULL") && !s.starts_with("UPDATE idempotency_keys")
            })
            .map(|(n, _)| n)
            .collect();
        assert!(
            guarded.len() >= 2,
            "the call's metadata is written, guarded: {sql}"
        );
        assert!(guarded.iter().all(|n| *n < stored), "{sql}");
    }

    #[test]
    fn a_replay_commits_alone() {
        for batch in [Batch::Plain, Batch::Guarded] {
            assert_eq!(
                commit_batch(&Changes::default(), &[], batch).unwrap(),
                "COMMIT"
            );
        }
    }
}
