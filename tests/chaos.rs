//! The chaos suite: money is neither created nor lost, and every key takes effect
//! at most once, while things break on purpose.
//!
//! Client tasks run a seeded workload of Credits and Charges against three
//! `ledger serve` processes, each operation with its own key, retrying with the same
//! key on UNAVAILABLE, ABORTED, DEADLINE_EXCEEDED and transport errors until a final
//! answer; some operations go to two or three instances at once. Meanwhile a fault
//! injector SIGKILLs and restarts instances, KILLs the service's database
//! connections mid-transaction, and restarts the database server. At the end,
//! `ledger audit` passes, every key the clients saw succeed has exactly one entry,
//! every declined key has none, and each balance equals the clients' model.
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

#[path = "api/helpers.rs"]
mod helpers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use helpers::{LedgerProcess, TestDb, free_port};
use ledger::managed::{ManagedOptions, ManagedServer};
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use tokio::sync::Mutex;
use tonic::Code;
use tonic::transport::Channel;

const INSTANCES: usize = 3;
const ACCOUNTS: u64 = 8;
const CLIENTS: u64 = 12;
const OPENING_BALANCE: i64 = 20_000;
/// Each attempt's deadline.
const CALL_DEADLINE: Duration = Duration::from_secs(3);
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

#[derive(Default)]
struct Counters {
    ops: AtomicU64,
    duplicated_ops: AtomicU64,
    retries: AtomicU64,
    declined: AtomicU64,
}

/// A key's final answer, as the clients saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Final {
    Posted {
        account: u64,
        delta: i64,
        entry_id: u64,
    },
    Declined(Code),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn money_is_neither_created_nor_lost_under_faults() {
    let seed: u64 =
        std::env::var("LEDGER_CHAOS_SEED").map_or_else(|_| rand::random(), |s| s.parse().unwrap());
    let secs: u64 = std::env::var("LEDGER_CHAOS_SECS").map_or(40, |s| s.parse().unwrap());
    println!("chaos: seed {seed} (LEDGER_CHAOS_SEED={seed} replays it), {secs} s");

    let dir = tempfile::Builder::new()
        .prefix("ledger-chaos-")
        .tempdir()
        .unwrap();
    let server = Arc::new(Mutex::new(
        ManagedServer::start(ManagedOptions::in_dir(dir.path()))
            .await
            .unwrap(),
    ));
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
    open_accounts(&channels[0]).await;

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            tokio::spawn(client(
                seed ^ (c + 1),
                c,
                channels.clone(),
                counters.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let faults = inject_faults(seed, secs, &db, &addrs, &mut instances, &server).await;
    stop.store(true, Ordering::Relaxed);
    let mut finals = BTreeMap::new();
    for c in clients {
        finals.extend(c.await.unwrap());
    }

    verify(&db, &finals).await;
    let summary = format!(
        "chaos on {}: seed {seed}, {secs} s, {} operations ({} sent to several instances at once, \
         {} declined), {} client retries; faults: {faults}; audit passed, balances match the model",
        server.lock().await.flavor_name(),
        counters.ops.load(Ordering::Relaxed),
        counters.duplicated_ops.load(Ordering::Relaxed),
        counters.declined.load(Ordering::Relaxed),
        counters.retries.load(Ordering::Relaxed),
    );
    println!("{summary}");
    if let Ok(path) = std::env::var("LEDGER_CHAOS_REPORT") {
        std::fs::write(path, summary + "\n").unwrap();
    }
    drop(instances);
    server.lock().await.stop().await.unwrap();
}

async fn open_accounts(channel: &Channel) {
    let mut client = LedgerClient::new(channel.clone());
    for n in 1..=ACCOUNTS {
        let open = pb::OpenAccountRequest {
            idempotency_key: format!("open-{n}"),
            currency: "USD".into(),
        };
        let id = client
            .open_account(open)
            .await
            .unwrap()
            .into_inner()
            .account
            .unwrap()
            .account_id;
        assert_eq!(id, n);
        let fund = pb::CreditRequest {
            idempotency_key: format!("fund-{n}"),
            account_id: n,
            amount: OPENING_BALANCE,
            currency: "USD".into(),
            description: "opening balance".into(),
        };
        client.credit(fund).await.unwrap();
    }
}

/// One client: a seeded stream of operations, each retried until final.
async fn client(
    seed: u64,
    id: u64,
    channels: Vec<Channel>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, Final> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut finals = BTreeMap::new();
    let mut n = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("c{id}-{n}");
        let account = rng.random_range(1..=ACCOUNTS);
        let amount = rng.random_range(1..=400_i64);
        let credit = rng.random_bool(0.45);
        let copies = if rng.random_bool(0.15) {
            rng.random_range(2..=3)
        } else {
            1
        };
        let first = rng.random_range(0..channels.len());
        let answers = futures::future::join_all((0..copies).map(|copy| {
            let channel = channels[(first + copy) % channels.len()].clone();
            settle(
                channel,
                channels.clone(),
                key.clone(),
                account,
                amount,
                credit,
                counters.clone(),
            )
        }))
        .await;
        assert!(
            answers.iter().all(|a| *a == answers[0]),
            "{key}: copies disagree: {answers:?}"
        );
        counters.ops.fetch_add(1, Ordering::Relaxed);
        if copies > 1 {
            counters.duplicated_ops.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(answers[0], Final::Declined(_)) {
            counters.declined.fetch_add(1, Ordering::Relaxed);
        }
        finals.insert(key, answers[0].clone());
    }
    finals
}

/// Sends one operation until it gets a final answer, moving to the next instance
/// after each failure.
async fn settle(
    first: Channel,
    channels: Vec<Channel>,
    key: String,
    account: u64,
    amount: i64,
    credit: bool,
    counters: Arc<Counters>,
) -> Final {
    let mut channel = first;
    let mut next = 0;
    loop {
        let answer = if credit {
            let mut request = tonic::Request::new(pb::CreditRequest {
                idempotency_key: key.clone(),
                account_id: account,
                amount,
                currency: "USD".into(),
                description: String::new(),
            });
            request.set_timeout(CALL_DEADLINE);
            LedgerClient::new(channel.clone())
                .credit(request)
                .await
                .map(|r| r.into_inner().entry)
        } else {
            let mut request = tonic::Request::new(helpers::charge(&key, account, amount));
            request.set_timeout(CALL_DEADLINE);
            LedgerClient::new(channel.clone())
                .charge(request)
                .await
                .map(|r| r.into_inner().entry)
        };
        match answer {
            Ok(entry) => {
                let entry = entry.expect("a reply has its entry");
                assert_eq!(
                    (
                        entry.account_id,
                        entry.amount,
                        entry.idempotency_key.as_str()
                    ),
                    (account, amount, key.as_str())
                );
                let delta = if credit { amount } else { -amount };
                return Final::Posted {
                    account,
                    delta,
                    entry_id: entry.entry_id,
                };
            }
            Err(status) if matches!(status.code(), Code::FailedPrecondition | Code::NotFound) => {
                assert!(
                    !credit || status.code() != Code::NotFound,
                    "{key}: {status:?}"
                );
                return Final::Declined(status.code());
            }
            Err(status) => {
                assert!(
                    matches!(
                        status.code(),
                        Code::Unavailable
                            | Code::Aborted
                            | Code::DeadlineExceeded
                            | Code::Cancelled
                            | Code::Unknown
                    ),
                    "{key}: not a retryable answer: {status:?}"
                );
                counters.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                channel = channels[next % channels.len()].clone();
                next += 1;
            }
        }
    }
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
    let version: String = admin
        .query_first("SELECT VERSION()")
        .await
        .unwrap()
        .unwrap();
    let sessions = if version.contains("MariaDB") {
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

async fn verify(db: &TestDb, finals: &BTreeMap<String, Final>) {
    let report = ledger::audit::audit(&db.url).await.unwrap();
    assert!(report.passed(), "{report}");

    let mut conn = db.sql().await;
    let entries: Vec<(Vec<u8>, u64)> = conn
        .query("SELECT idempotency_key, entry_id FROM entries WHERE idempotency_key LIKE 'c%'")
        .await
        .unwrap();
    let entries: BTreeMap<String, u64> = entries
        .into_iter()
        .map(|(k, id)| (String::from_utf8(k).unwrap(), id))
        .collect();
    let mut model: BTreeMap<u64, i64> = (1..=ACCOUNTS).map(|a| (a, OPENING_BALANCE)).collect();
    for (key, answer) in finals {
        match answer {
            Final::Posted {
                account,
                delta,
                entry_id,
            } => {
                assert_eq!(
                    entries.get(key),
                    Some(entry_id),
                    "{key} succeeded: its entry"
                );
                *model.get_mut(account).unwrap() += delta;
            }
            Final::Declined(_) => {
                assert_eq!(entries.get(key), None, "{key} was declined: no entry");
            }
        }
    }
    assert_eq!(
        entries.len(),
        finals
            .values()
            .filter(|f| matches!(f, Final::Posted { .. }))
            .count()
    );
    for (account, expected) in model {
        assert_eq!(db.balance(account).await, expected, "account {account}");
    }
}
