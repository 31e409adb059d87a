//! A TCP proxy between the service and its database, for forcing network faults:
//! it passes traffic, black-holes it (a partition: nothing is delivered either
//! way, nothing is refused, until it resumes), or lets one chosen statement
//! through and then swallows the database's answer and cuts that connection (a
//! COMMIT lost in flight), or holds one chosen statement back for a while (a
//! COMMIT that arrives late).
//!
//! It reads the MySQL protocol's packet framing (a 3-byte length, a sequence
//! number, the payload) only on the way to the database, to recognize a text
//! query (`COM_QUERY`, 0x03) by its SQL.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

const COM_QUERY: u8 = 0x03;

/// A statement to let through before the connection is cut.
struct Cut {
    /// Text the query must contain.
    needle: Vec<u8>,
    /// How long after forwarding it the connection is cut; its answer is never
    /// delivered.
    after: Duration,
    /// Fired when the query has been forwarded.
    forwarded: Arc<Notify>,
}

/// A statement to hold back before forwarding it.
struct Hold {
    /// Texts the query must all contain.
    needles: Vec<Vec<u8>>,
    /// How long it is held.
    for_: Duration,
    /// Fired when the query arrived and its hold began.
    held: Arc<Notify>,
}

struct Shared {
    upstream: SocketAddr,
    /// True while black-holing.
    paused: watch::Sender<bool>,
    cut: Mutex<Option<Cut>>,
    hold: Mutex<Option<Hold>>,
}

pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free loopback port to the server of `server_url` (a
    /// `mysql://user@host:port` URL without a database).
    pub async fn start(server_url: &str) -> Self {
        let opts = mysql_async::Opts::from_url(server_url).expect("a MySQL URL");
        let upstream: SocketAddr = format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port())
            .parse()
            .expect("the server is addressed by IP");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            paused: watch::channel(false).0,
            cut: Mutex::new(None),
            hold: Mutex::new(None),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, accepting.clone()));
            }
        });
        Self {
            addr,
            shared,
            accept,
        }
    }

    /// A URL of `database` through this proxy, for the service. TCP is forced:
    /// mysql_async would otherwise move a loopback connection to the server's
    /// Unix socket, around the proxy.
    pub fn url(&self, server_url: &str, database: &str) -> String {
        let opts = mysql_async::Opts::from_url(server_url).unwrap();
        format!(
            "mysql://{}@{}/{database}?prefer_socket=false",
            opts.user().unwrap_or("root"),
            self.addr
        )
    }

    /// Stops delivering anything, either way, on every connection, new ones too.
    pub fn black_hole(&self) {
        self.shared.paused.send_replace(true);
    }

    /// Delivers again what was held back, and everything after.
    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Arms a cut: the next query containing `needle` is forwarded, its answer is
    /// swallowed, and its connection is closed `after` later. Returns a notice
    /// fired when the query was forwarded.
    pub fn cut_after_forwarding(&self, needle: &str, after: Duration) -> Arc<Notify> {
        let forwarded = Arc::new(Notify::new());
        *self.shared.cut.lock().unwrap() = Some(Cut {
            needle: needle.as_bytes().to_vec(),
            after,
            forwarded: forwarded.clone(),
        });
        forwarded
    }

    /// Arms a hold: the next query containing every one of `needles` is held
    /// back for `for_`, then forwarded (with whatever its connection sent after
    /// it); other connections flow meanwhile. Returns a notice fired when the
    /// hold began.
    pub fn hold_query(&self, needles: &[&str], for_: Duration) -> Arc<Notify> {
        let held = Arc::new(Notify::new());
        *self.shared.hold.lock().unwrap() = Some(Hold {
            needles: needles.iter().map(|n| n.as_bytes().to_vec()).collect(),
            for_,
            held: held.clone(),
        });
        held
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, shared: Arc<Shared>) {
    let mut paused = shared.paused.subscribe();
    if paused.wait_for(|p| !*p).await.is_err() {
        return;
    }
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Set once the chosen query went out: from then on nothing comes back.
    let (swallow, _) = watch::channel(false);
    let swallowing = swallow.subscribe();
    let to_server = {
        let shared = shared.clone();
        async move {
            let mut framing = Framing::default();
            let mut buf = vec![0_u8; 64 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let mut paused = shared.paused.subscribe();
                if paused.wait_for(|p| !*p).await.is_err() {
                    return;
                }
                let chunk = buf.get(..n).unwrap_or_default();
                let queries = framing.queries(chunk);
                let cut = queries.iter().find_map(|query| take_cut(&shared, query));
                if let Some(hold) = queries.iter().find_map(|query| take_hold(&shared, query)) {
                    hold.held.notify_one();
                    // The fault itself: a statement that arrives this late.
                    tokio::time::sleep(hold.for_).await;
                }
                if server_write.write_all(chunk).await.is_err() {
                    return;
                }
                if let Some(cut) = cut {
                    swallow.send_replace(true);
                    cut.forwarded.notify_one();
                    // The fault itself: the cut's point in time, as the test
                    // places it around a deadline.
                    tokio::time::sleep(cut.after).await;
                    return;
                }
            }
        }
    };
    let to_client = async move {
        let mut buf = vec![0_u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut paused = shared.paused.subscribe();
            if paused.wait_for(|p| !*p).await.is_err() {
                return;
            }
            if *swallowing.borrow() {
                continue;
            }
            if client_write
                .write_all(buf.get(..n).unwrap_or_default())
                .await
                .is_err()
            {
                return;
            }
        }
    };
    // Either direction ending ends the connection: both halves are dropped.
    tokio::select! {
        () = to_server => {}
        () = to_client => {}
    }
}

fn take_cut(shared: &Shared, query: &[u8]) -> Option<Cut> {
    let mut armed = shared.cut.lock().unwrap();
    let matches = armed
        .as_ref()
        .is_some_and(|cut| query.windows(cut.needle.len()).any(|w| w == cut.needle));
    if matches { armed.take() } else { None }
}

fn take_hold(shared: &Shared, query: &[u8]) -> Option<Hold> {
    let mut armed = shared.hold.lock().unwrap();
    let matches = armed.as_ref().is_some_and(|hold| {
        hold.needles
            .iter()
            .all(|needle| query.windows(needle.len()).any(|w| w == needle))
    });
    if matches { armed.take() } else { None }
}

/// Splits the client's byte stream into packets and returns the text queries
/// that end in each chunk.
#[derive(Default)]
struct Framing {
    pending: Vec<u8>,
}

impl Framing {
    fn queries(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(chunk);
        let mut queries = Vec::new();
        while let Some(header) = self.pending.get(..4) {
            let len =
                usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
            let Some(packet) = self.pending.get(4..4 + len) else {
                break;
            };
            if packet.first() == Some(&COM_QUERY) {
                queries.push(packet.get(1..).unwrap_or_default().to_vec());
            }
            self.pending.drain(..4 + len);
        }
        queries
    }
}
