//! A `ledgerctl charge` killed after its request reached the service and before
//! the reply reached it: re-run with the key it printed, the charge is made once.

use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::ledgerctl;
use crate::support::server::until;
use crate::support::{Fault, FaultProxy, TestApp, TestDb};

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_charge_rerun_with_its_key_is_charged_once() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    // The first connection's reply is held at the proxy for ever.
    let proxy = FaultProxy::start(app.addr, |n| {
        if n == 0 {
            Fault::HoldReply
        } else {
            Fault::Pass
        }
    })
    .await;
    let charge = [
        "charge",
        "--account-id",
        &account.to_string(),
        "--amount-minor",
        "40",
        "--currency",
        "USD",
    ];

    let mut first = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledgerctl"))
        .args(charge)
        .args(["--server", &proxy.url(), "--timeout", "60s"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(first.stderr.take().unwrap()).lines();
    let line = stderr.next_line().await.unwrap().expect("a line");
    let key = line
        .strip_prefix("idempotency key: ")
        .expect("the key first")
        .to_owned();
    proxy.forwarded().await;
    // The charge committed; its reply is still held at the proxy.
    until("the first run's charge commits", async || {
        db.entries_for_key(&key).await == 1
    })
    .await;
    first.kill().await.unwrap();

    let again = ledgerctl(&app.url(), &[&charge[..], &["--key", &key]].concat()).await;

    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(again.stderr.contains("replayed"), "{}", again.stderr);
    assert!(
        !again.stderr.contains("idempotency key:"),
        "no new key was made"
    );
    assert_eq!(db.entries_for_key(&key).await, 1);
    assert_eq!(db.balance(account).await, 60);
}
