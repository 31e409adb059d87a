//! The reads that lock or check rows by lists of keys reach them through an
//! index, never a scan, on an empty ledger and on a populated one: a locking read
//! run as a scan would lock rows of other transactions and deadlock with them.

use ledger::ledger::{IdempotencyKey, Namespace, ScopedKey};
use mysql_async::prelude::Queryable as _;

use crate::support::{
    TestApp, TestDb, at_once, charge, place_hold, raw_call, reverse, transfer, until_sequenced,
};

/// Access types that read rows through an index.
const INDEXED: &[&str] = &["const", "eq_ref", "ref", "range", "system"];

/// A connection whose `EXPLAIN` answers in rows with the columns read here:
/// MySQL 9 answers in a tree by default (MariaDB has no such setting).
async fn tabular_plans(db: &TestDb) -> mysql_async::Conn {
    let mut conn = db.sql().await;
    let _ = conn
        .query_drop("SET SESSION explain_format = TRADITIONAL")
        .await;
    conn
}

/// Every read of `ledger::db::keyed_reads` over the first rows of each table.
async fn assert_indexed(db: &TestDb, when: &str) {
    let mut conn = tabular_plans(db).await;
    let ids = |table: &str, column: &str| {
        format!("SELECT {column} FROM {table} ORDER BY {column} LIMIT 4")
    };
    let accounts: Vec<u64> = conn.query(ids("accounts", "account_id")).await.unwrap();
    let entries: Vec<u64> = conn.query(ids("entries", "entry_id")).await.unwrap();
    let holds: Vec<u64> = conn.query(ids("holds", "hold_id")).await.unwrap();
    let mut keys: Vec<ScopedKey> = conn
        .query::<Vec<u8>, _>("SELECT idempotency_key FROM idempotency_keys LIMIT 4")
        .await
        .unwrap()
        .into_iter()
        .map(|k| ScopedKey {
            namespace: Namespace::default(),
            key: IdempotencyKey::parse("k", String::from_utf8(k).unwrap()).unwrap(),
        })
        .collect();
    keys.push(ScopedKey {
        namespace: Namespace::default(),
        key: IdempotencyKey::parse("k", "never-used".into()).unwrap(),
    });
    let or_missing = |ids: Vec<u64>| if ids.is_empty() { vec![1] } else { ids };
    let reads = ledger::db::plans::keyed_reads(
        &or_missing(accounts),
        &or_missing(entries),
        &or_missing(holds),
        &keys,
    );
    for (name, sql) in reads {
        let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
        for row in plan {
            let table: Option<String> = row.get("table").flatten();
            let access: Option<String> = row.get("type").flatten();
            let extra: Option<String> = row.get("Extra").flatten();
            // A plan with nothing to read (no matching row) reads no table.
            if table.is_none() || extra.as_deref().is_some_and(|e| e.contains("Impossible")) {
                continue;
            }
            assert!(
                access.as_deref().is_some_and(|a| INDEXED.contains(&a)),
                "{when}: {name} reads {table:?} by {access:?} ({extra:?}): {sql}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keyed_reads_use_an_index_on_an_empty_and_a_populated_ledger() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let first = app.funded_account("USD", 1_000_000).await;
    app.client()
        .await
        .place_hold(place_hold(
            "h-0",
            first,
            1,
            std::time::Duration::from_secs(3600),
        ))
        .await
        .unwrap();
    assert_indexed(&db, "a near-empty ledger").await;

    let mut accounts = vec![first];
    for _ in 0..40 {
        accounts.push(app.funded_account("USD", 1_000_000).await);
    }
    let channel = app.channel().await;
    let calls = at_once(2_000, std::slice::from_ref(&channel), |i, channel| {
        let account = accounts[i % accounts.len()];
        async move {
            if i % 4 == 0 {
                let ttl = std::time::Duration::from_secs(3600);
                raw_call(
                    channel,
                    "PlaceHold",
                    place_hold(&format!("h{i}"), account, 1, ttl),
                )
                .await
            } else {
                raw_call(channel, "Charge", charge(&format!("c{i}"), account, 1)).await
            }
        }
    });
    for call in calls {
        call.await.unwrap().expect("served");
    }
    let mut conn = db.sql().await;
    conn.query_drop("ANALYZE TABLE accounts, entries, holds, idempotency_keys")
        .await
        .unwrap();
    assert_indexed(&db, "a populated ledger").await;
    assert_numbering_by_key(&db, "a populated ledger").await;
    until_sequenced(&db, std::time::Duration::from_secs(30)).await;
    assert_stream_reads_indexed(&db, &accounts).await;
}

/// A small ledger, each of whose commits is in the assigner's write: the
/// optimizer's cheapest plan for it is then a scan of the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_assigner_writes_its_numbers_by_key_on_a_small_ledger() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    for i in 0..5 {
        client
            .charge(charge(&format!("c{i}"), account, 1))
            .await
            .unwrap();
    }
    assert_numbering_by_key(&db, "a small ledger").await;
}

/// The assigner's write of its numbers reaches the commits by primary key: as a
/// scan it would wait on every commit not yet committed.
async fn assert_numbering_by_key(db: &TestDb, when: &str) {
    let mut conn = tabular_plans(db).await;
    let commits: Vec<u64> = conn
        .query("SELECT commit_id FROM stream_commits ORDER BY commit_id LIMIT 8")
        .await
        .unwrap();
    assert!(!commits.is_empty(), "{when}: commits to number");
    let numbers: Vec<(u64, u64)> = commits.iter().map(|&id| (id, id)).collect();
    // The lease's own owner and number: with others, MySQL finds the guard false
    // before it plans and shows no table at all, so a round that moved the
    // number meanwhile means reading them again.
    let mut planned = None;
    for _ in 0..50 {
        let (next, owner): (u64, Vec<u8>) = conn
            .query_first("SELECT next_sequence, owner FROM ledger_stream WHERE id = 1")
            .await
            .unwrap()
            .unwrap();
        let sql = ledger::db::stream::numbering_sql(&numbers, next, &owner);
        let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
        let row = plan.into_iter().find(|row| {
            row.get::<Option<String>, _>("table").flatten().as_deref() == Some("stream_commits")
        });
        if let Some(row) = row {
            planned = Some((sql, row));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (sql, row) = planned.expect("a plan for stream_commits");
    let access: Option<String> = row.get("type").flatten();
    let key: Option<String> = row.get("key").flatten();
    assert!(
        access.as_deref().is_some_and(|a| INDEXED.contains(&a))
            && key.as_deref() == Some("PRIMARY"),
        "{when}: {sql}: read by {access:?} through {key:?}"
    );
}

/// The assigner's reads on a populated ledger whose entries are numbered: the
/// unnumbered commits through the index of pending commits (its NULLs), the
/// numbered predecessors by the accounts' journal index and their commits by
/// primary key; neither scans the journal.
async fn assert_stream_reads_indexed(db: &TestDb, accounts: &[u64]) {
    let mut conn = tabular_plans(db).await;
    let predecessors: Vec<(u64, u64)> = accounts.iter().map(|&a| (a, 1)).collect();
    let reads: [(String, &[(&str, &str)]); 2] = [
        (
            ledger::db::stream::unnumbered_sql(ledger::db::stream::ROUND_LIMIT),
            &[("stream_commits", "stream_commits_sequence")],
        ),
        (
            ledger::db::stream::numbered_sql(&predecessors),
            &[("e", "entries_account_seq"), ("c", "PRIMARY")],
        ),
    ];
    for (sql, indexes) in reads {
        let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
        assert_eq!(plan.len(), indexes.len(), "{sql}");
        for row in plan {
            let table: Option<String> = row.get("table").flatten();
            let access: Option<String> = row.get("type").flatten();
            let key: Option<String> = row.get("key").flatten();
            let extra: Option<String> = row.get("Extra").flatten();
            let index = indexes
                .iter()
                .find(|(t, _)| table.as_deref() == Some(*t))
                .map(|(_, index)| *index);
            assert!(
                access.as_deref().is_some_and(|a| INDEXED.contains(&a))
                    && key.is_some()
                    && key.as_deref() == index,
                "{sql}: {table:?} read by {access:?} through {key:?} ({extra:?})"
            );
        }
    }
}

/// ListHolds reads the account's open holds through `holds_by_account` (account,
/// state, expiry), a first page and a later one alike, and a hold's page finds
/// its capture entry by the hold's primary key and the entry's key index: on a
/// ledger where other accounts hold many holds, none of these scans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_holds_and_a_capture_are_read_through_an_index() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let account = app.funded_account("USD", 1_000_000).await;
    let mut accounts = vec![account];
    for _ in 0..8 {
        accounts.push(app.funded_account("USD", 1_000_000).await);
    }
    let hour = std::time::Duration::from_secs(3600);
    let mut captured = 0;
    for i in 0..200 {
        let target = accounts[i % accounts.len()];
        let hold = client
            .place_hold(place_hold(&format!("h{i}"), target, 1, hour))
            .await
            .unwrap()
            .into_inner()
            .hold
            .unwrap();
        if i % 10 == 0 {
            client
                .capture_hold(ledger::proto::pb::CaptureHoldRequest {
                    idempotency_key: format!("c{i}"),
                    hold_id: hold.hold_id,
                    amount: 1,
                    description: String::new(),
                    ..Default::default()
                })
                .await
                .unwrap();
            captured = hold.hold_id;
        }
    }
    let mut conn = tabular_plans(&db).await;
    conn.query_drop("ANALYZE TABLE holds, entries")
        .await
        .unwrap();
    for (name, sql) in ledger::db::plans::hold_reads(account, captured) {
        let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
        assert!(!plan.is_empty(), "{name}");
        for row in plan {
            let table: Option<String> = row.get("table").flatten();
            let access: Option<String> = row.get("type").flatten();
            let key: Option<String> = row.get("key").flatten();
            let expected = match table.as_deref() {
                Some("holds") => "holds_by_account",
                Some("h") => "PRIMARY",
                Some("e") => "entries_key",
                other => panic!("{name} reads {other:?}: {sql}"),
            };
            assert!(
                access.as_deref().is_some_and(|a| INDEXED.contains(&a))
                    && key.as_deref() == Some(expected),
                "{name}: {table:?} read by {access:?} through {key:?}: {sql}"
            );
        }
    }
}

/// The reads of metadata on a ledger whose pairs are common and rare: a search
/// and an account listing start from the index of pairs, reach entries and
/// accounts by their keys, and read the stream's commits by primary key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metadata_reads_use_an_index() {
    use std::collections::BTreeMap;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 1_000_000).await;
    let mut client = app.client().await;
    for i in 0..40 {
        let rare = if i % 10 == 0 { "yes" } else { "no" };
        let metadata = BTreeMap::from([
            ("shop".to_owned(), "north".to_owned()),
            ("rare".to_owned(), rare.to_owned()),
        ]);
        let tagged = ledger::proto::pb::ChargeRequest {
            metadata,
            ..charge(&format!("m{i}"), account, 1)
        };
        client.charge(tagged).await.unwrap();
    }
    for i in 0..8 {
        let ttl = std::time::Duration::from_secs(600);
        let other = app.funded_account("USD", 10).await;
        client
            .place_hold(place_hold(&format!("h{i}"), other, 1, ttl))
            .await
            .unwrap();
    }
    until_sequenced(&db, std::time::Duration::from_secs(30)).await;
    let mut conn = tabular_plans(&db).await;
    conn.query_drop(
        "ANALYZE TABLE metadata, metadata_pairs, search_entries, entries, accounts, holds, stream_commits",
    )
    .await
    .unwrap();
    let pairs = ledger::ledger::Metadata::stored([
        ("rare".to_owned(), "yes".to_owned()),
        ("shop".to_owned(), "north".to_owned()),
    ]);
    let keys = vec![(Vec::new(), b"m0".to_vec()), (Vec::new(), b"m1".to_vec())];
    let commits: Vec<u64> = conn
        .query("SELECT commit_id FROM stream_commits LIMIT 4")
        .await
        .unwrap();
    assert_each_read_indexed(
        &mut conn,
        ledger::db::plans::metadata_reads(&pairs, account, &keys, &commits),
        &[],
    )
    .await;
}

/// Balances at a point (SPEC 3.10): the binary search's look-ups, the balance
/// at a place and the lock for a time each reach their rows by an index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_reads_use_an_index() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 1_000_000).await;
    let mut client = app.client().await;
    for i in 0..40 {
        client
            .charge(charge(&format!("b{i}"), account, 1))
            .await
            .unwrap();
    }
    until_sequenced(&db, std::time::Duration::from_secs(30)).await;
    let mut conn = tabular_plans(&db).await;
    conn.query_drop("ANALYZE TABLE entries, accounts, account_limits, stream_commits")
        .await
        .unwrap();
    // `s` is the search's own few rows: one per step.
    assert_each_read_indexed(&mut conn, ledger::db::plans::balance_reads(account), &["s"]).await;
}

/// Reversals (SPEC 3.12): the originals' entries are read by key on
/// `entries_key`, and whether each was reversed by the `reversals` primary key,
/// for an original reversed, one not, and a key never used. Over ten accounts:
/// with two, MySQL joins their two rows of limits by a scan, the cheapest plan
/// for a table that small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reversal_reads_use_an_index() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut accounts = Vec::new();
    for _ in 0..10 {
        accounts.push(app.funded_account("USD", 1_000).await);
    }
    let mut client = app.client().await;
    for i in 0..40 {
        let (from, to) = (accounts[i % 10], accounts[(i + 1) % 10]);
        client
            .transfer(transfer(&format!("t{i}"), from, to, 1))
            .await
            .unwrap();
        if i % 2 == 0 {
            client
                .reverse(reverse(&format!("r{i}"), &format!("t{i}")))
                .await
                .unwrap();
        }
    }
    let mut conn = tabular_plans(&db).await;
    conn.query_drop("ANALYZE TABLE entries, reversals, stream_commits, account_limits")
        .await
        .unwrap();
    let originals: Vec<ScopedKey> = ["t0", "t1", "never-used"]
        .into_iter()
        .map(|k| ScopedKey {
            namespace: Namespace::default(),
            key: IdempotencyKey::parse("k", k.into()).unwrap(),
        })
        .collect();
    assert_each_read_indexed(
        &mut conn,
        ledger::db::plans::reversal_reads(&originals),
        &[],
    )
    .await;
}

/// Each of `reads` (a name and its statement, values written in) reaches every
/// table it reads through an index. Not read, so not held to it: a plan with no
/// matching row, a MIN or MAX the optimizer answered from an index's end, a
/// derived table (the few rows its own indexed read made), and the statement's
/// own common table expressions, named in `own`.
async fn assert_each_read_indexed(
    conn: &mut mysql_async::Conn,
    reads: Vec<(&'static str, String)>,
    own: &[&str],
) {
    for (name, sql) in reads {
        let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
        for row in plan {
            let table: Option<String> = row.get("table").flatten();
            let access: Option<String> = row.get("type").flatten();
            let extra: Option<String> = row.get("Extra").flatten();
            let Some(read) = table.as_deref() else {
                continue;
            };
            let nothing_read = extra
                .as_deref()
                .is_some_and(|e| e.contains("Impossible") || e.contains("optimized away"));
            if nothing_read || read.starts_with('<') || own.contains(&read) {
                continue;
            }
            assert!(
                access.as_deref().is_some_and(|a| INDEXED.contains(&a)),
                "{name} reads {table:?} by {access:?} ({extra:?}): {sql}"
            );
        }
    }
}
