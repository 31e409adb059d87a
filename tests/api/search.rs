//! The search index (SPEC 3.11): pages read from `search_entries` are the
//! entries the journal and the pairs say, however deep; the migration fills it
//! for a ledger from before it; rounds index what rounds of an older version
//! numbered without it; and a search stops its statements on the server when
//! its deadline comes.

use std::fmt::Write as _;
use std::time::Duration;

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::Code;

use crate::support::metadata::{pairs, search, tagged};
use crate::support::server::until;
use crate::support::{
    TestApp, TestDb, assert_audit_passes, leg, post, until_lease_free, until_sequenced,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const SEQUENCED_WITHIN: Duration = Duration::from_secs(30);
const INDEX_UP: &str = include_str!("../../migrations/2026-12-09-000001_search_index/up.sql");
const INDEX_DOWN: &str = include_str!("../../migrations/2026-12-09-000001_search_index/down.sql");
/// Every row of the index, in one order.
const INDEX_ROWS: &str = "SELECT HEX(name), HEX(value), sequence, account_id, entry_id \
    FROM search_entries ORDER BY name, value, sequence";

/// Until the search index holds every number assigned: it is written after the
/// round that numbers a commit with metadata, in a transaction of its own.
async fn until_indexed(db: &TestDb) {
    let mut conn = db.sql().await;
    until("the search index reaches every number", async || {
        let caught_up: Option<u64> = conn
            .query_first(
                "SELECT CAST(i.next_sequence >= s.next_sequence AS UNSIGNED) \
                 FROM search_index i, ledger_stream s WHERE i.id = 1 AND s.id = 1",
            )
            .await
            .unwrap();
        caught_up == Some(1)
    })
    .await;
}

/// A ledger of tagged posts and charges on two accounts: 40 posts of three legs
/// (six entries each) tagged `shop=north`, every other one also `parity=even`;
/// 20 charges tagged `shop=south`, and 10 untagged. Returns the accounts.
async fn tagged_ledger(app: &TestApp) -> (u64, u64) {
    let a = app.funded_account("USD", 1_000_000).await;
    let b = app.funded_account("USD", 1_000_000).await;
    let mut client = app.client().await;
    for i in 0..40 {
        let mut list = vec![("shop", "north")];
        if i % 2 == 0 {
            list.push(("parity", "even"));
        }
        let request = pb::PostRequest {
            metadata: pairs(&list),
            ..post(
                &format!("p-{i}"),
                vec![leg(a, b, 3), leg(b, a, 2), leg(a, b, 1)],
            )
        };
        client.post(request).await.unwrap();
        if i % 2 == 0 {
            let charge = tagged(&format!("c-{i}"), b, 1, &[("shop", "south")]);
            client.charge(charge).await.unwrap();
        }
        if i % 4 == 0 {
            let plain = tagged(&format!("u-{i}"), a, 1, &[]);
            client.charge(plain).await.unwrap();
        }
    }
    (a, b)
}

/// Every page of a search of `list` (of `account`, 0 for all), `size` a page.
async fn paged(client: &mut Client, list: &[(&str, &str)], account: u64, size: i32) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .search_entries(search(list, account, size, &token))
            .await
            .unwrap()
            .into_inner();
        ids.extend(page.entries.iter().map(|e| e.entry_id));
        if page.next_page_token.is_empty() {
            return ids;
        }
        token = page.next_page_token;
    }
}

/// What the journal says a search finds: the numbered entries whose calls hold
/// every pair of `list`, of `account` (0: all), in sequence order; read from
/// the pairs, the entries and their commits, not from the index.
async fn from_journal(db: &TestDb, list: &[(&str, &str)], account: u64) -> Vec<u64> {
    let mut held = String::new();
    for (name, value) in list {
        let _ = write!(
            held,
            " AND EXISTS (SELECT 1 FROM metadata_pairs p WHERE p.name = '{name}' \
             AND p.value = '{value}' AND p.namespace = e.namespace \
             AND p.idempotency_key = e.idempotency_key)"
        );
    }
    let of = if account == 0 {
        String::new()
    } else {
        format!(" AND e.account_id = {account}")
    };
    db.sql()
        .await
        .query(format!(
            "SELECT e.entry_id FROM entries e JOIN stream_commits c ON c.commit_id = e.commit_id \
             WHERE c.first_sequence IS NOT NULL{held}{of} \
             ORDER BY c.first_sequence + e.commit_pos"
        ))
        .await
        .unwrap()
}

/// Pages of 7, deep into a pair's matches, of every account and of one, by one
/// pair and by two: each search finds what the journal says, in its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_page_of_a_search_is_what_the_journal_says() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let (a, b) = tagged_ledger(&app).await;
    let mut client = app.client().await;
    let north = [("shop", "north")];
    let even = [("shop", "north"), ("parity", "even")];
    let south = [("shop", "south")];
    for (list, account) in [
        (&north[..], 0),
        (&north[..], a),
        (&even[..], 0),
        (&even[..], b),
        (&south[..], 0),
        (&south[..], a),
    ] {
        let found = paged(&mut client, list, account, 7).await;
        let expected = from_journal(&db, list, account).await;
        assert_eq!(found, expected, "{list:?} of {account}");
    }
    assert_eq!(from_journal(&db, &north, 0).await.len(), 40 * 6);
    assert_audit_passes(&db.url).await;
}

/// The migration on a ledger from before it: its `down.sql` takes the index
/// away, and its `up.sql` fills it from the journal and the pairs with exactly
/// the rows the rounds had written; searches then find what they found.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_index_migration_fills_the_index_of_a_ledger_from_before_it() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let (a, _) = tagged_ledger(&app).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    until_indexed(&db).await;
    let mut client = app.client().await;
    let before = paged(&mut client, &[("shop", "north")], a, 50).await;
    drop(client);
    drop(app);
    until_lease_free(&db).await;
    let mut conn = db.sql().await;
    let rows: Vec<(String, String, u64, u64, u64)> = conn.query(INDEX_ROWS).await.unwrap();
    assert_eq!(
        rows.len(),
        40 * 6 + 20 * 6 + 20,
        "one row per entry and pair"
    );

    conn.query_drop(INDEX_DOWN).await.unwrap();
    let tables: u64 = conn
        .query_first(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME IN ('search_entries', 'search_index')",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tables, 0, "down.sql removed the index");
    conn.query_drop(INDEX_UP).await.unwrap();
    let again: Vec<(String, String, u64, u64, u64)> = conn.query(INDEX_ROWS).await.unwrap();
    assert_eq!(again, rows, "up.sql wrote the rows the rounds wrote");
    let reach: Option<(u64, u64)> = conn
        .query_first("SELECT i.next_sequence, s.next_sequence FROM search_index i, ledger_stream s")
        .await
        .unwrap();
    let (indexed, next) = reach.unwrap();
    assert_eq!(indexed, next, "the index reaches every number");
    assert_audit_passes(&db.url).await;

    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    assert_eq!(
        paged(&mut client, &[("shop", "north")], a, 50).await,
        before
    );
}

/// Entries numbered by rounds that did not index them (as an older version's
/// do, in a rolling upgrade): the index is behind, a search waits for it, and
/// the next rounds index them; the search finds every one and the index is
/// whole again. Forced: the rows are taken away and the index's reach moved
/// back under the lease row's lock, as such rounds would leave them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_older_rounds_numbered_is_indexed_by_the_next_rounds() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let (a, _) = tagged_ledger(&app).await;
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    until_indexed(&db).await;
    let mut conn = db.sql().await;
    let rows: Vec<(String, String, u64, u64, u64)> = conn.query(INDEX_ROWS).await.unwrap();
    // Where a round of this version would have left off: a commit's first.
    let keep: u64 = conn
        .query_first(
            "SELECT first_sequence FROM stream_commits WHERE first_sequence IS NOT NULL \
             ORDER BY first_sequence LIMIT 1 OFFSET 10",
        )
        .await
        .unwrap()
        .unwrap();
    conn.query_drop(format!(
        "BEGIN; SELECT next_sequence FROM ledger_stream WHERE id = 1 FOR UPDATE; \
         DELETE FROM search_entries WHERE sequence >= {keep}; \
         UPDATE search_index SET next_sequence = {keep} WHERE id = 1; COMMIT"
    ))
    .await
    .unwrap();

    let mut client = app.client().await;
    let found = paged(&mut client, &[("shop", "north")], a, 13).await;
    assert_eq!(found, from_journal(&db, &[("shop", "north")], a).await);
    let again: Vec<(String, String, u64, u64, u64)> = conn.query(INDEX_ROWS).await.unwrap();
    assert_eq!(again, rows, "the rounds wrote back every row");
    assert_audit_passes(&db.url).await;
}

/// The count of statements the server stopped for time, on either engine
/// (MariaDB's `Max_statement_time_exceeded`, MySQL's
/// `Max_execution_time_exceeded`).
async fn stopped_for_time(conn: &mut mysql_async::Conn) -> u64 {
    let rows: Vec<(String, u64)> = conn
        .query("SHOW GLOBAL STATUS LIKE 'Max\\_%\\_time\\_exceeded'")
        .await
        .unwrap();
    rows.iter().map(|(_, n)| n).sum()
}

/// A search whose statement has far more to read than its deadline allows (a
/// million rows of its driving pair whose calls lack its other pair) is
/// answered DEADLINE_EXCEEDED, and the server itself stops the statement: its
/// count of statements stopped for time grows, and the statement leaves the
/// processlist.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_search_past_its_deadline_is_stopped_on_the_server() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client
        .charge(tagged("one", id, 1, &[("k", "v")]))
        .await
        .unwrap();
    for key in ["two", "three"] {
        let other = tagged(key, id, 1, &[("z", "w")]);
        client.charge(other).await.unwrap();
    }
    until_sequenced(&db, SEQUENCED_WITHIN).await;
    until_indexed(&db).await;
    let mut conn = db.sql().await;
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
        UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
        UNION ALL SELECT 8 UNION ALL SELECT 9)";
    // A million rows of the charge tagged k=v, far past every number
    // assigned: the search passes over each, its call lacking z=w.
    conn.query_drop(format!(
        "INSERT INTO search_entries (name, value, sequence, account_id, entry_id) \
         SELECT 'k', 'v', 1000000000 + a.d + 10 * b.d + 100 * c.d + 1000 * d.d \
           + 10000 * e.d + 100000 * f.d, s.account_id, s.entry_id \
         FROM {digits} a, {digits} b, {digits} c, {digits} d, {digits} e, {digits} f, \
           (SELECT account_id, entry_id FROM search_entries WHERE name = 'k') s"
    ))
    .await
    .unwrap();
    // And the stream's numbers moved past them, so the search reads them all.
    conn.query_drop(
        "UPDATE ledger_stream s, search_index i \
         SET s.next_sequence = 2000000000, i.next_sequence = 2000000000 \
         WHERE s.id = 1 AND i.id = 1",
    )
    .await
    .unwrap();
    let stopped = stopped_for_time(&mut conn).await;

    let mut request = tonic::Request::new(search(&[("k", "v"), ("z", "w")], 0, 0, ""));
    // Well below what the scan takes (about half a second on an idle machine),
    // so the server's bound, not the scan's end, ends it.
    request.set_timeout(Duration::from_millis(250));
    let status = client.search_entries(request).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");

    let running = "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
        WHERE INFO LIKE '%FROM search_entries s FORCE INDEX%' AND ID <> CONNECTION_ID()";
    let mut ended = false;
    for _ in 0..500 {
        let now = stopped_for_time(&mut conn).await;
        let left: u64 = conn.query_first(running).await.unwrap().unwrap();
        if now > stopped && left == 0 {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ended, "the server stopped the search's statement for time");
}
