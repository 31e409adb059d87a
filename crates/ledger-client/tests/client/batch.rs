//! A batch whose every item ends settled: an item held up past the deadline is
//! sent again until the budget ends and then reported unknown, never as an
//! outcome it did not get; the same items sent again settle it once, and the
//! items that had their outcome replay it.

use std::time::Duration;

use ledger_client::{Budget, Settled, pb};
use mysql_async::prelude::Queryable as _;

use crate::support::{TestApp, TestDb};

fn charge(key: &str, account_id: u64) -> pb::BatchItem {
    pb::BatchItem {
        call: Some(pb::batch_item::Call::Charge(pb::ChargeRequest {
            idempotency_key: key.into(),
            account_id,
            amount: 1,
            currency: "USD".into(),
            ..Default::default()
        })),
    }
}

fn charged(settled: &Settled) -> (bool, u64) {
    match settled {
        Settled::Done(done) => match &done.result {
            Some(pb::batch_result::Result::Charge(reply)) => {
                (done.replayed, reply.entry.as_ref().unwrap().account_id)
            }
            other => panic!("expected a charge, found {other:?}"),
        },
        Settled::Unknown(status) => panic!("expected a charge, found {status:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_item_held_up_is_unknown_until_sent_again_and_then_settled_once() {
    let db = TestDb::new();
    let app = TestApp::spawn_with(&db, |settings| {
        // The stalled charge waits for the row as long as the test holds it.
        settings.limits.lock_wait = Duration::from_secs(60);
    })
    .await;
    let held = app.funded_account("USD", 100).await;
    let free = app.funded_account("USD", 100).await;
    // A charge on `held` waits on its row: its writer's batch stalls, and every
    // later call on `held` is held back behind it.
    let mut holder = db.lock_account(held).await;
    let patient = app.client().with_budget(Budget {
        timeout: Duration::from_secs(120),
        attempt_timeout: Duration::from_secs(120),
        ..Budget::default()
    });
    let stalled = tokio::spawn(async move {
        patient
            .charge(pb::ChargeRequest {
                idempotency_key: "stalled".into(),
                account_id: held,
                amount: 1,
                currency: "USD".into(),
                ..Default::default()
            })
            .await
    });
    db.until_waiting_on("accounts", 1).await;

    let client = app.client().with_budget(Budget {
        timeout: Duration::from_secs(3),
        attempt_timeout: Duration::from_secs(1),
        ..Budget::default()
    });
    let items = vec![charge("b-held", held), charge("b-free", free)];
    let first = client.batch_settled(items.clone()).await.unwrap();
    match &first[0] {
        Settled::Unknown(status) => assert_eq!(status.code(), tonic::Code::DeadlineExceeded),
        other @ Settled::Done(_) => panic!("the held item has no outcome yet: {other:?}"),
    }
    assert_eq!(charged(&first[1]), (false, free));
    assert_eq!(
        db.balance(held).await,
        100,
        "nothing of the held item committed"
    );
    assert_eq!(db.balance(free).await, 99);

    holder.query_drop("ROLLBACK").await.unwrap();
    stalled.await.unwrap().unwrap();
    let again = client.batch_settled(items).await.unwrap();
    assert_eq!(charged(&again[0]), (false, held), "performed now, once");
    assert_eq!(charged(&again[1]), (true, free), "replayed");
    assert_eq!(db.balance(held).await, 98);
    assert_eq!(db.balance(free).await, 99);
}
