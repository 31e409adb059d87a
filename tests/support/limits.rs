//! Limits moved under load: a storm of debits and credits on one account through
//! two instances while another caller moves its floor, and the journal walk
//! that checks every debit met the floor in force before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use tonic::transport::Channel;

use super::server::TestDb;
use super::wire::{charge, credit, limits, open_account, place_hold, reason, set_limits};

/// The floors the mover cycles through, every [`MOVE_EVERY`].
pub const FLOORS: [i64; 5] = [0, -3000, 2500, -1000, 4000];
pub const MOVE_EVERY: Duration = Duration::from_millis(40);

/// What a storm did, as its callers were answered.
#[derive(Debug, Default)]
pub struct StormCounts {
    /// `SetLimits` calls answered with success (each retried until it was).
    pub limits_set: u64,
    pub debits: u64,
    /// Debits declined INSUFFICIENT_FUNDS.
    pub declined: u64,
    pub credits: u64,
}

/// Runs the storm on a new account for `run`, after a credit line of 3,000 and a
/// debit 1,000 into it: 8 callers, alternating between
/// `channels`, charge, credit and place holds on it while one more caller moves
/// its floor among [`FLOORS`] every [`MOVE_EVERY`], through the channels in turn.
/// Returns the account and what the callers were told. A retryable answer is
/// neither counted nor retried: its key took effect or not, and the journal
/// says which.
pub async fn storm(channels: &[Channel], run: Duration) -> (u64, StormCounts) {
    let account = open_into_a_credit_line(channels[0].clone()).await;

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts {
        limits_set: AtomicU64::new(1),
        debits: AtomicU64::new(1),
        ..Counts::default()
    });
    let mut callers = Vec::new();
    for caller in 0..8_usize {
        let mut client = LedgerClient::new(channels[caller % channels.len()].clone());
        let (stop, counts) = (stop.clone(), counts.clone());
        callers.push(tokio::spawn(async move {
            let mut n = 0_u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let key = format!("storm-{caller}-{n}");
                let amount = i64::try_from(1 + (n * 37 + caller as u64 * 101) % 700).unwrap();
                // Credits bring in about a quarter of what debits take, so the
                // balance keeps meeting the floor wherever it is.
                let debit = match n % 4 {
                    0 => {
                        let answer = client.credit(credit(&key, account, amount / 2)).await;
                        counts
                            .credits
                            .fetch_add(u64::from(answer.is_ok()), Ordering::SeqCst);
                        continue;
                    }
                    1 | 2 => client.charge(charge(&key, account, amount)).await.map(drop),
                    _ => {
                        let hold =
                            place_hold(&key, account, amount / 4 + 1, Duration::from_secs(1));
                        client.place_hold(hold).await.map(drop)
                    }
                };
                match debit {
                    Ok(()) => counts.debits.fetch_add(1, Ordering::SeqCst),
                    Err(status) if reason(&status) == "INSUFFICIENT_FUNDS" => {
                        counts.declined.fetch_add(1, Ordering::SeqCst)
                    }
                    Err(_) => 0,
                };
            }
        }));
    }
    let mover = {
        let channels = channels.to_vec();
        let (stop, counts) = (stop.clone(), counts.clone());
        tokio::spawn(async move {
            let mut n = 0_usize;
            while !stop.load(Ordering::SeqCst) {
                let floor = FLOORS[n % FLOORS.len()];
                let set = set_limits(
                    &format!("storm-limits-{n}"),
                    account,
                    limits(Some(floor), None),
                );
                // Retried with its key until answered, so every change that
                // took effect is counted, once.
                for attempt in 0..20 {
                    let channel = channels[(n + attempt) % channels.len()].clone();
                    match LedgerClient::new(channel).set_limits(set.clone()).await {
                        Ok(_) => {
                            counts.limits_set.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        Err(status) => assert!(
                            matches!(
                                status.code(),
                                tonic::Code::Aborted | tonic::Code::Unavailable
                            ),
                            "SetLimits: {status:?}"
                        ),
                    }
                }
                n += 1;
                // The storm's pace, not a wait.
                tokio::time::sleep(MOVE_EVERY).await;
            }
        })
    };
    // The storm's length, not a wait: what it must reach (moves of the floor,
    // debits declined at it, debits into the credit line) is read from its
    // answers and its journal once it ends.
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::SeqCst);
    for caller in callers {
        caller.await.unwrap();
    }
    mover.await.unwrap();
    let counts = StormCounts {
        limits_set: counts.limits_set.load(Ordering::SeqCst),
        debits: counts.debits.load(Ordering::SeqCst),
        declined: counts.declined.load(Ordering::SeqCst),
        credits: counts.credits.load(Ordering::SeqCst),
    };
    (account, counts)
}

/// A new account funded with 5,000, then given a credit line of 3,000 and
/// charged 6,000: forced, not left to the storm's timing, so its journal holds a
/// debit into the line.
async fn open_into_a_credit_line(channel: Channel) -> u64 {
    let mut client = LedgerClient::new(channel);
    let account = super::open_funded(&mut client, "storm", "USD", 5000).await;
    client
        .set_limits(set_limits(
            "storm-limits-open",
            account,
            limits(Some(-3000), None),
        ))
        .await
        .unwrap();
    client
        .charge(charge("storm-into-the-line", account, 6000))
        .await
        .unwrap();
    account
}

#[derive(Debug, Default)]
struct Counts {
    limits_set: AtomicU64,
    debits: AtomicU64,
    declined: AtomicU64,
    credits: AtomicU64,
}

/// Every entry of `account`'s journal, oldest first, paged through ListEntries.
pub async fn journal(channel: Channel, account: u64) -> Vec<pb::Entry> {
    let mut client = LedgerClient::new(channel);
    let mut entries = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_entries(pb::ListEntriesRequest {
                account_id: account,
                page_size: 1000,
                page_token,
            })
            .await
            .unwrap()
            .into_inner();
        entries.extend(page.entries);
        if page.next_page_token.is_empty() {
            return entries;
        }
        page_token = page.next_page_token;
    }
}

/// Every entry of `account`'s journal, oldest first, read from the database:
/// each entry's id, kind and balance after it, and a LIMITS entry's limits.
pub async fn journal_sql(conn: &mut mysql_async::Conn, account: u64) -> Vec<pb::Entry> {
    use mysql_async::prelude::Queryable as _;
    type Row = (u64, i32, i64, Option<i64>, Option<i64>, Option<u64>);
    let rows: Vec<Row> = conn
        .exec(
            "SELECT e.entry_id, e.kind, e.balance_after, l.min_balance, l.max_balance, \
             l.account_seq FROM entries e LEFT JOIN account_limits l \
             ON l.account_id = e.account_id AND l.account_seq = e.account_seq \
             WHERE e.account_id = ? ORDER BY e.account_seq",
            (account,),
        )
        .await
        .unwrap();
    rows.into_iter()
        .map(
            |(entry_id, kind, balance_after, floor, ceiling, place)| pb::Entry {
                entry_id,
                account_id: account,
                kind,
                balance_after,
                limits: place.map(|_| limits(floor, ceiling)),
                ..pb::Entry::default()
            },
        )
        .collect()
}

/// Walks `journal`, which began with the limits `opening` (floor, ceiling), and
/// checks that each debit other than a capture left its balance at or above the
/// floor in force before it, and each credit at or below the ceiling; returns
/// the number of LIMITS entries and of debits that took the balance below zero.
pub fn assert_every_move_met_its_limits(
    journal: &[pb::Entry],
    opening: (Option<i64>, Option<i64>),
) -> (u64, u64) {
    let (mut floor, mut ceiling) = opening;
    let (mut changes, mut below_zero) = (0, 0);
    for entry in journal {
        let kind = pb::EntryKind::try_from(entry.kind).unwrap();
        match kind {
            pb::EntryKind::Limits => {
                let set = entry.limits.unwrap();
                floor = (!set.no_min_balance).then_some(set.min_balance);
                ceiling = set.max_balance;
                changes += 1;
            }
            pb::EntryKind::Charge | pb::EntryKind::TransferOut => {
                if let Some(floor) = floor {
                    assert!(
                        entry.balance_after >= floor,
                        "entry {} took the balance to {}, below the floor {floor}",
                        entry.entry_id,
                        entry.balance_after
                    );
                }
                below_zero += u64::from(entry.balance_after < 0);
            }
            pb::EntryKind::Credit | pb::EntryKind::TransferIn | pb::EntryKind::Refund => {
                if let Some(ceiling) = ceiling {
                    assert!(
                        entry.balance_after <= ceiling,
                        "entry {} took the balance to {}, above the ceiling {ceiling}",
                        entry.entry_id,
                        entry.balance_after
                    );
                }
            }
            pb::EntryKind::Capture | pb::EntryKind::Unspecified => {}
        }
    }
    (changes, below_zero)
}

/// The storm's checks: every move met its limits, as many LIMITS entries as
/// `SetLimits` succeeded, the floor declined debits (so the storm tested
/// something), the debit the storm began with into a credit line shows below
/// zero, and the audit passes.
pub async fn assert_storm_sound(db: &TestDb, channel: Channel, account: u64, counts: &StormCounts) {
    let journal = journal(channel, account).await;
    let (changes, below_zero) = assert_every_move_met_its_limits(&journal, (Some(0), None));
    assert_eq!(
        changes, counts.limits_set,
        "one LIMITS entry per SetLimits answered"
    );
    assert!(counts.limits_set >= 10, "{counts:?}");
    assert!(counts.declined > 0, "some debits met the floor: {counts:?}");
    assert!(below_zero > 0, "some debits used a credit line: {counts:?}");
    super::server::assert_audit_passes(&db.url).await;
}
