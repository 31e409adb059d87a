//! Prometheus metrics, scraped over HTTP after calls whose counts are known. A
//! test binary of its own: the metrics recorder is global to a process, so no
//! other test may record into it.

#![allow(unreachable_pub, missing_debug_implementations, dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use support::{
    Config, Gate, TestApp, TestDb, charge, charge_refused_for_room, leg, number_entries,
    park_charges, post, raw_call, scrape,
};

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_calls_replays_reuses_lock_waits_and_retries() {
    let db = TestDb::new();
    let metrics = free_addr();
    let gate = Gate::new("rb");
    let config = Config {
        metrics_listen: Some(metrics),
        lock_wait: Duration::from_secs(1),
        pool_size: 12,
        gate: Some(gate.clone()),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    // The first instance numbers the stream, and records its metrics.
    let other = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 12,
            stream_assigner: Some(false),
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 1_000).await;
    known_calls(&db, &app, account).await;
    deadlock_retries(&db, &app, &other, &gate, account).await;
    let (_watching, watched) = watch_everything(&db, &app).await;

    let m = scrape(metrics).await;
    let value = |series: &str| m.get(series).copied().unwrap_or(0);
    assert_eq!(
        value(r#"ledger_rpcs_total{method="OpenAccount",code="OK"}"#),
        1
    );
    assert_eq!(value(r#"ledger_rpcs_total{method="Credit",code="OK"}"#), 1);
    assert_eq!(
        value(r#"ledger_rpcs_total{method="GetAccount",code="OK"}"#),
        1
    );
    assert_eq!(
        value(r#"ledger_rpcs_total{method="Charge",code="OK"}"#),
        8,
        "c1 twice, 6 duplicates"
    );
    assert_eq!(
        value(r#"ledger_rpcs_total{method="Charge",code="FAILED_PRECONDITION"}"#),
        1
    );
    assert_eq!(
        value(r#"ledger_rpcs_total{method="Charge",code="INVALID_ARGUMENT"}"#),
        1
    );
    assert_eq!(
        value(r#"ledger_rpcs_total{method="Charge",code="ABORTED"}"#),
        1
    );
    assert_eq!(
        value(r#"ledger_rpc_duration_seconds_count{method="Charge"}"#),
        11
    );
    assert_eq!(
        value(r#"ledger_replays_total{method="Charge"}"#),
        6,
        "c1 once, 5 duplicates"
    );
    assert_eq!(value(r#"ledger_key_reuses_total{method="Charge"}"#), 1);
    assert_eq!(
        value(r#"ledger_lock_wait_timeouts_total{row="account"}"#),
        1
    );
    assert!(
        value(r#"ledger_transaction_retries_total{reason="conflict"}"#) >= 1,
        "{m:?}"
    );
    assert!(
        m.contains_key(r#"ledger_db_pool_connections{state="idle"}"#),
        "{m:?}"
    );
    assert_eq!(value("ledger_db_up"), 1);
    // An attempt that commits has claimed its keys once, and locked and decided
    // (again, if a call left before COMMIT): at least the OpenAccount, the Credit
    // and the charge that took effect committed.
    let phase = |name: &str| {
        value(&format!(
            r#"ledger_transaction_phase_seconds_count{{phase="{name}"}}"#
        ))
    };
    let (claim, lock, decide, commit) = (
        phase("claim"),
        phase("lock"),
        phase("decide"),
        phase("commit"),
    );
    assert!(
        commit >= 3 && decide >= commit && lock >= decide && claim >= commit,
        "claim {claim}, lock {lock}, decide {decide}, commit {commit}: {m:?}"
    );
    assert_eq!(
        value(r#"ledger_rpcs_total{method="WatchEntries",code="OK"}"#),
        1
    );
    assert_eq!(value("ledger_stream_watchers"), 1);
    assert_eq!(value("ledger_stream_entries_total"), watched);
    stream_metrics(&db, metrics).await;
    a_large_post_retires_its_connection(&app, metrics).await;
    memory_waits(&db, metrics).await;
}

/// A call that finds no room in `--max-call-memory` waits, counted; refused when
/// its deadline passes first, it counts as RESOURCE_EXHAUSTED among the RPCs,
/// though its handler never ran. (On an instance of its own, whose metrics go
/// to the process's one recorder.)
async fn memory_waits(db: &TestDb, metrics: std::net::SocketAddr) {
    let app = TestApp::spawn_with(
        db,
        Config {
            // Three parked charges fill it.
            max_call_memory: Some(30 * 1024),
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let m = scrape(metrics).await;
    let value = |m: &std::collections::HashMap<String, u64>, series: &str| {
        m.get(series).copied().unwrap_or(0)
    };
    let (waits, refused) = (
        value(&m, "ledger_call_memory_waits_total"),
        value(
            &m,
            r#"ledger_rpcs_total{method="Charge",code="RESOURCE_EXHAUSTED"}"#,
        ),
    );
    let (mut holder, parked) = park_charges(&app, db, account, 3).await;
    let (status, m) = tokio::join!(charge_refused_for_room(&app, other), async {
        app.until_waiting_for_room(1).await;
        scrape(metrics).await
    });
    assert_eq!(value(&m, "ledger_calls_waiting_for_memory"), 1);
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let m = scrape(metrics).await;
    assert_eq!(value(&m, "ledger_calls_waiting_for_memory"), 0);
    assert_eq!(value(&m, "ledger_call_memory_waits_total"), waits + 1);
    assert_eq!(
        value(
            &m,
            r#"ledger_rpcs_total{method="Charge",code="RESOURCE_EXHAUSTED"}"#
        ),
        refused + 1
    );
    holder.query_drop("ROLLBACK").await.unwrap();
    for call in parked {
        call.await.unwrap().unwrap();
    }
}

/// The calls so far left every connection pooled; a post of 256 legs to 256
/// accounts (a batch of a few hundred kilobytes) closes the connection it
/// committed on.
async fn a_large_post_retires_its_connection(app: &TestApp, metrics: std::net::SocketAddr) {
    let retired = |m: &std::collections::HashMap<String, u64>| {
        m.get("ledger_db_connections_retired_total")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(retired(&scrape(metrics).await), 0);
    let source = app.funded_account("USD", 1_000_000).await;
    let mut sinks = Vec::new();
    for _ in 0..256 {
        sinks.push(app.funded_account("USD", 0).await);
    }
    let legs = sinks.iter().map(|sink| leg(source, *sink, 1)).collect();
    let mut client = app.client().await;
    let reply = client.post(post("large", legs)).await.unwrap().into_inner();
    assert_eq!(reply.entries.len(), 512);
    assert_eq!(retired(&scrape(metrics).await), 1);
    client
        .charge(charge("after-large", sinks[0], 1))
        .await
        .unwrap();
    assert_eq!(
        retired(&scrape(metrics).await),
        1,
        "a charge's batch is small"
    );
}

/// A watcher of every account that has read every entry there is (numbered
/// first), still connected; and how many it read.
async fn watch_everything(
    db: &TestDb,
    app: &TestApp,
) -> (tonic::Streaming<ledger::proto::pb::Entry>, u64) {
    let entries = number_entries(db).await;
    let request = ledger::proto::pb::WatchEntriesRequest {
        after_sequence: 0,
        account_id: 0,
    };
    let mut stream = app
        .client()
        .await
        .watch_entries(request)
        .await
        .unwrap()
        .into_inner();
    for sequence in 1..=entries {
        let entry = stream.message().await.unwrap().unwrap();
        assert_eq!(entry.sequence, sequence);
    }
    (stream, entries)
}

/// Once every entry has its number: the instance holds the lease, knows the
/// highest number, and measured the lag of each entry it numbered.
async fn stream_metrics(db: &TestDb, metrics: std::net::SocketAddr) {
    support::until_sequenced(db, Duration::from_secs(20)).await;
    let entries = db.count("SELECT COUNT(*) FROM entries").await;
    let mut m = std::collections::HashMap::new();
    support::server::until("the instance knows the highest number", async || {
        m = scrape(metrics).await;
        m.get("ledger_stream_sequence") == Some(&entries)
    })
    .await;
    let value = |series: &str| m.get(series).copied().unwrap_or(0);
    assert_eq!(value("ledger_stream_assigner"), 1, "{m:?}");
    assert_eq!(value("ledger_stream_lag_seconds_count"), entries);
}

/// OpenAccount, Credit, a charge and its replay, a reused key, an invalid request,
/// a read, and a charge refused after the lock-wait bound on a held account.
async fn known_calls(db: &TestDb, app: &TestApp, account: u64) {
    let mut client = app.client().await;
    client.charge(charge("c1", account, 1)).await.unwrap();
    client.charge(charge("c1", account, 1)).await.unwrap();
    client.charge(charge("c1", account, 2)).await.unwrap_err();
    client.charge(charge("c2", account, 0)).await.unwrap_err();
    let read = ledger::proto::pb::GetAccountRequest {
        account_id: account,
    };
    client.get_account(read).await.unwrap();

    let mut holder = db.lock_account(account).await;
    client.charge(charge("busy", account, 1)).await.unwrap_err();
    holder.query_drop("ROLLBACK").await.unwrap();
}

/// Six duplicates parked on an original that rolls back: InnoDB resolves their
/// race for the row with deadlocks, which are retried.
async fn deadlock_retries(db: &TestDb, app: &TestApp, other: &TestApp, gate: &Gate, account: u64) {
    let original = tokio::spawn(raw_call(
        app.channel().await,
        "Charge",
        charge("rb", account, 5),
    ));
    gate.reached().await;
    let channel = other.channel().await;
    let duplicates: Vec<_> = (0..6)
        .map(|_| {
            tokio::spawn(raw_call(
                channel.clone(),
                "Charge",
                charge("rb", account, 5),
            ))
        })
        .collect();
    db.until_parked(6).await;
    original.abort();
    for d in duplicates {
        d.await.unwrap().unwrap();
    }
}
