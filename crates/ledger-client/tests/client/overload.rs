//! An instance at its limit of calls or of watchers refuses at the door with
//! `RESOURCE_EXHAUSTED` / `TOO_MANY_CALLS`, nothing recorded (SPEC 3.6): a call
//! is retried with the same bytes until it is taken, and a watcher moves on.

use std::time::Duration;

use ledger_client::{Client, pb};
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::support::server::until;
use crate::support::{Busy, Fault, FaultProxy, TestApp, TestDb};

/// The only place is taken; the charge is refused, retried (each attempt is a
/// connection of its own at the proxy), and taken once the place is free,
/// within its budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_refused_at_the_door_is_retried_until_it_is_taken() {
    let db = TestDb::new();
    let busy = Busy::start(&db).await;
    assert_eq!(
        busy.asked_once().await,
        (Code::ResourceExhausted, "TOO_MANY_CALLS".to_owned())
    );
    let proxy = FaultProxy::start(busy.app.addr, |_| Fault::Pass).await;
    let client = Client::builder().endpoint(proxy.url()).build().unwrap();
    let account = busy.free_account;
    let call = tokio::spawn(async move {
        client
            .charge(pb::ChargeRequest {
                idempotency_key: "overload-1".into(),
                account_id: account,
                amount: 3,
                currency: "USD".into(),
                description: String::new(),
                ..Default::default()
            })
            .await
    });

    until("a second attempt, or the call's end", async || {
        proxy
            .counts()
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
            || call.is_finished()
    })
    .await;
    assert!(
        !call.is_finished(),
        "the call ended at its first refusal: {:?}",
        call.await
    );
    assert_eq!(db.key_rows("overload-1").await, 0, "nothing recorded yet");
    let _app = busy.release().await;
    let answer = call.await.unwrap().expect("taken once the place was free");

    assert!(answer.attempts >= 2, "{}", answer.attempts);
    assert!(!answer.replayed);
    assert_eq!(db.entries_for_key("overload-1").await, 1);
    assert_eq!(db.balance(account).await, 97);
}

/// The first endpoint is at its limit of watchers (filled with quiet streams
/// until it refused one); the watcher streams the backlog from the second.
#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_moves_from_an_instance_at_its_limit_of_watchers() {
    let db = TestDb::new();
    let full = TestApp::spawn_with(&db, |settings| {
        settings.max_concurrent_streams = 4096;
    })
    .await;
    let other = TestApp::spawn(&db).await;
    for _ in 0..3 {
        other.funded_account("USD", 10).await;
    }
    let mut raw = pb::ledger_client::LedgerClient::connect(full.url())
        .await
        .unwrap();
    let mut quiet = Vec::new();
    let refused = loop {
        assert!(quiet.len() < 4000, "no limit of watchers met");
        // Past the ledger's end: these streams send nothing.
        let past_the_end = pb::WatchEntriesRequest {
            after_sequence: 1_000_000,
            account_id: 0,
        };
        match raw.watch_entries(past_the_end).await {
            Ok(stream) => quiet.push(stream.into_inner()),
            Err(status) => break status,
        }
    };
    let reason = refused.get_details_error_info().map(|info| info.reason);
    assert_eq!(
        (refused.code(), reason.as_deref()),
        (Code::ResourceExhausted, Some("TOO_MANY_CALLS"))
    );
    let client = Client::builder()
        .endpoint(full.url())
        .endpoint(other.url())
        .build()
        .unwrap();
    let mut watcher = client.watch(0, 0);

    let backlog = tokio::time::timeout(Duration::from_secs(10), async {
        let mut sequences = Vec::new();
        for _ in 0..3 {
            sequences.push(watcher.next().await.unwrap().sequence);
        }
        sequences
    })
    .await
    .expect("the backlog from the second instance");

    assert_eq!(backlog, [1, 2, 3]);
    eprintln!(
        "the first instance refused its watcher number {}",
        quiet.len() + 1
    );
}
