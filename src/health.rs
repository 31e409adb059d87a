//! The gRPC health status follows the database: `ledger.v1.Ledger` and the
//! overall service ("") are SERVING only while the database answers plain reads
//! and keyed transactions reach it (a statement of a keyed transaction that went
//! unanswered makes the keyed pool silent until a connection answers again), and
//! some node of the keyed pools is in its cluster's primary component
//! (`db::conn::membership`; on a single server, always). Each check also tells
//! the routing which nodes are outside it, so their accounts move within one
//! interval of a node being cut off.

use std::time::Duration;

use diesel_async::RunQueryDsl as _;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::db::conn::membership::Membership;
use crate::db::{Nodes, Persistence, Pool};
use crate::telemetry::metrics;

/// The service names whose status is reported: the overall server and the API.
pub const SERVICES: [&str; 2] = ["", "ledger.v1.Ledger"];

/// How often the database is checked, and the longest one check may take: a
/// database that goes away shows as NOT_SERVING within about twice this.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub async fn set_all(reporter: &HealthReporter, status: ServingStatus) {
    for service in SERVICES {
        reporter.set_service_status(service, status).await;
    }
}

/// Checks the database every [`CHECK_INTERVAL`] until `stop`, reporting changes,
/// and refreshes the pool gauges.
pub async fn watch_database(db: Persistence, reporter: HealthReporter, stop: CancellationToken) {
    let pool = db.reads().clone();
    let mut membership = Membership::new(db.keyed());
    let mut up = true;
    let mut ticks = tokio::time::interval(CHECK_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let (answer, members) =
            tokio::join!(answers(&pool), membership.check(db.keyed(), CHECK_INTERVAL));
        let now_up = answer && members && keyed_reach_any(db.keyed()).await;
        let state = pool.state();
        metrics::pool(
            state.idle_connections,
            state.connections - state.idle_connections,
        );
        metrics::database_up(now_up);
        if now_up != up && !stop.is_cancelled() {
            up = now_up;
            if up {
                tracing::info!("database answers again: SERVING");
                set_all(&reporter, ServingStatus::Serving).await;
            } else {
                tracing::warn!("database does not answer, or no node takes writes: NOT_SERVING");
                set_all(&reporter, ServingStatus::NotServing).await;
            }
        }
    }
}

/// Whether keyed transactions reach some node: routed by account, those of a
/// node that does not answer go to the next.
async fn keyed_reach_any(nodes: &Nodes) -> bool {
    for node in nodes.iter() {
        if keyed_reach(node.pool()).await {
            return true;
        }
    }
    false
}

/// Whether keyed transactions reach the database. After a statement of one went
/// unanswered, a connection checked out (and so pinged) must answer again.
async fn keyed_reach(pool: &Pool) -> bool {
    if !pool.silent() {
        return true;
    }
    let _ = tokio::time::timeout(CHECK_INTERVAL, pool.checkout(Some(CHECK_INTERVAL))).await;
    !pool.silent()
}

async fn answers(pool: &Pool) -> bool {
    let check = async {
        let mut conn = pool.checkout(Some(CHECK_INTERVAL)).await.ok()?;
        let answered = diesel::sql_query("SELECT 1").execute(&mut *conn).await;
        if answered.is_err() {
            crate::db::conn::connection::discard(&mut conn);
        }
        answered.ok()
    };
    tokio::time::timeout(CHECK_INTERVAL, check)
        .await
        .ok()
        .flatten()
        .is_some()
}
