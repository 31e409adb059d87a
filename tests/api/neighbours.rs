//! Calls on different accounts do not wait for each other, however close their
//! ids: a transaction locks its accounts and the holds and entries it names, and
//! reads the held holds of its accounts without a lock, so it holds none of the
//! gaps of the holds' index, where the neighbouring accounts' holds are placed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;

use crate::support::{
    Config, Gate, TestApp, TestDb, assert_audit_passes, capture, charge, credit, place_hold,
    raw_call, transfer, void,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const HOUR: Duration = Duration::from_secs(3600);

/// Far longer than placing a hold takes, far shorter than the lock wait: a call
/// not answered by then waits for a lock.
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

/// A call on an account with an active hold is held open before its COMMIT
/// (a charge, then a void of the hold, which names it); meanwhile holds are
/// placed on the accounts just below and just above it, which have none: in the
/// holds' index they sit right before and right after its holds. Both are placed
/// while the call is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_are_placed_beside_an_account_whose_call_is_open() {
    for held in ["Charge", "VoidHold"] {
        let db = TestDb::new();
        let gate = Gate::new("held");
        let app = TestApp::spawn_with(
            &db,
            Config {
                gate: Some(gate.clone()),
                // Each call in a transaction of its own, so the neighbours' do
                // not queue behind the held one for a batch writer.
                batch_writers: Some(0),
                ..Config::default()
            },
        )
        .await;
        let below = app.funded_account("USD", 100).await;
        let middle = app.funded_account("USD", 100).await;
        let above = app.funded_account("USD", 100).await;
        assert!(below < middle && middle < above, "{below} {middle} {above}");
        let mut client = app.client().await;
        let hold = client
            .place_hold(place_hold("middle-hold", middle, 30, HOUR))
            .await
            .unwrap()
            .into_inner()
            .hold
            .unwrap();

        let channel = app.channel().await;
        let call = if held == "Charge" {
            tokio::spawn(raw_call(channel, "Charge", charge("held", middle, 10)))
        } else {
            tokio::spawn(raw_call(channel, "VoidHold", void("held", hold.hold_id)))
        };
        gate.reached().await;
        let mut beside = Vec::new();
        for (key, account) in [("below", below), ("above", above)] {
            let mut client = client.clone();
            beside.push(tokio::spawn(async move {
                tokio::time::timeout(
                    ANSWERED_WITHIN,
                    client.place_hold(place_hold(key, account, 10, HOUR)),
                )
                .await
            }));
        }
        let mut answered = Vec::new();
        for placed in beside {
            answered.push(placed.await.unwrap());
        }
        let still_held = !call.is_finished();
        gate.release();
        for (placed, side) in answered.into_iter().zip(["below", "above"]) {
            let placed = placed.unwrap_or_else(|_| {
                panic!("{held}: the hold {side} waited for the held call's transaction")
            });
            placed.unwrap_or_else(|e| panic!("{held}: the hold {side}: {e:?}"));
        }
        assert!(still_held, "{held}: the call was held throughout");
        call.await.unwrap().expect("the held call commits");
        assert_audit_passes(&db.url).await;
    }
}

/// Counts the transactions the service retries after a conflict (a deadlock):
/// the service's `ledger_transaction_retries_total{reason="conflict"}`, recorded
/// on the threads of one test's runtime only. A thread may have a metrics
/// recorder of its own, so tests running beside this one, whose deadlocks the
/// server's counter would mix in, count nothing here.
#[derive(Debug, Default)]
struct Conflicts(Arc<AtomicU64>);

impl Conflicts {
    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl metrics::Recorder for Conflicts {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let conflict = key.name() == "ledger_transaction_retries_total"
            && key
                .labels()
                .any(|l| l.key() == "reason" && l.value() == "conflict");
        if conflict {
            metrics::Counter::from_arc(self.0.clone())
        } else {
            metrics::Counter::noop()
        }
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Deadlocks the server has detected since it started, every database's.
async fn innodb_deadlocks(db: &TestDb) -> u64 {
    let mut conn = db.sql().await;
    let mariadb: Option<(String, String)> = conn
        .query_first("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        .await
        .unwrap();
    if let Some((_, count)) = mariadb {
        return count.parse().unwrap();
    }
    conn.query_first(
        "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'",
    )
    .await
    .unwrap()
    .unwrap_or(0)
}

const ACCOUNTS: usize = 6;
const CLIENTS: usize = 16;
const CALLS_PER_CLIENT: usize = 30;

/// Hold-heavy traffic on six accounts with consecutive ids, through group commit
/// (four writers, so batches mix accounts): sixteen clients at once, each making
/// 30 calls in turn on the accounts one after another: holds placed (some with a
/// ttl of a second, released by a later call once expired), its earlier holds
/// captured and voided, charges, credits and transfers to the next account. No
/// call is retried after a deadlock, every call succeeds, and the audit passes.
#[test]
fn hold_heavy_calls_on_neighbouring_accounts_never_deadlock() {
    let conflicts: &'static Conflicts = Box::leak(Box::default());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        // The guard would restore the thread's previous recorder when dropped;
        // the thread ends with the runtime, which ends with the test.
        .on_thread_start(|| std::mem::forget(metrics::set_default_local_recorder(conflicts)))
        .build()
        .unwrap();
    runtime.block_on(async {
        let db = TestDb::new();
        let app = TestApp::spawn_with(
            &db,
            Config {
                batch_writers: Some(4),
                ..Config::default()
            },
        )
        .await;
        let mut accounts = Vec::new();
        for _ in 0..ACCOUNTS {
            accounts.push(app.funded_account("USD", 1_000_000).await);
        }
        let accounts: Arc<[u64]> = accounts.into();
        let client = app.client().await;
        let deadlocks_before = innodb_deadlocks(&db).await;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| tokio::spawn(mixed_calls(client.clone(), accounts.clone(), c)))
            .collect();
        for client in clients {
            client.await.unwrap();
        }
        let deadlocks = innodb_deadlocks(&db).await - deadlocks_before;
        eprintln!(
            "{} calls: {} retried after a conflict; the server detected {deadlocks} \
             deadlocks meanwhile (every database's)",
            CLIENTS * CALLS_PER_CLIENT,
            conflicts.get()
        );
        assert_eq!(conflicts.get(), 0, "no call was retried after a deadlock");
        assert_audit_passes(&db.url).await;
    });
}

/// One client's calls, one at a time, each of which must succeed.
async fn mixed_calls(mut c: Client, accounts: Arc<[u64]>, client: usize) {
    let mut held: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    for step in 0..CALLS_PER_CLIENT {
        let i = (client + step) % accounts.len();
        let (account, next) = (accounts[i], accounts[(i + 1) % accounts.len()]);
        let key = format!("c{client}-{step}");
        let answer = match step % 7 {
            0 | 1 => {
                let ttl = if step % 7 == 0 {
                    HOUR
                } else {
                    Duration::from_secs(1)
                };
                let placed = c.place_hold(place_hold(&key, account, 10, ttl)).await;
                placed.map(|reply| {
                    if ttl == HOUR {
                        held.push_back(reply.into_inner().hold.unwrap().hold_id);
                    }
                })
            }
            2 => c.charge(charge(&key, account, 3)).await.map(drop),
            3 => c.credit(credit(&key, account, 2)).await.map(drop),
            4 => c.transfer(transfer(&key, account, next, 1)).await.map(drop),
            5 => match held.pop_front() {
                Some(oldest) => c.capture_hold(capture(&key, oldest, 5)).await.map(drop),
                None => c.charge(charge(&key, account, 3)).await.map(drop),
            },
            _ => match held.pop_front() {
                Some(oldest) => c.void_hold(void(&key, oldest)).await.map(drop),
                None => c.credit(credit(&key, account, 2)).await.map(drop),
            },
        };
        answer.unwrap_or_else(|e| panic!("client {client}, call {step}: {e:?}"));
    }
}
