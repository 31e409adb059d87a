//! An instance at its limit of calls: it serves one call at a time
//! (`--max-concurrent-calls 1`), and its one place is taken by a charge parked
//! on an account that an outside transaction holds, until the test releases it.
//! Every other call meanwhile is refused at the door with `RESOURCE_EXHAUSTED` /
//! `TOO_MANY_CALLS`.

use std::time::Duration;

use ledger_client::{Answer, Budget, Decline, Error, pb};
use mysql_async::prelude::Queryable as _;

use super::app::TestApp;
use super::server::TestDb;

pub struct Busy {
    pub app: TestApp,
    /// A funded account (100 USD) that nothing holds.
    pub free_account: u64,
    holder: mysql_async::Conn,
    parked: tokio::task::JoinHandle<Result<Answer<pb::ChargeReply>, Error>>,
}

impl Busy {
    pub async fn start(db: &TestDb) -> Self {
        let app = TestApp::spawn_with(db, |settings| {
            settings.max_concurrent_calls = 1;
            // The parked charge waits for the row as long as the test holds it.
            settings.limits.lock_wait = Duration::from_secs(60);
        })
        .await;
        let held_account = app.funded_account("USD", 100).await;
        let free_account = app.funded_account("USD", 100).await;
        let holder = db.lock_account(held_account).await;
        let patient = app.client().with_budget(Budget {
            timeout: Duration::from_secs(120),
            attempt_timeout: Duration::from_secs(120),
            ..Budget::default()
        });
        let parked = tokio::spawn(async move {
            patient
                .charge(pb::ChargeRequest {
                    idempotency_key: "busy-parked".into(),
                    account_id: held_account,
                    amount: 1,
                    currency: "USD".into(),
                    description: String::new(),
                    ..Default::default()
                })
                .await
        });
        db.until_waiting_on("accounts", 1).await;
        Self {
            app,
            free_account,
            holder,
            parked,
        }
    }

    /// Ends the outside transaction; the parked charge commits and leaves the
    /// place free.
    pub async fn release(mut self) -> TestApp {
        self.holder.query_drop("ROLLBACK").await.unwrap();
        let parked = self.parked.await.unwrap();
        assert!(parked.is_ok(), "the parked charge: {parked:?}");
        self.app
    }
}

impl Busy {
    /// The code and reason of a call asked once, without a client's retries:
    /// `RESOURCE_EXHAUSTED` / `TOO_MANY_CALLS` while the place is taken.
    pub async fn asked_once(&self) -> (tonic::Code, String) {
        let mut raw = pb::ledger_client::LedgerClient::connect(self.app.url())
            .await
            .unwrap();
        let refused = raw
            .get_account(pb::GetAccountRequest {
                account_id: self.free_account,
            })
            .await
            .expect_err("a full instance refuses");
        let reason = Decline::from_status(&refused, None).reason;
        (refused.code(), reason.as_str().to_owned())
    }
}
