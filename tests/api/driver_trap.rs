//! SPEC 3.3: a connection with CLIENT_FOUND_ROWS reports 1 for an unchanged
//! duplicate, so every retry would look new. The service's connections cannot fall
//! into it, and the self-check refuses one that does.

use diesel_async::{
    AsyncConnection as _, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection,
};
use ledger::db::conn::self_check::{SelfCheckError, verify_affected_rows};
use ledger::db::conn::{connection, pool};

use crate::support::{TestApp, TestDb};

/// Affected rows of a new and then a duplicate probe inserting `rows` into a
/// temporary table.
async fn probe_with(conn: &mut AsyncMysqlConnection, rows: &str) -> (usize, usize) {
    conn.batch_execute("CREATE TEMPORARY TABLE trap (k INT PRIMARY KEY, v INT NOT NULL)")
        .await
        .unwrap();
    let sql = format!("INSERT INTO trap VALUES {rows} ON DUPLICATE KEY UPDATE v = v");
    let new = diesel::sql_query(&sql).execute(conn).await.unwrap();
    let duplicate = diesel::sql_query(&sql).execute(conn).await.unwrap();
    conn.batch_execute("DROP TEMPORARY TABLE trap")
        .await
        .unwrap();
    (new, duplicate)
}

async fn probe_twice(conn: &mut AsyncMysqlConnection) -> (usize, usize) {
    probe_with(conn, "(1, 0)").await
}

/// The same probes with the key named twice in one statement, as the service's
/// probes name it: the repeated row adds nothing unless found rows are counted.
async fn probe_doubled_twice(conn: &mut AsyncMysqlConnection) -> (usize, usize) {
    probe_with(conn, "(1, 0), (1, 0)").await
}

/// A probe that names its key twice tells a found-rows connection apart on every
/// statement: 2 for a new key and a duplicate alike, which the service refuses
/// (it reads only 1 or 0), where the service's connections report 1 and 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doubled_probe_betrays_a_found_rows_connection() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await;
    let mut found_rows = AsyncMysqlConnection::establish(&db.url).await.unwrap();
    assert_eq!(probe_doubled_twice(&mut found_rows).await, (2, 2));
    let mut conn = connection::connect(&db.url).await.unwrap();
    assert_eq!(probe_doubled_twice(&mut conn).await, (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diesel_async_establish_reports_found_rows_and_is_refused() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await; // creates the database

    let mut found_rows = AsyncMysqlConnection::establish(&db.url).await.unwrap();
    assert_eq!(
        probe_twice(&mut found_rows).await,
        (1, 1),
        "the trap: a duplicate looks new"
    );
    let refused = verify_affected_rows(&mut found_rows).await;
    assert!(
        matches!(
            refused,
            Err(SelfCheckError::AffectedRows {
                new: 1,
                duplicate: 1
            })
        ),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_connections_report_affected_rows() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await;

    let mut conn = connection::connect(&db.url).await.unwrap();
    assert_eq!(probe_twice(&mut conn).await, (1, 0));
    verify_affected_rows(&mut conn).await.unwrap();

    // Not even the URL can turn the flag back on.
    let mut conn = connection::connect(&format!("{}?client_found_rows=true", db.url))
        .await
        .unwrap();
    assert_eq!(probe_twice(&mut conn).await, (1, 0));

    // And the pool is built from the same connections.
    let pool = pool::build(
        std::slice::from_ref(&db.url),
        pool::PoolSettings {
            size: 1,
            checkout_timeout: std::time::Duration::from_secs(5),
        },
        pool::Role::Keyed { lock_wait_secs: 5 },
        &pool::Session::default(),
    );
    let mut pooled = pool.get().await.unwrap();
    assert_eq!(probe_twice(&mut pooled).await, (1, 0));
    // A single server: final batches go without the cluster's guards.
    assert!(!pool.multi_primary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_self_check_leaves_no_trace() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await;
    let tables = "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()";
    let before = db.count(tables).await;
    let mut conn = connection::connect(&db.url).await.unwrap();
    verify_affected_rows(&mut conn).await.unwrap();
    verify_affected_rows(&mut conn).await.unwrap();
    assert_eq!(db.count(tables).await, before);
    assert_eq!(db.count("SELECT COUNT(*) FROM idempotency_keys").await, 0);
}
