//! The ledger's invariants as queries, for `ledger audit`.
//!
//! Every check runs in one read-only transaction with a consistent snapshot, so a
//! live service can keep writing while it runs. The set checks are aggregated by
//! the server and return only violating rows (at most [`MAX_REPORTED`] each); the
//! stored outcomes are streamed, so memory stays bounded however large the ledger.
//! Every code in the SQL (entry kinds, hold states, methods) is written from the
//! domain's enums.

use std::fmt::Write as _;

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text, TinyInt, Unsigned};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection as _};
use futures::TryStreamExt as _;
use strum::IntoEnumIterator as _;

use crate::db::conn::connection::Conn;
use crate::ledger::{EntryKind, HoldState};
use crate::ops::Method;

/// Violating rows reported per check; a broken ledger can have millions.
pub const MAX_REPORTED: usize = 100;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
}

/// A set check: its name, and the query returning violations as one text column
/// `detail`.
struct SetCheck {
    name: &'static str,
    sql: String,
}

/// `amount` signed by `kind`: what the entry did to its account's balance.
fn signed(kind: &str, amount: &str) -> String {
    let mut sql = format!("CASE {kind}");
    for k in EntryKind::iter() {
        let _ = write!(
            sql,
            " WHEN {} THEN {}{amount}",
            k.code(),
            if k.takes() { "-" } else { "" }
        );
    }
    sql.push_str(" END");
    sql
}

fn codes(kinds: impl Iterator<Item = EntryKind>) -> String {
    kinds
        .map(|k| k.code().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `entries` (the kinds a call wrote, in order, as `GROUP_CONCAT` spells
/// them) are what a successful call of `method` writes: its kinds once, or, for a
/// method whose entries repeat per leg, once for each of one or more legs.
fn has_its_entries(method: &str, entries: &str) -> String {
    let mut sql = format!("CASE {method}");
    for m in Method::iter() {
        let pattern = m.entries_pattern();
        let _ = write!(sql, " WHEN {} THEN {entries} REGEXP '{pattern}'", m.code());
    }
    sql.push_str(" ELSE FALSE END");
    sql
}

fn set_checks() -> Vec<SetCheck> {
    [
        journal_checks(),
        limits_checks(),
        time_checks(),
        metadata_checks(),
        key_checks(),
        movement_checks(),
        hold_checks(),
        reversal_checks(),
        stream_checks(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Balances and the journal: every balance follows from its entries.
fn journal_checks() -> Vec<SetCheck> {
    let journal = signed("e.kind", "e.amount");
    vec![
        SetCheck {
            name: "balance equals the journal",
            sql: format!(
                "SELECT CONCAT('account ', a.account_id, ': balance ', a.balance, ', journal ', \
                 COALESCE(SUM({journal}), 0)) AS detail \
                 FROM accounts a LEFT JOIN entries e ON e.account_id = a.account_id \
                 GROUP BY a.account_id, a.balance HAVING a.balance <> COALESCE(SUM({journal}), 0)"
            ),
        },
        SetCheck {
            name: "each account counts its entries, numbered 1, 2, 3, ...",
            sql: "SELECT CONCAT('account ', a.account_id, ': entry_count ', a.entry_count, ', ', \
                  COUNT(e.entry_id), ' entries numbered up to ', COALESCE(MAX(e.account_seq), 0)) AS detail \
                  FROM accounts a LEFT JOIN entries e ON e.account_id = a.account_id \
                  GROUP BY a.account_id, a.entry_count \
                  HAVING a.entry_count <> COUNT(e.entry_id) OR a.entry_count <> COALESCE(MAX(e.account_seq), 0)"
                .into(),
        },
        SetCheck {
            name: "no negative held amount",
            sql: "SELECT CONCAT('account ', account_id, ': held ', held) AS detail \
                  FROM accounts WHERE held < 0"
                .into(),
        },
        SetCheck {
            name: "each entry's balance follows the one before",
            sql: format!(
                "SELECT CONCAT('entry ', entry_id, ' of account ', account_id, ': balance_after ', \
                 balance_after, ' after ', before_balance) AS detail FROM ( \
                   SELECT e.entry_id, e.account_id, e.kind, e.amount, e.balance_after, \
                     COALESCE(LAG(e.balance_after) OVER (PARTITION BY e.account_id ORDER BY e.account_seq), 0) AS before_balance \
                   FROM entries e) chain \
                 WHERE NOT (balance_after <=> before_balance + {})",
                signed("kind", "amount")
            ),
        },
        SetCheck {
            name: "every entry is of a known kind",
            sql: format!(
                "SELECT CONCAT('entry ', entry_id, ' has kind ', kind) AS detail FROM entries \
                 WHERE kind NOT IN ({})",
                codes(EntryKind::iter())
            ),
        },
    ]
}

/// Limits (SPEC 3.9): what each entry met, and the account's history of them.
fn limits_checks() -> Vec<SetCheck> {
    // Every debit the floor applies to: a capture takes what its hold reserved,
    // and a reversal may have been forced past the floor (never the ceiling).
    let floored = codes(EntryKind::iter().filter(|k| k.takes() && *k != EntryKind::Capture));
    let credits = codes(EntryKind::iter().filter(|k| !k.takes() && k.moves_money()));
    let limits = EntryKind::Limits.code();
    // The limits in force before entry `e`: the history's last row before its
    // place (the opening limits are at place 0).
    let before = "l.account_id = e.account_id AND l.account_seq = (SELECT MAX(x.account_seq) \
                  FROM account_limits x WHERE x.account_id = e.account_id \
                  AND x.account_seq < e.account_seq)";
    vec![
        SetCheck {
            name: "each debit left its account at or above the floor in force, each credit at or below the ceiling",
            sql: format!(
                "SELECT CONCAT('entry ', e.entry_id, ' of account ', e.account_id, ' (kind ', e.kind, \
                 '): balance_after ', e.balance_after, ' outside floor ', COALESCE(l.min_balance, 'none'), \
                 ', ceiling ', COALESCE(l.max_balance, 'none')) AS detail \
                 FROM entries e JOIN account_limits l ON {before} \
                 WHERE (e.kind IN ({floored}) AND e.reverses_entry_id IS NULL \
                     AND e.balance_after < l.min_balance) \
                   OR (e.kind IN ({credits}) AND e.balance_after > l.max_balance)"
            ),
        },
        SetCheck {
            name: "each account has opening limits, each change of limits is a LIMITS entry and each LIMITS entry a change",
            sql: format!(
                "SELECT CONCAT('account ', a.account_id, ' has no opening limits') AS detail \
                 FROM accounts a LEFT JOIN account_limits l \
                   ON l.account_id = a.account_id AND l.account_seq = 0 \
                 WHERE l.account_id IS NULL \
                 UNION ALL \
                 SELECT CONCAT('account ', l.account_id, ': limits set at place ', l.account_seq, \
                   ' without a LIMITS entry there') AS detail \
                 FROM account_limits l LEFT JOIN entries e \
                   ON e.account_id = l.account_id AND e.account_seq = l.account_seq \
                 WHERE l.account_seq > 0 AND (e.entry_id IS NULL OR e.kind <> {limits}) \
                 UNION ALL \
                 SELECT CONCAT('entry ', e.entry_id, ' of account ', e.account_id, \
                   ' changes limits but sets none') AS detail \
                 FROM entries e LEFT JOIN account_limits l \
                   ON l.account_id = e.account_id AND l.account_seq = e.account_seq \
                 WHERE e.kind = {limits} AND l.account_id IS NULL"
            ),
        },
        SetCheck {
            name: "each account's limits are those of its last change",
            sql: "SELECT CONCAT('account ', a.account_id, ': floor ', COALESCE(a.min_balance, 'none'), \
                  ', ceiling ', COALESCE(a.max_balance, 'none'), '; last set floor ', \
                  COALESCE(l.min_balance, 'none'), ', ceiling ', COALESCE(l.max_balance, 'none')) AS detail \
                  FROM accounts a JOIN account_limits l ON l.account_id = a.account_id \
                    AND l.account_seq = (SELECT MAX(x.account_seq) FROM account_limits x \
                      WHERE x.account_id = a.account_id) \
                  WHERE NOT (a.min_balance <=> l.min_balance AND a.max_balance <=> l.max_balance)"
                .into(),
        },
    ]
}

/// Time along each journal (SPEC 3.10): a balance at a time is found by a binary
/// search over the account's entries, which is only right while their times
/// never go backwards; and every later entry is stamped at or after the
/// account's `stamped_at`, which must be at or after its last entry.
fn time_checks() -> Vec<SetCheck> {
    vec![
        SetCheck {
            name: "each account's entries are stamped in the order of its journal",
            sql: "SELECT CONCAT('entry ', f.entry_id, ' of account ', f.account_id, ' at ', \
                  f.created_at, ' is stamped before entry ', e.entry_id, ' at ', e.created_at, \
                  ' before it') AS detail \
                  FROM entries e JOIN entries f \
                    ON f.account_id = e.account_id AND f.account_seq = e.account_seq + 1 \
                  WHERE f.created_at < e.created_at"
                .into(),
        },
        SetCheck {
            name: "each account's time is at or after its last entry and its opening",
            sql: "SELECT CONCAT('account ', a.account_id, ' is stamped to ', a.stamped_at, \
                  ', before its last entry or its opening') AS detail \
                  FROM accounts a LEFT JOIN entries e \
                    ON e.account_id = a.account_id AND e.account_seq = a.entry_count \
                  WHERE a.stamped_at < a.created_at OR a.stamped_at < e.created_at"
                .into(),
        },
    ]
}

/// Metadata (SPEC 3.11): stored once per call, under its key, so every entry of
/// one operation shows the same pairs by construction; what is left to check is
/// that only calls that took effect carry any, and that every pair is one the
/// contract allows.
fn metadata_checks() -> Vec<SetCheck> {
    let owner = |table: &str| {
        format!(
            "EXISTS (SELECT 1 FROM {table} x WHERE x.namespace = m.namespace \
             AND x.idempotency_key = m.idempotency_key)"
        )
    };
    vec![SetCheck {
        name: "metadata belongs to calls that took effect, and every pair is one the contract allows",
        sql: format!(
            "SELECT CONCAT('key ', HEX(m.idempotency_key), ' (namespace ', HEX(m.namespace), \
             ') carries metadata but wrote nothing') AS detail FROM metadata m \
             WHERE NOT {} AND NOT {} AND NOT {} \
             UNION ALL \
             SELECT CONCAT('key ', HEX(m.idempotency_key), ' (namespace ', HEX(m.namespace), \
               ') has metadata but no pair to search by') AS detail FROM metadata m \
             WHERE NOT EXISTS (SELECT 1 FROM metadata_pairs p WHERE p.namespace = m.namespace \
               AND p.idempotency_key = m.idempotency_key) \
             UNION ALL \
             SELECT CONCAT('key ', HEX(p.idempotency_key), ' (namespace ', HEX(p.namespace), \
               ') has the pair ', HEX(p.name), '=', LEFT(HEX(p.value), 40), \
               IF(m.idempotency_key IS NULL, ' but no metadata', ', which is not allowed')) AS detail \
             FROM metadata_pairs p LEFT JOIN metadata m \
               ON m.namespace = p.namespace AND m.idempotency_key = p.idempotency_key \
             WHERE m.idempotency_key IS NULL \
               OR CONVERT(p.name USING ascii) NOT REGEXP '^[A-Za-z0-9_.-]{{1,{max_key}}}$' \
               OR CHAR_LENGTH(CONVERT(p.value USING utf8mb4)) > {max_value}",
            owner("entries"),
            owner("holds"),
            owner("accounts"),
            max_key = crate::ledger::metadata::MAX_KEY_LEN,
            max_value = crate::ledger::metadata::MAX_VALUE_CHARS,
        ),
    }]
}

/// Keys and what they wrote.
fn key_checks() -> Vec<SetCheck> {
    vec![
        SetCheck {
            name: "every entry has its key, unless retention purged it",
            // A key row is written in the same transaction as its entries, and no
            // transaction outlives the slack, so an entry made after the purge's
            // cutoff plus the slack had a key row younger than the cutoff.
            sql: "SELECT CONCAT('entry ', e.entry_id, ' has no key row') AS detail \
                  FROM entries e LEFT JOIN idempotency_keys k \
                    ON k.namespace = e.namespace AND k.idempotency_key = e.idempotency_key \
                  WHERE k.idempotency_key IS NULL AND e.created_at >= COALESCE( \
                    (SELECT at + INTERVAL 10 MINUTE FROM ledger_marks \
                     WHERE name = 'keys-purged-before'), '1000-01-01')"
                .into(),
        },
        SetCheck {
            name: "every key has an outcome",
            sql: "SELECT CONCAT('key ', HEX(idempotency_key), ' (namespace ', HEX(namespace), \
                  ') has no outcome') AS detail \
                  FROM idempotency_keys WHERE outcome IS NULL OR outcome_code IS NULL"
                .into(),
        },
        SetCheck {
            name: "a successful call has exactly its method's entries, and nothing else has any",
            sql: format!(
                "SELECT CONCAT('key ', HEX(k.idempotency_key), ' (namespace ', HEX(k.namespace), \
                 ', method ', k.method, ', outcome ', COALESCE(k.outcome_code, 'none'), ') has entries of kinds [', \
                 COALESCE(GROUP_CONCAT(e.kind ORDER BY e.leg), ''), ']') AS detail \
                 FROM idempotency_keys k LEFT JOIN entries e \
                   ON e.namespace = k.namespace AND e.idempotency_key = k.idempotency_key \
                 GROUP BY k.namespace, k.idempotency_key, k.method, k.outcome_code \
                 HAVING NOT (CASE WHEN k.outcome_code = 0 THEN {} \
                   ELSE COUNT(e.entry_id) = 0 END)",
                has_its_entries(
                    "k.method",
                    "COALESCE(GROUP_CONCAT(e.kind ORDER BY e.leg), '')"
                )
            ),
        },
        SetCheck {
            name: "a call's entries take consecutive places, and a post's legs consecutive numbers",
            sql: "SELECT CONCAT('key ', HEX(idempotency_key), ' (namespace ', HEX(namespace), \
                  '): places ', MIN(leg), '..', MAX(leg), ' of ', COUNT(*), ' entries') AS detail \
                  FROM entries GROUP BY namespace, idempotency_key \
                  HAVING MIN(leg) <> 0 OR MAX(leg) <> COUNT(*) - 1 \
                    OR SUM(post_leg <> leg DIV 2 AND reverses_entry_id IS NULL) > 0"
                .into(),
        },
    ]
}

/// Reversals (SPEC 3.12): each entry mirrors the one it names, and no
/// operation is reversed twice.
fn reversal_checks() -> Vec<SetCheck> {
    let mirrored = format!(
        "{} = -{}",
        signed("r.kind", "r.amount"),
        signed("o.kind", "o.amount")
    );
    vec![
        SetCheck {
            name: "each reversal entry mirrors the entry it names (account, amount, opposite direction)",
            sql: format!(
                "SELECT CONCAT('reversal entry ', r.entry_id, ' of entry ', r.reverses_entry_id) AS detail \
                 FROM entries r LEFT JOIN entries o ON o.entry_id = r.reverses_entry_id \
                 WHERE r.reverses_entry_id IS NOT NULL AND (o.entry_id IS NULL \
                   OR o.account_id <> r.account_id OR o.currency <> r.currency \
                   OR NOT ({mirrored}) OR o.reverses_entry_id IS NOT NULL \
                   OR o.post_leg <> r.post_leg)"
            ),
        },
        SetCheck {
            name: "no operation is reversed twice, and each reversal is recorded once",
            sql: "SELECT CONCAT('operation ', HEX(o.idempotency_key), ' (namespace ', HEX(o.namespace), \
                  '): ', COUNT(DISTINCT r.idempotency_key), ' reversals, ', COUNT(*), ' reversal entries, ', \
                  COUNT(DISTINCT o.entry_id), ' entries reversed') AS detail \
                  FROM entries r JOIN entries o ON o.entry_id = r.reverses_entry_id \
                  LEFT JOIN reversals v ON v.namespace = o.namespace AND v.original_key = o.idempotency_key \
                  GROUP BY o.namespace, o.idempotency_key \
                  HAVING COUNT(DISTINCT r.idempotency_key) <> 1 OR COUNT(*) <> COUNT(DISTINCT o.entry_id) \
                    OR COUNT(*) <> (SELECT COUNT(*) FROM entries x WHERE x.namespace = o.namespace \
                      AND x.idempotency_key = o.idempotency_key) \
                    OR SUM(v.reversal_key IS NULL OR v.reversal_key <> r.idempotency_key) > 0"
                .into(),
        },
    ]
}

/// Transfers, refunds, and money per currency.
fn movement_checks() -> Vec<SetCheck> {
    let journal = signed("e.kind", "e.amount");
    let transfers = codes(EntryKind::iter().filter(|k| !k.crosses_the_ledger()));
    let crossing = codes(EntryKind::iter().filter(|k| k.crosses_the_ledger()));
    let refundable = codes(EntryKind::iter().filter(|k| k.refundable()));
    let out = EntryKind::TransferOut.code();
    let into = EntryKind::TransferIn.code();
    let refund = EntryKind::Refund.code();
    vec![
        SetCheck {
            name: "each transfer's, and each post leg's, two entries match",
            sql: format!(
                "SELECT CONCAT('transfer entries ', o.entry_id, ' and ', COALESCE(i.entry_id, 'none')) AS detail \
                 FROM entries o LEFT JOIN entries i ON i.namespace = o.namespace \
                   AND i.idempotency_key = o.idempotency_key AND i.leg = o.leg + 1 \
                   AND i.kind = {into} \
                 WHERE o.kind = {out} AND (i.entry_id IS NULL OR i.amount <> o.amount \
                   OR i.currency <> o.currency OR i.account_id <> o.counterparty_account_id \
                   OR o.account_id <> i.counterparty_account_id OR i.account_id = o.account_id)"
            ),
        },
        SetCheck {
            name: "refunds never exceed their entry, and each entry counts its refunds",
            sql: format!(
                "SELECT CONCAT('entry ', c.entry_id, ' (', c.amount, ', kind ', c.kind, '): refunded ', \
                 c.refunded, ', refund entries ', COALESCE(SUM(r.amount), 0)) AS detail \
                 FROM entries c LEFT JOIN entries r ON r.refunded_entry_id = c.entry_id AND r.kind = {refund} \
                 GROUP BY c.entry_id, c.amount, c.kind, c.refunded \
                 HAVING c.refunded <> COALESCE(SUM(r.amount), 0) OR c.refunded > c.amount \
                   OR (c.refunded > 0 AND c.kind NOT IN ({refundable}))"
            ),
        },
        SetCheck {
            name: "a refund credits the account of the entry it refunds",
            sql: format!(
                "SELECT CONCAT('refund ', r.entry_id, ' of entry ', COALESCE(r.refunded_entry_id, 'none')) AS detail \
                 FROM entries r LEFT JOIN entries c ON c.entry_id = r.refunded_entry_id \
                 WHERE r.kind = {refund} AND (c.entry_id IS NULL OR c.account_id <> r.account_id)"
            ),
        },
        SetCheck {
            name: "per currency, balances equal credits and refunds less charges and captures; transfers net to zero",
            sql: format!(
                "SELECT CONCAT(b.currency, ': balances ', b.total, ', money in less out ', \
                 COALESCE(j.crossing, 0), ', transfers ', COALESCE(j.transfers, 0)) AS detail \
                 FROM (SELECT currency, SUM(balance) AS total FROM accounts GROUP BY currency) b \
                 LEFT JOIN (SELECT e.currency, \
                     SUM(CASE WHEN e.kind IN ({crossing}) THEN {journal} ELSE 0 END) AS crossing, \
                     SUM(CASE WHEN e.kind IN ({transfers}) THEN {journal} ELSE 0 END) AS transfers \
                   FROM entries e GROUP BY e.currency) j ON j.currency = b.currency \
                 WHERE b.total <> COALESCE(j.crossing, 0) OR COALESCE(j.transfers, 0) <> 0"
            ),
        },
    ]
}

/// Holds and their captures.
fn hold_checks() -> Vec<SetCheck> {
    let held = HoldState::Held.code();
    let captured = HoldState::Captured.code();
    let capture = EntryKind::Capture.code();
    vec![
        SetCheck {
            name: "held equals the sum of held holds",
            sql: format!(
                "SELECT CONCAT('account ', a.account_id, ': held ', a.held, ', holds ', \
                 COALESCE(SUM(h.amount), 0)) AS detail \
                 FROM accounts a LEFT JOIN holds h ON h.account_id = a.account_id AND h.state = {held} \
                 GROUP BY a.account_id, a.held HAVING a.held <> COALESCE(SUM(h.amount), 0)"
            ),
        },
        SetCheck {
            name: "a captured hold has one capture entry of what it took, within its amount; no other hold has any",
            sql: format!(
                "SELECT CONCAT('hold ', h.hold_id, ' (state ', h.state, ', amount ', h.amount, \
                 ', captured ', h.captured_amount, '): ', COUNT(e.entry_id), ' capture entries of ', \
                 COALESCE(SUM(e.amount), 0)) AS detail \
                 FROM holds h LEFT JOIN entries e ON e.hold_id = h.hold_id AND e.kind = {capture} \
                   AND e.account_id = h.account_id \
                 GROUP BY h.hold_id, h.state, h.amount, h.captured_amount \
                 HAVING CASE WHEN h.state = {captured} \
                   THEN COUNT(e.entry_id) <> 1 OR SUM(e.amount) <> h.captured_amount OR h.captured_amount > h.amount \
                   ELSE COUNT(e.entry_id) <> 0 OR h.captured_amount <> 0 END"
            ),
        },
        SetCheck {
            name: "every capture entry captures a hold of its account",
            sql: format!(
                "SELECT CONCAT('entry ', e.entry_id, ' captures hold ', COALESCE(e.hold_id, 'none')) AS detail \
                 FROM entries e LEFT JOIN holds h ON h.hold_id = e.hold_id \
                 WHERE e.kind = {capture} AND (h.hold_id IS NULL OR h.account_id <> e.account_id \
                   OR h.state <> {captured})"
            ),
        },
    ]
}

/// How long after its commit an entry may still lack its sequence: the
/// assigner numbers it within milliseconds, or, when the assigner died, once
/// another instance takes the lease (seconds). Longer means no instance
/// assigns.
pub const SEQUENCE_LAG_BOUND_SECS: u32 = 60;

/// The change stream (SPEC 3.8): its numbers and the order they give. An
/// entry's sequence is its commit's first plus its place in the commit.
fn stream_checks() -> Vec<SetCheck> {
    const SEQUENCE: &str = "c.first_sequence + e.commit_pos";
    vec![
        SetCheck {
            name: "sequences run 1, 2, 3, ... without a hole, and the next is the one after",
            sql: "SELECT CONCAT('commit ', commit_id, ' numbered from ', first_sequence, \
                  ', not ', expected) AS detail \
                  FROM (SELECT commit_id, first_sequence, \
                    COALESCE(LAG(first_sequence + entry_count) OVER (ORDER BY first_sequence), 1) \
                      AS expected \
                    FROM stream_commits WHERE first_sequence IS NOT NULL) s \
                  WHERE first_sequence <> expected \
                  UNION ALL \
                  SELECT CONCAT('next_sequence ', COALESCE(nx, 'none'), ' after numbers up to ', \
                    hi - 1) AS detail \
                  FROM (SELECT (SELECT next_sequence FROM ledger_stream WHERE id = 1) AS nx, \
                    (SELECT COALESCE(MAX(first_sequence + entry_count), 1) FROM stream_commits \
                      WHERE first_sequence IS NOT NULL) AS hi) t \
                  WHERE NOT (nx <=> hi)"
                .into(),
        },
        SetCheck {
            name: "each commit holds its entries at places 0, 1, 2, ..., and every entry has its commit",
            sql: "SELECT CONCAT('commit ', c.commit_id, ' of ', c.entry_count, ' entries has ', \
                  COUNT(e.entry_id), ' at places ', COALESCE(MIN(e.commit_pos), 'none'), '..', \
                  COALESCE(MAX(e.commit_pos), 'none')) AS detail \
                  FROM stream_commits c LEFT JOIN entries e ON e.commit_id = c.commit_id \
                  GROUP BY c.commit_id, c.entry_count \
                  HAVING COUNT(e.entry_id) <> c.entry_count OR MIN(e.commit_pos) <> 0 \
                    OR MAX(e.commit_pos) <> c.entry_count - 1 \
                  UNION ALL \
                  SELECT CONCAT('entry ', e.entry_id, ' names commit ', e.commit_id, \
                    ', which does not exist') AS detail \
                  FROM entries e LEFT JOIN stream_commits c ON c.commit_id = e.commit_id \
                  WHERE c.commit_id IS NULL"
                .into(),
        },
        SetCheck {
            name: "each commit lists the accounts it wrote to, with their places in each journal",
            // What the assigner orders commits by.
            sql: "SELECT CONCAT('commit ', s.commit_id, ' wrote places ', s.lo, '..', s.hi, \
                  ' of account ', s.account_id, ' (', s.n, ' entries), but lists ', \
                  c.accounts) AS detail \
                  FROM (SELECT commit_id, account_id, MIN(account_seq) AS lo, \
                    MAX(account_seq) AS hi, COUNT(*) AS n \
                    FROM entries GROUP BY commit_id, account_id) s \
                  JOIN stream_commits c ON c.commit_id = s.commit_id \
                  WHERE FIND_IN_SET(CONCAT(s.account_id, ':', s.lo, ':', s.hi), c.accounts) = 0 \
                    OR s.hi - s.lo + 1 <> s.n \
                  UNION ALL \
                  SELECT CONCAT('commit ', c.commit_id, ' wrote to ', a.n, ' accounts, but lists ', \
                    c.accounts) AS detail \
                  FROM stream_commits c JOIN (SELECT commit_id, COUNT(DISTINCT account_id) AS n \
                    FROM entries GROUP BY commit_id) a ON a.commit_id = c.commit_id \
                  WHERE LENGTH(c.accounts) - LENGTH(REPLACE(c.accounts, ',', '')) + 1 <> a.n"
                .into(),
        },
        SetCheck {
            name: "each account's entries are numbered in the order they were applied",
            sql:                 "SELECT CONCAT('account ', a.account_id, ': entry ', a.account_seq, ' numbered ', \
                 COALESCE(ca.first_sequence + a.commit_pos, 'none'), ', entry ', b.account_seq, \
                 ' numbered ', COALESCE(cb.first_sequence + b.commit_pos, 'none')) AS detail \
                 FROM entries a JOIN entries b \
                   ON b.account_id = a.account_id AND b.account_seq = a.account_seq + 1 \
                 JOIN stream_commits ca ON ca.commit_id = a.commit_id \
                 JOIN stream_commits cb ON cb.commit_id = b.commit_id \
                 WHERE cb.first_sequence + b.commit_pos < ca.first_sequence + a.commit_pos \
                   OR (ca.first_sequence IS NULL AND cb.first_sequence IS NOT NULL) \
                   OR (a.commit_id = b.commit_id AND b.commit_pos < a.commit_pos)"
                .into()
        },
        SetCheck {
            name: "an operation's entries are numbered together, consecutively, in leg order",
            // Its legs are 0, 1, 2, ... (checked above): in one commit, at
            // places in leg order with no other entry between them, every place
            // less its leg is the same.
            sql: format!(
                "SELECT CONCAT('key ', HEX(e.idempotency_key), ' (namespace ', HEX(e.namespace), \
                 '): ', COUNT(*), ' entries in ', COUNT(DISTINCT e.commit_id), ' commits, numbered ', \
                 COALESCE(GROUP_CONCAT({SEQUENCE} ORDER BY e.leg), 'none')) AS detail \
                 FROM entries e LEFT JOIN stream_commits c ON c.commit_id = e.commit_id \
                 GROUP BY e.namespace, e.idempotency_key \
                 HAVING COUNT(DISTINCT e.commit_id) <> 1 \
                   OR MAX(CAST(e.commit_pos AS SIGNED) - CAST(e.leg AS SIGNED)) \
                     <> MIN(CAST(e.commit_pos AS SIGNED) - CAST(e.leg AS SIGNED))"
            ),
        },
        SetCheck {
            name: "every entry older than the lag bound has a sequence",
            sql: format!(
                "SELECT CONCAT('commit ', commit_id, ' of ', created_at, ' (', entry_count, \
                 ' entries) has no sequence') AS detail \
                 FROM stream_commits WHERE first_sequence IS NULL \
                   AND created_at < UTC_TIMESTAMP(6) - INTERVAL {SEQUENCE_LAG_BOUND_SECS} SECOND"
            ),
        },
    ]
}

#[derive(QueryableByName)]
struct Detail {
    #[diesel(sql_type = Text)]
    detail: String,
}

/// A key row, with the entries and the hold written under its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredKey {
    pub namespace: Vec<u8>,
    pub idempotency_key: Vec<u8>,
    pub method: u8,
    pub outcome_code: Option<i32>,
    pub outcome: Option<Vec<u8>>,
    /// In leg order.
    pub entries: Vec<EntryFacts>,
    /// The hold placed under the key.
    pub hold: Option<(u64, i64)>,
}

/// What an entry's reply must agree with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryFacts {
    pub entry_id: u64,
    pub account_id: u64,
    pub kind: u8,
    pub amount: i64,
    pub balance_after: i64,
}

#[derive(Debug, QueryableByName)]
struct KeyEffectRow {
    #[diesel(sql_type = Binary)]
    namespace: Vec<u8>,
    #[diesel(sql_type = Binary)]
    idempotency_key: Vec<u8>,
    #[diesel(sql_type = Unsigned<TinyInt>)]
    method: u8,
    #[diesel(sql_type = Nullable<Integer>)]
    outcome_code: Option<i32>,
    #[diesel(sql_type = Nullable<Binary>)]
    outcome: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    entry_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    account_id: Option<u64>,
    #[diesel(sql_type = Nullable<Unsigned<TinyInt>>)]
    kind: Option<u8>,
    #[diesel(sql_type = Nullable<BigInt>)]
    amount: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    balance_after: Option<i64>,
    #[diesel(sql_type = Nullable<Unsigned<BigInt>>)]
    hold_id: Option<u64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    hold_amount: Option<i64>,
}

/// Counts for the summary of a clean audit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub accounts: u64,
    pub entries: u64,
    pub holds: u64,
    pub keys: u64,
}

#[derive(QueryableByName)]
struct SizesRow {
    #[diesel(sql_type = BigInt)]
    accounts: i64,
    #[diesel(sql_type = BigInt)]
    entries: i64,
    #[diesel(sql_type = BigInt)]
    holds: i64,
    #[diesel(sql_type = BigInt)]
    keys: i64,
}

/// Runs every check inside one consistent snapshot. `inspect` judges each stored
/// outcome (decoding is the wire layer's knowledge) and returns its violation.
pub async fn run(
    conn: &mut Conn,
    mut inspect: impl FnMut(&StoredKey) -> Option<String>,
) -> diesel::QueryResult<(Sizes, Vec<Violation>)> {
    // A post's entries, listed by GROUP_CONCAT, outgrow its default 1,024 bytes.
    conn.batch_execute(
        "SET SESSION group_concat_max_len = 1048576; \
         START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    )
    .await?;
    let result = async {
        let mut violations = Vec::new();
        for check in set_checks() {
            let sql = format!("{} LIMIT {MAX_REPORTED}", check.sql);
            let rows: Vec<Detail> = diesel::sql_query(sql).load(conn).await?;
            violations.extend(rows.into_iter().map(|r| Violation {
                check: check.name,
                detail: r.detail,
            }));
        }
        violations.extend(inspect_outcomes(conn, &mut inspect).await?);
        let sizes = sizes(conn).await?;
        Ok((sizes, violations))
    }
    .await;
    conn.batch_execute("ROLLBACK").await?;
    result
}

/// Streams every key row with what was written under its key through `inspect`,
/// one key at a time.
async fn inspect_outcomes(
    conn: &mut Conn,
    inspect: &mut impl FnMut(&StoredKey) -> Option<String>,
) -> diesel::QueryResult<Vec<Violation>> {
    let query = diesel::sql_query(
        "SELECT k.namespace, k.idempotency_key, k.method, k.outcome_code, k.outcome, \
         e.entry_id, e.account_id, e.kind, e.amount, e.balance_after, \
         h.hold_id, h.amount AS hold_amount \
         FROM idempotency_keys k \
         LEFT JOIN entries e ON e.namespace = k.namespace AND e.idempotency_key = k.idempotency_key \
         LEFT JOIN holds h ON h.namespace = k.namespace AND h.idempotency_key = k.idempotency_key \
         ORDER BY k.namespace, k.idempotency_key, e.leg",
    );
    let mut rows = std::pin::pin!(query.load_stream::<KeyEffectRow>(conn).await?);
    let mut violations = Vec::new();
    let mut judge = |key: &StoredKey| {
        if let Some(detail) = inspect(key)
            && violations.len() < MAX_REPORTED
        {
            violations.push(Violation {
                check: "every stored outcome decodes and matches what its key wrote",
                detail,
            });
        }
    };
    let mut current: Option<StoredKey> = None;
    while let Some(row) = rows.try_next().await? {
        let same = current.as_ref().is_some_and(|c| {
            c.namespace == row.namespace && c.idempotency_key == row.idempotency_key
        });
        if !same {
            if let Some(done) = current.take() {
                judge(&done);
            }
            current = Some(StoredKey {
                namespace: row.namespace,
                idempotency_key: row.idempotency_key,
                method: row.method,
                outcome_code: row.outcome_code,
                outcome: row.outcome,
                entries: Vec::new(),
                hold: row.hold_id.zip(row.hold_amount),
            });
        }
        if let (
            Some(key),
            Some(entry_id),
            Some(account_id),
            Some(kind),
            Some(amount),
            Some(balance_after),
        ) = (
            current.as_mut(),
            row.entry_id,
            row.account_id,
            row.kind,
            row.amount,
            row.balance_after,
        ) {
            key.entries.push(EntryFacts {
                entry_id,
                account_id,
                kind,
                amount,
                balance_after,
            });
        }
    }
    if let Some(done) = current.take() {
        judge(&done);
    }
    Ok(violations)
}

async fn sizes(conn: &mut Conn) -> diesel::QueryResult<Sizes> {
    let row: SizesRow = diesel::sql_query(
        "SELECT (SELECT COUNT(*) FROM accounts) AS accounts, \
         (SELECT COUNT(*) FROM entries) AS entries, \
         (SELECT COUNT(*) FROM holds) AS holds, \
         (SELECT COUNT(*) FROM idempotency_keys) AS `keys`",
    )
    .get_result(conn)
    .await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(Sizes {
        accounts: count(row.accounts),
        entries: count(row.entries),
        holds: count(row.holds),
        keys: count(row.keys),
    })
}
