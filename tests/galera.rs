//! Exactly-once on a three-node MariaDB Galera cluster (multi-primary), with service
//! instances pointed at different nodes. Row locks are per node there: a duplicate
//! on another node than its original is not parked but conflicts at commit (1213),
//! is retried whole, and replays.
//!
//! Needs the cluster: `scripts/galera-cluster.sh start` (client ports 3311-3313, or
//! `LEDGER_TEST_GALERA_URLS`), then `cargo test --test galera -- --ignored`.

#![allow(unreachable_pub, missing_debug_implementations, dead_code)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "support/mod.rs"]
mod support;
#[path = "workload/mod.rs"]
mod workload;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use ledger::proto::pb;
use support::{
    Config, Gate, LedgerProcess, TestApp, TestDb, charge, free_port, raw_call, replayed,
};
use tokio::sync::Barrier;
use tonic::Code;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;
use workload::{Counters, open_accounts, run_clients, verify};

fn nodes() -> Vec<String> {
    std::env::var("LEDGER_TEST_GALERA_URLS")
        .unwrap_or_else(|_| {
            "mysql://root@127.0.0.1:3311,mysql://root@127.0.0.1:3312,mysql://root@127.0.0.1:3313"
                .into()
        })
        .split(',')
        .map(|u| u.trim_end_matches('/').to_owned())
        .collect()
}

/// One instance per node, in node order, each on its own node only.
async fn instances(db: &TestDb, config: impl Fn(usize) -> Config) -> Vec<TestApp> {
    let mut apps = Vec::new();
    for (i, node) in nodes().iter().enumerate() {
        let config = Config {
            database_url: Some(db.url_on(node)),
            pool_size: 6,
            ..config(i)
        };
        apps.push(TestApp::spawn_with(db, config).await);
    }
    apps
}

/// Sends a charge until it gets a final answer, as a client that wants exactly-once
/// does: ABORTED and UNAVAILABLE are retried with the same key.
async fn settle(
    channel: Channel,
    request: pb::ChargeRequest,
) -> Result<(MetadataMap, Bytes), tonic::Status> {
    loop {
        match raw_call(channel.clone(), "Charge", request.clone()).await {
            Err(s) if matches!(s.code(), Code::Aborted | Code::Unavailable) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answer => return answer,
        }
    }
}

/// Every node is recognized as multi-primary, so the service's final batches there
/// are guarded and checked after COMMIT (`db::writes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn every_node_is_recognized_as_multi_primary() {
    for node in nodes() {
        let mut conn = ledger::db::pool::connect(&node).await.unwrap();
        assert!(
            ledger::db::self_check::is_multi_primary(&mut conn)
                .await
                .unwrap(),
            "{node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn a_retry_through_another_node_replays() {
    let db = TestDb::on_cluster(nodes()[0].clone());
    let apps = instances(&db, |_| Config::default()).await;
    let account = apps[0].funded_account("USD", 100).await;

    let (first_md, first) = raw_call(
        apps[0].channel().await,
        "Charge",
        charge("req-42", account, 30),
    )
    .await
    .unwrap();
    assert!(!replayed(&first_md));
    for (node, app) in apps.iter().enumerate().skip(1) {
        let (md, retry) = settle(app.channel().await, charge("req-42", account, 30))
            .await
            .unwrap();
        assert!(replayed(&md), "the retry through node {} replays", node + 1);
        assert_eq!(retry, first);
    }
    assert_eq!(db.balance(account).await, 70);
    assert_eq!(db.entries_for_key("req-42").await, 1);
}

/// The original commits on node 1 while its duplicate is mid-transaction on node 2
/// (its probe said "new", since node 1's row was not committed yet): the duplicate's
/// final round trip fails with a certification conflict, the whole transaction is
/// retried, and it ends as a replay. One debit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn a_duplicate_mid_transaction_on_another_node_ends_as_a_replay() {
    let db = TestDb::on_cluster(nodes()[0].clone());
    let gates = [Gate::new("xnode"), Gate::new("xnode"), Gate::new("xnode")];
    let apps = instances(&db, |i| Config {
        gate: Some(gates[i].clone()),
        ..Config::default()
    })
    .await;
    let account = apps[0].funded_account("USD", 100).await;

    let original = tokio::spawn(raw_call(
        apps[0].channel().await,
        "Charge",
        charge("xnode", account, 25),
    ));
    gates[0].reached().await;
    let duplicate = tokio::spawn(raw_call(
        apps[1].channel().await,
        "Charge",
        charge("xnode", account, 25),
    ));
    gates[1].reached().await;

    gates[0].release();
    let (original_md, original) = original.await.unwrap().unwrap();
    assert!(!replayed(&original_md));
    gates[1].release();
    let (duplicate_md, duplicate) = duplicate.await.unwrap().expect("retried, then replayed");
    assert!(
        replayed(&duplicate_md),
        "the duplicate replays the original"
    );
    assert_eq!(duplicate, original);
    assert_eq!(db.balance(account).await, 75);
    assert_eq!(db.entries_for_key("xnode").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn storms_across_three_nodes_charge_once_per_key() {
    let db = TestDb::on_cluster(nodes()[0].clone());
    let apps = instances(&db, |_| Config::default()).await;
    let start = 1_000_000;
    let account = apps[0].funded_account("USD", start).await;
    let mut channels = Vec::new();
    for app in &apps {
        channels.push(app.channel().await);
    }

    // 48 identical charges, 16 through each node, at once.
    let barrier = Arc::new(Barrier::new(48));
    let calls: Vec<_> = (0..48)
        .map(|i| {
            let (channel, barrier) = (channels[i % 3].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                settle(channel, charge("storm", account, 7)).await
            })
        })
        .collect();
    let mut replies = Vec::new();
    for call in calls {
        replies.push(call.await.unwrap().unwrap());
    }
    assert_eq!(replies.iter().filter(|(md, _)| !replayed(md)).count(), 1);
    assert!(replies.iter().all(|(_, body)| *body == replies[0].1));
    assert_eq!(db.entries_for_key("storm").await, 1);

    // 10 keys x 12 duplicates on the one account, through every node at once.
    let barrier = Arc::new(Barrier::new(120));
    let calls: Vec<_> = (0..120_i64)
        .map(|n| {
            let (channel, barrier) = (
                channels[usize::try_from(n).unwrap() % 3].clone(),
                barrier.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                let k = n % 10;
                (
                    k,
                    settle(channel, charge(&format!("hot-{k}"), account, 10 + k)).await,
                )
            })
        })
        .collect();
    let mut fresh = 0;
    for call in calls {
        let (_, answer) = call.await.unwrap();
        fresh += usize::from(!replayed(&answer.unwrap().0));
    }
    assert_eq!(fresh, 10, "one fresh answer per key");
    let total: i64 = (0..10).map(|k| 10 + k).sum();
    assert_eq!(db.balance(account).await, start - 7 - total);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        11
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn declines_and_reuse_hold_across_nodes() {
    let db = TestDb::on_cluster(nodes()[0].clone());
    let apps = instances(&db, |_| Config::default()).await;
    let account = apps[0].funded_account("USD", 10).await;

    let declined = settle(apps[0].channel().await, charge("too-much", account, 50))
        .await
        .unwrap_err();
    assert_eq!(
        declined.get_details_error_info().unwrap().reason,
        "INSUFFICIENT_FUNDS"
    );
    let fund = pb::CreditRequest {
        idempotency_key: "top-up".into(),
        account_id: account,
        amount: 100,
        currency: "USD".into(),
        description: String::new(),
    };
    apps[1].client().await.credit(fund).await.unwrap();
    let again = settle(apps[2].channel().await, charge("too-much", account, 50))
        .await
        .unwrap_err();
    assert_eq!(
        (again.code(), again.message()),
        (declined.code(), declined.message())
    );
    assert_eq!(again.details(), declined.details());
    assert!(replayed(again.metadata()));

    settle(apps[0].channel().await, charge("once", account, 5))
        .await
        .unwrap();
    let reused = settle(apps[1].channel().await, charge("once", account, 6))
        .await
        .unwrap_err();
    assert_eq!(
        reused.get_details_error_info().unwrap().reason,
        "IDEMPOTENCY_KEY_REUSED"
    );
    assert_eq!(db.balance(account).await, 105);
}

fn galera(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/galera-cluster.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "galera-cluster.sh {args:?}");
}

/// Retrying clients spread over instances on all three nodes; node 2 is SIGKILLed
/// and later restarted. Calls to its instance fail with UNAVAILABLE meanwhile and
/// succeed elsewhere; afterwards the audit passes on every node and the balances
/// equal the clients' model.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn losing_a_node_under_load_loses_nothing() {
    let nodes = nodes();
    let db = TestDb::on_cluster(nodes[0].clone());
    TestApp::spawn(&db).await; // migrates, then stops with this handle
    let mut instances = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for node in &nodes {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let args = [
            "--pool-size",
            "6",
            "--lock-wait-timeout",
            "2s",
            "--connect-timeout",
            "120s",
        ];
        instances.push(LedgerProcess::serve_urls(&db.url_on(node), addr, &args).await);
        addrs.push(addr);
    }
    let channels: Vec<Channel> = addrs
        .iter()
        .map(|a| {
            Channel::from_shared(format!("http://{a}"))
                .unwrap()
                .connect_lazy()
        })
        .collect();
    let accounts = open_accounts(&channels[0]).await;

    let seed: u64 = rand::random();
    println!("node loss: seed {seed}");
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(seed, 9, &channels, &accounts, &counters, &stop).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before_kill = counters.ops.load(Ordering::Relaxed);
    assert!(before_kill > 0, "the clients are under way");

    galera(&["kill", "2"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let to_dead = support::with_deadline(charge("to-node-2", 1, 1), Duration::from_secs(3));
    let status = ledger::proto::pb::ledger_client::LedgerClient::new(channels[1].clone())
        .charge(to_dead)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        counters.ops.load(Ordering::Relaxed) > before_kill,
        "the clients go on with a node down"
    );
    galera(&["restart-node", "2"]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let finals = clients.await.unwrap();

    verify(&db, &accounts, &finals).await;
    for node in &nodes[1..] {
        let report = ledger::audit::audit(&db.url_on(node)).await.unwrap();
        assert!(report.passed(), "{node}: {report}");
    }
    println!("node loss: {}", counters.summary());
}

/// Reads on a node are not causal by default: while node 3 applies nothing (an
/// administrator holds FLUSH TABLES WITH READ LOCK there), an instance on node 3
/// reads a stale balance after a write through node 1. With causal reads
/// (`--session-init "SET SESSION wsrep_sync_wait = 1"`) its read waits for the
/// write and sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn causal_reads_see_a_write_made_through_another_node() {
    let nodes = nodes();
    let db = TestDb::on_cluster(nodes[0].clone());
    let writer = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 4,
            ..Config::default()
        },
    )
    .await;
    let on_node_3 = |session_init: Option<String>| Config {
        database_url: Some(db.url_on(&nodes[2])),
        session_init,
        pool_size: 4,
        ..Config::default()
    };
    let plain = TestApp::spawn_with(&db, on_node_3(None)).await;
    let causal = TestApp::spawn_with(
        &db,
        on_node_3(Some("SET SESSION wsrep_sync_wait = 1".into())),
    )
    .await;
    let account = writer.funded_account("USD", 10).await;
    let (plain, causal) = (plain.channel().await, causal.channel().await);
    assert_eq!(
        balance(causal.clone(), account).await,
        10,
        "caught up before the pause"
    );

    let mut admin = mysql_async::Conn::from_url(&db.url_on(&nodes[2]))
        .await
        .unwrap();
    mysql_async::prelude::Queryable::query_drop(&mut admin, "FLUSH TABLES WITH READ LOCK")
        .await
        .unwrap();
    let credit = pb::CreditRequest {
        idempotency_key: "while-paused".into(),
        account_id: account,
        amount: 5,
        currency: "USD".into(),
        description: String::new(),
    };
    writer.client().await.credit(credit).await.unwrap();
    assert_eq!(
        balance(plain, account).await,
        10,
        "a plain read on node 3 is stale"
    );
    let mut waiting = tokio::spawn(balance(causal, account));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting)
            .await
            .is_err(),
        "a causal read waits for node 3 to apply the write"
    );
    mysql_async::prelude::Queryable::query_drop(&mut admin, "UNLOCK TABLES")
        .await
        .unwrap();
    assert_eq!(waiting.await.unwrap(), 15, "and then sees it");
}

async fn balance(channel: Channel, account: u64) -> i64 {
    let request = pb::GetAccountRequest {
        account_id: account,
    };
    pb::ledger_client::LedgerClient::new(channel)
        .get_account(request)
        .await
        .unwrap()
        .into_inner()
        .balance
}

/// Nine clients each send 60 keys to all three nodes at once, over eight accounts:
/// many transactions are aborted by another node's write set while their final
/// batch runs. Every key's copies get the same answer, and the ledger stays
/// consistent (this found the server continuing a batch after such an abort; see
/// `db::writes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Galera cluster: scripts/galera-cluster.sh start"]
async fn concurrent_duplicates_on_three_nodes_keep_the_ledger_consistent() {
    let db = TestDb::on_cluster(nodes()[0].clone());
    let apps = instances(&db, |_| Config::default()).await;
    let mut accounts = Vec::new();
    for _ in 0..8 {
        accounts.push(apps[0].funded_account("USD", 1_000_000).await);
    }
    let mut channels = Vec::new();
    for app in &apps {
        channels.push(app.channel().await);
    }
    let clients: Vec<_> = (0..9_u64)
        .map(|t| {
            let (channels, accounts) = (channels.clone(), accounts.clone());
            tokio::spawn(async move {
                for n in 0..60_u64 {
                    let account = accounts[usize::try_from((n * 7 + t) % 8).unwrap()];
                    let key = format!("t{t}-k{n}");
                    let copies: Vec<_> = (0..3)
                        .map(|i| {
                            tokio::spawn(settle(channels[i].clone(), charge(&key, account, 1)))
                        })
                        .collect();
                    let mut answers = Vec::new();
                    for copy in copies {
                        answers.push(copy.await.unwrap().unwrap());
                    }
                    assert_eq!(
                        answers.iter().filter(|(md, _)| !replayed(md)).count(),
                        1,
                        "{key}"
                    );
                    assert!(
                        answers.iter().all(|(_, body)| *body == answers[0].1),
                        "{key}: copies disagree"
                    );
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let report = ledger::audit::audit(&db.url).await.unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        540
    );
}
