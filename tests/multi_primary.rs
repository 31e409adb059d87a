//! Exactly-once on a three-node multi-primary cluster, MariaDB Galera or MySQL
//! Group Replication (multi-primary mode), with service instances pointed at
//! different nodes. Row locks are per node there: a duplicate on another node
//! than its original is not parked but conflicts at commit (Galera 1213; Group
//! Replication 1180, 3101 or 1213), is retried whole, and replays. Routed by
//! account, instances on different nodes write an account through one node.
//!
//! Needs a cluster, then `cargo test --test multi_primary -- --ignored --test-threads 1`:
//! - Galera: `scripts/galera-cluster.sh start` (ports 3311-3313), the default;
//! - Group Replication: `scripts/gr-cluster.sh start` (ports 3321-3323) and
//!   `LEDGER_TEST_CLUSTER=group-replication`.
//!
//! `LEDGER_TEST_CLUSTER_URLS` (comma-separated) overrides the nodes' URLs.

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

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use ledger::proto::pb;
use support::cluster::{Engine, engine};
use support::{
    Config, Gate, LedgerProcess, TestApp, TestDb, assert_audit_passes, assert_one_did_the_work,
    assert_stream_sound, at_once, charge, credit, free_port, leg, post, raw_call, replayed,
    reverse, scrape, transfer, until_sequenced,
};
use tonic::Code;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_types::StatusExt as _;
use workload::{Counters, open_accounts, run_clients, verify};

fn nodes() -> Vec<String> {
    match std::env::var("LEDGER_TEST_CLUSTER_URLS") {
        Ok(urls) => urls
            .split(',')
            .map(|u| u.trim_end_matches('/').to_owned())
            .collect(),
        Err(_) => engine()
            .ports()
            .iter()
            .map(|port| format!("mysql://root@127.0.0.1:{port}"))
            .collect(),
    }
}

/// The nodes, every one of them up: a node that refuses connections (one a
/// failed test left down, or one that died) is started again first, so each
/// test finds the cluster whole.
fn whole_nodes() -> Vec<String> {
    let nodes = nodes();
    let refused = nodes.iter().any(|url| {
        let addr = url.rsplit('@').next().unwrap_or(url);
        addr.parse()
            .is_ok_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err())
    });
    if refused {
        eprintln!("a node refuses connections: starting the cluster whole again");
        cluster(&["start"]);
    }
    nodes
}

/// A database of the test's own on the whole cluster, created through node 1.
fn cluster_db() -> TestDb {
    TestDb::on_cluster(whole_nodes()[0].clone(), engine().causal_reads())
}

/// Runs the cluster's script.
fn cluster(args: &[&str]) {
    cluster_with(&[], args);
}

/// Runs the cluster's script with `env` added to its environment.
fn cluster_with(env: &[(&str, &str)], args: &[&str]) {
    let script = engine().script();
    let status = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .envs(env.iter().copied())
        .status()
        .unwrap();
    assert!(status.success(), "{script} {args:?}");
}

/// Node `node` (from 1) killed, started again by [`Killed::restart`] or, when
/// a test fails first, on drop: the tests after it find the cluster whole.
#[must_use]
struct Killed {
    node: &'static str,
    back: bool,
}

fn kill(node: &'static str) -> Killed {
    cluster(&["kill", node]);
    Killed { node, back: false }
}

impl Killed {
    fn restart(mut self) {
        cluster(&["restart-node", self.node]);
        self.back = true;
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if !self.back {
            let script = engine().script();
            let restarted = std::process::Command::new("bash")
                .args([script, "restart-node", self.node])
                .status();
            eprintln!(
                "node {} restarted after a failure: {restarted:?}",
                self.node
            );
        }
    }
}

/// An instance in the test process on node `node` (from 0) only, otherwise as
/// `config` says: how every test here starts one.
async fn on_node(db: &TestDb, node: usize, config: Config) -> TestApp {
    let config = Config {
        database_url: Some(db.url_on(&nodes()[node])),
        ..config
    };
    TestApp::spawn_with(db, config).await
}

/// One instance per node, in node order, each on its own node only, with pools
/// small enough for three instances on the cluster.
async fn instances(db: &TestDb, config: impl Fn(usize) -> Config) -> Vec<TestApp> {
    let mut apps = Vec::new();
    for node in 0..nodes().len() {
        let config = Config {
            pool_size: 6,
            ..config(node)
        };
        apps.push(on_node(db, node, config).await);
    }
    apps
}

async fn channels(apps: &[TestApp]) -> Vec<Channel> {
    let mut channels = Vec::new();
    for app in apps {
        channels.push(app.channel().await);
    }
    channels
}

/// `ledger serve` processes, process `i` given `database_urls[i]` (one or more
/// nodes' URLs, comma-separated) and `args(i)`, once an instance in the test
/// process has migrated the database: how every test here starts separate
/// processes. Returns them and their channels.
async fn serve<'a>(
    db: &TestDb,
    database_urls: &[String],
    args: impl Fn(usize) -> Vec<&'a str>,
) -> (Vec<LedgerProcess>, Vec<Channel>) {
    TestApp::spawn(db).await; // migrates, then stops with this handle
    let mut processes = Vec::new();
    for (i, urls) in database_urls.iter().enumerate() {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        processes.push(LedgerProcess::serve_urls(urls, addr, &args(i)).await);
    }
    let channels = processes.iter().map(LedgerProcess::channel).collect();
    (processes, channels)
}

/// `ledger serve` arguments of the node-loss tests, besides routing.
/// How long writes may wait on a cluster that lost a node before they go on.
/// Group Replication suspects a member after 5 s of silence and then changes
/// the view; in multi-primary mode the survivors' commits wait for that view
/// (observed 16-30 s on a loaded 2-core machine). Galera's is shorter.
const NODE_LOSS_NOTICED: Duration = Duration::from_secs(90);

const NODE_LOSS_ARGS: [&str; 6] = [
    "--pool-size",
    "6",
    "--lock-wait-timeout",
    "2s",
    "--connect-timeout",
    "120s",
];

/// `ledger serve` arguments of the hot-account and storm workloads, besides
/// routing: hundreds of calls at once queue for the pool (30 s) and the hot
/// row (20 s) rather than fail.
const HOT_ACCOUNT_ARGS: [&str; 6] = [
    "--pool-size",
    "8",
    "--pool-timeout",
    "30s",
    "--lock-wait-timeout",
    "20s",
];

/// For `instances` instances, instance `i` given every node starting with node
/// `i`: how instances routed by account are configured.
fn every_node_from_each(db: &TestDb, instances: usize) -> Vec<String> {
    let nodes = nodes();
    (0..instances)
        .map(|first| {
            (0..nodes.len())
                .map(|i| db.url_on(&nodes[(first + i) % nodes.len()]))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// Sends a charge until it gets a final answer, as a client that wants exactly-once
/// does: ABORTED and UNAVAILABLE are retried with the same key.
async fn settle(
    channel: Channel,
    request: pb::ChargeRequest,
) -> Result<(MetadataMap, Bytes), tonic::Status> {
    settle_call(channel, "Charge", request).await
}

/// Sends a call of `method` until it gets a final answer, as `settle` does.
async fn settle_call<M: prost::Message + Clone + 'static>(
    channel: Channel,
    method: &'static str,
    request: M,
) -> Result<(MetadataMap, Bytes), tonic::Status> {
    loop {
        match raw_call(channel.clone(), method, request.clone()).await {
            Err(s) if matches!(s.code(), Code::Aborted | Code::Unavailable) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answer => return answer,
        }
    }
}

/// Every node is recognized as a node of its engine, so the service's final
/// batches there are guarded and checked after COMMIT (`db::exec::writes`) and its
/// sessions read causally (`db::conn::cluster`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn every_node_is_recognized_as_multi_primary() {
    for node in whole_nodes() {
        let mut conn = ledger::db::conn::connection::connect(&node).await.unwrap();
        assert!(
            ledger::db::conn::self_check::is_multi_primary(&mut conn)
                .await
                .unwrap(),
            "{node}"
        );
        let found = ledger::db::conn::cluster::make_causal(&mut conn)
            .await
            .unwrap();
        assert_eq!(found, engine().as_service_sees_it(), "{node}");
        ledger::db::conn::cluster::verify_causal(&mut conn, found)
            .await
            .unwrap();
    }
}

/// A batch's failure is seen whichever of its statements fails: the service's
/// final batch (writes, COMMIT, the check) would otherwise report success for a
/// statement that failed after the first. The connection stays usable after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_batch_reports_a_failure_in_any_of_its_statements() {
    use diesel_async::SimpleAsyncConnection as _;
    let mut conn = ledger::db::conn::connection::connect(&nodes()[0])
        .await
        .unwrap();
    for batch in [
        "SELECT 1; SELECT * FROM ledger_no_such_table; DO 2",
        "DO 1; DO 2; SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'late', MYSQL_ERRNO = 1213",
    ] {
        let failed = conn.batch_execute(batch).await;
        assert!(failed.is_err(), "{batch}");
        conn.batch_execute("DO 3").await.expect("usable after");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_retry_through_another_node_replays() {
    let db = cluster_db();
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
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_duplicate_mid_transaction_on_another_node_ends_as_a_replay() {
    let db = cluster_db();
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

/// A group-commit batch on node 1 holds three calls; while it waits before its
/// COMMIT, the first call's key commits through another node. The batch, guarded,
/// fails to commit (the other node's write set aborts it, or certification
/// refuses it), is retried whole, and then replays that call and decides the
/// others in arrival order: the second sees the first's debit and is declined.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_batch_overtaken_by_another_node_is_retried_whole() {
    let db = cluster_db();
    let gate = Gate::new("in-batch-first");
    let batching = Config {
        gate: Some(gate.clone()),
        batch_writers: Some(1),
        // Waits out the busy call, so the three calls queue behind it.
        batch_stall: Some(Duration::from_secs(3600)),
        ..Config::default()
    };
    let batching = on_node(&db, 0, batching).await;
    let elsewhere = Config {
        batch_writers: Some(0),
        ..Config::default()
    };
    let elsewhere = on_node(&db, 1, elsewhere).await;
    let account = batching.funded_account("USD", 100).await;
    let mut holder = batching.busy_writer(&db).await;
    let mut calls = Vec::new();
    for (i, (key, amount)) in [
        ("overtaken", 30),
        ("in-batch-first", 60),
        ("in-batch-second", 60),
    ]
    .into_iter()
    .enumerate()
    {
        let channel = batching.channel().await;
        calls.push(tokio::spawn(raw_call(
            channel,
            "Charge",
            charge(key, account, amount),
        )));
        batching.until_queued(i + 1).await;
    }
    mysql_async::prelude::Queryable::query_drop(&mut holder, "ROLLBACK")
        .await
        .unwrap();
    gate.reached().await;

    let (original_md, original) = raw_call(
        elsewhere.channel().await,
        "Charge",
        charge("overtaken", account, 30),
    )
    .await
    .expect("committed through node 2 while the batch holds the key on node 1");
    assert!(!replayed(&original_md));
    gate.release();

    let second = calls.pop().unwrap().await.unwrap().unwrap_err();
    assert_eq!(second.code(), Code::FailedPrecondition, "{second:?}");
    assert_eq!(
        second.get_details_error_info().unwrap().reason,
        "INSUFFICIENT_FUNDS"
    );
    let (first_md, _) = calls.pop().unwrap().await.unwrap().expect("served");
    assert!(!replayed(&first_md));
    let (overtaken_md, overtaken) = calls.pop().unwrap().await.unwrap().expect("replayed");
    assert!(
        replayed(&overtaken_md),
        "the batch replays the other node's commit"
    );
    assert_eq!(overtaken, original);
    let at = db.claimed_at(&["in-batch-first", "in-batch-second"]).await;
    assert_eq!(at[0], at[1], "claimed by one batch");
    assert_eq!(db.balance(account).await, 10);
    assert_eq!(db.entries_for_key("overtaken").await, 1);
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn storms_across_three_nodes_charge_once_per_key() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let start = 1_000_000;
    let account = apps[0].funded_account("USD", start).await;
    let channels = channels(&apps).await;

    // 48 identical charges, 16 through each node, at once.
    let calls = at_once(48, &channels, |_, channel| {
        settle(channel, charge("storm", account, 7))
    });
    let mut replies = Vec::new();
    for call in calls {
        replies.push(call.await.unwrap().unwrap());
    }
    assert_one_did_the_work(&replies, "48 identical charges");
    assert_eq!(db.entries_for_key("storm").await, 1);

    // 10 keys x 12 duplicates on the one account, through every node at once.
    let calls = at_once(120, &channels, |n, channel| {
        let k = i64::try_from(n % 10).unwrap();
        settle(channel, charge(&format!("hot-{k}"), account, 10 + k))
    });
    let mut fresh = 0;
    for call in calls {
        fresh += usize::from(!replayed(&call.await.unwrap().unwrap().0));
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

/// Posts through instances on all three nodes: a post's accounts are locked once,
/// ascending, on whichever node it reaches, and a conflict at certification
/// retries it whole, so 48 identical posts apply once and 150 random ones over
/// five accounts conserve money with every journal sound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn posts_across_three_nodes_apply_once_and_conserve_money() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let mut accounts = Vec::new();
    for _ in 0..5 {
        accounts.push(apps[0].funded_account("USD", 100_000).await);
    }
    let channels = channels(&apps).await;

    let sale = post(
        "sale",
        vec![
            leg(accounts[0], accounts[1], 90),
            leg(accounts[0], accounts[2], 10),
        ],
    );
    let calls = at_once(48, &channels, |_, channel| {
        settle_call(channel, "Post", sale.clone())
    });
    let mut replies = Vec::new();
    for call in calls {
        replies.push(call.await.unwrap().unwrap());
    }
    assert_one_did_the_work(&replies, "48 identical posts");
    assert_eq!(db.entries_for_key("sale").await, 4);

    let calls = at_once(150, &channels, |n, channel| {
        let legs = (0..=n % 4)
            .map(|l| {
                let from = (n + l) % 5;
                let to = (from + 1 + (n * 7 + l) % 4) % 5;
                leg(
                    accounts[from],
                    accounts[to],
                    1 + i64::try_from(n % 50).unwrap(),
                )
            })
            .collect();
        settle_call(channel, "Post", post(&format!("p{n}"), legs))
    });
    for call in calls {
        call.await.unwrap().expect("every post is applied");
    }
    let mut total = 0;
    for account in &accounts {
        total += db.balance(*account).await;
    }
    assert_eq!(total, 5 * 100_000, "money is conserved");
    // Written through three nodes, numbered by one assigner: each account's
    // entries in journal order, each post's together.
    until_sequenced(&db, std::time::Duration::from_secs(30)).await;
    assert_stream_sound(&db).await;
    for node in nodes() {
        assert_audit_passes(&db.url_on(&node)).await;
    }
}

/// Reversals of one transfer under 12 keys, released together through
/// instances on three nodes (SPEC 3.12): row locks do not reach across nodes,
/// but the `reversals` row's primary key does, so exactly one reverses it, the
/// others are told ALREADY_REVERSED with its key, its retry through another
/// node replays, and the balances are the transfer's undone once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn reversals_of_one_transfer_racing_across_three_nodes_reverse_it_once() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let from = apps[0].funded_account("USD", 500).await;
    let to = apps[0].funded_account("USD", 0).await;
    let channels = channels(&apps).await;
    settle_call(
        channels[0].clone(),
        "Transfer",
        transfer("pay", from, to, 200),
    )
    .await
    .unwrap();

    let key = |n: usize| format!("rev-{n:02}");
    let calls = at_once(12, &channels, |n, channel| {
        settle_call(channel, "Reverse", reverse(&key(n), "pay"))
    });
    let (mut winners, mut declines) = (Vec::new(), Vec::new());
    for (n, call) in calls.into_iter().enumerate() {
        match call.await.unwrap() {
            Ok((_, reply)) => winners.push((n, reply)),
            Err(status) => declines.push(status),
        }
    }
    let [(winner, reply)] = winners.as_slice() else {
        panic!("exactly one reverses it: {winners:?}, {declines:?}");
    };
    for status in &declines {
        assert_eq!(support::reason(status), "ALREADY_REVERSED", "{status:?}");
        assert_eq!(support::info(status, "reversal_key"), Some(key(*winner)));
    }
    let other = channels[(winner + 1) % channels.len()].clone();
    let (meta, again) = settle_call(other, "Reverse", reverse(&key(*winner), "pay"))
        .await
        .unwrap();
    assert!(replayed(&meta));
    assert_eq!(&again, reply, "the winner's retry replays byte for byte");

    assert_eq!(db.balance(from).await, 500);
    assert_eq!(db.balance(to).await, 0);
    assert_eq!(db.count("SELECT COUNT(*) FROM reversals").await, 1);
    for node in nodes() {
        assert_audit_passes(&db.url_on(&node)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn declines_and_reuse_hold_across_nodes() {
    let db = cluster_db();
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
        ..Default::default()
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

/// Limits moved under load across nodes (SPEC 3.9): 8 callers through
/// instances on two nodes charge, credit and place holds on one account while
/// another moves its floor every 40 ms, through both: every debit met the floor
/// in force before it, and each SetLimits answered wrote one LIMITS entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn limits_moved_through_two_nodes_meet_every_debit() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let channels = channels(&apps[..2]).await;
    let (account, counts) = support::limits::storm(&channels, Duration::from_secs(4)).await;
    println!("limits storm through two nodes: {counts:?}");
    support::limits::assert_storm_sound(&db, channels[1].clone(), account, &counts).await;
}

/// Search reads its own writes across nodes (SPEC 3.11): 80 charges through an
/// instance on node 1, each followed at once by a search for its own pair
/// through an instance on node 2: each finds its entry, numbered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn searches_through_another_node_read_their_writes() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let channels = channels(&apps[..2]).await;
    let account = apps[0].funded_account("USD", 1_000_000).await;
    support::metadata::assert_searches_read_their_writes(
        channels[0].clone(),
        channels[1].clone(),
        account,
        80,
    )
    .await;
}

/// A search through a node that has not applied a charge answered through
/// another waits for it rather than answering without it: while node 3's
/// applier is held, the search's first read waits there, and once released it
/// finds the charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_search_through_a_lagging_node_waits_for_a_charge_made_through_another() {
    use support::metadata::{search, tagged};
    let nodes = nodes();
    let db = cluster_db();
    let (writer, lagging) = writer_and_lagging(&db, 2).await;
    let account = writer.funded_account("USD", 10).await;
    let lagging = lagging.channel().await;
    let list = [("order_id", "late")];
    // A search before: the lagging instance's read pool is open.
    let none = pb::ledger_client::LedgerClient::new(lagging.clone())
        .search_entries(search(&list, 0, 0, ""))
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert!(none.is_empty());

    let applier = Applier::hold(&db, &nodes[0], &nodes[2]).await;
    let charged = writer
        .client()
        .await
        .charge(tagged("while-held", account, 5, &list))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    let mut read = tokio::spawn(async move {
        pb::ledger_client::LedgerClient::new(lagging)
            .search_entries(search(&list, 0, 0, ""))
            .await
            .unwrap()
            .into_inner()
            .entries
    });
    applier
        .until_waiting(
            &mut read,
            "%FORCE INDEX (stream_commits_sequence) WHERE first_sequence IS NULL%",
        )
        .await;
    applier.release().await;
    let hits = read.await.unwrap();
    assert_eq!(hits.len(), 1, "the search waited for the charge");
    assert_eq!(hits[0].entry_id, charged.entry_id);
    assert!(hits[0].sequence > 0);
}

/// Balances at a point across nodes (SPEC 3.10): a random history written
/// through instances on nodes 1 and 2 at once, then every point asked through
/// all three nodes, each equal to a replay of the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn balances_asked_through_every_node_replay_the_journal() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let channels = channels(&apps).await;
    let history = support::balances::random_history(&channels[0], &channels[1], 80, 0xc1a5).await;
    until_sequenced(&db, Duration::from_secs(30)).await;
    support::balances::assert_every_point_replays(&channels, &history).await;
    assert_audit_passes(&db.url).await;
}

/// A balance for a time just after a charge's stamp, asked through node 2 while
/// the charge's COMMIT through node 1 is held back by a proxy: the answer and
/// the journal agree whichever certified first (the charge in it and stamped at
/// or before the point, or out of it and stamped after), and it is the same
/// when asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_balance_at_a_time_agrees_with_a_commit_held_on_another_node() {
    use support::balances::{Point, get_balance, micros};
    let nodes = nodes();
    let db = cluster_db();
    let proxy = support::proxy::Proxy::start(&nodes[0]).await;
    let late = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 4,
            database_url: Some(proxy.url(&nodes[0], &db.name)),
            ..Config::default()
        },
    )
    .await;
    let asker = on_node(
        &db,
        1,
        Config {
            pool_size: 4,
            ..Config::default()
        },
    )
    .await;
    let account = asker.funded_account("USD", 100).await;
    until_sequenced(&db, Duration::from_secs(30)).await;

    let held = proxy.hold_query(&[&support::hex("held"), "COMMIT"], Duration::from_secs(3));
    let mut client = late.client().await;
    let call = tokio::spawn(async move { client.charge(charge("held", account, 5)).await });
    tokio::time::timeout(Duration::from_secs(20), held.notified())
        .await
        .expect("the held charge's COMMIT reaches the proxy");
    let now: (i64,) = {
        use mysql_async::prelude::Queryable as _;
        let mut conn = mysql_async::Conn::from_url(&nodes[0]).await.unwrap();
        conn.query_first("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))")
            .await
            .unwrap()
            .unwrap()
    };
    let channel = asker.channel().await;
    let answer = get_balance(&channel, account, Point::Micros(now.0))
        .await
        .unwrap();
    let entry = call.await.unwrap().unwrap().into_inner().entry.unwrap();
    let stamped = micros(entry.created_at.as_ref().unwrap());
    if answer.balance == 95 {
        assert!(
            stamped <= now.0,
            "in the answer, so stamped at or before the point"
        );
        assert_eq!(answer.created_at, entry.created_at);
    } else {
        assert_eq!(answer.balance, 100, "{answer:?}");
        assert!(
            stamped > now.0,
            "{stamped}: left out, so stamped after {}",
            now.0
        );
    }
    println!(
        "held commit on another node: the charge {} the answer",
        if answer.balance == 95 { "in" } else { "after" }
    );
    until_sequenced(&db, Duration::from_secs(30)).await;
    for channel in channels(&[late, asker]).await {
        let again = get_balance(&channel, account, Point::Micros(now.0))
            .await
            .unwrap();
        assert_eq!(again, answer, "the same answer for the same point");
    }
    assert_audit_passes(&db.url).await;
}

/// `created_at` never goes backwards along a journal through a node whose clock
/// is behind (SPEC 3.10): node 3 restarted with its wall clock 30 s behind
/// (libfaketime), a random history on one account through nodes 1 and 3, and
/// every entry is stamped at or after the one before it, balances by time
/// replay, and the audit passes. Node 3 is restarted on the true clock after,
/// also when the test fails, so the tests after it find the cluster as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_node_whose_clock_is_behind_stamps_the_accounts_last_time() {
    use mysql_async::prelude::Queryable as _;
    /// Node 3 on a clock 30 s behind, until dropped.
    struct Behind;
    impl Drop for Behind {
        fn drop(&mut self) {
            cluster(&["kill", "3"]);
            cluster(&["restart-node", "3"]);
        }
    }
    let nodes = nodes();
    cluster(&["kill", "3"]);
    cluster_with(&[("CLOCK_OFFSET", "-30")], &["restart-node", "3"]);
    let behind_node = Behind;
    let clock = async |node: &str| -> i64 {
        let mut conn = mysql_async::Conn::from_url(node).await.unwrap();
        let at: Option<i64> = conn
            .query_first("SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', SYSDATE())")
            .await
            .unwrap();
        at.unwrap()
    };
    let behind = clock(&nodes[0]).await - clock(&nodes[2]).await;
    assert!((25..=35).contains(&behind), "node 3 is {behind} s behind");

    let db = cluster_db();
    let small = Config {
        pool_size: 4,
        ..Config::default()
    };
    let (on_1, on_3) = (
        on_node(&db, 0, small.clone()).await,
        on_node(&db, 2, small).await,
    );
    let channels = [on_1.channel().await, on_3.channel().await];
    let history = support::balances::random_history(&channels[0], &channels[1], 60, 0x0c10c).await;
    until_sequenced(&db, Duration::from_secs(60)).await;
    let journal = support::balances::journal(&channels[0], history.main).await;
    let stamps: Vec<i64> = journal
        .iter()
        .map(|e| support::balances::micros(e.created_at.as_ref().unwrap()))
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    support::balances::assert_every_point_replays(&channels, &history).await;
    assert_audit_passes(&db.url).await;
    drop((on_1, on_3));
    drop(behind_node);
}

/// Retrying clients spread over instances on all three nodes; node 2 is SIGKILLed
/// and later restarted. Calls to its instance fail with UNAVAILABLE meanwhile and
/// succeed elsewhere; afterwards the audit passes on every node and the balances
/// equal the clients' model.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn losing_a_node_under_load_loses_nothing() {
    let nodes = nodes();
    let db = cluster_db();
    let own_node: Vec<String> = nodes.iter().map(|node| db.url_on(node)).collect();
    let (instances, channels) = serve(&db, &own_node, |_| NODE_LOSS_ARGS.to_vec()).await;
    let accounts = open_accounts(&channels[0]).await;

    let seed: u64 = rand::random();
    println!("node loss: seed {seed}");
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(seed, 9, &channels, &accounts, &counters, &stop).await;
    counters.until_more("the clients are under way").await;

    let node_2 = kill("2");
    instances[1].until_health(ServingStatus::NotServing).await;
    let to_dead = support::with_deadline(charge("to-node-2", 1, 1), Duration::from_secs(3));
    let status = ledger::proto::pb::ledger_client::LedgerClient::new(channels[1].clone())
        .charge(to_dead)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    counters
        .until_more_within(NODE_LOSS_NOTICED, "the clients go on with a node down")
        .await;
    node_2.restart();
    instances[1].until_health(ServingStatus::Serving).await;
    counters
        .until_more("the clients go on once the node is back")
        .await;
    stop.store(true, Ordering::Relaxed);
    let run = clients.await.unwrap();

    let verified = verify(&db, &accounts, &run).await;
    for node in &nodes[1..] {
        assert_audit_passes(&db.url_on(node)).await;
    }
    println!("node loss: {}\n{verified}", counters.summary());
}

/// The change stream on a cluster (SPEC 3.8): clients write through the
/// instances on nodes 1 and 2 while a watcher follows the ledger through the
/// instance on node 3; node 2 is killed mid-load and later restarted. The
/// watcher sees every committed entry once, numbered without a hole, as
/// `GetEntry` shows it, and the audit's stream checks pass on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_watcher_on_a_third_node_sees_every_entry_once_across_a_node_loss() {
    let nodes = nodes();
    let db = cluster_db();
    let own_node: Vec<String> = nodes.iter().map(|node| db.url_on(node)).collect();
    let (instances, channels) = serve(&db, &own_node, |_| NODE_LOSS_ARGS.to_vec()).await;
    let accounts = open_accounts(&channels[0]).await;
    let follower = support::follow::Follower::start(vec![channels[2].clone()], usize::MAX);

    let seed: u64 = rand::random();
    println!("stream on a cluster: seed {seed}");
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(seed, 6, &channels[..2], &accounts, &counters, &stop).await;
    follower.until_seen(200).await;
    let node_2 = kill("2");
    let before_kill = follower.seen().await;
    follower.until_seen(before_kill + 200).await;
    node_2.restart();
    instances[1].until_health(ServingStatus::Serving).await;
    follower.until_seen(follower.seen().await + 200).await;
    stop.store(true, Ordering::Relaxed);
    let run = clients.await.unwrap();
    let verified = verify(&db, &accounts, &run).await;

    support::until_sequenced(&db, Duration::from_secs(60)).await;
    let total = usize::try_from(db.count("SELECT COUNT(*) FROM entries").await).unwrap();
    let streamed = follower.finish(total).await;
    support::follow::assert_every_entry_once(&streamed, total);
    support::follow::assert_as_get_entry_shows(channels[2].clone(), &streamed).await;
    for node in &nodes[1..] {
        assert_audit_passes(&db.url_on(node)).await;
    }
    println!(
        "stream on a cluster: {} entries; {}\n{verified}",
        streamed.len(),
        counters.summary()
    );
}

/// A node's reads lag behind what another node committed, but the service's
/// do not: while node 3 applies nothing, a raw read there is stale, and the
/// instance on node 3 answers GetAccount only once node 3 has applied the
/// credit, with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn reads_through_a_lagging_node_see_a_write_made_through_another() {
    let nodes = nodes();
    let db = cluster_db();
    let (writer, lagging) = writer_and_lagging(&db, 2).await;
    let account = writer.funded_account("USD", 10).await;
    let lagging = lagging.channel().await;
    assert_eq!(balance(lagging.clone(), account).await, 10);

    let applier = Applier::hold(&db, &nodes[0], &nodes[2]).await;
    writer
        .client()
        .await
        .credit(credit("while-held", account, 5))
        .await
        .unwrap();
    assert_eq!(applier.raw_balance(account).await, 10, "node 3 lags");
    let mut read = tokio::spawn(balance(lagging, account));
    applier.until_waiting(&mut read, "%accounts%").await;
    applier.release().await;
    assert_eq!(read.await.unwrap(), 15, "the read waited for the credit");
}

/// Two instances with small pools: one on node 1 to write through, and one on
/// node `lagging` (from 0), whose applier the test holds back.
async fn writer_and_lagging(db: &TestDb, lagging: usize) -> (TestApp, TestApp) {
    let small = Config {
        pool_size: 4,
        ..Config::default()
    };
    let writer = on_node(db, 0, small.clone()).await;
    (writer, on_node(db, lagging, small).await)
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
/// `db::exec::writes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn concurrent_duplicates_on_three_nodes_keep_the_ledger_consistent() {
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let mut accounts = Vec::new();
    for _ in 0..8 {
        accounts.push(apps[0].funded_account("USD", 1_000_000).await);
    }
    let channels = channels(&apps).await;
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
                    assert_one_did_the_work(&answers, &key);
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    assert_audit_passes(&db.url).await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        540
    );
}

/// Holds back one node's applier: a write committed through another node is
/// certified, and the client told so, but the lagging node has not applied it
/// until [`Applier::release`]. An administrator holds a write lock on a table of
/// a database of the suite's own on the lagging node, and a row is then written
/// to it through another node: the lagging node's applier waits for the lock,
/// and commits nothing after it (commit order is kept). Nothing of the test's
/// database is locked, so a service session there waits only if it reads
/// causally.
struct Applier {
    db: String,
    lagging: String,
    lock: mysql_async::Conn,
    /// Galera: the lagging node's flow-control limit before the hold, restored
    /// after it.
    fc_limit: Option<String>,
}

/// Galera pauses the whole cluster (flow control) once a node's queue of write
/// sets to apply passes `gcs.fc_limit` (16 by default); a held applier must be
/// able to fall further behind than that (a start-up's migrations are more).
const HELD_FC_LIMIT: &str = "1000000";

/// The lagging node's `gcs.fc_limit`, set to `limit`; returns what it was.
async fn set_fc_limit(conn: &mut mysql_async::Conn, limit: &str) -> Option<String> {
    use mysql_async::prelude::Queryable as _;
    let options: Option<(String, String)> = conn
        .query_first("SHOW GLOBAL VARIABLES LIKE 'wsrep_provider_options'")
        .await
        .unwrap();
    let was = options.and_then(|(_, value)| {
        value.split(';').find_map(|option| {
            let (name, value) = option.split_once('=')?;
            (name.trim() == "gcs.fc_limit").then(|| value.trim().to_owned())
        })
    })?;
    conn.query_drop(format!(
        "SET GLOBAL wsrep_provider_options = 'gcs.fc_limit={limit}'"
    ))
    .await
    .unwrap();
    Some(was)
}

/// The table whose lock holds the applier back, outside any test's database.
const HOLD_TABLE: &str = "ledger_test_applier_hold.held";

impl Applier {
    async fn hold(db: &TestDb, through: &str, lagging: &str) -> Self {
        use mysql_async::prelude::Queryable as _;
        let mut source = mysql_async::Conn::from_url(through).await.unwrap();
        source
            .query_drop("CREATE DATABASE IF NOT EXISTS ledger_test_applier_hold")
            .await
            .unwrap();
        source
            .query_drop(format!(
                "CREATE TABLE IF NOT EXISTS {HOLD_TABLE} \
                 (id INT AUTO_INCREMENT PRIMARY KEY, at INT NOT NULL)"
            ))
            .await
            .unwrap();
        let mut lock = mysql_async::Conn::from_url(lagging).await.unwrap();
        let fc_limit = match engine() {
            Engine::Galera => set_fc_limit(&mut lock, HELD_FC_LIMIT).await,
            Engine::GroupReplication => None,
        };
        lock.query_drop(engine().causal_reads()).await.unwrap();
        // Causal: waits until the lagging node has applied all of the above.
        lock.query_drop(format!("SELECT COUNT(*) FROM {HOLD_TABLE}"))
            .await
            .unwrap();
        // Not causal from here on: UNLOCK TABLES must not wait for the applier
        // that waits for it.
        lock.query_drop(engine().eventual_reads()).await.unwrap();
        lock.query_drop(format!("LOCK TABLES {HOLD_TABLE} WRITE"))
            .await
            .unwrap();
        source
            .query_drop(format!("INSERT INTO {HOLD_TABLE} (at) VALUES (1)"))
            .await
            .unwrap();
        Self {
            db: db.name.clone(),
            lagging: db.url_on(lagging),
            lock,
            fc_limit,
        }
    }

    /// The balance as a plain (not causal) read on the lagging node sees it.
    async fn raw_balance(&self, account: u64) -> i64 {
        use mysql_async::prelude::Queryable as _;
        let mut conn = mysql_async::Conn::from_url(&self.lagging).await.unwrap();
        conn.exec_first(
            "SELECT balance FROM accounts WHERE account_id = ?",
            (account,),
        )
        .await
        .unwrap()
        .unwrap()
    }

    /// Returns once a statement of the service on the test's database matching
    /// `pattern` (SQL LIKE) runs on the lagging node, waiting for it to catch
    /// up; panics if `task` answers first, which it could only do from a stale
    /// read.
    async fn until_waiting<T: std::fmt::Debug>(
        &self,
        task: &mut tokio::task::JoinHandle<T>,
        pattern: &str,
    ) {
        use mysql_async::prelude::Queryable as _;
        let mut watch = mysql_async::Conn::from_url(&self.lagging).await.unwrap();
        loop {
            let running: Option<u64> = watch
                .query_first(match engine() {
                    Engine::Galera => format!(
                        "SELECT COUNT(*) FROM information_schema.processlist \
                         WHERE (db = '{db}' OR info LIKE '%`{db}`%') \
                         AND command IN ('Query', 'Execute') AND info LIKE '{pattern}' \
                         AND id <> CONNECTION_ID()",
                        db = self.db
                    ),
                    Engine::GroupReplication => format!(
                        "SELECT COUNT(*) FROM performance_schema.threads \
                         WHERE (PROCESSLIST_DB = '{db}' OR PROCESSLIST_INFO LIKE '%`{db}`%') \
                         AND PROCESSLIST_COMMAND IN ('Query', 'Execute') \
                         AND PROCESSLIST_INFO LIKE '{pattern}' \
                         AND PROCESSLIST_ID <> CONNECTION_ID()",
                        db = self.db
                    ),
                })
                .await
                .unwrap();
            if running.unwrap_or(0) > 0 {
                return;
            }
            tokio::select! {
                answer = &mut *task => {
                    panic!("answered while the node had not applied the write: {answer:?}")
                }
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }

    async fn release(mut self) {
        use mysql_async::prelude::Queryable as _;
        self.lock.query_drop("UNLOCK TABLES").await.unwrap();
        if let Some(limit) = &self.fc_limit {
            set_fc_limit(&mut self.lock, limit).await;
        }
    }
}

/// A charge through a node that has not applied a credit committed through
/// another must not be declined from the stale balance (the decline would be
/// stored under its key and replayed for good): it waits for its node to
/// catch up, and then sees the credit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn a_decline_is_never_stored_from_a_stale_read() {
    let nodes = nodes();
    let db = cluster_db();
    let (writer, lagging) = writer_and_lagging(&db, 1).await;
    let account = writer.funded_account("USD", 11).await;
    let lagging = lagging.channel().await;
    // Through node 2 before the hold, so a keyed connection is open there.
    raw_call(lagging.clone(), "Charge", charge("before", account, 1))
        .await
        .unwrap();
    assert_eq!(balance(lagging.clone(), account).await, 10);

    let applier = Applier::hold(&db, &nodes[0], &nodes[1]).await;
    writer
        .client()
        .await
        .credit(credit("top-up", account, 100))
        .await
        .unwrap();
    assert_eq!(applier.raw_balance(account).await, 10, "node 2 lags");
    let mut paid = tokio::spawn(raw_call(
        lagging.clone(),
        "Charge",
        charge("after-top-up", account, 50),
    ));
    applier
        .until_waiting(&mut paid, "INSERT INTO idempotency_keys%")
        .await;
    applier.release().await;
    let (md, reply) = paid
        .await
        .unwrap()
        .expect("the charge sees the credit, not INSUFFICIENT_FUNDS");
    assert!(!replayed(&md));
    let (md, again) = raw_call(lagging, "Charge", charge("after-top-up", account, 50))
        .await
        .unwrap();
    assert!(replayed(&md));
    assert_eq!(again, reply);
    assert_eq!(db.balance(account).await, 60);
}

/// An instance starting on a node that has not yet applied the migrations
/// another instance ran through another node waits for them, and finds
/// nothing to do (it does not apply them again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn an_instance_starting_on_a_lagging_node_sees_the_migrations() {
    use mysql_async::prelude::Queryable as _;
    let nodes = nodes();
    let db = cluster_db();
    let mut server = mysql_async::Conn::from_url(nodes[0].as_str())
        .await
        .unwrap();
    server
        .query_drop(format!("CREATE DATABASE {}", db.name))
        .await
        .unwrap();
    let applier = Applier::hold(&db, &nodes[0], &nodes[1]).await;
    let small = Config {
        pool_size: 2,
        ..Config::default()
    };
    let first = on_node(&db, 0, small.clone()).await;
    let second = small.settings(db.url_on(&nodes[1]));
    let mut second = tokio::spawn(async move {
        ledger::app::Application::build(second, None)
            .await
            .map(drop)
    });
    applier.until_waiting(&mut second, "%").await;
    applier.release().await;
    second
        .await
        .unwrap()
        .expect("the second instance starts, finding nothing to migrate");
    let account = first.funded_account("USD", 5).await;
    assert_eq!(db.balance(account).await, 5);
    let migrations = db
        .count("SELECT COUNT(*) FROM __diesel_schema_migrations")
        .await;
    let embedded = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("up.sql").exists())
        .count();
    assert_eq!(migrations, u64::try_from(embedded).unwrap());
}

/// Routed by account, 300 concurrent charges on one account through two
/// instances that prefer two different nodes all go through one node and wait
/// on its row lock: no conflict exhausts the retries, every call succeeds the
/// first time, and the balance is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn routed_by_account_a_hot_account_through_two_nodes_answers_every_call() {
    let db = cluster_db();
    let args = [&["--routing", "account"][..], &HOT_ACCOUNT_ARGS].concat();
    let (_instances, channels) = serve(&db, &every_node_from_each(&db, 2), |_| args.clone()).await;
    let start = 1_000_000;
    let account = support::open_funded(
        &mut pb::ledger_client::LedgerClient::new(channels[0].clone()),
        "hot",
        "USD",
        start,
    )
    .await;

    let calls = at_once(300, &channels, |n, channel| {
        let n = i64::try_from(n).unwrap();
        raw_call(
            channel,
            "Charge",
            charge(&format!("hot-{n}"), account, 1 + n % 7),
        )
    });
    for call in calls {
        let answer = call.await.unwrap();
        assert!(answer.is_ok(), "every call succeeds: {:?}", answer.err());
    }
    let total: i64 = (0..300).map(|n| 1 + n % 7).sum();
    assert_eq!(db.balance(account).await, start - total);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        300
    );
}

/// Routed by account, with retrying clients on three instances (each given
/// every node), node 2 is SIGKILLed: the accounts it served move to their next
/// node, and every account can still be charged through every instance; after
/// it rejoins, nothing was lost or doubled and the audit passes on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn routed_by_account_losing_a_node_under_load_loses_nothing() {
    let nodes = nodes();
    let db = cluster_db();
    let args = [&["--routing", "account"][..], &NODE_LOSS_ARGS].concat();
    let (_instances, channels) = serve(&db, &every_node_from_each(&db, 3), |_| args.clone()).await;
    let accounts = open_accounts(&channels[0]).await;

    let seed: u64 = rand::random();
    println!("node loss, routed by account: seed {seed}");
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(seed, 9, &channels, &accounts, &counters, &stop).await;
    counters.until_more("the clients are under way").await;

    let node_2 = kill("2");
    // Each account, through each instance, while node 2 is dead: the accounts
    // it served have moved. Keyed like the clients' own, so the check below
    // counts them.
    let mut moved = BTreeMap::new();
    for (i, channel) in channels.iter().enumerate() {
        for account in &accounts {
            let key = format!("c-moved-{i}-{account}");
            let (_, body) = settle(channel.clone(), charge(&key, *account, 1))
                .await
                .unwrap_or_else(|e| panic!("{key}: {e:?}"));
            let entry = <pb::ChargeReply as prost::Message>::decode(body)
                .unwrap()
                .entry
                .unwrap();
            let posted = workload::Posted {
                account: *account,
                delta: -1,
                entry_id: entry.entry_id,
            };
            moved.insert(key, workload::Final::Posted(vec![posted]));
        }
    }
    node_2.restart();
    counters
        .until_more("the clients go on once the node is back")
        .await;
    stop.store(true, Ordering::Relaxed);
    let mut run = clients.await.unwrap();
    run.finals.extend(moved);

    let verified = verify(&db, &accounts, &run).await;
    for node in &nodes {
        assert_audit_passes(&db.url_on(node)).await;
    }
    println!(
        "node loss, routed by account: {}\n{verified}",
        counters.summary()
    );
}

/// `ledger_transaction_retries_total{reason="conflict"}` of an instance.
async fn conflicts_retried(metrics: SocketAddr) -> u64 {
    let series = scrape(metrics).await;
    series
        .get(r#"ledger_transaction_retries_total{reason="conflict"}"#)
        .copied()
        .unwrap_or(0)
}

/// What one workload's calls were answered, and the conflicts retried for them.
#[derive(Debug, Default)]
struct Tally {
    calls: u64,
    ok: u64,
    aborted: u64,
    other: u64,
    conflicts: u64,
}

/// The hot-account and storm workloads through two instances preferring two
/// different nodes, with `first` and with `account` routing: conflicts retried
/// per 1,000 calls and calls answered ABORTED (README, Running on a cluster).
/// Calls are not retried by the client, so every ABORTED shows. Routed by
/// account, no call may be answered ABORTED. Runs with `LEDGER_TEST_MEASURE=1`;
/// `LEDGER_TEST_MEASURE_ATTEMPTS` sets the instances' `--max-attempts` (10).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn measure_conflicts_by_routing() {
    if std::env::var_os("LEDGER_TEST_MEASURE").is_none() {
        println!("measure_conflicts_by_routing: set LEDGER_TEST_MEASURE=1 to run");
        return;
    }
    for routing in ["first", "account"] {
        for workload in ["hot-account", "storm"] {
            let tally = measure(routing, workload).await;
            let per_1000 = tally.conflicts * 1000 / tally.calls.max(1);
            println!(
                "MEASURE {:?} routing={routing} workload={workload} calls={} ok={} aborted={} \
                 other={} conflicts_retried={} per_1000={per_1000}",
                engine(),
                tally.calls,
                tally.ok,
                tally.aborted,
                tally.other,
                tally.conflicts
            );
            if routing == "account" {
                assert_eq!(tally.aborted + tally.other, 0, "{workload}: {tally:?}");
            }
        }
    }
}

async fn measure(routing: &str, workload: &str) -> Tally {
    let db = cluster_db();
    let attempts =
        std::env::var("LEDGER_TEST_MEASURE_ATTEMPTS").unwrap_or_else(|_| "10".to_owned());
    let metrics: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let args = |i: usize| {
        let measured = ["--metrics-listen", &metrics[i], "--max-attempts", &attempts];
        [&["--routing", routing][..], &HOT_ACCOUNT_ARGS, &measured].concat()
    };
    let (_instances, channels) = serve(&db, &every_node_from_each(&db, 2), args).await;
    let metrics: Vec<SocketAddr> = metrics.iter().map(|m| m.parse().unwrap()).collect();
    let mut client = pb::ledger_client::LedgerClient::new(channels[0].clone());
    let account = support::open_funded(&mut client, "measure", "USD", 1_000_000).await;
    let mut before = 0;
    for m in &metrics {
        before += conflicts_retried(*m).await;
    }
    // hot-account: 300 keys, one copy each; storm: 20 keys, 16 copies each.
    let (keys, copies) = if workload == "storm" {
        (20, 16)
    } else {
        (300, 1)
    };
    let calls = keys * copies;
    let tasks = at_once(calls, &channels, |n, channel| {
        let key = format!("{workload}-{}", n % keys);
        raw_call(channel, "Charge", charge(&key, account, 3))
    });
    let mut tally = Tally {
        calls: u64::try_from(calls).unwrap(),
        ..Tally::default()
    };
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => tally.ok += 1,
            Err(s) if s.code() == Code::Aborted => tally.aborted += 1,
            Err(s) => {
                println!("MEASURE other answer: {s:?}");
                tally.other += 1;
            }
        }
    }
    for m in &metrics {
        tally.conflicts += conflicts_retried(*m).await;
    }
    tally.conflicts -= before;
    tally
}

/// Two batches naming the same 40 keys (on four accounts), sent at once through
/// instances on two nodes: an item that conflicted at certification and came
/// back retryable is sent again as its own call, as a client settles it. Each
/// key takes effect once, and where both batches answered an item, they agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn two_batches_sharing_keys_through_two_nodes_take_each_key_once() {
    use pb::batch_item::Call;
    use pb::batch_result::Result as Outcome;
    let db = cluster_db();
    let apps = instances(&db, |_| Config::default()).await;
    let mut accounts = Vec::new();
    for _ in 0..4 {
        accounts.push(apps[0].funded_account("USD", 10_000).await);
    }
    let channels = channels(&apps[..2]).await;
    let charges: Vec<pb::ChargeRequest> = (0..40)
        .map(|i| {
            charge(
                &format!("pair-batch-{i}"),
                accounts[i % 4],
                1 + i64::try_from(i % 3).unwrap(),
            )
        })
        .collect();
    let request = pb::BatchRequest {
        items: charges
            .iter()
            .map(|c| pb::BatchItem {
                call: Some(Call::Charge(c.clone())),
            })
            .collect(),
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let sent: Vec<_> = channels
        .iter()
        .map(|channel| {
            let (channel, request, barrier) = (channel.clone(), request.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut client = pb::ledger_client::LedgerClient::new(channel);
                barrier.wait().await;
                client.batch(request).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for (batch, channel) in sent.into_iter().zip(&channels) {
        let results = match batch.await.unwrap() {
            Ok(reply) => reply.into_inner().results,
            Err(status) => {
                assert!(
                    matches!(status.code(), Code::Aborted | Code::Unavailable),
                    "{status:?}"
                );
                vec![pb::BatchResult::default(); charges.len()]
            }
        };
        // What each item came to: its reply, settled through its own call when
        // the batch left it retryable.
        let mut settled = Vec::new();
        for (result, charge) in results.into_iter().zip(&charges) {
            let reply = match result.result {
                Some(Outcome::Charge(reply)) => reply,
                Some(Outcome::Error(status))
                    if !matches!(
                        Code::from_i32(status.code),
                        Code::Aborted | Code::Unavailable
                    ) =>
                {
                    panic!("{}: {status:?}", charge.idempotency_key)
                }
                _ => {
                    let (_, body) = settle(channel.clone(), charge.clone()).await.unwrap();
                    <pb::ChargeReply as prost::Message>::decode(body).unwrap()
                }
            };
            settled.push(reply);
        }
        answers.push(settled);
    }
    assert_eq!(answers[0], answers[1], "one outcome a key");
    for i in 0..40 {
        assert_eq!(db.entries_for_key(&format!("pair-batch-{i}")).await, 1);
    }
    for (n, account) in accounts.iter().enumerate() {
        let debited: i64 = (0..40)
            .filter(|i| i % 4 == n)
            .map(|i| 1 + i64::try_from(i % 3).unwrap())
            .sum();
        assert_eq!(db.balance(*account).await, 10_000 - debited);
    }
    assert_audit_passes(&db.url).await;
}

/// A subscription delivered by the instance on node 3 goes on through the
/// instance on node 2 when node 3 is lost: the receiver gets every entry, in
/// order, none skipped, each signature verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a multi-primary cluster: scripts/galera-cluster.sh or gr-cluster.sh start"]
async fn deliveries_go_on_through_a_nodes_loss() {
    let db = cluster_db();
    let third = on_node(&db, 2, Config::default()).await;
    let receiver = support::receiver::Receiver::start().await;
    let mut client = third.client().await;
    let account = third.funded_account("USD", 1_000_000).await;
    let reply = client
        .create_subscription(pb::CreateSubscriptionRequest {
            idempotency_key: "hook".into(),
            url: receiver.url(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    receiver.set_secret(reply.secret);
    let subscription = reply.subscription.unwrap();
    let channel = third.channel().await;
    for i in 0..50 {
        settle(channel.clone(), charge(&format!("before-{i}"), account, 1))
            .await
            .unwrap();
    }
    // Only the instance on node 3 runs yet: it holds the lease and delivers.
    let before = support::number_entries(&db).await;
    let patience = Duration::from_secs(180);
    receiver
        .wait_for(|s| s.acknowledged_sequences().contains(&before), patience)
        .await;
    let second = on_node(&db, 1, Config::default()).await;
    let channel = second.channel().await;
    let node_3 = kill("3");
    for i in 0..200 {
        settle(channel.clone(), charge(&format!("after-{i}"), account, 1))
            .await
            .unwrap();
    }
    let last = support::number_entries(&db).await;
    let state = receiver
        .wait_for(|s| s.acknowledged_sequences().contains(&last), patience)
        .await;
    let expected: Vec<u64> = (subscription.cursor + 1..=last).collect();
    assert!(expected.len() >= 250, "{}", expected.len());
    state.assert_delivered(subscription.subscription_id, &expected);
    node_3.restart();
    drop(third);
}
