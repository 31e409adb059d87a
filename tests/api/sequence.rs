//! The change stream's numbers (SPEC 3.8): assigned after commit, ledger-wide,
//! without a hole, each account's in its journal order and each operation's
//! together, by one assigner for the fleet, which another instance replaces when
//! it dies. Every wait for the assigner is a poll with a bound.

use std::time::Duration;

use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use nix::sys::signal::Signal;

use crate::support::proxy::Proxy;
use crate::support::{
    Config, LedgerProcess, NUMBERED, TestApp, TestDb, UNNUMBERED_COUNT, add_commits,
    assert_audit_passes, assert_stream_sound, charge, hex, is_mariadb, leg, open_funded, post,
    private_server, run_ledger, server_url, transfer, until_lease_free, until_sequenced,
};

/// A bound on waiting for the assigner: its lease (3 s) if it must change hands,
/// and a round.
const SEQUENCED_WITHIN: Duration = Duration::from_secs(20);

/// Charges, transfers and posts through two instances at once, on shared
/// accounts: the reply says 0 (numbered after the commit), the reads show the
/// number, and the numbers keep every promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_through_two_instances_are_numbered_in_order() {
    let db = TestDb::new();
    let one = TestApp::spawn(&db).await;
    let two = TestApp::spawn(&db).await;
    let accounts = [
        one.funded_account("USD", 10_000).await,
        one.funded_account("USD", 10_000).await,
        two.funded_account("USD", 10_000).await,
    ];
    let mut calls = Vec::new();
    for (n, app) in [&one, &two].into_iter().enumerate() {
        for worker in 0..3 {
            let mut client = app.client().await;
            calls.push(tokio::spawn(async move {
                for i in 0..10 {
                    let [a, b, c] = accounts;
                    let key = format!("w{n}-{worker}-{i}");
                    match i % 3 {
                        0 => {
                            client.charge(charge(&key, a, 1)).await.unwrap();
                        }
                        1 => {
                            client.transfer(transfer(&key, b, c, 2)).await.unwrap();
                        }
                        _ => {
                            let legs = vec![leg(c, a, 1), leg(a, b, 1), leg(b, c, 1)];
                            client.post(post(&key, legs)).await.unwrap();
                        }
                    }
                }
            }));
        }
    }
    for call in calls {
        call.await.unwrap();
    }
    let mut client = one.client().await;
    let reply = client
        .charge(charge("last", accounts[0], 1))
        .await
        .unwrap()
        .into_inner()
        .entry
        .unwrap();
    assert_eq!(
        reply.sequence, 0,
        "a reply is encoded before the assignment"
    );
    let waited = until_sequenced(&db, SEQUENCED_WITHIN).await;
    eprintln!(
        "numbered {} entries; the last within {waited:?} of the last reply",
        db.count("SELECT COUNT(*) FROM entries").await
    );
    let read = client
        .get_entry(pb::GetEntryRequest {
            entry_id: reply.entry_id,
        })
        .await
        .unwrap()
        .into_inner();
    let max = db
        .count(&format!("SELECT MAX(sequence) FROM {NUMBERED} e"))
        .await;
    assert_eq!(read.sequence, max, "the last call is the last numbered");
    // The assigning instance publishes each round it commits.
    let learned =
        || (*one.persistence.assigned().borrow()).max(*two.persistence.assigned().borrow());
    for _ in 0..500 {
        if learned() == max {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(learned(), max);
    assert_stream_sound(&db).await;
    assert_audit_passes(&db.url).await;
}

/// A transaction whose COMMIT reaches the database 2 s late (held by a proxy)
/// locked its account, and so took its instant, before the calls that commit
/// meanwhile through another instance: it is numbered after all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_commit_is_numbered_after_those_that_committed_before_it() {
    let db = TestDb::new();
    let proxy = Proxy::start(&server_url()).await;
    let late = TestApp::spawn_with(
        &db,
        Config {
            database_url: Some(proxy.url(&server_url(), &db.name)),
            ..Config::default()
        },
    )
    .await;
    let prompt = TestApp::spawn(&db).await;
    let held_account = prompt.funded_account("USD", 100).await;
    let others = [
        prompt.funded_account("USD", 100).await,
        prompt.funded_account("USD", 100).await,
    ];
    until_sequenced(&db, SEQUENCED_WITHIN).await;

    // The final batch names the key in hexadecimal, and ends in COMMIT.
    let held = proxy.hold_query(&[&hex("held"), "COMMIT"], Duration::from_secs(2));
    let mut client = late.client().await;
    let call = tokio::spawn(async move { client.charge(charge("held", held_account, 5)).await });
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the held call's COMMIT reaches the proxy");
    let mut client = prompt.client().await;
    for i in 0..6 {
        let [a, b] = others;
        client
            .transfer(transfer(&format!("meanwhile-{i}"), a, b, 1))
            .await
            .unwrap();
    }
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE idempotency_key = 'held'")
            .await,
        0,
        "the held call has not committed while the others were numbered"
    );
    call.await.unwrap().expect("the held call commits");
    until_sequenced(&db, SEQUENCED_WITHIN).await;

    let mut conn = db.sql().await;
    let (held_seq, held_at_earlier): (u64, u64) = conn
        .query_first(format!(
            "SELECT h.sequence, h.created_at < (SELECT MIN(created_at) FROM entries \
             WHERE idempotency_key LIKE 'meanwhile-%') \
             FROM {NUMBERED} h WHERE h.idempotency_key = 'held'"
        ))
        .await
        .unwrap()
        .unwrap();
    let meanwhile_max = db
        .count(&format!(
            "SELECT MAX(sequence) FROM {NUMBERED} e WHERE idempotency_key LIKE 'meanwhile-%'"
        ))
        .await;
    assert_eq!(held_at_earlier, 1, "the held call took its instant first");
    assert!(held_seq > meanwhile_max, "{held_seq} after {meanwhile_max}");
    assert_eq!(
        held_seq,
        db.count(&format!("SELECT MAX(sequence) FROM {NUMBERED} e"))
            .await
    );
    assert_stream_sound(&db).await;
    let (code, _) = run_ledger(&["audit", "--database-url", &db.url]).await;
    assert_eq!(code, Some(0));
}

/// The lease row's owner, while a lease is held.
async fn lease_owner(db: &TestDb) -> Option<String> {
    let mut conn = db.sql().await;
    let owner: Option<Vec<u8>> = conn
        .query_first(
            "SELECT owner FROM ledger_stream WHERE id = 1 AND lease_until > UTC_TIMESTAMP(6)",
        )
        .await
        .unwrap();
    owner.map(|o| String::from_utf8_lossy(&o).into_owned())
}

async fn until_owner(db: &TestDb, pid: u32) {
    for _ in 0..1000 {
        if lease_owner(db)
            .await
            .is_some_and(|o| o.contains(&format!("/{pid}/")))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("process {pid} never took the lease");
}

/// The assigner is killed (SIGKILL) while entries committed through both
/// instances wait for their numbers (a test connection holds the lease row, so
/// no round can run): the other instance takes the lease once it runs out, and
/// numbers them and every later entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_assigner_is_replaced_and_nothing_is_left_unnumbered() {
    let db = TestDb::new();
    let first = LedgerProcess::serve(&db, &[]).await;
    until_owner(&db, first.pid()).await;
    let second = LedgerProcess::serve(&db, &[]).await;
    let mut one = LedgerClient::new(first.channel());
    let mut two = LedgerClient::new(second.channel());
    let a = open_funded(&mut one, "a", "USD", 1000).await;
    let b = open_funded(&mut two, "b", "USD", 1000).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;

    let mut holder = db
        .hold("SELECT * FROM ledger_stream WHERE id = 1 FOR UPDATE")
        .await;
    for i in 0..5 {
        one.transfer(transfer(&format!("one-{i}"), a, b, 1))
            .await
            .unwrap();
        two.transfer(transfer(&format!("two-{i}"), b, a, 1))
            .await
            .unwrap();
    }
    first.signal(Signal::SIGKILL);
    let _ = first.wait(Duration::from_secs(10)).await;
    assert_eq!(
        db.count(UNNUMBERED_COUNT).await,
        20,
        "every transfer waits for its numbers"
    );
    holder.query_drop("ROLLBACK").await.unwrap();
    for i in 0..5 {
        two.charge(charge(&format!("after-{i}"), a, 1))
            .await
            .unwrap();
    }
    let waited = until_sequenced(&db, SEQUENCED_WITHIN).await;
    eprintln!("numbered within {waited:?} of the last call after the kill");
    until_owner(&db, second.pid()).await;
    assert_stream_sound(&db).await;
    assert_audit_passes(&db.url).await;
}

/// The database restarts under the assigner: it numbers what committed before
/// and after, without a hole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_assigner_survives_a_database_restart() {
    let (_dir, mut server) = private_server("ledger-stream-").await;
    let db = TestDb::on(server.server_url());
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 1000).await;
    let mut client = app.client().await;
    for i in 0..5 {
        client
            .charge(charge(&format!("before-{i}"), account, 1))
            .await
            .unwrap();
    }
    server.stop().await.unwrap();
    server.restart().await.unwrap();
    for i in 0..5 {
        let key = format!("after-{i}");
        // The first calls may meet connections the restart closed.
        for _ in 0..50 {
            if client.charge(charge(&key, account, 1)).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    // The funding credit and ten charges.
    assert_eq!(
        db.count(&format!("SELECT MAX(sequence) FROM {NUMBERED} e"))
            .await,
        11
    );
    assert_stream_sound(&db).await;
    drop(app);
    server.stop().await.unwrap();
}

/// A ledger that existed before the stream (its entries without numbers, the
/// next number 1) is numbered by the first rounds: contiguously, each account's
/// entries in journal order although every entry has the same instant and the
/// ids of two instances' blocks interleave against that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ledger_from_before_the_stream_is_numbered_in_journal_order() {
    let db = TestDb::new();
    let off = Config {
        stream_assigner: Some(false),
        ..Config::default()
    };
    let one = TestApp::spawn_with(&db, off.clone()).await;
    let two = TestApp::spawn_with(&db, off).await;
    let a = one.funded_account("USD", 1000).await;
    let b = two.funded_account("USD", 1000).await;
    let (mut c1, mut c2) = (one.client().await, two.client().await);
    for i in 0..20 {
        c1.transfer(transfer(&format!("x-{i}"), a, b, 3))
            .await
            .unwrap();
        c2.transfer(transfer(&format!("y-{i}"), b, a, 2))
            .await
            .unwrap();
        let legs = vec![leg(a, b, 1), leg(b, a, 1)];
        c2.post(post(&format!("p-{i}"), legs)).await.unwrap();
    }
    drop((one, two));
    let mut conn = db.sql().await;
    let inverted: u64 = conn
        .query_first(
            "SELECT COUNT(*) FROM entries x JOIN entries y ON y.account_id = x.account_id \
             AND y.account_seq = x.account_seq + 1 WHERE y.entry_id < x.entry_id",
        )
        .await
        .unwrap()
        .unwrap();
    assert!(inverted > 0, "ids from two blocks are not in journal order");
    conn.query_drop(
        "UPDATE stream_commits SET first_sequence = NULL, created_at = '2026-01-01 00:00:00'; \
         UPDATE entries SET created_at = '2026-01-01 00:00:00'; \
         UPDATE ledger_stream SET next_sequence = 1, owner = '', lease_until = '1970-01-01'",
    )
    .await
    .unwrap();
    let numbering = TestApp::spawn(&db).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    assert_eq!(
        db.count(&format!("SELECT MAX(sequence) FROM {NUMBERED} e"))
            .await,
        db.count("SELECT COUNT(*) FROM entries").await
    );
    assert_stream_sound(&db).await;
    drop(numbering);
}

/// `ops` transfers between two fresh accounts written straight into the
/// journal, unnumbered, as a populated ledger migrated has them: ids against
/// the journal order, each at the instant `instant` gives for its index `n.i`.
async fn backlog(db: &TestDb, ops: u64, instant: &str) {
    let off = Config {
        stream_assigner: Some(false),
        ..Config::default()
    };
    let opener = TestApp::spawn_with(db, off).await;
    let a = opener.funded_account("USD", 0).await;
    let b = opener.funded_account("USD", 0).await;
    drop(opener);
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    db.sql()
        .await
        .query_drop(format!(
            "INSERT INTO entries (entry_id, account_id, account_seq, leg, kind, amount, currency, \
               balance_after, namespace, idempotency_key, description, created_at, \
               counterparty_account_id, commit_id, commit_pos) \
             SELECT 1000000 + ({ops} - n.i) * 2 + l.leg, \
               IF((n.i + l.leg) % 2 = 0, {a}, {b}), n.i + 1, l.leg, 3 + l.leg, 1, 'USD', 0, '', \
               CONCAT('bulk-', n.i), '', {instant}, IF((n.i + l.leg) % 2 = 0, {b}, {a}), \
               1000000 + ({ops} - n.i) * 2, l.leg \
             FROM (SELECT d1.d + 10 * d2.d + 100 * d3.d + 1000 * d4.d + 10000 * d5.d AS i \
                   FROM {digits} d1, {digits} d2, {digits} d3, {digits} d4, {digits} d5) n \
             CROSS JOIN (SELECT 0 AS leg UNION ALL SELECT 1) l WHERE n.i < {ops}"
        ))
        .await
        .unwrap();
    add_commits(db, "idempotency_key LIKE 'bulk-%'").await;
}

/// Starts an assigner on `db` and waits for every entry's number.
async fn number_all(db: &TestDb, entries: u64) {
    let started = tokio::time::Instant::now();
    let numbering = TestApp::spawn(db).await;
    until_sequenced(db, Duration::from_secs(120)).await;
    eprintln!("numbered {entries} entries in {:?}", started.elapsed());
    assert_eq!(
        db.count(&format!("SELECT MAX(sequence) FROM {NUMBERED} e"))
            .await,
        entries
    );
    assert_stream_sound(db).await;
    drop(numbering);
}

/// A backlog larger than a round (24,000 entries of 12,000 transfers): every
/// round is cut at its limit, in the middle of an instant, the ids run against
/// the journal order, and pairs of instants against it too (a clock that
/// stepped back). The rounds still number every entry once, in journal order,
/// each transfer's two together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_larger_than_a_round_is_numbered_in_journal_order() {
    let db = TestDb::new();
    backlog(
        &db,
        12_000,
        "TIMESTAMP('2026-01-01') + INTERVAL ((n.i DIV 3) ^ 1) SECOND",
    )
    .await;
    number_all(&db, 24_000).await;
}

/// One instant holding more entries than a round reads (a ledger migrated
/// with one timestamp): it is read whole, not held back for ever as cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instant_larger_than_a_round_is_numbered() {
    let db = TestDb::new();
    backlog(&db, 6_000, "TIMESTAMP('2026-01-01')").await;
    number_all(&db, 12_000).await;
}

/// An entry inserted and not yet committed (by a transaction the test holds
/// open, with the lowest id and the earliest instant) is never numbered: the
/// entries that commit meanwhile are, and it gets the next number once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_uncommitted_entry_is_never_numbered() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let quiet = app.funded_account("USD", 0).await;
    let busy = app.funded_account("USD", 100).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    let mut writer = db.sql().await;
    writer.query_drop("BEGIN").await.unwrap();
    writer
        .query_drop(format!(
            "INSERT INTO entries (entry_id, account_id, account_seq, kind, amount, currency, \
             balance_after, namespace, idempotency_key, description, created_at, commit_id) \
             VALUES (0, {quiet}, 1, 2, 1, 'USD', 1, '', 'open-ended', '', '2000-01-01', 0); \
             INSERT INTO stream_commits (commit_id, entry_count, accounts, created_at) \
             VALUES (0, 1, '{quiet}:1:1', '2000-01-01')"
        ))
        .await
        .unwrap();
    let mut client = app.client().await;
    for i in 0..5 {
        client
            .charge(charge(&format!("meanwhile-{i}"), busy, 1))
            .await
            .unwrap();
    }
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    let numbered = db
        .count(&format!("SELECT MAX(sequence) FROM {NUMBERED} e"))
        .await;
    writer.query_drop("COMMIT").await.unwrap();
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    assert_eq!(
        db.count(&format!(
            "SELECT sequence FROM {NUMBERED} e WHERE entry_id = 0"
        ))
        .await,
        numbered + 1
    );
    assert_stream_sound(&db).await;
}

/// A populated ledger: two funded accounts, and transfers, charges and
/// two-leg posts between them, every entry numbered.
async fn populated(db: &TestDb) -> u64 {
    let app = TestApp::spawn(db).await;
    let a = app.funded_account("USD", 1000).await;
    let b = app.funded_account("USD", 1000).await;
    let mut client = app.client().await;
    for i in 0..10 {
        client
            .transfer(transfer(&format!("t-{i}"), a, b, 5))
            .await
            .unwrap();
        client
            .charge(charge(&format!("c-{i}"), b, 1))
            .await
            .unwrap();
        let legs = vec![leg(b, a, 2), leg(a, b, 1)];
        client.post(post(&format!("p-{i}"), legs)).await.unwrap();
    }
    until_sequenced(db, SEQUENCED_WITHIN).await;
    drop(app);
    until_lease_free(db).await;
    2 + 10 * (2 + 1 + 4)
}

const CHANGE_STREAM_UP: &str =
    include_str!("../../migrations/2026-12-03-000001_change_stream/up.sql");
const CHANGE_STREAM_DOWN: &str =
    include_str!("../../migrations/2026-12-03-000001_change_stream/down.sql");
const COMMITS_UP: &str = include_str!("../../migrations/2026-12-04-000001_stream_commits/up.sql");
const COMMITS_DOWN: &str =
    include_str!("../../migrations/2026-12-04-000001_stream_commits/down.sql");

/// How many of the named tables and columns of `entries` the schema has.
async fn schema_has(db: &TestDb, tables: &[&str], entry_columns: &[&str]) -> u64 {
    let list = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    db.count(&format!(
        "SELECT (SELECT COUNT(*) FROM information_schema.COLUMNS \
           WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'entries' \
           AND COLUMN_NAME IN ({})) \
         + (SELECT COUNT(*) FROM information_schema.TABLES \
           WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({}))",
        list(entry_columns),
        list(tables)
    ))
    .await
}

/// The migration to numbered commits on a populated, numbered ledger: its
/// `down.sql` gives every entry its number back as a column of its own, and its
/// `up.sql`, run again, gives each operation a commit that keeps exactly the
/// numbers it had; the audit passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_commits_migration_keeps_every_number_both_ways() {
    let db = TestDb::new();
    let total = populated(&db).await;
    let numbers = format!("SELECT entry_id, sequence FROM {NUMBERED} e ORDER BY entry_id");
    let mut conn = db.sql().await;
    let before: Vec<(u64, u64)> = conn.query(&numbers).await.unwrap();
    assert_eq!(before.len() as u64, total);

    conn.query_drop(COMMITS_DOWN).await.unwrap();
    assert_eq!(
        schema_has(&db, &["stream_commits"], &["commit_id", "commit_pos"]).await,
        0,
        "down.sql removed the commits"
    );
    let columns: Vec<(u64, u64)> = conn
        .query("SELECT entry_id, sequence FROM entries ORDER BY entry_id")
        .await
        .unwrap();
    assert_eq!(columns, before, "every entry has its number back");

    conn.query_drop(COMMITS_UP).await.unwrap();
    assert_eq!(
        schema_has(
            &db,
            &["stream_commits"],
            &["commit_id", "commit_pos", "sequence"]
        )
        .await,
        3
    );
    let after: Vec<(u64, u64)> = conn.query(&numbers).await.unwrap();
    assert_eq!(after, before, "every entry keeps its number");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM stream_commits").await,
        2 + 10 * 3,
        "one commit per operation"
    );
    assert_stream_sound(&db).await;
    assert_audit_passes(&db.url).await;
}

/// The change stream's migrations on a populated ledger: their `down.sql`s take
/// the numbers, their indexes, the commits and the lease row away; their
/// `up.sql`s, run again, leave every entry unnumbered, and the first rounds
/// number them all, in journal order; a `WatchEntries` from 0 then streams
/// every one, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_stream_migrations_reverse_and_apply_again_on_a_populated_ledger() {
    let db = TestDb::new();
    let total = populated(&db).await;
    let mut conn = db.sql().await;
    let stream = (
        &["ledger_stream", "stream_commits"][..],
        &["sequence", "commit_id"][..],
    );
    conn.query_drop(COMMITS_DOWN).await.unwrap();
    conn.query_drop(CHANGE_STREAM_DOWN).await.unwrap();
    assert_eq!(
        schema_has(&db, stream.0, stream.1).await,
        0,
        "down.sql removed the stream"
    );
    conn.query_drop(CHANGE_STREAM_UP).await.unwrap();
    conn.query_drop(COMMITS_UP).await.unwrap();
    assert_eq!(schema_has(&db, stream.0, stream.1).await, 3);
    assert_eq!(db.count(UNNUMBERED_COUNT).await, total);

    let app = TestApp::spawn(&db).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    assert_eq!(db.count("SELECT COUNT(*) FROM entries").await, total);
    assert_stream_sound(&db).await;
    let mut stream = app
        .client()
        .await
        .watch_entries(pb::WatchEntriesRequest {
            after_sequence: 0,
            account_id: 0,
        })
        .await
        .unwrap()
        .into_inner();
    for sequence in 1..=total {
        let entry = stream.message().await.unwrap().unwrap();
        assert_eq!(entry.sequence, sequence);
    }
    assert_audit_passes(&db.url).await;
}

/// The lease owner of the assigner of the version before 2026-12-04, which
/// numbered `entries.sequence` itself.
const OLD_ASSIGNER: &str = "an assigner of the version before";

/// The 2026-12-04 migration, run as `ledger serve` runs it at start, while an
/// assigner of the version before it holds the lease and is about to number the
/// last operations' entries: a round of that assigner committed during the
/// migration is refused (the migration holds the lease) or keeps its numbers,
/// and the stream has no hole. Forced: an open transaction that read `entries`
/// holds the migration at its first ALTER, and one that locked `stream_commits`
/// holds it at its copy of the numbers; the old round then starts and sends its
/// writes, which wait for the copy's locks, so it commits after the copy and
/// before the drop of the column it writes, where its numbers would be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_round_during_the_commits_migration_is_numbered_or_refused() {
    let db = TestDb::new();
    let total = populated(&db).await;
    let mut conn = db.sql().await;
    conn.query_drop(COMMITS_DOWN).await.unwrap();
    conn.query_drop("DELETE FROM __diesel_schema_migrations WHERE version = '20261204000001'")
        .await
        .unwrap();
    // The last transfer, charge and post (7 entries) wait for the next round.
    let next = total - 7 + 1;
    let numbers: Vec<(u64, u64)> = conn
        .exec(
            "SELECT entry_id, sequence FROM entries WHERE sequence >= ? ORDER BY sequence",
            (next,),
        )
        .await
        .unwrap();
    assert_eq!(numbers.len(), 7);
    conn.exec_drop(
        "UPDATE entries SET sequence = NULL WHERE sequence >= ?",
        (next,),
    )
    .await
    .unwrap();
    conn.exec_drop(
        "UPDATE ledger_stream SET owner = ?, next_sequence = ?, \
         lease_until = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = 1",
        (OLD_ASSIGNER, next),
    )
    .await
    .unwrap();

    let mut entries_read = db.hold("SELECT COUNT(*) FROM entries").await;
    let url = db.url.clone();
    let migrating =
        tokio::spawn(async move { ledger::db::admin::migrate::run_migrations(&url).await });
    until_metadata_lock_wait(&db).await;
    let mut copy_held = db.hold("SELECT * FROM stream_commits FOR UPDATE").await;
    entries_read.query_drop("ROLLBACK").await.unwrap();
    until_lock_waits(&db, 1, None).await;

    let round = old_round(&db, next, &numbers).await;
    if let Some(round) = &round {
        until_lock_waits(&db, 2, Some(round)).await;
    }
    copy_held.query_drop("ROLLBACK").await.unwrap();
    let committed = match round {
        Some(round) => round.await.unwrap().is_ok(),
        None => false,
    };
    migrating.await.unwrap().expect("migrated");
    if committed {
        let kept: Vec<(u64, u64)> = conn
            .exec(
                format!(
                    "SELECT entry_id, sequence FROM {NUMBERED} e WHERE sequence >= ? \
                     ORDER BY sequence"
                ),
                (next,),
            )
            .await
            .unwrap();
        assert_eq!(kept, numbers, "the old round's numbers were lost");
    }

    let app = TestApp::spawn(&db).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    assert_stream_sound(&db).await;
    assert_audit_passes(&db.url).await;
    drop(app);
}

/// A round of the assigner of the version before 2026-12-04, as it ran: the
/// lease row locked and its owner checked, the unnumbered entries read, then
/// its writes and COMMIT in one batch, sent in a task of its own (they may
/// wait). `None` when the lease was not its own, so it wrote nothing.
async fn old_round(
    db: &TestDb,
    next: u64,
    numbers: &[(u64, u64)],
) -> Option<tokio::task::JoinHandle<Result<(), mysql_async::Error>>> {
    let mut conn = db.sql().await;
    conn.query_drop("BEGIN").await.unwrap();
    let (owner, valid): (Vec<u8>, u64) = conn
        .query_first(
            "SELECT owner, CAST(lease_until > UTC_TIMESTAMP(6) AS UNSIGNED) \
             FROM ledger_stream WHERE id = 1 FOR UPDATE",
        )
        .await
        .unwrap()
        .unwrap();
    if owner != OLD_ASSIGNER.as_bytes() || valid == 0 {
        conn.query_drop("ROLLBACK").await.unwrap();
        return None;
    }
    let unnumbered: Vec<u64> = conn
        .query("SELECT entry_id FROM entries WHERE sequence IS NULL")
        .await
        .unwrap();
    assert_eq!(unnumbered.len(), numbers.len());
    let last = next + u64::try_from(numbers.len()).unwrap();
    let cases = numbers
        .iter()
        .fold(String::new(), |mut cases, (id, sequence)| {
            use std::fmt::Write as _;
            let _ = write!(cases, " WHEN {id} THEN {sequence}");
            cases
        });
    let ids: Vec<String> = numbers.iter().map(|(id, _)| id.to_string()).collect();
    let writes = format!(
        "UPDATE ledger_stream SET next_sequence = {last}, \
         lease_until = UTC_TIMESTAMP(6) + INTERVAL 3 SECOND \
         WHERE id = 1 AND owner = '{OLD_ASSIGNER}' AND next_sequence = {next}; \
         UPDATE entries SET sequence = CASE entry_id{cases} END WHERE entry_id IN ({}) \
         AND (SELECT next_sequence FROM ledger_stream WHERE id = 1) = {last}; COMMIT",
        ids.join(", ")
    );
    Some(tokio::spawn(async move { conn.query_drop(writes).await }))
}

/// Polls until a statement on the test's database waits for a table's metadata
/// lock; fails after 30 s.
async fn until_metadata_lock_wait(db: &TestDb) {
    let mut conn = db.sql().await;
    let sql = if is_mariadb(&mut conn).await {
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND STATE = 'Waiting for table metadata lock'"
    } else {
        "SELECT COUNT(*) FROM performance_schema.threads WHERE PROCESSLIST_DB = DATABASE() \
         AND PROCESSLIST_STATE = 'Waiting for table metadata lock'"
    };
    for _ in 0..1500 {
        let waiting: u64 = conn.query_first(sql).await.unwrap().unwrap_or(0);
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nothing came to wait for a metadata lock");
}

/// Polls until `n` transactions on the test's database wait for a row lock, or
/// `done` has finished; fails after 30 s. MariaDB refreshes INNODB_TRX only when
/// it was not read for 100 ms, so the polls are spaced wider than that.
async fn until_lock_waits(
    db: &TestDb,
    n: u64,
    done: Option<&tokio::task::JoinHandle<Result<(), mysql_async::Error>>>,
) {
    let mut conn = db.sql().await;
    let sql = if is_mariadb(&mut conn).await {
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t \
         JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
         WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    } else {
        "SELECT COUNT(DISTINCT ENGINE_TRANSACTION_ID) FROM performance_schema.data_locks \
         WHERE OBJECT_SCHEMA = DATABASE() AND LOCK_STATUS = 'WAITING'"
    };
    for _ in 0..200 {
        let waiting: u64 = conn.query_first(sql).await.unwrap().unwrap_or(0);
        if waiting >= n || done.is_some_and(tokio::task::JoinHandle::is_finished) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("fewer than {n} transactions came to wait for a row lock");
}

/// A round's write of its numbers numbers nothing once the lease is another's,
/// even with the next sequence it read: sent as a round whose lease a migration
/// took after its read would send it, it leaves the commits unnumbered; sent for
/// the lease's owner, it numbers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_round_whose_lease_was_taken_numbers_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            stream_assigner: Some(false),
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    app.client()
        .await
        .charge(charge("c", account, 1))
        .await
        .unwrap();
    let mut conn = db.sql().await;
    let commits: Vec<(u64, u64)> = conn
        .query("SELECT commit_id, entry_count FROM stream_commits ORDER BY created_at, commit_id")
        .await
        .unwrap();
    let mut last = 1;
    let numbers: Vec<(u64, u64)> = commits
        .iter()
        .map(|&(id, entries)| {
            let first = last;
            last += entries;
            (id, first)
        })
        .collect();
    conn.exec_drop(
        "UPDATE ledger_stream SET owner = 'the migrations', next_sequence = ? WHERE id = 1",
        (last,),
    )
    .await
    .unwrap();

    let stale = ledger::db::stream::numbering_sql(&numbers, last, b"an assigner");
    conn.query_drop(stale).await.unwrap();
    assert_eq!(
        db.count(UNNUMBERED_COUNT).await,
        last - 1,
        "nothing numbered"
    );
    let owned = ledger::db::stream::numbering_sql(&numbers, last, b"the migrations");
    conn.query_drop(owned).await.unwrap();
    assert_eq!(db.count(UNNUMBERED_COUNT).await, 0);
}
