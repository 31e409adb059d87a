//! A TCP proxy between a gRPC client and the service that breaks connections in
//! chosen ways, one fault per connection, and one call per connection (it closes
//! a connection after its first reply), so each call draws a fault of its own. The service's `tests/support/proxy.rs`
//! reads the MySQL protocol to cut at a statement; this one reads just enough of
//! HTTP/2 (frame headers) to know when a request has been forwarded whole (a
//! frame with END_STREAM on a stream), and acts on that.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// What happens to one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Passes everything.
    Pass,
    /// Reset (RST) as soon as it is accepted: no request ever arrives.
    ResetBeforeRequest,
    /// The first request is forwarded whole, and its reply is lost: the
    /// connection is closed once the service has sent it, and none of it
    /// comes back.
    CutAfterRequest,
    /// As `CutAfterRequest`, but only for a request whose message is longer
    /// than this many bytes (its gRPC prefix included): smaller ones (a
    /// `LookupKey`) pass.
    CutRequestsLongerThan(usize),
    /// As `CutRequestsLongerThan`, until a smaller request (a `LookupKey`)
    /// has passed on any connection of the proxy; from then on every request
    /// passes but the first `then` longer ones (a resend whose connection
    /// closes under it, as when an instance goes away): a call's attempts are
    /// cut, and what settles it is not.
    CutRequestsLongerThanBeforeLookup { limit: usize, then: u32 },
    /// Once the first request is forwarded, nothing comes back for this long;
    /// then the reply is delivered.
    DelayReply(Duration),
    /// Once the first request is forwarded, nothing ever comes back.
    HoldReply,
    /// Accepted, read, never answered, never connected onwards.
    BlackHole,
}

/// How many connections met each fault.
#[derive(Debug, Default)]
pub struct Counts {
    pub connections: AtomicU64,
    pub resets: AtomicU64,
    pub cuts: AtomicU64,
    pub delays: AtomicU64,
    pub holds: AtomicU64,
}

type Plan = Box<dyn FnMut(u64) -> Fault + Send>;

struct Shared {
    upstream: SocketAddr,
    plan: Mutex<Plan>,
    counts: Counts,
    /// Fired each time a request was forwarded on a connection that then
    /// withholds its reply.
    forwarded: Notify,
    /// A request under the size limit passed a `CutRequestsLongerThanBeforeLookup`.
    looked_up: AtomicBool,
    /// Longer requests cut since then.
    cut_after_lookup: AtomicU32,
}

impl Shared {
    /// Whether a request of `size` is cut: every one longer than `limit` until
    /// the look-up (one no longer) has passed, and the first `then` after it.
    fn cuts_around_lookup(&self, limit: usize, then: u32, size: usize) -> bool {
        if size <= limit {
            self.looked_up.store(true, Ordering::Relaxed);
            return false;
        }
        !self.looked_up.load(Ordering::Relaxed)
            || self.cut_after_lookup.fetch_add(1, Ordering::Relaxed) < then
    }
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy on a free loopback port to `upstream`; `plan` chooses the fault
    /// of the n-th connection (0, 1, ...).
    pub async fn start(
        upstream: SocketAddr,
        plan: impl FnMut(u64) -> Fault + Send + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            plan: Mutex::new(Box::new(plan)),
            counts: Counts::default(),
            forwarded: Notify::new(),
            looked_up: AtomicBool::new(false),
            cut_after_lookup: AtomicU32::new(0),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let n = accepting.counts.connections.fetch_add(1, Ordering::Relaxed);
                let fault = (accepting.plan.lock().unwrap())(n);
                tokio::spawn(relay(client, fault, accepting.clone()));
            }
        });
        Self {
            addr,
            shared,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn counts(&self) -> &Counts {
        &self.shared.counts
    }

    /// Waits until a request was forwarded on a connection that withholds its
    /// reply.
    pub async fn forwarded(&self) {
        self.shared.forwarded.notified().await;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, fault: Fault, shared: Arc<Shared>) {
    match fault {
        Fault::ResetBeforeRequest => {
            shared.counts.resets.fetch_add(1, Ordering::Relaxed);
            let _ = client.set_zero_linger();
            return;
        }
        Fault::BlackHole => {
            let mut client = client;
            let mut buf = vec![0_u8; 16 * 1024];
            while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
            return;
        }
        _ => {}
    }
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (hold, holding) = watch::channel(Replies::Pass);
    tokio::select! {
        () = to_server(client_read, server_write, fault, hold, &shared) => {}
        () = to_client(server_read, client_write, holding) => {}
    }
}

/// What becomes of the service's bytes on a connection.
#[derive(Debug, Clone, Copy)]
enum Replies {
    Pass,
    /// Held until then (far away: for ever), then passed.
    HeldUntil(Instant),
    /// Dropped, and the connection closed once the service has ended its reply.
    Lost,
}

/// Forwards the client's bytes up to the end of its first request, and acts on
/// the fault then; anything the client sends after it is not forwarded.
async fn to_server(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    fault: Fault,
    hold: watch::Sender<Replies>,
    shared: &Shared,
) {
    let mut frames = Frames::client();
    let mut forwarding = true;
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !forwarding {
            continue;
        }
        let chunk = buf.get(..n).unwrap_or_default();
        let ended = frames.streams_ended(chunk).into_iter().max();
        let cut = match (fault, ended) {
            (Fault::CutAfterRequest, Some(_)) => true,
            (Fault::CutRequestsLongerThan(limit), Some(size)) => size > limit,
            (Fault::CutRequestsLongerThanBeforeLookup { limit, then }, Some(size)) => {
                shared.cuts_around_lookup(limit, then, size)
            }
            (Fault::DelayReply(delay), Some(_)) => {
                shared.counts.delays.fetch_add(1, Ordering::Relaxed);
                hold.send_replace(Replies::HeldUntil(Instant::now() + delay));
                false
            }
            (Fault::HoldReply, Some(_)) => {
                shared.counts.holds.fetch_add(1, Ordering::Relaxed);
                hold.send_replace(Replies::HeldUntil(Instant::now() + FOR_EVER));
                false
            }
            (_, _) => false,
        };
        if cut {
            shared.counts.cuts.fetch_add(1, Ordering::Relaxed);
            hold.send_replace(Replies::Lost);
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
        if ended.is_some() {
            forwarding = false;
            if fault == Fault::HoldReply {
                shared.forwarded.notify_one();
            }
        }
    }
}

/// Forwards the service's bytes (once any hold is over) up to the end of the
/// first reply, then closes the connection: one call per connection, so every
/// call meets a fault of its own drawing.
async fn to_client(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut holding: watch::Receiver<Replies>,
) {
    let mut frames = Frames::server();
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = buf.get(..n).unwrap_or_default();
        let replied = !frames.streams_ended(chunk).is_empty();
        let fate = *holding.borrow_and_update();
        match fate {
            Replies::Pass => {}
            // The fault itself: a reply this late.
            Replies::HeldUntil(until) => tokio::time::sleep_until(until).await,
            Replies::Lost if replied => return,
            Replies::Lost => continue,
        }
        if to.write_all(chunk).await.is_err() || replied {
            return;
        }
    }
}

const FOR_EVER: Duration = Duration::from_secs(86_400);

/// One side of an HTTP/2 connection, split into frames: which streams that side
/// ended (a DATA or HEADERS frame with END_STREAM), with the bytes of DATA each
/// carried.
struct Frames {
    preface_seen: bool,
    pending: Vec<u8>,
    data: std::collections::HashMap<u32, usize>,
}

const PREFACE: usize = 24;
const END_STREAM: u8 = 0x1;

impl Frames {
    /// The client's side: it opens with the connection preface.
    fn client() -> Self {
        Self {
            preface_seen: false,
            pending: Vec::new(),
            data: std::collections::HashMap::new(),
        }
    }

    fn server() -> Self {
        Self {
            preface_seen: true,
            ..Self::client()
        }
    }

    /// The sizes (DATA bytes) of the streams this side ended in `chunk`.
    fn streams_ended(&mut self, chunk: &[u8]) -> Vec<usize> {
        self.pending.extend_from_slice(chunk);
        if !self.preface_seen {
            if self.pending.len() < PREFACE {
                return Vec::new();
            }
            self.pending.drain(..PREFACE);
            self.preface_seen = true;
        }
        let mut ended = Vec::new();
        while let Some(header) = self.pending.get(..9) {
            let len =
                usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
            let (kind, flags) = (header[3], header[4]);
            let stream =
                u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
            if self.pending.len() < 9 + len {
                break;
            }
            self.pending.drain(..9 + len);
            if stream == 0 || kind > 1 {
                continue;
            }
            if kind == 0 {
                *self.data.entry(stream).or_default() += len;
            }
            if flags & END_STREAM != 0 {
                ended.push(self.data.remove(&stream).unwrap_or(0));
            }
        }
        ended
    }
}
