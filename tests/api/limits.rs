//! Limits (SPEC 3.9): credit lines, ceilings and accounts with no floor, checked
//! inside the transaction under the account's lock, changed by `SetLimits` while
//! money moves, each change a LIMITS entry in the journal.

use std::time::Duration;

use ledger::proto::pb;
use mysql_async::prelude::Queryable as _;
use tonic::Code;

use crate::support::limits::{assert_storm_sound, journal, storm};
use crate::support::{
    Config, TestApp, TestDb, assert_audit_passes, capture, charge, credit, info, leg, limits,
    open_account, place_hold, post, raw_call, reason, refund, replayed, set_limits, transfer,
};

type Client = pb::ledger_client::LedgerClient<tonic::transport::Channel>;

async fn open(client: &mut Client, key: &str, limits: Option<pb::AccountLimits>) -> pb::Account {
    client
        .open_account(open_account(key, limits))
        .await
        .unwrap()
        .into_inner()
        .account
        .unwrap()
}

async fn account(client: &mut Client, id: u64) -> pb::Account {
    client
        .get_account(pb::GetAccountRequest { account_id: id })
        .await
        .unwrap()
        .into_inner()
}

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_account_shows_its_limits_and_absent_limits_are_the_safe_defaults() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let plain = open(&mut client, "plain", None).await;
    assert_eq!(plain.limits, Some(limits(Some(0), None)));
    let line = open(
        &mut client,
        "line",
        Some(limits(Some(-5000), Some(250_000))),
    )
    .await;
    assert_eq!(line.limits, Some(limits(Some(-5000), Some(250_000))));
    let funding = open(&mut client, "funding", Some(limits(None, None))).await;
    let shown = account(&mut client, funding.account_id).await;
    assert_eq!(shown.limits, Some(limits(None, None)));
    assert_eq!(
        account(&mut client, line.account_id).await.limits,
        line.limits
    );

    // An empty AccountLimits is the same request as none: it replays.
    let (headers, body) = raw_call(
        app.channel().await,
        "OpenAccount",
        open_account("plain", Some(pb::AccountLimits::default())),
    )
    .await
    .unwrap();
    assert!(replayed(&headers));
    let replay = <pb::OpenAccountReply as prost::Message>::decode(body).unwrap();
    assert_eq!(replay.account.unwrap().account_id, plain.account_id);
    // Other limits are another request.
    let reused = client
        .open_account(open_account("plain", Some(limits(Some(-1), None))))
        .await
        .unwrap_err();
    assert_eq!(reason(&reused), "IDEMPOTENCY_KEY_REUSED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_credit_line_lets_a_debit_down_to_its_floor_and_not_one_unit_below() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let id = open(&mut client, "open", Some(limits(Some(-5000), None)))
        .await
        .account_id;
    client.credit(credit("fund", id, 100)).await.unwrap();
    let hold = place_hold("hold", id, 1100, MINUTE);
    client.place_hold(hold).await.unwrap();
    // 100 - 1100 held = -1000 available: 4000 more may be taken.
    let over = client.charge(charge("over", id, 4001)).await.unwrap_err();
    assert_eq!(over.code(), Code::FailedPrecondition);
    assert_eq!(reason(&over), "INSUFFICIENT_FUNDS");
    assert_eq!(info(&over, "min_balance").as_deref(), Some("-5000"));
    assert_eq!(info(&over, "available").as_deref(), Some("-1000"));
    let at = client.charge(charge("at", id, 4000)).await.unwrap();
    assert_eq!(at.into_inner().entry.unwrap().balance_after, -3900);
    let shown = account(&mut client, id).await;
    assert_eq!(
        (shown.balance, shown.held, shown.available),
        (-3900, 1100, -5000)
    );

    // The decline is stored, byte for byte, whatever happens to the account.
    client.credit(credit("more", id, 10_000)).await.unwrap();
    let again = client.charge(charge("over", id, 4001)).await.unwrap_err();
    assert!(replayed(again.metadata()));
    assert_eq!(again.details(), over.details());
    assert_eq!(again.message(), over.message());
    // A floor at zero says so too.
    let plain = open(&mut client, "plain", None).await.account_id;
    let zero = client.charge(charge("zero", plain, 1)).await.unwrap_err();
    assert_eq!(info(&zero, "min_balance").as_deref(), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ceiling_stops_every_credit_and_is_stored() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let wallet = open(&mut client, "wallet", Some(limits(Some(0), Some(250))))
        .await
        .account_id;
    let source = open(&mut client, "source", Some(limits(None, None)))
        .await
        .account_id;
    client.credit(credit("fill", wallet, 200)).await.unwrap();
    let charged = client.charge(charge("spend", wallet, 50)).await.unwrap();
    let spent = charged.into_inner().entry.unwrap().entry_id;

    let declined = [
        client.credit(credit("c", wallet, 101)).await.unwrap_err(),
        client
            .transfer(transfer("t", source, wallet, 101))
            .await
            .unwrap_err(),
        client
            .post(post(
                "p",
                vec![leg(source, wallet, 50), leg(source, wallet, 51)],
            ))
            .await
            .unwrap_err(),
    ];
    for status in &declined {
        assert_eq!(reason(status), "BALANCE_LIMIT_EXCEEDED", "{status:?}");
        assert_eq!(info(status, "max_balance").as_deref(), Some("250"));
    }
    assert_eq!(info(&declined[2], "leg").as_deref(), Some("1"));
    // Up to the ceiling exactly; a refund meets it too.
    client.credit(credit("to-top", wallet, 100)).await.unwrap();
    let refunded = client.refund(refund("r", spent, 1)).await.unwrap_err();
    assert_eq!(reason(&refunded), "BALANCE_LIMIT_EXCEEDED");
    assert_eq!(account(&mut client, wallet).await.balance, 250);
    let replay = client.credit(credit("c", wallet, 101)).await.unwrap_err();
    assert!(replayed(replay.metadata()));
    assert_eq!(replay.details(), declined[0].details());
    assert_audit_passes(&db.url).await;
}

/// Money enters through a transfer from an account with no floor, and the book
/// stays double-entry: every balance sums to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_account_with_no_floor_funds_a_double_entry_book() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let funding = open(&mut client, "funding", Some(limits(None, None)))
        .await
        .account_id;
    let customer = open(&mut client, "customer", Some(limits(Some(-500), None)))
        .await
        .account_id;
    let merchant = open(&mut client, "merchant", None).await.account_id;
    client
        .transfer(transfer("in", funding, customer, 1000))
        .await
        .unwrap();
    client
        .transfer(transfer("buy", customer, merchant, 1400))
        .await
        .unwrap();
    let balances = [
        account(&mut client, funding).await.balance,
        account(&mut client, customer).await.balance,
        account(&mut client, merchant).await.balance,
    ];
    assert_eq!(balances, [-1000, -400, 1400]);
    assert_eq!(balances.iter().sum::<i64>(), 0);
    assert_audit_passes(&db.url).await;
}

/// A post's legs are checked as they apply: one that would pass only if its
/// legs were checked at the end is declined, naming the leg that went below.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_post_is_checked_leg_by_leg_not_at_its_end() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let a = app.funded_account("USD", 0).await;
    let b = app.funded_account("USD", 0).await;
    let c = app.funded_account("USD", 100).await;
    // A ends at 0 either way, but pays before it is paid.
    let early = client
        .post(post("early", vec![leg(a, b, 50), leg(c, a, 50)]))
        .await
        .unwrap_err();
    assert_eq!(reason(&early), "INSUFFICIENT_FUNDS");
    assert_eq!(info(&early, "leg").as_deref(), Some("0"));
    assert_eq!(info(&early, "account_id"), Some(a.to_string()));
    client
        .post(post("late", vec![leg(c, a, 50), leg(a, b, 50)]))
        .await
        .unwrap();
    assert_eq!(account(&mut client, b).await.balance, 50);
}

/// A capture takes what its hold reserved: a floor raised since never declines
/// it, and the account is left where the floor would not let a charge go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capture_is_never_declined_for_a_limit() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let id = app.funded_account("USD", 100).await;
    let hold = client
        .place_hold(place_hold("h", id, 80, MINUTE))
        .await
        .unwrap()
        .into_inner()
        .hold
        .unwrap()
        .hold_id;
    client
        .set_limits(set_limits("raise", id, limits(Some(90), None)))
        .await
        .unwrap();
    let charge_declined = client.charge(charge("c", id, 1)).await.unwrap_err();
    assert_eq!(reason(&charge_declined), "INSUFFICIENT_FUNDS");
    let captured = client.capture_hold(capture("cap", hold, 80)).await.unwrap();
    assert_eq!(captured.into_inner().entry.unwrap().balance_after, 20);
    assert_audit_passes(&db.url).await;
}

/// Sums past what an i64 holds are declined BALANCE_OVERFLOW in either
/// direction, never an internal error: a balance, what is held, and what is
/// available.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overflow_is_declined_in_either_direction() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let open_ended = open(&mut client, "open", Some(limits(None, None)))
        .await
        .account_id;
    client
        .charge(charge("down", open_ended, i64::MAX))
        .await
        .unwrap();
    let under = client
        .charge(charge("under", open_ended, 2))
        .await
        .unwrap_err();
    assert_eq!(reason(&under), "BALANCE_OVERFLOW");
    let held = client
        .place_hold(place_hold("hold", open_ended, 2, MINUTE))
        .await
        .unwrap_err();
    assert_eq!(
        reason(&held),
        "BALANCE_OVERFLOW",
        "available would underflow"
    );

    let other = open(&mut client, "other", Some(limits(None, None)))
        .await
        .account_id;
    client
        .place_hold(place_hold("big", other, i64::MAX, MINUTE))
        .await
        .unwrap();
    let more = client
        .place_hold(place_hold("more", other, 1, MINUTE))
        .await
        .unwrap_err();
    assert_eq!(reason(&more), "BALANCE_OVERFLOW", "held would overflow");
    let full = app.funded_account("USD", i64::MAX).await;
    let over = client.credit(credit("over", full, 1)).await.unwrap_err();
    assert_eq!(reason(&over), "BALANCE_OVERFLOW");
    assert_eq!(account(&mut client, open_ended).await.balance, -i64::MAX);
    assert_audit_passes(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_limits_writes_one_limits_entry_and_is_exactly_once() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let id = app.funded_account("USD", 40).await;
    let request = set_limits("line", id, limits(Some(-100), Some(500)));
    let (headers, first) = raw_call(app.channel().await, "SetLimits", request.clone())
        .await
        .unwrap();
    assert!(!replayed(&headers));
    let reply = <pb::SetLimitsReply as prost::Message>::decode(first.clone()).unwrap();
    let entry = reply.entry.unwrap();
    assert_eq!(entry.kind, pb::EntryKind::Limits as i32);
    assert_eq!((entry.amount, entry.balance_after), (0, 40));
    assert_eq!(entry.limits, Some(limits(Some(-100), Some(500))));
    assert_eq!(reply.account.unwrap().limits, entry.limits);

    let (headers, again) = raw_call(app.channel().await, "SetLimits", request)
        .await
        .unwrap();
    assert!(replayed(&headers));
    assert_eq!(again, first, "replayed byte for byte");
    let reused = client
        .set_limits(set_limits("line", id, limits(Some(-101), Some(500))))
        .await
        .unwrap_err();
    assert_eq!(reason(&reused), "IDEMPOTENCY_KEY_REUSED");

    // A change that changes nothing is recorded all the same.
    client
        .set_limits(set_limits("same", id, limits(Some(-100), Some(500))))
        .await
        .unwrap();
    let journal = journal(app.channel().await, id).await;
    let kinds: Vec<_> = journal.iter().map(|e| e.kind).collect();
    let (credit, limit) = (pb::EntryKind::Credit as i32, pb::EntryKind::Limits as i32);
    assert_eq!(kinds, [credit, limit, limit]);
    let read = client
        .get_entry(pb::GetEntryRequest {
            entry_id: entry.entry_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.limits, entry.limits);
    assert_eq!(journal[0].limits, None, "a credit sets no limits");

    // An unknown account is a stored decline.
    let ghost = client
        .set_limits(set_limits("ghost", id + 1000, limits(None, None)))
        .await
        .unwrap_err();
    assert_eq!(reason(&ghost), "ACCOUNT_NOT_FOUND");
    let ghost_again = client
        .set_limits(set_limits("ghost", id + 1000, limits(None, None)))
        .await
        .unwrap_err();
    assert!(replayed(ghost_again.metadata()));
    assert_audit_passes(&db.url).await;
}

/// Invalid limits, or none, are INVALID_ARGUMENT naming `limits.*` and leave the
/// key free for the corrected request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_limits_leave_the_key_free() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    let id = app.funded_account("USD", 0).await;
    let invalid = [
        (Some(limits(Some(10), Some(9))), "limits.max_balance"),
        (
            Some(pb::AccountLimits {
                min_balance: -5,
                no_min_balance: true,
                max_balance: None,
            }),
            "limits.min_balance",
        ),
        (None, "limits"),
    ];
    for (limits, field) in invalid {
        let request = pb::SetLimitsRequest {
            idempotency_key: "k".into(),
            account_id: id,
            limits,
        };
        let status = client.set_limits(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        let violations = tonic_types::StatusExt::get_details_bad_request(&status).unwrap();
        assert_eq!(violations.field_violations[0].field, field);
        let open = client
            .open_account(pb::OpenAccountRequest {
                idempotency_key: "o".into(),
                currency: "USD".into(),
                limits: Some(pb::AccountLimits {
                    min_balance: 1,
                    no_min_balance: true,
                    max_balance: None,
                }),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(open.code(), Code::InvalidArgument);
    }
    assert_eq!(db.key_rows("k").await + db.key_rows("o").await, 0);
    client
        .set_limits(set_limits("k", id, limits(Some(-10), None)))
        .await
        .unwrap();
    assert_eq!(
        account(&mut client, id).await.limits,
        Some(limits(Some(-10), None))
    );
}

/// A SetLimits parked on the account's row by an outside transaction, and a
/// charge queued behind it: once the row is free, the charge is decided against
/// the new floor, which lets it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_charge_queued_behind_a_parked_set_limits_meets_the_new_limits() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 0).await;
    let mut holder = db.lock_account(id).await;
    let mut setter = app.client().await;
    let set = tokio::spawn(async move {
        setter
            .set_limits(set_limits("lower", id, limits(Some(-50), None)))
            .await
    });
    db.until_waiting_on("accounts", 1).await;
    let mut charger = app.client().await;
    let queued = tokio::spawn(async move { charger.charge(charge("after", id, 50)).await });
    app.until_queued(1).await;
    holder.query_drop("ROLLBACK").await.unwrap();

    set.await.unwrap().unwrap();
    let entry = queued.await.unwrap().unwrap().into_inner().entry.unwrap();
    assert_eq!(entry.balance_after, -50);
    let kinds: Vec<_> = journal(app.channel().await, id)
        .await
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [pb::EntryKind::Limits as i32, pb::EntryKind::Charge as i32]
    );
}

/// One batch holding a debit, a SetLimits and a second debit on one account:
/// each debit is decided against the limits of its own turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_member_of_a_batch_meets_the_limits_of_its_turn() {
    let db = TestDb::new();
    let config = Config {
        batch_writers: Some(1),
        batch_stall: Some(Duration::from_secs(3600)),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let id = app.funded_account("USD", 100).await;
    let mut holder = app.busy_writer(&db).await;
    let mut calls = Vec::new();
    for (i, step) in ["before", "lower", "after", "raise", "last"]
        .into_iter()
        .enumerate()
    {
        let mut client = app.client().await;
        calls.push(tokio::spawn(async move {
            match step {
                "lower" => client
                    .set_limits(set_limits(step, id, limits(Some(-100), None)))
                    .await
                    .map(drop),
                "raise" => client
                    .set_limits(set_limits(step, id, limits(Some(0), None)))
                    .await
                    .map(drop),
                _ => client.charge(charge(step, id, 150)).await.map(drop),
            }
        }));
        app.until_queued(i + 1).await;
    }
    holder.query_drop("ROLLBACK").await.unwrap();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    let at = db
        .claimed_at(&["before", "lower", "after", "raise", "last"])
        .await;
    assert!(at.iter().all(|t| *t == at[0]), "one batch: {at:?}");
    assert_eq!(
        reason(answers[0].as_ref().unwrap_err()),
        "INSUFFICIENT_FUNDS",
        "100 above a floor at 0"
    );
    assert!(answers[1].is_ok() && answers[3].is_ok());
    assert!(
        answers[2].is_ok(),
        "100 above a floor at -100: {:?}",
        answers[2]
    );
    assert_eq!(
        info(answers[4].as_ref().unwrap_err(), "min_balance").as_deref(),
        Some("0"),
        "the floor back at 0"
    );
    assert_eq!(db.balance(id).await, -50);
    assert_audit_passes(&db.url).await;
}

/// 8 callers through two instances charge, credit and place holds on one
/// account while another moves its floor among 0, -3000, 2500, -1000 and 4000
/// every 40 ms: every debit met the floor in force before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_debits_while_the_floor_moves_meets_every_floor() {
    let db = TestDb::new();
    let a = TestApp::spawn(&db).await;
    let b = TestApp::spawn(&db).await;
    let channels = [a.channel().await, b.channel().await];
    let (account, counts) = storm(&channels, Duration::from_secs(3)).await;
    assert_storm_sound(&db, a.channel().await, account, &counts).await;
}

/// The limits migration reverses only while nothing uses what limits allow (a
/// balance below zero, a change of limits, limits other than the defaults);
/// otherwise it goes back, and comes again with every account at the defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_limits_migration_reverses_only_what_it_can() {
    const UP: &str = include_str!("../../migrations/2026-12-05-000001_limits/up.sql");
    const DOWN: &str = include_str!("../../migrations/2026-12-05-000001_limits/down.sql");
    let below_zero = |client: Client| async move {
        let mut client = client;
        let id = open(&mut client, "line", Some(limits(Some(-10), None)))
            .await
            .account_id;
        client.charge(charge("below", id, 5)).await.unwrap();
    };
    let changed = |client: Client| async move {
        let mut client = client;
        let id = open(&mut client, "plain", None).await.account_id;
        let defaults = set_limits("set", id, limits(Some(0), None));
        client.set_limits(defaults).await.unwrap();
    };
    let line = |client: Client| async move {
        let mut client = client;
        let id = open(&mut client, "line", Some(limits(Some(-10), None)))
            .await
            .account_id;
        client.credit(credit("fund", id, 5)).await.unwrap();
    };
    for (refusal, case) in [
        ("below zero", boxed(below_zero)),
        ("change of limits", boxed(changed)),
        ("other than a floor at zero", boxed(line)),
    ] {
        let db = TestDb::new();
        let app = TestApp::spawn(&db).await;
        case(app.client().await).await;
        let refused = db.sql().await.query_drop(DOWN).await.unwrap_err();
        assert!(refused.to_string().contains(refusal), "{refused}");
    }

    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    let id = app.funded_account("USD", 30).await;
    app.client()
        .await
        .charge(charge("c", id, 10))
        .await
        .unwrap();
    drop(app);
    let mut conn = db.sql().await;
    conn.query_drop(DOWN).await.unwrap();
    conn.query_drop(UP).await.unwrap();
    let app = TestApp::spawn(&db).await;
    let mut client = app.client().await;
    assert_eq!(
        account(&mut client, id).await.limits,
        Some(limits(Some(0), None))
    );
    let declined = client.charge(charge("zero", id, 21)).await.unwrap_err();
    assert_eq!(reason(&declined), "INSUFFICIENT_FUNDS");
    assert_audit_passes(&db.url).await;
}

type Case = Box<dyn FnOnce(Client) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>;

fn boxed<F, Fut>(case: F) -> Case
where
    F: FnOnce(Client) -> Fut + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Box::new(move |client| Box::pin(case(client)))
}
