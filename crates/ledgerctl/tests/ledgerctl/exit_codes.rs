//! 0 success, 1 a final error, 75 the budget spent with the outcome unknown (and
//! the key to retry with printed).

use std::time::Duration;

use tokio::time::Instant;

use crate::ledgerctl;
use crate::support::{TestApp, TestDb};

#[tokio::test(flavor = "multi_thread")]
async fn success_is_0_and_a_decline_is_1() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 50).await.to_string();
    let charge = ["charge", "--account-id", &account, "--currency", "USD"];

    let ok = ledgerctl(&app.url(), &[&charge[..], &["--amount", "30"]].concat()).await;
    let declined = ledgerctl(&app.url(), &[&charge[..], &["--amount", "30"]].concat()).await;
    let invalid = ledgerctl(&app.url(), &[&charge[..], &["--amount", "0"]].concat()).await;

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
            "--amount",
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
