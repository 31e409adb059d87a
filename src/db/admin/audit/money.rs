//! Money: every balance follows from its journal, within the limits in force;
//! movements add up; holds reserve what they say.

use strum::IntoEnumIterator as _;

use super::check::{SetCheck, codes, signed};
use crate::ledger::{EntryKind, HoldState};

/// Balances and the journal: every balance follows from its entries.
pub(super) fn journal_checks() -> Vec<SetCheck> {
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
pub(super) fn limits_checks() -> Vec<SetCheck> {
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

/// Transfers, refunds, and money per currency.
pub(super) fn movement_checks() -> Vec<SetCheck> {
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
pub(super) fn hold_checks() -> Vec<SetCheck> {
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
