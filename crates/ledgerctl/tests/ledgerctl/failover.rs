//! A first server that takes calls and never answers them (its HTTP/2 layer
//! alive), a live one second: `ledgerctl` with its default budget moves on, for
//! a call and for `watch-entries`.

use std::time::Duration;

use crate::ledgerctl_within;
use crate::support::{TestApp, TestDb, WedgedServer};

#[tokio::test(flavor = "multi_thread")]
async fn a_charge_and_watch_entries_leave_a_server_that_never_answers() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await.to_string();
    let wedged = WedgedServer::start();
    let servers = format!("{},{}", wedged.url(), app.url());

    let charged = ledgerctl_within(
        &servers,
        &[
            "charge",
            "--key",
            "ctl-hangs",
            "--account-id",
            &account,
            "--amount-minor",
            "30",
            "--currency",
            "USD",
        ],
        Duration::from_secs(15),
    )
    .await;
    let watched = ledgerctl_within(
        &servers,
        &[
            "-o",
            "json",
            "watch-entries",
            "--after-sequence",
            "0",
            "--limit",
            "2",
        ],
        Duration::from_secs(15),
    )
    .await;

    assert_eq!(charged.code, Some(0), "{}", charged.stderr);
    assert_eq!(db.entries_for_key("ctl-hangs").await, 1);
    assert_eq!(watched.code, Some(0), "{}", watched.stderr);
    let sequences: Vec<serde_json::Value> = watched
        .stdout
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["sequence"].clone())
        .collect();
    assert_eq!(sequences, ["1", "2"], "the credit and the charge, in order");
    assert_eq!(
        wedged.taken(),
        2,
        "each process tried the wedged server first"
    );
}
