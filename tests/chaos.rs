//! The chaos suite: money is neither created nor lost, and every key takes effect
//! at most once, while things break on purpose.
//!
//! Client tasks run a seeded workload (Credits, Charges, Transfers, Posts,
//! Refunds, holds, limits and Reversals) against three `ledger serve` processes, each operation with its own key, retrying with the same
//! key on UNAVAILABLE, ABORTED, DEADLINE_EXCEEDED and transport errors until a final
//! answer; some operations go to two or three instances at once. Meanwhile a fault
//! injector SIGKILLs and restarts instances, KILLs the service's database
//! connections mid-transaction, and restarts the database server. At the end,
//! `ledger audit` passes, every key the clients saw succeed has exactly one entry,
//! every declined key has none, each balance equals the clients' model, and
//! every entry has its place in the change stream.
//!
//! `LEDGER_CHAOS_SEED` replays a run's workload and fault schedule;
//! `LEDGER_CHAOS_SECS` sets its length (default 40 s); `LEDGER_CHAOS_REPORT` names a
//! file for the run's summary.

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

use ledger_devtools::managed::ManagedServer;
use mysql_async::prelude::Queryable as _;
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use support::{LedgerProcess, TestDb, free_port, is_mariadb, private_server};
use tokio::sync::Mutex;
use tonic::transport::Channel;
use workload::{Counters, open_accounts, run_clients, verify};

const INSTANCES: usize = 3;
const CLIENTS: u64 = 12;
/// Arguments of every instance: short lock waits, so faults surface quickly.
const SERVE_ARGS: &[&str] = &[
    "--lock-wait-timeout",
    "2s",
    "--pool-size",
    "8",
    "--connect-timeout",
    "120s",
    "--shutdown-grace",
    "5s",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn money_is_neither_created_nor_lost_under_faults() {
    let seed: u64 =
        std::env::var("LEDGER_CHAOS_SEED").map_or_else(|_| rand::random(), |s| s.parse().unwrap());
    let secs: u64 = std::env::var("LEDGER_CHAOS_SECS").map_or(40, |s| s.parse().unwrap());
    println!("chaos: seed {seed} (LEDGER_CHAOS_SEED={seed} replays it), {secs} s");

    let (_dir, server) = private_server("ledger-chaos-").await;
    let server = Arc::new(Mutex::new(server));
    let db = TestDb::on(server.lock().await.server_url());
    let addrs: Vec<SocketAddr> = (0..INSTANCES)
        .map(|_| format!("127.0.0.1:{}", free_port()).parse().unwrap())
        .collect();
    let mut instances = Vec::new();
    for addr in &addrs {
        instances.push(LedgerProcess::serve_on(&db, *addr, SERVE_ARGS).await);
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

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = run_clients(seed, CLIENTS, &channels, &accounts, &counters, &stop).await;
    let faults = inject_faults(seed, secs, &db, &addrs, &mut instances, &server).await;
    stop.store(true, Ordering::Relaxed);
    let run = clients.await.unwrap();

    // Whatever was killed, every entry gets its number, in order, without a hole.
    let numbered = support::until_sequenced(&db, Duration::from_secs(30)).await;
    support::assert_stream_sound(&db).await;
    let verified = verify(&db, &accounts, &run).await;
    assert!(
        counters.acknowledged("Reverse") > 0,
        "some reversals reversed their original: {}",
        counters.summary()
    );
    let summary = format!(
        "chaos on {}: seed {seed}, {secs} s; faults: {faults}; audit passed, balances match the model; \
         every entry numbered {numbered:?} after the load; {}\n{verified}",
        server.lock().await.flavor_name(),
        counters.summary(),
    );
    println!("{summary}");
    if let Ok(path) = std::env::var("LEDGER_CHAOS_REPORT") {
        std::fs::write(path, summary + "\n").unwrap();
    }
    drop(instances);
    server.lock().await.stop().await.unwrap();
}

/// Breaks things on a seeded schedule until `secs` have passed; returns a summary.
async fn inject_faults(
    seed: u64,
    secs: u64,
    db: &TestDb,
    addrs: &[SocketAddr],
    instances: &mut [LedgerProcess],
    server: &Mutex<ManagedServer>,
) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    let (mut kills, mut killed_connections, mut db_restarts) = (0, 0, 0);
    while tokio::time::Instant::now() < end {
        // The seeded schedule is the test: faults at random times, not on events.
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..4000))).await;
        match rng.random_range(0..3) {
            0 => {
                let i = rng.random_range(0..instances.len());
                instances[i].signal(Signal::SIGKILL);
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..1500))).await;
                instances[i] = LedgerProcess::serve_on(db, addrs[i], SERVE_ARGS).await;
                kills += 1;
            }
            1 => killed_connections += kill_connections(db).await,
            _ => {
                server.lock().await.restart().await.unwrap();
                db_restarts += 1;
            }
        }
    }
    format!(
        "{kills} instance SIGKILLs, {killed_connections} database connections KILLed, {db_restarts} database restarts"
    )
}

/// KILLs the connections of the service that are running a statement (or, if none
/// is, every connection of the service) from an administrator's session.
async fn kill_connections(db: &TestDb) -> u64 {
    let Ok(mut admin) = mysql_async::Conn::from_url(&db.url).await else {
        return 0;
    };
    let sessions = if is_mariadb(&mut admin).await {
        "SELECT ID, COMMAND <> 'Sleep' FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
    } else {
        "SELECT PROCESSLIST_ID, PROCESSLIST_COMMAND <> 'Sleep' FROM performance_schema.threads \
         WHERE PROCESSLIST_DB = DATABASE() AND PROCESSLIST_ID <> CONNECTION_ID()"
    };
    let rows: Vec<(u64, bool)> = admin.query(sessions).await.unwrap_or_default();
    let busy: Vec<u64> = rows
        .iter()
        .filter(|(_, busy)| *busy)
        .map(|(id, _)| *id)
        .collect();
    let targets = if busy.is_empty() {
        rows.iter().map(|(id, _)| *id).collect()
    } else {
        busy
    };
    let mut killed = 0;
    for id in targets {
        if admin.query_drop(format!("KILL {id}")).await.is_ok() {
            killed += 1;
        }
    }
    killed
}
