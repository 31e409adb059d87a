//! Test harness: a fresh database per test, service instances on random ports, a
//! gate that holds a transaction open before COMMIT, and direct SQL for asserting
//! on what was stored.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use futures::FutureExt as _;
use ledger::app::{Application, Settings, TlsIdentity};
use ledger::auth::Tokens;
use ledger::db::{BeforeCommit, BeforeCommitEvent, Limits, MultiPrimary, PoolSettings, Session};
use ledger::managed::{ManagedOptions, ManagedServer};
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

/// The MySQL server the tests run against, as a URL without a database name:
/// `LEDGER_TEST_DATABASE_URL` if set, else one private server for the whole run.
pub fn server_url() -> String {
    match std::env::var("LEDGER_TEST_DATABASE_URL") {
        Ok(url) => url.trim_end_matches('/').to_owned(),
        Err(_) => shared_server_url(),
    }
}

/// Starts the run's private server once, from a thread that lives as long as the
/// test process: the server was started with `--pdeathsig`, so the kernel stops
/// it when that thread ends, whether the run passed, failed or was killed.
fn shared_server_url() -> String {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    let url = tokio::task::block_in_place(|| {
        URL.get_or_init(|| {
            remove_stale_server_dirs();
            let dir = std::env::temp_dir().join(format!("ledger-test-{}", std::process::id()));
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("test-mysqld".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    match rt.block_on(ManagedServer::start(ManagedOptions::in_dir(dir))) {
                        Ok(server) => {
                            let _ = tx.send(Ok(server.server_url()));
                            let _keep_running = server;
                            loop {
                                std::thread::park();
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                })
                .expect("spawn the server thread");
            rx.recv().unwrap_or_else(|e| Err(e.to_string()))
        })
        .clone()
    });
    url.unwrap_or_else(|e| panic!("cannot start the test database server: {e}"))
}

/// Data directories of earlier runs whose process is gone.
fn remove_stale_server_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("ledger-test-") else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A database of its own for one test, dropped when the test ends (also when it
/// fails).
pub struct TestDb {
    pub name: String,
    pub url: String,
    server: String,
    /// Run on every assertion connection (e.g. causal reads on a cluster).
    session_init: Option<String>,
}

impl TestDb {
    pub fn new() -> Self {
        Self::on(server_url())
    }

    /// A database on a given server (a URL without a database name).
    pub fn on(server: String) -> Self {
        let name = format!("ledger_test_{:016x}", rand::random::<u64>());
        let url = format!("{server}/{name}");
        Self {
            name,
            url,
            server,
            session_init: None,
        }
    }

    /// A database on a cluster: created through `server`, with assertions that
    /// wait for every write the cluster has committed (`wsrep_sync_wait`).
    pub fn on_cluster(server: String) -> Self {
        let mut db = Self::on(server);
        db.session_init = Some("SET SESSION wsrep_sync_wait = 15".into());
        db
    }

    /// This database's URL on another server (another node of a cluster).
    pub fn url_on(&self, server: &str) -> String {
        format!("{}/{}", server.trim_end_matches('/'), self.name)
    }

    /// A plain connection for assertions (not the service's pool).
    pub async fn sql(&self) -> mysql_async::Conn {
        let mut conn = mysql_async::Conn::from_url(&self.url)
            .await
            .expect("test SQL connection");
        if let Some(init) = &self.session_init {
            conn.query_drop(init).await.expect("session init");
        }
        conn
    }

    /// A connection holding the account's row lock in an open transaction, until
    /// it sends ROLLBACK (or is dropped).
    pub async fn lock_account(&self, account_id: u64) -> mysql_async::Conn {
        let mut holder = self.sql().await;
        holder.query_drop("BEGIN").await.unwrap();
        holder
            .exec_drop(
                "SELECT balance FROM accounts WHERE account_id = ? FOR UPDATE",
                (account_id,),
            )
            .await
            .unwrap();
        holder
    }

    pub async fn balance(&self, account_id: u64) -> i64 {
        self.sql()
            .await
            .exec_first(
                "SELECT balance FROM accounts WHERE account_id = ?",
                (account_id,),
            )
            .await
            .unwrap()
            .expect("account exists")
    }

    pub async fn count(&self, query: &str) -> u64 {
        self.sql()
            .await
            .query_first(query)
            .await
            .unwrap()
            .unwrap_or(0)
    }

    pub async fn entries_for_key(&self, key: &str) -> u64 {
        self.sql()
            .await
            .exec_first(
                "SELECT COUNT(*) FROM entries WHERE idempotency_key = ?",
                (key.as_bytes(),),
            )
            .await
            .unwrap()
            .unwrap_or(0)
    }

    pub async fn key_rows(&self, key: &str) -> u64 {
        self.sql()
            .await
            .exec_first(
                "SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key = ?",
                (key.as_bytes(),),
            )
            .await
            .unwrap()
            .unwrap_or(0)
    }

    /// The outcome bytes stored under a key.
    pub async fn stored_outcome(&self, key: &str) -> Vec<u8> {
        self.sql()
            .await
            .exec_first(
                "SELECT outcome FROM idempotency_keys WHERE idempotency_key = ?",
                (key.as_bytes(),),
            )
            .await
            .unwrap()
            .expect("key row")
    }

    /// Polls until no transaction is open on this test's database; fails after
    /// 30 s. MariaDB refreshes its INNODB_TRX snapshot only when it was not read
    /// for 100 ms, so the polls are spaced wider than that.
    pub async fn until_no_open_transactions(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let open = self.open_transactions().await;
            if open == 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{open} transactions stay open"
            );
        }
    }

    /// Transactions open on this test's database. MySQL's INNODB_TRX cannot be
    /// read while a statement with binary parameters runs (it fails to convert the
    /// statement text), so there the transactions holding locks on this
    /// database's tables are counted: every transaction of the service takes one.
    pub async fn open_transactions(&self) -> u64 {
        let mut conn = self.sql().await;
        let query = if is_mariadb(&mut conn).await {
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id IN \
             (SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE())"
        } else {
            "SELECT COUNT(DISTINCT ENGINE_TRANSACTION_ID) FROM performance_schema.data_locks \
             WHERE OBJECT_SCHEMA = DATABASE()"
        };
        conn.query_first(query).await.unwrap().unwrap_or(0)
    }

    /// Statements on this test's database waiting for a row lock of `table`
    /// (`idempotency_keys`: probes; `accounts`: account locks). MySQL lists every
    /// waiting lock in `performance_schema.data_locks`. MariaDB has no such table,
    /// and its INNODB_TRX snapshot is refreshed only when it was not read for 100
    /// ms, which a poll defeats; so there a statement counts while it is still
    /// executing: while the test holds the row it can only be waiting.
    async fn waiting_on_with(conn: &mut mysql_async::Conn, table: &str) -> u64 {
        if is_mariadb(conn).await {
            let pattern = match table {
                "idempotency_keys" => "INSERT INTO idempotency_keys%",
                "accounts" => "%FROM `accounts`%FOR UPDATE%",
                other => panic!("no statement pattern for {other}"),
            };
            conn.exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND INFO LIKE ?",
                (pattern,),
            )
            .await
            .unwrap()
            .unwrap_or(0)
        } else {
            conn.exec_first(
                "SELECT COUNT(*) FROM performance_schema.data_locks \
                 WHERE OBJECT_SCHEMA = DATABASE() AND OBJECT_NAME = ? AND LOCK_STATUS = 'WAITING'",
                (table,),
            )
            .await
            .unwrap()
            .unwrap_or(0)
        }
    }

    /// Probes waiting for a key row held by another transaction.
    pub async fn parked_probes(&self) -> u64 {
        Self::waiting_on_with(&mut self.sql().await, "idempotency_keys").await
    }

    /// Polls until `n` probes are parked; fails after 30 s.
    pub async fn until_parked(&self, n: u64) {
        self.until_waiting_on("idempotency_keys", n).await;
    }

    /// Polls until `n` statements wait for a row lock of `table`; fails after 30 s.
    pub async fn until_waiting_on(&self, table: &str, n: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut conn = self.sql().await;
        loop {
            let waiting = Self::waiting_on_with(&mut conn, table).await;
            if waiting >= n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {waiting} of {n} statements reached the lock wait on {table}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let url = self.server.clone();
        let name = self.name.clone();
        // Drop runs outside any runtime's async context, possibly while unwinding.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let Ok(mut conn) = mysql_async::Conn::from_url(&url).await else {
                    return;
                };
                // A failed test can leave a transaction open (a gate never
                // released); end its connections so the drop cannot wait on it.
                let query = if is_mariadb(&mut conn).await {
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?"
                } else {
                    "SELECT PROCESSLIST_ID FROM performance_schema.threads \
                     WHERE PROCESSLIST_DB = ? AND PROCESSLIST_ID IS NOT NULL"
                };
                let ids: Vec<u64> = conn.exec(query, (&name,)).await.unwrap_or_default();
                for id in ids {
                    let _ = conn.query_drop(format!("KILL {id}")).await;
                }
                let _ = conn.query_drop("SET SESSION lock_wait_timeout = 10").await;
                let _ = conn
                    .query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
                    .await;
                let _ = conn.disconnect().await;
            });
        })
        .join();
    }
}

async fn is_mariadb(conn: &mut mysql_async::Conn) -> bool {
    let version: String = conn.query_first("SELECT VERSION()").await.unwrap().unwrap();
    version.contains("MariaDB")
}

/// Per-instance knobs a test may change.
#[derive(Clone)]
pub struct Config {
    pub pool_size: u32,
    pub lock_wait: Duration,
    pub pool_timeout: Duration,
    pub max_attempts: u32,
    pub gate: Option<Gate>,
    pub auth: Option<Tokens>,
    pub tls: Option<TlsIdentity>,
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub max_message_bytes: usize,
    /// The database URL, when not the test database's own (another cluster node).
    pub database_url: Option<String>,
    pub session_init: Option<String>,
    pub multi_primary: MultiPrimary,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            pool_size: 8,
            lock_wait: Duration::from_secs(10),
            pool_timeout: Duration::from_secs(10),
            max_attempts: 10,
            gate: None,
            auth: None,
            tls: None,
            metrics_listen: None,
            max_message_bytes: 65_536,
            database_url: None,
            session_init: None,
            multi_primary: MultiPrimary::Auto,
        }
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
        let mut settings = Settings::new("127.0.0.1:0".parse().unwrap(), url);
        settings.session = Session {
            init: config.session_init.clone(),
            multi_primary: config.multi_primary,
        };
        settings.pool = PoolSettings {
            size: config.pool_size,
            checkout_timeout: config.pool_timeout,
        };
        settings.limits = Limits {
            lock_wait: config.lock_wait,
            max_attempts: config.max_attempts,
        };
        settings.auth = config.auth;
        settings.tls = config.tls;
        settings.metrics_listen = config.metrics_listen;
        settings.max_message_bytes = config.max_message_bytes;
        let hook = config.gate.map(Gate::hook);
        let app = Application::build(settings, hook)
            .await
            .expect("app builds");
        let addr = app.local_addr();
        let stop = CancellationToken::new();
        tokio::spawn(app.run_until(stop.clone().cancelled_owned()));
        Self { addr, stop }
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

pub fn charge(key: &str, account_id: u64, amount: i64) -> pb::ChargeRequest {
    pb::ChargeRequest {
        idempotency_key: key.into(),
        account_id,
        amount,
        currency: "USD".into(),
        description: String::new(),
    }
}

/// Every key in `charged` (key -> amount) debited the account exactly once, and
/// nothing else did.
pub async fn assert_each_key_charged_once(
    db: &TestDb,
    account: u64,
    start: i64,
    charged: &std::collections::BTreeMap<String, i64>,
) {
    let entries = db
        .count("SELECT COUNT(*) FROM entries WHERE kind = 1")
        .await;
    assert_eq!(
        entries,
        u64::try_from(charged.len()).unwrap(),
        "one entry per key"
    );
    for key in charged.keys() {
        assert_eq!(db.entries_for_key(key).await, 1, "{key}");
    }
    let total: i64 = charged.values().sum();
    assert_eq!(db.balance(account).await, start - total);
}

/// Whether a response or status carries `idempotent-replayed: true`.
pub fn replayed(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// A unary call whose reply comes back as the raw bytes on the wire, to compare
/// replies byte for byte.
pub async fn raw_call(
    channel: Channel,
    method: &'static str,
    request: impl prost::Message,
) -> Result<(tonic::metadata::MetadataMap, Bytes), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = format!("/ledger.v1.Ledger/{method}").parse().unwrap();
    let response = grpc
        .unary(
            tonic::Request::new(Bytes::from(request.encode_to_vec())),
            path,
            RawCodec,
        )
        .await?;
    let (metadata, body, _) = response.into_parts();
    Ok((metadata, body))
}

#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Holds the first new-key transaction for `key` open before COMMIT until
/// released, or until its call is abandoned. Later transactions pass straight
/// through.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    key: String,
    armed: AtomicBool,
    reached: watch::Sender<bool>,
    released: watch::Sender<bool>,
}

impl Gate {
    pub fn new(key: &str) -> Self {
        Self {
            inner: Arc::new(GateInner {
                key: key.to_owned(),
                armed: AtomicBool::new(true),
                reached: watch::channel(false).0,
                released: watch::channel(false).0,
            }),
        }
    }

    /// Waits until the held transaction is at the gate (past its probe and work).
    pub async fn reached(&self) {
        let mut rx = self.inner.reached.subscribe();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|r| *r))
            .await
            .expect("a transaction reaches the gate")
            .unwrap();
    }

    pub fn release(&self) {
        self.inner.released.send_replace(true);
    }

    fn hook(self) -> BeforeCommit {
        Arc::new(move |event: BeforeCommitEvent| {
            let gate = self.clone();
            async move {
                if event.key.key.as_str() != gate.inner.key
                    || !gate.inner.armed.swap(false, Ordering::SeqCst)
                {
                    return;
                }
                gate.inner.reached.send_replace(true);
                let mut released = gate.inner.released.subscribe();
                tokio::select! {
                    _ = released.wait_for(|r| *r) => {}
                    () = event.call.abandoned() => {}
                }
            }
            .boxed()
        })
    }
}

/// A Charge of 10 (key `key`) on a fresh account holding 100, held before its
/// COMMIT by a gate until released, on an instance with the given lock wait.
pub struct HeldCharge {
    pub app: TestApp,
    pub gate: Gate,
    pub account: u64,
    pub original: tokio::task::JoinHandle<Result<tonic::Response<pb::ChargeReply>, tonic::Status>>,
}

impl HeldCharge {
    /// Returns once the charge is at the gate, past its probe and its debit.
    pub async fn start(db: &TestDb, key: &str, lock_wait: Duration) -> Self {
        let gate = Gate::new(key);
        let config = Config {
            lock_wait,
            gate: Some(gate.clone()),
            ..Config::default()
        };
        let app = TestApp::spawn_with(db, config).await;
        let account = app.funded_account("USD", 100).await;
        let mut client = app.client().await;
        let request = charge(key, account, 10);
        let original = tokio::spawn(async move { client.charge(request).await });
        gate.reached().await;
        Self {
            app,
            gate,
            account,
            original,
        }
    }
}

/// The `ledger` binary, run as a separate process.
pub struct LedgerProcess {
    child: tokio::process::Child,
    pub addr: SocketAddr,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl LedgerProcess {
    /// `ledger serve` on `db`, on a free port; returns once it reports SERVING.
    pub async fn serve(db: &TestDb, extra: &[&str]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::serve_on(db, addr, extra).await
    }

    /// `ledger serve` on `db` at `addr`. It is killed when the test's thread ends
    /// (`setpriv --pdeathsig`), so no server outlives a failed test.
    pub async fn serve_on(db: &TestDb, addr: SocketAddr, extra: &[&str]) -> Self {
        Self::serve_urls(&db.url, addr, extra).await
    }

    /// `ledger serve --database-url <urls>` (comma-separated) at `addr`.
    pub async fn serve_urls(urls: &str, addr: SocketAddr, extra: &[&str]) -> Self {
        let child = tokio::process::Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", env!("CARGO_BIN_EXE_ledger")])
            .args([
                "serve",
                "--database-url",
                urls,
                "--listen",
                &addr.to_string(),
            ])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .kill_on_drop(true)
            .spawn()
            .expect("ledger starts");
        let process = Self { child, addr };
        process
            .until_health(tonic_health::pb::health_check_response::ServingStatus::Serving)
            .await;
        process
    }

    pub fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect_lazy()
    }

    pub async fn until_health(&self, status: ServingStatus) {
        until_health(self.addr, status).await;
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = i32::try_from(self.child.id().expect("running")).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    }

    pub async fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("ledger exits in time")
            .unwrap()
    }
}

/// Runs a one-shot `ledger` command with logs off; returns its exit code and
/// stderr.
pub async fn run_ledger(args: &[&str]) -> (Option<i32>, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("LEDGER_DATABASE_URL")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("ledger exits in time")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Polls the health of `ledger.v1.Ledger` at `addr` until it is `status`; fails
/// after 30 s.
pub async fn until_health(addr: SocketAddr, status: ServingStatus) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let request = tonic_health::pb::HealthCheckRequest {
            service: "ledger.v1.Ledger".into(),
        };
        let answer = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(request)
            .await;
        if answer.is_ok_and(|a| a.into_inner().status() == status) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "health never became {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A request that carries a deadline (`grpc-timeout`).
pub fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline);
    request
}
