//! The order of one round: which of the unnumbered entries it read get their
//! sequences now, and in what order. A pure function of the rows, so its rules
//! are tested without a database:
//!
//! - an operation's entries (one key's: a transfer's two, a post's legs) are
//!   numbered together, in `leg` order;
//! - an account's entries are numbered in the order they were applied
//!   (`account_seq`): its chain within the round orders the operations, and an
//!   operation waits for the ones before it on each of its accounts (Kahn's
//!   topological sort; ties by the operation's earliest `created_at`, then its
//!   lowest `entry_id`);
//! - an operation that may be incomplete or early waits for a later round, and
//!   so does every operation after it on any account: one whose instant is the
//!   last the round read when the read was cut by its limit (its other entries
//!   may be past the cut), and one on an account whose entry before the round's
//!   first is not numbered (it may be past the cut too), or whose chain within the
//!   round has a gap.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use chrono::NaiveDateTime;

/// An entry without a sequence, as a round reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unnumbered {
    pub(crate) entry_id: u64,
    pub(crate) account_id: u64,
    pub(crate) account_seq: u64,
    pub(crate) namespace: Vec<u8>,
    pub(crate) idempotency_key: Vec<u8>,
    pub(crate) leg: u64,
    pub(crate) created_at: NaiveDateTime,
}

/// What a round numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Indexes into the rows, in the order of their new sequences.
    pub(crate) order: Vec<usize>,
    /// Rows left for a later round.
    pub(crate) held_back: usize,
}

/// For each account of `rows` whose first entry in them is not its first ever,
/// that entry's predecessor `(account_id, account_seq - 1)`: the round numbers
/// the account's entries only if it is numbered already.
pub(crate) fn predecessors(rows: &[Unnumbered]) -> Vec<(u64, u64)> {
    let mut first: BTreeMap<u64, u64> = BTreeMap::new();
    for row in rows {
        let seq = first.entry(row.account_id).or_insert(row.account_seq);
        *seq = (*seq).min(row.account_seq);
    }
    first
        .into_iter()
        .filter(|(_, seq)| *seq > 1)
        .map(|(account, seq)| (account, seq - 1))
        .collect()
}

struct Operation {
    /// Its rows, by index.
    rows: Vec<usize>,
    /// Its earliest instant and lowest id: the tie-break among ready operations.
    rank: (NaiveDateTime, u64),
    latest: NaiveDateTime,
    /// The operations that follow it on one of its accounts.
    after: Vec<usize>,
    /// How many operations before it are not yet ordered.
    waits_for: usize,
    /// Left for a later round.
    held: bool,
}

/// A row of the round with its operation.
struct Placed<'r> {
    row: &'r Unnumbered,
    op: usize,
}

/// Orders `rows`. `cut_at`: the instant of the last row read, when the read
/// stopped at its limit; `unnumbered_before`: the accounts whose predecessor
/// (see [`predecessors`]) is not numbered.
pub(crate) fn plan(
    rows: &[Unnumbered],
    cut_at: Option<NaiveDateTime>,
    unnumbered_before: &HashSet<u64>,
) -> Plan {
    let (mut ops, placed) = operations(rows);
    let mut blocked: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| cut_at.is_some_and(|cut| op.latest >= cut))
        .map(|(n, _)| n)
        .collect();
    for (account, chain) in chains(&placed) {
        if unnumbered_before.contains(&account)
            && let Some(first) = chain.first()
        {
            blocked.push(first.op);
        }
        for pair in chain.windows(2) {
            let [earlier, later] = pair else { continue };
            if later.row.account_seq != earlier.row.account_seq + 1 {
                blocked.push(later.op);
            }
            if earlier.op == later.op {
                continue;
            }
            if let Some(op) = ops.get_mut(earlier.op)
                && !op.after.contains(&later.op)
            {
                op.after.push(later.op);
                if let Some(next) = ops.get_mut(later.op) {
                    next.waits_for += 1;
                }
            }
        }
    }
    hold(&mut ops, blocked);
    let mut ready: BinaryHeap<Reverse<((NaiveDateTime, u64), usize)>> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.waits_for == 0 && !op.held)
        .map(|(n, op)| Reverse((op.rank, n)))
        .collect();
    let mut order = Vec::with_capacity(rows.len());
    while let Some(Reverse((_, n))) = ready.pop() {
        let Some(op) = ops.get(n) else { continue };
        let mut legs = op.rows.clone();
        legs.sort_by_key(|&r| rows.get(r).map(|row| (row.leg, row.entry_id)));
        order.extend(legs);
        for next in op.after.clone() {
            if let Some(op) = ops.get_mut(next) {
                op.waits_for -= 1;
                if op.waits_for == 0 && !op.held {
                    ready.push(Reverse((op.rank, next)));
                }
            }
        }
    }
    // Operations in a cycle (impossible for entries written under their
    // accounts' locks) are never ready, and wait like the held ones.
    Plan {
        held_back: rows.len() - order.len(),
        order,
    }
}

/// The rows grouped by key into operations, and each row with its operation.
fn operations(rows: &[Unnumbered]) -> (Vec<Operation>, Vec<Placed<'_>>) {
    let mut by_key: HashMap<(&[u8], &[u8]), usize> = HashMap::new();
    let mut ops: Vec<Operation> = Vec::new();
    let mut placed = Vec::with_capacity(rows.len());
    for (r, row) in rows.iter().enumerate() {
        let key = (row.namespace.as_slice(), row.idempotency_key.as_slice());
        let n = *by_key.entry(key).or_insert_with(|| {
            ops.push(Operation {
                rows: Vec::new(),
                rank: (row.created_at, row.entry_id),
                latest: row.created_at,
                after: Vec::new(),
                waits_for: 0,
                held: false,
            });
            ops.len() - 1
        });
        if let Some(op) = ops.get_mut(n) {
            op.rows.push(r);
            op.rank = op.rank.min((row.created_at, row.entry_id));
            op.latest = op.latest.max(row.created_at);
        }
        placed.push(Placed { row, op: n });
    }
    (ops, placed)
}

/// Each account's rows, by `account_seq`.
fn chains<'p, 'r>(placed: &'p [Placed<'r>]) -> BTreeMap<u64, Vec<&'p Placed<'r>>> {
    let mut chains: BTreeMap<u64, Vec<&Placed<'_>>> = BTreeMap::new();
    for p in placed {
        chains.entry(p.row.account_id).or_default().push(p);
    }
    for chain in chains.values_mut() {
        chain.sort_by_key(|p| p.row.account_seq);
    }
    chains
}

/// Holds back `from` and every operation after one of them.
fn hold(ops: &mut [Operation], mut from: Vec<usize>) {
    while let Some(n) = from.pop() {
        if let Some(op) = ops.get_mut(n)
            && !std::mem::replace(&mut op.held, true)
        {
            from.extend(op.after.iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use proptest::prelude::*;

    use super::*;

    fn at(micros: i64) -> NaiveDateTime {
        chrono::DateTime::from_timestamp_micros(1_700_000_000_000_000 + micros)
            .unwrap()
            .naive_utc()
    }

    fn row(
        entry_id: u64,
        account_id: u64,
        account_seq: u64,
        key: &str,
        leg: u64,
        t: i64,
    ) -> Unnumbered {
        Unnumbered {
            entry_id,
            account_id,
            account_seq,
            namespace: Vec::new(),
            idempotency_key: key.as_bytes().to_vec(),
            leg,
            created_at: at(t),
        }
    }

    fn ids(rows: &[Unnumbered], plan: &Plan) -> Vec<u64> {
        plan.order.iter().map(|&r| rows[r].entry_id).collect()
    }

    #[test]
    fn ties_go_by_instant_then_id_and_legs_stay_together_in_order() {
        let rows = vec![
            row(9, 1, 1, "late", 0, 5),
            row(4, 2, 1, "post", 1, 3),
            row(3, 3, 1, "post", 0, 3),
            row(7, 4, 1, "early", 0, 1),
        ];
        let plan = plan(&rows, None, &HashSet::new());
        assert_eq!(ids(&rows, &plan), [7, 3, 4, 9]);
        assert_eq!(plan.held_back, 0);
    }

    #[test]
    fn an_account_keeps_its_journal_order_against_the_clock_and_the_ids() {
        // Account 1's second entry has the earlier instant and the lower id (a
        // clock that stepped back, ids from an older block): the chain wins, and
        // the transfer that wrote it waits with its other leg.
        let rows = vec![
            row(50, 1, 1, "first", 0, 10),
            row(20, 1, 2, "second", 0, 2),
            row(21, 2, 7, "second", 1, 2),
            row(30, 2, 8, "third", 0, 1),
        ];
        let plan = plan(&rows, None, &HashSet::new());
        assert_eq!(ids(&rows, &plan), [50, 20, 21, 30]);
    }

    #[test]
    fn a_cut_holds_back_the_last_instant_and_what_follows_it() {
        let rows = vec![
            row(1, 1, 1, "a", 0, 1),
            row(2, 2, 1, "b", 0, 2),
            row(3, 1, 2, "c", 0, 2),
            row(4, 3, 1, "d", 0, 1),
        ];
        // "b" and "c" are at the last instant read; nothing else follows them.
        let plan = plan(&rows, Some(at(2)), &HashSet::new());
        assert_eq!(ids(&rows, &plan), [1, 4]);
        assert_eq!(plan.held_back, 2);
    }

    #[test]
    fn an_unnumbered_predecessor_holds_back_the_account_and_everything_after_it() {
        let rows = vec![
            row(10, 1, 5, "x", 0, 1),
            row(11, 2, 3, "x", 1, 1),
            row(12, 2, 4, "y", 0, 2),
            row(13, 3, 9, "y", 1, 2),
            row(14, 4, 1, "z", 0, 3),
        ];
        assert_eq!(predecessors(&rows), [(1, 4), (2, 2), (3, 8)]);
        let plan = plan(&rows, None, &HashSet::from([1]));
        assert_eq!(ids(&rows, &plan), [14]);
        assert_eq!(plan.held_back, 4);
    }

    #[test]
    fn a_gap_in_a_chain_holds_back_from_the_gap() {
        let rows = vec![row(1, 1, 1, "a", 0, 1), row(3, 1, 3, "c", 0, 3)];
        let plan = plan(&rows, None, &HashSet::new());
        assert_eq!(ids(&rows, &plan), [1]);
    }

    /// A journal: operations in apply order, each on one to three accounts, with
    /// instants that may step back, ids not in apply order, and a cut.
    fn journal() -> impl Strategy<Value = (Vec<Unnumbered>, Vec<Vec<u64>>, bool)> {
        let op = (
            prop::collection::vec(0_u64..6, 1..4),
            -3_i64..4,
            any::<u32>(),
        );
        (prop::collection::vec(op, 1..40), any::<bool>()).prop_map(|(ops, cut)| {
            let mut seqs: HashMap<u64, u64> = HashMap::new();
            let mut rows = Vec::new();
            let mut applied = Vec::new();
            let mut t = 100;
            for (n, (accounts, step, salt)) in ops.into_iter().enumerate() {
                t += step;
                let mut ids = Vec::new();
                for (leg, account) in accounts.into_iter().enumerate() {
                    let seq = seqs.entry(account).or_insert(0);
                    *seq += 1;
                    let id = u64::from(salt % 1000) * 1000 + (n * 10 + leg) as u64;
                    ids.push(id);
                    rows.push(row(id, account, *seq, &format!("op{n}"), leg as u64, t));
                }
                applied.push(ids);
            }
            (rows, applied, cut)
        })
    }

    proptest! {
        #[test]
        fn every_plan_keeps_accounts_in_order_and_operations_whole(
            (rows, applied, cut) in journal()
        ) {
            let cut_at = cut.then(|| rows.iter().map(|r| r.created_at).max().unwrap());
            let plan = plan(&rows, cut_at, &HashSet::new());
            let place: HashMap<u64, usize> =
                ids(&rows, &plan).into_iter().enumerate().map(|(n, id)| (id, n)).collect();
            // Each operation: all numbered or none, consecutively, in leg order.
            for ids in &applied {
                let places: Vec<Option<usize>> = ids.iter().map(|id| place.get(id).copied()).collect();
                if places.iter().any(Option::is_some) {
                    let places: Vec<usize> = places.into_iter().map(Option::unwrap).collect();
                    let first = places[0];
                    prop_assert_eq!(places, (first..first + ids.len()).collect::<Vec<_>>());
                }
            }
            // Each account: a numbered prefix of its chain, in its order.
            let mut by_account: BTreeMap<u64, Vec<&Unnumbered>> = BTreeMap::new();
            for row in &rows {
                by_account.entry(row.account_id).or_default().push(row);
            }
            for chain in by_account.values_mut() {
                chain.sort_by_key(|r| r.account_seq);
                let places: Vec<Option<usize>> =
                    chain.iter().map(|r| place.get(&r.entry_id).copied()).collect();
                let numbered = places.iter().take_while(|p| p.is_some()).count();
                prop_assert!(places[numbered..].iter().all(Option::is_none));
                prop_assert!(places[..numbered].windows(2).all(|w| w[0] < w[1]));
            }
            // Without a cut, everything is numbered.
            if !cut {
                prop_assert_eq!(plan.held_back, 0);
            }
            prop_assert_eq!(plan.order.len() + plan.held_back, rows.len());
        }
    }
}
