//! Keys: every key's outcome and what was written under it, its metadata,
//! and the reversals of what it did.

use super::check::{SetCheck, has_its_entries, signed};

/// Keys and what they wrote.
pub(super) fn key_checks() -> Vec<SetCheck> {
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

/// Metadata (SPEC 3.11): stored once per call, under its key, so every entry of
/// one operation shows the same pairs by construction; what is left to check is
/// that only calls that took effect carry any, and that every pair is one the
/// contract allows.
pub(super) fn metadata_checks() -> Vec<SetCheck> {
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

/// Reversals (SPEC 3.12): each entry mirrors the one it names, and no
/// operation is reversed twice.
pub(super) fn reversal_checks() -> Vec<SetCheck> {
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
