//! A webhook receiver for the subscription tests (SPEC 3.15): an HTTP server on
//! a free loopback port that checks each delivery's `Ledger-Signature` as a real
//! receiver must (`ledger_proto::webhook::verify_signature`), reads the
//! sequences of its entries, and records it, so a test can tell what the ledger
//! delivered, how often, and in what order.
//!
//! Its answers can be scripted while it runs, to make the sender retry:
//!
//! - [`Receiver::fail_every`]: every n-th delivery answered 500;
//! - [`Receiver::slow_every`]: every n-th delivery answered 200 only after a
//!   delay, one the sender's timeout should not wait for;
//! - [`Receiver::down`] / [`Receiver::up`]: the port closed (a connection is
//!   refused, and every open one is cut) and opened again, on the same port.
//!
//! What it answers, in order:
//!
//! - no secret set yet ([`Receiver::set_secret`]): 503, counted
//!   ([`State::unavailable`]);
//! - a signature that does not verify (a mismatch, a stale or malformed
//!   header, none at all): 400, counted ([`State::refused_signatures`]; a
//!   test asserts it stays 0);
//! - a signed body that is not `{"entries":[{"sequence":…},…]}`, or no
//!   `Ledger-Delivery-Id`: 400, counted ([`State::malformed`]);
//! - otherwise the delivery is recorded ([`State::deliveries`]) and answered
//!   as scripted: 500, 200 late, or 200.
//!
//! A sequence is read as a JSON number or a decimal string: canonical protobuf
//! JSON prints a `uint64` as a string. Every refusal is logged to stderr with
//! its reason ([`State::last_refusal`]); nothing in the server task panics.
//!
//! A delivery's handling runs in a task of its own, so its outcome does not
//! depend on whether the sender waits for it: a slow delivery is answered
//! (and so acknowledged) when its delay ends, whether or not the sender timed
//! out, as a receiver that processed it would have; only going [down] first
//! leaves it unanswered.
//!
//! [down]: Receiver::down

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{self, DefaultBodyLimit};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use ledger_proto::webhook::{DELIVERY_ID_HEADER, SIGNATURE_HEADER, verify_signature};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How far a signature's timestamp may be from this clock: the scheme's usual
/// five minutes.
pub const TOLERANCE: Duration = Duration::from_secs(300);

/// The path deliveries are posted to.
const PATH: &str = "/hook";

/// How long [`Receiver::up`] tries to bind its port again.
const REBIND_WITHIN: Duration = Duration::from_secs(10);

/// One verified delivery, as it arrived.
#[derive(Clone)]
pub struct Delivery {
    /// Its `Ledger-Delivery-Id`: `<subscription_id>:<first>-<last>`.
    pub id: String,
    /// Its `Ledger-Signature`.
    pub signature: String,
    /// Its entries' sequences, in the body's order.
    pub sequences: Vec<u64>,
    /// The body, byte for byte.
    pub body: Bytes,
    /// When it arrived.
    pub arrived: Instant,
    /// Whether it was scripted slow (`slow_every`): answered only after the
    /// delay, which the sender's timeout should not have waited for, so to the
    /// sender it failed although it is acknowledged here.
    pub slow: bool,
    /// The status it was answered: `None` while a slow answer is pending, and
    /// for good when the receiver went down before answering it.
    pub answer: Option<u16>,
}

impl Delivery {
    /// Whether it was answered 2xx.
    pub fn acknowledged(&self) -> bool {
        self.answer
            .is_some_and(|status| (200..300).contains(&status))
    }

    /// The body as text (lossy), for messages.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("sequences", &self.sequences)
            .field("body_len", &self.body.len())
            .field("answer", &self.answer)
            .field("slow", &self.slow)
            .finish_non_exhaustive()
    }
}

/// What the receiver has seen so far.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Every request that reached the handler, whatever it was answered.
    pub requests: u64,
    /// Connections accepted: a sender that keeps its connections open makes
    /// many requests on few.
    pub connections: u64,
    /// Requests answered 400 for their signature.
    pub refused_signatures: u64,
    /// Requests answered 503 because no secret was set yet.
    pub unavailable: u64,
    /// Signed requests answered 400 for their body or a missing delivery id.
    pub malformed: u64,
    /// Every verified, readable delivery, in arrival order, whatever it was
    /// answered.
    pub deliveries: Vec<Delivery>,
    /// Why the last refused request was refused.
    pub last_refusal: Option<String>,
}

impl State {
    /// Checks what at-least-once promises: the acknowledged sequences, first
    /// appearances only, are exactly `expected` in order; every delivery held at
    /// most 100 entries in ascending order and says which in its id; and a sequence
    /// came again only after a request that carried it was not acknowledged in
    /// time (failed, answered late, or not at all).
    pub fn assert_delivered(&self, subscription: u64, expected: &[u64]) {
        let state = self;
        assert_eq!(state.refused_signatures, 0, "{}", state.summary());
        assert_eq!(state.malformed, 0, "{}", state.summary());
        let mut seen = std::collections::BTreeSet::new();
        let mut first_appearances = Vec::new();
        let mut unacknowledged_before = 0_usize;
        let mut repeats = 0_usize;
        for delivery in &state.deliveries {
            let sequences = &delivery.sequences;
            assert!(
                !sequences.is_empty() && sequences.len() <= 100,
                "{delivery:?}"
            );
            assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{delivery:?}");
            let id = format!(
                "{subscription}:{}-{}",
                sequences[0],
                sequences[sequences.len() - 1]
            );
            assert_eq!(delivery.id, id);
            if sequences.iter().any(|s| seen.contains(s)) {
                repeats += 1;
                assert!(
                    repeats <= unacknowledged_before,
                    "a delivery repeated entries with no failure before it: {delivery:?}; {}",
                    state.summary()
                );
            }
            if delivery.acknowledged() && delivery.answer == Some(200) {
                for s in sequences {
                    if seen.insert(*s) {
                        first_appearances.push(*s);
                    }
                }
            }
            // A late answer was a timeout to the sender: it counts as a failure.
            if !delivery.acknowledged() || delivery.slow {
                unacknowledged_before += 1;
            }
        }
        assert_eq!(first_appearances, expected, "{}", state.summary());
    }

    /// The deliveries answered 2xx, in arrival order.
    pub fn acknowledged(&self) -> impl Iterator<Item = &Delivery> {
        self.deliveries.iter().filter(|d| d.acknowledged())
    }

    /// How many deliveries were answered 2xx.
    pub fn acknowledged_count(&self) -> usize {
        self.acknowledged().count()
    }

    /// The sequences of the deliveries answered 2xx, in arrival order (a
    /// sequence delivered twice is here twice).
    pub fn acknowledged_sequences(&self) -> Vec<u64> {
        self.acknowledged()
            .flat_map(|d| d.sequences.iter().copied())
            .collect()
    }

    /// The sequences of every delivery, in arrival order, those answered 500
    /// or not at all included.
    pub fn all_sequences(&self) -> Vec<u64> {
        self.deliveries
            .iter()
            .flat_map(|d| d.sequences.iter().copied())
            .collect()
    }

    /// How many deliveries were answered 500 (scripted failures).
    pub fn failed_count(&self) -> usize {
        self.deliveries
            .iter()
            .filter(|d| d.answer == Some(500))
            .count()
    }

    /// One line for a failure message: the counts, and the last sequences.
    pub fn summary(&self) -> String {
        let acknowledged = self.acknowledged_sequences();
        let tail = acknowledged
            .get(acknowledged.len().saturating_sub(10)..)
            .unwrap_or_default();
        format!(
            "{} requests, {} deliveries ({} acknowledged, {} failed), {} signatures refused, \
             {} unavailable, {} malformed, last acknowledged sequences {tail:?}, last refusal {:?}",
            self.requests,
            self.deliveries.len(),
            self.acknowledged_count(),
            self.failed_count(),
            self.refused_signatures,
            self.unavailable,
            self.malformed,
            self.last_refusal,
        )
    }
}

/// Every n-th delivery since it was set; `n == 0` is never.
#[derive(Debug, Clone, Copy, Default)]
struct Every {
    n: u64,
    seen: u64,
}

impl Every {
    fn new(n: u64) -> Self {
        Self { n, seen: 0 }
    }

    /// Counts one delivery: whether it is an n-th one.
    fn fires(&mut self) -> bool {
        if self.n == 0 {
            return false;
        }
        self.seen += 1;
        self.seen.is_multiple_of(self.n)
    }
}

/// What the server task and the test share.
#[derive(Default)]
struct Inner {
    state: State,
    secret: Option<String>,
    fail: Every,
    slow: Every,
    delay: Duration,
    /// Bumped by each `down`: a slow answer due after it is never given.
    generation: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Bumped on every change of `inner.state`, for `wait_for`.
    changed: watch::Sender<u64>,
}

impl Shared {
    /// The state, even if a holder panicked: nothing here may panic on it.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the state under the lock, then wakes the waiters.
    fn update<T>(&self, change: impl FnOnce(&mut Inner) -> T) -> T {
        let out = change(&mut self.lock());
        self.changed.send_modify(|version| *version += 1);
        out
    }

    /// Counts a refused request, remembers and logs why, and gives its status.
    fn refuse(&self, status: StatusCode, why: String, count: fn(&mut State)) -> StatusCode {
        eprintln!("webhook receiver: {status}: {why}");
        self.update(|inner| {
            count(&mut inner.state);
            inner.state.last_refusal = Some(why);
        });
        status
    }
}

/// The listener and connections of one period up.
struct Serving {
    task: JoinHandle<()>,
    /// Cancelled by `down`: every connection accepted while up ends.
    connections: CancellationToken,
}

/// A webhook receiver on `127.0.0.1`; see the module's documentation.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    serving: tokio::sync::Mutex<Option<Serving>>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// A receiver listening on a free loopback port, with no secret yet (it
    /// answers 503 until [`Receiver::set_secret`]) and nothing scripted.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port");
        let addr = listener.local_addr().expect("the listener's address");
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            changed: watch::Sender::new(0),
        });
        let serving = serve(listener, &shared);
        Self {
            addr,
            shared,
            serving: tokio::sync::Mutex::new(Some(serving)),
        }
    }

    /// Where deliveries are to be posted: `http://127.0.0.1:PORT/hook`.
    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.addr)
    }

    /// The address it listens on (also while down: `up` binds it again).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The subscription's secret, the key signatures are checked with from now
    /// on.
    pub fn set_secret(&self, secret: String) {
        self.shared.lock().secret = Some(secret);
    }

    /// Answers every n-th delivery from now on 500 (not acknowledged); 0 stops.
    pub fn fail_every(&self, n: u64) {
        self.shared.lock().fail = Every::new(n);
    }

    /// Answers every n-th delivery from now on 200 only after `delay`; 0
    /// stops. A delivery due to fail (`fail_every`) fails at once instead.
    pub fn slow_every(&self, n: u64, delay: Duration) {
        let mut inner = self.shared.lock();
        inner.slow = Every::new(n);
        inner.delay = delay;
    }

    /// Closes the port and cuts every open connection: a sender's connection
    /// is refused until [`Receiver::up`]. A slow answer still pending is never
    /// given. Does nothing when already down.
    pub async fn down(&self) {
        let mut serving = self.serving.lock().await;
        let Some(Serving { task, connections }) = serving.take() else {
            return;
        };
        self.shared.lock().generation += 1;
        task.abort();
        // The listener is closed once the task is: a connection after this
        // returns is refused.
        let _ = task.await;
        connections.cancel();
    }

    /// Listens on the same port again after [`Receiver::down`]; does nothing
    /// when up. Panics if the port cannot be had back within 10 s.
    pub async fn up(&self) {
        let mut serving = self.serving.lock().await;
        if serving.is_some() {
            return;
        }
        let deadline = Instant::now() + REBIND_WITHIN;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("webhook receiver: binding {} again: {e}", self.addr);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("webhook receiver: cannot bind {} again: {e}", self.addr),
            }
        };
        *serving = Some(serve(listener, &self.shared));
    }

    /// What it has seen so far.
    pub fn state(&self) -> State {
        self.shared.lock().state.clone()
    }

    /// The sequences of the deliveries answered 2xx, in arrival order.
    pub fn acknowledged_sequences(&self) -> Vec<u64> {
        self.shared.lock().state.acknowledged_sequences()
    }

    /// The sequences of every delivery, in arrival order, failed ones included.
    pub fn all_sequences(&self) -> Vec<u64> {
        self.shared.lock().state.all_sequences()
    }

    /// Waits until `what` holds of the state, and returns that state; panics
    /// with the state's summary if it does not within `within`.
    pub async fn wait_for(&self, what: impl Fn(&State) -> bool, within: Duration) -> State {
        match self.try_wait_for(what, within).await {
            Ok(state) => state,
            Err(state) => panic!(
                "webhook receiver: not so within {within:?}: {}",
                state.summary()
            ),
        }
    }

    /// Waits until `what` holds of the state: `Ok` with that state, or `Err`
    /// with the last state when `within` passed first.
    pub async fn try_wait_for(
        &self,
        what: impl Fn(&State) -> bool,
        within: Duration,
    ) -> Result<State, State> {
        let deadline = Instant::now() + within;
        let mut changed = self.shared.changed.subscribe();
        loop {
            // Marked seen before it is read: a change after the read wakes
            // the wait below.
            changed.borrow_and_update();
            {
                let inner = self.shared.lock();
                if what(&inner.state) {
                    return Ok(inner.state.clone());
                }
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return Err(self.state());
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(serving) = self.serving.get_mut().take() {
            serving.task.abort();
            serving.connections.cancel();
        }
    }
}

/// Serves `listener` in a task of its own until `down`.
fn serve(listener: TcpListener, shared: &Arc<Shared>) -> Serving {
    let connections = CancellationToken::new();
    let app = Router::new()
        .route(PATH, post(deliver))
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::clone(shared));
    let listener = Killable {
        listener,
        down: connections.clone(),
        shared: Arc::clone(shared),
    };
    let task = tokio::spawn(async move {
        // Serves until aborted: its listener never ends.
        let _ = axum::serve(listener, app).await;
    });
    Serving { task, connections }
}

/// The handler: the delivery is handled in a task of its own, which finishes
/// whether or not the sender still waits for its answer.
async fn deliver(
    extract::State(shared): extract::State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    tokio::spawn(handle(shared, headers, body))
        .await
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// What to do with a recorded delivery.
enum Script {
    Fail,
    Slow(Duration),
    Acknowledge,
}

async fn handle(shared: Arc<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived = Instant::now();
    let (secret, generation) = shared.update(|inner| {
        inner.state.requests += 1;
        (inner.secret.clone(), inner.generation)
    });
    let Some(secret) = secret else {
        return shared.refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "a delivery before the secret was set".into(),
            |s| s.unavailable += 1,
        );
    };
    let signature = header(&headers, SIGNATURE_HEADER).unwrap_or_default();
    if let Err(e) = verify_signature(&secret, &signature, &body, TOLERANCE) {
        return shared.refuse(
            StatusCode::BAD_REQUEST,
            format!("signature {signature:?} refused: {e}"),
            |s| s.refused_signatures += 1,
        );
    }
    let Some(id) = header(&headers, DELIVERY_ID_HEADER) else {
        return shared.refuse(
            StatusCode::BAD_REQUEST,
            format!("no {DELIVERY_ID_HEADER} header"),
            |s| s.malformed += 1,
        );
    };
    let sequences = match sequences(&body) {
        Ok(sequences) => sequences,
        Err(why) => {
            return shared.refuse(
                StatusCode::BAD_REQUEST,
                format!("delivery {id}: {why}"),
                |s| s.malformed += 1,
            );
        }
    };
    let (index, script) = shared.update(|inner| {
        let script = if inner.fail.fires() {
            Script::Fail
        } else if inner.slow.fires() {
            Script::Slow(inner.delay)
        } else {
            Script::Acknowledge
        };
        inner.state.deliveries.push(Delivery {
            id,
            signature,
            sequences,
            body,
            arrived,
            slow: matches!(script, Script::Slow(_)),
            answer: None,
        });
        (inner.state.deliveries.len() - 1, script)
    });
    let status = match script {
        Script::Fail => StatusCode::INTERNAL_SERVER_ERROR,
        Script::Acknowledge => StatusCode::OK,
        Script::Slow(delay) => {
            tokio::time::sleep(delay).await;
            if shared.lock().generation != generation {
                // Went down meanwhile: the answer goes nowhere, and is not
                // recorded.
                return StatusCode::SERVICE_UNAVAILABLE;
            }
            StatusCode::OK
        }
    };
    shared.update(|inner| {
        if let Some(delivery) = inner.state.deliveries.get_mut(index) {
            delivery.answer = Some(status.as_u16());
        }
    });
    status
}

/// Header `name`'s value, if it is there and is text.
fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// The sequences of a body `{"entries":[{"sequence":…},…]}`, each a JSON
/// number or a decimal string.
fn sequences(body: &[u8]) -> Result<Vec<u64>, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let entries = value
        .get("entries")
        .and_then(Value::as_array)
        .ok_or("the body has no \"entries\" array")?;
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| match entry.get("sequence") {
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| format!("entry {i}: sequence {n} is not a u64")),
            Some(Value::String(s)) => s
                .parse()
                .map_err(|_| format!("entry {i}: sequence {s:?} is not a u64")),
            Some(other) => Err(format!("entry {i}: sequence {other} is not a u64")),
            None => Err(format!("entry {i} has no sequence")),
        })
        .collect()
}

/// The listener of one period up: its connections end when it goes down.
struct Killable {
    listener: TcpListener,
    down: CancellationToken,
    /// Where each accepted connection is counted.
    shared: Arc<Shared>,
}

impl axum::serve::Listener for Killable {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    self.shared.update(|inner| inner.state.connections += 1);
                    let down = Box::pin(self.down.clone().cancelled_owned());
                    return (Connection { stream, down }, addr);
                }
                // Out of descriptors, or a connection reset before it was
                // accepted: the next may do.
                Err(e) => {
                    eprintln!("webhook receiver: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// An accepted connection that fails every read and write once the receiver
/// went down, so the server drops it (and its socket closes) even while idle.
struct Connection {
    stream: TcpStream,
    down: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl Connection {
    /// An error once down; else registers the task to be woken when it goes.
    fn cut(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.down
            .as_mut()
            .poll(cx)
            .is_ready()
            .then(|| io::Error::new(io::ErrorKind::ConnectionAborted, "the receiver is down"))
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.cut(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.cut(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.cut(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
