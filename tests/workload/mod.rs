//! The clients of the chaos and cluster suites: a seeded stream of operations
//! over a few accounts, opened with a floor at zero, a credit line, a ceiling or
//! no floor (Credits, Charges, Transfers, Refunds of the client's own charges,
//! holds placed then captured or voided, changes of limits, and Reversals of
//! the Transfers, Posts and Credits any client saw succeed, some reversed twice
//! and some racing; or, for the partitions' bank test, only Transfers and Posts,
//! which keep the money), each
//! with its own key, retried with the same key until it gets a final answer,
//! some sent to several instances at once; and the check that the ledger agrees
//! with what they saw.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Changes of limits.
    pub limits: AtomicU64,
    /// Reversals sent, and those that reversed their original.
    pub reversals: AtomicU64,
    pub reversed: AtomicU64,
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
    /// Reverse declined ALREADY_REVERSED: the key of the reversal that won.
    AlreadyReversed {
        original: String,
        by: String,
    },
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
    SetLimits(pb::SetLimitsRequest),
    /// With what the original wrote, as its reply named it (empty for an
    /// original that cannot be reversed), to check the mirrors against.
    Reverse(pb::ReverseRequest, Vec<Posted>),
}

/// A key the clients saw succeed that a Reverse may name: a Transfer, a Post or
/// a Credit with its entries, or (no entries) one that cannot be reversed.
#[derive(Debug, Clone)]
struct Original {
    key: String,
    entries: Vec<Posted>,
}

/// The originals every client may reverse, shared so that clients race to
/// reverse one and some reverse one already reversed.
type Originals = Arc<Mutex<Vec<Original>>>;

impl Counters {
    pub fn summary(&self) -> String {
        format!(
            "{} operations ({} transfers, {} posts, {} refunds, {} hold placements and resolutions, \
             {} changes of limits, {} reversals of which {} reversed; {} sent to several instances at once, {} declined), {} client retries",
            self.ops.load(Ordering::Relaxed),
            self.transfers.load(Ordering::Relaxed),
            self.posts.load(Ordering::Relaxed),
            self.refunds.load(Ordering::Relaxed),
            self.holds.load(Ordering::Relaxed),
            self.limits.load(Ordering::Relaxed),
            self.reversals.load(Ordering::Relaxed),
            self.reversed.load(Ordering::Relaxed),
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
    let shared = Shared {
        channels: channels.to_vec(),
        accounts: accounts.into(),
        originals: Originals::default(),
        counters: counters.clone(),
        stop: stop.clone(),
    };
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(client(mix, seed ^ (c + 1), c, shared.clone())))
        .collect();
    tokio::spawn(async move {
        let mut finals = BTreeMap::new();
        for t in tasks {
            finals.extend(t.await.unwrap());
        }
        finals
    })
}

/// The limits the workload opens accounts with and moves them among: the
/// default floor at zero, a credit line, a ceiling the credits reach, a floor
/// above zero, and no floor at all.
fn some_limits(n: usize) -> pb::AccountLimits {
    const CHOICES: [(Option<i64>, Option<i64>); 5] = [
        (Some(0), None),
        (Some(-5000), None),
        (Some(0), Some(OPENING_BALANCE + 4000)),
        (Some(2000), Some(OPENING_BALANCE * 3)),
        (None, None),
    ];
    let (floor, ceiling) = CHOICES[n % CHOICES.len()];
    support::limits(floor, ceiling)
}

/// Opens the accounts, each with limits of its own, and funds them; returns
/// their ids (a cluster may not number them 1, 2, 3: Galera spaces
/// auto-increment ids by the cluster size).
pub async fn open_accounts(channel: &Channel) -> Vec<u64> {
    let mut client = LedgerClient::new(channel.clone());
    let mut ids = Vec::new();
    for n in 1..=ACCOUNTS {
        let limits = some_limits(usize::try_from(n).unwrap());
        let open = support::open_account(&format!("open-{n}"), Some(limits));
        let account = client.open_account(open).await.expect("open account");
        let id = account.into_inner().account.unwrap().account_id;
        let fund = support::credit(&format!("fund-{n}"), id, OPENING_BALANCE);
        client.credit(fund).await.expect("credit");
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

/// What every client shares.
#[derive(Clone)]
struct Shared {
    channels: Vec<Channel>,
    accounts: Arc<[u64]>,
    originals: Originals,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

/// One client: a seeded stream of operations, each retried until final.
async fn client(mix: Mix, seed: u64, id: u64, shared: Shared) -> BTreeMap<String, Final> {
    let Shared {
        channels,
        accounts,
        originals,
        counters,
        stop,
    } = shared;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut finals = BTreeMap::new();
    let mut memory = Memory::default();
    let mut n = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("c{id}-{n}");
        let request = match mix {
            Mix::All => next_request(&mut rng, &key, &accounts, &mut memory, &originals),
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
        if matches!(
            answers[0],
            Final::Declined(_) | Final::AlreadyReversed { .. }
        ) {
            counters.declined.fetch_add(1, Ordering::Relaxed);
        }
        let kind = match request {
            Request::Transfer(_) => Some(&counters.transfers),
            Request::Post(_) => Some(&counters.posts),
            Request::Refund(_) => Some(&counters.refunds),
            Request::PlaceHold(_) | Request::CaptureHold(_) | Request::VoidHold(_) => {
                Some(&counters.holds)
            }
            Request::SetLimits(_) => Some(&counters.limits),
            Request::Reverse(..) => Some(&counters.reversals),
            Request::Credit(_) | Request::Charge(_) => None,
        };
        if let Some(kind) = kind {
            kind.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(
            (&request, &answers[0]),
            (Request::Reverse(..), Final::Posted(_))
        ) {
            counters.reversed.fetch_add(1, Ordering::Relaxed);
        }
        remember(&mut memory, &request, &answers[0]);
        offer(&originals, &key, &request, &answers[0]);
        finals.insert(key, answers[0].clone());
    }
    finals
}

/// The next operation: mostly credits, charges, transfers and posts of 1 to 5
/// legs; refunds of the client's own charges; holds, and the capture or void of
/// one still held; reversals of what the clients saw succeed; now and then a
/// change of an account's limits.
fn next_request(
    rng: &mut StdRng,
    key: &str,
    accounts: &[u64],
    memory: &mut Memory,
    originals: &Originals,
) -> Request {
    let account = accounts[rng.random_range(0..accounts.len())];
    let amount = rng.random_range(1..=400_i64);
    let idempotency_key = key.to_owned();
    match rng.random_range(0..100) {
        0..3 => Request::SetLimits(support::set_limits(
            key,
            account,
            some_limits(rng.random_range(0..5)),
        )),
        3..22 => Request::Credit(support::credit(key, account, amount)),
        22..54 => Request::Charge(pb::ChargeRequest {
            // Tagged, so the audit's metadata checks and searches see a busy ledger.
            metadata: [("order_id".to_owned(), key.to_owned())].into(),
            ..support::charge(key, account, amount)
        }),
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
                ..Default::default()
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
        90..95 => match pick(rng, originals) {
            Some(original) => {
                Request::Reverse(support::reverse(key, &original.key), original.entries)
            }
            None => Request::Credit(support::credit(key, account, amount)),
        },
        _ => Request::PlaceHold(support::place_hold(
            key,
            account,
            amount,
            Duration::from_secs(3600),
        )),
    }
}

/// One of the originals, more often a recent one (so that clients race to
/// reverse it); `None` while there is none.
fn pick(rng: &mut StdRng, originals: &Originals) -> Option<Original> {
    let originals = originals.lock().unwrap();
    let len = originals.len();
    if len == 0 {
        return None;
    }
    let at = if rng.random_bool(0.7) {
        len - 1 - rng.random_range(0..len.min(8))
    } else {
        rng.random_range(0..len)
    };
    Some(originals[at].clone())
}

/// Offers what a key did to the clients' reversals: a Transfer, a Post or a
/// Credit that succeeded with its entries; now and then a Charge or a reversal
/// that succeeded, which cannot be reversed.
fn offer(originals: &Originals, key: &str, request: &Request, answer: &Final) {
    let Final::Posted(entries) = answer else {
        return;
    };
    let entries = match request {
        Request::Transfer(_) | Request::Post(_) | Request::Credit(_) => entries.clone(),
        Request::Charge(_) | Request::Reverse(..) if entries[0].entry_id % 8 == 0 => Vec::new(),
        _ => return,
    };
    originals.lock().unwrap().push(Original {
        key: key.to_owned(),
        entries,
    });
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
                check_decline(&request, &status);
                assert!(
                    !matches!(request, Request::Credit(_) | Request::Reverse(..))
                        || status.code() != Code::NotFound,
                    "{request:?}: {status:?}"
                );
                if let Request::Reverse(_, original) = &request {
                    return reversal_declined(&request, original, &status);
                }
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

/// A reversal is declined because its original was reversed already (naming
/// the reversal that won), cannot be reversed (and only then), or because a
/// mirror leg met a limit.
fn reversal_declined(request: &Request, original: &[Posted], status: &tonic::Status) -> Final {
    let reason = support::reason(status);
    assert_eq!(
        reason == "NOT_REVERSIBLE",
        original.is_empty(),
        "{request:?}: {status:?}"
    );
    match reason.as_str() {
        "ALREADY_REVERSED" => Final::AlreadyReversed {
            original: match request {
                Request::Reverse(r, _) => r.original_key.clone(),
                _ => unreachable!("a reversal"),
            },
            by: support::info(status, "reversal_key").expect("the winner's key"),
        },
        "NOT_REVERSIBLE" | "INSUFFICIENT_FUNDS" | "BALANCE_LIMIT_EXCEEDED" => {
            Final::Declined(status.code())
        }
        other => panic!("{request:?}: declined {other}: {status:?}"),
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
        Request::Reverse(r, original) => {
            let reply = client.reverse(timed(r.clone())).await?.into_inner();
            assert_mirrors(&r, &reply.entries, &original);
            Final::Posted(reply.entries.into_iter().map(|e| posted(Some(e))).collect())
        }
        Request::SetLimits(r) => {
            let reply = client.set_limits(timed(r.clone())).await?.into_inner();
            let entry = reply.entry.unwrap();
            assert_eq!(entry.kind(), pb::EntryKind::Limits);
            assert_eq!((entry.account_id, entry.amount), (r.account_id, 0));
            assert_eq!(entry.limits, r.limits, "the entry records the limits set");
            assert_eq!(
                reply.account.unwrap().limits,
                r.limits,
                "and they are in force"
            );
            Final::Posted(vec![posted(Some(entry))])
        }
    })
}

/// A reversal's entries mirror its original's in reverse order (the last leg's
/// mirror first, each debit then credit; a credit's mirror is one charge): the
/// same account, the opposite amount, naming the entry mirrored.
fn assert_mirrors(request: &pb::ReverseRequest, entries: &[pb::Entry], original: &[Posted]) {
    assert_eq!(
        entries.len(),
        original.len(),
        "{request:?}: one mirror per entry of {original:?}"
    );
    for (entry, mirrored) in entries.iter().zip(original.iter().rev()) {
        let mirror = posted(Some(entry.clone()));
        assert_eq!(
            (mirror.account, mirror.delta, entry.reverses_entry_id),
            (mirrored.account, -mirrored.delta, mirrored.entry_id),
            "{request:?}: {entry:?} mirrors {mirrored:?}"
        );
    }
}

/// A decline's details say why, in figures that bear it out: a debit declined
/// for the floor took what is available below it, a credit declined for the
/// ceiling took the balance above it.
fn check_decline(request: &Request, status: &tonic::Status) {
    let figure = |key: &str| {
        support::info(status, key)
            .and_then(|v| v.parse::<i128>().ok())
            .unwrap_or_else(|| panic!("{request:?}: {status:?} has no {key}"))
    };
    match support::reason(status).as_str() {
        "INSUFFICIENT_FUNDS" => assert!(
            figure("available") - figure("amount") < figure("min_balance"),
            "{request:?}: {status:?}"
        ),
        "BALANCE_LIMIT_EXCEEDED" => assert!(
            figure("balance") + figure("amount") > figure("max_balance"),
            "{request:?}: {status:?}"
        ),
        _ => {}
    }
}

/// The audit passes, every key the clients saw take effect wrote exactly the
/// entries its reply named and no declined key wrote any, every hold they saw
/// placed exists, every reversal recorded is one they saw succeed and undid
/// what its original did, every ALREADY_REVERSED they saw names it, and every
/// balance equals the clients' model.
pub async fn verify(db: &TestDb, accounts: &[u64], finals: &BTreeMap<String, Final>) {
    assert_audit_passes(&db.url).await;

    let mut conn = db.sql().await;
    let rows: Vec<(Vec<u8>, u64)> = conn
        .query(
            "SELECT idempotency_key, entry_id FROM entries WHERE idempotency_key LIKE 'c%' \
             ORDER BY idempotency_key, entry_id",
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
                // A reversal's reply lists its mirrors last leg first.
                let mut ids: Vec<u64> = written.iter().map(|p| p.entry_id).collect();
                ids.sort_unstable();
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
            Final::Declined(_) | Final::AlreadyReversed { .. } => {
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
    verify_reversals(&mut conn, finals).await;
    for (account, expected) in model {
        assert_eq!(db.balance(account).await, expected, "account {account}");
    }
    for account in accounts {
        let opening: (Option<i64>, Option<i64>) = conn
            .exec_first(
                "SELECT min_balance, max_balance FROM account_limits \
                 WHERE account_id = ? AND account_seq = 0",
                (account,),
            )
            .await
            .unwrap()
            .unwrap();
        let journal = support::limits::journal_sql(&mut conn, *account).await;
        support::limits::assert_every_move_met_its_limits(&journal, opening);
    }
}

/// Every reversal of a client's key is one the clients saw succeed, of an
/// original they saw succeed, and moved each account back by what the
/// original moved it; every ALREADY_REVERSED they saw names that reversal.
async fn verify_reversals(conn: &mut mysql_async::Conn, finals: &BTreeMap<String, Final>) {
    let rows: Vec<(Vec<u8>, Vec<u8>)> = conn
        .query("SELECT original_key, reversal_key FROM reversals WHERE reversal_key LIKE 'c%'")
        .await
        .unwrap();
    let reversals: BTreeMap<String, String> = rows
        .into_iter()
        .map(|(o, r)| (String::from_utf8(o).unwrap(), String::from_utf8(r).unwrap()))
        .collect();
    let net = |written: &[Posted], sign: i64| {
        let mut net = BTreeMap::new();
        for p in written {
            *net.entry(p.account).or_insert(0) += sign * p.delta;
        }
        net
    };
    for (original, reversal) in &reversals {
        let (Some(Final::Posted(done)), Some(Final::Posted(undone))) =
            (finals.get(original), finals.get(reversal))
        else {
            panic!("{reversal} reversed {original}: both were seen to succeed");
        };
        assert_eq!(
            net(undone, 1),
            net(done, -1),
            "{reversal} undid what {original} did"
        );
    }
    let reversed = finals
        .values()
        .filter_map(|f| match f {
            Final::AlreadyReversed { original, by } => Some((original, by)),
            _ => None,
        })
        .inspect(|(original, by)| {
            assert_eq!(
                reversals.get(*original),
                Some(*by),
                "{original} reversed by {by}"
            );
        })
        .count();
    println!(
        "{} reversals recorded, {reversed} declined ALREADY_REVERSED",
        reversals.len()
    );
}
