//! Subscriptions (SPEC 3.15), with a real receiver that verifies every
//! signature (`support::receiver`): every matching entry arrives, in sequence
//! order, with no gap, through failures, slow answers, an outage and the loss
//! of the delivering instance; filters, pause and resume, history replayed from
//! `after_sequence`, the keyed calls' replays and declines, and a receiver on a
//! private address refused unless allowed.

use std::time::Duration;

use ledger::proto::pb::{self, batch_item::Call};
use mysql_async::prelude::Queryable as _;
use nix::sys::signal::Signal;
use tonic::Code;
use tonic::transport::Channel;

use crate::support::receiver::{Receiver, State};
use crate::support::server::until;
use crate::support::{
    Config, LedgerProcess, TestApp, TestDb, charge, credit, number_entries, open_funded, reason,
    token_line, with_token,
};
use ledger::grpc::auth::Tokens;

type Client = pb::ledger_client::LedgerClient<Channel>;

/// Bounds a wait that ends within seconds when delivery works.
const PATIENCE: Duration = Duration::from_secs(120);

/// Subscribes `receiver` (tweaked by `tweak`), and gives it the secret.
async fn subscribe(
    client: &mut Client,
    receiver: &Receiver,
    key: &str,
    tweak: impl FnOnce(&mut pb::CreateSubscriptionRequest),
) -> pb::Subscription {
    let mut request = pb::CreateSubscriptionRequest {
        idempotency_key: key.into(),
        url: receiver.url(),
        ..Default::default()
    };
    tweak(&mut request);
    let reply = client
        .create_subscription(request)
        .await
        .expect("the subscription is created")
        .into_inner();
    assert!(reply.secret.starts_with("whsec_"), "{reply:?}");
    receiver.set_secret(reply.secret);
    reply
        .subscription
        .expect("the reply shows the subscription")
}

/// `n` charges of 1 over `accounts`, in batches of 1,000 (keys `tag-i`).
async fn charges(client: &mut Client, accounts: &[u64], n: usize, tag: &str) {
    let calls: Vec<Call> = (0..n)
        .map(|i| {
            Call::Charge(charge(
                &format!("{tag}-{i}"),
                accounts[i % accounts.len()],
                1,
            ))
        })
        .collect();
    for chunk in calls.chunks(1000) {
        let reply = client
            .batch(pb::BatchRequest {
                items: chunk
                    .iter()
                    .map(|call| pb::BatchItem {
                        call: Some(call.clone()),
                    })
                    .collect(),
            })
            .await
            .expect("the batch runs")
            .into_inner();
        assert!(
            reply
                .results
                .iter()
                .all(|r| matches!(r.result, Some(pb::batch_result::Result::Charge(_)))),
            "every charge succeeds"
        );
    }
}

async fn accounts(client: &mut Client, n: usize, tag: &str) -> Vec<u64> {
    let mut accounts = Vec::with_capacity(n);
    for i in 0..n {
        accounts.push(open_funded(client, &format!("{tag}{i}"), "USD", 1_000_000).await);
    }
    accounts
}

/// Waits until the receiver has acknowledged `last`, or fails with what it saw.
async fn until_acknowledged(receiver: &Receiver, last: u64) -> State {
    receiver
        .wait_for(|s| s.acknowledged_sequences().contains(&last), PATIENCE)
        .await
}

async fn get(client: &mut Client, id: u64) -> pb::Subscription {
    client
        .get_subscription(pb::GetSubscriptionRequest {
            subscription_id: id,
        })
        .await
        .expect("the subscription reads")
        .into_inner()
}

/// Every sequence numbered in `after+1..=through`.
fn range(after: u64, through: u64) -> Vec<u64> {
    (after + 1..=through).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_entries_arrive_in_order_with_no_gap() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let receiver = Receiver::start().await;
    let accounts = accounts(&mut client, 50, "a").await;
    let subscription = subscribe(&mut client, &receiver, "sub", |_| {}).await;
    charges(&mut client, &accounts, 10_000, "c").await;
    let last = number_entries(&db).await;
    let state = until_acknowledged(&receiver, last).await;
    let expected = range(subscription.cursor, last);
    assert!(expected.len() >= 10_000, "{}", expected.len());
    state.assert_delivered(subscription.subscription_id, &expected);
    assert_eq!(
        state.deliveries.len(),
        state.acknowledged_count(),
        "no failure, no repeat"
    );
    // At least 100 requests, on the connection the sender keeps open.
    assert!(state.deliveries.len() >= 100, "{}", state.summary());
    assert!(state.connections <= 2, "{} connections", state.connections);
    until("the cursor reaches the last entry", async || {
        let mut client = client.clone();
        get(&mut client, subscription.subscription_id).await.cursor == last
    })
    .await;
    let read = get(&mut client, subscription.subscription_id).await;
    assert_eq!(read.state(), pb::SubscriptionState::Active);
    assert!(read.last_error.is_empty());
    assert_eq!(read.url, receiver.url());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_late_answers_and_an_outage_lose_nothing() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let receiver = Receiver::start().await;
    let accounts = accounts(&mut client, 10, "a").await;
    let subscription = subscribe(&mut client, &receiver, "sub", |_| {}).await;
    receiver.fail_every(5);
    receiver.slow_every(7, Duration::from_secs(11));
    charges(&mut client, &accounts, 1_000, "before").await;
    let before = number_entries(&db).await;
    let state = until_acknowledged(&receiver, before).await;
    assert!(
        state.deliveries.iter().any(|d| d.slow),
        "{}",
        state.summary()
    );
    receiver.slow_every(0, Duration::ZERO);
    // Down for 30 s while entries keep coming: the sender backs off and tries again.
    receiver.down().await;
    charges(&mut client, &accounts, 500, "during").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let failing = get(&mut client, subscription.subscription_id).await;
    assert!(
        !failing.last_error.is_empty(),
        "the outage is shown: {failing:?}"
    );
    receiver.up().await;
    charges(&mut client, &accounts, 500, "after").await;
    let last = number_entries(&db).await;
    let state = until_acknowledged(&receiver, last).await;
    assert!(state.failed_count() > 0, "{}", state.summary());
    state.assert_delivered(
        subscription.subscription_id,
        &range(subscription.cursor, last),
    );
    until("the last error is cleared", async || {
        let mut client = client.clone();
        {
            let read = get(&mut client, subscription.subscription_id).await;
            read.cursor == last && read.last_error.is_empty()
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn filters_pick_accounts_kinds_and_metadata() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let accounts = accounts(&mut client, 3, "a").await;
    // The accounts' funding is numbered before the subscriptions start from the
    // head, so none of it follows their cursors.
    number_entries(&db).await;
    let (by_account, by_kind, by_pair) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    let a = subscribe(&mut client, &by_account, "s1", |r| {
        r.account_ids = vec![accounts[0]];
    })
    .await;
    let k = subscribe(&mut client, &by_kind, "s2", |r| {
        r.kinds = vec![pb::EntryKind::Credit.into()];
    })
    .await;
    let m = subscribe(&mut client, &by_pair, "s3", |r| {
        r.metadata = [("order".to_owned(), "o-7".to_owned())].into();
    })
    .await;
    let mut entries = Vec::new();
    for i in 0..30_usize {
        let account = accounts[i % 3];
        let entry = if i % 4 == 0 {
            let mut request = credit(&format!("cr{i}"), account, 5);
            request.currency = "USD".into();
            client.credit(request).await.unwrap().into_inner().entry
        } else {
            let mut request = charge(&format!("ch{i}"), account, 1);
            if i % 3 == 1 {
                request.metadata = [("order".to_owned(), "o-7".to_owned())].into();
            } else if i % 3 == 2 {
                request.metadata = [("order".to_owned(), "o-8".to_owned())].into();
            }
            client.charge(request).await.unwrap().into_inner().entry
        };
        entries.push(entry.expect("the reply shows its entry").entry_id);
    }
    let last = number_entries(&db).await;
    let mut read = Vec::new();
    for id in entries {
        read.push(
            client
                .get_entry(pb::GetEntryRequest { entry_id: id })
                .await
                .unwrap()
                .into_inner(),
        );
    }
    let expect = |pick: &dyn Fn(&pb::Entry) -> bool| -> Vec<u64> {
        read.iter()
            .filter(|e| pick(e))
            .map(|e| e.sequence)
            .collect()
    };
    let cases = [
        (&by_account, a, expect(&|e| e.account_id == accounts[0])),
        (&by_kind, k, expect(&|e| e.kind() == pb::EntryKind::Credit)),
        (
            &by_pair,
            m,
            expect(&|e| e.metadata.get("order").map(String::as_str) == Some("o-7")),
        ),
    ];
    for (receiver, subscription, expected) in cases {
        assert!(!expected.is_empty());
        until("the cursor passes the last entry", async || {
            let mut client = client.clone();
            get(&mut client, subscription.subscription_id).await.cursor == last
        })
        .await;
        receiver
            .state()
            .assert_delivered(subscription.subscription_id, &expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_subscription_waits_and_resumed_catches_up() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let receiver = Receiver::start().await;
    let accounts = accounts(&mut client, 2, "a").await;
    let subscription = subscribe(&mut client, &receiver, "sub", |_| {}).await;
    let id = subscription.subscription_id;
    charges(&mut client, &accounts, 10, "one").await;
    let first = number_entries(&db).await;
    until_acknowledged(&receiver, first).await;
    let change = |key: &str| pb::SubscriptionRequest {
        idempotency_key: key.into(),
        subscription_id: id,
    };
    let paused = client
        .pause_subscription(change("p"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(paused.state(), pb::SubscriptionState::Paused);
    charges(&mut client, &accounts, 10, "two").await;
    let second = number_entries(&db).await;
    // Several renewals of the leases and reads of the stream's head.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let state = receiver.state();
    assert!(
        state.all_sequences().iter().all(|s| *s <= first),
        "nothing written after the pause is sent: {}",
        state.summary()
    );
    assert_eq!(get(&mut client, id).await.cursor, first);
    let resumed = client
        .resume_subscription(change("r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resumed.state(), pb::SubscriptionState::Active);
    let state = until_acknowledged(&receiver, second).await;
    state.assert_delivered(id, &range(subscription.cursor, second));
    // Each change is keyed: a retry replays it.
    let again = client.pause_subscription(change("p")).await.unwrap();
    assert_eq!(again.into_inner(), paused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscription_after_sequence_zero_replays_the_whole_journal() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let accounts = accounts(&mut client, 5, "a").await;
    charges(&mut client, &accounts, 250, "c").await;
    let last = number_entries(&db).await;
    let receiver = Receiver::start().await;
    let subscription = subscribe(&mut client, &receiver, "sub", |r| {
        r.after_sequence = Some(0);
    })
    .await;
    assert_eq!(subscription.cursor, 0);
    let state = until_acknowledged(&receiver, last).await;
    state.assert_delivered(subscription.subscription_id, &range(0, last));
    let from_now = Receiver::start().await;
    let later = subscribe(&mut client, &from_now, "later", |_| {}).await;
    assert_eq!(
        later.cursor, last,
        "absent: from the highest sequence assigned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_calls_are_keyed_and_see_only_their_own_namespace() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let receiver = Receiver::start().await;
    let request = pb::CreateSubscriptionRequest {
        idempotency_key: "create".into(),
        url: receiver.url(),
        account_ids: vec![2, 1],
        ..Default::default()
    };
    let created = client.create_subscription(request.clone()).await.unwrap();
    let replayed = client.create_subscription(request.clone()).await.unwrap();
    assert_eq!(
        replayed
            .metadata()
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true")
    );
    let (created, replayed) = (created.into_inner(), replayed.into_inner());
    assert_eq!(created, replayed, "the same subscription and secret");
    let subscription = created.subscription.unwrap();
    assert_eq!(subscription.account_ids, [1, 2]);
    let other = pb::CreateSubscriptionRequest {
        url: "https://elsewhere.example/".into(),
        ..request
    };
    let reused = client.create_subscription(other).await.unwrap_err();
    assert_eq!(reason(&reused), "IDEMPOTENCY_KEY_REUSED");
    let invalid = client
        .create_subscription(pb::CreateSubscriptionRequest {
            idempotency_key: "bad".into(),
            url: "ftp://example.com/".into(),
            kinds: vec![42],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);
    let id = subscription.subscription_id;
    let listed = client
        .list_subscriptions(pb::ListSubscriptionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.subscriptions, [get(&mut client, id).await]);
    assert!(listed.subscriptions[0].url == receiver.url());
    let change = |key: &str, subscription_id| pb::SubscriptionRequest {
        idempotency_key: key.into(),
        subscription_id,
    };
    let missing = client
        .pause_subscription(change("m", id + 1_000_000))
        .await
        .unwrap_err();
    assert_eq!(
        (missing.code(), reason(&missing).as_str()),
        (Code::NotFound, "SUBSCRIPTION_NOT_FOUND")
    );
    let missing = client
        .get_subscription(pb::GetSubscriptionRequest {
            subscription_id: id + 1_000_000,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (missing.code(), reason(&missing).as_str()),
        (Code::NotFound, "SUBSCRIPTION_NOT_FOUND")
    );
    let deleted = client
        .delete_subscription(change("d", id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.state(), pb::SubscriptionState::Deleted);
    let resumed = client
        .resume_subscription(change("r", id))
        .await
        .unwrap_err();
    assert_eq!(
        (resumed.code(), reason(&resumed).as_str()),
        (Code::FailedPrecondition, "SUBSCRIPTION_DELETED")
    );
    let again = client
        .delete_subscription(change("d2", id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.state(), pb::SubscriptionState::Deleted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_namespace_sees_none_of_them() {
    let db = TestDb::new();
    let receiver = Receiver::start().await;
    let change = |key: &str, subscription_id| pb::SubscriptionRequest {
        idempotency_key: key.into(),
        subscription_id,
    };
    let lines = token_line("alice", "alice-token") + &token_line("bob", "bob-token");
    let secured = TestApp::spawn_with(
        &db,
        Config {
            auth: Some(Tokens::parse(&lines).unwrap()),
            ..Config::default()
        },
    )
    .await;
    let mut alice = with_token(secured.channel().await, "alice-token");
    let mut bob = with_token(secured.channel().await, "bob-token");
    let mine = alice
        .create_subscription(pb::CreateSubscriptionRequest {
            idempotency_key: "mine".into(),
            url: receiver.url(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .subscription
        .unwrap();
    let theirs = bob
        .get_subscription(pb::GetSubscriptionRequest {
            subscription_id: mine.subscription_id,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&theirs), "SUBSCRIPTION_NOT_FOUND");
    let listed = bob
        .list_subscriptions(pb::ListSubscriptionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.subscriptions.is_empty());
    let pause = bob
        .pause_subscription(change("pause-theirs", mine.subscription_id))
        .await
        .unwrap_err();
    assert_eq!(reason(&pause), "SUBSCRIPTION_NOT_FOUND");
    let listed = alice
        .list_subscriptions(pb::ListSubscriptionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.subscriptions.len(), 1);
}

/// A receiver at a loopback address, and one at a name that resolves to it
/// (checked as the connection resolves it, so the name cannot answer otherwise
/// to the check and to the request), are refused while the flag is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_on_loopback_is_refused_unless_allowed() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            webhook_allow_private: false,
            ..Config::default()
        },
    )
    .await;
    let mut client = app.client().await;
    let receiver = Receiver::start().await;
    let accounts = accounts(&mut client, 1, "a").await;
    let by_address = subscribe(&mut client, &receiver, "sub", |_| {}).await;
    let by_name = subscribe(&mut client, &receiver, "sub-by-name", |r| {
        r.url = r.url.replace("127.0.0.1", "localhost");
    })
    .await;
    assert!(by_name.url.starts_with("http://localhost:"), "{by_name:?}");
    charges(&mut client, &accounts, 3, "c").await;
    number_entries(&db).await;
    for subscription in [by_address, by_name] {
        until("the refusal is shown", async || {
            let mut client = client.clone();
            get(&mut client, subscription.subscription_id)
                .await
                .last_error
                .contains("--webhook-allow-private")
        })
        .await;
    }
    assert_eq!(receiver.state().requests, 0, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_instance_takes_over_when_the_delivering_one_is_killed() {
    let db = TestDb::new();
    let first = LedgerProcess::serve(&db, &["--webhook-allow-private"]).await;
    let mut client = Client::new(first.channel());
    let receiver = Receiver::start().await;
    let accounts = accounts(&mut client, 10, "a").await;
    let subscription = subscribe(&mut client, &receiver, "sub", |_| {}).await;
    charges(&mut client, &accounts, 500, "one").await;
    let one = number_entries(&db).await;
    until_acknowledged(&receiver, one).await;
    // The first holds the lease; the second starts, and can take nothing yet.
    let owner = || async {
        db.sql()
            .await
            .query_first::<Vec<u8>, _>(format!(
                "SELECT lease_owner FROM subscriptions WHERE subscription_id = {}",
                subscription.subscription_id
            ))
            .await
            .unwrap()
    };
    let holder = owner().await;
    let second = LedgerProcess::serve(&db, &["--webhook-allow-private"]).await;
    // Deliveries stall on the receiver while the first is killed.
    receiver.slow_every(1, Duration::from_secs(2));
    let mut through_second = Client::new(second.channel());
    charges(&mut through_second, &accounts, 500, "two").await;
    first.signal(Signal::SIGKILL);
    receiver.slow_every(0, Duration::ZERO);
    charges(&mut through_second, &accounts, 500, "three").await;
    let last = number_entries(&db).await;
    let state = until_acknowledged(&receiver, last).await;
    assert_ne!(
        owner().await,
        holder,
        "the second instance holds the lease now"
    );
    state.assert_delivered(
        subscription.subscription_id,
        &range(subscription.cursor, last),
    );
    drop(second);
}

/// A day of failures makes a subscription FAILING (still tried, hourly), and a
/// resume makes it ACTIVE again at once, its failures forgotten. The day is the
/// database's: the run of failures is made to have begun 25 hours ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_day_of_failures_is_failing_and_a_resume_is_active_again() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let accounts = accounts(&mut client, 1, "a").await;
    // Nothing listens on port 1: every delivery fails.
    let created = client
        .create_subscription(pb::CreateSubscriptionRequest {
            idempotency_key: "sub".into(),
            url: "http://127.0.0.1:1/hook".into(),
            after_sequence: Some(0),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .subscription
        .unwrap();
    let id = created.subscription_id;
    charges(&mut client, &accounts, 3, "c").await;
    until("a failure is recorded", async || {
        let mut client = client.clone();
        !get(&mut client, id).await.last_error.is_empty()
    })
    .await;
    db.sql()
        .await
        .query_drop(format!(
            "UPDATE subscriptions SET failing_since = UTC_TIMESTAMP(6) - INTERVAL 25 HOUR, \
             next_attempt_at = NULL WHERE subscription_id = {id}"
        ))
        .await
        .unwrap();
    // The next failure (the backoff is at most a few seconds yet) finds the run a day old.
    until("the subscription is FAILING", async || {
        let mut client = client.clone();
        get(&mut client, id).await.state() == pb::SubscriptionState::Failing
    })
    .await;
    let resumed = client
        .resume_subscription(pb::SubscriptionRequest {
            idempotency_key: "resume".into(),
            subscription_id: id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resumed.state(), pb::SubscriptionState::Active);
    assert!(resumed.last_error.is_empty(), "{resumed:?}");
    // A failure after the resume starts a new run; the day-old one is gone.
    let day_old: u64 = db
        .count(&format!(
            "SELECT COUNT(*) FROM subscriptions WHERE subscription_id = {id} \
             AND failing_since < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR"
        ))
        .await;
    assert_eq!(day_old, 0, "the run of failures is forgotten");
}
