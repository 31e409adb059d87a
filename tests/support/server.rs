//! The database the tests run against: one private server per test run (or
//! `LEDGER_TEST_DATABASE_URL`), a fresh database per test, direct SQL for
//! asserting on what was stored, and [`until`], how the suites wait for what
//! they can observe.

use std::sync::OnceLock;
use std::time::Duration;

use ledger_devtools::managed::{ManagedOptions, ManagedServer};
use mysql_async::prelude::Queryable as _;

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

/// A private server of the test's own (one it may stop and restart), in a
/// temporary directory removed when the returned guard is dropped: keep both.
pub async fn private_server(prefix: &str) -> (tempfile::TempDir, ManagedServer) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let server = ManagedServer::start(ManagedOptions::in_dir(dir.path()))
        .await
        .unwrap();
    (dir, server)
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

/// How often [`until`] looks, and how long it waits at most: long beside
/// anything a test waits for on a loaded machine.
const POLL: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `met` until it holds; fails after 30 s, naming `what` never came. The
/// suites wait for conditions, never for a time taken to be enough.
pub async fn until(what: &str, met: impl AsyncFnMut() -> bool) {
    until_within(PATIENCE, what, met).await;
}

/// [`until`] with its own patience, for a condition that waits on something
/// slower than this service, such as a cluster noticing that a node died.
pub async fn until_within(patience: Duration, what: &str, mut met: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + patience;
    while !met().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {patience:?}: {what}"
        );
        tokio::time::sleep(POLL).await;
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

    /// The server's URL, without a database name.
    pub fn server(&self) -> &str {
        &self.server
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
    /// wait for every write the cluster has committed (`causal_reads`, the
    /// engine's statement for it).
    pub fn on_cluster(server: String, causal_reads: &str) -> Self {
        let mut db = Self::on(server);
        db.session_init = Some(causal_reads.to_owned());
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

    /// A connection holding the row locks of `statement` (a locking read, an
    /// insert) in an open transaction, until it sends ROLLBACK (or is dropped).
    pub async fn hold(&self, statement: &str) -> mysql_async::Conn {
        let mut holder = self.sql().await;
        holder.query_drop("BEGIN").await.unwrap();
        holder.query_drop(statement).await.unwrap();
        holder
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

    /// The instants at which keys were claimed: one per probe statement, so keys
    /// claimed by one batch share theirs.
    pub async fn claimed_at(&self, keys: &[&str]) -> Vec<String> {
        let mut conn = self.sql().await;
        let mut at = Vec::new();
        for key in keys {
            let row: Option<String> = conn
                .exec_first(
                    "SELECT CAST(created_at AS CHAR) FROM idempotency_keys WHERE idempotency_key = ?",
                    (key,),
                )
                .await
                .unwrap();
            at.push(row.expect("a key row"));
        }
        at
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

    /// Polls until retention purged the key's row; fails after 30 s.
    pub async fn until_purged(&self, key: &str) {
        until(&format!("retention purges the row of {key}"), async || {
            self.key_rows(key).await == 0
        })
        .await;
    }

    /// Polls until the hold's expiry has passed by the database's clock, the
    /// one the service compares expiries with; fails after 30 s.
    pub async fn until_hold_expired(&self, hold_id: u64) {
        self.until_expired("hold_id", hold_id).await;
    }

    /// [`Self::until_hold_expired`] for every hold placed on the account.
    pub async fn until_holds_expired_on(&self, account_id: u64) {
        self.until_expired("account_id", account_id).await;
    }

    async fn until_expired(&self, column: &str, id: u64) {
        let unexpired = format!(
            "SELECT COUNT(*) FROM holds WHERE {column} = ? AND expires_at > UTC_TIMESTAMP(6)"
        );
        let mut conn = self.sql().await;
        let what = format!("the holds of {column} {id} expire");
        until(&what, async || {
            let left: Option<u64> = conn.exec_first(&unexpired, (id,)).await.unwrap();
            left == Some(0)
        })
        .await;
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
    /// (`idempotency_keys`: probes; `key lookups`: LookupKey; `key locks`: the
    /// key rows a reversal names; `accounts`: account
    /// locks; `id_blocks`: blocks of ids taken). MySQL lists every
    /// waiting lock in `performance_schema.data_locks`. MariaDB has no such table,
    /// and its INNODB_TRX snapshot is refreshed only when it was not read for 100
    /// ms, which a poll defeats; so there a statement counts while it is still
    /// executing: while the test holds the row it can only be waiting.
    async fn waiting_on_with(conn: &mut mysql_async::Conn, table: &str) -> u64 {
        if is_mariadb(conn).await {
            let pattern = match table {
                "idempotency_keys" => "INSERT INTO idempotency_keys%",
                "key lookups" => "SELECT%FROM idempotency_keys%LOCK IN SHARE MODE%",
                "key locks" => "SELECT%FROM idempotency_keys%FOR UPDATE%",
                "accounts" => "%FROM accounts WHERE account_id IN%FOR UPDATE%",
                "id_blocks" => "UPDATE id_blocks%",
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
            let table = if table == "key lookups" || table == "key locks" {
                "idempotency_keys"
            } else {
                table
            };
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

    /// Statements waiting for a row lock of `table` (as [`Self::until_waiting_on`]
    /// counts them).
    pub async fn waiting_on(&self, table: &str) -> u64 {
        Self::waiting_on_with(&mut self.sql().await, table).await
    }

    /// Probes waiting for a key row held by another transaction.
    pub async fn parked_probes(&self) -> u64 {
        Self::waiting_on_with(&mut self.sql().await, "idempotency_keys").await
    }

    /// Polls until `n` probes are parked; fails after 30 s.
    pub async fn until_parked(&self, n: u64) {
        self.until_waiting_on("idempotency_keys", n).await;
    }

    /// Key rows of the keys matching `pattern` (SQL LIKE), committed or not (READ
    /// UNCOMMITTED): calls that claimed their keys.
    pub async fn claimed(&self, pattern: &str) -> u64 {
        let mut conn = self.sql().await;
        conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            .await
            .unwrap();
        conn.exec_first(
            "SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key LIKE ?",
            (pattern,),
        )
        .await
        .unwrap()
        .unwrap_or(0)
    }

    /// The ids of this database's transactions waiting for an account's row.
    pub async fn waiting_on_accounts(&self) -> Vec<u64> {
        let mut conn = self.sql().await;
        let sql = if is_mariadb(&mut conn).await {
            "SELECT t.trx_id FROM information_schema.INNODB_TRX t \
             JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
             WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE() \
             AND p.INFO LIKE '%FROM accounts WHERE account_id IN%FOR UPDATE%'"
        } else {
            "SELECT ENGINE_TRANSACTION_ID FROM performance_schema.data_locks \
             WHERE OBJECT_SCHEMA = DATABASE() AND OBJECT_NAME = 'accounts' \
             AND LOCK_STATUS = 'WAITING'"
        };
        conn.query(sql).await.unwrap()
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
        let session_init = self.session_init.clone();
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
                // On a cluster, the drop waits for the node to apply what other
                // nodes wrote to the database first: a write applied after it
                // would stop a Group Replication member.
                if let Some(init) = &session_init {
                    let _ = conn.query_drop(init).await;
                }
                let _ = conn
                    .query_drop(format!("DROP DATABASE IF EXISTS `{name}`"))
                    .await;
                let _ = conn.disconnect().await;
            });
        })
        .join();
    }
}

/// Whether `conn` is to MariaDB (else MySQL).
pub async fn is_mariadb(conn: &mut mysql_async::Conn) -> bool {
    let version: String = conn.query_first("SELECT VERSION()").await.unwrap().unwrap();
    version.contains("MariaDB")
}

/// `ledger audit`'s checks find nothing wrong in the database at `url`.
pub async fn assert_audit_passes(url: &str) {
    let report = ledger::audit::audit(url).await.unwrap();
    assert!(report.passed(), "{url}: {report}");
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
