//! The clients of the chaos and cluster suites: a seeded stream of operations
//! over a few accounts (Credits, Charges, Transfers, Refunds of the client's own
//! charges, and holds placed then captured or voided; or, for the partitions'
//! bank test, only Transfers and Posts, which keep the money), each with its own key,
//! retried with the same key until it gets a final answer, some sent to several
//! instances at once; and the check that the ledger agrees with what they saw.

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

use crate::support::{self, TestDb, assert_audit_passes};

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
    pub transfers: AtomicU64,
    pub posts: AtomicU64,
    pub refunds: AtomicU64,
    /// Holds placed, captured or voided.
    pub holds: AtomicU64,
    /// Set while a fault is in force (a partition, a node down): the attempts
    /// made meanwhile, and those that got a final answer, are counted apart.
    pub disturbed: AtomicBool,
    pub attempts_disturbed: AtomicU64,
    pub answered_disturbed: AtomicU64,
}

/// What the clients send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Every kind of operation; credits and charges change the money held.
    All,
    /// Transfers and Posts only: the money held stays what the accounts opened with.
    Moves,
}

/// One entry an operation wrote, as its reply named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    pub account: u64,
    pub delta: i64,
    pub entry_id: u64,
}

/// A key's final answer, as the clients saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Final {
    /// Credit, Charge, Transfer, Refund, CaptureHold: the entries written.
    Posted(Vec<Posted>),
    /// PlaceHold.
    Held {
        hold_id: u64,
    },
    /// VoidHold.
    Voided,
    Declined(Code),
}

/// One keyed request of the workload.
#[derive(Debug, Clone)]
enum Request {
    Credit(pb::CreditRequest),
    Charge(pb::ChargeRequest),
    Transfer(pb::TransferRequest),
    Post(pb::PostRequest),
    Refund(pb::RefundRequest),
    PlaceHold(pb::PlaceHoldRequest),
    CaptureHold(pb::CaptureHoldRequest),
    VoidHold(pb::VoidHoldRequest),
}

impl Counters {
    pub fn summary(&self) -> String {
        format!(
            "{} operations ({} transfers, {} posts, {} refunds, {} hold placements and resolutions; {} sent \
             to several instances at once, {} declined), {} client retries",
            self.ops.load(Ordering::Relaxed),
            self.transfers.load(Ordering::Relaxed),
            self.posts.load(Ordering::Relaxed),
            self.refunds.load(Ordering::Relaxed),
            self.holds.load(Ordering::Relaxed),
            self.duplicated_ops.load(Ordering::Relaxed),
            self.declined.load(Ordering::Relaxed),
            self.retries.load(Ordering::Relaxed),
        )
    }
}

/// Runs `clients` seeded clients sending what `mix` says over `channels` until
/// `stop`; returns every key's final answer.
pub async fn run_clients(
    mix: Mix,
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
                mix,
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

/// What one client remembers between its operations.
#[derive(Default)]
struct Memory {
    /// Its charges and captures with what is left to refund: (entry, left).
    refundable: Vec<(u64, i64)>,
    /// Its holds still held: (hold, account, amount).
    held: Vec<(u64, u64, i64)>,
}

/// One client: a seeded stream of operations, each retried until final.
async fn client(
    mix: Mix,
    seed: u64,
    id: u64,
    channels: Vec<Channel>,
    accounts: Arc<[u64]>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> BTreeMap<String, Final> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut finals = BTreeMap::new();
    let mut memory = Memory::default();
    let mut n = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("c{id}-{n}");
        let request = match mix {
            Mix::All => next_request(&mut rng, &key, &accounts, &mut memory),
            Mix::Moves => next_move(&mut rng, &key, &accounts),
        };
        let copies = if rng.random_bool(0.15) {
            rng.random_range(2..=3)
        } else {
            1
        };
        let first = rng.random_range(0..channels.len());
        let answers = futures::future::join_all((0..copies).map(|copy| {
            let channel = channels[(first + copy) % channels.len()].clone();
            settle(channel, channels.clone(), request.clone(), counters.clone())
        }))
        .await;
        assert!(
            answers.iter().all(|a| *a == answers[0]),
            "{key}: copies disagree: {answers:?} ({request:?})"
        );
        counters.ops.fetch_add(1, Ordering::Relaxed);
        if copies > 1 {
            counters.duplicated_ops.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(answers[0], Final::Declined(_)) {
            counters.declined.fetch_add(1, Ordering::Relaxed);
        }
        let kind = match request {
            Request::Transfer(_) => Some(&counters.transfers),
            Request::Post(_) => Some(&counters.posts),
            Request::Refund(_) => Some(&counters.refunds),
            Request::PlaceHold(_) | Request::CaptureHold(_) | Request::VoidHold(_) => {
                Some(&counters.holds)
            }
            Request::Credit(_) | Request::Charge(_) => None,
        };
        if let Some(kind) = kind {
            kind.fetch_add(1, Ordering::Relaxed);
        }
        remember(&mut memory, &request, &answers[0]);
        finals.insert(key, answers[0].clone());
    }
    finals
}

/// The next operation: mostly credits, charges, transfers and posts of 1 to 5
/// legs; refunds of the client's own charges; holds, and the capture or void of
/// one still held.
fn next_request(rng: &mut StdRng, key: &str, accounts: &[u64], memory: &mut Memory) -> Request {
    let account = accounts[rng.random_range(0..accounts.len())];
    let amount = rng.random_range(1..=400_i64);
    let idempotency_key = key.to_owned();
    match rng.random_range(0..100) {
        0..22 => Request::Credit(support::credit(key, account, amount)),
        22..54 => Request::Charge(support::charge(key, account, amount)),
        54..66 => {
            let to = other_than(rng, accounts, account);
            Request::Transfer(support::transfer(key, account, to, amount))
        }
        66..72 => random_post(rng, key, accounts),
        72..80 if !memory.refundable.is_empty() => {
            let i = rng.random_range(0..memory.refundable.len());
            let (entry_id, left) = memory.refundable[i];
            Request::Refund(pb::RefundRequest {
                idempotency_key,
                entry_id,
                amount: rng.random_range(1..=left),
                description: "chaos refund".into(),
            })
        }
        80..90 if !memory.held.is_empty() => {
            let (hold_id, _, held) = memory
                .held
                .swap_remove(rng.random_range(0..memory.held.len()));
            if rng.random_bool(0.6) {
                Request::CaptureHold(support::capture(key, hold_id, rng.random_range(1..=held)))
            } else {
                Request::VoidHold(support::void(key, hold_id))
            }
        }
        _ => Request::PlaceHold(support::place_hold(
            key,
            account,
            amount,
            Duration::from_secs(3600),
        )),
    }
}

/// The next operation of [`Mix::Moves`]: a transfer, or a post of 1 to 5 legs.
fn next_move(rng: &mut StdRng, key: &str, accounts: &[u64]) -> Request {
    let from = accounts[rng.random_range(0..accounts.len())];
    if rng.random_bool(0.6) {
        let to = other_than(rng, accounts, from);
        return Request::Transfer(support::transfer(
            key,
            from,
            to,
            rng.random_range(1..=400_i64),
        ));
    }
    random_post(rng, key, accounts)
}

/// A post of 1 to 5 legs between random accounts.
fn random_post(rng: &mut StdRng, key: &str, accounts: &[u64]) -> Request {
    let legs = (0..rng.random_range(1..=5))
        .map(|_| {
            let from = accounts[rng.random_range(0..accounts.len())];
            let to = other_than(rng, accounts, from);
            support::leg(from, to, rng.random_range(1..=400_i64))
        })
        .collect();
    Request::Post(support::post(key, legs))
}

/// An account other than `account`.
fn other_than(rng: &mut StdRng, accounts: &[u64], account: u64) -> u64 {
    let at = accounts.iter().position(|a| *a == account).unwrap_or(0);
    accounts[(at + rng.random_range(1..accounts.len())) % accounts.len()]
}

fn remember(memory: &mut Memory, request: &Request, answer: &Final) {
    match (request, answer) {
        (Request::Charge(_) | Request::CaptureHold(_), Final::Posted(entries)) => {
            let e = entries[0];
            memory.refundable.push((e.entry_id, -e.delta));
        }
        (Request::Refund(r), Final::Posted(_)) => {
            if let Some(slot) = memory.refundable.iter_mut().find(|(e, _)| *e == r.entry_id) {
                slot.1 -= r.amount;
            }
            memory.refundable.retain(|(_, left)| *left > 0);
        }
        (Request::Refund(r), Final::Declined(_)) => {
            memory.refundable.retain(|(e, _)| *e != r.entry_id);
        }
        (Request::PlaceHold(r), Final::Held { hold_id }) => {
            memory.held.push((*hold_id, r.account_id, r.amount));
        }
        _ => {}
    }
}

/// Sends one request until it gets a final answer, moving to the next instance
/// after each failure.
async fn settle(
    first: Channel,
    channels: Vec<Channel>,
    request: Request,
    counters: Arc<Counters>,
) -> Final {
    let mut channel = first;
    let mut next = 0;
    loop {
        let disturbed = counters.disturbed.load(Ordering::Relaxed);
        let sent = send(channel.clone(), &request).await;
        if disturbed {
            counters.attempts_disturbed.fetch_add(1, Ordering::Relaxed);
            let final_ = sent.as_ref().map_or_else(
                |s| matches!(s.code(), Code::FailedPrecondition | Code::NotFound),
                |_| true,
            );
            if final_ {
                counters.answered_disturbed.fetch_add(1, Ordering::Relaxed);
            }
        }
        match sent {
            Ok(answer) => return answer,
            Err(status) if matches!(status.code(), Code::FailedPrecondition | Code::NotFound) => {
                assert!(
                    !matches!(request, Request::Credit(_)) || status.code() != Code::NotFound,
                    "{request:?}: {status:?}"
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
                    "{request:?}: not a retryable answer: {status:?}"
                );
                counters.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                channel = channels[next % channels.len()].clone();
                next += 1;
            }
        }
    }
}

fn timed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_DEADLINE);
    request
}

fn posted(entry: Option<pb::Entry>) -> Posted {
    let e = entry.expect("a reply has its entry");
    let takes = matches!(
        e.kind(),
        pb::EntryKind::Charge | pb::EntryKind::TransferOut | pb::EntryKind::Capture
    );
    Posted {
        account: e.account_id,
        delta: if takes { -e.amount } else { e.amount },
        entry_id: e.entry_id,
    }
}

/// One attempt at a request, its reply checked against the request.
async fn send(channel: Channel, request: &Request) -> Result<Final, tonic::Status> {
    let mut client = LedgerClient::new(channel);
    Ok(match request.clone() {
        Request::Credit(r) => {
            let e = posted(client.credit(timed(r.clone())).await?.into_inner().entry);
            assert_eq!((e.account, e.delta), (r.account_id, r.amount));
            Final::Posted(vec![e])
        }
        Request::Charge(r) => {
            let e = posted(client.charge(timed(r.clone())).await?.into_inner().entry);
            assert_eq!((e.account, e.delta), (r.account_id, -r.amount));
            Final::Posted(vec![e])
        }
        Request::Transfer(r) => {
            let reply = client.transfer(timed(r.clone())).await?.into_inner();
            let (out, into) = (posted(reply.debit), posted(reply.credit));
            assert_eq!((out.account, out.delta), (r.from_account_id, -r.amount));
            assert_eq!((into.account, into.delta), (r.to_account_id, r.amount));
            Final::Posted(vec![out, into])
        }
        Request::Post(r) => {
            let reply = client.post(timed(r.clone())).await?.into_inner();
            assert_eq!(reply.entries.len(), 2 * r.legs.len(), "two entries per leg");
            let entries: Vec<Posted> = reply.entries.into_iter().map(|e| posted(Some(e))).collect();
            for (leg, pair) in r.legs.iter().zip(entries.chunks(2)) {
                let [out, into] = pair else {
                    unreachable!("chunks of two")
                };
                assert_eq!((out.account, out.delta), (leg.from_account_id, -leg.amount));
                assert_eq!((into.account, into.delta), (leg.to_account_id, leg.amount));
            }
            Final::Posted(entries)
        }
        Request::Refund(r) => {
            let e = posted(client.refund(timed(r.clone())).await?.into_inner().entry);
            assert_eq!(e.delta, r.amount);
            Final::Posted(vec![e])
        }
        Request::PlaceHold(r) => {
            let hold = client
                .place_hold(timed(r))
                .await?
                .into_inner()
                .hold
                .unwrap();
            Final::Held {
                hold_id: hold.hold_id,
            }
        }
        Request::CaptureHold(r) => {
            let reply = client.capture_hold(timed(r.clone())).await?.into_inner();
            assert_eq!(reply.hold.unwrap().captured_amount, r.amount);
            Final::Posted(vec![posted(reply.entry)])
        }
        Request::VoidHold(r) => {
            client.void_hold(timed(r)).await?;
            Final::Voided
        }
    })
}

/// The audit passes, every key the clients saw take effect wrote exactly the
/// entries its reply named and no declined key wrote any, every hold they saw
/// placed exists, and every balance equals the clients' model.
pub async fn verify(db: &TestDb, accounts: &[u64], finals: &BTreeMap<String, Final>) {
    assert_audit_passes(&db.url).await;

    let mut conn = db.sql().await;
    let rows: Vec<(Vec<u8>, u64)> = conn
        .query(
            "SELECT idempotency_key, entry_id FROM entries WHERE idempotency_key LIKE 'c%' \
             ORDER BY idempotency_key, leg",
        )
        .await
        .unwrap();
    let mut entries: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, id) in rows {
        entries
            .entry(String::from_utf8(key).unwrap())
            .or_default()
            .push(id);
    }
    let holds: Vec<(Vec<u8>, u64)> = conn
        .query("SELECT idempotency_key, hold_id FROM holds WHERE idempotency_key LIKE 'c%'")
        .await
        .unwrap();
    let holds: BTreeMap<String, u64> = holds
        .into_iter()
        .map(|(k, id)| (String::from_utf8(k).unwrap(), id))
        .collect();
    let mut model: BTreeMap<u64, i64> = accounts.iter().map(|a| (*a, OPENING_BALANCE)).collect();
    let mut posted_keys = 0;
    for (key, answer) in finals {
        match answer {
            Final::Posted(written) => {
                let ids: Vec<u64> = written.iter().map(|p| p.entry_id).collect();
                assert_eq!(entries.get(key), Some(&ids), "{key} succeeded: its entries");
                for p in written {
                    *model.get_mut(&p.account).unwrap() += p.delta;
                }
                posted_keys += 1;
            }
            Final::Held { hold_id } => {
                assert_eq!(holds.get(key), Some(hold_id), "{key}: its hold");
            }
            Final::Voided => assert_eq!(entries.get(key), None, "{key}: a void writes no entry"),
            Final::Declined(_) => {
                assert_eq!(entries.get(key), None, "{key} was declined: no entry");
                assert_eq!(holds.get(key), None, "{key} was declined: no hold");
            }
        }
    }
    assert_eq!(
        entries.len(),
        posted_keys,
        "no entry of a key not seen to succeed"
    );
    for (account, expected) in model {
        assert_eq!(db.balance(account).await, expected, "account {account}");
    }
}
