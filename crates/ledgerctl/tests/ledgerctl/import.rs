//! `ledgerctl batch --file`: a file of keyed calls, one a line, imported in
//! batches with one result printed a line; the same file run again replays
//! every item; a line the ledger could not take stops the import before
//! anything is sent; items left without an outcome exit 75.

use std::io::Write as _;

use mysql_async::prelude::Queryable as _;

use crate::support::{TestApp, TestDb};
use crate::{ledgerctl, ledgerctl_within};

fn file_of(lines: &[String]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for line in lines {
        writeln!(file, "{line}").unwrap();
    }
    file
}

fn charge(key: &str, account: u64, amount: i64) -> String {
    format!(
        r#"{{"charge": {{"idempotencyKey": "{key}", "accountId": "{account}", "amount": "{amount}", "currency": "USD"}}}}"#
    )
}

/// The `state` and `replayed` of each printed line, in order.
fn states(stdout: &str) -> Vec<(u64, String, bool)> {
    stdout
        .lines()
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).unwrap();
            let replayed = json["result"]["replayed"].as_bool().unwrap_or(false);
            (
                json["line"].as_u64().unwrap(),
                json["state"].as_str().unwrap().to_owned(),
                replayed,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_prints_a_result_a_line_and_running_it_again_replays_it() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 10).await;
    let file = file_of(&[
        charge("imp-1", a, 30),
        String::new(),
        charge("imp-2", b, 20),
        charge("imp-3", a, 30),
        format!(
            r#"{{"credit": {{"idempotencyKey": "imp-4", "accountId": "{b}", "amount": "5", "currency": "USD"}}}}"#
        ),
        charge("imp-5", a, 30),
    ]);
    let path = file.path().to_str().unwrap();
    let args = ["-o", "json", "batch", "--file", path, "--batch-size", "2"];

    let first = ledgerctl(&app.url(), &args).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let expected = |replayed| {
        vec![
            (1, "ok".to_owned(), replayed),
            (3, "failed".to_owned(), replayed),
            (4, "ok".to_owned(), replayed),
            (5, "ok".to_owned(), replayed),
            (6, "ok".to_owned(), replayed),
        ]
    };
    assert_eq!(states(&first.stdout), expected(false), "{}", first.stdout);
    assert!(
        first.stdout.contains("INSUFFICIENT_FUNDS"),
        "{}",
        first.stdout
    );
    assert!(
        first
            .stderr
            .contains("5 items: 4 succeeded (0 replayed), 1 failed or declined, 0 unknown"),
        "{}",
        first.stderr
    );
    assert_eq!(db.balance(a).await, 10);
    assert_eq!(db.balance(b).await, 15);

    let again = ledgerctl(&app.url(), &args).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(states(&again.stdout), expected(true), "{}", again.stdout);
    assert_eq!(db.balance(a).await, 10);
    assert_eq!(db.balance(b).await, 15);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_line_without_a_key_or_not_json_stops_the_import_before_anything_is_sent() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 100).await;
    let keyless = file_of(&[
        charge("ok-1", a, 1),
        format!(r#"{{"charge": {{"accountId": "{a}", "amount": "1", "currency": "USD"}}}}"#),
    ]);
    let run = ledgerctl(
        &app.url(),
        &["batch", "--file", keyless.path().to_str().unwrap()],
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    assert!(run.stderr.contains("idempotencyKey"), "{}", run.stderr);

    let broken = file_of(&[charge("ok-2", a, 1), "{\"charge\": ".to_owned()]);
    let run = ledgerctl(
        &app.url(),
        &["batch", "--file", broken.path().to_str().unwrap()],
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    assert_eq!(db.balance(a).await, 100, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread")]
async fn items_left_without_an_outcome_exit_75() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = file_of(&[charge("gone-1", 1, 1), charge("gone-2", 2, 1)]);
    let run = ledgerctl(
        &format!("http://127.0.0.1:{port}"),
        &[
            "-o",
            "json",
            "batch",
            "--file",
            file.path().to_str().unwrap(),
            "--timeout",
            "2s",
        ],
    )
    .await;
    assert_eq!(run.code, Some(75), "{}", run.stderr);
    let printed = states(&run.stdout);
    assert_eq!(
        printed,
        vec![
            (1, "unknown".to_owned(), false),
            (2, "unknown".to_owned(), false)
        ]
    );
    assert!(
        run.stderr.contains("run the same file again"),
        "{}",
        run.stderr
    );
}

/// An import of 100,000 lines killed half way (SIGKILL) and run again: every
/// line has its outcome, each charged once. The second half's lines name an
/// account whose row an outside transaction holds, so the first run is stuck
/// past the first half when it is killed.
#[tokio::test(flavor = "multi_thread")]
async fn an_import_of_100000_lines_killed_half_way_and_run_again_charges_each_line_once() {
    const LINES: usize = 100_000;
    const HALF: usize = LINES / 2;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut accounts = Vec::new();
    for _ in 0..20 {
        accounts.push(app.funded_account("USD", 1_000_000).await);
    }
    // The first half on accounts 1 to 19; the second on all 20.
    let account_of = |i: usize| {
        if i < HALF {
            accounts[1 + i % 19]
        } else {
            accounts[i % 20]
        }
    };
    let lines: Vec<String> = (0..LINES)
        .map(|i| charge(&format!("bulk-{i}"), account_of(i), 1))
        .collect();
    let file = file_of(&lines);
    let path = file.path().to_str().unwrap();
    let count = "SELECT COUNT(*) FROM entries WHERE idempotency_key LIKE 'bulk-%'";

    let holder = db.lock_account(accounts[0]).await;
    let mut first = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledgerctl"))
        .args(["-o", "json", "batch", "--file", path, "--timeout", "120s"])
        .env("LEDGER_SERVER", app.url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // 50,000 charges take about 30 s in a debug build: longer than `until`
    // waits for what should come at once.
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while db.count(count).await < u64::try_from(HALF).unwrap() {
        assert!(
            std::time::Instant::now() < patience,
            "the first half of the file is not charged after 300 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    first.kill().await.unwrap();
    drop(holder);
    let done = db.count(count).await;
    assert!(
        done < u64::try_from(LINES).unwrap(),
        "killed half way: {done} lines charged"
    );

    let again = ledgerctl_within(
        &app.url(),
        &["-o", "json", "batch", "--file", path],
        std::time::Duration::from_secs(600),
    )
    .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let printed = states(&again.stdout);
    assert_eq!(printed.len(), LINES);
    assert!(printed.iter().all(|(_, state, _)| state == "ok"));
    let replayed = printed.iter().filter(|(_, _, replayed)| *replayed).count();
    assert!(replayed >= HALF, "{replayed} lines replayed");
    let (rows, keys): (u64, u64) = db
        .sql()
        .await
        .query_first(
            "SELECT COUNT(*), COUNT(DISTINCT idempotency_key) FROM entries \
             WHERE idempotency_key LIKE 'bulk-%'",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((rows, keys), (100_000, 100_000), "each line one entry");
    for (n, account) in accounts.iter().enumerate() {
        let charged = (0..LINES).filter(|i| account_of(*i) == *account).count();
        assert_eq!(
            db.balance(*account).await,
            1_000_000 - i64::try_from(charged).unwrap(),
            "account {n}"
        );
    }
}
