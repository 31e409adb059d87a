//! The `ledger` binary as operators run it: configuration errors, migrations,
//! the health check command and graceful shutdown.

use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use nix::sys::signal::Signal;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::support::server::until;
use crate::support::{
    LedgerProcess, TestApp, TestDb, charge, free_port, is_mariadb, open_funded, private_server,
    run_ledger, scrape,
};

/// Polls until nothing accepts connections on `addr`; fails after 30 s.
async fn until_refused(addr: std::net::SocketAddr) {
    until("the listener closes", async || {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
}

/// A bad setting stops the process at start with one line naming it.
async fn refuses(args: &[&str], expected_code: i32, mentions: &str) {
    let (code, stderr) = run_ledger(args).await;
    assert_eq!(code, Some(expected_code), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: one line, got {stderr:?}"
    );
    assert!(
        stderr.starts_with("error:") && stderr.contains(mentions),
        "{args:?}: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_stop_the_start_with_one_clear_line() {
    let db = TestDb::new();
    let url = db.url.clone();
    refuses(
        &["serve", "--database-url", &url, "--pool-size", "0"],
        2,
        "--pool-size",
    )
    .await;
    refuses(
        &["serve", "--database-url", "not a url"],
        2,
        "--database-url",
    )
    .await;
    refuses(
        &["serve", "--database-url", "mysql://root:pw@127.0.0.1:3306"],
        2,
        "must name a database",
    )
    .await;
    refuses(
        &[
            "serve",
            "--database-url",
            &url,
            "--lock-wait-timeout",
            "500ms",
        ],
        2,
        "whole seconds",
    )
    .await;
    refuses(
        &[
            "serve",
            "--database-url",
            &url,
            "--stream-assigner",
            "maybe",
        ],
        2,
        "--stream-assigner",
    )
    .await;
    refuses(
        &[
            "serve",
            "--database-url",
            &url,
            "--auth-tokens-file",
            "/nonexistent/tokens",
        ],
        2,
        "cannot read",
    )
    .await;
    refuses(
        &[
            "serve",
            "--database-url",
            &url,
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ],
        1,
        "cannot read /nonexistent/cert.pem",
    )
    .await;
    refuses(
        &[
            "serve",
            "--database-url",
            &url,
            "--tls-cert",
            "/nonexistent/cert.pem",
        ],
        2,
        "--tls-key",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_retried_then_reported() {
    let started = tokio::time::Instant::now();
    let (code, stderr) = run_ledger(&[
        "serve",
        "--database-url",
        "mysql://root:secret@127.0.0.1:1/ledger",
        "--connect-timeout",
        "2s",
    ])
    .await;
    let waited = started.elapsed();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the database at 127.0.0.1:1/ledger"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("secret"),
        "the password stays out of messages: {stderr}"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "kept trying for the connect timeout: {waited:?}"
    );
}

/// Several URLs are the nodes of one database: a node that does not answer is
/// skipped, and every URL must name the same database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_database_url_that_answers_is_used() {
    let db = TestDb::new();
    let dead = format!("mysql://root@127.0.0.1:1/{}", db.name);
    let urls = format!("{dead},{}", db.url);
    let addr = format!("127.0.0.1:{}", crate::support::free_port())
        .parse()
        .unwrap();
    let server = LedgerProcess::serve_urls(&urls, addr, &[]).await;
    let open = pb::OpenAccountRequest {
        idempotency_key: "o".into(),
        currency: "USD".into(),
        ..Default::default()
    };
    LedgerClient::new(server.channel())
        .open_account(open)
        .await
        .unwrap();

    let mixed = format!("{},mysql://root@127.0.0.1:1/other", db.url);
    refuses(
        &["serve", "--database-url", &mixed],
        1,
        "must name the same database",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_then_serve_without_migrating() {
    let db = TestDb::new();
    let (code, stderr) = run_ledger(&["serve", "--database-url", &db.url, "--no-migrate"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("run `ledger migrate` first"), "{stderr}");

    let (code, stderr) = run_ledger(&["migrate", "--database-url", &db.url]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let tables = db
        .count("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('accounts', 'entries', 'idempotency_keys')")
        .await;
    assert_eq!(tables, 3);

    let server = LedgerProcess::serve(&db, &["--no-migrate"]).await;
    let open = pb::OpenAccountRequest {
        idempotency_key: "o".into(),
        currency: "USD".into(),
        ..Default::default()
    };
    LedgerClient::new(server.channel())
        .open_account(open)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_healthcheck_command_reports_serving() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let (code, stderr) = run_ledger(&["healthcheck", "--listen", &app.addr.to_string()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _) =
        run_ledger(&["healthcheck", "--listen", "127.0.0.1:1", "--timeout", "1s"]).await;
    assert_eq!(code, Some(1), "nothing listens there");
}

/// SIGTERM while charges wait on a locked account: the server reports NOT_SERVING
/// while it still serves, stops accepting calls, lets the ones in flight finish,
/// and exits 0. Every call either completed or never started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_calls_in_flight() {
    let db = TestDb::new();
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let server = LedgerProcess::serve(
        &db,
        &[
            "--shutdown-delay",
            "1s",
            "--shutdown-grace",
            "20s",
            "--lock-wait-timeout",
            "30s",
            "--metrics-listen",
            &metrics.to_string(),
        ],
    )
    .await;
    let mut client = LedgerClient::new(server.channel());
    let account = open_funded(&mut client, "drain", "USD", 1000).await;

    let mut holder = db.lock_account(account).await;
    let in_flight: Vec<_> = (0..8)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .charge(charge(&format!("flight-{i}"), account, 10))
                    .await
            })
        })
        .collect();
    // All eight are in flight: claimed in the database, or queued for the writer
    // whose batch waits for the account.
    db.until_waiting_on("accounts", 1).await;
    until("every call is in flight before SIGTERM", async || {
        let queued = scrape(metrics)
            .await
            .get("ledger_batch_waiting_calls")
            .copied()
            .unwrap_or(0);
        db.claimed("flight-%").await + queued >= 8
    })
    .await;

    let addr = server.addr;
    server.signal(Signal::SIGTERM);
    server.until_health(ServingStatus::NotServing).await;
    until_refused(addr).await;
    // Only now, with the listener closed, can the calls in flight proceed.
    holder.query_drop("ROLLBACK").await.unwrap();
    for call in in_flight {
        call.await.unwrap().expect("a call in flight completes");
    }
    let status = server.wait(Duration::from_secs(25)).await;
    assert!(status.success(), "exit status {status:?}");

    let late = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await;
    assert!(late.is_err(), "the listener is closed");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind = 1")
            .await,
        8
    );
    assert_eq!(db.balance(account).await, 1000 - 80);
}

/// A starting server deletes every `#sql*` file in its tmpdir, taken to be its own
/// leftovers. A private server (`ledger serve` without a URL, each test run's) has
/// a tmpdir of its own, so starting one leaves the temporary tables of every other
/// server, here the suite's, where they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_private_server_leaves_other_servers_temporary_tables_alone() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await;
    let mut session = db.sql().await;
    // An engine whose temporary tables are files in the tmpdir.
    let engine = if is_mariadb(&mut session).await {
        "Aria"
    } else {
        "MyISAM"
    };
    session
        .query_drop(format!(
            "CREATE TEMPORARY TABLE scratch (n INT) ENGINE={engine}"
        ))
        .await
        .unwrap();
    session
        .query_drop("INSERT INTO scratch VALUES (1), (2)")
        .await
        .unwrap();

    let (_dir, mut neighbour) = private_server("ledger-neighbour-").await;

    let rows: u64 = session
        .query_first("SELECT COUNT(*) FROM scratch")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows, 2);
    session
        .query_drop("DROP TEMPORARY TABLE scratch")
        .await
        .expect("the temporary table's files are still there to delete");
    neighbour.stop().await.unwrap();
}
