//! `ledger bench`: a closed-loop load generator over real gRPC.
//!
//! `--concurrency` workers each send one call at a time for `--duration`, after a
//! warm-up; latencies go into an HDR histogram. Scenarios:
//!
//! - `unique`: every call a Charge with a new key;
//! - `replay`: Charges of keys committed before the measurement, so every call is
//!   a replay;
//! - `storm`: every key sent `--duplicates` times at once;
//! - `mixed`: 70% new Charges, 10% Credits, 10% replays, 10% GetAccount;
//! - `transfer`: Transfers between random pairs of accounts;
//! - `hot-merchant`: every account pays the first one (a merchant every customer
//!   pays: one hot account receiving every transfer);
//! - `hold-capture`: a PlaceHold, then its CaptureHold (each call counted);
//! - `post`: a 3-leg marketplace sale, a buyer paying the merchant (the first
//!   account) and the platform's fee account (the second), and the merchant paying
//!   the platform: two hot accounts in every call;
//! - `post-256`: Posts of 256 legs between random accounts;
//! - `batch`: Batches of `--batch-size` Charges with new keys (each item
//!   counted as a call, each with its batch's latency); `--concurrency` is
//!   the batches in flight;
//! - `idle`: no calls at all: the `--watchers` streams held open for the warm-up
//!   and the duration (what idle watchers cost, sampled from outside);
//! - `search`: SearchEntries of one order id, on a ledger of at least
//!   `--ledger-entries` entries, each search finding 10 (`seed`);
//! - `get-entry`: GetEntry of entries of that ledger, what a search is held
//!   against;
//! - `search-wide`: SearchEntries of the first page (100 entries) of one pair
//!   that `--search-matches` entries hold (`seed`): what a page costs as its
//!   pair's matches grow;
//! - `subscription`: `unique`, with a subscription of a receiver the bench runs
//!   (below) taking every entry.
//!
//! `--metadata N` tags every Charge with N pairs (its order id and N - 1 more).
//!
//! `--subscriptions N` subscribes a receiver the bench runs N times
//! (`subscriber`): the first subscription's deliveries are timed as watcher 0's
//! entries are, and must be contiguous.
//!
//! `--watchers N` attaches N `WatchEntries` streams of every account for the run,
//! from the highest sequence when it starts (from 0 without `--database-url`).
//! Watcher 0 measures the lag of each entry a measured call wrote: from the
//! instant its reply arrived to the instant the entry arrived on the stream. Every
//! watcher must see contiguous sequences, and all of them must reach the last
//! entry, or the run fails. `--watch-target` attaches them to another instance
//! of the same ledger. `--slow-watchers N` makes the last N of them slow readers
//! (one entry per `SLOW_READ`): they must see contiguous sequences too, but are
//! not waited for; they load the server with streams whose buffers stay full.
//!
//! Accounts are opened and funded with fixed keys, so a second run replays its
//! set-up instead of repeating it. With `--database-url`, the run ends with a
//! correctness check: the journal holds exactly one entry per key that succeeded,
//! and every touched balance equals what the successful calls imply.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use mysql_async::prelude::Queryable as _;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use ledger_proto::pb;
use ledger_proto::pb::ledger_client::LedgerClient;

use crate::follow::{DRAIN, Follow};
use crate::{cpu, status};

/// Every bench account starts with this much: no Charge of a run can exhaust it.
const OPENING_BALANCE: i64 = 1_000_000_000_000_000;
/// Workers per HTTP/2 connection.
const WORKERS_PER_CONNECTION: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Unique,
    Replay,
    Storm,
    Mixed,
    Transfer,
    HotMerchant,
    HoldCapture,
    Post,
    #[value(name = "post-256")]
    Post256,
    /// Batches of `--batch-size` Charges with new keys.
    Batch,
    Idle,
    Search,
    GetEntry,
    /// SearchEntries pages of a pair of `--search-matches` entries.
    SearchWide,
    /// GetAccount of random accounts.
    GetAccount,
    /// GetBalance of an account of `--balance-entries` entries, at random
    /// points, by sequence and by time alike.
    BalanceDeep,
    /// The same of an account of 10 entries.
    BalanceShallow,
    /// `unique` with a subscription taking every entry (`--subscriptions`, at
    /// least 1), its receiver timing the lag.
    Subscription,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The server to load
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub target: String,
    /// Calls in flight at any time
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// How long to measure
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Load before measuring, not counted
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Accounts to spread the calls over (1 = one hot account)
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub accounts: u64,
    #[arg(long, value_enum, default_value = "unique")]
    pub scenario: Scenario,
    /// Copies of each key sent at once in the storm scenario
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=64))]
    pub duplicates: u64,
    /// `WatchEntries` streams (every account's) attached for the run; watcher 0
    /// measures the lag from each call's reply to its entries' arrival
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1024))]
    pub watchers: u64,
    /// The instance the `--watchers` streams attach to, when not `--target`:
    /// another instance of the same ledger, which learns of new entries from the
    /// database rather than from its own writers
    #[arg(long, value_name = "URL")]
    pub watch_target: Option<String>,
    /// Of the `--watchers`, how many read slowly (one entry every 5 ms, far
    /// behind the load) and are not waited for at the end
    #[arg(long, default_value_t = 0)]
    pub slow_watchers: u64,
    /// Subscriptions (SPEC 3.15) of a receiver the bench runs on loopback, from
    /// the highest sequence (0 without `--database-url`): the first takes every
    /// entry and measures the lag from each call's reply to its entries' arrival
    /// at the receiver (in place of `--watchers`); the others take only an
    /// account no call touches. The service must deliver to loopback
    /// (`--webhook-allow-private`)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub subscriptions: u64,
    /// Open the accounts with limits other than the defaults (a credit line of
    /// 1,000,000 and a ceiling a run never reaches), as a ledger that uses
    /// limits keeps them on every account (a server without limits opens them
    /// plain)
    #[arg(long)]
    pub limits: bool,
    /// Pairs of metadata on every Charge (its order id, then others)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=50))]
    pub metadata: u64,
    /// The search and get-entry scenarios: the entries the ledger holds first
    /// (what is missing is posted before measuring, tagged 10 per order id)
    #[arg(long, default_value_t = 1_000_000)]
    pub ledger_entries: u64,
    /// The search-wide scenario: the entries its pair tags (posted before
    /// measuring when missing, up to 500 per post)
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub search_matches: u64,
    /// The balance-deep scenario: the entries of its account (posted before
    /// measuring when missing, 250 per post)
    #[arg(long, default_value_t = 1_000_000)]
    pub balance_entries: u64,
    /// The batch scenario: items a batch
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub batch_size: u64,
    /// Print one JSON line instead of the report
    #[arg(long)]
    pub json: bool,
    /// Check the journal and balances afterwards in this database
    #[arg(long, env = "LEDGER_BENCH_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Report this process's CPU time per measured call, over the measured
    /// calls only (NAME=PID; repeatable). The bench's own is always reported.
    #[arg(long = "cpu-of", value_name = "NAME=PID")]
    pub cpu_of: Vec<cpu::Watched>,
    /// Report the database server's statement, handler and row counters per
    /// measured call (`SHOW GLOBAL STATUS` over the measured calls; needs
    /// --database-url, and counts whatever else that server runs meanwhile)
    #[arg(long, requires = "database_url")]
    pub status: bool,
    /// Run this shell command when the measured calls start (after the set-up
    /// and the warm-up), and wait for it to end before reporting: a profiler
    /// that samples the measured calls only
    #[arg(long, value_name = "COMMAND")]
    pub during: Option<String>,
}

/// What one operation of a worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Charge,
    Credit,
    Replay,
    Read,
    /// To this account.
    Transfer(u64),
    HoldCapture,
    /// The marketplace sale: from the buyer, to the merchant and the platform.
    Sale {
        merchant: u64,
        platform: u64,
    },
    /// Legs between random accounts.
    Post {
        legs: usize,
    },
    /// SearchEntries of a seeded order id.
    Search,
    /// SearchEntries of the first page of the pair these many entries hold.
    SearchWide(u64),
    /// GetEntry of a seeded entry.
    GetEntry,
    /// GetBalance at a random point of this account's journal.
    Balance(crate::seed::Journal),
    /// A Batch of this many Charges.
    Batch(usize),
}

/// Legs of a `post-256` call.
const LEGS_OF_A_BIG_POST: usize = 256;

/// What the workers saw, merged.
#[derive(Debug)]
struct Tally {
    latency: Histogram<u64>,
    errors: BTreeMap<String, u64>,
    calls: u64,
    /// Keys that took effect, with the entries they wrote: (account, signed amount).
    effects: HashMap<String, Vec<(u64, i64)>>,
}

impl Tally {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            latency: Histogram::new_with_bounds(1, 60_000_000, 3)?,
            errors: BTreeMap::new(),
            calls: 0,
            effects: HashMap::new(),
        })
    }

    fn merge(&mut self, other: Self) -> anyhow::Result<()> {
        self.latency.add(&other.latency)?;
        for (code, n) in other.errors {
            *self.errors.entry(code).or_default() += n;
        }
        self.calls += other.calls;
        self.effects.extend(other.effects);
        Ok(())
    }
}

/// What the read scenarios need in the ledger before measuring: the tagged
/// ledger of `search` and `get-entry`, the accounts of the balance scenarios.
async fn seed_reads(
    args: &BenchArgs,
    channels: &[Channel],
    accounts: &[u64],
) -> anyhow::Result<(crate::seed::Seeded, crate::seed::Balances)> {
    let seeded = match args.scenario {
        Scenario::Search | Scenario::GetEntry => {
            crate::seed::ensure(channels, accounts, args.ledger_entries, args.concurrency).await?
        }
        Scenario::SearchWide => {
            // Seeded by at least 16 callers, however few the measured ones.
            let workers = args.concurrency.max(16);
            crate::seed::ensure_wide(channels, accounts, args.search_matches, workers).await?;
            crate::seed::Seeded::default()
        }
        _ => crate::seed::Seeded::default(),
    };
    let points = match (args.scenario, channels.first()) {
        (Scenario::BalanceDeep | Scenario::BalanceShallow, Some(channel)) => {
            crate::seed::ensure_balances(channel, args.balance_entries).await?
        }
        _ => crate::seed::Balances::default(),
    };
    Ok((seeded, points))
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.slow_watchers == 0 || args.slow_watchers < args.watchers,
        "--slow-watchers must leave at least one of the --watchers reading at speed"
    );
    anyhow::ensure!(
        args.watchers == 0 || subscriptions(args) == 0,
        "--watchers and --subscriptions each measure the lag: choose one"
    );
    let channels = connect(args).await?;
    let run_id = format!("bench-{:08x}", rand::random::<u32>());
    let accounts = open_accounts(&channels, args, &run_id).await?;
    let replayable = match args.scenario {
        Scenario::Replay | Scenario::Mixed => {
            prepare_replays(&channels, &accounts, &run_id, args).await?
        }
        _ => Vec::new(),
    };
    let (seeded, points) = seed_reads(args, &channels, &accounts).await?;
    let follow = match (args.watchers, subscriptions(args)) {
        (0, 0) => None,
        (0, _) => Some(Arc::new(Follow::new(1, 0)?)),
        (n, _) => Some(Arc::new(Follow::new(
            usize::try_from(n - args.slow_watchers)?,
            usize::try_from(args.slow_watchers)?,
        )?)),
    };
    let plan = Arc::new(Plan {
        scenario: args.scenario,
        duplicates: args.duplicates,
        accounts,
        replayable,
        run_id: run_id.clone(),
        follow: follow.clone(),
        metadata: usize::try_from(args.metadata)?,
        seeded,
        balances: points,
        search_matches: args.search_matches,
        batch_size: usize::try_from(args.batch_size)?,
    });

    let before = match &args.database_url {
        Some(url) => Some(balances(url).await?),
        None => None,
    };
    let (watchers, subscribed) = followers(args, follow.as_ref(), &channels, &run_id).await?;
    let started = Instant::now();
    let stop_at = started + args.warmup + args.duration;
    let measure_from = started + args.warmup;
    let samplers = Samplers::start(args, measure_from, stop_at);
    let groups = match args.scenario {
        Scenario::Storm => (args.concurrency / args.duplicates).max(1),
        Scenario::Idle => 0,
        _ => args.concurrency,
    };
    let mut workers = Vec::new();
    for (w, channel) in (0..groups).zip(channels.iter().cycle()) {
        workers.push(tokio::spawn(worker(
            w,
            channel.clone(),
            plan.clone(),
            measure_from,
            stop_at,
        )));
    }
    if args.scenario == Scenario::Idle {
        tokio::time::sleep_until(stop_at).await;
    }
    let mut tally = Tally::new()?;
    for w in workers {
        tally.merge(w.await??)?;
    }
    let (cpu, counters) = samplers.finish().await?;
    if let Some(follow) = &follow {
        follow.drain(watchers).await?;
    }
    if let Some(channel) = channels.first() {
        crate::subscriber::unsubscribe(channel.clone(), &subscribed, &run_id).await?;
    }

    let report = Report::new(args, &tally, follow.as_deref(), cpu, &counters);
    if args.json {
        say(&report.json());
    } else {
        say(&report.to_string());
    }
    if args.watchers > 0 && !args.json {
        say("check: every watcher received contiguous sequences, up to the run's last entry");
    }
    if let (Some(url), Some(before)) = (&args.database_url, before) {
        check(url, &before, &plan, &tally).await?;
        if !args.json {
            say("check: the journal and the balances match the successful calls");
        }
    }
    Ok(())
}

/// Prints a line; a closed stdout (`| head`) is not an error worth a panic.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{line}");
}

struct Plan {
    scenario: Scenario,
    duplicates: u64,
    accounts: Vec<u64>,
    /// Charges committed before measuring, re-sent as replays.
    replayable: Vec<pb::ChargeRequest>,
    run_id: String,
    /// The watchers' shared record, with `--watchers`.
    follow: Option<Arc<Follow>>,
    /// Pairs of metadata on every Charge.
    metadata: usize,
    /// What the read scenarios pick from.
    seeded: crate::seed::Seeded,
    /// What the balance scenarios ask of.
    balances: crate::seed::Balances,
    /// The entries the `search-wide` pair tags.
    search_matches: u64,
    /// Items of a batch in the `batch` scenario.
    batch_size: usize,
}

impl Plan {
    /// Notes the reply instant of the entries a measured call wrote.
    fn replied(&self, measured: bool, ids: impl IntoIterator<Item = u64>) {
        if let (true, Some(follow)) = (measured, &self.follow) {
            follow.replied(ids, Instant::now());
        }
    }
}

/// How long a slow watcher takes over each entry.
const SLOW_READ: Duration = Duration::from_millis(5);

/// Opens the `--watchers` streams, every account's, after the highest sequence
/// (from the database, else 0), and returns once every one has answered.
async fn attach(
    args: &BenchArgs,
    follow: &Arc<Follow>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<anyhow::Result<()>>>> {
    let after = highest_sequence(args).await?;
    let target = args.watch_target.as_ref().unwrap_or(&args.target);
    // The slow watchers read on connections of their own, as slow clients would:
    // on a shared one, the data they leave unread holds the connection's flow
    // control window, and the fast watchers beside them wait for it.
    let slow = follow.reached.len() - follow.fast;
    let mut channels = Vec::new();
    for watchers in [follow.fast, slow] {
        let mut group = Vec::new();
        for _ in 0..watchers.div_ceil(WORKERS_PER_CONNECTION) {
            group.push(
                Endpoint::from_shared(target.clone())?
                    .tcp_nodelay(true)
                    .connect()
                    .await
                    .with_context(|| format!("cannot connect to {target}"))?,
            );
        }
        channels.extend(group.iter().cycle().take(watchers).cloned());
    }
    let watchers: Vec<_> = channels
        .into_iter()
        .enumerate()
        .map(|(i, channel)| tokio::spawn(watch(i, channel, after, follow.clone())))
        .collect();
    let deadline = Instant::now() + DRAIN;
    while follow.open.load(Ordering::Relaxed) < u64::try_from(watchers.len())? {
        if let Some(done) = watchers
            .iter()
            .position(tokio::task::JoinHandle::is_finished)
        {
            let mut watchers = watchers;
            watchers.swap_remove(done).await??;
            anyhow::bail!("watcher {done} ended before the run");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the watchers' streams did not open in {DRAIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(watchers)
}

/// The connections the workers share, `WORKERS_PER_CONNECTION` each.
async fn connect(args: &BenchArgs) -> anyhow::Result<Vec<Channel>> {
    let connections = usize::try_from(args.concurrency)?.div_ceil(WORKERS_PER_CONNECTION);
    let mut channels = Vec::new();
    for _ in 0..connections {
        channels.push(
            Endpoint::from_shared(args.target.clone())?
                .tcp_nodelay(true)
                .connect()
                .await
                .with_context(|| format!("cannot connect to {}", args.target))?,
        );
    }
    Ok(channels)
}

/// The subscriptions to make: `--subscriptions`, at least one in the
/// `subscription` scenario.
fn subscriptions(args: &BenchArgs) -> u64 {
    match args.scenario {
        Scenario::Subscription => args.subscriptions.max(1),
        _ => args.subscriptions,
    }
}

/// What follows the run's entries: the `--watchers` streams, or the receiver of
/// the `--subscriptions` with their ids.
async fn followers(
    args: &BenchArgs,
    follow: Option<&Arc<Follow>>,
    channels: &[Channel],
    run_id: &str,
) -> anyhow::Result<(Vec<tokio::task::JoinHandle<anyhow::Result<()>>>, Vec<u64>)> {
    match follow {
        Some(follow) if subscriptions(args) > 0 => {
            let after = highest_sequence(args).await?;
            let channel = channels.first().context("no connection")?.clone();
            let (task, ids) = crate::subscriber::subscribe(
                channel,
                subscriptions(args),
                after,
                run_id,
                follow.clone(),
            )
            .await?;
            Ok((vec![task], ids))
        }
        Some(follow) => Ok((attach(args, follow).await?, Vec::new())),
        None => Ok((Vec::new(), Vec::new())),
    }
}

/// The highest sequence assigned, from `--database-url` (else 0).
async fn highest_sequence(args: &BenchArgs) -> anyhow::Result<u64> {
    let Some(url) = &args.database_url else {
        return Ok(0);
    };
    let mut conn = mysql_async::Conn::from_url(url.as_str())
        .await
        .context("cannot connect to read the highest sequence")?;
    let highest: Option<u64> = conn
        .query_first("SELECT next_sequence - 1 FROM ledger_stream WHERE id = 1")
        .await?;
    let _ = conn.disconnect().await;
    Ok(highest.unwrap_or(0))
}

/// One watcher: every entry after `after`, which must come in contiguous
/// sequences; watcher 0 also times the entries' arrival.
async fn watch(
    index: usize,
    channel: Channel,
    after: u64,
    follow: Arc<Follow>,
) -> anyhow::Result<()> {
    let mut client = LedgerClient::new(channel);
    let request = pb::WatchEntriesRequest {
        after_sequence: after,
        account_id: 0,
    };
    let mut stream = client
        .watch_entries(request)
        .await
        .with_context(|| format!("watcher {index} could not start"))?
        .into_inner();
    follow.open.fetch_add(1, Ordering::Relaxed);
    let mut last = after;
    while let Some(entry) = stream
        .message()
        .await
        .with_context(|| format!("watcher {index}'s stream failed"))?
    {
        let at = Instant::now();
        anyhow::ensure!(
            entry.sequence == last + 1,
            "watcher {index} received sequence {} after {last}: the stream is not contiguous",
            entry.sequence
        );
        last = entry.sequence;
        if index == 0 {
            follow.received(entry.entry_id, at);
        }
        if let Some(reached) = follow.reached.get(index) {
            reached.store(last, Ordering::Relaxed);
        }
        if index >= follow.fast {
            tokio::time::sleep(SLOW_READ).await;
        }
    }
    anyhow::bail!("watcher {index}'s stream ended after sequence {last}")
}

async fn open_accounts(
    channels: &[Channel],
    args: &BenchArgs,
    run_id: &str,
) -> anyhow::Result<Vec<u64>> {
    let (n, concurrency) = (args.accounts, args.concurrency);
    // Accounts with limits are other accounts: their keys say so.
    let (limits, kind) = if args.limits {
        let line = pb::AccountLimits {
            min_balance: -1_000_000,
            no_min_balance: false,
            max_balance: Some(i64::MAX / 2),
        };
        (Some(line), "open-limited")
    } else {
        (None, "open")
    };
    let ids = Arc::new(Mutex::new(Vec::new()));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (_, channel) in (0..concurrency.min(n)).zip(channels.iter().cycle()) {
        let mut client = LedgerClient::new(channel.clone());
        let (ids, next, run_id) = (ids.clone(), next.clone(), run_id.to_owned());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return anyhow::Ok(());
                }
                // Runs share accounts through their keys; one whose key retention
                // purged is replaced by a new account for this run.
                let key = format!("bench-{kind}-{i}");
                let account = match open_account(&mut client, key, limits).await {
                    Err(status) if expired(&status) => {
                        let key = format!("{run_id}-{kind}-{i}");
                        open_account(&mut client, key, limits).await?
                    }
                    opened => opened?,
                };
                let fund = pb::CreditRequest {
                    idempotency_key: format!("bench-fund-{account}"),
                    account_id: account,
                    amount: OPENING_BALANCE,
                    currency: "USD".into(),
                    description: "bench opening balance".into(),
                    ..Default::default()
                };
                match client.credit(fund).await {
                    // Funded when it was opened.
                    Err(status) if expired(&status) => {}
                    funded => {
                        funded?;
                    }
                }
                ids.lock().await.push(account);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let mut ids = Arc::try_unwrap(ids)
        .map_err(|_| anyhow::anyhow!("workers still hold the ids"))?
        .into_inner();
    ids.sort_unstable();
    Ok(ids)
}

async fn open_account(
    client: &mut LedgerClient<Channel>,
    idempotency_key: String,
    limits: Option<pb::AccountLimits>,
) -> Result<u64, tonic::Status> {
    let open = pb::OpenAccountRequest {
        idempotency_key,
        currency: "USD".into(),
        limits,
        ..Default::default()
    };
    let account = client.open_account(open).await?.into_inner().account;
    account
        .map(|a| a.account_id)
        .ok_or_else(|| tonic::Status::internal("an OpenAccount reply without its account"))
}

/// Whether a status says the key's record was purged after it took effect.
fn expired(status: &tonic::Status) -> bool {
    use tonic_types::StatusExt as _;
    status
        .get_details_error_info()
        .is_some_and(|info| info.reason == "IDEMPOTENCY_KEY_EXPIRED")
}

/// Commits the charges the replay scenario re-sends.
async fn prepare_replays(
    channels: &[Channel],
    accounts: &[u64],
    run_id: &str,
    args: &BenchArgs,
) -> anyhow::Result<Vec<pb::ChargeRequest>> {
    let count = (args.concurrency * 64).min(20_000);
    let requests: Vec<_> = (0..count)
        .map(|i| {
            Ok(charge(
                format!("{run_id}-replayable-{i}"),
                pick(accounts)?,
                1,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let channel = channels.first().context("no connection")?;
    let client = LedgerClient::new(channel.clone());
    for chunk in requests.chunks(usize::try_from(args.concurrency)?) {
        let calls = chunk.iter().map(|r| {
            let mut client = client.clone();
            let r = r.clone();
            async move { client.charge(r).await }
        });
        for answer in futures::future::join_all(calls).await {
            answer.context("preparing the replays")?;
        }
    }
    Ok(requests)
}

/// `n` pairs of metadata for the call under `key`: its order id, then fixed
/// tags of a typical length.
fn tags(key: &str, n: usize) -> BTreeMap<String, String> {
    (0..n)
        .map(|i| match i {
            0 => ("order_id".to_owned(), key.to_owned()),
            i => (format!("tag-{i}"), format!("value of tag {i}")),
        })
        .collect()
}

fn charge(idempotency_key: String, account_id: u64, amount: i64) -> pb::ChargeRequest {
    pb::ChargeRequest {
        idempotency_key,
        account_id,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    }
}

fn pick<T: Copy>(items: &[T]) -> anyhow::Result<T> {
    use rand::seq::IndexedRandom as _;
    items
        .choose(&mut rand::rng())
        .copied()
        .context("nothing to pick from")
}

async fn worker(
    id: u64,
    channel: Channel,
    plan: Arc<Plan>,
    measure_from: Instant,
    stop_at: Instant,
) -> anyhow::Result<Tally> {
    let client = LedgerClient::new(channel);
    let mut tally = Tally::new()?;
    let mut n = 0_u64;
    while Instant::now() < stop_at {
        n += 1;
        let key = format!("{}-{id}-{n}", plan.run_id);
        let (op, copies) = choose(&plan)?;
        let account = match op {
            Op::Transfer(to) => pick_other(&plan.accounts, to)?,
            Op::Sale { merchant, platform } => {
                let mut buyer = pick_other(&plan.accounts, merchant)?;
                while buyer == platform {
                    buyer = pick_other(&plan.accounts, merchant)?;
                }
                buyer
            }
            _ => pick(&plan.accounts)?,
        };
        let amount = 1 + rand::random_range(0..100_i64);
        let started = Instant::now();
        let measured = started >= measure_from;
        let calls =
            (0..copies).map(|_| one_op(client.clone(), &plan, measured, op, &key, account, amount));
        let answers = futures::future::join_all(calls).await;
        for (answer, took) in answers.into_iter().flatten() {
            if measured {
                tally.calls += 1;
                tally
                    .latency
                    .saturating_record(u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1));
            }
            match answer {
                Ok(Some((key, entries))) => {
                    tally.effects.insert(key, entries);
                }
                Ok(None) => {}
                Err(code) => {
                    *tally.errors.entry(format!("{code:?}")).or_default() += u64::from(measured);
                }
            }
        }
    }
    Ok(tally)
}

fn choose(plan: &Plan) -> anyhow::Result<(Op, u64)> {
    Ok(match plan.scenario {
        Scenario::Unique | Scenario::Subscription => (Op::Charge, 1),
        Scenario::Replay => (Op::Replay, 1),
        Scenario::Storm => (Op::Charge, plan.duplicates),
        Scenario::Mixed => match rand::random_range(0..10) {
            0 => (Op::Credit, 1),
            1 => (Op::Replay, 1),
            2 => (Op::Read, 1),
            _ => (Op::Charge, 1),
        },
        Scenario::Transfer => (Op::Transfer(pick(&plan.accounts)?), 1),
        Scenario::HotMerchant => {
            let merchant = plan.accounts.first().copied().context("no accounts")?;
            (Op::Transfer(merchant), 1)
        }
        Scenario::HoldCapture => (Op::HoldCapture, 1),
        Scenario::Post => match plan.accounts.as_slice() {
            [merchant, platform, _, ..] => (
                Op::Sale {
                    merchant: *merchant,
                    platform: *platform,
                },
                1,
            ),
            _ => anyhow::bail!("the post scenario needs at least three accounts"),
        },
        Scenario::Post256 => (
            Op::Post {
                legs: LEGS_OF_A_BIG_POST,
            },
            1,
        ),
        Scenario::Batch => (Op::Batch(plan.batch_size), 1),
        Scenario::Idle => anyhow::bail!("the idle scenario makes no calls"),
        Scenario::Search => (Op::Search, 1),
        Scenario::GetEntry => (Op::GetEntry, 1),
        Scenario::SearchWide => (Op::SearchWide(plan.search_matches), 1),
        Scenario::GetAccount => (Op::Read, 1),
        Scenario::BalanceDeep => (Op::Balance(plan.balances.deep), 1),
        Scenario::BalanceShallow => (Op::Balance(plan.balances.shallow), 1),
    })
}

/// What is sampled over the measured calls: CPU times, and the database's
/// counters with `--status`.
struct Samplers {
    cpu: tokio::task::JoinHandle<anyhow::Result<Vec<(String, Duration)>>>,
    counters: Option<tokio::task::JoinHandle<anyhow::Result<BTreeMap<String, u64>>>>,
    /// `--during`'s command.
    during: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Samplers {
    fn start(args: &BenchArgs, from: Instant, to: Instant) -> Self {
        let mut watched = args.cpu_of.clone();
        watched.push(cpu::Watched {
            name: "bench".to_owned(),
            pid: None,
        });
        let counters = match (&args.database_url, args.status) {
            (Some(url), true) => Some(tokio::spawn(status::over(url.clone(), from, to))),
            _ => None,
        };
        Self {
            cpu: tokio::spawn(cpu::over(watched, from, to)),
            counters,
            during: args
                .during
                .clone()
                .map(|command| tokio::spawn(during(command, from))),
        }
    }

    async fn finish(self) -> anyhow::Result<(Vec<(String, Duration)>, BTreeMap<String, u64>)> {
        let cpu = self.cpu.await??;
        let counters = match self.counters {
            Some(counters) => counters.await??,
            None => BTreeMap::new(),
        };
        if let Some(during) = self.during {
            during.await??;
        }
        Ok((cpu, counters))
    }
}

/// Runs `command` with `sh -c` from `from` until it ends.
async fn during(command: String, from: Instant) -> anyhow::Result<()> {
    tokio::time::sleep_until(from).await;
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .status()
        .await
        .with_context(|| format!("cannot run {command:?}"))?;
    anyhow::ensure!(status.success(), "{command:?} failed: {status}");
    Ok(())
}

/// An account other than `not` (itself when it is the only one).
fn pick_other(accounts: &[u64], not: u64) -> anyhow::Result<u64> {
    for _ in 0..64 {
        let account = pick(accounts)?;
        if account != not {
            return Ok(account);
        }
    }
    accounts
        .iter()
        .copied()
        .find(|a| *a != not)
        .context("a transfer needs two accounts")
}

/// A call's answer: on success, the key it took effect under and the entries it
/// wrote, if any.
type Answer = Result<Option<(String, Vec<(u64, i64)>)>, Code>;

/// One operation: one call, or a hold and its capture.
#[expect(
    clippy::too_many_lines,
    reason = "one short arm per operation: a dispatch"
)]
async fn one_op(
    mut client: LedgerClient<Channel>,
    plan: &Plan,
    measured: bool,
    op: Op,
    key: &str,
    account: u64,
    amount: i64,
) -> Vec<(Answer, Duration)> {
    let timed = |started: Instant, answer: Answer| (answer, started.elapsed());
    let started = Instant::now();
    let effect = |entries: Vec<(u64, i64)>| Some((key.to_owned(), entries));
    match op {
        Op::Charge => {
            let mut request = charge(key.to_owned(), account, amount);
            request.metadata = tags(key, plan.metadata);
            let answer = client.charge(request).await;
            if let Ok(reply) = &answer {
                plan.replied(measured, reply.get_ref().entry.iter().map(|e| e.entry_id));
            }
            vec![timed(
                started,
                answer
                    .map(|_| effect(vec![(account, -amount)]))
                    .map_err(|s| s.code()),
            )]
        }
        Op::Credit => {
            let request = pb::CreditRequest {
                idempotency_key: key.to_owned(),
                account_id: account,
                amount,
                currency: "USD".into(),
                description: String::new(),
                ..Default::default()
            };
            let answer = client.credit(request).await;
            if let Ok(reply) = &answer {
                plan.replied(measured, reply.get_ref().entry.iter().map(|e| e.entry_id));
            }
            vec![timed(
                started,
                answer
                    .map(|_| effect(vec![(account, amount)]))
                    .map_err(|s| s.code()),
            )]
        }
        Op::Replay => {
            use rand::seq::IndexedRandom as _;
            let request = plan
                .replayable
                .choose(&mut rand::rng())
                .cloned()
                .unwrap_or_default();
            let answer = client.charge(request).await;
            vec![timed(started, answer.map(|_| None).map_err(|s| s.code()))]
        }
        Op::Search | Op::GetEntry => vec![timed(started, seeded_read(client, plan, op).await)],
        Op::Balance(journal) => vec![timed(started, balance_at(client, journal).await)],
        Op::SearchWide(matches) => vec![timed(started, wide_page(client, matches).await)],
        Op::Read => {
            let request = pb::GetAccountRequest {
                account_id: account,
            };
            let answer = client.get_account(request).await;
            vec![timed(started, answer.map(|_| None).map_err(|s| s.code()))]
        }
        Op::Transfer(to) => {
            let request = pb::TransferRequest {
                idempotency_key: key.to_owned(),
                from_account_id: account,
                to_account_id: to,
                amount,
                currency: "USD".into(),
                description: String::new(),
                ..Default::default()
            };
            let answer = client.transfer(request).await;
            if let Ok(reply) = &answer {
                let reply = reply.get_ref();
                let ids = reply.debit.iter().chain(&reply.credit).map(|e| e.entry_id);
                plan.replied(measured, ids);
            }
            let entries = vec![(account, -amount), (to, amount)];
            vec![timed(
                started,
                answer.map(|_| effect(entries)).map_err(|s| s.code()),
            )]
        }
        Op::HoldCapture => hold_then_capture(client, plan, measured, key, account, amount).await,
        Op::Batch(items) => batch(client, plan, measured, key, items).await,
        Op::Sale { merchant, platform } => {
            let legs = [
                (account, merchant, amount),
                (account, platform, 3),
                (merchant, platform, 1),
            ];
            vec![post(client, plan, measured, key, &legs).await]
        }
        Op::Post { legs } => {
            let mut chosen = Vec::with_capacity(legs);
            for _ in 0..legs {
                let Ok(from) = pick(&plan.accounts) else {
                    break;
                };
                let Ok(to) = pick_other(&plan.accounts, from) else {
                    break;
                };
                chosen.push((from, to, 1 + rand::random_range(0..100_i64)));
            }
            vec![post(client, plan, measured, key, &chosen).await]
        }
    }
}

/// A Batch of `items` Charges on random accounts, keyed `{key}-{i}`: one
/// answer an item, each timed as its batch.
async fn batch(
    mut client: LedgerClient<Channel>,
    plan: &Plan,
    measured: bool,
    key: &str,
    items: usize,
) -> Vec<(Answer, Duration)> {
    use pb::batch_result::Result as Outcome;
    let mut charges = Vec::with_capacity(items);
    for i in 0..items {
        let Ok(account) = pick(&plan.accounts) else {
            break;
        };
        charges.push(charge(
            format!("{key}-{i}"),
            account,
            1 + rand::random_range(0..100_i64),
        ));
    }
    let request = pb::BatchRequest {
        items: charges
            .iter()
            .map(|charge| pb::BatchItem {
                call: Some(pb::batch_item::Call::Charge(charge.clone())),
            })
            .collect(),
    };
    let started = Instant::now();
    let answer = client.batch(request).await;
    let took = started.elapsed();
    let results = match answer {
        Ok(reply) => reply.into_inner().results,
        Err(status) => return charges.iter().map(|_| (Err(status.code()), took)).collect(),
    };
    let mut answers = Vec::with_capacity(items);
    for (charge, result) in charges.into_iter().zip(results) {
        let answer = match result.result {
            Some(Outcome::Charge(reply)) => {
                plan.replied(measured, reply.entry.iter().map(|e| e.entry_id));
                let entries = vec![(charge.account_id, -charge.amount)];
                Ok(Some((charge.idempotency_key, entries)))
            }
            Some(Outcome::Error(status)) => Err(Code::from_i32(status.code)),
            _ => Err(Code::Internal),
        };
        answers.push((answer, took));
    }
    answers
}

/// The first page of the `search-wide` pair, which must be full.
async fn wide_page(mut client: LedgerClient<Channel>, matches: u64) -> Answer {
    const PAGE: u64 = 100;
    let request = pb::SearchEntriesRequest {
        metadata: [crate::seed::wide_pair(matches)].into(),
        page_size: 100,
        ..Default::default()
    };
    let answer = client.search_entries(request).await.and_then(|reply| {
        let found = reply.into_inner().entries.len() as u64;
        if found == matches.min(PAGE) {
            Ok(())
        } else {
            Err(tonic::Status::data_loss(format!(
                "a page of the wide pair held {found} entries"
            )))
        }
    });
    answer.map(|()| None).map_err(|s| s.code())
}

/// A read of the seeded ledger: a search that must find its order's entries,
/// or a GetEntry.
async fn seeded_read(mut client: LedgerClient<Channel>, plan: &Plan, op: Op) -> Answer {
    use rand::seq::IndexedRandom as _;
    let answer = if op == Op::Search {
        let order = rand::random_range(0..plan.seeded.orders.max(1));
        let request = pb::SearchEntriesRequest {
            metadata: [("order_id".to_owned(), crate::seed::order_id(order))].into(),
            ..Default::default()
        };
        client.search_entries(request).await.and_then(|reply| {
            let found = reply.into_inner().entries.len();
            if found == crate::seed::ENTRIES_PER_ORDER {
                Ok(())
            } else {
                Err(tonic::Status::data_loss(format!(
                    "a search found {found} entries"
                )))
            }
        })
    } else {
        let entry_id = plan
            .seeded
            .entry_ids
            .choose(&mut rand::rng())
            .copied()
            .unwrap_or(1);
        client
            .get_entry(pb::GetEntryRequest { entry_id })
            .await
            .map(drop)
    };
    answer.map(|()| None).map_err(|s| s.code())
}

/// GetBalance of `journal`'s account at a random point within it: by
/// sequence or by time, one or the other at random.
async fn balance_at(mut client: LedgerClient<Channel>, journal: crate::seed::Journal) -> Answer {
    let mut request = pb::GetBalanceRequest {
        account_id: journal.account,
        ..Default::default()
    };
    if rand::random::<bool>() {
        request.as_of_sequence = rand::random_range(1..=journal.last_sequence.max(1));
    } else {
        let at = rand::random_range(journal.opened..=journal.last.max(journal.opened));
        request.as_of_time = Some(prost_types::Timestamp {
            seconds: at.div_euclid(1_000_000),
            nanos: i32::try_from(at.rem_euclid(1_000_000) * 1000).unwrap_or(0),
        });
    }
    let answer = client.get_balance(request).await;
    answer.map(|_| None).map_err(|s| s.code())
}

/// One Post of `legs` (from, to, amount), timed.
async fn post(
    mut client: LedgerClient<Channel>,
    plan: &Plan,
    measured: bool,
    key: &str,
    legs: &[(u64, u64, i64)],
) -> (Answer, Duration) {
    let started = Instant::now();
    let request = pb::PostRequest {
        idempotency_key: key.to_owned(),
        legs: legs
            .iter()
            .map(|&(from, to, amount)| pb::Leg {
                from_account_id: from,
                to_account_id: to,
                amount,
                currency: "USD".into(),
                description: String::new(),
            })
            .collect(),
        description: String::new(),
        ..Default::default()
    };
    let entries = legs
        .iter()
        .flat_map(|&(from, to, amount)| [(from, -amount), (to, amount)])
        .collect();
    let answer = client.post(request).await;
    if let Ok(reply) = &answer {
        plan.replied(measured, reply.get_ref().entries.iter().map(|e| e.entry_id));
    }
    (
        answer
            .map(|_| Some((key.to_owned(), entries)))
            .map_err(|s| s.code()),
        started.elapsed(),
    )
}

async fn hold_then_capture(
    mut client: LedgerClient<Channel>,
    plan: &Plan,
    measured: bool,
    key: &str,
    account: u64,
    amount: i64,
) -> Vec<(Answer, Duration)> {
    let started = Instant::now();
    let place = pb::PlaceHoldRequest {
        idempotency_key: format!("{key}-hold"),
        account_id: account,
        amount,
        currency: "USD".into(),
        description: String::new(),
        ttl: Some(prost_types::Duration {
            seconds: 600,
            nanos: 0,
        }),
        ..Default::default()
    };
    let held = client.place_hold(place).await;
    let placed = (
        held.as_ref().map(|_| None).map_err(tonic::Status::code),
        started.elapsed(),
    );
    let Ok(Some(reserved)) = held.map(|r| r.into_inner().hold) else {
        return vec![placed];
    };
    let started = Instant::now();
    let capture = pb::CaptureHoldRequest {
        idempotency_key: format!("{key}-capture"),
        hold_id: reserved.hold_id,
        amount,
        description: String::new(),
        ..Default::default()
    };
    let captured = client.capture_hold(capture).await;
    if let Ok(reply) = &captured {
        plan.replied(measured, reply.get_ref().entry.iter().map(|e| e.entry_id));
    }
    let captured = captured
        .map(|_| Some((format!("{key}-capture"), vec![(account, -amount)])))
        .map_err(|s| s.code());
    vec![placed, (captured, started.elapsed())]
}

/// The numbers of a run.
struct Report {
    scenario: Scenario,
    concurrency: u64,
    accounts: u64,
    seconds: f64,
    calls: u64,
    per_second: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    errors: BTreeMap<String, u64>,
    watchers: u64,
    /// With watchers: the reply-to-arrival lag.
    lag: Option<Lag>,
    /// CPU time per measured call of each process sampled, in ms, over the
    /// measured calls (`--cpu-of`, and the bench itself).
    cpu_ms_per_call: Vec<(String, f64)>,
    /// With `--status`: the database's counters that moved, per measured call.
    status_per_call: Vec<(String, f64)>,
}

/// Reply to arrival in watcher 0, over the entries of the measured calls.
struct Lag {
    entries: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl Report {
    #[expect(
        clippy::cast_precision_loss,
        reason = "counts and microseconds far below 2^52"
    )]
    fn new(
        args: &BenchArgs,
        tally: &Tally,
        follow: Option<&Follow>,
        cpu: Vec<(String, Duration)>,
        counters: &BTreeMap<String, u64>,
    ) -> Self {
        let ms = |q: f64| tally.latency.value_at_quantile(q) as f64 / 1000.0;
        let lag = follow.map(|f| {
            let h = f
                .lag
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            Lag {
                entries: f.matched.load(Ordering::Relaxed),
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
                max_ms: h.max() as f64 / 1000.0,
            }
        });
        let seconds = args.duration.as_secs_f64();
        Self {
            scenario: args.scenario,
            concurrency: args.concurrency,
            accounts: args.accounts,
            seconds,
            calls: tally.calls,
            per_second: tally.calls as f64 / seconds,
            p50_ms: ms(0.5),
            p95_ms: ms(0.95),
            p99_ms: ms(0.99),
            max_ms: tally.latency.max() as f64 / 1000.0,
            errors: tally.errors.clone(),
            watchers: args.watchers,
            lag,
            cpu_ms_per_call: cpu
                .into_iter()
                .map(|(name, spent)| {
                    (
                        name,
                        spent.as_secs_f64() * 1000.0 / tally.calls.max(1) as f64,
                    )
                })
                .collect(),
            status_per_call: counters
                .iter()
                .map(|(name, n)| (name.clone(), *n as f64 / tally.calls.max(1) as f64))
                .collect(),
        }
    }

    /// The report as one JSON object, for the scripts that compare runs.
    fn json(&self) -> String {
        let per_call = |pairs: &[(String, f64)]| -> serde_json::Map<String, serde_json::Value> {
            pairs
                .iter()
                .map(|(name, n)| (name.clone(), (*n).into()))
                .collect()
        };
        let mut report = serde_json::json!({
            "scenario": format!("{:?}", self.scenario),
            "concurrency": self.concurrency,
            "accounts": self.accounts,
            "seconds": self.seconds,
            "calls": self.calls,
            "calls_per_second": self.per_second,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "errors": self.errors,
            "watchers": self.watchers,
            "cpu_ms_per_call": per_call(&self.cpu_ms_per_call),
            "status_per_call": per_call(&self.status_per_call),
        });
        if let (Some(lag), Some(fields)) = (&self.lag, report.as_object_mut()) {
            fields.insert("lag_entries".into(), lag.entries.into());
            fields.insert("lag_p50_ms".into(), lag.p50_ms.into());
            fields.insert("lag_p99_ms".into(), lag.p99_ms.into());
            fields.insert("lag_max_ms".into(), lag.max_ms.into());
        }
        report.to_string()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:?}: {} calls in {:.1} s at concurrency {} over {} account(s): {:.0} calls/s",
            self.scenario,
            self.calls,
            self.seconds,
            self.concurrency,
            self.accounts,
            self.per_second
        )?;
        writeln!(
            f,
            "latency ms: p50 {:.2}  p95 {:.2}  p99 {:.2}  max {:.2}",
            self.p50_ms, self.p95_ms, self.p99_ms, self.max_ms
        )?;
        write!(f, "errors: {:?}", self.errors)?;
        let cpu: Vec<String> = self
            .cpu_ms_per_call
            .iter()
            .map(|(name, ms)| format!("{name} {ms:.3}"))
            .collect();
        write!(
            f,
            "\nCPU ms per call, over the measured calls: {}",
            cpu.join("  ")
        )?;
        if !self.status_per_call.is_empty() {
            let counters: Vec<String> = self
                .status_per_call
                .iter()
                .map(|(name, n)| format!("{name} {n:.2}"))
                .collect();
            write!(f, "\ndatabase counters per call: {}", counters.join("  "))?;
        }
        if let Some(l) = &self.lag {
            write!(
                f,
                "\nstream lag ms (reply to arrival, {} watchers, {} entries): p50 {:.2}  p99 {:.2}  max {:.2}",
                self.watchers, l.entries, l.p50_ms, l.p99_ms, l.max_ms
            )?;
        }
        Ok(())
    }
}

async fn balances(url: &str) -> anyhow::Result<HashMap<u64, i64>> {
    let mut conn = mysql_async::Conn::from_url(url)
        .await
        .context("cannot connect for the check")?;
    let rows: Vec<(u64, i64)> = conn
        .query("SELECT account_id, balance FROM accounts")
        .await?;
    let _ = conn.disconnect().await;
    Ok(rows.into_iter().collect())
}

/// One entry per key that succeeded, and every balance moved by exactly what the
/// successful calls imply.
async fn check(
    url: &str,
    before: &HashMap<u64, i64>,
    plan: &Plan,
    tally: &Tally,
) -> anyhow::Result<()> {
    let mut conn = mysql_async::Conn::from_url(url)
        .await
        .context("cannot connect for the check")?;
    let entries: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM entries WHERE idempotency_key LIKE ?",
            (format!("{}-%", plan.run_id),),
        )
        .await?
        .unwrap_or(0);
    let written: usize = tally.effects.values().map(Vec::len).sum();
    let expected = u64::try_from(written + plan.replayable.len())?;
    anyhow::ensure!(
        entries == expected,
        "the journal holds {entries} entries of this run, the successful calls imply {expected}"
    );
    let mut implied: HashMap<u64, i64> = HashMap::new();
    for (account, delta) in tally.effects.values().flatten() {
        *implied.entry(*account).or_default() += delta;
    }
    let _ = conn.disconnect().await;
    let after = balances(url).await?;
    for (account, was) in before {
        let moved = after.get(account).copied().unwrap_or(*was) - was;
        let expected = implied.get(account).copied().unwrap_or(0);
        anyhow::ensure!(
            moved == expected,
            "account {account} moved {moved}, the calls imply {expected}"
        );
    }
    Ok(())
}
