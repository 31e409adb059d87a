//! A fixture for CI, not a check of its own: it fails on purpose while the run's
//! private database server is up. CI runs it (`--ignored`) and then asserts on
//! the process list that no server outlived the failed run.

use crate::support::{TestApp, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fails on purpose; CI runs it to prove a failing run leaves no database server"]
async fn a_failing_run_leaves_no_server() {
    let db = TestDb::new();
    let app = TestApp::spawn(&db).await;
    app.funded_account("USD", 1).await;
    panic!("failing on purpose while the private database server runs");
}
