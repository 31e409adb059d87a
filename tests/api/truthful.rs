//! Every answer tells the truth about what committed (SPEC 3.6), also when the
//! network loses a COMMIT's answer or the database falls silent; and what each
//! client and the server as a whole are allowed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ledger::db::MultiPrimary;
use ledger::grpc::auth::Tokens;
use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::support::proxy::Proxy;
use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, charge, park_charges, reason, replayed,
    run_ledger, token_line, until_health, until_in_flight, with_deadline, with_token,
};

const NOTHING: &str = "nothing was recorded";

/// The retryable codes of SPEC 3.6.
fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Aborted | Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
    )
}

/// A service whose connections go through a proxy to the test database.
async fn behind_proxy(db: &TestDb, config: Config) -> (Proxy, TestApp) {
    let proxy = Proxy::start(db.server()).await;
    let config = Config {
        database_url: Some(proxy.url(db.server(), &db.name)),
        ..config
    };
    let app = TestApp::spawn_with(db, config).await;
    (proxy, app)
}

/// The COMMIT batch goes through and the database's answer is lost, the
/// connection cut at points before and after the caller's 1 s deadline. No
/// answer claims nothing was recorded (it was); a retry with the same key
/// replays; each key debits once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_whose_answer_is_lost_is_never_called_nothing() {
    let db = TestDb::new();
    let (proxy, app) = behind_proxy(&db, Config::default()).await;
    let account = app.funded_account("USD", 1_000).await;
    let mut client = app.client().await;
    let cuts = [100, 400, 700, 900, 950, 1100, 1500];
    for (i, after) in cuts.iter().enumerate() {
        let key = format!("lost-{i}");
        let forwarded =
            // The final batch: on a single server it stores the outcomes with one upsert.
            proxy.cut_after_forwarding("VALUES(outcome_code)", Duration::from_millis(*after));
        let request = with_deadline(charge(&key, account, 10), Duration::from_secs(1));
        let answer = client.charge(request).await;
        tokio::time::timeout(Duration::from_secs(5), forwarded.notified())
            .await
            .expect("the COMMIT went out");
        if let Err(status) = &answer {
            assert!(retryable(status.code()), "cut after {after} ms: {status:?}");
            assert!(
                !status.message().contains(NOTHING),
                "cut after {after} ms: {status:?}"
            );
        }
        let retry = client.charge(charge(&key, account, 10)).await.unwrap();
        assert!(replayed(retry.metadata()), "cut after {after} ms");
        assert_eq!(db.entries_for_key(&key).await, 1);
    }
    let charged = i64::try_from(cuts.len()).unwrap() * 10;
    assert_eq!(db.balance(account).await, 1_000 - charged);
}

/// The database falls silent (a partition: nothing delivered, nothing refused)
/// while calls are parked on a locked account, in the middle of statements, and
/// arriving: the service answers each within 15 s of its start although each has
/// a 30 s deadline, health goes NOT_SERVING, and it serves again once the
/// network is back. Every answer that says nothing was recorded is true.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_database_is_answered_for_and_recovered_from() {
    let db = TestDb::new();
    let config = Config {
        lock_wait: Duration::from_secs(5),
        pool_timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let (proxy, app) = behind_proxy(&db, config).await;
    let parked_on = app.funded_account("USD", 1_000_000).await;
    let busy = app.funded_account("USD", 1_000_000).await;
    let mut holder = db.lock_account(parked_on).await;

    let channel = app.channel().await;
    let call = |key: String, account: u64| {
        let channel = channel.clone();
        async move {
            let mut client = pb::ledger_client::LedgerClient::new(channel);
            let started = Instant::now();
            let request = with_deadline(charge(&key, account, 1), Duration::from_secs(30));
            let answer = client.charge(request).await;
            (key, started.elapsed(), answer.map(drop))
        }
    };
    let mut calls = Vec::new();
    for i in 0..4 {
        calls.push(tokio::spawn(call(format!("parked-{i}"), parked_on)));
    }
    until_in_flight(&db, &[&app], "parked-%", 4).await;
    db.until_waiting_on("accounts", 1).await;
    for i in 0..6 {
        calls.push(tokio::spawn(call(format!("busy-{i}"), busy)));
    }
    proxy.black_hole();
    for i in 0..4 {
        calls.push(tokio::spawn(call(format!("during-{i}"), busy)));
    }
    until_health(app.addr, ServingStatus::NotServing).await;

    let mut answers = BTreeMap::new();
    for c in calls {
        let (key, took, answer) = c.await.unwrap();
        assert!(took < Duration::from_secs(15), "{key} took {took:?}");
        answers.insert(key, answer);
    }
    proxy.resume();
    holder.query_drop("ROLLBACK").await.unwrap();
    until_health(app.addr, ServingStatus::Serving).await;
    app.client()
        .await
        .charge(charge("after", busy, 1))
        .await
        .expect("serving again");

    let mut client = app.client().await;
    for (key, answer) in &answers {
        let account = if key.starts_with("parked") {
            parked_on
        } else {
            busy
        };
        match answer {
            Ok(()) => assert_eq!(db.entries_for_key(key).await, 1, "{key}"),
            Err(status) => {
                assert!(retryable(status.code()), "{key}: {status:?}");
                if status.message().contains(NOTHING) {
                    assert_eq!(db.key_rows(key).await, 0, "{key}: {status:?}");
                }
                client
                    .charge(charge(key, account, 1))
                    .await
                    .expect("a retry settles it");
                assert_eq!(db.entries_for_key(key).await, 1, "{key}");
            }
        }
    }
    assert_audit_passes(&db.url).await;
}

/// An account with every privilege the service needs to serve (the self-check's
/// temporary table included), but EXECUTE only if asked; returns its URL.
async fn least_privileged(db: &TestDb, execute: bool) -> String {
    let user = format!("svc{:x}", rand::random::<u32>());
    let mut root = db.sql().await;
    root.query_drop(format!("CREATE USER '{user}'@'%'"))
        .await
        .unwrap();
    root.query_drop(format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES ON `{}`.* TO '{user}'@'%'",
        db.name
    ))
    .await
    .unwrap();
    if execute {
        // On the procedure itself, so a REVOKE applies to open sessions at once.
        root.query_drop(format!(
            "GRANT EXECUTE ON PROCEDURE `{}`.ledger_require_committed TO '{user}'@'%'",
            db.name
        ))
        .await
        .unwrap();
    }
    let server = mysql_async::Opts::from_url(db.server()).unwrap();
    format!(
        "mysql://{user}@{}:{}/{}",
        server.ip_or_hostname(),
        server.tcp_port(),
        db.name
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_primary_node_without_execute_refuses_to_start() {
    let db = TestDb::new();
    let _migrated = TestApp::spawn(&db).await;
    let url = least_privileged(&db, false).await;
    let (code, stderr) = run_ledger(&[
        "serve",
        "--database-url",
        &url,
        "--no-migrate",
        "--multi-primary",
        "on",
        "--listen",
        "127.0.0.1:0",
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("EXECUTE"), "{stderr}");
}

/// The check after COMMIT fails for want of EXECUTE (revoked while serving):
/// the writes committed, so the call is settled through its key and answered
/// with its outcome, never INTERNAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_failing_after_commit_ends_as_a_replay() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let url = least_privileged(&db, true).await;
    let guarded = TestApp::spawn_with(
        &db,
        Config {
            database_url: Some(url.clone()),
            multi_primary: Some(MultiPrimary::On),
            migrate: Some(false),
            pool_size: 1,
            ..Config::default()
        },
    )
    .await;
    let mut client = guarded.client().await;
    client.charge(charge("before", account, 10)).await.unwrap();
    let user = url
        .trim_start_matches("mysql://")
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    db.sql()
        .await
        .query_drop(format!(
            "REVOKE EXECUTE ON PROCEDURE `{}`.ledger_require_committed FROM '{user}'@'%'",
            db.name
        ))
        .await
        .unwrap();
    let answer = client.charge(charge("after-revoke", account, 10)).await;
    let reply = answer.expect("settled through the key, not INTERNAL");
    assert!(
        replayed(reply.metadata()),
        "its own commit, found by the retry"
    );
    assert_eq!(db.entries_for_key("after-revoke").await, 1);
    assert_eq!(db.balance(account).await, 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_init_that_turns_transactions_off_refuses_to_start() {
    let db = TestDb::new();
    let (code, stderr) = run_ledger(&[
        "serve",
        "--database-url",
        &db.url,
        "--session-init",
        "SET autocommit=1",
        "--listen",
        "127.0.0.1:0",
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("autocommit on"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_client_can_read_and_change_nothing() {
    let db = TestDb::new();
    let lines = token_line("teller", "teller-token")
        + &token_line("auditor", "auditor-token")
            .replace('\n', " GetAccount,GetEntry,ListEntries,GetHold,LookupKey\n");
    let app = TestApp::spawn_with(
        &db,
        Config {
            auth: Some(Tokens::parse(&lines).unwrap()),
            ..Config::default()
        },
    )
    .await;
    let mut teller = with_token(app.channel().await, "teller-token");
    let mut auditor = with_token(app.channel().await, "auditor-token");
    let account = teller
        .open_account(pb::OpenAccountRequest {
            idempotency_key: "open".into(),
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
        .account_id;
    teller
        .credit(crate::support::credit("fund", account, 100))
        .await
        .unwrap();

    let denied = auditor
        .charge(charge("audit-charge", account, 1))
        .await
        .unwrap_err();
    assert_eq!(
        (denied.code(), reason(&denied).as_str()),
        (Code::PermissionDenied, "METHOD_NOT_ALLOWED")
    );
    assert_eq!(db.key_rows("audit-charge").await, 0);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        0
    );
    let read = auditor
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.balance, 100);
}

/// Past its limit of concurrent calls the server refuses new ones at once with
/// RESOURCE_EXHAUSTED, and serves those it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_limit_are_refused_not_queued() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            max_concurrent_calls: Some(3),
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    // All three are in flight, waiting for the account.
    let (mut holder, parked) = park_charges(&app, &db, account, 3).await;
    let started = Instant::now();
    let refused = app
        .client()
        .await
        .charge(charge("fourth", account, 1))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::ResourceExhausted, "TOO_MANY_CALLS")
    );
    assert_eq!(db.key_rows("fourth").await, 0);
    holder.query_drop("ROLLBACK").await.unwrap();
    for call in parked {
        call.await.unwrap().expect("the calls taken are served");
    }
}

/// A retry of a key that committed, waiting behind other calls on its account
/// (queued for the account's group-commit writer, which waits on the account's
/// row lock) until its deadline passes, is not told that nothing was recorded:
/// it never reached the key's row, and the key had committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_never_reached_its_key_promises_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client.charge(charge("k", account, 10)).await.unwrap();

    // Two new charges wait on the account, held by an outside transaction.
    let mut holder = db.lock_account(account).await;
    // The first holds the account's writer, waiting for the row; the second
    // queues behind it.
    let park = |key: &'static str| {
        let mut client = client.clone();
        tokio::spawn(async move { client.charge(charge(key, account, 1)).await })
    };
    let mut parked = vec![park("new-1")];
    db.until_waiting_on("accounts", 1).await;
    parked.push(park("new-2"));
    app.until_queued(1).await;

    let retry = client
        .charge(with_deadline(
            charge("k", account, 10),
            Duration::from_millis(300),
        ))
        .await;
    let status = retry.expect_err("the retry waits behind the parked calls");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(!status.message().contains(NOTHING), "{}", status.message());
    assert!(
        status.message().contains("not known"),
        "{}",
        status.message()
    );
    // A second retry while the first still waits in the queue goes to the
    // database alone, where the key's row answers at once.
    let again = client.charge(charge("k", account, 10)).await.unwrap();
    assert!(replayed(again.metadata()));
    holder.query_drop("ROLLBACK").await.unwrap();
    for call in parked {
        call.await.unwrap().unwrap();
    }
    assert_eq!(db.balance(account).await, 88);
}
