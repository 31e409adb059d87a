//! Posts: several transfers that take effect together or not at all, exactly once
//! under their key.

use std::time::Duration;

use ledger::proto::pb;
use prost::Message as _;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::support::{
    Config, HeldStorm, TestApp, TestDb, assert_audit_passes, assert_one_did_the_work, at_once,
    info, leg, post, raw_call, reason, replayed, storm_config, until_sequenced,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

async fn balances(db: &TestDb, ids: &[u64]) -> Vec<i64> {
    let mut balances = Vec::new();
    for id in ids {
        balances.push(db.balance(*id).await);
    }
    balances
}

async fn posted(client: &mut Client, request: pb::PostRequest) -> pb::PostReply {
    client.post(request).await.expect("posted").into_inner()
}

/// The marketplace sale: buyer to merchant 97, buyer to platform 3, both or
/// neither. A leg spends what an earlier leg brought in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legs_apply_in_order_and_a_leg_may_spend_what_an_earlier_one_brought() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let buyer = app.funded_account("USD", 100).await;
    let merchant = app.funded_account("USD", 0).await;
    let platform = app.funded_account("USD", 0).await;

    let sale = pb::PostRequest {
        description: "order 17".into(),
        ..post(
            "sale-17",
            vec![
                leg(buyer, merchant, 97),
                pb::Leg {
                    description: "fee".into(),
                    ..leg(buyer, platform, 3)
                },
                // The merchant pays the platform out of what leg 0 brought in.
                leg(merchant, platform, 10),
            ],
        )
    };
    let reply = posted(&mut c, sale.clone()).await;
    let entries: Vec<_> = reply
        .entries
        .iter()
        .map(|e| (e.kind(), e.account_id, e.amount, e.balance_after, e.leg))
        .collect();
    assert_eq!(
        entries,
        [
            (pb::EntryKind::TransferOut, buyer, 97, 3, 0),
            (pb::EntryKind::TransferIn, merchant, 97, 97, 0),
            (pb::EntryKind::TransferOut, buyer, 3, 0, 1),
            (pb::EntryKind::TransferIn, platform, 3, 3, 1),
            (pb::EntryKind::TransferOut, merchant, 10, 87, 2),
            (pb::EntryKind::TransferIn, platform, 10, 13, 2),
        ]
    );
    let descriptions: Vec<_> = reply
        .entries
        .iter()
        .map(|e| e.description.as_str())
        .collect();
    assert_eq!(
        descriptions,
        ["order 17", "order 17", "fee", "fee", "order 17", "order 17"]
    );
    assert_eq!(
        balances(&db, &[buyer, merchant, platform]).await,
        [0, 87, 13]
    );

    // Reads show each entry's leg, and its sequence once assigned (the reply's
    // is 0: it is encoded before the assignment).
    until_sequenced(&db, std::time::Duration::from_secs(20)).await;
    let read = c
        .get_entry(pb::GetEntryRequest {
            entry_id: reply.entries[5].entry_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.entries[5].sequence, 0);
    assert!(read.sequence > 0);
    assert_eq!(
        pb::Entry {
            sequence: 0,
            ..read
        },
        reply.entries[5]
    );

    // The replay is the same reply, marked; nothing moves again.
    let again = c.post(sale).await.unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner(), reply);
    assert_eq!(
        balances(&db, &[buyer, merchant, platform]).await,
        [0, 87, 13]
    );
    assert_audit_passes(&db.url).await;
}

/// A decline on leg 1 of 2 applies nothing, names the leg, and is stored: its
/// replay is the same status, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_leg_declines_the_whole_post_and_replays() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 0).await;
    let c_id = app.funded_account("USD", 0).await;
    let request = post("too-much", vec![leg(a, b, 60), leg(a, c_id, 60)]);

    let first = raw_call(app.channel().await, "Post", request.clone())
        .await
        .unwrap_err();
    assert_eq!(first.code(), Code::FailedPrecondition);
    assert_eq!(reason(&first), "INSUFFICIENT_FUNDS");
    assert_eq!(info(&first, "leg").as_deref(), Some("1"));
    assert_eq!(info(&first, "account_id"), Some(a.to_string()));
    assert_eq!(balances(&db, &[a, b, c_id]).await, [100, 0, 0]);
    assert_eq!(db.entries_for_key("too-much").await, 0);

    let again = raw_call(app.channel().await, "Post", request)
        .await
        .unwrap_err();
    assert!(replayed(again.metadata()));
    assert_eq!(
        (again.code(), again.details()),
        (first.code(), first.details())
    );
    assert_eq!(again.message(), first.message());

    // An unknown account in a leg is stored too, with the leg.
    let mut client = app.client().await;
    let missing = client
        .post(post("no-such", vec![leg(a, b, 1), leg(b, 999_999, 1)]))
        .await
        .unwrap_err();
    assert_eq!(
        (missing.code(), reason(&missing)),
        (Code::NotFound, "ACCOUNT_NOT_FOUND".into())
    );
    assert_eq!(info(&missing, "leg").as_deref(), Some("1"));
    assert_eq!(balances(&db, &[a, b]).await, [100, 0]);
    assert_audit_passes(&db.url).await;
}

/// Invalid posts are answered before anything is recorded, naming each field by
/// its leg; the key stays free. Other legs under a used key are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_posts_record_nothing_and_a_key_binds_every_leg() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let a = app.funded_account("USD", 100).await;
    let b = app.funded_account("USD", 0).await;

    let cases = [
        (post("k", vec![]), "legs"),
        (post("k", vec![leg(a, b, 1); 257]), "legs"),
        (
            post("k", vec![leg(a, b, 1), leg(a, a, 1)]),
            "legs[1].to_account_id",
        ),
        (post("k", vec![leg(a, b, 0)]), "legs[0].amount"),
        (
            post(
                "k",
                vec![pb::Leg {
                    currency: "usd".into(),
                    ..leg(a, b, 1)
                }],
            ),
            "legs[0].currency",
        ),
    ];
    for (request, field) in cases {
        let status = c.post(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}");
        let violations = status.get_details_bad_request().expect("BadRequest");
        assert!(
            violations.field_violations.iter().any(|v| v.field == field),
            "{field}: {violations:?}"
        );
    }
    // Half a million empty legs (1 MB): refused before they are decoded, where
    // they would take some 40 MiB; still naming the field.
    let status = c
        .post(post("k", vec![pb::Leg::default(); 500_000]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let violations = status.get_details_bad_request().expect("BadRequest");
    assert_eq!(violations.field_violations.len(), 1, "{violations:?}");
    assert_eq!(violations.field_violations[0].field, "legs");
    assert!(
        violations.field_violations[0]
            .description
            .contains("refused unread"),
        "{violations:?}"
    );
    assert_eq!(db.key_rows("k").await, 0, "nothing recorded");

    posted(&mut c, post("k", vec![leg(a, b, 5), leg(a, b, 6)])).await;
    let other = c
        .post(post("k", vec![leg(a, b, 5), leg(a, b, 7)]))
        .await
        .unwrap_err();
    assert_eq!(reason(&other), "IDEMPOTENCY_KEY_REUSED");
    let fewer = c.post(post("k", vec![leg(a, b, 5)])).await.unwrap_err();
    assert_eq!(reason(&fewer), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(balances(&db, &[a, b]).await, [89, 11]);
}

/// An FX trade through two pools: legs in two currencies, each netting to zero
/// in its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fx_post_moves_two_currencies_together() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let alice_usd = app.funded_account("USD", 1_000).await;
    let alice_eur = app.funded_account("EUR", 0).await;
    let pool_usd = app.funded_account("USD", 0).await;
    let pool_eur = app.funded_account("EUR", 10_000).await;
    let eur = |from, to, amount| pb::Leg {
        currency: "EUR".into(),
        ..leg(from, to, amount)
    };
    posted(
        &mut c,
        post(
            "fx-1",
            vec![
                leg(alice_usd, pool_usd, 1_000),
                eur(pool_eur, alice_eur, 920),
            ],
        ),
    )
    .await;
    assert_eq!(
        balances(&db, &[alice_usd, alice_eur, pool_usd, pool_eur]).await,
        [0, 920, 1_000, 9_080]
    );
    // A leg in the wrong currency for its accounts declines the whole trade.
    let mismatch = c
        .post(post(
            "fx-2",
            vec![leg(pool_usd, alice_usd, 1), leg(alice_eur, pool_eur, 1)],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&mismatch), "CURRENCY_MISMATCH");
    assert_eq!(info(&mismatch, "leg").as_deref(), Some("1"));
    assert_eq!(db.balance(pool_usd).await, 1_000);
    assert_audit_passes(&db.url).await;
}

/// The largest post: 256 legs, 512 entries, in one transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_of_256_legs() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let source = app.funded_account("USD", 1_000_000).await;
    let mut sinks = Vec::new();
    for _ in 0..8 {
        sinks.push(app.funded_account("USD", 0).await);
    }
    let legs = (0..256)
        .map(|i| leg(source, sinks[i % 8], 1 + i64::try_from(i).unwrap()))
        .collect();
    let reply = posted(&mut c, post("big", legs)).await;
    assert_eq!(reply.entries.len(), 512);
    assert_eq!(reply.entries.last().map(|e| e.leg), Some(255));
    let total: i64 = (1..=256).sum();
    assert_eq!(db.balance(source).await, 1_000_000 - total);
    assert_eq!(db.entries_for_key("big").await, 512);
    assert_audit_passes(&db.url).await;
}

/// 64 identical 3-leg posts through two instances, the first held before COMMIT
/// until the other 63 wait behind it: applied once, 64 identical replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_identical_posts_apply_once() {
    let db = TestDb::new();
    let storm = HeldStorm::start(&db, "split", storm_config()).await;
    let buyer = storm.a.funded_account("USD", 1_000).await;
    let merchant = storm.a.funded_account("USD", 0).await;
    let fee = storm.a.funded_account("USD", 0).await;
    let tax = storm.a.funded_account("USD", 0).await;

    let request = post(
        "split",
        vec![
            leg(buyer, merchant, 90),
            leg(buyer, fee, 7),
            leg(buyer, tax, 3),
        ],
    );
    let replies = storm.run(&db, 64, "Post", request).await;
    assert_one_did_the_work(&replies, "64 identical posts");
    let reply = pb::PostReply::decode(replies[0].1.clone()).unwrap();
    assert_eq!(reply.entries.len(), 6);
    assert_eq!(db.entries_for_key("split").await, 6);
    assert_eq!(
        balances(&db, &[buyer, merchant, fee, tax]).await,
        [900, 90, 7, 3]
    );
    assert_audit_passes(&db.url).await;
}

/// 240 random posts of 1 to 4 legs from 16 callers over 6 accounts, through two
/// instances, every account both paying and paid: the accounts of a post are
/// locked once, in ascending order, so nothing deadlocks; money is conserved and
/// every journal replays its balances (the audit).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_posts_over_few_accounts_never_deadlock() {
    let db = TestDb::new();
    let config = Config {
        pool_size: 16,
        max_attempts: Some(1),
        lock_wait: Duration::from_secs(30),
        ..storm_config()
    };
    let first = TestApp::spawn_with(&db, config.clone()).await;
    let second = TestApp::spawn_with(&db, config).await;
    let mut accounts = Vec::new();
    for _ in 0..6 {
        accounts.push(first.funded_account("USD", 1_000_000).await);
    }
    let channels = [first.channel().await, second.channel().await];
    let mut rng = StdRng::seed_from_u64(0x001e_d6e7);
    let requests: Vec<pb::PostRequest> = (0..240)
        .map(|i| {
            let legs = (0..rng.random_range(1..=4))
                .map(|_| {
                    let from = rng.random_range(0..6);
                    let to = (from + rng.random_range(1..6)) % 6;
                    leg(accounts[from], accounts[to], rng.random_range(1..100))
                })
                .collect();
            post(&format!("p{i}"), legs)
        })
        .collect();

    // 16 callers, 15 posts each, all starting together.
    let calls = at_once(16, &channels, |caller, channel| {
        let mine: Vec<_> = requests.iter().skip(caller).step_by(16).cloned().collect();
        async move {
            for request in mine {
                raw_call(channel.clone(), "Post", request)
                    .await
                    .expect("no error reaches a caller");
            }
        }
    });
    for call in calls {
        call.await.unwrap();
    }
    let total: i64 = balances(&db, &accounts).await.iter().sum();
    assert_eq!(total, 6 * 1_000_000, "money is conserved");
    let legs: usize = requests.iter().map(|r| r.legs.len()).sum();
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE kind IN (3, 4)")
            .await,
        u64::try_from(2 * legs).unwrap()
    );
    assert_audit_passes(&db.url).await;
}
