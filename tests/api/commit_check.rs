//! The check that ends every final batch (`db::writes`): after COMMIT, the batch
//! raises a deadlock error unless the key's committed reply is the transaction's
//! own, so a COMMIT that reported success with nothing in it (a Galera cluster can
//! do that; tests/galera.rs) is retried like any conflict instead of answered.

use mysql_async::prelude::Queryable;

use crate::helpers::{TestApp, TestDb, charge};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_raises_a_conflict_unless_the_reply_committed() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await; // migrates
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

    // The service's own batches pass it.
    let account = app.funded_account("USD", 100).await;
    app.client()
        .await
        .charge(charge("checked", account, 40))
        .await
        .unwrap();
    assert_eq!(db.balance(account).await, 60);
    assert_eq!(db.entries_for_key("checked").await, 1);
}
