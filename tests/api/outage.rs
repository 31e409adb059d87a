//! The database restarts under a running service: calls during the outage fail
//! fast with UNAVAILABLE, the pool recovers by itself, and no key is lost or
//! applied twice. Needs a server the test owns, so it always runs a private one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

use tonic_health::pb::health_check_response::ServingStatus;

use crate::support::server::until;
use crate::support::{
    Config, TestApp, TestDb, assert_each_key_charged_once, charge, private_server, replayed,
    run_ledger, until_health, with_deadline,
};

/// Charges with new keys until stopped, retrying each key until it gets a final
/// answer, as a caller that wants exactly-once must. Returns each key's amount.
async fn retrying_charges(
    mut client: LedgerClient<Channel>,
    account: u64,
    worker: u32,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, i64> {
    let mut done = BTreeMap::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("load-{worker}-{n}");
        let amount = 1 + (n % 7);
        loop {
            let request = with_deadline(charge(&key, account, amount), Duration::from_secs(2));
            match client.charge(request).await {
                Ok(_) => break,
                Err(s)
                    if matches!(
                        s.code(),
                        Code::Unavailable | Code::Aborted | Code::DeadlineExceeded
                    ) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(s) => panic!("{key}: unexpected {s:?}"),
            }
        }
        done.insert(key, amount);
    }
    done
}

/// The charges of the load committed so far.
async fn load_charges(db: &TestDb) -> u64 {
    db.count("SELECT COUNT(*) FROM entries WHERE idempotency_key LIKE 'load-%'")
        .await
}

/// Polls until the load has committed 8 charges more than `from`: it is under
/// way (again).
async fn until_loaded(db: &TestDb, from: u64) {
    until("the load commits charges", async || {
        load_charges(db).await >= from + 8
    })
    .await;
}

/// Calls while the database is down fail with UNAVAILABLE, well before their deadline.
async fn assert_unavailable_fast(client: &mut LedgerClient<Channel>, account: u64) {
    let started = Instant::now();
    let deadline = Duration::from_secs(3);
    let status = client
        .charge(with_deadline(charge("during", account, 5), deadline))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.get_details_error_info().unwrap().reason,
        "DATABASE_UNAVAILABLE"
    );
    assert!(status.get_details_retry_info().is_some());
    assert!(
        started.elapsed() < deadline,
        "failed fast, not at the deadline"
    );
    let read = pb::GetAccountRequest {
        account_id: account,
    };
    let status = client
        .get_account(with_deadline(read, deadline))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_restart_loses_and_duplicates_nothing() {
    let (_dir, mut server) = private_server("ledger-outage-").await;
    let db = TestDb::on(server.server_url());
    let app = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 4,
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 1_000_000).await;
    let mut client = app.client().await;
    client.charge(charge("before", account, 1)).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|worker| {
            tokio::spawn(retrying_charges(
                client.clone(),
                account,
                worker,
                stop.clone(),
            ))
        })
        .collect();
    until_loaded(&db, 0).await;

    server.stop().await.unwrap();
    assert_unavailable_fast(&mut client, account).await;
    until_health(app.addr, ServingStatus::NotServing).await;
    let (code, _) = run_ledger(&["healthcheck", "--listen", &app.addr.to_string()]).await;
    assert_eq!(
        code,
        Some(1),
        "the healthcheck command fails while the database is down"
    );

    server.restart().await.unwrap();
    until_health(app.addr, ServingStatus::Serving).await;
    let after = client
        .charge(charge("after", account, 3))
        .await
        .expect("the first call after the restart succeeds");
    assert!(!replayed(after.metadata()));
    let during = client.charge(charge("during", account, 5)).await.unwrap();
    assert!(
        !replayed(during.metadata()),
        "the outage recorded nothing under the key"
    );
    let before = client.charge(charge("before", account, 1)).await.unwrap();
    assert!(
        replayed(before.metadata()),
        "the key from before the outage survived"
    );

    until_loaded(&db, load_charges(&db).await).await;
    stop.store(true, Ordering::Relaxed);
    let mut charged: BTreeMap<String, i64> = BTreeMap::new();
    for worker in load {
        charged.extend(worker.await.unwrap());
    }
    charged.extend([
        ("before".into(), 1),
        ("during".into(), 5),
        ("after".into(), 3),
    ]);

    assert_each_key_charged_once(&db, account, 1_000_000, &charged).await;
    drop(app);
    server.stop().await.unwrap();
}
