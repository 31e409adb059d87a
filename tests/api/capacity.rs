//! What an instance takes on at once. The memory budget of calls in flight
//! (`--max-call-memory`): each call is weighed by its request's size before the
//! request is read, waits for room in order of arrival within its deadline, and
//! is refused having done nothing when none comes; the tests fill the budget with
//! charges parked on a row an outside transaction holds, so it is full for as
//! long as a test says. And the client connections (`--max-connections`): one
//! past the limit waits to be accepted until another closes.

use std::time::{Duration, Instant};

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::Code;

use crate::support::{
    Config, TestApp, TestDb, charge, charge_refused_for_room, leg, open_funded, park_charges, post,
    reason, silent_call, with_deadline,
};

/// Three parked charges of a few bytes each (8 KiB and 32 bytes per byte of
/// request: 9 KiB each) fill it; a fourth does not fit.
const BUDGET: usize = 30 * 1024;

async fn app(db: &TestDb) -> TestApp {
    TestApp::spawn_with(
        db,
        Config {
            max_call_memory: Some(BUDGET),
            ..Config::default()
        },
    )
    .await
}

/// With the budget full, a call on another account waits for room until its
/// deadline, then is refused with RESOURCE_EXHAUSTED / TOO_MANY_CALLS, having
/// recorded nothing; the parked calls are served once their row is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_does_not_fit_waits_within_its_deadline_then_is_refused() {
    let db = TestDb::new();
    let app = app(&db).await;
    let parked_on = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let (mut holder, parked) = park_charges(&app, &db, parked_on, 3).await;

    let started = Instant::now();
    let refused = charge_refused_for_room(&app, other).await;
    let waited = started.elapsed();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::ResourceExhausted, "TOO_MANY_CALLS"),
        "{refused:?}"
    );
    assert!(
        refused.message().contains("KiB of calls in flight"),
        "{}",
        refused.message()
    );
    assert!(
        waited >= Duration::from_millis(1500),
        "refused after {waited:?}: it did not wait for room"
    );
    assert_eq!(db.key_rows("late").await, 0);
    assert_eq!(db.balance(other).await, 100);

    holder.query_drop("ROLLBACK").await.unwrap();
    for call in parked {
        call.await.unwrap().expect("the parked calls are served");
    }
    assert_eq!(db.balance(parked_on).await, 97);
}

/// A call that arrives while the budget is full is served when room comes: the
/// parked calls end, and it takes their place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waits_for_room_is_served_when_it_comes() {
    let db = TestDb::new();
    let app = app(&db).await;
    let parked_on = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let (mut holder, parked) = park_charges(&app, &db, parked_on, 3).await;

    let channel = app.channel().await;
    let waiting = tokio::spawn(async move {
        pb::ledger_client::LedgerClient::new(channel)
            .charge(with_deadline(
                charge("waits", other, 5),
                Duration::from_secs(20),
            ))
            .await
    });
    // While the budget is full it waits for room, and has not reached its key,
    // on an account nobody holds.
    app.until_waiting_for_room(1).await;
    assert!(!waiting.is_finished());
    assert_eq!(db.key_rows("waits").await, 0);

    holder.query_drop("ROLLBACK").await.unwrap();
    for call in parked {
        call.await.unwrap().expect("the parked calls are served");
    }
    waiting.await.unwrap().expect("served once room came");
    assert_eq!(db.balance(other).await, 95);
}

/// A call weighed at more than the whole budget is served alone: it waits for
/// the whole budget, not for room that can never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_heavier_than_the_budget_is_served_alone() {
    let db = TestDb::new();
    let app = app(&db).await;
    let from = app.funded_account("USD", 1_000).await;
    let to = app.funded_account("USD", 0).await;
    // 256 legs: about 3 KB on the wire, weighed at some 100 KiB.
    let legs = (0..256).map(|_| leg(from, to, 1)).collect();
    app.client()
        .await
        .post(post("heavy", legs))
        .await
        .expect("served alone");
    assert_eq!(db.balance(to).await, 256);
}

/// At `--max-connections`, a further connection is not served until one of
/// those open closes; then it is, and its call with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_limit_waits_until_one_closes() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            max_connections: Some(1),
            ..Config::default()
        },
    )
    .await;
    let first = app.channel().await;
    let account = open_funded(
        &mut pb::ledger_client::LedgerClient::new(first.clone()),
        "first",
        "USD",
        100,
    )
    .await;

    let second = app.channel().await;
    let waiting = tokio::spawn(async move {
        pb::ledger_client::LedgerClient::new(second)
            .charge(charge("second", account, 1))
            .await
    });
    // The only place is the first connection's. A window, not a condition: the
    // connection waits unaccepted in the kernel's backlog, where nothing shows
    // it will not be served until it is.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    assert_eq!(db.key_rows("second").await, 0);

    drop(first);
    let served = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("served once the first connection closed");
    served.unwrap().expect("charged");
    assert_eq!(db.balance(account).await, 99);
}

/// A call is counted before its request is read; one whose request never
/// comes holds its place only for as long as a call may wait to be admitted
/// (without a deadline, `--pool-timeout`), then is refused with
/// DEADLINE_EXCEEDED, and the place serves the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_request_never_comes_gives_its_place_back() {
    const WAIT: Duration = Duration::from_secs(5);
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            max_concurrent_calls: Some(1),
            pool_timeout: WAIT,
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let channel = app.channel().await;
    let mut client = app.client().await;
    let read = || pb::GetAccountRequest {
        account_id: account,
    };
    // The silent call takes the one place unless a probe holds it when it
    // arrives (then it is refused, and sent again); a probe refused while the
    // silent call is in flight finds the place held by it.
    let begun = Instant::now();
    let (silent, started) = loop {
        assert!(
            begun.elapsed() < WAIT * 6,
            "the silent call never held the place"
        );
        let started = Instant::now();
        let silent = tokio::spawn(silent_call(channel.clone(), "Charge", None));
        let held = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if silent.is_finished() {
                break false;
            }
            if let Err(refused) = client.get_account(read()).await {
                assert_eq!(
                    (refused.code(), reason(&refused).as_str()),
                    (Code::ResourceExhausted, "TOO_MANY_CALLS")
                );
                break !silent.is_finished();
            }
        };
        if held {
            break (silent, started);
        }
        let status = silent.await.unwrap().unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    };

    let status = tokio::time::timeout(WAIT * 2, silent)
        .await
        .expect("refused after --pool-timeout")
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(started.elapsed() >= WAIT);
    client
        .charge(charge("after", account, 1))
        .await
        .expect("the place came back");
}
