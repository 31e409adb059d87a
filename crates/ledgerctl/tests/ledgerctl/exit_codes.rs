//! 0 success, 1 a final error, 75 the budget spent with the outcome unknown (and
//! the key to retry with printed): also when the server refused every attempt
//! for its load, which is not final.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::ledgerctl;
use crate::support::server::until;
use crate::support::{Busy, Fault, FaultProxy, TestApp, TestDb};

#[tokio::test(flavor = "multi_thread")]
async fn success_is_0_and_a_decline_is_1() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 50).await.to_string();
    let charge = ["charge", "--account-id", &account, "--currency", "USD"];

    let ok = ledgerctl(
        &app.url(),
        &[&charge[..], &["--amount-minor", "30"]].concat(),
    )
    .await;
    let declined = ledgerctl(
        &app.url(),
        &[&charge[..], &["--amount-minor", "30"]].concat(),
    )
    .await;
    let invalid = ledgerctl(
        &app.url(),
        &[&charge[..], &["--amount-minor", "0"]].concat(),
    )
    .await;

    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    assert_eq!(declined.code, Some(1), "{}", declined.stderr);
    assert!(
        declined.stderr.contains("INSUFFICIENT_FUNDS"),
        "{}",
        declined.stderr
    );
    assert_eq!(invalid.code, Some(1), "{}", invalid.stderr);
    assert!(invalid.stderr.contains("amount"), "{}", invalid.stderr);
    assert_eq!(db.balance(account.parse().unwrap()).await, 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_listening_is_75_with_the_key_to_retry_with() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let run = ledgerctl(
        &format!("http://127.0.0.1:{port}"),
        &[
            "charge",
            "--account-id",
            "1",
            "--amount-minor",
            "5",
            "--currency",
            "USD",
            "--timeout",
            "2s",
        ],
    )
    .await;
    let took = started.elapsed();

    assert_eq!(run.code, Some(75), "{}", run.stderr);
    let made = run
        .stderr
        .lines()
        .find_map(|line| line.strip_prefix("idempotency key: "))
        .expect("the key, printed before the first attempt");
    assert!(
        run.stderr.contains(&format!("--key {made}")),
        "{}",
        run.stderr
    );
    assert!(took < Duration::from_secs(4), "{took:?}: within the budget");
}

/// `--max-concurrent-calls 1`, its place taken by a charge parked behind an
/// outside lock: refused at every attempt of a 2 s budget, ledgerctl exits 75
/// with nothing recorded; a run whose budget outlasts the lock exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn an_instance_at_its_limit_is_75_only_once_the_budget_is_spent() {
    let db = TestDb::new();
    let busy = Busy::start(&db).await;
    let account_id = busy.free_account;
    let account = account_id.to_string();
    let charge = |key: &str, timeout: &str| {
        [
            "charge",
            "--key",
            key,
            "--account-id",
            &account,
            "--amount-minor",
            "5",
            "--currency",
            "USD",
            "--timeout",
            timeout,
        ]
        .map(str::to_owned)
    };

    let started = Instant::now();
    let spent = ledgerctl(
        &busy.app.url(),
        &charge("ctl-full", "2s").each_ref().map(String::as_str),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(spent.code, Some(75), "{}", spent.stderr);
    assert!(spent.stderr.contains("--key ctl-full"), "{}", spent.stderr);
    assert!(took < Duration::from_secs(4), "{took:?}: within the budget");
    assert_eq!(db.key_rows("ctl-full").await, 0, "nothing recorded");

    // Each attempt is a connection of its own at the proxy: a second one means
    // the first was refused and retried.
    let proxy = FaultProxy::start(busy.app.addr, |_| Fault::Pass).await;
    let url = proxy.url();
    let args = charge("ctl-later", "20s");
    let run =
        tokio::spawn(async move { ledgerctl(&url, &args.each_ref().map(String::as_str)).await });
    until("a second attempt, or ledgerctl's end", async || {
        proxy.counts().connections.load(Ordering::Relaxed) >= 2 || run.is_finished()
    })
    .await;
    assert!(!run.is_finished(), "ledgerctl ended at its first refusal");
    let _app = busy.release().await;
    let taken = run.await.unwrap();

    assert_eq!(taken.code, Some(0), "{}", taken.stderr);
    assert_eq!(db.entries_for_key("ctl-later").await, 1);
    assert_eq!(db.balance(account_id).await, 95);
}
