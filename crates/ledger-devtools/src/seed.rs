//! A large ledger for the read scenarios of `ledger bench` (`search`,
//! `get-entry`): posts of [`LEGS`] legs between the bench's accounts, each
//! tagged with an order id of its own, so a search for one finds its
//! [`ENTRIES_PER_ORDER`] entries however many the ledger holds. They go through
//! the service, like any caller's, so the ledger is whole (audited, numbered);
//! their keys are fixed, and a ledger already seeded is recognized by its last
//! order, so a second run starts at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use tokio::sync::Mutex;
use tonic::transport::Channel;

use ledger_proto::pb;
use ledger_proto::pb::ledger_client::LedgerClient;

/// Legs of each seeding post: two entries each.
const LEGS: usize = 5;
/// Entries each order id tags: what a search for one returns.
pub const ENTRIES_PER_ORDER: usize = 2 * LEGS;
/// Entry ids kept for the `get-entry` scenario.
const SAMPLED: usize = 10_000;

/// What the read scenarios pick from: order ids and entry ids.
#[derive(Debug, Default)]
pub struct Seeded {
    pub orders: u64,
    pub entry_ids: Vec<u64>,
}

/// The order id tag of seeding post `n`.
pub fn order_id(n: u64) -> String {
    format!("bench-order-{n}")
}

fn search(order: u64) -> pb::SearchEntriesRequest {
    pb::SearchEntriesRequest {
        metadata: [("order_id".to_owned(), order_id(order))].into(),
        ..Default::default()
    }
}

/// Makes sure the ledger holds at least `entries` tagged entries between
/// `accounts`, posting what is missing with `workers` callers; returns what the
/// read scenarios pick from.
pub async fn ensure(
    channels: &[Channel],
    accounts: &[u64],
    entries: u64,
    workers: u64,
) -> anyhow::Result<Seeded> {
    let orders = entries.div_ceil(ENTRIES_PER_ORDER as u64).max(1);
    let mut client = LedgerClient::new(channels.first().context("no connection")?.clone());
    let last = client
        .search_entries(search(orders - 1))
        .await?
        .into_inner();
    if last.entries.len() == ENTRIES_PER_ORDER {
        let mut entry_ids = Vec::new();
        for n in (0..orders).step_by(usize::try_from((orders / 1000).max(1))?) {
            let found = client.search_entries(search(n)).await?.into_inner();
            entry_ids.extend(found.entries.iter().map(|e| e.entry_id));
        }
        return Ok(Seeded { orders, entry_ids });
    }
    let next = Arc::new(AtomicU64::new(0));
    let sampled = Arc::new(Mutex::new(Vec::with_capacity(SAMPLED)));
    let accounts: Arc<[u64]> = accounts.into();
    let mut tasks = Vec::new();
    for (_, channel) in (0..workers.max(1)).zip(channels.iter().cycle()) {
        let mut client = LedgerClient::new(channel.clone());
        let (next, sampled, accounts) = (next.clone(), sampled.clone(), accounts.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= orders {
                    return anyhow::Ok(());
                }
                let reply = client.post(order(n, &accounts)).await?.into_inner();
                let mut sampled = sampled.lock().await;
                if sampled.len() < SAMPLED {
                    sampled.extend(reply.entries.iter().map(|e| e.entry_id));
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    // A search waits until the stream has numbered every commit it can see:
    // the seeding's backlog is numbered before anything is measured.
    for attempt in 1.. {
        match client.search_entries(search(orders - 1)).await {
            Ok(found) if found.get_ref().entries.len() == ENTRIES_PER_ORDER => break,
            Ok(_) => anyhow::bail!("the last seeding post is not found"),
            Err(status) if status.code() == tonic::Code::Unavailable && attempt < 20 => {}
            Err(status) => return Err(status.into()),
        }
    }
    let entry_ids = std::mem::take(&mut *sampled.lock().await);
    Ok(Seeded { orders, entry_ids })
}

/// Seeding post `n`: [`LEGS`] legs of 1 along consecutive accounts from one
/// chosen by `n` (every leg between two accounts, given two or more).
fn order(n: u64, accounts: &[u64]) -> pb::PostRequest {
    let count = accounts.len().max(1) as u64;
    let at = |i: u64| {
        let index = usize::try_from((n * 7 + i) % count).unwrap_or(0);
        accounts.get(index).copied().unwrap_or(1)
    };
    let legs = (0..LEGS as u64)
        .filter_map(|i| {
            let (from, to) = (at(i), at(i + 1));
            (from != to).then(|| pb::Leg {
                from_account_id: from,
                to_account_id: to,
                amount: 1,
                currency: "USD".into(),
                description: String::new(),
            })
        })
        .collect();
    pb::PostRequest {
        idempotency_key: format!("bench-seed-{n}"),
        legs,
        description: "bench order".into(),
        metadata: [("order_id".to_owned(), order_id(n))].into(),
    }
}

/// The most legs of a post that tags the `search-wide` pair: 500 entries.
const WIDE_LEGS: u64 = 250;

/// The pair every entry of the `search-wide` ledger of `matches` entries holds.
pub fn wide_pair(matches: u64) -> (String, String) {
    ("wide".to_owned(), matches.to_string())
}

/// Makes sure `matches` entries (rounded up to whole posts) hold the pair
/// [`wide_pair`]: posts of up to [`WIDE_LEGS`] legs along `accounts`, sent by
/// `workers` callers. Their keys are fixed, so a second run replays them.
pub async fn ensure_wide(
    channels: &[Channel],
    accounts: &[u64],
    matches: u64,
    workers: u64,
) -> anyhow::Result<()> {
    let legs = matches.div_ceil(2).clamp(1, WIDE_LEGS);
    let posts = matches.div_ceil(2 * legs);
    let next = Arc::new(AtomicU64::new(0));
    let accounts: Arc<[u64]> = accounts.into();
    let mut tasks = Vec::new();
    for (_, channel) in (0..workers.max(1)).zip(channels.iter().cycle()) {
        let mut client = LedgerClient::new(channel.clone());
        let (next, accounts) = (next.clone(), accounts.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= posts {
                    return anyhow::Ok(());
                }
                let mut post = order(n, &accounts);
                post.legs = (0..legs)
                    .filter_map(|i| {
                        post.legs
                            .get(usize::try_from(i % LEGS as u64).ok()?)
                            .cloned()
                    })
                    .collect();
                post.idempotency_key = format!("bench-wide-{matches}-{n}");
                post.metadata = [wide_pair(matches)].into();
                client.post(post).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    // The first search waits until the stream has numbered the seeding's
    // backlog, before anything is measured.
    let mut client = LedgerClient::new(channels.first().context("no connection")?.clone());
    for attempt in 1.. {
        let request = pb::SearchEntriesRequest {
            metadata: [wide_pair(matches)].into(),
            page_size: 1,
            ..Default::default()
        };
        match client.search_entries(request).await {
            Ok(_) => break,
            Err(status) if status.code() == tonic::Code::Unavailable && attempt < 100 => {}
            Err(status) => return Err(status.into()),
        }
    }
    Ok(())
}

/// Legs of each post that deepens the `balance-deep` account: 250 entries on it.
const DEEP_LEGS: usize = 250;

/// The accounts of the balance scenarios and the points they ask within: by
/// sequence up to the last of each account's, by time from its opening to its
/// last entry.
#[derive(Debug, Default, Clone, Copy)]
pub struct Balances {
    pub deep: Journal,
    pub shallow: Journal,
}

/// An account and the range of its points.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Journal {
    pub account: u64,
    pub last_sequence: u64,
    /// Microseconds since the epoch.
    pub opened: i64,
    pub last: i64,
}

fn micros(at: Option<&prost_types::Timestamp>) -> i64 {
    at.map_or(0, |t| t.seconds * 1_000_000 + i64::from(t.nanos) / 1000)
}

/// Makes sure an account of at least `entries` entries (posts of
/// [`DEEP_LEGS`] legs from a funding account with no floor) and one of 10
/// exist; their keys are fixed, so a second run replays what the first did.
pub async fn ensure_balances(channel: &Channel, entries: u64) -> anyhow::Result<Balances> {
    let mut client = LedgerClient::new(channel.clone());
    let open = async |key: &str, limits: Option<pb::AccountLimits>| {
        let reply = client
            .clone()
            .open_account(pb::OpenAccountRequest {
                idempotency_key: key.to_owned(),
                currency: "USD".into(),
                limits,
                ..Default::default()
            })
            .await?
            .into_inner();
        let account = reply.account.context("an account")?;
        anyhow::Ok((account.account_id, micros(account.created_at.as_ref())))
    };
    let no_floor = Some(pb::AccountLimits {
        no_min_balance: true,
        ..Default::default()
    });
    let (funding, _) = open("bench-deep-funding", no_floor).await?;
    let (deep, deep_opened) = open("bench-deep", None).await?;
    let (shallow, shallow_opened) = open("bench-shallow", None).await?;
    let posts = entries.div_ceil(DEEP_LEGS as u64);
    for n in 0..posts {
        let leg = pb::Leg {
            from_account_id: funding,
            to_account_id: deep,
            amount: 1,
            currency: "USD".into(),
            description: String::new(),
        };
        client
            .post(pb::PostRequest {
                idempotency_key: format!("bench-deep-{n}"),
                legs: vec![leg; DEEP_LEGS],
                description: "deepen".into(),
                metadata: std::collections::BTreeMap::new(),
            })
            .await?;
    }
    for n in 0..10 {
        client
            .credit(pb::CreditRequest {
                idempotency_key: format!("bench-shallow-{n}"),
                account_id: shallow,
                amount: 1,
                currency: "USD".into(),
                ..Default::default()
            })
            .await?;
    }
    let mut journal = async |account: u64, opened: i64| {
        let now = client
            .get_balance(pb::GetBalanceRequest {
                account_id: account,
                ..Default::default()
            })
            .await?
            .into_inner();
        anyhow::Ok(Journal {
            account,
            last_sequence: now.sequence,
            opened,
            last: micros(now.created_at.as_ref()),
        })
    };
    Ok(Balances {
        deep: journal(deep, deep_opened).await?,
        shallow: journal(shallow, shallow_opened).await?,
    })
}
