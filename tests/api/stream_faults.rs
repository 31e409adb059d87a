//! The change stream under faults (SPEC 3.8): a watcher that hops between two
//! `ledger serve` processes every few hundred entries, while the one that numbers
//! the stream is SIGKILLed under a mixed load of charges, credits, transfers and
//! posts, sees every committed entry exactly once, with contiguous numbers, each
//! as `GetEntry` shows it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::transport::Channel;

use crate::support::follow::{Follower, assert_as_get_entry_shows, assert_every_entry_once};
use crate::support::process::LedgerProcess;
use crate::support::{
    TestDb, assert_audit_passes, charge, credit, leg, open_funded, post, transfer, until_sequenced,
};

type Client = pb::ledger_client::LedgerClient<Channel>;

/// Entries the watcher takes from one instance before it moves to the other.
const HOP_EVERY: usize = 250;

/// Charges, credits, transfers and posts over `accounts`, each call through a
/// random one of `channels`, until `stop`; counts the calls that succeeded (those
/// to a killed instance fail).
async fn load(
    worker: u64,
    channels: Vec<Channel>,
    accounts: Vec<u64>,
    stop: Arc<AtomicBool>,
    succeeded: Arc<AtomicU64>,
) {
    let pick = |i: u64| accounts[usize::try_from(i).unwrap() % accounts.len()];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("w{worker}-{n}");
        let (a, b, c) = (pick(n + worker), pick(n + worker + 1), pick(n + worker + 2));
        let mut client = Client::new(channels[rand::random_range(0..channels.len())].clone());
        let ok = match n % 4 {
            0 => client.charge(charge(&key, a, 1)).await.is_ok(),
            1 => client.credit(credit(&key, a, 3)).await.is_ok(),
            2 => client.transfer(transfer(&key, a, b, 1)).await.is_ok(),
            _ => {
                let legs = vec![leg(a, b, 2), leg(b, c, 1)];
                client.post(post(&key, legs)).await.is_ok()
            }
        };
        if ok {
            succeeded.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watcher_hopping_between_instances_sees_every_entry_once_across_a_kill() {
    let db = TestDb::new();
    // The first holds the assigner's lease before the second starts; the second
    // takes it over after the kill.
    let first = LedgerProcess::serve(&db, &[]).await;
    let assigner = lease_owner(&db).await;
    let second = LedgerProcess::serve(&db, &[]).await;
    let channels = vec![first.channel(), second.channel()];
    let mut opener = Client::new(second.channel());
    let mut accounts = Vec::new();
    for i in 0..6 {
        accounts.push(open_funded(&mut opener, &format!("hop-{i}"), "USD", 1_000_000).await);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let succeeded = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..6)
        .map(|worker| {
            tokio::spawn(load(
                worker,
                channels.clone(),
                accounts.clone(),
                stop.clone(),
                succeeded.clone(),
            ))
        })
        .collect();
    let follower = Follower::start(channels, HOP_EVERY);

    follower.until_seen(3 * HOP_EVERY).await;
    first.signal(nix::sys::signal::Signal::SIGKILL);
    follower.until_seen(8 * HOP_EVERY).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }

    until_sequenced(&db, std::time::Duration::from_secs(30)).await;
    let total = usize::try_from(db.count("SELECT COUNT(*) FROM entries").await).unwrap();
    let seen = follower.finish(total).await;
    assert_every_entry_once(&seen, total);
    assert_as_get_entry_shows(second.channel(), &seen).await;
    assert!(succeeded.load(Ordering::Relaxed) > 0);
    assert_ne!(
        lease_owner(&db).await,
        assigner,
        "the second took the lease over"
    );
    assert_audit_passes(&db.url).await;
}

/// The holder of a live assigner's lease, once there is one (fails after 30 s).
async fn lease_owner(db: &TestDb) -> Vec<u8> {
    let mut conn = db.sql().await;
    for _ in 0..600 {
        let owner: Option<Vec<u8>> = conn
            .query_first(
                "SELECT owner FROM ledger_stream WHERE id = 1 AND owner <> '' \
                 AND lease_until > UTC_TIMESTAMP(6)",
            )
            .await
            .unwrap();
        if let Some(owner) = owner {
            return owner;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no instance took the assigner's lease");
}
