//! The change stream (SPEC 3.8): its numbers and the order they give, and the
//! journal's times.

use super::check::SetCheck;

/// How long after its commit an entry may still lack its sequence: the
/// assigner numbers it within milliseconds, or, when the assigner died, once
/// another instance takes the lease (seconds). Longer means no instance
/// assigns.
pub const SEQUENCE_LAG_BOUND_SECS: u32 = 60;

/// Time along each journal (SPEC 3.10): a balance at a time is found by a binary
/// search over the account's entries, which is only right while their times
/// never go backwards; and every later entry is stamped at or after the
/// account's `stamped_at`, which must be at or after its last entry.
pub(super) fn time_checks() -> Vec<SetCheck> {
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

/// The change stream's numbers (SPEC 3.8): without a hole, each commit's
/// entries at their places, each commit listing the journal places it took. An
/// entry's sequence is its commit's first plus its place in the commit.
pub(super) fn numbering_checks() -> Vec<SetCheck> {
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
    ]
}

/// The change stream's order: each account's entries in the order they were
/// applied, each operation's together, and none left unnumbered for long.
pub(super) fn order_checks() -> Vec<SetCheck> {
    const SEQUENCE: &str = "c.first_sequence + e.commit_pos";
    vec![
        SetCheck {
            name: "each account's entries are numbered in the order they were applied",
            sql:
                "SELECT CONCAT('account ', a.account_id, ': entry ', a.account_seq, ' numbered ', \
                 COALESCE(ca.first_sequence + a.commit_pos, 'none'), ', entry ', b.account_seq, \
                 ' numbered ', COALESCE(cb.first_sequence + b.commit_pos, 'none')) AS detail \
                 FROM entries a JOIN entries b \
                   ON b.account_id = a.account_id AND b.account_seq = a.account_seq + 1 \
                 JOIN stream_commits ca ON ca.commit_id = a.commit_id \
                 JOIN stream_commits cb ON cb.commit_id = b.commit_id \
                 WHERE cb.first_sequence + b.commit_pos < ca.first_sequence + a.commit_pos \
                   OR (ca.first_sequence IS NULL AND cb.first_sequence IS NOT NULL) \
                   OR (a.commit_id = b.commit_id AND b.commit_pos < a.commit_pos)"
                    .into(),
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

/// The search index (`search_entries`, SPEC 3.11) against the journal and the
/// pairs: up to where it claims to reach (`search_index`), every numbered
/// entry has one row per pair of its call, at its sequence and account, and
/// no row names anything else. A search reads only the index, so an entry it
/// lacks would be found by no search.
pub(super) fn search_index_checks() -> Vec<SetCheck> {
    vec![
        SetCheck {
            name: "every numbered entry the search index reaches is indexed by each pair of its call",
            sql: "SELECT CONCAT('entry ', e.entry_id, ' (sequence ', \
                  c.first_sequence + e.commit_pos, ') is not indexed by its pair ', HEX(p.name), \
                  '=', LEFT(HEX(p.value), 40)) AS detail \
                  FROM metadata_pairs p \
                  JOIN entries e ON e.namespace = p.namespace \
                    AND e.idempotency_key = p.idempotency_key \
                  JOIN stream_commits c ON c.commit_id = e.commit_id \
                  JOIN search_index i ON i.id = 1 \
                  WHERE c.first_sequence + e.commit_pos < i.next_sequence \
                  AND NOT EXISTS (SELECT 1 FROM search_entries s WHERE s.name = p.name \
                    AND s.value = p.value AND s.sequence = c.first_sequence + e.commit_pos \
                    AND s.entry_id = e.entry_id AND s.account_id = e.account_id)"
                .into(),
        },
        SetCheck {
            name: "every row of the search index is a numbered entry's and a pair of its call",
            sql: "SELECT CONCAT('the search index has entry ', s.entry_id, ' at sequence ', \
                  s.sequence, ' of account ', s.account_id, ' by ', HEX(s.name), '=', \
                  LEFT(HEX(s.value), 40), ', which the journal does not') AS detail \
                  FROM search_entries s \
                  LEFT JOIN entries e ON e.entry_id = s.entry_id \
                  LEFT JOIN stream_commits c ON c.commit_id = e.commit_id \
                  WHERE e.entry_id IS NULL OR c.first_sequence IS NULL \
                  OR c.first_sequence + e.commit_pos <> s.sequence \
                  OR e.account_id <> s.account_id \
                  OR NOT EXISTS (SELECT 1 FROM metadata_pairs p WHERE p.name = s.name \
                    AND p.value = s.value AND p.namespace = e.namespace \
                    AND p.idempotency_key = e.idempotency_key)"
                .into(),
        },
    ]
}
