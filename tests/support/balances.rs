//! Balances at a point (SPEC 3.10) against a replay of the journal: a random
//! history written through two connections (two instances, or instances on two
//! cluster nodes), then every point that matters asked through both.

use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use rand::{RngExt as _, SeedableRng as _};
use tonic::Code;
use tonic::transport::Channel;

use super::wire::{charge, credit, limits, open_account, reason, set_limits, transfer};

/// A point, as a request asks it.
#[derive(Debug, Clone, Copy)]
pub enum Point {
    Now,
    Sequence(u64),
    Micros(i64),
}

pub fn request(account: u64, point: Point) -> pb::GetBalanceRequest {
    let mut r = pb::GetBalanceRequest {
        account_id: account,
        ..Default::default()
    };
    match point {
        Point::Now => {}
        Point::Sequence(n) => r.as_of_sequence = n,
        Point::Micros(t) => {
            r.as_of_time = Some(prost_types::Timestamp {
                seconds: t.div_euclid(1_000_000),
                nanos: i32::try_from(t.rem_euclid(1_000_000) * 1000).unwrap(),
            });
        }
    }
    r
}

pub async fn get_balance(
    channel: &Channel,
    account: u64,
    point: Point,
) -> Result<pb::Balance, tonic::Status> {
    LedgerClient::new(channel.clone())
        .get_balance(request(account, point))
        .await
        .map(tonic::Response::into_inner)
}

pub fn micros(at: &prost_types::Timestamp) -> i64 {
    at.seconds * 1_000_000 + i64::from(at.nanos) / 1000
}

/// The account's whole journal, oldest first.
pub async fn journal(channel: &Channel, account: u64) -> Vec<pb::Entry> {
    let mut client = LedgerClient::new(channel.clone());
    let mut entries = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_entries(pb::ListEntriesRequest {
                account_id: account,
                page_size: 1000,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        entries.extend(page.entries);
        if page.next_page_token.is_empty() {
            return entries;
        }
        token = page.next_page_token;
    }
}

/// What a replay of `journal` says the balance is after its entry `i` (none:
/// before the first), given the account's opening limits.
pub fn replayed(
    account: u64,
    currency: &str,
    opening: pb::AccountLimits,
    journal: &[pb::Entry],
    upto: Option<usize>,
) -> pb::Balance {
    let Some(i) = upto else {
        return pb::Balance {
            account_id: account,
            currency: currency.to_owned(),
            balance: 0,
            limits: Some(opening),
            sequence: 0,
            created_at: None,
        };
    };
    let mut in_force = opening;
    let mut balance = 0;
    for entry in &journal[..=i] {
        let signed = match pb::EntryKind::try_from(entry.kind).unwrap() {
            pb::EntryKind::Credit | pb::EntryKind::Refund | pb::EntryKind::TransferIn => {
                entry.amount
            }
            pb::EntryKind::Limits => 0,
            _ => -entry.amount,
        };
        balance += signed;
        assert_eq!(
            balance, entry.balance_after,
            "the journal adds up at {}",
            entry.entry_id
        );
        if let Some(set) = entry.limits {
            in_force = set;
        }
    }
    let entry = &journal[i];
    pb::Balance {
        account_id: account,
        currency: currency.to_owned(),
        balance,
        limits: Some(in_force),
        sequence: entry.sequence,
        created_at: entry.created_at,
    }
}

/// The history's accounts: `main` has no floor and moves limits; the others
/// trade with it.
pub struct History {
    pub main: u64,
    pub opening: pb::AccountLimits,
    pub opened_at: i64,
    pub others: [u64; 2],
}

/// About `calls` random calls on `main` through `a` and `b` at once, from
/// `callers` callers: charges, credits, transfers both ways and limit changes
/// (declines are part of the history).
pub async fn random_history(a: &Channel, b: &Channel, calls: usize, seed: u64) -> History {
    let mut client = LedgerClient::new(a.clone());
    let opening = limits(None, Some(1_000_000));
    let open = open_account;
    let main = client
        .open_account(open(&format!("main-{seed}"), Some(opening)))
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap();
    let mut others = [0; 2];
    for (i, other) in others.iter_mut().enumerate() {
        *other = client
            .open_account(open(&format!("other-{seed}-{i}"), Some(limits(None, None))))
            .await
            .unwrap()
            .into_inner()
            .account
            .unwrap()
            .account_id;
    }
    let callers = 4;
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let mut client = LedgerClient::new(if caller % 2 == 0 { a } else { b }.clone());
        let (main, others) = (main.account_id, others);
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ caller);
            for n in 0..calls / 4 {
                let key = format!("h-{seed}-{caller}-{n}");
                let amount = rng.random_range(1..500);
                let other = others[rng.random_range(0..2)];
                let result = match rng.random_range(0..10) {
                    0..=2 => client.charge(charge(&key, main, amount)).await.map(drop),
                    3..=5 => client.credit(credit(&key, main, amount)).await.map(drop),
                    6 => client
                        .transfer(transfer(&key, main, other, amount))
                        .await
                        .map(drop),
                    7 | 8 => client
                        .transfer(transfer(&key, other, main, amount))
                        .await
                        .map(drop),
                    _ => {
                        let floor = rng.random_range(-3000..0);
                        let ceiling = rng.random_range(1000..5000);
                        let l = limits(Some(floor), Some(ceiling));
                        client.set_limits(set_limits(&key, main, l)).await.map(drop)
                    }
                };
                if let Err(status) = result {
                    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    History {
        main: main.account_id,
        opening,
        opened_at: micros(&main.created_at.unwrap()),
        others,
    }
}

/// Asks every point that matters of `history`'s main account through each of
/// `channels` and holds each answer against a replay of its journal: each
/// entry's sequence and time, the points just before them, before the first
/// entry, the ledger's last sequence, now, points not reached yet, a time before
/// the account was opened, and both points at once. A time before the opening
/// answers `ACCOUNT_NOT_FOUND`: that is also the point just before the first
/// entry when a node whose clock is behind stamped it at the opening's time.
pub async fn assert_every_point_replays(channels: &[Channel], history: &History) {
    let first = &channels[0];
    let account = history.main;
    let journal = journal(first, account).await;
    assert!(journal.len() > 10, "a history of {} entries", journal.len());
    let expect = |upto: Option<usize>| replayed(account, "USD", history.opening, &journal, upto);
    // At a time before the account was opened there is no account.
    let expect_at = |t: i64, upto: Option<usize>| (t >= history.opened_at).then(|| expect(upto));
    // The last entry numbered up to `n`, and stamped up to `t`.
    let by_sequence = |n: u64| journal.iter().rposition(|e| e.sequence <= n);
    let by_time = |t: i64| {
        journal
            .iter()
            .rposition(|e| micros(e.created_at.as_ref().unwrap()) <= t)
    };
    let mut points = vec![(Point::Now, Some(expect(Some(journal.len() - 1))))];
    for entry in &journal {
        let at = micros(entry.created_at.as_ref().unwrap());
        // Sequence 0 is not a point: it asks for now.
        for n in [entry.sequence, entry.sequence - 1]
            .into_iter()
            .filter(|n| *n > 0)
        {
            points.push((Point::Sequence(n), Some(expect(by_sequence(n)))));
        }
        for t in [at, at - 1] {
            points.push((Point::Micros(t), expect_at(t, by_time(t))));
        }
    }
    let opened_at = history.opened_at;
    points.push((
        Point::Micros(opened_at),
        expect_at(opened_at, by_time(opened_at)),
    ));
    for channel in channels {
        for round in 0..2 {
            for (point, expected) in &points {
                let got = get_balance(channel, account, *point).await;
                if expected.is_some() {
                    assert_eq!(
                        got.as_ref().ok(),
                        expected.as_ref(),
                        "{point:?}, round {round}: {got:?}"
                    );
                } else {
                    let status = got.expect_err("a point before the opening");
                    assert_eq!(reason(&status), "ACCOUNT_NOT_FOUND", "{point:?}");
                }
            }
        }
    }
    let mut client = LedgerClient::new(first.clone());
    let status = client
        .get_balance(pb::GetBalanceRequest {
            as_of_sequence: 1,
            ..request(account, Point::Micros(history.opened_at))
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    for point in [
        Point::Sequence(u64::MAX / 2),
        Point::Micros(micros(journal.last().unwrap().created_at.as_ref().unwrap()) + 3_600_000_000),
    ] {
        let status = get_balance(first, account, point).await.unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange, "{point:?}: {status:?}");
        assert_eq!(reason(&status), "POINT_NOT_REACHED");
    }
    let before_opening = Point::Micros(history.opened_at - 1);
    let status = get_balance(first, account, before_opening)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(reason(&status), "ACCOUNT_NOT_FOUND");
}

/// Waits for `task`, which must not end within `during`.
pub async fn still_waiting<T: std::fmt::Debug>(
    task: &mut tokio::task::JoinHandle<T>,
    during: Duration,
) {
    if let Ok(done) = tokio::time::timeout(during, &mut *task).await {
        panic!("answered while it had to wait: {done:?}");
    }
}
