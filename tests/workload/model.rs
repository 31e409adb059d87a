//! The clients' model checked against the ledger once they stop: every key
//! they saw take effect wrote exactly what its reply named and nothing else
//! did; the balances; no refund over its charge; no hold resolved twice, nor
//! captured once expired; every debit they saw acknowledged at or above the
//! floor in force and every credit at or below the ceiling, the limits in
//! force being the changes they saw acknowledged, in the journal's order; each
//! operation reversed at most once; and every decline they saw stored.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use futures::StreamExt as _;
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use tonic::transport::Channel;

use super::{Answer, Final, OPENING_BALANCE, Posted, Request, Run, Seen, retryable};
use crate::support::{self, TestDb, assert_audit_passes};

/// What the model checked, beyond the balances, for a run's summary.
#[derive(Debug, Default)]
pub struct Verified {
    holds: Holds,
    refunds: Refunds,
    limits: Limits,
    reversals: Reversals,
    /// Declines read back through LookupKey as stored.
    stored_declines: usize,
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            holds,
            refunds,
            limits,
            reversals,
            stored_declines,
        } = self;
        writeln!(
            f,
            "  holds: {} placed; {} captured and {} voided, each once, no capture after its \
             expiry; {} left unresolved read EXPIRED, {} still HELD; {} resolutions declined \
             HOLD_NOT_HELD naming the winner's state, {} HOLD_EXPIRED",
            holds.placed,
            holds.captured,
            holds.voided,
            holds.expired,
            holds.held,
            holds.not_held,
            holds.expired_declines
        )?;
        writeln!(
            f,
            "  refunds: {} of {} entries, none over its entry; {} declined REFUND_EXCEEDS_CHARGE, \
             each within what the model saw left",
            refunds.acknowledged, refunds.entries, refunds.exceeding
        )?;
        writeln!(
            f,
            "  limits: {} changes in the journals, each one acknowledged; {} acknowledged debits \
             at or above the floor in force ({} below zero, {} after a change), {} credits at or \
             below the ceiling",
            limits.changes, limits.debits, limits.below_zero, limits.after_a_change, limits.credits
        )?;
        write!(
            f,
            "  reversals: {} originals reversed, once each; {} declined ALREADY_REVERSED naming \
             the winner; {stored_declines} declines read back as stored",
            reversals.reversed, reversals.already_reversed
        )
    }
}

/// The audit passes, every key the clients saw take effect wrote exactly the
/// entries its reply named and no declined key wrote any, every hold they saw
/// placed exists, every balance equals the clients' model, and each of the
/// model's checks holds (the module's documentation lists them).
pub async fn verify(db: &TestDb, accounts: &[u64], run: &Run) -> Verified {
    assert_audit_passes(&db.url).await;
    let mut conn = db.sql().await;
    assert_effects(&mut conn, &run.finals).await;
    let mut model: BTreeMap<u64, i64> = accounts.iter().map(|a| (*a, OPENING_BALANCE)).collect();
    for answer in run.finals.values() {
        if let Final::Posted(written) = answer {
            for p in written {
                *model.get_mut(&p.account).unwrap() += p.delta;
            }
        }
    }
    for (account, expected) in model {
        assert_eq!(db.balance(account).await, expected, "account {account}");
    }
    let channel = &run.channels[0];
    Verified {
        holds: check_holds(&run.seen, channel).await,
        refunds: check_refunds(&run.seen),
        limits: check_limits(&mut conn, accounts, &run.seen).await,
        reversals: check_reversals(&mut conn, run).await,
        stored_declines: check_declines_stored(&run.seen, channel).await,
    }
}

/// Every key the clients saw take effect wrote exactly the entries its reply
/// named, every hold they saw placed is there, and no other key wrote any.
async fn assert_effects(conn: &mut mysql_async::Conn, finals: &BTreeMap<String, Final>) {
    let rows: Vec<(Vec<u8>, u64)> = conn
        .query(
            "SELECT idempotency_key, entry_id FROM entries WHERE idempotency_key LIKE 'c%' \
             ORDER BY idempotency_key, entry_id",
        )
        .await
        .unwrap();
    let mut entries: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, id) in rows {
        entries
            .entry(String::from_utf8(key).unwrap())
            .or_default()
            .push(id);
    }
    let holds: Vec<(Vec<u8>, u64)> = conn
        .query("SELECT idempotency_key, hold_id FROM holds WHERE idempotency_key LIKE 'c%'")
        .await
        .unwrap();
    let holds: BTreeMap<String, u64> = holds
        .into_iter()
        .map(|(k, id)| (String::from_utf8(k).unwrap(), id))
        .collect();
    let mut posted_keys = 0;
    for (key, answer) in finals {
        match answer {
            Final::Posted(written) => {
                // A reversal's reply lists its mirrors last leg first.
                let mut ids: Vec<u64> = written.iter().map(|p| p.entry_id).collect();
                ids.sort_unstable();
                assert_eq!(entries.get(key), Some(&ids), "{key} succeeded: its entries");
                posted_keys += 1;
            }
            Final::Held { hold_id } => {
                assert_eq!(holds.get(key), Some(hold_id), "{key}: its hold");
            }
            Final::Voided => assert_eq!(entries.get(key), None, "{key}: a void writes no entry"),
            Final::Declined(_) | Final::AlreadyReversed { .. } => {
                assert_eq!(entries.get(key), None, "{key} was declined: no entry");
                assert_eq!(holds.get(key), None, "{key} was declined: no hold");
            }
        }
    }
    assert_eq!(
        entries.len(),
        posted_keys,
        "no entry of a key not seen to succeed"
    );
}

/// How the holds the clients placed ended.
#[derive(Debug, Default)]
struct Holds {
    placed: usize,
    captured: usize,
    voided: usize,
    expired: usize,
    held: usize,
    not_held: usize,
    expired_declines: usize,
}

/// A placed hold's captures and voids, each with its key's final answer.
type Resolutions<'a> = BTreeMap<u64, Vec<(&'a str, &'a Seen)>>;

/// Each hold lives exactly its ttl, is captured or voided at most once, never
/// captured once expired; a capture or void declined HOLD_NOT_HELD names the
/// state the winner left, one declined HOLD_EXPIRED found no winner; and a
/// read of the hold shows how it ended (what a capture took; one left
/// unresolved HELD or EXPIRED, one whose resolution met its expiry EXPIRED).
async fn check_holds(seen: &BTreeMap<String, Seen>, channel: &Channel) -> Holds {
    let mut placed: BTreeMap<u64, &pb::Hold> = BTreeMap::new();
    let mut resolutions: Resolutions<'_> = BTreeMap::new();
    for (key, s) in seen {
        match (&s.request, &s.answer) {
            (Request::PlaceHold(r), Answer::Done { hold, .. }) => {
                let hold = hold.as_ref().unwrap();
                let lived = micros(hold.expires_at.as_ref()) - micros(hold.created_at.as_ref());
                let ttl = r.ttl.as_ref().unwrap().seconds;
                assert_eq!(lived, ttl * 1_000_000, "{key}: the hold lives its ttl");
                placed.insert(hold.hold_id, hold);
            }
            (
                Request::CaptureHold(pb::CaptureHoldRequest { hold_id, .. })
                | Request::VoidHold(pb::VoidHoldRequest { hold_id, .. }),
                _,
            ) => {
                resolutions.entry(*hold_id).or_default().push((key, s));
            }
            _ => {}
        }
    }
    let mut holds = Holds {
        placed: placed.len(),
        ..Holds::default()
    };
    let mut ended = BTreeMap::new();
    for (hold_id, attempts) in &resolutions {
        let hold = placed
            .get(hold_id)
            .expect("the clients resolve the holds they placed");
        ended.insert(*hold_id, resolved_once(hold, attempts, &mut holds));
    }
    let reads = futures::stream::iter(placed.keys().copied())
        .map(|hold_id| get_hold(channel, hold_id))
        .buffer_unordered(8)
        .collect::<Vec<pb::Hold>>()
        .await;
    for read in reads {
        let state = read.state();
        match ended.get(&read.hold_id).copied().flatten() {
            Some(won) => assert_eq!(
                (state, read.captured_amount),
                won,
                "hold {}: {read:?}",
                read.hold_id
            ),
            None if resolutions.contains_key(&read.hold_id) => {
                assert_eq!(state, pb::HoldState::Expired, "hold {}", read.hold_id);
            }
            None => assert!(
                matches!(state, pb::HoldState::Held | pb::HoldState::Expired),
                "hold {} was never resolved: {read:?}",
                read.hold_id
            ),
        }
        match state {
            pb::HoldState::Expired => holds.expired += 1,
            pb::HoldState::Held => holds.held += 1,
            _ => {}
        }
    }
    holds
}

/// Checks a hold's captures and voids; returns the state the one that won
/// left and what it captured, if one did.
fn resolved_once(
    hold: &pb::Hold,
    attempts: &[(&str, &Seen)],
    holds: &mut Holds,
) -> Option<(pb::HoldState, i64)> {
    let won: Vec<&(&str, &Seen)> = attempts
        .iter()
        .filter(|(_, s)| matches!(s.answer, Answer::Done { .. }))
        .collect();
    assert!(
        won.len() <= 1,
        "hold {} resolved more than once: {won:?}",
        hold.hold_id
    );
    let winner = won.first().map(|(key, s)| {
        let Answer::Done { entries, .. } = &s.answer else {
            unreachable!("a success")
        };
        if let Request::CaptureHold(r) = &s.request {
            let at = micros(entries[0].created_at.as_ref());
            assert!(
                at < micros(hold.expires_at.as_ref()),
                "{key} captured hold {} at {at}, once it had expired: {hold:?}",
                hold.hold_id
            );
            holds.captured += 1;
            (pb::HoldState::Captured, r.amount)
        } else {
            holds.voided += 1;
            (pb::HoldState::Voided, 0)
        }
    });
    for (key, s) in attempts {
        let Answer::Declined { reason, info, .. } = &s.answer else {
            continue;
        };
        if reason == "HOLD_EXPIRED" {
            assert_eq!(winner, None, "{key}: HOLD_EXPIRED, yet resolved by {won:?}");
            holds.expired_declines += 1;
        } else {
            let state = winner.map(|(w, _)| w.as_str_name());
            assert_eq!(
                info.get("state").map(String::as_str),
                state,
                "{key}: HOLD_NOT_HELD names the state the winner left ({won:?})"
            );
            holds.not_held += 1;
        }
    }
    winner
}

/// A timestamp in microseconds (the database's precision).
fn micros(at: Option<&prost_types::Timestamp>) -> i64 {
    support::balances::micros(at.expect("a timestamp"))
}

/// A hold as GetHold shows it.
async fn get_hold(channel: &Channel, hold_id: u64) -> pb::Hold {
    read(&format!("GetHold {hold_id}"), || {
        let mut client = LedgerClient::new(channel.clone());
        async move { client.get_hold(pb::GetHoldRequest { hold_id }).await }
    })
    .await
}

/// A read, asked again while its answer says to retry (a node rejoining after
/// a fault), for up to about 30 s.
async fn read<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    for _ in 0..300 {
        match call().await {
            Ok(reply) => return reply.into_inner(),
            Err(s) if retryable(&s) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(s) => panic!("{what}: {s:?}"),
        }
    }
    panic!("{what}: no answer in 300 attempts")
}

/// The refunds the clients saw.
#[derive(Debug, Default)]
struct Refunds {
    acknowledged: usize,
    entries: usize,
    exceeding: usize,
}

/// The acknowledged refunds of each charge or capture add up to no more than
/// it took, each credits its account; a refund declined REFUND_EXCEEDS_CHARGE
/// asked for more than was left, and what it says was left lies between what
/// the entry took less every refund of it the clients saw acknowledged and
/// what the entry took.
fn check_refunds(seen: &BTreeMap<String, Seen>) -> Refunds {
    let mut took: HashMap<u64, (u64, i64)> = HashMap::new();
    for s in seen.values() {
        if let (Request::Charge(_) | Request::CaptureHold(_), Answer::Done { entries, .. }) =
            (&s.request, &s.answer)
        {
            took.insert(
                entries[0].entry_id,
                (entries[0].account_id, entries[0].amount),
            );
        }
    }
    let mut refunded: HashMap<u64, i64> = HashMap::new();
    let mut refunds = Refunds::default();
    for (key, s) in seen {
        if let (Request::Refund(r, _), Answer::Done { entries, .. }) = (&s.request, &s.answer) {
            let (account, _) = took[&r.entry_id];
            assert_eq!(
                entries[0].account_id, account,
                "{key} credits the entry's account"
            );
            *refunded.entry(r.entry_id).or_default() += r.amount;
            refunds.acknowledged += 1;
        }
    }
    for (entry, sum) in &refunded {
        let (_, amount) = took[entry];
        assert!(
            sum <= &amount,
            "refunds of entry {entry} add up to {sum}, over its {amount}"
        );
    }
    refunds.entries = refunded.len();
    for (key, s) in seen {
        let (Request::Refund(r, _), Answer::Declined { reason, info, .. }) =
            (&s.request, &s.answer)
        else {
            continue;
        };
        if reason == "REFUND_EXCEEDS_CHARGE" {
            let left: i64 = info["refundable"].parse().unwrap();
            let (_, amount) = took[&r.entry_id];
            let least = amount - refunded.get(&r.entry_id).copied().unwrap_or(0);
            assert!(
                (least..=amount).contains(&left) && r.amount > left,
                "{key}: {left} left of {amount}, {least} at least, asked {}",
                r.amount
            );
            refunds.exceeding += 1;
        }
    }
    refunds
}

/// The limits the clients moved, and the moves they saw made under them.
#[derive(Debug, Default)]
struct Limits {
    changes: usize,
    debits: usize,
    below_zero: usize,
    after_a_change: usize,
    credits: usize,
}

/// Walks every account's journal as the audit does (the opening limits, then
/// each LIMITS entry's): every move met the limits in force; every LIMITS
/// entry is a SetLimits the clients saw acknowledged, with its limits; and
/// each debit and credit the clients saw acknowledged shows in the journal the
/// `balance_after` its reply showed, at or above the floor (at or below the
/// ceiling) that the changes the clients saw acknowledged left in force.
async fn check_limits(
    conn: &mut mysql_async::Conn,
    accounts: &[u64],
    seen: &BTreeMap<String, Seen>,
) -> Limits {
    let mut set: HashMap<u64, pb::AccountLimits> = HashMap::new();
    let mut moved: HashMap<u64, i64> = HashMap::new();
    for s in seen.values() {
        let Answer::Done { entries, .. } = &s.answer else {
            continue;
        };
        for e in entries {
            if let Request::SetLimits(r) = &s.request {
                set.insert(e.entry_id, r.limits.unwrap());
            } else {
                moved.insert(e.entry_id, e.balance_after);
            }
        }
    }
    let mut limits = Limits::default();
    for account in accounts {
        let opening: (Option<i64>, Option<i64>) = conn
            .exec_first(
                "SELECT min_balance, max_balance FROM account_limits \
                 WHERE account_id = ? AND account_seq = 0",
                (account,),
            )
            .await
            .unwrap()
            .unwrap();
        let journal = support::limits::journal_sql(conn, *account).await;
        support::limits::assert_every_move_met_its_limits(&journal, opening);
        walk(&journal, opening, (&set, &moved), &mut limits);
    }
    assert_eq!(
        limits.changes,
        set.len(),
        "every change of limits acknowledged is in its account's journal"
    );
    limits
}

/// One account's journal against the model (see [`check_limits`]).
fn walk(
    journal: &[pb::Entry],
    (mut floor, mut ceiling): (Option<i64>, Option<i64>),
    (set, moved): (&HashMap<u64, pb::AccountLimits>, &HashMap<u64, i64>),
    limits: &mut Limits,
) {
    let changes_before = limits.changes;
    for entry in journal {
        let id = entry.entry_id;
        let kind = pb::EntryKind::try_from(entry.kind).unwrap();
        if kind == pb::EntryKind::Limits {
            let model = set
                .get(&id)
                .unwrap_or_else(|| panic!("LIMITS entry {id}: no client saw it acknowledged"));
            assert_eq!(entry.limits.as_ref(), Some(model), "LIMITS entry {id}");
            floor = (!model.no_min_balance).then_some(model.min_balance);
            ceiling = model.max_balance;
            limits.changes += 1;
            continue;
        }
        let Some(after) = moved.get(&id).copied() else {
            continue;
        };
        assert_eq!(
            after, entry.balance_after,
            "entry {id}: the reply's balance_after"
        );
        match kind {
            pb::EntryKind::Charge | pb::EntryKind::TransferOut => {
                assert!(
                    floor.is_none_or(|f| after >= f),
                    "entry {id} left {after}, below the floor {floor:?} in force"
                );
                limits.debits += 1;
                limits.below_zero += usize::from(after < 0);
                limits.after_a_change += usize::from(limits.changes > changes_before);
            }
            pb::EntryKind::Credit | pb::EntryKind::TransferIn | pb::EntryKind::Refund => {
                assert!(
                    ceiling.is_none_or(|c| after <= c),
                    "entry {id} left {after}, above the ceiling {ceiling:?} in force"
                );
                limits.credits += 1;
            }
            _ => {}
        }
    }
}

/// The reversals the clients saw.
#[derive(Debug, Default)]
struct Reversals {
    reversed: usize,
    already_reversed: usize,
}

/// Each original the clients reversed has exactly one Reverse they saw
/// succeed, and every other they saw declined ALREADY_REVERSED names it; every
/// reversal the ledger recorded of a client's key is one they saw succeed, of
/// an original they saw succeed, and moved each account back by what the
/// original moved it.
async fn check_reversals(conn: &mut mysql_async::Conn, run: &Run) -> Reversals {
    let mut won: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut named: Vec<(&str, &str, &str)> = Vec::new();
    for (key, s) in &run.seen {
        let Request::Reverse(r, _) = &s.request else {
            continue;
        };
        match (&s.answer, &run.finals[key]) {
            (Answer::Done { .. }, _) => won.entry(&r.original_key).or_default().push(key),
            (_, Final::AlreadyReversed { by, .. }) => named.push((key, &r.original_key, by)),
            _ => {}
        }
    }
    for (original, winners) in &won {
        assert_eq!(
            winners.len(),
            1,
            "{original} reversed by each of {winners:?}"
        );
    }
    for (key, original, by) in &named {
        assert_eq!(
            won.get(original).map(|w| w[0]),
            Some(*by),
            "{key}: ALREADY_REVERSED names the reversal of {original} the clients saw succeed"
        );
    }
    assert_recorded_reversals(conn, &run.finals).await;
    Reversals {
        reversed: won.len(),
        already_reversed: named.len(),
    }
}

/// Every reversal recorded of a client's key is one the clients saw succeed,
/// of an original they saw succeed, and moved each account back by what the
/// original moved it.
async fn assert_recorded_reversals(conn: &mut mysql_async::Conn, finals: &BTreeMap<String, Final>) {
    let rows: Vec<(Vec<u8>, Vec<u8>)> = conn
        .query("SELECT original_key, reversal_key FROM reversals WHERE reversal_key LIKE 'c%'")
        .await
        .unwrap();
    let net = |written: &[Posted], sign: i64| {
        let mut net = BTreeMap::new();
        for p in written {
            *net.entry(p.account).or_insert(0) += sign * p.delta;
        }
        net
    };
    for (original, reversal) in rows {
        let (original, reversal) = (
            String::from_utf8(original).unwrap(),
            String::from_utf8(reversal).unwrap(),
        );
        let (Some(Final::Posted(done)), Some(Final::Posted(undone))) =
            (finals.get(&original), finals.get(&reversal))
        else {
            panic!("{reversal} reversed {original}: both were seen to succeed");
        };
        assert_eq!(
            net(undone, 1),
            net(done, -1),
            "{reversal} undid what {original} did"
        );
    }
}

/// Every decline the clients saw is stored under its key (LookupKey returns
/// it, with its code and reason; an ALREADY_REVERSED names the same winner);
/// returns how many.
async fn check_declines_stored(seen: &BTreeMap<String, Seen>, channel: &Channel) -> usize {
    let declined: Vec<(&String, &Answer)> = seen
        .iter()
        .filter(|(_, s)| matches!(s.answer, Answer::Declined { .. }))
        .map(|(key, s)| (key, &s.answer))
        .collect();
    futures::stream::iter(declined.iter())
        .map(|(key, answer)| async move {
            let record = read(&format!("LookupKey {key}"), || {
                let mut client = LedgerClient::new(channel.clone());
                let lookup = pb::LookupKeyRequest {
                    idempotency_key: (*key).clone(),
                };
                async move { client.lookup_key(lookup).await }
            })
            .await;
            let Some(pb::key_record::Outcome::Error(stored)) = record.outcome else {
                panic!("{key}: declined, yet stored {record:?}");
            };
            let stored = tonic::Status::with_details(
                tonic::Code::from(stored.code),
                stored.message.clone(),
                prost::Message::encode_to_vec(&stored).into(),
            );
            assert_eq!(
                &Answer::declined(&stored),
                *answer,
                "{key}: the stored decline"
            );
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    declined.len()
}
