//! Balances at a point in the past (SPEC 3.10): exact, repeatable, and read
//! from the journal as it is.

use std::time::Duration;

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::Code;

use crate::support::balances::{
    Point, assert_every_point_replays, get_balance, micros, random_history, request, still_waiting,
};
use crate::support::proxy::Proxy;
use crate::support::server::server_url;
use crate::support::stream::until_sequenced;
const SEQUENCED_WITHIN: Duration = Duration::from_secs(20);

use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, charge, hex, limits, open_account, reason,
    set_limits,
};

/// A random history of charges, credits, transfers both ways and limit
/// changes, written through two instances by four callers at once (so some
/// calls share a batch and its instant): every point asked through either
/// instance, twice, equals a replay of the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_point_of_a_random_history_answers_what_a_replay_says() {
    let db = TestDb::new();
    let (a, b) = (TestApp::spawn(&db).await, TestApp::spawn(&db).await);
    let channels = [a.channel().await, b.channel().await];
    let history = random_history(&channels[0], &channels[1], 120, 0x0ba1_a9ce).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    assert_every_point_replays(&channels, &history).await;
    assert_audit_passes(&db.url).await;
}

/// An account with no entry yet stands at zero with its opening limits, now
/// and at any sequence reached; bad requests are refused with the field named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_account_before_its_first_entry_and_bad_requests() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let funded = app.funded_account("USD", 10).await;
    let opening = limits(Some(-50), None);
    let account = client
        .open_account(open_account("empty", Some(opening)))
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
        .account_id;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    let channel = app.channel().await;
    let funded_now = get_balance(&channel, funded, Point::Now).await.unwrap();
    let zero = pb::Balance {
        account_id: account,
        currency: "USD".into(),
        balance: 0,
        limits: Some(opening),
        sequence: 0,
        created_at: None,
    };
    for point in [Point::Now, Point::Sequence(funded_now.sequence)] {
        assert_eq!(
            get_balance(&channel, account, point).await.unwrap(),
            zero,
            "{point:?}"
        );
    }

    let field = |status: &tonic::Status| {
        use tonic_types::StatusExt as _;
        status
            .get_details_bad_request()
            .map(|b| {
                b.field_violations
                    .iter()
                    .map(|v| v.field.clone())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let status = get_balance(&channel, 0, Point::Now).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(field(&status), ["account_id"]);
    let mut bad_time = request(account, Point::Micros(1_000_000));
    bad_time.as_of_time.as_mut().unwrap().nanos = 1_000_000_000;
    let status = client.get_balance(bad_time).await.unwrap_err();
    assert_eq!(field(&status), ["as_of_time"]);
    let both = pb::GetBalanceRequest {
        as_of_sequence: 1,
        ..request(account, Point::Micros(1_000_000))
    };
    let status = client.get_balance(both).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(field(&status), ["as_of_time"]);
    let status = get_balance(&channel, 987_654, Point::Now)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(reason(&status), "ACCOUNT_NOT_FOUND");
}

/// A balance for a time just after a charge's stamp, asked while that charge's
/// COMMIT is held back by a proxy, waits for it (the charge holds the account's
/// lock) and includes it; a charge after the answer is stamped after the point.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_balance_at_a_time_waits_for_a_commit_stamped_before_it() {
    let db = TestDb::new();
    let proxy = Proxy::start(&server_url()).await;
    let late = TestApp::spawn_with(
        &db,
        Config {
            database_url: Some(proxy.url(&server_url(), &db.name)),
            ..Config::default()
        },
    )
    .await;
    let prompt = TestApp::spawn(&db).await;
    let account = prompt.funded_account("USD", 100).await;

    let held = proxy.hold_query(&[&hex("held"), "COMMIT"], Duration::from_secs(3));
    let mut client = late.client().await;
    let call = tokio::spawn(async move { client.charge(charge("held", account, 5)).await });
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the held charge's COMMIT reaches the proxy");
    // The charge was stamped before its COMMIT was sent: at or before now.
    let now: (i64,) = db
        .sql()
        .await
        .query_first("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))")
        .await
        .unwrap()
        .unwrap();
    let channel = prompt.channel().await;
    let mut asked = tokio::spawn({
        let channel = channel.clone();
        async move { get_balance(&channel, account, Point::Micros(now.0)).await }
    });
    still_waiting(&mut asked, Duration::from_millis(500)).await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE idempotency_key = 'held'")
            .await,
        0,
        "the charge has not committed while the balance waits"
    );
    let entry = call.await.unwrap().unwrap().into_inner().entry.unwrap();
    let answer = asked.await.unwrap().unwrap();
    assert_eq!(answer.balance, 95, "the balance includes the held charge");
    assert_eq!(answer.created_at, entry.created_at);
    assert!(micros(entry.created_at.as_ref().unwrap()) <= now.0);

    let mut client = prompt.client().await;
    let after = client
        .charge(charge("after", account, 1))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    assert!(micros(after.created_at.as_ref().unwrap()) > now.0);
    let again = get_balance(&channel, account, Point::Micros(now.0))
        .await
        .unwrap();
    assert_eq!(again, answer, "the same answer for the same point");
}

/// An account whose journal was stamped ahead of this server's clock (as
/// through a node whose clock is ahead) gets its next entries stamped at that
/// time, never earlier: `created_at` never goes backwards along a journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn entries_are_stamped_no_earlier_than_the_accounts_last_time() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let ahead: (i64,) = db
        .sql()
        .await
        .query_first("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) + 5000000")
        .await
        .unwrap()
        .unwrap();
    db.sql()
        .await
        .exec_drop(
            "UPDATE accounts SET stamped_at = TIMESTAMPADD(MICROSECOND, ?, '1970-01-01') \
             WHERE account_id = ?",
            (ahead.0, account),
        )
        .await
        .unwrap();
    let mut client = app.client().await;
    let mut stamps = Vec::new();
    for i in 0..3 {
        let debit = client
            .transfer(crate::support::transfer(
                &format!("t-{i}"),
                account,
                other,
                1,
            ))
            .await
            .unwrap()
            .into_inner();
        let (d, c) = (debit.debit.unwrap(), debit.credit.unwrap());
        assert_eq!(d.created_at, c.created_at, "one instant per transaction");
        stamps.push(micros(d.created_at.as_ref().unwrap()));
    }
    assert!(
        stamps[0] >= ahead.0,
        "{} stamped at the account's time {}",
        stamps[0],
        ahead.0
    );
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    client
        .set_limits(set_limits("l", account, limits(Some(-10), None)))
        .await
        .unwrap();
    assert_audit_passes(&db.url).await;
}
