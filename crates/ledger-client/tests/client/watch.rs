//! The watcher across instances that die and restart: while calls keep
//! committing, the instance it follows is killed (and the assigner's lease with
//! it), started again on its address, and then the other one shut down; the
//! watcher sees every committed entry once, contiguous from 1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ledger_client::{Client, Error, Reason, pb};
use mysql_async::prelude::Queryable as _;
use tokio::sync::watch;

use crate::support::{Instance, TestApp, TestDb};

/// How long the watcher may take to catch up with the database once the calls
/// stop: a killed assigner is replaced within its 3 s lease, then numbers in ms.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Who holds the assigner's lease, while someone does.
async fn lease_owner(db: &TestDb) -> Option<Vec<u8>> {
    db.sql()
        .await
        .query_first(
            "SELECT owner FROM ledger_stream WHERE id = 1 AND lease_until > UTC_TIMESTAMP(6)",
        )
        .await
        .unwrap()
}

/// Polls until the assigner's lease is held by someone; its owner. Fails
/// after 20 s.
async fn until_leased(db: &TestDb) -> Vec<u8> {
    for _ in 0..1000 {
        if let Some(owner) = lease_owner(db).await {
            return owner;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no instance took the stream's lease");
}

/// Follows every account from 0 in a task; what it saw, and its last sequence
/// as it moves.
struct Following {
    seen: Arc<std::sync::Mutex<Vec<u64>>>,
    last: watch::Receiver<u64>,
    /// How often the watcher opened its stream again.
    resumed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Error>,
}

fn follow(client: &Client) -> Following {
    let mut watcher = client.watch(0, 0);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tell, last) = watch::channel(0);
    let (record, resumed) = (seen.clone(), Arc::new(AtomicU64::new(0)));
    let resumed_so_far = resumed.clone();
    let task = tokio::spawn(async move {
        loop {
            match watcher.next().await {
                Ok(entry) => {
                    record.lock().unwrap().push(entry.sequence);
                    resumed_so_far.store(watcher.resumed(), Ordering::Relaxed);
                    tell.send_replace(entry.sequence);
                }
                Err(e) => return e,
            }
        }
    });
    Following {
        seen,
        last,
        resumed,
        task,
    }
}

impl Following {
    /// Waits until it has seen `sequence`; fails after `limit`.
    async fn until(&mut self, sequence: u64, limit: Duration) {
        let reached = tokio::time::timeout(limit, self.last.wait_for(|&last| last >= sequence));
        assert!(
            matches!(reached.await, Ok(Ok(_))),
            "the watcher stopped at {} short of {sequence}",
            *self.last.borrow()
        );
    }
}

/// Transfers back and forth between `a` and `b` through `client` until
/// `stop`; how many succeeded.
async fn keep_writing(client: Client, a: u64, b: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut i = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        let (from, to) = if i.is_multiple_of(2) { (a, b) } else { (b, a) };
        let mut request = pb::TransferRequest {
            from_account_id: from,
            to_account_id: to,
            amount: 1,
            currency: "USD".into(),
            ..Default::default()
        };
        // An unknown outcome is settled with its key, as callers must.
        loop {
            match client.transfer(request.clone()).await {
                Err(Error::Unknown { key }) => request.idempotency_key = key,
                other => {
                    other.expect("the transfer");
                    break;
                }
            }
        }
        i += 1;
        // The writers' pace, not a wait.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    i
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watcher_sees_every_entry_once_across_a_kill_and_a_restart() {
    let db = TestDb::new();
    let first = Instance::start(&db, "127.0.0.1:0".parse().unwrap()).await;
    // The first instance numbers entries: its kill leaves the lease to run out.
    let first_owner = until_leased(&db).await;
    let second = Instance::start(&db, "127.0.0.1:0".parse().unwrap()).await;
    let first_addr = first.addr;
    let to_second = Client::builder().endpoint(second.url()).build().unwrap();
    let (a, b) = (
        funded(&to_second, 1_000_000).await,
        funded(&to_second, 1_000_000).await,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writer = Client::builder()
        .endpoint(second.url())
        .endpoint(first.url())
        .build()
        .unwrap();
    let writing = tokio::spawn(keep_writing(writer, a, b, stop.clone()));
    let mut following = follow(
        &Client::builder()
            .endpoint(first.url())
            .endpoint(second.url())
            .build()
            .unwrap(),
    );

    following.until(20, CATCH_UP).await;
    first.kill().await;
    let (at_kill, killed_at) = (*following.last.borrow(), tokio::time::Instant::now());
    following.until(at_kill + 40, CATCH_UP).await;
    let taken_over = killed_at.elapsed();
    let owner = until_leased(&db).await;
    assert_ne!(
        owner, first_owner,
        "the second instance took the lease over"
    );
    let restarted = Instance::start(&db, first_addr).await;
    second.terminate().await;
    let at_shutdown = *following.last.borrow();
    following.until(at_shutdown + 40, CATCH_UP).await;
    stop.store(true, Ordering::Relaxed);
    let transfers = writing.await.unwrap();
    let committed = db.count("SELECT COUNT(*) FROM entries").await;
    following.until(committed, CATCH_UP).await;

    assert!(
        !following.task.is_finished(),
        "the watcher is still following"
    );
    following.task.abort();
    let seen = following.seen.lock().unwrap().clone();
    let expected: Vec<u64> = (1..=committed).collect();
    assert_eq!(seen, expected, "every entry once, in order, without a hole");
    let resumed = following.resumed.load(Ordering::Relaxed);
    eprintln!(
        "{committed} entries, {transfers} transfers; the watcher resumed {resumed} times; \
         40 entries past the kill within {taken_over:?}"
    );
    assert!(
        resumed >= 2,
        "resumed after the kill and the shutdown: {resumed}"
    );
    assert_eq!(
        committed,
        2 + 2 * transfers,
        "two credits, two entries a transfer"
    );
    drop(restarted);
}

/// Opens a USD account through `client` and credits it `balance`; its id.
async fn funded(client: &Client, balance: i64) -> u64 {
    let account = client
        .open_account(pb::OpenAccountRequest {
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .reply
        .account
        .unwrap()
        .account_id;
    client
        .credit(pb::CreditRequest {
            account_id: account,
            amount: balance,
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    account
}

/// A watcher of an account that does not exist ends with the final answer.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_account_ends_the_watch_with_its_decline() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut watcher = app.client().watch(0, 999_999);

    let ended = tokio::time::timeout(Duration::from_secs(10), watcher.next())
        .await
        .expect("a final answer, not retries");

    let Err(Error::Declined(decline)) = ended else {
        panic!("expected ACCOUNT_NOT_FOUND, got {ended:?}");
    };
    assert_eq!(decline.reason, Reason::AccountNotFound);
}

/// An account's watcher resumes after its last sequence, skipping the other
/// accounts' numbers (no contiguity there), and yields only that account.
#[tokio::test(flavor = "multi_thread")]
async fn an_account_watcher_resumes_after_its_last_sequence() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let client = app.client();
    let mine = app.funded_account("USD", 100).await;
    let other = app.funded_account("USD", 100).await;
    let mut watcher = client.watch(0, mine);
    let first = watcher.next().await.unwrap();
    client
        .charge(pb::ChargeRequest {
            account_id: other,
            amount: 1,
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    client
        .charge(pb::ChargeRequest {
            account_id: mine,
            amount: 1,
            currency: "USD".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let second = tokio::time::timeout(Duration::from_secs(10), watcher.next())
        .await
        .unwrap()
        .unwrap();

    assert_eq!((first.account_id, second.account_id), (mine, mine));
    assert_eq!(first.kind(), pb::EntryKind::Credit);
    assert_eq!(second.kind(), pb::EntryKind::Charge);
    assert!(
        second.sequence > first.sequence + 1,
        "the other account's charge came between"
    );
    assert_eq!(watcher.last_sequence(), second.sequence);
}
