//! The clients of the chaos and cluster suites: a seeded stream of Credits and
//! Charges over a few accounts, each operation with its own key, retried with the
//! same key until it gets a final answer, some sent to several instances at once;
//! and the check that the ledger agrees with what they saw.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use tonic::Code;
use tonic::transport::Channel;

use crate::support::{self, TestDb};

pub const ACCOUNTS: u64 = 8;
pub const OPENING_BALANCE: i64 = 20_000;
/// Each attempt's deadline.
const CALL_DEADLINE: Duration = Duration::from_secs(3);

#[derive(Default)]
pub struct Counters {
    pub ops: AtomicU64,
    pub duplicated_ops: AtomicU64,
    pub retries: AtomicU64,
    pub declined: AtomicU64,
}

/// A key's final answer, as the clients saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Final {
    Posted {
        account: u64,
        delta: i64,
        entry_id: u64,
    },
    Declined(Code),
}

impl Counters {
    pub fn summary(&self) -> String {
        format!(
            "{} operations ({} sent to several instances at once, {} declined), {} client retries",
            self.ops.load(Ordering::Relaxed),
            self.duplicated_ops.load(Ordering::Relaxed),
            self.declined.load(Ordering::Relaxed),
            self.retries.load(Ordering::Relaxed),
        )
    }
}

/// Runs `clients` seeded clients over `channels` until `stop`; returns every key's
/// final answer.
pub async fn run_clients(
    seed: u64,
    clients: u64,
    channels: &[Channel],
    accounts: &[u64],
    counters: &Arc<Counters>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<String, Final>> {
    let accounts: Arc<[u64]> = accounts.into();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            tokio::spawn(client(
                seed ^ (c + 1),
                c,
                channels.to_vec(),
                accounts.clone(),
                counters.clone(),
                stop.clone(),
            ))
        })
        .collect();
    tokio::spawn(async move {
        let mut finals = BTreeMap::new();
        for t in tasks {
            finals.extend(t.await.unwrap());
        }
        finals
    })
}

/// Opens and funds the accounts; returns their ids (a cluster may not number
/// them 1, 2, 3: Galera spaces auto-increment ids by the cluster size).
pub async fn open_accounts(channel: &Channel) -> Vec<u64> {
    let mut client = LedgerClient::new(channel.clone());
    let mut ids = Vec::new();
    for n in 1..=ACCOUNTS {
        let id = support::open_funded(&mut client, &n.to_string(), "USD", OPENING_BALANCE).await;
        ids.push(id);
    }
    ids
}

/// One client: a seeded stream of operations, each retried until final.
async fn client(
    seed: u64,
    id: u64,
    channels: Vec<Channel>,
    accounts: Arc<[u64]>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, Final> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut finals = BTreeMap::new();
    let mut n = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("c{id}-{n}");
        let account = accounts[rng.random_range(0..accounts.len())];
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
            let mut request = tonic::Request::new(support::charge(&key, account, amount));
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

pub async fn verify(db: &TestDb, accounts: &[u64], finals: &BTreeMap<String, Final>) {
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
    let mut model: BTreeMap<u64, i64> = accounts.iter().map(|a| (*a, OPENING_BALANCE)).collect();
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
