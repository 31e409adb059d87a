//! Group commit: calls that arrive while a writer is busy are served by one
//! transaction, and every rule of SPEC 3 still holds for each of them. Most tests
//! run one writer that waits out its batch however long it takes, and make it
//! busy on purpose (a charge parked on an account a test connection holds), so
//! the calls behind it queue and form the next batch. The last ones keep the
//! service's stall bound, and show a stalled batch holding up only its own
//! accounts.

use std::time::Duration;

use ledger::db::MultiPrimary;
use mysql_async::prelude::Queryable as _;
use tonic::Code;

use crate::support::server::until;
use crate::support::{
    Config, Gate, HeldCharge, TestApp, TestDb, assert_audit_passes, charge, credit, leg,
    place_hold, post, raw_call, reason, replayed, transfer, with_deadline,
};

type Client = ledger::proto::pb::ledger_client::LedgerClient<tonic::transport::Channel>;

/// One writer, which waits out a batch parked for as long as any test runs.
fn one_writer() -> Config {
    Config {
        batch_writers: Some(1),
        batch_stall: Some(Duration::from_secs(3600)),
        ..Config::default()
    }
}

/// Two charges of 60 on an account holding 100, in one batch: the second sees the
/// first's debit and is declined, as it would be one transaction later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_decides_each_call_against_the_ones_before_it() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, one_writer()).await;
    let account = app.funded_account("USD", 100).await;
    let mut holder = app.busy_writer(&db).await;
    let mut calls = Vec::new();
    for (i, key) in ["first", "second"].into_iter().enumerate() {
        let mut client = app.client().await;
        calls.push(tokio::spawn(async move {
            client.charge(charge(key, account, 60)).await
        }));
        app.until_queued(i + 1).await;
    }
    holder.query_drop("ROLLBACK").await.unwrap();

    let first = calls.remove(0).await.unwrap().expect("the first is served");
    let second = calls.remove(0).await.unwrap().unwrap_err();
    assert_eq!(first.into_inner().entry.unwrap().balance_after, 40);
    assert_eq!(reason(&second), "INSUFFICIENT_FUNDS");
    assert_eq!(db.balance(account).await, 40);
    let at = db.claimed_at(&["first", "second"]).await;
    assert_eq!(at[0], at[1], "both keys were claimed by one statement");

    // Each is replayed as its own outcome.
    let mut client = app.client().await;
    let again = client
        .charge(charge("second", account, 60))
        .await
        .unwrap_err();
    assert!(replayed(again.metadata()));
    assert_eq!(reason(&again), "INSUFFICIENT_FUNDS");
}

/// Transfers around three accounts in one batch, plain on a single server and
/// guarded as on a multi-primary node: each account ends with its balance and
/// its entry count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_updates_every_account_it_changed() {
    for multi_primary in [MultiPrimary::Auto, MultiPrimary::On] {
        let db = TestDb::new();
        let config = Config {
            multi_primary: Some(multi_primary),
            ..one_writer()
        };
        let app = TestApp::spawn_with(&db, config).await;
        let (a, b, c) = (
            app.funded_account("USD", 100).await,
            app.funded_account("USD", 100).await,
            app.funded_account("USD", 100).await,
        );
        let mut holder = app.busy_writer(&db).await;
        let mut calls = Vec::new();
        for (i, (key, from, to, amount)) in [("ab", a, b, 10), ("bc", b, c, 20), ("ca", c, a, 5)]
            .into_iter()
            .enumerate()
        {
            let mut client = app.client().await;
            calls.push(tokio::spawn(async move {
                client.transfer(transfer(key, from, to, amount)).await
            }));
            app.until_queued(i + 1).await;
        }
        holder.query_drop("ROLLBACK").await.unwrap();
        for call in calls {
            call.await.unwrap().expect("transferred");
        }

        let at = db.claimed_at(&["ab", "bc", "ca"]).await;
        assert!(at.iter().all(|t| *t == at[0]), "one batch: {at:?}");
        for (account, balance) in [(a, 95), (b, 90), (c, 115)] {
            assert_eq!(db.balance(account).await, balance, "{multi_primary:?}");
            let counted = db
                .count(&format!(
                    "SELECT COUNT(*) FROM entries WHERE account_id = {account}"
                ))
                .await;
            let stored = db
                .count(&format!(
                    "SELECT entry_count FROM accounts WHERE account_id = {account}"
                ))
                .await;
            assert_eq!(
                (stored, counted),
                (3, 3),
                "{multi_primary:?}: the credit and two legs"
            );
        }
        assert_audit_passes(&db.url).await;
    }
}

/// A batch holding a retry of a key that committed earlier replays it and serves
/// the new calls beside it: the probe inserted fewer rows than it had keys, so the
/// rows are read back to tell which is which.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_replays_a_committed_key_beside_new_ones() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, one_writer()).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    let original = client
        .charge(charge("earlier", account, 30))
        .await
        .unwrap()
        .into_inner();

    let mut holder = app.busy_writer(&db).await;
    let mut calls = Vec::new();
    for (i, (key, amount)) in [("earlier", 30), ("fresh-1", 20), ("fresh-2", 60)]
        .into_iter()
        .enumerate()
    {
        let mut client = app.client().await;
        calls.push(tokio::spawn(async move {
            client.charge(charge(key, account, amount)).await
        }));
        app.until_queued(i + 1).await;
    }
    holder.query_drop("ROLLBACK").await.unwrap();

    let fresh_2 = calls.pop().unwrap().await.unwrap().unwrap_err();
    assert_eq!(reason(&fresh_2), "INSUFFICIENT_FUNDS", "70 - 20 leaves 50");
    let fresh_1 = calls.pop().unwrap().await.unwrap().expect("served");
    assert!(!replayed(fresh_1.metadata()));
    assert_eq!(fresh_1.into_inner().entry.unwrap().balance_after, 50);
    let retry = calls.pop().unwrap().await.unwrap().expect("replayed");
    assert!(replayed(retry.metadata()));
    assert_eq!(retry.into_inner(), original);
    let at = db.claimed_at(&["fresh-1", "fresh-2"]).await;
    assert_eq!(at[0], at[1], "claimed by one batch");
    assert_eq!(db.balance(account).await, 50);
    assert_eq!(db.entries_for_key("earlier").await, 1);
}

/// A batch holding the duplicate of an original still in flight on another
/// instance waits on that key at most the lock-wait bound, then splits: the other
/// calls are served while the original is still held, and the duplicate replays
/// the original once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_in_flight_elsewhere_does_not_hold_the_batch_past_the_lock_wait() {
    let db = TestDb::new();
    let elsewhere = HeldCharge::start_with(
        &db,
        "dup",
        Config {
            batch_writers: Some(0),
            ..Config::default()
        },
    )
    .await;
    let app = TestApp::spawn_with(
        &db,
        Config {
            lock_wait: Duration::from_secs(1),
            ..one_writer()
        },
    )
    .await;
    let account = elsewhere.account;
    let another = app.funded_account("USD", 0).await;

    let mut holder = app.busy_writer(&db).await;
    let mut dup_client = app.client().await;
    let duplicate =
        tokio::spawn(async move { dup_client.charge(charge("dup", account, 10)).await });
    app.until_queued(1).await;
    let mut other_client = app.client().await;
    let other = tokio::spawn(async move { other_client.credit(credit("other", another, 5)).await });
    app.until_queued(2).await;
    holder.query_drop("ROLLBACK").await.unwrap();

    other
        .await
        .unwrap()
        .expect("served while the original is still held");
    assert!(
        !elsewhere.original.is_finished(),
        "the original is still held"
    );
    let waited = duplicate.await.unwrap().unwrap_err();
    assert_eq!(waited.code(), Code::Aborted, "{waited:?}");
    assert_eq!(reason(&waited), "IDEMPOTENCY_KEY_IN_PROGRESS");

    elsewhere.gate.release();
    let (_, first) = elsewhere.original.await.unwrap().unwrap();
    let (replay_md, replay) = raw_call(app.channel().await, "Charge", charge("dup", account, 10))
        .await
        .unwrap();
    assert!(replayed(&replay_md));
    assert_eq!(replay, first);
    assert_eq!(db.balance(account).await, 90);
    assert_eq!(db.balance(another).await, 5);
}

/// A caller whose deadline passes while its batch is held before COMMIT leaves no
/// key row, and no other call of the batch fails because of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_gone_mid_batch_costs_the_others_nothing() {
    let db = TestDb::new();
    let gate = Gate::new("late");
    let app = TestApp::spawn_with(
        &db,
        Config {
            gate: Some(gate.clone()),
            ..one_writer()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let mut holder = app.busy_writer(&db).await;
    let mut late_client = app.client().await;
    let late = tokio::spawn(async move {
        late_client
            .charge(with_deadline(
                charge("late", account, 10),
                Duration::from_millis(1500),
            ))
            .await
    });
    app.until_queued(1).await;
    let mut on_time = Vec::new();
    for i in 0..3 {
        let mut client: Client = app.client().await;
        on_time.push(tokio::spawn(async move {
            client
                .charge(charge(&format!("on-time-{i}"), account, 10))
                .await
        }));
        app.until_queued(2 + i).await;
    }
    holder.query_drop("ROLLBACK").await.unwrap();
    gate.reached().await;

    let late = late.await.unwrap().unwrap_err();
    assert_eq!(late.code(), Code::DeadlineExceeded, "{late:?}");
    for call in on_time {
        call.await.unwrap().expect("served");
    }
    db.until_no_open_transactions().await;
    assert_eq!(db.key_rows("late").await, 0, "no row without an outcome");
    assert_eq!(db.balance(account).await, 70);
    let at = db
        .claimed_at(&["on-time-0", "on-time-1", "on-time-2"])
        .await;
    assert!(
        at.iter().all(|t| *t == at[0]),
        "committed by the batch that claimed them, not rerun: {at:?}"
    );
    assert_audit_passes(&db.url).await;
}

/// Queues `calls` (key, amount) for charges on `account` behind a busy writer,
/// then frees it: they are served as one batch. Returns each call's result.
async fn one_batch_of_charges(
    app: &TestApp,
    db: &TestDb,
    account: u64,
    calls: &[(&str, i64)],
) -> Vec<Result<tonic::Response<ledger::proto::pb::ChargeReply>, tonic::Status>> {
    let mut holder = app.busy_writer(db).await;
    let mut tasks = Vec::new();
    for (i, (key, amount)) in calls.iter().enumerate() {
        let mut client = app.client().await;
        let request = charge(key, account, *amount);
        tasks.push(tokio::spawn(async move { client.charge(request).await }));
        app.until_queued(i + 1).await;
    }
    holder.query_drop("ROLLBACK").await.unwrap();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// A key reused for another request in a batch is refused alone: the calls
/// beside it commit in the batch that claimed their keys, not in reruns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reused_key_costs_the_batch_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, one_writer()).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client.charge(charge("taken", account, 10)).await.unwrap();

    let mut results = one_batch_of_charges(
        &app,
        &db,
        account,
        &[("fresh-1", 5), ("taken", 20), ("fresh-2", 5)],
    )
    .await;
    let reused = results.remove(1).unwrap_err();
    assert_eq!(reason(&reused), "IDEMPOTENCY_KEY_REUSED", "{reused:?}");
    for result in results {
        result.expect("served beside the reused key");
    }
    let at = db.claimed_at(&["fresh-1", "fresh-2"]).await;
    assert_eq!(at[0], at[1], "committed by one batch, not rerun");
    assert_eq!(db.balance(account).await, 80);
    assert_eq!(db.entries_for_key("taken").await, 1);
}

/// A retry of a key retention purged after it took effect, declined now, is
/// refused alone as expired (its decline must not be stored): the calls beside
/// it commit in the batch that claimed their keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purged_keys_decline_costs_the_batch_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, one_writer()).await;
    let account = app.funded_account("USD", 100).await;
    let mut client = app.client().await;
    client.charge(charge("big", account, 60)).await.unwrap();
    // What retention's purge does to a key that took effect.
    db.sql()
        .await
        .query_drop("DELETE FROM idempotency_keys WHERE idempotency_key = 'big'")
        .await
        .unwrap();

    let mut results = one_batch_of_charges(
        &app,
        &db,
        account,
        &[("small-1", 5), ("big", 60), ("small-2", 5)],
    )
    .await;
    let expired = results.remove(1).unwrap_err();
    assert_eq!(reason(&expired), "IDEMPOTENCY_KEY_EXPIRED", "{expired:?}");
    for result in results {
        result.expect("served beside the purged key");
    }
    let at = db.claimed_at(&["small-1", "small-2"]).await;
    assert_eq!(at[0], at[1], "committed by one batch, not rerun");
    assert_eq!(db.key_rows("big").await, 0, "the refusal stores nothing");
    assert_eq!(db.entries_for_key("big").await, 1, "charged once");
    assert_eq!(db.balance(account).await, 30);
}

/// A batch waits on a lock as long as its most patient member may, not its most
/// hurried: with a member of 1 s beside one without a deadline, the batch's lock
/// wait is not lowered to the hurried member's 1 s. Forced: an outside
/// transaction holds the account until well after that; the batch's own
/// transaction still waits, then commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hurried_member_does_not_shorten_the_batch_lock_wait() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            lock_wait: Duration::from_secs(10),
            ..one_writer()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let mut holder = app.busy_writer(&db).await;
    let mut patient_client = app.client().await;
    let patient =
        tokio::spawn(async move { patient_client.charge(charge("patient", account, 5)).await });
    app.until_queued(1).await;
    let mut hurried_client = app.client().await;
    let hurried = tokio::spawn(async move {
        hurried_client
            .charge(with_deadline(
                charge("hurried", account, 5),
                Duration::from_secs(1),
            ))
            .await
    });
    app.until_queued(2).await;
    let mut outside = db.lock_account(account).await;
    holder.query_drop("ROLLBACK").await.unwrap();
    until("the busy charge commits", async || {
        db.key_rows("busy").await > 0
    })
    .await;
    // The busy call has committed: the one transaction waiting is the batch's.
    db.until_waiting_on("accounts", 1).await;
    // The batch's transaction, the one waiting for the account (others of the
    // database may wait on other rows behind it).
    let mut waiting = Vec::new();
    until(
        "the batch's transaction waits for the account",
        async || {
            waiting = db.waiting_on_accounts().await;
            !waiting.is_empty()
        },
    )
    .await;
    let [batch] = waiting[..] else {
        panic!("one transaction waits for the account, the batch's: {waiting:?}");
    };

    let hurried = hurried.await.unwrap().unwrap_err();
    // Answered at its deadline, not after the batch: DEADLINE_EXCEEDED from its
    // handler, or, on a loaded machine, the client's own timer first (CANCELLED).
    assert!(
        matches!(hurried.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{hurried:?}"
    );
    // Past the second a lock wait lowered to the hurried member's would allow.
    // A window, not a condition: that wait would end by InnoDB's own timer,
    // which no test can move, and nothing shows it will not end until it does.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let still = db.waiting_on_accounts().await;
    assert!(
        still.contains(&batch),
        "the batch's own transaction {batch} still waits: {still:?}"
    );
    outside.query_drop("ROLLBACK").await.unwrap();

    patient.await.unwrap().expect("served by its batch");
    assert_eq!(db.key_rows("hurried").await, 0);
    assert_eq!(db.balance(account).await, 95);
}

/// A batch that deadlocks is rolled back whole and retried whole: a transaction
/// heavier than the batch (so InnoDB picks the batch as the victim) holds the
/// second of the batch's accounts, and asks for the first once the batch holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_that_deadlocks_is_retried_whole() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, one_writer()).await;
    let (one, two) = (
        app.funded_account("USD", 100).await,
        app.funded_account("USD", 100).await,
    );
    let (one, two) = (one.min(two), one.max(two));
    let mut heavy = db.sql().await;
    heavy
        .query_drop("CREATE TABLE ballast (i INT PRIMARY KEY)")
        .await
        .unwrap();
    let mut holder = app.busy_writer(&db).await;
    let mut calls = Vec::new();
    for (i, account) in [one, two].into_iter().enumerate() {
        let mut client = app.client().await;
        calls.push(tokio::spawn(async move {
            client
                .charge(charge(&format!("pair-{i}"), account, 10))
                .await
        }));
        app.until_queued(i + 1).await;
    }
    heavy.query_drop("BEGIN").await.unwrap();
    heavy
        .query_drop(
            "INSERT INTO ballast (i) SELECT a.d + 10 * b.d + 100 * c.d FROM \
             (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL \
              SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL \
              SELECT 8 UNION ALL SELECT 9) a, \
             (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL \
              SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL \
              SELECT 8 UNION ALL SELECT 9) b, \
             (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL \
              SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL \
              SELECT 8 UNION ALL SELECT 9) c",
        )
        .await
        .unwrap();
    heavy
        .exec_drop(
            "SELECT balance FROM accounts WHERE account_id = ? FOR UPDATE",
            (two,),
        )
        .await
        .unwrap();
    holder.query_drop("ROLLBACK").await.unwrap();
    // The batch holds `one` and waits for `two`; asking for `one` closes the cycle.
    db.until_waiting_on("accounts", 1).await;
    heavy
        .exec_drop(
            "SELECT balance FROM accounts WHERE account_id = ? FOR UPDATE",
            (one,),
        )
        .await
        .expect("the batch, the lighter transaction, is the deadlock's victim");
    heavy.query_drop("ROLLBACK").await.unwrap();

    for call in calls {
        call.await.unwrap().expect("served after the retry");
    }
    assert_eq!((db.balance(one).await, db.balance(two).await), (90, 90));
    for key in ["pair-0", "pair-1"] {
        assert_eq!(db.entries_for_key(key).await, 1, "{key}");
    }
}

/// The batch's COMMIT goes through and its answer is lost with the connection:
/// every member settles through its own key, and each is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_batch_commit_is_settled_key_by_key() {
    let db = TestDb::new();
    let proxy = crate::support::proxy::Proxy::start(db.server()).await;
    let app = TestApp::spawn_with(
        &db,
        Config {
            database_url: Some(proxy.url(db.server(), &db.name)),
            ..one_writer()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let mut holder = app.busy_writer(&db).await;
    let keys = ["settle-0", "settle-1", "settle-2"];
    // The batch's own text names its keys in hexadecimal; nothing else does.
    let needle = keys[0].bytes().fold(String::new(), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    });
    let forwarded = proxy.cut_after_forwarding(&needle, Duration::from_millis(50));
    let mut calls = Vec::new();
    for (i, key) in keys.into_iter().enumerate() {
        let mut client = app.client().await;
        calls.push(tokio::spawn(async move {
            client.charge(charge(key, account, 10)).await
        }));
        app.until_queued(i + 1).await;
    }
    holder.query_drop("ROLLBACK").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), forwarded.notified())
        .await
        .expect("the batch's COMMIT went out");

    for call in calls {
        let settled = call.await.unwrap().expect("settled through the key");
        assert!(
            replayed(settled.metadata()),
            "the outcome the lost COMMIT stored"
        );
    }
    for key in keys {
        assert_eq!(db.entries_for_key(key).await, 1, "{key}");
    }
    assert_eq!(db.balance(account).await, 70);
}

/// A call queued for a writer keeps its place under `--max-concurrent-calls` until
/// it leaves the queue, also after its caller gave up: held back behind a stalled
/// batch on their account, short-deadline callers fill the limit and the rest are
/// refused at once, so the queue never grows past it. Once the batch ends, the
/// abandoned calls are dropped untouched and their places come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_writer_queues_no_more_calls_than_the_limit() {
    let db = TestDb::new();
    let limit = 4;
    let app = TestApp::spawn_with(
        &db,
        Config {
            max_concurrent_calls: Some(limit),
            batch_writers: Some(1),
            ..Config::default()
        },
    )
    .await;
    let account = app.funded_account("USD", 1_000).await;
    let mut holder = app.busy_writer_on(&db, account).await;
    let mut client = app.client().await;

    let mut refused = 0;
    for i in 0..40 {
        let status = client
            .charge(with_deadline(
                charge(&format!("short-{i}"), account, 1),
                Duration::from_millis(50),
            ))
            .await
            .unwrap_err();
        match status.code() {
            // At its deadline: from its handler, or, on a loaded machine, the
            // client's own timer first (CANCELLED).
            Code::DeadlineExceeded | Code::Cancelled => {}
            Code::ResourceExhausted => refused += 1,
            other => panic!("{other:?}: {status:?}"),
        }
        assert!(
            app.persistence.waiting_calls() < limit,
            "{} calls queued past a limit of {limit}",
            app.persistence.waiting_calls()
        );
    }
    // The stalled call holds one place; three abandoned calls hold the others.
    assert_eq!(refused, 40 - (limit - 1));

    holder.query_drop("ROLLBACK").await.unwrap();
    until("places come back once the stalled batch ends", async || {
        client.charge(charge("after", account, 1)).await.is_ok()
    })
    .await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_keys WHERE idempotency_key LIKE 'short-%'")
            .await,
        0,
        "the abandoned calls left nothing"
    );
    assert_eq!(
        db.balance(account).await,
        998,
        "the stalled charge and the last"
    );
}

/// A member with little time left does not spoil the batch for one with time: a
/// batch waits for a connection only as long as its tightest member can, and when
/// none comes each member waits again alone, as long as it can. Forced: both
/// connections of a pool of 2 are held by look-ups waiting on a key an outside
/// transaction holds; the writer is busy with a call waiting for a connection
/// (1 s deadline) while a charge without a deadline and one with 1.5 s queue
/// behind it, then are served as one batch that cannot get a connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_short_of_time_costs_the_others_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            pool_size: 2,
            ..one_writer()
        },
    )
    .await;
    let account = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;

    // An outside transaction holds a key row; two look-ups of it hold the pool.
    let mut outside = db
        .hold(
            "INSERT INTO idempotency_keys (namespace, idempotency_key, method, fingerprint, \
             created_at) VALUES ('', 'outside', 3, REPEAT(x'00', 32), UTC_TIMESTAMP(6))",
        )
        .await;
    let mut lookups = Vec::new();
    for _ in 0..2 {
        let mut client = app.client().await;
        lookups.push(tokio::spawn(async move {
            client
                .lookup_key(ledger::proto::pb::LookupKeyRequest {
                    idempotency_key: "outside".into(),
                })
                .await
        }));
    }
    db.until_waiting_on("key lookups", 2).await;

    let client = app.client().await;
    let busy = {
        let mut client = client.clone();
        tokio::spawn(async move {
            client
                .charge(with_deadline(
                    charge("busy", other, 1),
                    Duration::from_secs(1),
                ))
                .await
        })
    };
    app.until_waiting_for_connection(1).await;
    let patient = {
        let mut client = client.clone();
        tokio::spawn(async move { client.charge(charge("patient", account, 5)).await })
    };
    app.until_queued(1).await;
    let hurried = {
        let mut client = client.clone();
        tokio::spawn(async move {
            client
                .charge(with_deadline(
                    charge("hurried", account, 5),
                    Duration::from_millis(1_500),
                ))
                .await
        })
    };
    app.until_queued(2).await;

    assert!(
        busy.await.unwrap().is_err(),
        "no connection for the busy call"
    );
    let hurried = hurried.await.unwrap().unwrap_err();
    assert!(
        matches!(hurried.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{hurried:?}"
    );
    // Only now do connections come back; the patient charge is still waiting.
    outside.query_drop("ROLLBACK").await.unwrap();
    for lookup in lookups {
        let _ = lookup.await.unwrap();
    }
    patient
        .await
        .unwrap()
        .expect("a call with time left is served");
    assert_eq!(db.balance(account).await, 95);
}

/// A stall on one account holds up no other account of its writer: a duplicate
/// of a key in flight on another instance waits on the key's row (up to the lock
/// wait, 10 s), while a charge on another account through the same writer is
/// served. Forced: the original is held before its COMMIT until that charge's
/// reply has come; a writer that waited for the duplicate would serve the charge
/// only after the duplicate gave up (IDEMPOTENCY_KEY_IN_PROGRESS).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_in_flight_elsewhere_holds_up_no_other_account() {
    let db = TestDb::new();
    let elsewhere = HeldCharge::start_with(
        &db,
        "dup",
        Config {
            batch_writers: Some(0),
            ..Config::default()
        },
    )
    .await;
    let app = TestApp::spawn_with(
        &db,
        Config {
            batch_writers: Some(1),
            lock_wait: Duration::from_secs(10),
            ..Config::default()
        },
    )
    .await;
    let account = elsewhere.account;
    let other = app.funded_account("USD", 100).await;

    let mut dup_client = app.client().await;
    let duplicate =
        tokio::spawn(async move { dup_client.charge(charge("dup", account, 10)).await });
    db.until_parked(1).await;
    let served = app
        .client()
        .await
        .charge(charge("meanwhile", other, 5))
        .await
        .expect("served while the duplicate waits");
    assert!(
        !duplicate.is_finished(),
        "the duplicate still waits on the key"
    );
    assert_eq!(served.into_inner().entry.unwrap().balance_after, 95);

    elsewhere.gate.release();
    elsewhere
        .original
        .await
        .unwrap()
        .expect("the original commits");
    let replay = duplicate
        .await
        .unwrap()
        .expect("the duplicate replays the original");
    assert!(replayed(replay.metadata()));
    assert_eq!(db.balance(account).await, 90);
}

/// A batch waiting for a block of ids, which it takes on a read connection while
/// it holds its accounts' locks, holds up no other account of its writer. Forced:
/// an outside transaction holds the row of `id_blocks` that hold ids come from, so
/// the instance's first PlaceHold waits there until that charge's reply has come,
/// while a charge on another account (with entry ids the instance took for the
/// funding credits) is served; a writer that waited for the hold would serve the
/// charge only after the hold gave up on its ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_waiting_for_ids_holds_up_no_other_account() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            batch_writers: Some(1),
            ..Config::default()
        },
    )
    .await;
    let holding = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let mut outside = db
        .hold("SELECT next_id FROM id_blocks WHERE name = 'holds' FOR UPDATE")
        .await;

    let mut hold_client = app.client().await;
    let hold = tokio::spawn(async move {
        hold_client
            .place_hold(place_hold("hold", holding, 30, Duration::from_secs(600)))
            .await
    });
    db.until_waiting_on("id_blocks", 1).await;
    app.client()
        .await
        .charge(charge("meanwhile", other, 5))
        .await
        .expect("served while the hold waits for its ids");
    assert!(!hold.is_finished(), "the hold still waits for its ids");

    outside.query_drop("ROLLBACK").await.unwrap();
    hold.await.unwrap().expect("placed once the block is taken");
    assert_eq!(db.balance(other).await, 95);
}

/// A transaction reserves its ids while it holds its accounts' locks, so the next
/// block of ids is taken ahead, before they run out. Forced: a post of 256 legs
/// (512 entries) leaves fewer than half of the instance's first block of entry
/// ids free, and the next block is taken; then an outside transaction holds the
/// row of `id_blocks` that entry ids come from, and a second post of 256 legs,
/// which needs more ids than the first block has left, commits all the same. A
/// service that took a block only when its ids ran out would wait on that row
/// until its bound, and answer UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_block_of_ids_is_taken_before_a_transaction_needs_it() {
    const NEXT_ENTRY_ID: &str = "SELECT next_id FROM id_blocks WHERE name = 'entries'";
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let from = app.funded_account("USD", 1_000).await;
    let to = app.funded_account("USD", 0).await;
    let one_block = db.count(NEXT_ENTRY_ID).await;
    let mut client = app.client().await;
    let big = |key: &str| post(key, (0..256).map(|_| leg(from, to, 1)).collect());
    client.post(big("first")).await.expect("posted");

    until("a block of entry ids is taken ahead", async || {
        db.count(NEXT_ENTRY_ID).await >= one_block + 1000
    })
    .await;
    let mut outside = db
        .hold("SELECT next_id FROM id_blocks WHERE name = 'entries' FOR UPDATE")
        .await;

    let second = client.post(big("second")).await;
    assert!(
        second.is_ok(),
        "the second post waited for a block of ids: {second:?}"
    );
    outside.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(db.balance(to).await, 512);
    assert_eq!(db.count(NEXT_ENTRY_ID).await, one_block + 1000);
}
