//! The order of one round: which of the unnumbered commits it read get their
//! sequences now, and in what order. A pure function of the commits, so its
//! rules are tested without a database:
//!
//! - a commit is numbered whole: its entries, in the order its transaction
//!   applied them, take consecutive numbers, so an operation's entries (a
//!   transfer's two, a post's legs), which one transaction writes together, do too;
//! - an account's entries are numbered in the order they were applied
//!   (`account_seq`): the spans of its journal that the round's commits wrote
//!   order those commits, and a commit waits for the ones before it on each of
//!   its accounts (Kahn's topological sort; ties by the earliest `created_at`,
//!   then the lowest `commit_id`);
//! - a commit that may come early waits for a later round, and so does every
//!   commit after it on any account: one whose account's span does not follow
//!   the span before it in the round (a gap in the chain), and one on an account
//!   whose entry before the round's first is not numbered (the caller says which:
//!   only a read cut at its limit can leave that entry's commit unread).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};

use chrono::NaiveDateTime;

use crate::db::tables::commits::Span;

/// A commit whose entries have no sequence yet, as a round reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) commit_id: u64,
    /// How many entries it wrote: the numbers it takes.
    pub(crate) entries: u64,
    /// The accounts it wrote to, with their places in each journal.
    pub(crate) spans: Vec<Span>,
    pub(crate) created_at: NaiveDateTime,
}

/// What a round numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Indexes into the commits, in the order of their new sequences.
    pub(crate) order: Vec<usize>,
    /// Commits left for a later round.
    pub(crate) held_back: usize,
}

/// For each account of `commits` whose first entry in them is not its first
/// ever, that entry's predecessor `(account_id, account_seq - 1)`: when the read
/// was cut, the round numbers the account's entries only if it is numbered
/// already.
pub(crate) fn predecessors(commits: &[Pending]) -> Vec<(u64, u64)> {
    let mut first: BTreeMap<u64, u64> = BTreeMap::new();
    for span in commits.iter().flat_map(|c| &c.spans) {
        let seq = first.entry(span.account_id).or_insert(span.first);
        *seq = (*seq).min(span.first);
    }
    first
        .into_iter()
        .filter(|(_, seq)| *seq > 1)
        .map(|(account, seq)| (account, seq - 1))
        .collect()
}

struct Node {
    /// Its earliest instant and lowest id: the tie-break among ready commits.
    rank: (NaiveDateTime, u64),
    /// The commits that follow it on one of its accounts.
    after: Vec<usize>,
    /// How many commits before it are not yet ordered.
    waits_for: usize,
    /// Left for a later round.
    held: bool,
}

/// Orders `commits`. `unnumbered_before`: the accounts whose predecessor (see
/// [`predecessors`]) is not numbered.
pub(crate) fn plan(commits: &[Pending], unnumbered_before: &HashSet<u64>) -> Plan {
    let mut nodes: Vec<Node> = commits
        .iter()
        .map(|c| Node {
            rank: (c.created_at, c.commit_id),
            after: Vec::new(),
            waits_for: 0,
            held: false,
        })
        .collect();
    let mut blocked = Vec::new();
    for (account, chain) in chains(commits) {
        if unnumbered_before.contains(&account)
            && let Some(&(first, _)) = chain.first()
        {
            blocked.push(first);
        }
        for pair in chain.windows(2) {
            let [(earlier, before), (later, after)] = pair else {
                continue;
            };
            if after.first != before.last + 1 {
                blocked.push(*later);
            }
            if let Some(node) = nodes.get_mut(*earlier)
                && !node.after.contains(later)
            {
                node.after.push(*later);
                if let Some(next) = nodes.get_mut(*later) {
                    next.waits_for += 1;
                }
            }
        }
    }
    hold(&mut nodes, blocked);
    let mut ready: BinaryHeap<Reverse<((NaiveDateTime, u64), usize)>> = nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| node.waits_for == 0 && !node.held)
        .map(|(n, node)| Reverse((node.rank, n)))
        .collect();
    let mut order = Vec::with_capacity(commits.len());
    while let Some(Reverse((_, n))) = ready.pop() {
        order.push(n);
        let after = nodes
            .get(n)
            .map(|node| node.after.clone())
            .unwrap_or_default();
        for next in after {
            if let Some(node) = nodes.get_mut(next) {
                node.waits_for -= 1;
                if node.waits_for == 0 && !node.held {
                    ready.push(Reverse((node.rank, next)));
                }
            }
        }
    }
    // Commits in a cycle (impossible for entries written under their accounts'
    // locks) are never ready, and wait like the held ones.
    Plan {
        held_back: commits.len() - order.len(),
        order,
    }
}

/// Each account's spans in the round, with their commits, by place in its journal.
fn chains(commits: &[Pending]) -> BTreeMap<u64, Vec<(usize, &Span)>> {
    let mut chains: BTreeMap<u64, Vec<(usize, &Span)>> = BTreeMap::new();
    for (n, commit) in commits.iter().enumerate() {
        for span in &commit.spans {
            chains.entry(span.account_id).or_default().push((n, span));
        }
    }
    for chain in chains.values_mut() {
        chain.sort_by_key(|(_, span)| span.first);
    }
    chains
}

/// Holds back `from` and every commit after one of them.
fn hold(nodes: &mut [Node], mut from: Vec<usize>) {
    while let Some(n) = from.pop() {
        if let Some(node) = nodes.get_mut(n)
            && !std::mem::replace(&mut node.held, true)
        {
            from.extend(node.after.iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn at(micros: i64) -> NaiveDateTime {
        chrono::DateTime::from_timestamp_micros(1_700_000_000_000_000 + micros)
            .unwrap()
            .naive_utc()
    }

    /// A commit of one entry on each of `accounts` (`(account_id, account_seq)`).
    fn commit(commit_id: u64, accounts: &[(u64, u64)], t: i64) -> Pending {
        Pending {
            commit_id,
            entries: accounts.len() as u64,
            spans: accounts
                .iter()
                .map(|&(account_id, seq)| Span {
                    account_id,
                    first: seq,
                    last: seq,
                })
                .collect(),
            created_at: at(t),
        }
    }

    fn ids(commits: &[Pending], plan: &Plan) -> Vec<u64> {
        plan.order.iter().map(|&n| commits[n].commit_id).collect()
    }

    #[test]
    fn ties_go_by_instant_then_id() {
        let commits = vec![
            commit(9, &[(1, 1)], 5),
            commit(4, &[(2, 1), (3, 1)], 3),
            commit(3, &[(4, 1)], 3),
            commit(7, &[(5, 1)], 1),
        ];
        let plan = plan(&commits, &HashSet::new());
        assert_eq!(ids(&commits, &plan), [7, 3, 4, 9]);
        assert_eq!(plan.held_back, 0);
    }

    #[test]
    fn an_account_keeps_its_journal_order_against_the_clock_and_the_ids() {
        // Account 1's second entry has the earlier instant and the lower id (a
        // clock that stepped back, ids from an older block): the chain wins, and
        // the commit that wrote it waits with its other account.
        let commits = vec![
            commit(50, &[(1, 1)], 10),
            commit(20, &[(1, 2), (2, 7)], 2),
            commit(30, &[(2, 8)], 1),
        ];
        let plan = plan(&commits, &HashSet::new());
        assert_eq!(ids(&commits, &plan), [50, 20, 30]);
    }

    #[test]
    fn a_commit_of_many_entries_on_an_account_is_one_link_of_its_chain() {
        let commits = vec![
            Pending {
                commit_id: 5,
                entries: 3,
                spans: vec![Span {
                    account_id: 1,
                    first: 4,
                    last: 6,
                }],
                created_at: at(9),
            },
            commit(2, &[(1, 3)], 1),
            commit(8, &[(1, 7)], 1),
        ];
        let plan = plan(&commits, &HashSet::new());
        assert_eq!(ids(&commits, &plan), [2, 5, 8]);
        assert_eq!(plan.held_back, 0);
    }

    #[test]
    fn an_unnumbered_predecessor_holds_back_the_account_and_everything_after_it() {
        let commits = vec![
            commit(10, &[(1, 5), (2, 3)], 1),
            commit(12, &[(2, 4), (3, 9)], 2),
            commit(14, &[(4, 1)], 3),
        ];
        assert_eq!(predecessors(&commits), [(1, 4), (2, 2), (3, 8)]);
        let plan = plan(&commits, &HashSet::from([1]));
        assert_eq!(ids(&commits, &plan), [14]);
        assert_eq!(plan.held_back, 2);
    }

    #[test]
    fn a_gap_in_a_chain_holds_back_from_the_gap() {
        let commits = vec![
            commit(1, &[(1, 1)], 1),
            commit(3, &[(1, 3), (2, 1)], 3),
            commit(4, &[(2, 2)], 4),
        ];
        let plan = plan(&commits, &HashSet::new());
        assert_eq!(ids(&commits, &plan), [1]);
        assert_eq!(plan.held_back, 2);
    }

    /// A journal: commits in apply order, each of one to three operations on
    /// one to three accounts, with instants that may step back and ids not in
    /// apply order; and which commits the read holds.
    #[expect(clippy::type_complexity, reason = "a test's generator")]
    fn journal() -> impl Strategy<Value = (Vec<Pending>, Vec<(u64, u64, u64)>, Vec<bool>)> {
        let commit = (
            prop::collection::vec(prop::collection::vec(0_u64..6, 1..4), 1..4),
            -3_i64..4,
            any::<u32>(),
            any::<bool>(),
        );
        prop::collection::vec(commit, 1..40).prop_map(|commits| {
            let mut seqs: HashMap<u64, u64> = HashMap::new();
            let mut pending = Vec::new();
            // (commit_id, account, account_seq) of every entry, in apply order.
            let mut applied = Vec::new();
            let mut read = Vec::new();
            let mut t = 100;
            for (n, (ops, step, salt, in_read)) in commits.into_iter().enumerate() {
                t += step;
                let id = u64::from(salt % 1000) * 1000 + n as u64;
                let mut spans: Vec<Span> = Vec::new();
                let mut entries = 0;
                for account in ops.into_iter().flatten() {
                    let seq = seqs.entry(account).or_insert(0);
                    *seq += 1;
                    entries += 1;
                    applied.push((id, account, *seq));
                    match spans.iter_mut().find(|s| s.account_id == account) {
                        Some(span) => span.last = *seq,
                        None => spans.push(Span {
                            account_id: account,
                            first: *seq,
                            last: *seq,
                        }),
                    }
                }
                pending.push(Pending {
                    commit_id: id,
                    entries,
                    spans,
                    created_at: at(t),
                });
                read.push(in_read);
            }
            (pending, applied, read)
        })
    }

    proptest! {
        #[test]
        fn every_plan_keeps_accounts_in_order(
            (all, applied, read) in journal(), cut in any::<bool>()
        ) {
            // Uncut, the round reads every commit; cut, only some, and the
            // accounts whose predecessors it did not read are blocked.
            let commits: Vec<Pending> = all
                .iter()
                .zip(&read)
                .filter(|(_, r)| !cut || **r)
                .map(|(c, _)| c.clone())
                .collect();
            let read_ids: HashSet<u64> = commits.iter().map(|c| c.commit_id).collect();
            let blocked: HashSet<u64> = predecessors(&commits)
                .into_iter()
                .filter(|&(account, seq)| {
                    !applied.iter().any(|&(id, a, s)| a == account && s == seq && read_ids.contains(&id))
                })
                .map(|(account, _)| account)
                .collect();
            let plan = plan(&commits, &blocked);
            let place: HashMap<u64, usize> =
                ids(&commits, &plan).into_iter().enumerate().map(|(n, id)| (id, n)).collect();
            // Each account: a numbered prefix of its chain, in its order.
            let mut by_account: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
            for &(id, account, seq) in &applied {
                by_account.entry(account).or_default().push((seq, id));
            }
            for chain in by_account.values() {
                let places: Vec<Option<usize>> =
                    chain.iter().map(|(_, id)| place.get(id).copied()).collect();
                let numbered = places.iter().take_while(|p| p.is_some()).count();
                prop_assert!(places[numbered..].iter().all(Option::is_none));
                prop_assert!(places[..numbered].windows(2).all(|w| w[0] <= w[1]));
            }
            if !cut {
                prop_assert_eq!(plan.held_back, 0);
            }
            prop_assert_eq!(plan.order.len() + plan.held_back, commits.len());
        }
    }
}
