//! Service instances on random ports, in the test process.

use std::net::SocketAddr;
use std::time::Duration;

use ledger::app::Application;
use ledger::config::{Settings, TlsIdentity};
use ledger::db::{MultiPrimary, PoolSettings};
use ledger::grpc::auth::Tokens;
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::gate::Gate;
use super::server::TestDb;
use super::wire::{charge, with_deadline};

/// Per-instance knobs a test may change. The service's own defaults
/// (`Settings::new`) apply to everything left `None`; the first three are the
/// suite's choices.
#[derive(Clone)]
pub struct Config {
    /// Small: several instances and tests share one database server.
    pub pool_size: u32,
    /// Long, so a test that parks a call on a held row decides when it ends.
    pub lock_wait: Duration,
    pub pool_timeout: Duration,
    pub max_attempts: Option<u32>,
    pub gate: Option<Gate>,
    pub auth: Option<Tokens>,
    pub tls: Option<TlsIdentity>,
    pub metrics_listen: Option<SocketAddr>,
    pub max_message_bytes: Option<usize>,
    pub max_concurrent_calls: Option<usize>,
    /// Bytes the calls in flight may hold, by their weights.
    pub max_call_memory: Option<usize>,
    /// Client connections served at once.
    pub max_connections: Option<usize>,
    /// The database URL, when not the test database's own (another cluster node,
    /// a proxy).
    pub database_url: Option<String>,
    pub session_init: Option<String>,
    pub multi_primary: Option<MultiPrimary>,
    pub migrate: Option<bool>,
    pub key_retention: Option<Duration>,
    /// Group-commit writers; `None`: `LEDGER_TEST_BATCH_WRITERS` if set, else the
    /// service's default.
    pub batch_writers: Option<usize>,
    /// How long a writer waits for a batch before it serves its other accounts;
    /// `None`: the service's default.
    pub batch_stall: Option<Duration>,
    /// Whether the instance runs a candidate for the change stream's assigner;
    /// `None`: the service's default (on).
    pub stream_assigner: Option<bool>,
    /// Subscribers on loopback are delivered to (the tests' receivers are).
    pub webhook_allow_private: bool,
    /// Serve the console too, on a random loopback port.
    pub console: bool,
    /// What the console's sessions are timed by: a test moves it on past their
    /// idle and absolute ends.
    pub console_clock: ledger::console::Clock,
    /// Mark the console's session cookie `Secure` (`--console-secure-cookie`).
    pub console_secure_cookie: bool,
    /// Names the console answers to besides its own (`--console-host`).
    pub console_hosts: Vec<ledger::console::HostName>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            pool_size: 8,
            lock_wait: Duration::from_secs(10),
            pool_timeout: Duration::from_secs(10),
            max_attempts: None,
            gate: None,
            auth: None,
            tls: None,
            metrics_listen: None,
            max_message_bytes: None,
            max_concurrent_calls: None,
            max_call_memory: None,
            max_connections: None,
            database_url: None,
            session_init: None,
            multi_primary: None,
            migrate: None,
            key_retention: None,
            batch_writers: None,
            batch_stall: None,
            stream_assigner: None,
            webhook_allow_private: true,
            console: false,
            console_clock: ledger::console::Clock::default(),
            console_secure_cookie: false,
            console_hosts: Vec::new(),
        }
    }
}

impl Config {
    /// The service's settings for `url`, with this config's choices.
    pub fn settings(&self, url: String) -> Settings {
        let mut settings = Settings::new("127.0.0.1:0".parse().unwrap(), url).expect("defaults");
        settings.pool = PoolSettings {
            size: self.pool_size,
            checkout_timeout: self.pool_timeout,
        };
        settings.limits.lock_wait = self.lock_wait;
        if let Some(attempts) = self.max_attempts {
            settings.limits.max_attempts = attempts;
        }
        settings.session.init.clone_from(&self.session_init);
        if let Some(mode) = self.multi_primary {
            settings.session.multi_primary = mode;
        }
        settings.auth.clone_from(&self.auth);
        settings.tls.clone_from(&self.tls);
        settings.metrics_listen = self.metrics_listen;
        if let Some(bytes) = self.max_message_bytes {
            settings.max_message_bytes = bytes;
        }
        if let Some(calls) = self.max_concurrent_calls {
            settings.max_concurrent_calls = calls;
        }
        if let Some(bytes) = self.max_call_memory {
            settings.max_call_memory = bytes;
        }
        if let Some(connections) = self.max_connections {
            settings.max_connections = connections;
        }
        if let Some(migrate) = self.migrate {
            settings.migrate = migrate;
        }
        settings.key_retention = self.key_retention;
        let from_env = std::env::var("LEDGER_TEST_BATCH_WRITERS")
            .ok()
            .map(|v| v.parse().expect("LEDGER_TEST_BATCH_WRITERS is a number"));
        if let Some(writers) = self.batch_writers.or(from_env) {
            settings.limits.batch_writers = writers;
        }
        if let Some(assigner) = self.stream_assigner {
            settings.stream_assigner = assigner;
        }
        settings.webhook_allow_private = self.webhook_allow_private;
        if let Some(stall) = self.batch_stall {
            settings.limits.batch_stall = stall;
        }
        if self.console {
            settings.console = Some(ledger::console::ConsoleSettings {
                clock: self.console_clock.clone(),
                secure_cookie: self.console_secure_cookie,
                hosts: self.console_hosts.clone(),
                ..ledger::console::ConsoleSettings::new("127.0.0.1:0".parse().unwrap())
            });
        }
        settings
    }
}

/// Service logs for a test run with `RUST_LOG` set (and `--nocapture`).
fn init_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if std::env::var_os("RUST_LOG").is_some() {
        ONCE.call_once(|| {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        });
    }
}

/// A running service instance on a random port.
pub struct TestApp {
    pub addr: SocketAddr,
    /// The console's address, when it is on.
    pub console: Option<SocketAddr>,
    pub persistence: ledger::db::Persistence,
    pub admission: ledger::grpc::Admission,
    stop: CancellationToken,
}

impl TestApp {
    pub async fn spawn(db: &TestDb) -> Self {
        Self::spawn_with(db, Config::default()).await
    }

    pub async fn spawn_with(db: &TestDb, config: Config) -> Self {
        init_logs();
        let url = config
            .database_url
            .clone()
            .unwrap_or_else(|| db.url.clone());
        let settings = config.settings(url);
        let hook = config.gate.map(Gate::hook);
        let app = Application::build(settings, hook)
            .await
            .expect("app builds");
        let addr = app.local_addr();
        let console = app.console_addr();
        let persistence = app.persistence().clone();
        let admission = app.admission().clone();
        let stop = CancellationToken::new();
        tokio::spawn(app.run_until(stop.clone().cancelled_owned()));
        Self {
            addr,
            console,
            persistence,
            admission,
            stop,
        }
    }

    /// Polls until `n` keyed calls wait for a group-commit writer; fails after 30 s.
    pub async fn until_queued(&self, n: usize) {
        until_counted(n, "reached the batch queue", || {
            self.persistence.waiting_calls()
        })
        .await;
    }

    /// Polls until `n` calls wait for room in the memory budget; fails after 30 s.
    pub async fn until_waiting_for_room(&self, n: usize) {
        until_counted(n, "came to wait for room", || self.admission.waiting()).await;
    }

    /// Polls until `n` checkouts wait for a connection of the keyed pool (of
    /// the first node); fails after 30 s. The pool counts a checkout its caller
    /// gave up on as waiting still, so the count holds until the first does.
    pub async fn until_waiting_for_connection(&self, n: usize) {
        until_counted(n, "came to wait for a connection", || {
            let pool = self.persistence.keyed().first().pool().state();
            usize::try_from(pool.statistics.pending_gets()).unwrap()
        })
        .await;
    }

    /// Makes a one-writer instance's writer busy: a charge ("busy") on a fresh
    /// account that a connection to `db` holds locked, so the calls behind it queue
    /// and form the next batch. Rolling back (or dropping) the holder frees it.
    /// Calls on other accounts queue behind it only on an instance whose writer
    /// waits out a stalled batch (`batch_stall` longer than the test).
    pub async fn busy_writer(&self, db: &TestDb) -> mysql_async::Conn {
        let blocker = self.funded_account("USD", 10).await;
        self.busy_writer_on(db, blocker).await
    }

    /// Stalls a batch on `account`: a charge of 1 ("busy") on it, which a
    /// connection to `db` holds locked, so the calls on `account` behind it are
    /// held back by their writer and form its next batch. Rolling back (or
    /// dropping) the holder frees it.
    pub async fn busy_writer_on(&self, db: &TestDb, account: u64) -> mysql_async::Conn {
        self.busy_writer_under(db, account, "busy").await
    }

    /// [`TestApp::busy_writer_on`], the charge under `key` (a test that stalls
    /// its writer more than once).
    pub async fn busy_writer_under(
        &self,
        db: &TestDb,
        account: u64,
        key: &str,
    ) -> mysql_async::Conn {
        let holder = db.lock_account(account).await;
        let mut client = self.client().await;
        let charge = super::charge(key, account, 1);
        tokio::spawn(async move { client.charge(charge).await });
        db.until_waiting_on("accounts", 1).await;
        holder
    }

    pub async fn client(&self) -> LedgerClient<Channel> {
        LedgerClient::new(self.channel().await)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connects")
    }

    /// Opens an account and credits it, returning its id.
    pub async fn funded_account(&self, currency: &str, balance: i64) -> u64 {
        let tag = format!("{:x}", rand::random::<u64>());
        open_funded(&mut self.client().await, &tag, currency, balance).await
    }
}

/// Opens an account (key `open-<tag>`) and credits it `balance` (key
/// `fund-<tag>`; none for 0), returning its id.
pub async fn open_funded(
    client: &mut LedgerClient<Channel>,
    tag: &str,
    currency: &str,
    balance: i64,
) -> u64 {
    let account = client
        .open_account(pb::OpenAccountRequest {
            idempotency_key: format!("open-{tag}"),
            currency: currency.into(),
            ..Default::default()
        })
        .await
        .expect("open account")
        .into_inner()
        .account
        .expect("account")
        .account_id;
    if balance > 0 {
        client
            .credit(pb::CreditRequest {
                idempotency_key: format!("fund-{tag}"),
                account_id: account,
                amount: balance,
                currency: currency.into(),
                description: "funding".into(),
                ..Default::default()
            })
            .await
            .expect("credit");
    }
    account
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Polls until `n` calls wait behind a key held in flight: parked on its row in
/// the database, or queued behind it for a group-commit writer of one of `apps`;
/// fails after 30 s.
pub async fn until_waiting(db: &TestDb, apps: &[&TestApp], n: u64) {
    for _ in 0..1500 {
        let queued: usize = apps.iter().map(|a| a.persistence.waiting_calls()).sum();
        let waiting = db.parked_probes().await + u64::try_from(queued).unwrap();
        if waiting >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("fewer than {n} calls came to wait behind the key in flight");
}

/// Charges in flight on an account whose row is held: each holds its place
/// under the instance's limits until the row is let go.
pub type Parked =
    Vec<tokio::task::JoinHandle<Result<tonic::Response<pb::ChargeReply>, tonic::Status>>>;

/// Parks `n` charges of 1 on `account` (keys `p0`, `p1`, ...) behind its row,
/// which the returned connection holds in a transaction; returns once all are
/// in flight and one waits on the row.
pub async fn park_charges(
    app: &TestApp,
    db: &TestDb,
    account: u64,
    n: usize,
) -> (mysql_async::Conn, Parked) {
    let holder = db.lock_account(account).await;
    let channel = app.channel().await;
    let parked = (0..n)
        .map(|i| {
            let channel = channel.clone();
            tokio::spawn(async move {
                LedgerClient::new(channel)
                    .charge(charge(&format!("p{i}"), account, 1))
                    .await
            })
        })
        .collect();
    until_in_flight(db, &[app], "p_", u64::try_from(n).unwrap()).await;
    db.until_waiting_on("accounts", 1).await;
    (holder, parked)
}

/// Polls `count` until it reaches `n`; fails after 30 s, saying how many calls
/// `did` what was awaited.
async fn until_counted(n: usize, did: &str, count: impl Fn() -> usize) {
    for _ in 0..1500 {
        if count() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("only {} of {n} calls {did}", count());
}

/// A charge ("late", 1 on `account`) with a deadline of 2 s, sent while the
/// memory budget is full: its refusal once the deadline passes.
pub async fn charge_refused_for_room(app: &TestApp, account: u64) -> tonic::Status {
    app.client()
        .await
        .charge(with_deadline(
            charge("late", account, 1),
            Duration::from_secs(2),
        ))
        .await
        .expect_err("no room came before its deadline")
}

/// Polls until `n` calls with keys matching `pattern` (SQL LIKE) are in flight:
/// claimed in the database (one transaction each, or batched), or queued for a
/// group-commit writer of one of `apps`; fails after 30 s.
pub async fn until_in_flight(db: &TestDb, apps: &[&TestApp], pattern: &str, n: u64) {
    for _ in 0..1500 {
        let queued: usize = apps.iter().map(|a| a.persistence.waiting_calls()).sum();
        if db.claimed(pattern).await + u64::try_from(queued).unwrap() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("fewer than {n} calls like {pattern} came to be in flight");
}
