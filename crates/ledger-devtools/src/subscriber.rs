//! `ledger bench --subscriptions N`: a receiver of the ledger's deliveries
//! (SPEC 3.15) on a loopback port, subscribed `N` times, which verifies every
//! signature and times each entry of a measured call from its reply to its
//! arrival, as watcher 0 of `--watchers` does (`follow::Follow`).
//!
//! Subscription 0 takes every entry after the run's start: its deliveries must
//! come in contiguous sequences (a repeat, after a failure, is skipped), or the
//! run fails. The others take only the entries of an account no call touches,
//! so they cost what a subscription with nothing to deliver costs (the `idle`
//! scenario measures that with no calls at all). The service must deliver to
//! loopback (`ledger serve --webhook-allow-private`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::time::Instant;
use tonic::transport::Channel;

use ledger_proto::pb;
use ledger_proto::pb::ledger_client::LedgerClient;
use ledger_proto::webhook::{SIGNATURE_HEADER, verify_signature};

use crate::follow::Follow;

/// How far a signature's time may be from this clock.
const TOLERANCE: Duration = Duration::from_secs(300);

/// What the receiver knows and has seen.
#[derive(Debug)]
struct Receiver {
    follow: Arc<Follow>,
    /// The secret of each subscription, by id.
    secrets: Mutex<Vec<(u64, String)>>,
    /// The subscription whose entries are timed and checked.
    first: Mutex<u64>,
    /// The last sequence subscription 0 received.
    last: Mutex<u64>,
    /// Why the run must fail, if it must.
    broken: Mutex<Option<String>>,
}

/// The receiver's server, as the bench's watchers are: a task the run drains.
pub(crate) type Served = tokio::task::JoinHandle<anyhow::Result<()>>;

/// Deletes the run's subscriptions, so none outlives it.
pub(crate) async fn unsubscribe(channel: Channel, ids: &[u64], run_id: &str) -> anyhow::Result<()> {
    let mut client = LedgerClient::new(channel);
    for id in ids {
        client
            .delete_subscription(pb::SubscriptionRequest {
                idempotency_key: format!("{run_id}-unsubscribe-{id}"),
                subscription_id: *id,
            })
            .await
            .context("cannot delete a subscription of the run")?;
    }
    Ok(())
}

/// Starts the receiver, subscribes it `n` times through `channel` (keys
/// `{run_id}-subscription-{i}`), all after `after`, and returns its task and
/// the subscriptions' ids.
pub(crate) async fn subscribe(
    channel: Channel,
    n: u64,
    after: u64,
    run_id: &str,
    follow: Arc<Follow>,
) -> anyhow::Result<(Served, Vec<u64>)> {
    let receiver = Arc::new(Receiver {
        follow,
        secrets: Mutex::default(),
        first: Mutex::new(0),
        last: Mutex::new(after),
        broken: Mutex::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(deliver))
        .with_state(receiver.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut client = LedgerClient::new(channel);
    for i in 0..n {
        let request = pb::CreateSubscriptionRequest {
            idempotency_key: format!("{run_id}-subscription-{i}"),
            url: url.clone(),
            // An account no call of a run touches: nothing to deliver.
            account_ids: if i == 0 {
                Vec::new()
            } else {
                vec![u64::MAX / 2]
            },
            after_sequence: Some(after),
            ..Default::default()
        };
        let reply = client
            .create_subscription(request)
            .await
            .context("cannot subscribe (is the service delivering to loopback?)")?
            .into_inner();
        let id = reply
            .subscription
            .map(|s| s.subscription_id)
            .unwrap_or_default();
        if i == 0 {
            *lock(&receiver.first) = id;
        }
        lock(&receiver.secrets).push((id, reply.secret));
    }
    receiver.follow.open.fetch_add(1, Ordering::Relaxed);
    // What scripts/lib/idle-watchers.sh waits for before it samples.
    eprintln!("subscribed {n}");
    let ids = lock(&receiver.secrets).iter().map(|(id, _)| *id).collect();
    let task = tokio::spawn(async move {
        loop {
            if let Some(why) = lock(&receiver.broken).take() {
                server.abort();
                anyhow::bail!(why);
            }
            if server.is_finished() {
                anyhow::bail!("the receiver stopped");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    Ok((task, ids))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One delivery: verified, then each entry of subscription 0 timed.
async fn deliver(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let at = Instant::now();
    let id: u64 = headers
        .get(ledger_proto::webhook::DELIVERY_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(':'))
        .and_then(|(id, _)| id.parse().ok())
        .unwrap_or_default();
    let secret = lock(&receiver.secrets)
        .iter()
        .find(|(s, _)| *s == id)
        .map(|(_, secret)| secret.clone());
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(secret) = secret else {
        // Not subscribed yet (its reply is on its way): try again.
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    if let Err(e) = verify_signature(&secret, signature, &body, TOLERANCE) {
        *lock(&receiver.broken) = Some(format!("a delivery's signature was refused: {e}"));
        return StatusCode::BAD_REQUEST;
    }
    if id != *lock(&receiver.first) {
        return StatusCode::NO_CONTENT;
    }
    let Ok(parsed) = serde_json::from_slice::<serde_json::Value>(&body) else {
        *lock(&receiver.broken) = Some("a delivery's body is not JSON".into());
        return StatusCode::BAD_REQUEST;
    };
    let number = |v: &serde_json::Value| -> Option<u64> {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .or_else(|| v.as_u64())
    };
    let entries = parsed
        .get("entries")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut last = lock(&receiver.last);
    for entry in &entries {
        let (Some(sequence), Some(entry_id)) =
            (number(&entry["sequence"]), number(&entry["entryId"]))
        else {
            *lock(&receiver.broken) = Some(format!("an entry without its ids: {entry}"));
            return StatusCode::BAD_REQUEST;
        };
        if sequence <= *last {
            continue; // At least once: a repeat after a failure.
        }
        if sequence != *last + 1 {
            *lock(&receiver.broken) = Some(format!(
                "subscription {id} received sequence {sequence} after {}: a gap",
                *last
            ));
            return StatusCode::BAD_REQUEST;
        }
        *last = sequence;
        receiver.follow.received(entry_id, at);
        if let Some(reached) = receiver.follow.reached.first() {
            reached.store(sequence, Ordering::Relaxed);
        }
    }
    StatusCode::NO_CONTENT
}
