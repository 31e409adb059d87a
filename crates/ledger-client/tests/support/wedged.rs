//! A gRPC server of `ledger.v1.Ledger` that takes every call and never answers
//! it, as an instance whose runtime is wedged behind a live HTTP/2 layer, or an
//! L7 proxy whose backend hangs: connections are accepted, pings answered and
//! streams opened (tonic's own server, over hyper), and no handler ever returns,
//! so no response headers ever come.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http::{Request, Response};
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

pub struct WedgedServer {
    pub addr: SocketAddr,
    taken: Arc<AtomicU64>,
    serving: tokio::task::JoinHandle<()>,
}

impl WedgedServer {
    /// Serving on a free loopback port once this returns.
    pub fn start() -> Self {
        let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = incoming.local_addr().unwrap();
        let taken = Arc::new(AtomicU64::new(0));
        let service = Hangs {
            taken: taken.clone(),
        };
        let serving = tokio::spawn(async move {
            let _ = Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Self {
            addr,
            taken,
            serving,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many calls (streams included) it has taken.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

impl Drop for WedgedServer {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// Every method of the service: counted, then pending for ever.
#[derive(Clone)]
struct Hangs {
    taken: Arc<AtomicU64>,
}

impl NamedService for Hangs {
    const NAME: &'static str = "ledger.v1.Ledger";
}

impl Service<Request<Body>> for Hangs {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Pending<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        self.taken.fetch_add(1, Ordering::Relaxed);
        std::future::pending()
    }
}
