//! Multi-primary batches (`db::exec::writes`, `Batch::Guarded`): every write guarded, and
//! after COMMIT a check that raises a deadlock error unless the key's committed
//! reply is the transaction's own, so a COMMIT that reported success with nothing
//! in it (a Galera cluster can do that; tests/multi_primary.rs) is retried like any
//! conflict instead of answered. A single server is detected as such and spared
//! them (tests/api/driver_trap.rs); `--multi-primary on` forces them, which is how
//! they run here.

use ledger::db::MultiPrimary;
use ledger::proto::pb;
use mysql_async::prelude::Queryable;
use tonic::Code;

use crate::support::{Config, TestApp, TestDb, charge, replayed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_raises_a_conflict_unless_the_reply_committed() {
    let db = TestDb::new();
    let _app = TestApp::spawn(&db).await; // migrates
    let mut sql = db.sql().await;

    sql.query_drop("CALL ledger_require_committed(TRUE)")
        .await
        .unwrap();
    for not_committed in ["FALSE", "NULL", "(SELECT 1 FROM accounts WHERE FALSE)"] {
        let err = sql
            .query_drop(format!("CALL ledger_require_committed({not_committed})"))
            .await
            .unwrap_err();
        let mysql_async::Error::Server(err) = err else {
            panic!("{not_committed}: {err:?}");
        };
        assert_eq!(
            (err.code, err.state.as_str()),
            (1213, "40001"),
            "{not_committed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_batches_commit_every_kind_of_outcome() {
    let db = TestDb::new();
    let config = Config {
        multi_primary: Some(MultiPrimary::On),
        ..Config::default()
    };
    let app = TestApp::spawn_with(&db, config).await;
    let mut client = app.client().await;

    // An opened account, a credit, a charge: outcome rows, balances, entries.
    let account = app.funded_account("USD", 100).await;
    let first = client
        .charge(charge("guarded", account, 40))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(db.balance(account).await, 60);
    assert_eq!(db.entries_for_key("guarded").await, 1);

    // A replay answers the committed reply.
    let again = client.charge(charge("guarded", account, 40)).await.unwrap();
    assert!(replayed(again.metadata()));
    assert_eq!(again.into_inner(), first);

    // A decline is stored with no entry, and replayed.
    for _ in 0..2 {
        let declined = client
            .charge(charge("too-much", account, 1_000))
            .await
            .unwrap_err();
        assert_eq!(declined.code(), Code::FailedPrecondition);
    }
    assert_eq!(db.entries_for_key("too-much").await, 0);
    assert_eq!(db.key_rows("too-much").await, 1);
    assert_eq!(db.balance(account).await, 60);

    // Two charges on one account: the second is numbered after the first.
    client
        .charge(charge("guarded-2", account, 10))
        .await
        .unwrap();
    let got = client
        .get_account(pb::GetAccountRequest {
            account_id: account,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.balance, 50);
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM entries WHERE account_id = {account} AND account_seq IN (1, 2, 3)"
        ))
        .await,
        3
    );
}

/// Which batches carry the check: with the procedure replaced by one that records
/// its calls, a single server (detected) never calls it, and `--multi-primary on`
/// calls it once per new key, always finding the reply committed; a replay, which
/// writes nothing, does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_multi_primary_batches_are_checked() {
    for (multi_primary, checks) in [(MultiPrimary::Auto, 0), (MultiPrimary::On, 3)] {
        let db = TestDb::new();
        let config = Config {
            multi_primary: Some(multi_primary),
            // Its connection's self-check calls the procedure too, whenever it
            // opens; only the keyed batches are counted here.
            stream_assigner: Some(false),
            ..Config::default()
        };
        let app = TestApp::spawn_with(&db, config).await;
        db.sql()
            .await
            .query_drop(
                "DROP PROCEDURE ledger_require_committed; \
                 CREATE TABLE checks (committed BOOLEAN); \
                 CREATE PROCEDURE ledger_require_committed(IN committed BOOLEAN) \
                 INSERT INTO checks VALUES (committed)",
            )
            .await
            .unwrap();

        let account = app.funded_account("USD", 100).await; // two new keys
        let mut client = app.client().await;
        for _ in 0..2 {
            client.charge(charge("checked", account, 10)).await.unwrap();
        }
        assert_eq!(
            db.count("SELECT COUNT(*) FROM checks WHERE committed")
                .await,
            checks,
            "{multi_primary:?}"
        );
        assert_eq!(db.count("SELECT COUNT(*) FROM checks").await, checks);
        assert_eq!(db.balance(account).await, 90);
    }
}
