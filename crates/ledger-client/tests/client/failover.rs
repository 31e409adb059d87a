//! An endpoint that hangs (its HTTP/2 layer alive, its calls never answered)
//! before a live one: a call and a watcher both leave it for the next, and a
//! stream that is only quiet is not taken for one that hangs.

use std::time::Duration;

use ledger_client::{Backoff, Budget, Client, pb};
use tokio::time::Instant;

use crate::support::{TestApp, TestDb, WedgedServer};

fn charge(key: &str, account_id: u64) -> pb::ChargeRequest {
    pb::ChargeRequest {
        idempotency_key: key.into(),
        account_id,
        amount: 3,
        currency: "USD".into(),
        description: String::new(),
        ..Default::default()
    }
}

/// With the default budget (3 s an attempt, 10 s in all): the first attempt
/// times out on the wedged endpoint with no response, the second goes to the
/// live one; the calls after it go there at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_leaves_an_endpoint_that_never_answers() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 10).await;
    let wedged = WedgedServer::start();
    let client = Client::builder()
        .endpoint(wedged.url())
        .endpoint(app.url())
        .build()
        .unwrap();

    let started = Instant::now();
    let answer = client.charge(charge("hangs-1", account)).await;
    let took = started.elapsed();

    let answer = answer.unwrap_or_else(|e| panic!("the charge, after {took:?}: {e}"));
    eprintln!("charged in {took:?}, {} attempts", answer.attempts);
    assert!(
        took < client.budget().timeout,
        "{took:?}: within the budget"
    );
    assert!(answer.attempts >= 2, "{}", answer.attempts);
    assert!(!answer.replayed);
    assert_eq!(
        wedged.taken(),
        1,
        "the first attempt reached the wedged server, and none after it"
    );
    let read = client
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap();
    assert_eq!(wedged.taken(), 1, "the client stays on the live endpoint");
    assert_eq!(read.reply.balance, 7);
    assert_eq!(db.entries_for_key("hangs-1").await, 1);
}

/// The watcher's stream on the wedged endpoint never opens: within its open
/// timeout (the default 3 s) it moves to the live one and streams the backlog.
#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_leaves_an_endpoint_that_never_answers() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    for _ in 0..3 {
        app.funded_account("USD", 10).await;
    }
    let wedged = WedgedServer::start();
    let client = Client::builder()
        .endpoint(wedged.url())
        .endpoint(app.url())
        .build()
        .unwrap();
    let mut watcher = client.watch(0, 0);

    let started = Instant::now();
    let backlog = tokio::time::timeout(Duration::from_secs(5), async {
        let mut sequences = Vec::new();
        for _ in 0..3 {
            sequences.push(watcher.next().await.unwrap().sequence);
        }
        sequences
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no backlog within 5 s; the wedged server took {}",
            wedged.taken()
        )
    });

    eprintln!("the backlog within {:?}", started.elapsed());
    assert_eq!(backlog, [1, 2, 3]);
    assert_eq!(
        wedged.taken(),
        1,
        "the stream was first opened on the wedged server"
    );
}

/// A stream that is open and quiet (nothing commits) for many times its open
/// timeout stays open: the server sent its response headers when it took it,
/// and silence after them is a quiet ledger. The next entry comes on the same
/// stream, and the wedged endpoint behind it is never tried.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_stream_is_not_taken_for_a_hanging_one() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let account = app.funded_account("USD", 10).await;
    let wedged = WedgedServer::start();
    let open_timeout = Duration::from_millis(300);
    let client = Client::builder()
        .endpoint(app.url())
        .endpoint(wedged.url())
        .budget(Budget {
            attempt_timeout: open_timeout,
            backoff: Backoff {
                initial: Duration::from_millis(10),
                ..Backoff::default()
            },
            ..Budget::default()
        })
        .build()
        .unwrap();
    let mut watcher = client.watch(0, 0);
    let credit = watcher.next().await.unwrap();
    let next = tokio::spawn(async move {
        let entry = watcher.next().await;
        (watcher, entry)
    });

    // A window, not a condition: what must not happen is the client's timer
    // running out on a quiet stream, and nothing shows it will not until it does.
    tokio::time::sleep(open_timeout * 6).await;
    assert!(!next.is_finished(), "nothing committed, nothing came");
    app.client()
        .charge(charge("quiet-1", account))
        .await
        .unwrap();
    let (watcher, charged) = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the charge's entry")
        .unwrap();

    let charged = charged.unwrap();
    assert_eq!(charged.sequence, credit.sequence + 1);
    assert_eq!(charged.idempotency_key, "quiet-1");
    assert_eq!(watcher.resumed(), 0, "the first stream carried both");
    assert_eq!(wedged.taken(), 0);
}
