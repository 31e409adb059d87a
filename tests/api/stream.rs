//! WatchEntries (SPEC 2, 3.8): the backlog and then live entries in sequence
//! order, resuming without a repeat or a gap, one account's stream, a reader that
//! stops reading, and many watchers on one tail. Each test waits for the
//! service's assigner to number what it wrote (`number_entries`).

use std::time::Duration;

use ledger::grpc::auth::Tokens;
use ledger::proto::pb;
use ledger::proto::pb::ledger_client::LedgerClient;
use mysql_async::prelude::Queryable as _;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Streaming};

use crate::support::server::until;
use crate::support::{
    Config, TestApp, TestDb, charge, number_entries, reason, token_line, transfer, with_token,
};

/// Bounds a wait that ends at once when the service works, so a broken stream
/// fails its test instead of hanging the run.
const PATIENCE: Duration = Duration::from_secs(60);

fn request(after_sequence: u64, account_id: u64) -> pb::WatchEntriesRequest {
    pb::WatchEntriesRequest {
        after_sequence,
        account_id,
    }
}

async fn watch(
    client: &mut LedgerClient<Channel>,
    after: u64,
    account: u64,
) -> Streaming<pb::Entry> {
    client
        .watch_entries(request(after, account))
        .await
        .expect("the stream opens")
        .into_inner()
}

async fn next(stream: &mut Streaming<pb::Entry>) -> pb::Entry {
    tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the next entry arrives")
        .expect("the stream goes on")
        .expect("the stream is not over")
}

async fn get_entry(client: &mut LedgerClient<Channel>, entry_id: u64) -> pb::Entry {
    client
        .get_entry(pb::GetEntryRequest { entry_id })
        .await
        .unwrap()
        .into_inner()
}

/// Polls until `n` watchers of `app` have caught up and follow its tail.
async fn until_following(app: &TestApp, n: usize) {
    until(&format!("{n} watchers catch up"), async || {
        app.persistence.watch_stats().following >= n
    })
    .await;
}

/// The next `count` entries of `stream`: sequences `after + 1 ..= after + count`,
/// each as GetEntry reads it.
async fn expect_run(
    stream: &mut Streaming<pb::Entry>,
    client: &mut LedgerClient<Channel>,
    after: u64,
    count: u64,
) {
    for sequence in after + 1..=after + count {
        let entry = next(stream).await;
        assert_eq!(entry.sequence, sequence, "{entry:?}");
        assert_eq!(entry, get_entry(client, entry.entry_id).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_then_live_entries_arrive_in_sequence_order() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 1000).await;
    let b = app.funded_account("USD", 0).await;
    client.charge(charge("c1", a, 10)).await.unwrap();
    client.transfer(transfer("t1", a, b, 20)).await.unwrap();
    client.charge(charge("c2", b, 5)).await.unwrap();
    let backlog = number_entries(&db).await;
    assert_eq!(backlog, 5);

    let mut stream = watch(&mut client, 0, 0).await;
    expect_run(&mut stream, &mut client, 0, backlog).await;
    until_following(&app, 1).await;

    client.transfer(transfer("t2", b, a, 7)).await.unwrap();
    client.charge(charge("c3", a, 1)).await.unwrap();
    let live = number_entries(&db).await;
    assert_eq!(live, backlog + 3);
    expect_run(&mut stream, &mut client, backlog, live - backlog).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumes_after_its_sequence_without_a_repeat_or_a_gap() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 1000).await;
    for i in 0..5 {
        client.charge(charge(&format!("c{i}"), a, 1)).await.unwrap();
    }
    let n = number_entries(&db).await;
    assert_eq!(n, 6);

    let mut from_three = watch(&mut client, 3, 0).await;
    let mut at_the_end = watch(&mut client, n, 0).await;
    let mut past_the_end = watch(&mut client, n + 1, 0).await;
    expect_run(&mut from_three, &mut client, 3, n - 3).await;
    until_following(&app, 3).await;

    client.charge(charge("after", a, 1)).await.unwrap();
    client.charge(charge("after-2", a, 1)).await.unwrap();
    assert_eq!(number_entries(&db).await, n + 2);
    expect_run(&mut from_three, &mut client, n, 2).await;
    expect_run(&mut at_the_end, &mut client, n, 2).await;
    expect_run(&mut past_the_end, &mut client, n + 1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_stream_has_that_accounts_entries_and_only_those() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 1000).await;
    let b = app.funded_account("USD", 1000).await;
    for i in 0..4 {
        client.charge(charge(&format!("b{i}"), b, 1)).await.unwrap();
        client
            .transfer(transfer(&format!("ab{i}"), a, b, 2))
            .await
            .unwrap();
    }
    number_entries(&db).await;
    let journal = client
        .list_entries(pb::ListEntriesRequest {
            account_id: a,
            page_size: 100,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(journal.len(), 5);

    let mut stream = watch(&mut client, 0, a).await;
    for expected in &journal {
        assert_eq!(&next(&mut stream).await, expected);
    }
    until_following(&app, 1).await;

    client.charge(charge("b-live", b, 1)).await.unwrap();
    client.charge(charge("a-live", a, 1)).await.unwrap();
    number_entries(&db).await;
    let live = next(&mut stream).await;
    assert_eq!(
        (live.account_id, live.idempotency_key.as_str()),
        (a, "a-live")
    );
    assert_eq!(live, get_entry(&mut client, live.entry_id).await);

    let unknown = client.watch_entries(request(0, 999_999)).await.unwrap_err();
    assert_eq!(
        (unknown.code(), reason(&unknown).as_str()),
        (Code::NotFound, "ACCOUNT_NOT_FOUND")
    );
}

/// WatchEntries is granted like any read: a client not granted it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_needs_its_grant() {
    let db = TestDb::new();
    let lines = token_line("follower", "follower-token").replace('\n', " WatchEntries\n")
        + &token_line("auditor", "auditor-token").replace('\n', " ListEntries\n");
    let app = TestApp::spawn_with(
        &db,
        Config {
            auth: Some(Tokens::parse(&lines).unwrap()),
            ..Config::default()
        },
    )
    .await;
    let mut follower = with_token(app.channel().await, "follower-token");
    let mut auditor = with_token(app.channel().await, "auditor-token");
    assert!(follower.watch_entries(request(0, 0)).await.is_ok());
    let refused = auditor.watch_entries(request(0, 0)).await.unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::PermissionDenied, "METHOD_NOT_ALLOWED")
    );
}

/// A stream never ends by itself: shutdown ends it, telling the watcher to
/// resume elsewhere, instead of holding up the drain for the whole grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_streams_with_unavailable() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let mut stream = watch(&mut client, 0, 0).await;
    until_following(&app, 1).await;
    drop(app);
    let ended = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the stream ends")
        .unwrap_err();
    assert_eq!(
        (ended.code(), reason(&ended).as_str()),
        (Code::Unavailable, "SHUTTING_DOWN")
    );
}

/// The resident set of this process (the service runs in it), in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Writes `count` credits of 1 to a fresh account straight into the database, in
/// the shape the service writes them (ids from the shared blocks, the account's
/// journal numbers, balance and count), without their key rows: the stream reads
/// entries only.
async fn bulk_credits(db: &TestDb, account: u64, count: u64) {
    let mut conn = db.sql().await;
    conn.query_drop("BEGIN").await.unwrap();
    let first: u64 = conn
        .query_first("SELECT next_id FROM id_blocks WHERE name = 'entries' FOR UPDATE")
        .await
        .unwrap()
        .unwrap();
    conn.exec_drop(
        "UPDATE id_blocks SET next_id = next_id + ? WHERE name = 'entries'",
        (count,),
    )
    .await
    .unwrap();
    let description = "d".repeat(400);
    for chunk in (1..=count).collect::<Vec<_>>().chunks(1000) {
        let rows: Vec<String> = chunk
            .iter()
            .map(|n| {
                format!(
                    "({id}, {account}, {n}, 0, 0, 2, 1, 'USD', {n}, '', 'bulk-{n}', \
                     '{description}', UTC_TIMESTAMP(6), {id}, 0)",
                    id = first + n - 1
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO entries (entry_id, account_id, account_seq, leg, post_leg, kind, \
             amount, currency, balance_after, namespace, idempotency_key, description, \
             created_at, commit_id, commit_pos) VALUES {}",
            rows.join(", ")
        ))
        .await
        .unwrap();
        let commits: Vec<String> = chunk
            .iter()
            .map(|n| {
                format!(
                    "({id}, 1, '{account}:{n}:{n}', UTC_TIMESTAMP(6))",
                    id = first + n - 1
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO stream_commits (commit_id, entry_count, accounts, created_at) VALUES {}",
            commits.join(", ")
        ))
        .await
        .unwrap();
    }
    conn.exec_drop(
        "UPDATE accounts SET balance = ?, entry_count = ? WHERE account_id = ?",
        (count, count, account),
    )
    .await
    .unwrap();
    conn.query_drop("COMMIT").await.unwrap();
}

/// A reader that stops reading while 10,000 entries are numbered, then reads on:
/// it gets every one exactly once, in order. The tail publishes them in batches of
/// 1,000, more than its channel keeps, while the watcher waits for room in the
/// stream (its reader's window is small, so the stream holds a few hundred
/// entries): the watcher lags, goes back to the database, and nothing grows with
/// the backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_every_entry_once_and_the_server_buffers_nothing() {
    const COUNT: u64 = 10_000;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 0).await;
    let channel = Endpoint::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let mut client = LedgerClient::new(channel);
    let mut stream = watch(&mut client, 0, 0).await;
    until_following(&app, 1).await;
    let before = resident_kib();

    bulk_credits(&db, account, COUNT).await;
    assert_eq!(number_entries(&db).await, COUNT);
    until("the tail publishes every entry", async || {
        app.persistence.watch_stats().published >= COUNT
    })
    .await;
    assert_eq!(app.persistence.watch_stats().published, COUNT);

    for sequence in 1..=COUNT {
        let entry = next(&mut stream).await;
        assert_eq!(
            (entry.sequence, entry.balance_after),
            (sequence, i64::try_from(sequence).unwrap())
        );
    }
    let after = resident_kib();
    let stats = app.persistence.watch_stats();
    assert!(stats.catch_ups >= 1, "the watcher never lagged: {stats:?}");
    assert!(
        after < before + 64 * 1024,
        "the resident set grew from {before} KiB to {after} KiB"
    );
}

/// 64 idle watchers cost the database what one does: one read per tick of the
/// shared tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watchers_share_one_tail() {
    const WATCHERS: usize = 64;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 100).await;
    number_entries(&db).await;
    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        streams.push(watch(&mut client, 0, 0).await);
    }
    for stream in &mut streams {
        assert_eq!(next(stream).await.account_id, a);
    }
    until_following(&app, WATCHERS).await;

    let start = app.persistence.watch_stats();
    assert_eq!(start.watchers, WATCHERS);
    let mut end = start;
    until("the tail ticks 100 times", async || {
        end = app.persistence.watch_stats();
        end.ticks >= start.ticks + 100
    })
    .await;
    let (ticks, reads) = (end.ticks - start.ticks, end.reads - start.reads);
    // The read of a tick counted before `start` may land after it.
    assert!(reads <= ticks + 1, "{reads} reads in {ticks} ticks");

    drop(streams);
    until("every watcher is gone", async || {
        app.persistence.watch_stats().watchers == 0
    })
    .await;
}

/// Access types that read rows through an index.
const INDEXED: &[&str] = &["const", "eq_ref", "ref", "range", "system"];

/// The stream's reads reach their rows through an index, in sequence order, on a
/// ledger of 2,000 numbered entries and a few not numbered yet: from the start, from
/// the middle and from the end, of every account and of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_reads_use_an_index() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let small = app.funded_account("USD", 100).await;
    let bulk = app.funded_account("USD", 0).await;
    bulk_credits(&db, bulk, 2000).await;
    let numbered = number_entries(&db).await;
    for i in 0..3 {
        client
            .charge(charge(&format!("later-{i}"), small, 1))
            .await
            .unwrap();
    }
    let mut conn = db.sql().await;
    for (account, after) in [(small, 0), (bulk, 0), (bulk, 1000), (small, numbered)] {
        for (name, sql) in ledger::db::plans::stream_reads(account, after, numbered) {
            let plan: Vec<mysql_async::Row> = conn.query(format!("EXPLAIN {sql}")).await.unwrap();
            for row in plan {
                let table: Option<String> = row.get("table").flatten();
                let access: Option<String> = row.get("type").flatten();
                let key: Option<String> = row.get("key").flatten();
                let extra: String = row
                    .get::<Option<String>, _>("Extra")
                    .flatten()
                    .unwrap_or_default();
                if table.is_none() || extra.contains("Impossible") {
                    continue;
                }
                assert!(
                    access.as_deref().is_some_and(|a| INDEXED.contains(&a))
                        && !extra.contains("filesort"),
                    "{name} reads {table:?} by {access:?} on {key:?} ({extra}): {sql}"
                );
            }
        }
    }
}

/// Reflection describes the RPC as server streaming, so grpcurl can call it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_shows_watch_entries_as_a_server_stream() {
    use prost::Message as _;
    use tonic_reflection::pb::v1 as reflection;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client =
        reflection::server_reflection_client::ServerReflectionClient::new(app.channel().await);
    let ask = reflection::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            reflection::server_reflection_request::MessageRequest::FileContainingSymbol(
                "ledger.v1.Ledger".into(),
            ),
        ),
    };
    let mut answers = client
        .server_reflection_info(tokio_stream::iter([ask]))
        .await
        .unwrap()
        .into_inner();
    let Some(reflection::server_reflection_response::MessageResponse::FileDescriptorResponse(
        files,
    )) = answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("a file descriptor");
    };
    let method = files
        .file_descriptor_proto
        .iter()
        .map(|bytes| prost_types::FileDescriptorProto::decode(bytes.as_slice()).unwrap())
        .flat_map(|file| file.service)
        .flat_map(|service| service.method)
        .find(|m| m.name() == "WatchEntries")
        .expect("WatchEntries is described");
    assert_eq!(method.input_type(), ".ledger.v1.WatchEntriesRequest");
    assert_eq!(method.output_type(), ".ledger.v1.Entry");
    assert!(method.server_streaming() && !method.client_streaming());
}
