//! Reverse (SPEC 3.12): a Transfer, a Post or a Credit undone, mirror by mirror,
//! at most once however many keys race, forced where the order matters.

use std::time::Duration;

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use prost::Message as _;
use tonic::Code;

use crate::support::{
    Config, Gate, TestApp, TestDb, assert_audit_passes, at_once, charge, credit, info, leg,
    place_hold, post, raw_call, reason, refund, replayed, reverse, storm_config, transfer,
    until_in_flight,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

async fn reversed(client: &mut Client, request: pb::ReverseRequest) -> pb::ReverseReply {
    client
        .reverse(request)
        .await
        .expect("reversed")
        .into_inner()
}

async fn declined(client: &mut Client, request: pb::ReverseRequest) -> tonic::Status {
    client.reverse(request).await.expect_err("declined")
}

async fn balances(client: &mut Client, ids: &[u64]) -> Vec<i64> {
    let mut out = Vec::new();
    for id in ids {
        let account = client
            .get_account(pb::GetAccountRequest { account_id: *id })
            .await
            .unwrap()
            .into_inner();
        out.push(account.balance);
    }
    out
}

/// Polls until `n` calls wait behind the held transaction: on an account's row
/// or on a key row, in the database, or queued for a writer of one of `apps`.
async fn until_behind(db: &TestDb, apps: &[&TestApp], n: u64) {
    for _ in 0..1500 {
        let queued: usize = apps.iter().map(|a| a.persistence.waiting_calls()).sum();
        let waiting = db.waiting_on("accounts").await
            + db.waiting_on("key locks").await
            + db.parked_probes().await
            + u64::try_from(queued).unwrap();
        if waiting >= n {
            return;
        }
    }
    panic!("fewer than {n} calls came to wait behind the held transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transfer_a_post_and_a_credit_are_reversed_mirror_by_mirror() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 1_000).await;
    let b = app.funded_account("USD", 0).await;
    let c = app.funded_account("USD", 0).await;

    let moved = client
        .transfer(transfer("pay", a, b, 100))
        .await
        .unwrap()
        .into_inner();
    let mut request = reverse("undo-pay", "pay");
    request.description = "wrong payee".into();
    request.metadata = [("ticket".to_owned(), "T-7".to_owned())].into();
    let reply = reversed(&mut client, request.clone()).await;
    assert_eq!(balances(&mut client, &[a, b]).await, [1_000, 0]);
    let debit = &reply.entries[0];
    let credit_back = &reply.entries[1];
    assert_eq!(
        (
            debit.account_id,
            debit.kind(),
            debit.amount,
            debit.counterparty_account_id
        ),
        (b, pb::EntryKind::TransferOut, 100, a)
    );
    assert_eq!(debit.reverses_entry_id, moved.credit.unwrap().entry_id);
    assert_eq!(
        (
            credit_back.account_id,
            credit_back.kind(),
            credit_back.reverses_entry_id
        ),
        (a, pb::EntryKind::TransferIn, moved.debit.unwrap().entry_id)
    );
    assert!(
        reply
            .entries
            .iter()
            .all(|e| e.idempotency_key == "undo-pay" && e.description == "wrong payee")
    );
    let read = client
        .get_entry(pb::GetEntryRequest {
            entry_id: debit.entry_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.metadata.get("ticket").map(String::as_str), Some("T-7"));
    assert_eq!(read.reverses_entry_id, debit.reverses_entry_id);

    // A replay is the stored reply; a second reversal under another key is
    // ALREADY_REVERSED, naming the first.
    let again = client.reverse(request).await.unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner(), reply);
    let twice = declined(&mut client, reverse("undo-pay-2", "pay")).await;
    assert_eq!(
        (twice.code(), reason(&twice).as_str()),
        (Code::FailedPrecondition, "ALREADY_REVERSED")
    );
    assert_eq!(info(&twice, "reversal_key").as_deref(), Some("undo-pay"));

    // A post: the last leg's mirror first, each leg's index kept.
    client
        .post(post("sale", vec![leg(a, b, 97), leg(a, c, 3)]))
        .await
        .unwrap();
    let reply = reversed(&mut client, reverse("undo-sale", "sale")).await;
    let shape: Vec<_> = reply
        .entries
        .iter()
        .map(|e| (e.account_id, e.kind(), e.leg))
        .collect();
    assert_eq!(
        shape,
        [
            (c, pb::EntryKind::TransferOut, 1),
            (a, pb::EntryKind::TransferIn, 1),
            (b, pb::EntryKind::TransferOut, 0),
            (a, pb::EntryKind::TransferIn, 0),
        ]
    );
    assert_eq!(balances(&mut client, &[a, b, c]).await, [1_000, 0, 0]);

    assert_audit_passes(&db.url).await;
}

/// 16 reversals of one transfer under 16 keys through two instances. The first
/// is held before its COMMIT until the other 15 wait behind it (on the
/// original's key row, alone or in a batch, or queued for a writer): exactly one reverses it, the
/// others are told ALREADY_REVERSED with its key, and its retry replays its reply
/// byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_reversals_of_one_transfer_racing_through_two_instances_reverse_it_once() {
    let db = TestDb::new();
    let gate = Gate::new("rev-00");
    let a = TestApp::spawn_with(
        &db,
        Config {
            gate: Some(gate.clone()),
            ..storm_config()
        },
    )
    .await;
    let b = TestApp::spawn_with(&db, storm_config()).await;
    let from = a.funded_account("USD", 500).await;
    let to = a.funded_account("USD", 0).await;
    a.client()
        .await
        .transfer(transfer("z-pay", from, to, 200))
        .await
        .unwrap();

    let first = tokio::spawn(raw_call(
        a.channel().await,
        "Reverse",
        reverse("rev-00", "z-pay"),
    ));
    gate.reached().await;
    let channels = [a.channel().await, b.channel().await];
    let others = at_once(15, &channels, |n, channel| {
        raw_call(
            channel,
            "Reverse",
            reverse(&format!("rev-{:02}", n + 1), "z-pay"),
        )
    });
    // The original's key sorts after theirs: each has claimed its own key and
    // waits on the original's row, one transaction each or batched.
    until_in_flight(&db, &[&a, &b], "rev-%", 16).await;
    gate.release();

    let (_, winner) = first.await.unwrap().expect("the first reverses it");
    for other in others {
        let status = other.await.unwrap().expect_err("the others are declined");
        assert_eq!(reason(&status), "ALREADY_REVERSED", "{status:?}");
        assert_eq!(info(&status, "reversal_key").as_deref(), Some("rev-00"));
    }
    let (meta, again) = raw_call(b.channel().await, "Reverse", reverse("rev-00", "z-pay"))
        .await
        .unwrap();
    assert!(replayed(&meta));
    assert_eq!(again, winner, "the winner's retry replays byte for byte");
    assert_eq!(pb::ReverseReply::decode(winner).unwrap().entries.len(), 2);
    assert_eq!(db.balance(from).await, 500);
    assert_eq!(db.balance(to).await, 0);
    assert_eq!(db.count("SELECT COUNT(*) FROM reversals").await, 1);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM entries WHERE reverses_entry_id IS NOT NULL")
            .await,
        2
    );
    assert_audit_passes(&db.url).await;
}

/// A reversal and a spend of the money it would take back, each in turn held
/// before its COMMIT with the other waiting behind it: the second is declined,
/// money is conserved, and the journal replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reversal_racing_a_spend_of_the_same_money_one_is_declined() {
    for spend_first in [true, false] {
        let db = TestDb::new();
        let held = if spend_first { "spend" } else { "undo" };
        let gate = Gate::new(held);
        let app = TestApp::spawn_with(
            &db,
            Config {
                gate: Some(gate.clone()),
                ..Config::default()
            },
        )
        .await;
        let mut client = app.client().await;
        let x = app.funded_account("USD", 100).await;
        let y = app.funded_account("USD", 0).await;
        client.transfer(transfer("pay", x, y, 100)).await.unwrap();

        let spend = raw_call(app.channel().await, "Charge", charge("spend", y, 60));
        let undo = raw_call(app.channel().await, "Reverse", reverse("undo", "pay"));
        let (first, second) = if spend_first {
            let first = tokio::spawn(spend);
            gate.reached().await;
            (first, tokio::spawn(undo))
        } else {
            let first = tokio::spawn(undo);
            gate.reached().await;
            (first, tokio::spawn(spend))
        };
        until_behind(&db, &[&app], 1).await;
        gate.release();
        first.await.unwrap().expect("the held one commits");
        let status = second.await.unwrap().expect_err("the other is declined");
        assert_eq!(reason(&status), "INSUFFICIENT_FUNDS", "{status:?}");
        if spend_first {
            assert_eq!(info(&status, "leg").as_deref(), Some("0"));
            assert_eq!(balances(&mut client, &[x, y]).await, [0, 40]);
        } else {
            assert_eq!(balances(&mut client, &[x, y]).await, [100, 0]);
        }
        let replay = client.charge(charge("spend", y, 60)).await;
        let replay_undo = client.reverse(reverse("undo", "pay")).await;
        assert_eq!(replay.is_ok(), spend_first);
        assert_eq!(replay_undo.is_ok(), !spend_first);
        assert_audit_passes(&db.url).await;
    }
}

/// A post whose money was spent since: the reversal is declined naming the
/// leg; with `force` it is applied and the account overdrawn, held money
/// included. A ceiling still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_post_whose_money_was_spent_is_declined_by_leg_then_forced() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let buyer = app.funded_account("USD", 100).await;
    let merchant = app.funded_account("USD", 0).await;
    let platform = app.funded_account("USD", 0).await;
    client
        .post(post(
            "sale",
            vec![leg(buyer, merchant, 97), leg(buyer, platform, 3)],
        ))
        .await
        .unwrap();
    client.charge(charge("payout", merchant, 90)).await.unwrap();
    client
        .place_hold(place_hold("reserve", merchant, 5, Duration::from_secs(600)))
        .await
        .unwrap();

    let status = declined(&mut client, reverse("undo", "sale")).await;
    assert_eq!(reason(&status), "INSUFFICIENT_FUNDS");
    assert_eq!(info(&status, "leg").as_deref(), Some("0"));
    assert_eq!(info(&status, "account_id"), Some(merchant.to_string()));
    assert_eq!(
        balances(&mut client, &[buyer, merchant, platform]).await,
        [0, 7, 3]
    );

    let mut forced = reverse("undo-forced", "sale");
    forced.force = true;
    let reply = reversed(&mut client, forced.clone()).await;
    assert_eq!(reply.entries.len(), 4);
    assert_eq!(
        balances(&mut client, &[buyer, merchant, platform]).await,
        [100, -90, 0]
    );
    let again = client.reverse(forced).await.unwrap();
    assert!(replayed(again.metadata()));

    // Force never lifts a ceiling.
    let capped = app.funded_account("USD", 0).await;
    client.credit(credit("in", capped, 50)).await.unwrap();
    client
        .transfer(transfer("out", capped, buyer, 50))
        .await
        .unwrap();
    client
        .set_limits(crate::support::set_limits(
            "cap",
            capped,
            crate::support::limits(None, Some(10)),
        ))
        .await
        .unwrap();
    let mut over = reverse("undo-out", "out");
    over.force = true;
    let status = declined(&mut client, over).await;
    assert_eq!(reason(&status), "BALANCE_LIMIT_EXCEEDED");
    assert_audit_passes(&db.url).await;
}

/// A reversal held before its COMMIT while its retry arrives: the retry waits
/// on the key and replays its reply. A reversal of an original still in flight
/// waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reversal_in_flight_and_an_original_in_flight_are_waited_for() {
    let db = TestDb::new();
    let gate = Gate::new("undo");
    let app = TestApp::spawn_with(
        &db,
        Config {
            gate: Some(gate.clone()),
            ..Config::default()
        },
    )
    .await;
    let other = TestApp::spawn(&db).await;
    let x = app.funded_account("USD", 100).await;
    let y = app.funded_account("USD", 0).await;
    app.client()
        .await
        .transfer(transfer("pay", x, y, 30))
        .await
        .unwrap();

    let first = tokio::spawn(raw_call(
        app.channel().await,
        "Reverse",
        reverse("undo", "pay"),
    ));
    gate.reached().await;
    let retry = tokio::spawn(raw_call(
        other.channel().await,
        "Reverse",
        reverse("undo", "pay"),
    ));
    until_behind(&db, &[&other], 1).await;
    gate.release();
    let (_, body) = first.await.unwrap().unwrap();
    let (meta, again) = retry.await.unwrap().unwrap();
    assert!(replayed(&meta));
    assert_eq!(again, body);
    assert_eq!(db.balance(y).await, 0);

    // The original held in flight: its reversal waits on its key row.
    let gate = Gate::new("pay-2");
    let held = TestApp::spawn_with(
        &db,
        Config {
            gate: Some(gate.clone()),
            ..Config::default()
        },
    )
    .await;
    let original = tokio::spawn(raw_call(
        held.channel().await,
        "Transfer",
        transfer("pay-2", x, y, 20),
    ));
    gate.reached().await;
    let undo = tokio::spawn(raw_call(
        other.channel().await,
        "Reverse",
        reverse("undo-2", "pay-2"),
    ));
    until_behind(&db, &[&other], 1).await;
    gate.release();
    original.await.unwrap().unwrap();
    undo.await
        .unwrap()
        .expect("the reversal waited for its original");
    assert_eq!(db.balance(y).await, 0);
    assert_eq!(db.balance(x).await, 100);
    assert_audit_passes(&db.url).await;
}

/// After retention purged the original's key row, its entries still say what
/// it was: a transfer is reversed (once), a charge is not reversible, and a
/// purged decline is a key under which nothing took effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reversal_after_the_original_s_key_row_was_purged() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(
        &db,
        Config {
            key_retention: Some(Duration::from_secs(1)),
            ..Config::default()
        },
    )
    .await;
    let mut client = app.client().await;
    let x = app.funded_account("USD", 100).await;
    let y = app.funded_account("USD", 0).await;
    client
        .transfer(transfer("old-pay", x, y, 60))
        .await
        .unwrap();
    client.charge(charge("old-ride", x, 10)).await.unwrap();
    client
        .charge(charge("old-big", x, 1_000))
        .await
        .unwrap_err();
    client
        .place_hold(place_hold("old-hold", x, 1, Duration::from_secs(600)))
        .await
        .unwrap();
    for key in ["old-pay", "old-ride", "old-big", "old-hold"] {
        db.until_purged(key).await;
    }
    let reply = reversed(&mut client, reverse("undo-pay", "old-pay")).await;
    assert_eq!(reply.entries.len(), 2);
    assert_eq!(balances(&mut client, &[x, y]).await, [90, 0]);
    let twice = declined(&mut client, reverse("undo-pay-again", "old-pay")).await;
    assert_eq!(reason(&twice), "ALREADY_REVERSED");
    for (key, original, expected) in [
        ("undo-ride", "old-ride", "NOT_REVERSIBLE"),
        ("undo-hold", "old-hold", "NOT_REVERSIBLE"),
        ("undo-big", "old-big", "KEY_NOT_FOUND"),
    ] {
        let status = declined(&mut client, reverse(key, original)).await;
        assert_eq!(reason(&status), expected, "{original}");
    }
    assert_audit_passes(&db.url).await;
}

/// A credit's mirror is a CHARGE, which no refund gives back; what cannot be
/// reversed is declined and stored; bad input records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_cannot_be_reversed_is_declined_and_stored() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 1_000).await;
    let b = app.funded_account("USD", 0).await;
    let c = app.funded_account("USD", 0).await;
    client.transfer(transfer("pay", a, b, 100)).await.unwrap();
    reversed(&mut client, reverse("undo-pay", "pay")).await;
    declined(&mut client, reverse("undo-pay-2", "pay")).await;

    // A credit's mirror is a CHARGE, which no refund gives back.
    client.credit(credit("top-up", c, 40)).await.unwrap();
    let reply = reversed(&mut client, reverse("undo-top-up", "top-up")).await;
    let charged = &reply.entries[0];
    assert_eq!(
        (charged.kind(), charged.amount, charged.balance_after),
        (pb::EntryKind::Charge, 40, 0)
    );
    let status = client
        .refund(refund("refund-reversal", charged.entry_id, 40))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "NOT_REFUNDABLE");

    // What cannot be reversed is declined and stored.
    client.charge(charge("ride", a, 5)).await.unwrap();
    for (key, original, expected) in [
        ("r-ride", "ride", "NOT_REVERSIBLE"),
        ("r-undo", "undo-pay", "NOT_REVERSIBLE"),
        ("r-declined", "undo-pay-2", "NOT_REVERSIBLE"),
        ("r-nothing", "never-used", "KEY_NOT_FOUND"),
    ] {
        let status = declined(&mut client, reverse(key, original)).await;
        assert_eq!(reason(&status), expected, "{original}: {status:?}");
        let again = declined(&mut client, reverse(key, original)).await;
        assert!(replayed(again.metadata()), "{original}: stored");
    }
    let status = declined(&mut client, reverse("r-nothing", "never-used")).await;
    assert_eq!(status.code(), Code::NotFound);
    // Bad input records nothing.
    for (key, original) in [("self", "self"), ("bad", ""), ("bad", "has space")] {
        let status = declined(&mut client, reverse(key, original)).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{original:?}");
    }
    assert_eq!(db.key_rows("self").await + db.key_rows("bad").await, 0);
    assert_audit_passes(&db.url).await;
}

/// A funded account whose calls go to the same group-commit writer as `account`'s.
async fn in_writer_of(app: &TestApp, account: u64) -> u64 {
    let writer = app.persistence.batch_writer(account);
    for _ in 0..100 {
        let other = app.funded_account("USD", 100).await;
        if app.persistence.batch_writer(other) == writer {
            return other;
        }
    }
    panic!("no account of 100 went to writer {writer:?}");
}

/// A reversal sent right behind its original, both queued while their writer
/// waits on a batch on another account, is never decided in the batch that
/// decides its original, where it would find the original claimed by its own
/// transaction and be stored as KEY_NOT_FOUND in the COMMIT that applies the
/// original: it reverses it, with one writer and with four (where it is queued
/// behind its original, in its writer, although it names no account). Sent the
/// other way round, the reversal comes first and finds nothing committed, and
/// the original is applied after it. Forced: the writer is held on a charge of
/// an account whose row an outside transaction holds until both calls queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reversal_queued_behind_its_original_is_decided_after_it_commits() {
    for writers in [1, 4] {
        let db = TestDb::new();
        let app = TestApp::spawn_with(
            &db,
            Config {
                batch_writers: Some(writers),
                batch_stall: Some(Duration::from_secs(2)),
                ..Config::default()
            },
        )
        .await;
        let from = app.funded_account("USD", 100).await;
        let to = app.funded_account("USD", 0).await;
        let busy = in_writer_of(&app, from).await;

        for (round, reversal_first) in [(0, false), (1, false), (2, true)] {
            let (pay, undo) = (format!("pay-{round}"), format!("undo-{round}"));
            let mut client = app.client().await;
            let transferring = {
                let (mut client, request) = (client.clone(), transfer(&pay, from, to, 30));
                async move { client.transfer(request).await }
            };
            let reversing = {
                let (mut client, request) = (client.clone(), reverse(&undo, &pay));
                async move { client.reverse(request).await }
            };
            let mut holder = app
                .busy_writer_under(&db, busy, &format!("busy-{round}"))
                .await;
            let (transferred, reversal) = if reversal_first {
                let reversal = tokio::spawn(reversing);
                app.until_queued(1).await;
                let transferred = tokio::spawn(transferring);
                app.until_queued(2).await;
                (transferred, reversal)
            } else {
                let transferred = tokio::spawn(transferring);
                app.until_queued(1).await;
                let reversal = tokio::spawn(reversing);
                app.until_queued(2).await;
                (transferred, reversal)
            };
            holder.query_drop("ROLLBACK").await.unwrap();
            transferred.await.unwrap().expect("transferred");
            let reversal = reversal.await.unwrap();
            let again = reverse(&format!("{undo}-again"), &pay);
            if reversal_first {
                let status = reversal.expect_err("nothing had committed under the key");
                assert_eq!(reason(&status), "KEY_NOT_FOUND", "{writers} writer(s)");
                assert_eq!(db.balance(to).await, 30, "{writers} writer(s)");
                assert_eq!(reversed(&mut client, again).await.entries.len(), 2);
            } else {
                let undone = reversal.expect("reversed, not KEY_NOT_FOUND").into_inner();
                assert_eq!(undone.entries.len(), 2, "{writers} writer(s)");
                let status = declined(&mut client, again).await;
                assert_eq!(reason(&status), "ALREADY_REVERSED", "{writers} writer(s)");
            }
            assert_eq!(balances(&mut client, &[from, to]).await, vec![100, 0]);
        }
        assert_audit_passes(&db.url).await;
    }
}
