//! A stall stays on its account: while a batch waits on an account (an outside
//! transaction holds its row), the calls that touch that account are held back,
//! whether they name it or name one of its entries or holds, and in whichever
//! writer they queue; the other accounts' calls are served as if nothing waited.
//! Each test first stalls a charge on the account (`TestApp::busy_writer_on`),
//! then sends calls that touch it beside calls that do not, and bounds how soon
//! the latter are answered: 100 ms, against the 10 s lock wait that a batch
//! sharing the stall waits out.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::server::until;
use crate::support::{
    Config, TestApp, TestDb, capture, charge, credit, place_hold, reason, refund, reverse,
    transfer, void, with_deadline,
};

type Client = ledger::proto::pb::ledger_client::LedgerClient<tonic::transport::Channel>;

/// A call sent in a task of its own: its account, its reply, and when it came.
type Sent = JoinHandle<(u64, Result<(), tonic::Status>, Instant)>;

/// How soon a call on another account is answered while one account stalls: far
/// beyond a batch's few milliseconds, far below the lock wait.
const ANSWERED_WITHIN: Duration = Duration::from_millis(100);

/// A stall bound long enough for a test to keep a writer waiting on a batch
/// (on a row it holds) while a burst queues behind it, so the writer takes the
/// whole burst at once when the row is let go.
const LONG_STALL: Duration = Duration::from_secs(2);

/// A deadline for the calls that must be answered at once: a call that shared
/// the stall fails the test in seconds rather than after the lock wait.
const DEADLINE: Duration = Duration::from_secs(2);

fn writers(n: usize, stall: Option<Duration>) -> Config {
    Config {
        batch_writers: Some(n),
        batch_stall: stall,
        ..Config::default()
    }
}

/// Charges of 1 on `account`, one after another; their entries' ids.
async fn charges_of(app: &TestApp, account: u64, tag: &str, n: usize) -> Vec<u64> {
    let mut client = app.client().await;
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let reply = client
            .charge(charge(&format!("{tag}-{i}"), account, 1))
            .await
            .expect("charged");
        entries.push(reply.into_inner().entry.unwrap().entry_id);
    }
    entries
}

/// Holds of 1 on `account`, one after another; their ids.
async fn holds_of(app: &TestApp, account: u64, tag: &str, n: usize) -> Vec<u64> {
    let mut client = app.client().await;
    let mut holds = Vec::with_capacity(n);
    for i in 0..n {
        let reply = client
            .place_hold(place_hold(
                &format!("{tag}-{i}"),
                account,
                1,
                Duration::from_secs(600),
            ))
            .await
            .expect("held");
        holds.push(reply.into_inner().hold.unwrap().hold_id);
    }
    holds
}

/// A charge of 1 on each account, all sent at once, each task ending with its
/// reply and the instant it came.
fn charge_each(client: &Client, accounts: &[u64], tag: &str) -> Vec<Sent> {
    accounts
        .iter()
        .enumerate()
        .map(|(i, &account)| {
            let mut client = client.clone();
            let key = format!("{tag}-{i}");
            tokio::spawn(async move {
                let reply = client
                    .charge(with_deadline(charge(&key, account, 1), DEADLINE))
                    .await;
                (account, reply.map(drop), Instant::now())
            })
        })
        .collect()
}

/// Each charge succeeded within [`ANSWERED_WITHIN`] of `since`.
async fn assert_answered_within(charges: Vec<Sent>, since: Instant) {
    for charge in charges {
        let (account, reply, at) = charge.await.unwrap();
        let took = at.saturating_duration_since(since);
        assert!(
            reply.is_ok() && took <= ANSWERED_WITHIN,
            "the charge on account {account} was answered after {took:?}: {reply:?}"
        );
    }
}

/// Polls until `n` calls are held back by their writer or wait for an account's
/// row lock; fails after 30 s.
async fn until_held_or_waiting(app: &TestApp, db: &TestDb, n: u64) {
    until(&format!("{n} calls come to wait"), async || {
        let held = u64::try_from(app.persistence.waiting_calls()).unwrap();
        held + db.waiting_on("accounts").await >= n
    })
    .await;
}

/// Funded accounts until one (the last, the highest id) has `n` accounts below
/// it that go to one other writer: that account, and those `n`.
async fn beside_another_writer(app: &TestApp, n: usize) -> (u64, Vec<u64>) {
    let writer = |account| app.persistence.batch_writer(account).unwrap();
    let mut by_writer: HashMap<usize, Vec<u64>> = HashMap::new();
    for _ in 0..400 {
        let account = app.funded_account("USD", 100).await;
        let full = by_writer
            .iter()
            .find(|(w, accounts)| **w != writer(account) && accounts.len() >= n);
        if let Some((_, accounts)) = full {
            let below = accounts[..n].to_vec();
            assert!(below.iter().all(|&a| a < account), "account ids ascend");
            return (account, below);
        }
        by_writer.entry(writer(account)).or_default().push(account);
    }
    panic!("no writer took {n} of 400 accounts");
}

/// A funded account whose calls go to `account`'s writer.
async fn in_writer_of(app: &TestApp, account: u64) -> u64 {
    let writer = app.persistence.batch_writer(account);
    for _ in 0..100 {
        let other = app.funded_account("USD", 100).await;
        if app.persistence.batch_writer(other) == writer {
            return other;
        }
    }
    panic!("no account of 100 went to writer {writer:?}");
}

/// The writer of `stalled` leaves its stalled batch once the stall bound passed:
/// a charge on `spare`, which goes to the same writer, is served only then.
/// Then another outside transaction holds `busy`'s row and a charge waits on it,
/// so its writer waits on that batch while the next calls queue.
async fn stall_then_keep_busy(
    app: &TestApp,
    db: &TestDb,
    spare: u64,
    busy: u64,
) -> mysql_async::Conn {
    app.client()
        .await
        .charge(charge("spare", spare, 1))
        .await
        .expect("served once the stalled batch runs on apart");
    let holder = db.lock_account(busy).await;
    let mut client = app.client().await;
    tokio::spawn(async move { client.charge(charge("busy-other", busy, 1)).await });
    db.until_waiting_on("accounts", 2).await;
    holder
}

/// Refunds of a stalled account's charges, sent in one burst with charges on
/// eight other accounts, are held back, and the charges are served at once.
/// Forced: the burst queues while the writer waits on a batch on another held
/// account, and is taken as one when that row is let go; a writer that knew only
/// the named entry would put the refunds in the charges' batch, which would wait
/// out the lock wait on the stalled account.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_refunds_of_a_stalled_account_holds_up_no_other_account() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(1, Some(LONG_STALL))).await;
    let stalled = app.funded_account("USD", 1_000).await;
    let entries = charges_of(&app, stalled, "paid", 8).await;
    burst_beside_other_accounts(&app, &db, stalled, |client| {
        entries
            .iter()
            .enumerate()
            .map(|(i, &entry)| {
                let mut client = client.clone();
                tokio::spawn(async move {
                    client
                        .refund(refund(&format!("back-{i}"), entry, 1))
                        .await
                        .map(drop)
                })
            })
            .collect()
    })
    .await;
    assert_eq!(db.balance(stalled).await, 1_000 - 8 - 1 + 8);
}

/// Reversals of credits into a stalled account, which name only the credits'
/// keys, sent in one burst with charges on eight other accounts, are held back
/// by the account their originals touched, and the charges are served at once.
/// Forced as the refunds' burst is: a writer that routed a reversal by the
/// accounts its request names (none) would put it in the charges' batch, which
/// would wait out the lock wait on the stalled account.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_reversals_into_a_stalled_account_holds_up_no_other_account() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(1, Some(LONG_STALL))).await;
    let stalled = app.funded_account("USD", 1_000).await;
    let mut client = app.client().await;
    for i in 0..8 {
        client
            .credit(credit(&format!("in-{i}"), stalled, 1))
            .await
            .expect("credited");
    }
    burst_beside_other_accounts(&app, &db, stalled, |client| {
        (0..8)
            .map(|i| {
                let mut client = client.clone();
                tokio::spawn(async move {
                    let request = ledger::proto::pb::ReverseRequest {
                        idempotency_key: format!("undo-{i}"),
                        original_key: format!("in-{i}"),
                        ..Default::default()
                    };
                    client.reverse(request).await.map(drop)
                })
            })
            .collect()
    })
    .await;
    assert_eq!(db.balance(stalled).await, 1_000 + 8 - 1 - 8);
}

/// Reversals of a transfer still in flight, stalled on its destination's row,
/// sent in one burst with charges on eight other accounts: the original has no
/// entries yet, so the reversals name no account of their own; they take on
/// their original's accounts from its call queued here, are held back by
/// them, and the charges are served at once. Forced as the refunds' burst is:
/// a writer that knew no account of theirs would put the reversals in the
/// charges' batch, which would wait on the original's key row until the
/// lock wait. Once the row is free, one reversal reverses the transfer and the
/// others are told ALREADY_REVERSED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_reversals_of_a_stalled_original_holds_up_no_other_account() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(1, Some(LONG_STALL))).await;
    let from = app.funded_account("USD", 1_000).await;
    let stalled = app.funded_account("USD", 0).await;
    let stall = async || {
        let holder = db.lock_account(stalled).await;
        let mut client = app.client().await;
        tokio::spawn(async move { client.transfer(transfer("pay", from, stalled, 10)).await });
        db.until_waiting_on("accounts", 1).await;
        holder
    };
    let reversals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    burst_beside_other_accounts_stalled_by(&app, &db, stall, |client| {
        (0..8)
            .map(|i| {
                let (mut client, reversals) = (client.clone(), reversals.clone());
                tokio::spawn(async move {
                    match client.reverse(reverse(&format!("undo-{i}"), "pay")).await {
                        Ok(_) => {
                            reversals.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            Ok(())
                        }
                        Err(status) if reason(&status) == "ALREADY_REVERSED" => Ok(()),
                        Err(status) => Err(status),
                    }
                })
            })
            .collect()
    })
    .await;
    assert_eq!(reversals.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(db.balance(stalled).await, 0);
    assert_eq!(db.balance(from).await, 1_000);
}

/// Stalls a charge on `stalled`, keeps its writer busy on another held account
/// while `burst` (eight calls that touch `stalled`) queues beside charges on
/// eight other accounts, then lets the busy account go: the charges are answered
/// within [`ANSWERED_WITHIN`], and the burst once `stalled`'s row is free.
async fn burst_beside_other_accounts(
    app: &TestApp,
    db: &TestDb,
    stalled: u64,
    burst: impl FnOnce(&Client) -> Vec<JoinHandle<Result<(), tonic::Status>>>,
) {
    burst_beside_other_accounts_stalled_by(
        app,
        db,
        async || app.busy_writer_on(db, stalled).await,
        burst,
    )
    .await;
}

/// [`burst_beside_other_accounts`], the account's batch stalled by `stall`,
/// which returns the outside transaction holding its row.
async fn burst_beside_other_accounts_stalled_by(
    app: &TestApp,
    db: &TestDb,
    stall: impl AsyncFnOnce() -> mysql_async::Conn,
    burst: impl FnOnce(&Client) -> Vec<JoinHandle<Result<(), tonic::Status>>>,
) {
    let mut others = Vec::new();
    for _ in 0..8 {
        others.push(app.funded_account("USD", 100).await);
    }
    let spare = app.funded_account("USD", 100).await;
    let busy = app.funded_account("USD", 100).await;

    let mut holder = stall().await;
    let mut busy_holder = stall_then_keep_busy(app, db, spare, busy).await;
    let client = app.client().await;
    let calls = burst(&client);
    let charges = charge_each(&client, &others, "other");
    app.until_queued(16).await;

    let released = Instant::now();
    busy_holder.query_drop("ROLLBACK").await.unwrap();
    assert_answered_within(charges, released).await;
    app.until_queued(8).await;

    holder.query_drop("ROLLBACK").await.unwrap();
    for call in calls {
        call.await.unwrap().expect("served once the row is free");
    }
    for other in others {
        assert_eq!(db.balance(other).await, 99);
    }
}

/// Refunds, captures and voids of a stalled account's entries and holds, sent
/// one after another, each once the one before waits, are held back and take no
/// batch of their own: a charge on another account then is served at once. A
/// writer that knew only the named entries and holds would run each in a batch
/// of its own, stalled on the account, and with the first stalled charge that
/// makes as many as it lets run at once: it would take nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refunds_captures_and_voids_of_a_stalled_account_leave_its_writer_free() {
    let db = TestDb::new();
    // Connections enough for every batch the writer lets run on at once.
    let app = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 20,
            ..writers(1, None)
        },
    )
    .await;
    let stalled = app.funded_account("USD", 1_000).await;
    let entries = charges_of(&app, stalled, "paid", 5).await;
    let holds = holds_of(&app, stalled, "held", 10).await;
    let other = app.funded_account("USD", 100).await;

    let mut holder = app.busy_writer_on(&db, stalled).await;
    let client = app.client().await;
    let mut calls: Vec<JoinHandle<Result<(), tonic::Status>>> = Vec::new();
    for (i, &entry) in entries.iter().enumerate() {
        let mut client = client.clone();
        calls.push(tokio::spawn(async move {
            client
                .refund(refund(&format!("back-{i}"), entry, 1))
                .await
                .map(drop)
        }));
        until_held_or_waiting(&app, &db, 1 + u64::try_from(calls.len()).unwrap()).await;
    }
    for (i, &hold) in holds.iter().enumerate() {
        let mut client = client.clone();
        calls.push(tokio::spawn(async move {
            if i % 2 == 0 {
                client
                    .capture_hold(capture(&format!("take-{i}"), hold, 1))
                    .await
                    .map(drop)
            } else {
                client
                    .void_hold(void(&format!("drop-{i}"), hold))
                    .await
                    .map(drop)
            }
        }));
        until_held_or_waiting(&app, &db, 1 + u64::try_from(calls.len()).unwrap()).await;
    }
    assert_eq!(calls.len(), 15);

    let sent = Instant::now();
    let charged = app
        .client()
        .await
        .charge(with_deadline(charge("other", other, 1), DEADLINE))
        .await;
    let took = sent.elapsed();
    assert!(
        charged.is_ok() && took <= ANSWERED_WITHIN,
        "the charge on another account was answered after {took:?}: {charged:?}"
    );

    holder.query_drop("ROLLBACK").await.unwrap();
    for call in calls {
        call.await.unwrap().expect("served once the row is free");
    }
    // 5 charges and the stalled one, 5 refunds back, 5 captures.
    assert_eq!(db.balance(stalled).await, 1_000 - 5 - 1 + 5 - 5);
}

/// With four writers, transfers into a stalled account from accounts whose
/// calls go to another writer are held back there, and charges on that writer's
/// other accounts, sent in the same burst, are served at once. Forced as for the
/// refunds: the burst queues behind a batch its writer waits on. A writer that
/// knew only its own stalls would put the transfers in the charges' batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_into_a_stalled_account_are_held_back_in_every_writer() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(4, Some(LONG_STALL))).await;
    let (stalled, beside) = beside_another_writer(&app, 17).await;
    let (sources, rest) = beside.split_at(8);
    let (others, busy) = rest.split_at(8);
    let spare = in_writer_of(&app, stalled).await;

    let mut holder = app.busy_writer_on(&db, stalled).await;
    let mut busy_holder = stall_then_keep_busy(&app, &db, spare, busy[0]).await;
    let client = app.client().await;
    let transfers: Vec<_> = sources
        .iter()
        .enumerate()
        .map(|(i, &from)| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .transfer(transfer(&format!("in-{i}"), from, stalled, 10))
                    .await
            })
        })
        .collect();
    let charges = charge_each(&client, others, "other");
    app.until_queued(16).await;

    let released = Instant::now();
    busy_holder.query_drop("ROLLBACK").await.unwrap();
    assert_answered_within(charges, released).await;
    app.until_queued(8).await;

    holder.query_drop("ROLLBACK").await.unwrap();
    for transfer in transfers {
        transfer.await.unwrap().expect("moved once the row is free");
    }
    assert_eq!(db.balance(stalled).await, 100 - 1 + 8 * 10);
    for &source in sources {
        assert_eq!(db.balance(source).await, 90);
    }
}

/// A bound for the tests of when it is armed: long beside the few milliseconds
/// the test takes to stall a batch, short beside the lock wait.
const ARMED_BOUND: Duration = Duration::from_secs(1);

/// A batch that passed its stall bound with nothing waiting behind it is left to
/// run on apart as soon as a call comes: a charge on another account, sent long
/// after the bound, is answered at once rather than a bound later (or after the
/// lock wait, by a writer that never armed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_batch_past_its_bound_is_left_apart_when_a_call_comes() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(1, Some(ARMED_BOUND))).await;
    let stalled = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let mut holder = app.busy_writer_on(&db, stalled).await;
    // Time the writer measures on the runtime's real clock, which cannot be
    // paused under real I/O: when the bound passes with no call behind the
    // batch nothing happens, so there is nothing to wait for but the time.
    tokio::time::sleep(2 * ARMED_BOUND).await;

    let sent = Instant::now();
    let charges = charge_each(&app.client().await, &[other], "other");
    assert_answered_within(charges, sent).await;
    holder.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(db.balance(other).await, 99);
}

/// The stall bound counts from the batch's start, not from the call that arms
/// it: a charge on another account sent halfway through the bound is answered
/// when the bound passes, half a bound later, not a whole one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_stall_bound_counts_from_the_batch_not_from_the_call_that_arms_it() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(1, Some(ARMED_BOUND))).await;
    let stalled = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let client = app.client().await;
    let before = Instant::now();
    let mut holder = app.busy_writer_on(&db, stalled).await;
    let waiting = Instant::now();
    assert!(
        waiting - before < ARMED_BOUND / 4,
        "stalling the batch took {:?}",
        waiting - before
    );
    // Halfway through the bound the writer measures from the batch's start:
    // the instant is the test's point, not a condition to wait for.
    tokio::time::sleep_until(before + ARMED_BOUND / 2).await;

    let sent = Instant::now();
    let charge = charge_each(&client, &[other], "other").pop().unwrap();
    let (_, reply, at) = charge.await.unwrap();
    reply.expect("charged once the stalled batch runs on apart");
    assert!(
        at >= before + ARMED_BOUND,
        "answered {:?} after the batch, before its bound",
        at - before
    );
    // Counted from the call, the bound would end a whole bound after it.
    assert!(
        at < sent + ARMED_BOUND,
        "answered {:?} after the call: the bound counted from the call",
        at - sent
    );
    holder.query_drop("ROLLBACK").await.unwrap();
}

/// A measurement, not a check: the latency of charges on eight accounts while
/// another account's row is held 5 s by an outside transaction and calls that
/// touch it keep coming: refunds of its charges 30 ms apart for half the hold,
/// then every 250 ms a burst of eight refunds and four transfers into it from
/// accounts with lower ids. Each of the eight is charged by a client of its own,
/// one call after another. Prints, for one writer and for four, the p50, p99
/// and longest wait of the charges sent during the hold:
///
///     cargo test --test api -- --ignored --nocapture stalls::latency
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn latency_of_other_accounts_during_a_stall() {
    for n in [1, 4] {
        measure_other_accounts(n, Touch::RefundsAndTransfers).await;
    }
}

/// [`latency_of_other_accounts_during_a_stall`], with what touches the held
/// account: a transfer into it, stalled on its row from the start, and every
/// 30 ms a burst of eight reversals of that transfer, still in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn latency_of_other_accounts_during_a_stall_with_reversals() {
    for n in [1, 4] {
        measure_other_accounts(n, Touch::ReversalsOfAStalledTransfer).await;
    }
}

/// What touches the held account in the measurement.
#[derive(Debug, Clone, Copy)]
enum Touch {
    RefundsAndTransfers,
    /// A transfer into it, waiting on its row before the reversals come.
    ReversalsOfAStalledTransfer,
}

async fn measure_other_accounts(n: usize, touch: Touch) {
    const HOLD: Duration = Duration::from_secs(5);
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, writers(n, None)).await;
    let mut sources = Vec::new();
    for _ in 0..4 {
        sources.push(app.funded_account("USD", 10_000).await);
    }
    let stalled = app.funded_account("USD", 10_000).await;
    let entries = charges_of(&app, stalled, "paid", 170).await;
    let mut others = Vec::new();
    for _ in 0..8 {
        others.push(app.funded_account("USD", 10_000).await);
    }

    let mut holder = db.lock_account(stalled).await;
    let until = Instant::now() + HOLD;
    let client = app.client().await;
    let charging: Vec<_> = others
        .iter()
        .map(|&account| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut waits = Vec::new();
                let mut i = 0;
                while Instant::now() < until {
                    let sent = Instant::now();
                    let key = format!("other-{account}-{i}");
                    client
                        .charge(charge(&key, account, 1))
                        .await
                        .expect("charged");
                    waits.push(sent.elapsed());
                    i += 1;
                }
                waits
            })
        })
        .collect();
    // On a connection of its own: a connection carries at most
    // --max-concurrent-streams calls, and the held calls would fill it.
    let client = app.client().await;
    let touching = match touch {
        Touch::RefundsAndTransfers => touch_until(&client, stalled, &entries, &sources, until),
        Touch::ReversalsOfAStalledTransfer => {
            let mut paying = client.clone();
            let pay = transfer("pay", sources[0], stalled, 1);
            let paid = tokio::spawn(async move { paying.transfer(pay).await.map(drop) });
            db.until_waiting_on("accounts", 1).await;
            reverse_until(&client, paid, until)
        }
    };
    // The measurement's length: the hold whose effect is measured.
    tokio::time::sleep_until(until).await;
    holder.query_drop("ROLLBACK").await.unwrap();

    let mut waits: Vec<Duration> = Vec::new();
    for charging in charging {
        waits.extend(charging.await.unwrap());
    }
    for call in touching.await.unwrap() {
        call.await.unwrap().expect("served once the row is free");
    }
    waits.sort_unstable();
    let per_mille = |share: usize| waits[(waits.len() - 1) * share / 1000];
    println!(
        "{n} writer(s), {HOLD:?} stall, {touch:?}: {} charges on 8 other accounts, p50 {:?}, p99 {:?}, max {:?}",
        waits.len(),
        per_mille(500),
        per_mille(990),
        per_mille(1000)
    );
}

/// The reversals of the measurement: every 30 ms eight reversals of the
/// transfer under `pay`, `paid`, under keys of their own, until `until`. One
/// reverses it; the others are ALREADY_REVERSED, which counts as served.
fn reverse_until(
    client: &Client,
    paid: JoinHandle<Result<(), tonic::Status>>,
    until: Instant,
) -> JoinHandle<Vec<JoinHandle<Result<(), tonic::Status>>>> {
    let client = client.clone();
    tokio::spawn(async move {
        let mut calls = vec![paid];
        let mut n = 0;
        while Instant::now() < until {
            for _ in 0..8 {
                let mut client = client.clone();
                let key = format!("undo-{n}");
                n += 1;
                calls.push(tokio::spawn(async move {
                    match client.reverse(reverse(&key, "pay")).await {
                        Err(status) if reason(&status) != "ALREADY_REVERSED" => Err(status),
                        _ => Ok(()),
                    }
                }));
            }
            // The measured load's pace.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        calls
    })
}

/// The calls that touch `stalled` in the measurement, until `until`; the task
/// ends with every call's task.
fn touch_until(
    client: &Client,
    stalled: u64,
    entries: &[u64],
    sources: &[u64],
    until: Instant,
) -> JoinHandle<Vec<JoinHandle<Result<(), tonic::Status>>>> {
    let client = client.clone();
    let entries = entries.to_vec();
    let sources = sources.to_vec();
    tokio::spawn(async move {
        let half = until - Duration::from_millis(2_500);
        let mut entries = entries.into_iter();
        let mut calls = Vec::new();
        let mut refund_next = |calls: &mut Vec<JoinHandle<Result<(), tonic::Status>>>| {
            if let Some(entry) = entries.next() {
                let mut client = client.clone();
                calls.push(tokio::spawn(async move {
                    let key = format!("back-{entry}");
                    client.refund(refund(&key, entry, 1)).await.map(drop)
                }));
            }
        };
        while Instant::now() < half {
            refund_next(&mut calls);
            // The measured load's pace.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let mut burst = 0;
        while Instant::now() < until {
            for _ in 0..8 {
                refund_next(&mut calls);
            }
            for &from in &sources {
                let mut client = client.clone();
                let key = format!("in-{from}-{burst}");
                calls.push(tokio::spawn(async move {
                    client
                        .transfer(transfer(&key, from, stalled, 1))
                        .await
                        .map(drop)
                }));
            }
            burst += 1;
            // The measured load's pace.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        calls
    })
}
