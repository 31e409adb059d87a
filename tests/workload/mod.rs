//! The clients of the chaos, cluster and partition suites: a seeded stream of
//! every keyed operation over a few accounts, opened with a floor at zero, a
//! credit line, a ceiling, a floor above zero or no floor: Credits, Charges,
//! Transfers, Posts, Refunds of the charges and captures any client saw
//! succeed, holds placed (some for 1 s and left to expire, some for 2 s, which
//! their capture races), captured and voided, changes of limits that move
//! floors and ceilings under the debits, and Reversals of the Transfers, Posts
//! and Credits any client saw succeed. Each has its own key and is retried with
//! it until it gets a final answer; some are sent to several instances at
//! once, and some refunds, captures, voids and reversals are raced by a rival
//! under another key through another instance (a second refund of the entry, a
//! void or second capture of the hold, a second reversal of the original).
//!
//! `model` checks that the ledger agrees with what the clients saw; `tally`
//! counts how each kind of operation ended.

mod model;
mod tally;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use tonic::Code;
use tonic::transport::Channel;

use crate::support;
pub use model::verify;
use tally::Tally;

pub const ACCOUNTS: u64 = 8;
pub const OPENING_BALANCE: i64 = 5_000;
/// Each attempt's deadline.
const CALL_DEADLINE: Duration = Duration::from_secs(3);
/// How many of the latest refundable entries and held holds the clients pick
/// from: recent ones, so that refunds and resolutions meet each other.
const POOL: usize = 64;

#[derive(Default)]
pub struct Counters {
    pub ops: AtomicU64,
    pub duplicated_ops: AtomicU64,
    /// Operations raced by a rival key through another instance.
    pub rivalled: AtomicU64,
    pub retries: AtomicU64,
    /// How each kind of operation ended.
    tallies: Mutex<BTreeMap<usize, Tally>>,
    /// Set while a fault is in force (a partition, a node down): the attempts
    /// made meanwhile, and those that got a final answer, are counted apart.
    pub disturbed: AtomicBool,
    pub attempts_disturbed: AtomicU64,
    pub answered_disturbed: AtomicU64,
}

impl Counters {
    /// How many operations of `kind` (a [`tally::KINDS`] name) succeeded.
    pub fn acknowledged(&self, kind: &str) -> u64 {
        let at = tally::KINDS.iter().position(|k| *k == kind).unwrap();
        self.tallies
            .lock()
            .unwrap()
            .get(&at)
            .map_or(0, |t| t.acknowledged)
    }

    /// Polls until the clients have had 200 more operations answered than when
    /// it was called: they are under way, or go on after a fault; fails after
    /// 30 s, saying `what` was awaited.
    pub async fn until_more(&self, what: &str) {
        self.until_more_within(Duration::from_secs(30), what).await;
    }

    /// [`Self::until_more`], failing after `patience`.
    pub async fn until_more_within(&self, patience: Duration, what: &str) {
        let from = self.ops.load(Ordering::Relaxed);
        support::server::until_within(patience, what, async || {
            self.ops.load(Ordering::Relaxed) >= from + 200
        })
        .await;
    }

    /// The operations, then a line per kind: acknowledged, declined by reason,
    /// and how many met a retryable answer before their final one.
    pub fn summary(&self) -> String {
        format!(
            "{} operations ({} sent to several instances at once, {} raced by a rival key), \
             {} client retries\n{}",
            self.ops.load(Ordering::Relaxed),
            self.duplicated_ops.load(Ordering::Relaxed),
            self.rivalled.load(Ordering::Relaxed),
            self.retries.load(Ordering::Relaxed),
            tally::table(&self.tallies.lock().unwrap()),
        )
    }
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
    /// Credit, Charge, Transfer, Refund, CaptureHold, SetLimits, Reverse: the
    /// entries written.
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

/// A final answer as the model reads it.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    /// The entries and the hold the reply named, as it showed them.
    Done {
        entries: Vec<pb::Entry>,
        hold: Option<pb::Hold>,
    },
    /// A stored decline: its code, reason and details.
    Declined {
        code: Code,
        reason: String,
        info: HashMap<String, String>,
    },
}

impl Answer {
    fn declined(status: &tonic::Status) -> Self {
        use tonic_types::StatusExt as _;
        Self::Declined {
            code: status.code(),
            reason: support::reason(status),
            info: status
                .get_details_error_info()
                .map(|i| i.metadata)
                .unwrap_or_default(),
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Self::Done { .. } => None,
            Self::Declined { reason, .. } => Some(reason),
        }
    }
}

/// One keyed request of the workload.
#[derive(Debug, Clone)]
enum Request {
    Credit(pb::CreditRequest),
    Charge(pb::ChargeRequest),
    Transfer(pb::TransferRequest),
    Post(pb::PostRequest),
    /// With the kind of the entry it refunds.
    Refund(pb::RefundRequest, pb::EntryKind),
    PlaceHold(pb::PlaceHoldRequest),
    CaptureHold(pb::CaptureHoldRequest),
    VoidHold(pb::VoidHoldRequest),
    SetLimits(pb::SetLimitsRequest),
    /// With what the original wrote, as its reply named it (empty for an
    /// original that cannot be reversed), to check the mirrors against.
    Reverse(pb::ReverseRequest, Vec<Posted>),
}

/// A key's request and its final answer, as the model keeps them.
#[derive(Debug, Clone)]
struct Seen {
    request: Request,
    answer: Answer,
}

/// What the clients did: every key's final answer (the callers may add their
/// own keys' to `finals`), and what the model keeps of the clients' own.
pub struct Run {
    pub finals: BTreeMap<String, Final>,
    seen: BTreeMap<String, Seen>,
    /// The instances the clients used, for the model's reads.
    channels: Vec<Channel>,
}

/// A key the clients saw succeed that a Reverse may name: a Transfer, a Post or
/// a Credit with its entries, or (no entries) one that cannot be reversed.
#[derive(Debug, Clone)]
struct Original {
    key: String,
    entries: Vec<Posted>,
}

/// A charge or capture any client saw succeed, and what the clients saw
/// refunded of it.
#[derive(Debug, Clone, Copy)]
struct Refundable {
    entry_id: u64,
    kind: pb::EntryKind,
    amount: i64,
    refunded: i64,
}

/// What every client may act on, learned from every client's answers: so
/// clients race each other to refund an entry, resolve a hold or reverse an
/// operation.
#[derive(Default)]
struct Pools {
    refundable: Vec<Refundable>,
    /// Holds placed for 2 s or an hour: (hold, amount). Holds of 1 s are left
    /// to expire.
    held: Vec<(u64, i64)>,
    originals: Vec<Original>,
}

/// What every client shares.
#[derive(Clone)]
struct Shared {
    channels: Vec<Channel>,
    accounts: Arc<[u64]>,
    pools: Arc<Mutex<Pools>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

/// Runs `clients` seeded clients over `channels` until `stop`; returns what
/// they did.
pub async fn run_clients(
    seed: u64,
    clients: u64,
    channels: &[Channel],
    accounts: &[u64],
    counters: &Arc<Counters>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Run> {
    let shared = Shared {
        channels: channels.to_vec(),
        accounts: accounts.into(),
        pools: Arc::default(),
        counters: counters.clone(),
        stop: stop.clone(),
    };
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(client(seed ^ (c + 1), c, shared.clone())))
        .collect();
    tokio::spawn(async move {
        let mut run = Run {
            finals: BTreeMap::new(),
            seen: BTreeMap::new(),
            channels: shared.channels.clone(),
        };
        for t in tasks {
            let (finals, kept) = t.await.unwrap();
            run.finals.extend(finals);
            run.seen.extend(kept);
        }
        run
    })
}

/// The limits the workload opens accounts with and moves them among: the
/// default floor at zero, a credit line, a ceiling the credits reach, a floor
/// above zero, no floor at all, and a credit line under a ceiling at the
/// opening balance.
const LIMITS: [(Option<i64>, Option<i64>); 6] = [
    (Some(0), None),
    (Some(-5000), None),
    (Some(0), Some(OPENING_BALANCE + 1000)),
    (Some(2000), Some(OPENING_BALANCE * 2)),
    (None, None),
    (Some(-2000), Some(OPENING_BALANCE)),
];

fn some_limits(n: usize) -> pb::AccountLimits {
    let (floor, ceiling) = LIMITS[n % LIMITS.len()];
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

/// One client: a seeded stream of operations, each retried until final, some
/// raced by a rival; returns every key's final answer and what the model keeps.
async fn client(
    seed: u64,
    id: u64,
    shared: Shared,
) -> (BTreeMap<String, Final>, BTreeMap<String, Seen>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut done = (BTreeMap::new(), BTreeMap::new());
    let mut n = 0_u64;
    while !shared.stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("c{id}-{n}");
        let rival_key = format!("{key}-rival");
        let (request, rival) = next_request(&mut rng, &key, &rival_key, &shared);
        let copies = if rng.random_bool(0.15) {
            rng.random_range(2..=3)
        } else {
            1
        };
        let channels = &shared.channels;
        let first = rng.random_range(0..channels.len());
        let sent = futures::future::join_all((0..copies).map(|copy| {
            let channel = channels[(first + copy) % channels.len()].clone();
            settle(channel, &shared, &request)
        }));
        // The rival goes through the next instance, at the same time.
        let against = async {
            match &rival {
                Some(r) => {
                    Some(settle(channels[(first + 1) % channels.len()].clone(), &shared, r).await)
                }
                None => None,
            }
        };
        let (answers, rivalled) = tokio::join!(sent, against);
        shared.record(&mut done, key, request, &answers);
        if let (Some(rival), Some(answer)) = (rival, rivalled) {
            shared.counters.rivalled.fetch_add(1, Ordering::Relaxed);
            shared.record(&mut done, rival_key, rival, &[answer]);
        }
    }
    done
}

impl Shared {
    /// Keeps a key's final answer (all its copies must agree), counts it, and
    /// tells the pools what it did.
    fn record(
        &self,
        (finals, seen): &mut (BTreeMap<String, Final>, BTreeMap<String, Seen>),
        key: String,
        request: Request,
        answers: &[Settled],
    ) {
        let all: Vec<(Final, Option<&str>)> = answers
            .iter()
            .map(|s| (final_of(&request, &s.answer), s.answer.reason()))
            .collect();
        assert!(
            all.iter().all(|a| *a == all[0]),
            "{key}: copies disagree: {answers:?} ({request:?})"
        );
        self.counters.ops.fetch_add(1, Ordering::Relaxed);
        if answers.len() > 1 {
            self.counters.duplicated_ops.fetch_add(1, Ordering::Relaxed);
        }
        self.counters
            .tallies
            .lock()
            .unwrap()
            .entry(request.kind())
            .or_default()
            .add(answers);
        let answer = answers[0].answer.clone();
        self.pools.lock().unwrap().learn(&key, &request, &answer);
        finals.insert(key.clone(), all[0].0.clone());
        seen.insert(key, Seen { request, answer });
    }
}

impl Request {
    /// Its place in [`tally::KINDS`].
    fn kind(&self) -> usize {
        match self {
            Self::Credit(_) => 0,
            Self::Charge(_) => 1,
            Self::Transfer(_) => 2,
            Self::Post(_) => 3,
            Self::Refund(_, pb::EntryKind::Capture) => 5,
            Self::Refund(..) => 4,
            Self::PlaceHold(_) => 6,
            Self::CaptureHold(_) => 7,
            Self::VoidHold(_) => 8,
            Self::SetLimits(_) => 9,
            Self::Reverse(..) => 10,
        }
    }
}

/// A key's final answer as the callers keep it.
fn final_of(request: &Request, answer: &Answer) -> Final {
    match (request, answer) {
        (Request::PlaceHold(_), Answer::Done { hold, .. }) => Final::Held {
            hold_id: hold.as_ref().unwrap().hold_id,
        },
        (Request::VoidHold(_), Answer::Done { .. }) => Final::Voided,
        (_, Answer::Done { entries, .. }) => Final::Posted(entries.iter().map(posted).collect()),
        (Request::Reverse(r, _), Answer::Declined { reason, info, .. })
            if reason == "ALREADY_REVERSED" =>
        {
            Final::AlreadyReversed {
                original: r.original_key.clone(),
                by: info.get("reversal_key").expect("the winner's key").clone(),
            }
        }
        (_, Answer::Declined { code, .. }) => Final::Declined(*code),
    }
}

impl Pools {
    /// Learns what a key did: a charge or capture that may be refunded, what
    /// was refunded, a hold that may be resolved, an operation that may be
    /// reversed (now and then one that cannot be).
    fn learn(&mut self, key: &str, request: &Request, answer: &Answer) {
        match (request, answer) {
            (Request::Charge(_) | Request::CaptureHold(_), Answer::Done { entries, .. }) => {
                let e = &entries[0];
                self.refundable.push(Refundable {
                    entry_id: e.entry_id,
                    kind: e.kind(),
                    amount: e.amount,
                    refunded: 0,
                });
                keep_latest(&mut self.refundable);
            }
            (Request::Refund(r, _), _) => {
                let refunded = match answer {
                    Answer::Done { .. } => r.amount,
                    Answer::Declined { .. } => i64::MAX / 2,
                };
                if let Some(slot) = self
                    .refundable
                    .iter_mut()
                    .find(|s| s.entry_id == r.entry_id)
                {
                    slot.refunded += refunded;
                }
                self.refundable.retain(|s| s.refunded < s.amount);
            }
            (Request::PlaceHold(r), Answer::Done { hold, .. })
                if r.ttl.as_ref().is_some_and(|t| t.seconds > 1) =>
            {
                self.held.push((hold.as_ref().unwrap().hold_id, r.amount));
                keep_latest(&mut self.held);
            }
            _ => {}
        }
        let Answer::Done { entries, .. } = answer else {
            return;
        };
        let entries = match request {
            Request::Transfer(_) | Request::Post(_) | Request::Credit(_) => {
                entries.iter().map(posted).collect()
            }
            Request::Charge(_) | Request::Reverse(..) if entries[0].entry_id % 8 == 0 => Vec::new(),
            _ => return,
        };
        self.originals.push(Original {
            key: key.to_owned(),
            entries,
        });
    }
}

fn keep_latest<T>(pool: &mut Vec<T>) {
    if pool.len() > POOL {
        pool.drain(..pool.len() - POOL);
    }
}

/// The next operation, and now and then a rival to race it: mostly credits,
/// charges, transfers and posts of 1 to 5 legs; refunds; holds placed, and the
/// capture or void of one; reversals; now and then a change of an account's
/// limits.
fn next_request(
    rng: &mut StdRng,
    key: &str,
    rival_key: &str,
    shared: &Shared,
) -> (Request, Option<Request>) {
    let accounts = &shared.accounts;
    let account = accounts[rng.random_range(0..accounts.len())];
    let amount = rng.random_range(1..=400_i64);
    let mut pools = shared.pools.lock().unwrap();
    let request = match rng.random_range(0..100) {
        0..4 => Request::SetLimits(support::set_limits(
            key,
            account,
            some_limits(rng.random_range(0..LIMITS.len())),
        )),
        4..24 => Request::Credit(support::credit(key, account, amount)),
        24..46 => Request::Charge(pb::ChargeRequest {
            // Tagged, so the audit's metadata checks and searches see a busy ledger.
            metadata: [("order_id".to_owned(), key.to_owned())].into(),
            ..support::charge(key, account, amount)
        }),
        46..58 => {
            let to = other_than(rng, accounts, account);
            Request::Transfer(support::transfer(key, account, to, amount))
        }
        58..64 => random_post(rng, key, accounts),
        64..72 if !pools.refundable.is_empty() => return pools.refund(rng, key, rival_key),
        72..82 if !pools.held.is_empty() => return pools.resolve(rng, key, rival_key),
        82..88 => return pools.reversal(rng, key, rival_key, account, amount),
        _ => {
            let ttl = match rng.random_range(0..4) {
                0 => 1,
                1 => 2,
                _ => 3600,
            };
            Request::PlaceHold(support::place_hold(
                key,
                account,
                amount,
                Duration::from_secs(ttl),
            ))
        }
    };
    (request, None)
}

/// Whether to race an operation with a rival.
fn rivalled(rng: &mut StdRng) -> bool {
    rng.random_bool(0.3)
}

impl Pools {
    /// A refund of a recent charge or capture: mostly of at most what the
    /// clients saw left of it, sometimes of up to all of it (so it may exceed
    /// what is left), now and then raced by another refund of the same entry.
    fn refund(&self, rng: &mut StdRng, key: &str, rival_key: &str) -> (Request, Option<Request>) {
        let to = self.refundable[rng.random_range(0..self.refundable.len())];
        let refund = |key: &str, rng: &mut StdRng| {
            let most = if rng.random_bool(0.75) {
                to.amount - to.refunded
            } else {
                to.amount
            };
            Request::Refund(
                pb::RefundRequest {
                    description: "chaos refund".into(),
                    ..support::refund(key, to.entry_id, rng.random_range(1..=most))
                },
                to.kind,
            )
        };
        let request = refund(key, rng);
        let rival = rivalled(rng).then(|| refund(rival_key, rng));
        (request, rival)
    }

    /// A capture (of up to the hold's amount) or a void of a recent hold, most
    /// often taken from the pool (a hold left in it is resolved again, and
    /// told its state), now and then raced by a void or another capture.
    fn resolve(
        &mut self,
        rng: &mut StdRng,
        key: &str,
        rival_key: &str,
    ) -> (Request, Option<Request>) {
        let at = rng.random_range(0..self.held.len());
        let (hold_id, held) = self.held[at];
        if rng.random_bool(0.85) {
            self.held.swap_remove(at);
        }
        let resolve = |key: &str, rng: &mut StdRng, captures: f64| {
            if rng.random_bool(captures) {
                Request::CaptureHold(support::capture(key, hold_id, rng.random_range(1..=held)))
            } else {
                Request::VoidHold(support::void(key, hold_id))
            }
        };
        let request = resolve(key, rng, 0.6);
        let rival = rivalled(rng).then(|| resolve(rival_key, rng, 0.5));
        (request, rival)
    }

    /// A reversal of one of the originals, more often a recent one (so that
    /// clients race to reverse it), now and then raced by a second reversal of
    /// it; a credit while there is none.
    fn reversal(
        &self,
        rng: &mut StdRng,
        key: &str,
        rival_key: &str,
        account: u64,
        amount: i64,
    ) -> (Request, Option<Request>) {
        let len = self.originals.len();
        if len == 0 {
            return (Request::Credit(support::credit(key, account, amount)), None);
        }
        let at = if rng.random_bool(0.7) {
            len - 1 - rng.random_range(0..len.min(8))
        } else {
            rng.random_range(0..len)
        };
        let original = &self.originals[at];
        let reverse = |key: &str| {
            Request::Reverse(
                support::reverse(key, &original.key),
                original.entries.clone(),
            )
        };
        let rival = rivalled(rng).then(|| reverse(rival_key));
        (reverse(key), rival)
    }
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

/// One copy's final answer, and how it got there.
#[derive(Debug)]
struct Settled {
    answer: Answer,
    /// It met a retryable answer first: for a while its outcome was not known.
    unknown: bool,
    /// The final answer was a replay: an earlier attempt (or another copy) had
    /// decided it.
    replayed: bool,
}

/// Sends one request until it gets a final answer, moving to the next instance
/// after each failure.
async fn settle(first: Channel, shared: &Shared, request: &Request) -> Settled {
    let counters = &shared.counters;
    let mut channel = first;
    let mut next = 0;
    let mut unknown = false;
    loop {
        let disturbed = counters.disturbed.load(Ordering::Relaxed);
        let sent = send(channel.clone(), request).await;
        if disturbed {
            counters.attempts_disturbed.fetch_add(1, Ordering::Relaxed);
            let final_ = sent
                .as_ref()
                .map_or_else(|s| is_decline(s.code()), |_| true);
            if final_ {
                counters.answered_disturbed.fetch_add(1, Ordering::Relaxed);
            }
        }
        match sent {
            Ok((answer, replayed)) => {
                return Settled {
                    answer,
                    unknown,
                    replayed,
                };
            }
            Err(status) if is_decline(status.code()) => {
                let reason = support::reason(&status);
                assert!(
                    may_decline(request, &reason),
                    "{request:?}: declined {reason}: {status:?}"
                );
                check_decline(request, &status);
                return Settled {
                    answer: Answer::declined(&status),
                    unknown,
                    replayed: support::replayed(status.metadata()),
                };
            }
            Err(status) => {
                assert!(
                    retryable(&status),
                    "{request:?}: not a retryable answer: {status:?}"
                );
                unknown = true;
                counters.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                channel = shared.channels[next % shared.channels.len()].clone();
                next += 1;
            }
        }
    }
}

fn is_decline(code: Code) -> bool {
    matches!(code, Code::FailedPrecondition | Code::NotFound)
}

/// The answers SPEC 3.6 says to retry with the same key.
fn retryable(status: &tonic::Status) -> bool {
    match status.code() {
        Code::Unavailable
        | Code::Aborted
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown => true,
        Code::ResourceExhausted => support::reason(status) == "TOO_MANY_CALLS",
        _ => false,
    }
}

/// The declines a request of the workload can meet: every account, entry, hold
/// and original it names exists, and it is never for a velocity limit (the
/// workload sets none). Only a reversal of what cannot be reversed is
/// NOT_REVERSIBLE, and it is never anything else.
fn may_decline(request: &Request, reason: &str) -> bool {
    let limit = matches!(reason, "INSUFFICIENT_FUNDS" | "BALANCE_LIMIT_EXCEEDED");
    match request {
        Request::Charge(_) | Request::PlaceHold(_) => reason == "INSUFFICIENT_FUNDS",
        Request::Credit(_) => reason == "BALANCE_LIMIT_EXCEEDED",
        Request::Transfer(_) | Request::Post(_) => limit,
        Request::Refund(..) => {
            reason == "REFUND_EXCEEDS_CHARGE" || reason == "BALANCE_LIMIT_EXCEEDED"
        }
        Request::CaptureHold(_) | Request::VoidHold(_) => {
            matches!(reason, "HOLD_NOT_HELD" | "HOLD_EXPIRED")
        }
        Request::SetLimits(_) => false,
        Request::Reverse(_, original) if original.is_empty() => reason == "NOT_REVERSIBLE",
        Request::Reverse(..) => limit || reason == "ALREADY_REVERSED",
    }
}

fn timed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_DEADLINE);
    request
}

fn posted(e: &pb::Entry) -> Posted {
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

/// A reply's entries and hold, and whether it was a replay.
fn parts<T>(
    reply: tonic::Response<T>,
    split: impl FnOnce(T) -> (Vec<Option<pb::Entry>>, Option<pb::Hold>),
) -> (Answer, bool) {
    let replayed = support::replayed(reply.metadata());
    let (entries, hold) = split(reply.into_inner());
    let entries = entries
        .into_iter()
        .map(|e| e.expect("a reply has its entry"))
        .collect();
    (Answer::Done { entries, hold }, replayed)
}

/// One attempt at a request, its reply checked against the request.
async fn send(channel: Channel, request: &Request) -> Result<(Answer, bool), tonic::Status> {
    let mut client = LedgerClient::new(channel);
    let (answer, replayed) = match request.clone() {
        Request::Credit(r) => parts(client.credit(timed(r)).await?, |r| (vec![r.entry], None)),
        Request::Charge(r) => parts(client.charge(timed(r)).await?, |r| (vec![r.entry], None)),
        Request::Transfer(r) => parts(client.transfer(timed(r)).await?, |r| {
            (vec![r.debit, r.credit], None)
        }),
        Request::Post(r) => parts(client.post(timed(r)).await?, |r| {
            (r.entries.into_iter().map(Some).collect(), None)
        }),
        Request::Refund(r, _) => parts(client.refund(timed(r)).await?, |r| (vec![r.entry], None)),
        Request::PlaceHold(r) => parts(client.place_hold(timed(r)).await?, |r| (vec![], r.hold)),
        Request::CaptureHold(r) => parts(client.capture_hold(timed(r)).await?, |r| {
            (vec![r.entry], r.hold)
        }),
        Request::VoidHold(r) => parts(client.void_hold(timed(r)).await?, |r| (vec![], r.hold)),
        Request::Reverse(r, _) => parts(client.reverse(timed(r)).await?, |r| {
            (r.entries.into_iter().map(Some).collect(), None)
        }),
        Request::SetLimits(r) => {
            let limits = r.limits;
            parts(client.set_limits(timed(r)).await?, |r| {
                assert_eq!(
                    r.account.unwrap().limits,
                    limits,
                    "the limits set are in force"
                );
                (vec![r.entry], None)
            })
        }
    };
    let Answer::Done { entries, hold } = &answer else {
        unreachable!("a reply")
    };
    check_reply(request, entries, hold.as_ref());
    Ok((answer, replayed))
}

/// A reply names what its request asked for: each entry's account, kind and
/// amount, the hold's.
fn check_reply(request: &Request, entries: &[pb::Entry], hold: Option<&pb::Hold>) {
    let moves: Vec<(u64, i64)> = entries
        .iter()
        .map(|e| (posted(e).account, posted(e).delta))
        .collect();
    match request {
        Request::Credit(r) => assert_eq!(moves, [(r.account_id, r.amount)]),
        Request::Charge(r) => assert_eq!(moves, [(r.account_id, -r.amount)]),
        Request::Transfer(r) => assert_eq!(
            moves,
            [(r.from_account_id, -r.amount), (r.to_account_id, r.amount)]
        ),
        Request::Post(r) => {
            let legs: Vec<(u64, i64)> = r
                .legs
                .iter()
                .flat_map(|l| [(l.from_account_id, -l.amount), (l.to_account_id, l.amount)])
                .collect();
            assert_eq!(moves, legs, "two entries per leg, in leg order");
        }
        Request::Refund(r, _) => {
            assert_eq!(moves[0].1, r.amount);
            assert_eq!(entries[0].refunded_entry_id, r.entry_id, "{request:?}");
        }
        Request::PlaceHold(r) => {
            let hold = hold.unwrap();
            assert_eq!((hold.account_id, hold.amount), (r.account_id, r.amount));
            assert_eq!(hold.state(), pb::HoldState::Held);
        }
        Request::CaptureHold(r) => {
            let hold = hold.unwrap();
            assert_eq!(
                (hold.hold_id, hold.state()),
                (r.hold_id, pb::HoldState::Captured)
            );
            assert_eq!(hold.captured_amount, r.amount);
            assert_eq!(
                (entries[0].hold_id, moves[0]),
                (r.hold_id, (hold.account_id, -r.amount))
            );
        }
        Request::VoidHold(r) => {
            let hold = hold.unwrap();
            assert_eq!(
                (hold.hold_id, hold.state()),
                (r.hold_id, pb::HoldState::Voided)
            );
        }
        Request::Reverse(r, original) => assert_mirrors(r, entries, original),
        Request::SetLimits(r) => {
            let entry = &entries[0];
            assert_eq!(entry.kind(), pb::EntryKind::Limits);
            assert_eq!((entry.account_id, entry.amount), (r.account_id, 0));
            assert_eq!(entry.limits, r.limits, "the entry records the limits set");
        }
    }
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
        let mirror = posted(entry);
        assert_eq!(
            (mirror.account, mirror.delta, entry.reverses_entry_id),
            (mirrored.account, -mirrored.delta, mirrored.entry_id),
            "{request:?}: {entry:?} mirrors {mirrored:?}"
        );
    }
}

/// A decline's details say why, in figures that bear it out: a debit declined
/// for the floor took what is available below it, a credit declined for the
/// ceiling took the balance above it, a refund declined asked for more than
/// was left.
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
        "REFUND_EXCEEDS_CHARGE" => assert!(
            figure("amount") > figure("refundable"),
            "{request:?}: {status:?}"
        ),
        _ => {}
    }
}
