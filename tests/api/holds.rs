//! Holds: money reserved until captured, voided or expired; every debit respects
//! it, a hold is resolved at most once, and expiry is exact.

use std::time::Duration;

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::Code;

use crate::support::{
    Config, Gate, HeldStorm, TestApp, TestDb, assert_audit_passes, assert_one_did_the_work,
    at_once, capture, charge, info, place_hold, raw_call, reason, refund, replayed, transfer, void,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

const MINUTE: Duration = Duration::from_secs(60);

async fn account(client: &mut Client, id: u64) -> pb::Account {
    client
        .get_account(pb::GetAccountRequest { account_id: id })
        .await
        .unwrap()
        .into_inner()
}

async fn hold(client: &mut Client, id: u64) -> pb::Hold {
    client
        .get_hold(pb::GetHoldRequest { hold_id: id })
        .await
        .unwrap()
        .into_inner()
}

async fn placed(
    client: &mut Client,
    key: &str,
    account: u64,
    amount: i64,
    ttl: Duration,
) -> pb::Hold {
    client
        .place_hold(place_hold(key, account, amount, ttl))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_money_is_spoken_for_and_a_capture_takes_part_of_it() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let id = app.funded_account("USD", 100).await;

    let h = placed(&mut c, "h", id, 70, MINUTE).await;
    assert_eq!(h.state(), pb::HoldState::Held);
    let a = account(&mut c, id).await;
    assert_eq!((a.balance, a.held, a.available), (100, 70, 30));

    let declined = c.charge(charge("c40", id, 40)).await.unwrap_err();
    assert_eq!(reason(&declined), "INSUFFICIENT_FUNDS");
    assert_eq!(info(&declined, "available").as_deref(), Some("30"));
    c.charge(charge("c30", id, 30)).await.unwrap();
    // Transfers and holds are debits too.
    let other = app.funded_account("USD", 0).await;
    let status = c.transfer(transfer("t1", id, other, 1)).await.unwrap_err();
    assert_eq!(reason(&status), "INSUFFICIENT_FUNDS");
    let status = c
        .place_hold(place_hold("h2", id, 1, MINUTE))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "INSUFFICIENT_FUNDS");

    let captured = c
        .capture_hold(capture("cap", h.hold_id, 50))
        .await
        .unwrap()
        .into_inner();
    let (ch, entry) = (captured.hold.unwrap(), captured.entry.unwrap());
    assert_eq!(
        (ch.state(), ch.captured_amount),
        (pb::HoldState::Captured, 50)
    );
    assert_eq!(
        (
            entry.kind(),
            entry.amount,
            entry.hold_id,
            entry.balance_after
        ),
        (pb::EntryKind::Capture, 50, h.hold_id, 20)
    );
    let a = account(&mut c, id).await;
    assert_eq!((a.balance, a.held, a.available), (20, 0, 20));
    assert_eq!(
        hold(&mut c, h.hold_id).await.state(),
        pb::HoldState::Captured
    );

    // A capture is refundable like a charge, up to what it took.
    c.refund(refund("back", entry.entry_id, 50)).await.unwrap();
    let status = c
        .refund(refund("again", entry.entry_id, 1))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "REFUND_EXCEEDS_CHARGE");
    assert_eq!(account(&mut c, id).await.balance, 70);
    assert_audit_passes(&db.url).await;
}

/// A 2 s hold: it reserves until `expires_at`; once the database's clock passes
/// that, with nothing having touched it, it reserves nothing, reads as expired
/// and cannot be captured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_expires_at_the_instant_its_time_runs_out() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let id = app.funded_account("USD", 100).await;
    let h = placed(&mut c, "short", id, 60, Duration::from_secs(2)).await;
    let (created, expires) = (h.created_at.unwrap(), h.expires_at.unwrap());
    assert_eq!(expires.seconds - created.seconds, 2);
    assert_eq!(expires.nanos, created.nanos);

    let status = c.charge(charge("early", id, 100)).await.unwrap_err();
    assert_eq!(reason(&status), "INSUFFICIENT_FUNDS");

    db.until_hold_expired(h.hold_id).await;

    let a = account(&mut c, id).await;
    assert_eq!((a.balance, a.held, a.available), (100, 0, 100));
    assert_eq!(
        hold(&mut c, h.hold_id).await.state(),
        pb::HoldState::Expired
    );
    let status = c
        .capture_hold(capture("late", h.hold_id, 10))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), reason(&status).as_str()),
        (Code::FailedPrecondition, "HOLD_EXPIRED")
    );
    let status = c.void_hold(void("late-void", h.hold_id)).await.unwrap_err();
    assert_eq!(reason(&status), "HOLD_EXPIRED");
    c.charge(charge("all", id, 100))
        .await
        .expect("the whole balance is available");
    assert_audit_passes(&db.url).await;
}

/// A capture held before its COMMIT while a void of the same hold (another key,
/// another instance) waits for the account: the void then finds it captured.
/// And the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capture_and_a_void_racing_leave_one_winner() {
    for capture_first in [true, false] {
        let db = TestDb::new();
        let first_key = if capture_first { "cap" } else { "void" };
        let gate = Gate::new(first_key);
        let a = TestApp::spawn_with(
            &db,
            Config {
                gate: Some(gate.clone()),
                ..Config::default()
            },
        )
        .await;
        let b = TestApp::spawn(&db).await;
        let id = a.funded_account("USD", 100).await;
        let h = placed(&mut a.client().await, "h", id, 40, MINUTE).await;

        let (first, second) = if capture_first {
            ("CaptureHold", "VoidHold")
        } else {
            ("VoidHold", "CaptureHold")
        };
        let request = |method: &str, channel| -> tokio::task::JoinHandle<_> {
            if method == "CaptureHold" {
                tokio::spawn(raw_call(
                    channel,
                    "CaptureHold",
                    capture("cap", h.hold_id, 40),
                ))
            } else {
                tokio::spawn(raw_call(channel, "VoidHold", void("void", h.hold_id)))
            }
        };
        let winner = request(first, a.channel().await);
        gate.reached().await;
        // Only now, with the first holding the account, is the second sent.
        let loser = request(second, b.channel().await);
        db.until_waiting_on("accounts", 1).await;
        gate.release();
        winner.await.unwrap().expect("the first wins");
        let status = loser.await.unwrap().unwrap_err();
        let state = if capture_first {
            "HOLD_STATE_CAPTURED"
        } else {
            "HOLD_STATE_VOIDED"
        };
        assert_eq!(reason(&status), "HOLD_NOT_HELD");
        assert_eq!(info(&status, "state").as_deref(), Some(state));
        let expected_balance = if capture_first { 60 } else { 100 };
        assert_eq!(db.balance(id).await, expected_balance);
        assert_audit_passes(&db.url).await;
    }
}

/// Many rounds of two captures and a void sent at once, under different keys
/// through two instances: each round has exactly one winner, and the losers name
/// the state it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_resolutions_have_one_winner_per_hold() {
    let db = TestDb::new();
    let a = TestApp::spawn(&db).await;
    let b = TestApp::spawn(&db).await;
    let id = a.funded_account("USD", 1_000_000).await;
    let mut c = a.client().await;
    let channels = [a.channel().await, b.channel().await];
    let mut captured = 0;
    for round in 0..30 {
        let h = placed(&mut c, &format!("h{round}"), id, 100, MINUTE).await;
        let calls = at_once(3, &channels, |i, channel| {
            let (key, hold_id) = (format!("r{round}-{i}"), h.hold_id);
            async move {
                if i == 2 {
                    raw_call(channel, "VoidHold", void(&key, hold_id)).await
                } else {
                    let amount = 30 + 10 * i64::try_from(i).unwrap();
                    raw_call(channel, "CaptureHold", capture(&key, hold_id, amount)).await
                }
            }
        });
        let mut winners = 0;
        let mut states = Vec::new();
        for call in calls {
            match call.await.unwrap() {
                Ok(_) => winners += 1,
                Err(refused) => {
                    assert_eq!(reason(&refused), "HOLD_NOT_HELD", "{refused:?}");
                    states.push(info(&refused, "state").unwrap());
                }
            }
        }
        assert_eq!(winners, 1, "round {round}");
        let state = hold(&mut c, h.hold_id).await.state();
        assert!(
            states.iter().all(|s| s == state.as_str_name()),
            "round {round}: {states:?}"
        );
        if state == pb::HoldState::Captured {
            captured += hold(&mut c, h.hold_id).await.captured_amount;
        }
    }
    assert_eq!(db.balance(id).await, 1_000_000 - captured);
    assert_audit_passes(&db.url).await;
}

/// 32 identical PlaceHolds through two instances, the first held before COMMIT
/// until the others are parked: one hold, 32 identical replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_identical_holds_place_one() {
    let db = TestDb::new();
    let config = Config {
        pool_size: 20,
        ..Config::default()
    };
    let storm = HeldStorm::start(&db, "hold", config).await;
    let id = storm.a.funded_account("USD", 100).await;
    let request = place_hold("hold", id, 80, MINUTE);
    let replies = storm.run(&db, 32, "PlaceHold", request).await;
    assert_one_did_the_work(&replies, "32 identical holds");
    assert_eq!(db.count("SELECT COUNT(*) FROM holds").await, 1);
    let a_account = account(&mut storm.a.client().await, id).await;
    assert_eq!((a_account.held, a_account.available), (80, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_requests_are_checked_and_declines_stored() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut c = app.client().await;
    let id = app.funded_account("USD", 100).await;
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(999),
        Duration::from_secs(30 * 24 * 3600 + 1),
    ] {
        let status = c
            .place_hold(place_hold("bad-ttl", id, 1, ttl))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{ttl:?}");
    }
    let mut no_ttl = place_hold("no-ttl", id, 1, MINUTE);
    no_ttl.ttl = None;
    assert_eq!(
        c.place_hold(no_ttl).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    placed(
        &mut c,
        "thirty-days",
        id,
        1,
        Duration::from_secs(30 * 24 * 3600),
    )
    .await;

    let h = placed(&mut c, "h", id, 50, MINUTE).await;
    let over = c
        .capture_hold(capture("over", h.hold_id, 51))
        .await
        .unwrap_err();
    assert_eq!(reason(&over), "CAPTURE_EXCEEDS_HOLD");
    assert!(replayed(
        c.capture_hold(capture("over", h.hold_id, 51))
            .await
            .unwrap_err()
            .metadata()
    ));
    let none = c.void_hold(void("none", 999_999)).await.unwrap_err();
    assert_eq!(
        (none.code(), reason(&none).as_str()),
        (Code::NotFound, "HOLD_NOT_FOUND")
    );
    let missing = c
        .get_hold(pb::GetHoldRequest { hold_id: 999_999 })
        .await
        .unwrap_err();
    assert_eq!(reason(&missing), "HOLD_NOT_FOUND");

    let voided = c
        .void_hold(void("v", h.hold_id))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    assert_eq!(voided.state(), pb::HoldState::Voided);
    assert_eq!(account(&mut c, id).await.held, 1);
    let again = c
        .capture_hold(capture("after-void", h.hold_id, 1))
        .await
        .unwrap_err();
    assert_eq!(info(&again, "state").as_deref(), Some("HOLD_STATE_VOIDED"));
    let euros = c
        .place_hold(pb::PlaceHoldRequest {
            currency: "EUR".into(),
            ..place_hold("eur", id, 1, MINUTE)
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&euros), "CURRENCY_MISMATCH");
    let nowhere = c
        .place_hold(place_hold("nowhere", 999_999, 1, MINUTE))
        .await
        .unwrap_err();
    assert_eq!(reason(&nowhere), "ACCOUNT_NOT_FOUND");
}

/// One clock: a hold placed through an instance whose `--session-init` moves the
/// session's time zone still lives exactly its ttl, in UTC, as every instance
/// sees it: its capture is refused from the instant every instance shows it
/// expired, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lives_its_ttl_by_one_clock_whatever_the_session_time_zone() {
    let db = TestDb::new();
    let shifted = TestApp::spawn_with(
        &db,
        Config {
            session_init: Some("SET time_zone = '+05:00'".into()),
            ..Config::default()
        },
    )
    .await;
    let plain = TestApp::spawn(&db).await;
    let id = plain.funded_account("USD", 100).await;
    let (mut through_shifted, mut through_plain) = (shifted.client().await, plain.client().await);

    let ttl = Duration::from_secs(2);
    let placed = through_shifted
        .place_hold(place_hold("tz-hold", id, 40, ttl))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap();
    let (created, expires) = (placed.created_at.unwrap(), placed.expires_at.unwrap());
    assert_eq!(
        expires.seconds - created.seconds,
        2,
        "{created:?} {expires:?}"
    );
    assert_eq!(expires.nanos, created.nanos);
    // The database's own instant, in seconds since the epoch (no time zone).
    let now: i64 = db
        .sql()
        .await
        .query_first("SELECT UNIX_TIMESTAMP()")
        .await
        .unwrap()
        .unwrap();
    assert!(
        (now - created.seconds).abs() <= 5,
        "placed at {now}, recorded as {}",
        created.seconds
    );

    for client in [&mut through_shifted, &mut through_plain] {
        assert_eq!(
            hold(client, placed.hold_id).await.state(),
            pb::HoldState::Held
        );
    }
    db.until_hold_expired(placed.hold_id).await;
    for (i, client) in [&mut through_shifted, &mut through_plain]
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            hold(client, placed.hold_id).await.state(),
            pb::HoldState::Expired
        );
        let refused = client
            .capture_hold(capture(&format!("tz-capture-{i}"), placed.hold_id, 1))
            .await
            .unwrap_err();
        assert_eq!(reason(&refused), "HOLD_EXPIRED");
    }
}

/// Long enough to place all the holds before the first expires (each placement
/// locks the account, and would release the ones already expired).
const TINY_TTL: Duration = Duration::from_secs(5);

/// Expired holds stop costing: the first transaction that locks their account
/// releases them (stored as expired, out of the account's held sum), so no later
/// one locks or counts them, whatever has or has not run in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expired_holds_are_released_by_the_next_call_on_their_account() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 10_000).await;
    let channel = app.channel().await;
    let calls = crate::support::at_once(1_000, std::slice::from_ref(&channel), |i, channel| {
        raw_call(
            channel,
            "PlaceHold",
            place_hold(&format!("tiny-{i}"), id, 1, TINY_TTL),
        )
    });
    for call in calls {
        call.await.unwrap().expect("placed");
    }
    let held = format!("SELECT COUNT(*) FROM holds WHERE account_id = {id} AND state = 1");
    assert_eq!(db.count(&held).await, 1_000);
    db.until_holds_expired_on(id).await;

    let mut client = app.client().await;
    client.charge(charge("after-expiry", id, 10)).await.unwrap();
    assert_eq!(db.count(&held).await, 0, "released by the charge");
    assert_eq!(
        db.count(&format!(
            "SELECT held FROM accounts WHERE account_id = {id}"
        ))
        .await,
        0
    );
    let a = account(&mut client, id).await;
    assert_eq!((a.balance, a.held, a.available), (9_990, 0, 9_990));
    assert_audit_passes(&db.url).await;
}

/// Holds near the largest amount, each placed after the one before expired: the
/// expired one is released first, so the sum of what is held never overflows
/// and every one is held (before, the second was INTERNAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_holds_placed_one_after_another_expires_are_all_held() {
    const HUGE: i64 = 9_000_000_000_000_000_000;
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", HUGE).await;
    let mut client = app.client().await;
    for i in 0..3 {
        let placed = client
            .place_hold(place_hold(
                &format!("huge-{i}"),
                id,
                HUGE,
                Duration::from_secs(1),
            ))
            .await
            .expect("held, never INTERNAL")
            .into_inner()
            .hold
            .unwrap();
        assert_eq!(placed.state(), pb::HoldState::Held);
        db.until_hold_expired(placed.hold_id).await;
    }
    assert_audit_passes(&db.url).await;
}
