//! A bank under a nemesis of partitions, on a three-node multi-primary cluster
//! whose nodes run on their own addresses (MariaDB Galera or MySQL Group
//! Replication, started with `--netns`), so that their links can be cut.
//!
//! Ten accounts; eight clients making every keyed operation on eight of them
//! (`workload`: credits and charges, transfers and posts, refunds of charges
//! and captures, holds placed, captured, voided and left to expire, changes of
//! limits, reversals raced by rivals; each retried with its key until final)
//! through two `ledger serve` instances routed by account; a prober per
//! account debiting it by a transfer every 100 ms, to time how long it could
//! not be charged; a prober of stale reads on the other two; a watcher on the
//! change stream. For 60 s the nemesis cuts a random node off, heals, cuts off
//! the node the first instance prefers (also from the service), kills a node
//! and restarts it, cuts one way, and slows links where the kernel has netem.
//! Throughout, the money in the ledger, read in one snapshot through every
//! node that answers, adds up: the balances to their journals, the transfers'
//! legs to zero, the stale-read prober's two accounts to what they opened
//! with. At the end the clients' model holds (nothing lost or doubled, no
//! refund over its charge, no hold resolved twice or captured once expired, no
//! acknowledged debit below the floor in force, each operation reversed at
//! most once, every decline stored; `workload::verify`), `ledger audit` passes
//! on every node, no decline was stored from a stale read, the watcher saw
//! every entry once, and the counts of each operation and availability are
//! printed.
//!
//! Needs the cluster, then `cargo test --test partitions -- --ignored --nocapture`:
//! - Galera: `scripts/galera-cluster.sh start --netns`, `LEDGER_TEST_CLUSTER=galera`;
//! - Group Replication: `scripts/gr-cluster.sh start --netns`,
//!   `LEDGER_TEST_CLUSTER=group-replication`.
//!
//! `LEDGER_TEST_PARTITION_SECS` sets how long the nemesis runs (60).

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
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use rand::RngExt as _;
use support::cluster::engine;
use support::{LedgerProcess, TestApp, TestDb, assert_audit_passes, free_port};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use workload::{Counters, Final, OPENING_BALANCE, Posted, open_accounts, run_clients, verify};

/// The accounts: the clients' (`workload::ACCOUNTS` of them, with the
/// workload's limits), then the stale-read prober's two.
const ACCOUNTS: usize = 10;
const CLIENTS: u64 = 8;
/// The node (from 1) of the lone instance, given no other: its health must go
/// NOT_SERVING while the node is cut off.
const LONE_NODE: &str = "3";
/// How long a cut or a dead node lasts before the nemesis heals it.
const FAULT: Duration = Duration::from_secs(8);
/// Each attempt's deadline, for the probers as for the clients.
const CALL_DEADLINE: Duration = Duration::from_secs(3);
/// The service's arguments besides the nodes: routed by account; a pool small
/// enough for two instances on three nodes; short lock waits and start-up.
const SERVE_ARGS: [&str; 8] = [
    "--routing",
    "account",
    "--pool-size",
    "6",
    "--lock-wait-timeout",
    "2s",
    "--connect-timeout",
    "30s",
];

/// Runs the cluster's script; returns its exit code and standard output.
async fn script(args: &[&str]) -> (Option<i32>, String) {
    let out = tokio::process::Command::new("bash")
        .arg(engine().script())
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

async fn cluster(args: &[&str]) {
    let (code, _) = script(args).await;
    assert_eq!(code, Some(0), "{} {args:?}", engine().script());
}

/// The nodes' URLs as this host reaches them, from the script: on their own
/// addresses, or the test cannot cut them off.
async fn nodes() -> Vec<String> {
    let (code, urls) = script(&["urls"]).await;
    assert_eq!(code, Some(0));
    let urls: Vec<String> = urls.trim().split(',').map(str::to_owned).collect();
    assert!(
        urls.iter().all(|u| !u.contains("127.0.0.1")),
        "the cluster runs on loopback: start it with --netns ({urls:?})"
    );
    urls
}

/// One step of the nemesis, and the time it was in force.
#[derive(Debug, Clone)]
struct Fault {
    what: String,
    from: Instant,
    to: Instant,
}

/// The longest stretch each account could not be charged: from the first attempt
/// of a prober's debit of it to the debit's final answer, as seen from the start
/// of the run.
#[derive(Default)]
struct Outages {
    /// (account, when the debit was first tried, how long it took to succeed)
    spans: Mutex<Vec<(u64, Instant, Duration)>>,
}

impl Outages {
    async fn record(&self, account: u64, from: Instant) {
        self.spans
            .lock()
            .await
            .push((account, from, from.elapsed()));
    }

    /// The longest span that began during `fault` (or `None`: during none).
    async fn longest(&self, within: Option<&Fault>) -> Option<(u64, Duration)> {
        self.spans
            .lock()
            .await
            .iter()
            .filter(|(_, at, _)| within.is_none_or(|f| *at >= f.from && *at <= f.to))
            .map(|(account, _, took)| (*account, *took))
            .max_by_key(|(_, took)| *took)
    }
}

/// The longest any prober's attempt took, in milliseconds.
static LONGEST_ATTEMPT_MS: AtomicU64 = AtomicU64::new(0);

/// One keyed transfer, sent until final through the instances in turn. Every
/// attempt is answered within its deadline (and a generous margin). When every
/// failed attempt said nothing was recorded, the success is the first to do the
/// work, never a replay: an answer that says nothing was recorded must be true
/// (SPEC 3.6), also for a call cut off with its node.
async fn settle_transfer(
    channels: &[Channel],
    first: usize,
    request: pb::TransferRequest,
) -> Result<pb::TransferReply, tonic::Status> {
    let mut at = first;
    let mut failures = Vec::new();
    loop {
        let mut call = tonic::Request::new(request.clone());
        call.set_timeout(CALL_DEADLINE);
        let sent = Instant::now();
        let answer = LedgerClient::new(channels[at % channels.len()].clone())
            .transfer(call)
            .await;
        let took = sent.elapsed();
        LONGEST_ATTEMPT_MS.fetch_max(u64::try_from(took.as_millis()).unwrap(), Ordering::Relaxed);
        assert!(
            took < CALL_DEADLINE + Duration::from_secs(5),
            "{}: an attempt took {took:?}, past its deadline of {CALL_DEADLINE:?}",
            request.idempotency_key
        );
        match answer {
            Ok(reply) => {
                let all_said_nothing = !failures.is_empty()
                    && failures
                        .iter()
                        .all(|s: &tonic::Status| s.message().contains("nothing was recorded"));
                assert!(
                    !(all_said_nothing && support::replayed(reply.metadata())),
                    "{}: replayed although every failed attempt said nothing was recorded: {failures:?}",
                    request.idempotency_key
                );
                return Ok(reply.into_inner());
            }
            Err(s) if matches!(s.code(), Code::FailedPrecondition | Code::NotFound) => {
                return Err(s);
            }
            Err(s) => {
                assert!(
                    matches!(
                        s.code(),
                        Code::Unavailable
                            | Code::Aborted
                            | Code::DeadlineExceeded
                            | Code::Cancelled
                            | Code::Unknown
                    ),
                    "{}: not a retryable answer: {s:?}",
                    request.idempotency_key
                );
                failures.push(s);
                tokio::time::sleep(Duration::from_millis(20)).await;
                at += 1;
            }
        }
    }
}

/// A transfer's final answer as the clients' model keeps it.
fn final_of(answer: &Result<pb::TransferReply, tonic::Status>) -> Final {
    match answer {
        Ok(reply) => {
            let leg = |e: &Option<pb::Entry>, sign: i64| {
                let e = e.as_ref().unwrap();
                Posted {
                    account: e.account_id,
                    delta: sign * e.amount,
                    entry_id: e.entry_id,
                }
            };
            Final::Posted(vec![leg(&reply.debit, -1), leg(&reply.credit, 1)])
        }
        Err(s) => Final::Declined(s.code()),
    }
}

/// Charges every client account in turn by a transfer of 1 to the next one, every
/// 100 ms, through alternating instances; records how long each debit took to
/// be decided (a success, or a decline for the limits the clients move: either
/// was decided under the account's lock, so the account could be charged).
/// Returns the finals of its keys.
async fn charge_prober(
    channels: Vec<Channel>,
    accounts: Vec<u64>,
    index: usize,
    outages: Arc<Outages>,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, Final> {
    let mut finals = BTreeMap::new();
    let from = accounts[index];
    let to = accounts[(index + 1) % accounts.len()];
    let mut n = 0_usize;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("cprobe-{index}-{n}");
        let started = Instant::now();
        let answer = settle_transfer(&channels, n, support::transfer(&key, from, to, 1)).await;
        outages.record(from, started).await;
        finals.insert(key, final_of(&answer));
        // The prober's pace.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    finals
}

/// Moves an amount from `rich` to `target` (both its own) through one instance,
/// then, once acknowledged, everything `target` holds back through the other:
/// that must never be declined, or a decline was decided (and stored) on a read
/// that missed the first move. Returns the finals of its keys and the declines.
async fn stale_read_prober(
    channels: Vec<Channel>,
    (rich, target): (u64, u64),
    outages: Arc<Outages>,
    stop: Arc<AtomicBool>,
) -> (BTreeMap<String, Final>, Vec<String>) {
    let mut finals = BTreeMap::new();
    let mut stale = Vec::new();
    let mut holds = OPENING_BALANCE;
    let mut n = 0_usize;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let amount = rand::rng().random_range(1..=50_i64);
        let there = format!("cstale-{n}-there");
        let started = Instant::now();
        let answer = settle_transfer(
            &channels,
            n,
            support::transfer(&there, rich, target, amount),
        )
        .await;
        finals.insert(there.clone(), final_of(&answer));
        assert!(answer.is_ok(), "{there}: the rich account pays: {answer:?}");
        outages.record(rich, started).await;
        holds += amount;
        let back = format!("cstale-{n}-back");
        let started = Instant::now();
        let answer = settle_transfer(
            &channels,
            n + 1,
            support::transfer(&back, target, rich, holds),
        )
        .await;
        finals.insert(back.clone(), final_of(&answer));
        match answer {
            Ok(_) => {
                outages.record(target, started).await;
                holds = 0;
            }
            Err(s) => stale.push(format!("{back} of {holds}: {s:?}")),
        }
    }
    (finals, stale)
}

/// The money in the ledger in one statement (one snapshot): the sum of the
/// balances, the sum of every entry's effect on its account, what the
/// transfers' legs net to, the sum of `bank`'s balances, and the accounts.
fn money_query(bank: (u64, u64)) -> String {
    use pb::EntryKind as K;
    let (charge, out, into, capture) = (
        K::Charge as i32,
        K::TransferOut as i32,
        K::TransferIn as i32,
        K::Capture as i32,
    );
    format!(
        "SELECT CAST((SELECT SUM(balance) FROM accounts) AS SIGNED), \
         CAST((SELECT COALESCE(SUM(IF(kind IN ({charge}, {out}, {capture}), -amount, amount)), 0) \
           FROM entries) AS SIGNED), \
         CAST((SELECT COALESCE(SUM(CASE kind WHEN {into} THEN amount WHEN {out} THEN -amount \
           ELSE 0 END), 0) FROM entries) AS SIGNED), \
         CAST((SELECT SUM(balance) FROM accounts WHERE account_id IN ({}, {})) AS SIGNED), \
         (SELECT COUNT(*) FROM accounts)",
        bank.0, bank.1
    )
}

/// Every 500 ms, the money in the ledger read in one snapshot through every
/// node that answers within 2 s, causally; panics at the first read in which
/// the balances do not add up to their journals, the transfers' legs to zero,
/// or the stale-read prober's two accounts (`bank`, which only transfers
/// touch) to what they opened with. Returns the snapshots taken and those that
/// failed.
async fn money_watch(
    db: Arc<TestDb>,
    nodes: Vec<String>,
    bank: (u64, u64),
    stop: Arc<AtomicBool>,
) -> (u64, u64) {
    let query = money_query(bank);
    let (mut taken, mut failed) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        for node in &nodes {
            let read = async {
                let mut conn = mysql_async::Conn::from_url(db.url_on(node)).await.ok()?;
                conn.query_drop(engine().causal_reads()).await.ok()?;
                let row: Option<(i64, i64, i64, i64, u64)> = conn.query_first(&query).await.ok()?;
                row
            };
            match tokio::time::timeout(Duration::from_secs(2), read).await {
                Ok(Some((total, journals, legs, bank_total, accounts))) => {
                    assert_eq!(
                        (total, legs, bank_total, accounts),
                        (
                            journals,
                            0,
                            2 * OPENING_BALANCE,
                            u64::try_from(ACCOUNTS).unwrap()
                        ),
                        "the money in one snapshot through {node}: the balances, the transfers' \
                         legs, the bank's two accounts, the accounts"
                    );
                    taken += 1;
                }
                _ => failed += 1,
            }
        }
        // The snapshots' pace.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (taken, failed)
}

/// The nemesis: cycles through its faults until `length` has passed (each at
/// least once), with `counters.disturbed` set while one is in force. Returns
/// what it did, and whether slow links had to be skipped.
async fn nemesis(
    preferred: usize,
    lone: SocketAddr,
    length: Duration,
    counters: Arc<Counters>,
) -> (Vec<Fault>, bool) {
    let began = Instant::now();
    let mut faults = Vec::new();
    let mut no_netem = false;
    let mut rng = rand::rng();
    let mut round = 0;
    while round == 0 || began.elapsed() < length {
        for step in 0..6 {
            let node = rng.random_range(1..=3_usize).to_string();
            let preferred = (preferred + 1).to_string();
            let (what, cut, heal): (String, Vec<&str>, Vec<&str>) = match step {
                0 => (
                    format!("partition node {node}"),
                    vec!["partition", &node],
                    vec!["heal"],
                ),
                1 => (
                    format!(
                        "partition node {preferred}, the first instance's first, also from the service"
                    ),
                    vec!["partition", &preferred, "service"],
                    vec!["heal"],
                ),
                2 => (
                    format!("kill node {node}"),
                    vec!["kill", &node],
                    vec!["restart-node", &node],
                ),
                3 => (
                    format!("one-way partition of node {node}"),
                    vec!["partition-oneway", &node],
                    vec!["heal"],
                ),
                4 => (
                    format!("slow links from node {node} (300 ms)"),
                    vec!["slow", &node, "300"],
                    vec!["heal"],
                ),
                _ => (
                    format!("partition node {LONE_NODE}, the lone instance's only node"),
                    vec!["partition", LONE_NODE],
                    vec!["heal"],
                ),
            };
            counters.disturbed.store(true, Ordering::Relaxed);
            let from = Instant::now();
            let (code, _) = script(&cut).await;
            if step == 4 && code == Some(2) {
                println!("nemesis: {what}: skipped, netem is not available on this kernel");
                no_netem = true;
                counters.disturbed.store(false, Ordering::Relaxed);
                continue;
            }
            assert_eq!(code, Some(0), "nemesis: {what}");
            if step == 5 {
                // Within 30 s (a generous bound); how long it took is printed.
                support::until_health(lone, ServingStatus::NotServing).await;
                println!(
                    "nemesis: {what}: the lone instance NOT_SERVING after {:.1} s",
                    from.elapsed().as_secs_f64()
                );
            }
            // The fault's length is the nemesis's schedule, not a wait.
            tokio::time::sleep(FAULT.saturating_sub(from.elapsed())).await;
            cluster(&heal).await;
            if step == 5 {
                support::until_health(lone, ServingStatus::Serving).await;
            }
            let to = Instant::now();
            counters.disturbed.store(false, Ordering::Relaxed);
            println!(
                "nemesis: {what}: {:.1} s in force until healed",
                (to - from).as_secs_f64()
            );
            faults.push(Fault { what, from, to });
            // A whole cluster between faults, for as long as the schedule says.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        round += 1;
    }
    (faults, no_netem)
}

/// Opens the bank's accounts, each with the same balance: the clients', with
/// the workload's limits, then the stale-read prober's two, with the floor at
/// zero and no ceiling.
async fn open_bank(channel: &Channel) -> Vec<u64> {
    let mut accounts = open_accounts(channel).await;
    let mut client = LedgerClient::new(channel.clone());
    for tag in ["stale-rich", "stale-target"] {
        accounts.push(support::open_funded(&mut client, tag, "USD", OPENING_BALANCE).await);
    }
    assert_eq!(accounts.len(), ACCOUNTS);
    accounts
}

/// Two `ledger serve` instances routed by account, instance `i` given every node
/// starting with node `i`, and their channels; then a lone instance given only
/// node [`LONE_NODE`], last.
async fn instances(db: &TestDb, nodes: &[String]) -> (Vec<LedgerProcess>, Vec<Channel>) {
    TestApp::spawn(db).await; // migrates through node 1, then stops
    let mut processes = Vec::new();
    for first in 0..2 {
        let urls = (0..nodes.len())
            .map(|i| db.url_on(&nodes[(first + i) % nodes.len()]))
            .collect::<Vec<_>>()
            .join(",");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        processes.push(LedgerProcess::serve_urls(&urls, addr, &SERVE_ARGS).await);
    }
    let channels = processes.iter().map(LedgerProcess::channel).collect();
    let lone: usize = LONE_NODE.parse().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let url = db.url_on(&nodes[lone - 1]);
    processes.push(LedgerProcess::serve_urls(&url, addr, &SERVE_ARGS).await);
    (processes, channels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster on its own network: scripts/galera-cluster.sh or gr-cluster.sh start --netns"]
async fn a_bank_under_partitions_loses_nothing() {
    let run_began = Instant::now();
    let nodes = nodes().await;
    let db = Arc::new(TestDb::on_cluster(
        nodes[0].clone(),
        engine().causal_reads(),
    ));
    let (instances, channels) = instances(&db, &nodes).await;
    let lone = instances.last().unwrap().addr;
    let accounts = open_bank(&channels[0]).await;
    let (clients_own, bank) = accounts.split_at(ACCOUNTS - 2);
    let follower = support::follow::Follower::start(channels.clone(), 500);

    let seed: u64 = rand::random();
    println!("partitions ({:?}): seed {seed}", engine());
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(seed, CLIENTS, &channels, clients_own, &counters, &stop).await;
    let outages = Arc::new(Outages::default());
    let probers: Vec<_> = (0..clients_own.len())
        .map(|i| {
            tokio::spawn(charge_prober(
                channels.clone(),
                clients_own.to_vec(),
                i,
                outages.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let bank = (bank[0], bank[1]);
    let stale = tokio::spawn(stale_read_prober(
        channels.clone(),
        bank,
        outages.clone(),
        stop.clone(),
    ));
    let money = tokio::spawn(money_watch(db.clone(), nodes.clone(), bank, stop.clone()));
    counters.until_more("the clients are under way").await;

    let length = std::env::var("LEDGER_TEST_PARTITION_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(60), Duration::from_secs);
    let (faults, no_netem) = nemesis(0, lone, length, counters.clone()).await;
    counters
        .until_more("the clients go on once the cluster is whole")
        .await;
    stop.store(true, Ordering::Relaxed);

    let mut run = clients.await.unwrap();
    for prober in probers {
        run.finals.extend(prober.await.unwrap());
    }
    let (stale_finals, stale_declines) = stale.await.unwrap();
    run.finals.extend(stale_finals);
    let (snapshots, snapshots_failed) = money.await.unwrap();
    assert!(
        stale_declines.is_empty(),
        "declines stored from a stale read: {stale_declines:?}"
    );
    assert!(snapshots > 0, "the money was read in some snapshot");

    let verified = verify(&db, &accounts, &run).await;
    for node in &nodes {
        assert_audit_passes(&db.url_on(node)).await;
    }
    support::until_sequenced(&db, Duration::from_secs(60)).await;
    let total = usize::try_from(db.count("SELECT COUNT(*) FROM entries").await).unwrap();
    let streamed = follower.finish(total).await;
    support::follow::assert_every_entry_once(&streamed, total);

    report(
        &counters,
        &outages,
        &faults,
        no_netem,
        (snapshots, snapshots_failed),
    )
    .await;
    println!(
        "partitions ({:?}): {}\n{verified}\npartitions ({:?}): run took {:.0} s",
        engine(),
        counters.summary(),
        engine(),
        run_began.elapsed().as_secs_f64()
    );
}

/// `part` of `whole` in percent (counts far below 2^52).
fn percent(part: u64, whole: u64) -> f64 {
    let exact = |n: u64| f64::from(u32::try_from(n).unwrap_or(u32::MAX));
    100.0 * exact(part) / exact(whole.max(1))
}

async fn report(
    counters: &Counters,
    outages: &Outages,
    faults: &[Fault],
    no_netem: bool,
    (snapshots, snapshots_failed): (u64, u64),
) {
    let attempts = counters.attempts_disturbed.load(Ordering::Relaxed);
    let answered = counters.answered_disturbed.load(Ordering::Relaxed);
    println!(
        "partitions ({:?}): during faults {answered} of {attempts} attempts got a final answer ({:.1}%)",
        engine(),
        percent(answered, attempts)
    );
    for fault in faults {
        if let Some((account, took)) = outages.longest(Some(fault)).await {
            println!(
                "partitions ({:?}): {}: the longest any account could not be charged: {:.1} s (account {account})",
                engine(),
                fault.what,
                took.as_secs_f64()
            );
        }
    }
    if let Some((account, took)) = outages.longest(None).await {
        println!(
            "partitions ({:?}): over the run, the longest any account could not be charged: {:.1} s (account {account})",
            engine(),
            took.as_secs_f64()
        );
    }
    println!(
        "partitions ({:?}): the longest attempt took {} ms (deadline {CALL_DEADLINE:?})",
        engine(),
        LONGEST_ATTEMPT_MS.load(Ordering::Relaxed)
    );
    println!(
        "partitions ({:?}): money conserved in {snapshots} snapshots: the balances added up to their journals, \
         the transfers' legs to zero, the bank's two accounts to what they opened with \
         ({snapshots_failed} reads of a cut-off or dead node not answered){}",
        engine(),
        if no_netem {
            "; slow links skipped: netem is not available on this kernel"
        } else {
            ""
        }
    );
}
