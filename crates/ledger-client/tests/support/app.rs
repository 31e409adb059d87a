//! The service, in the test process, on a random port.

use std::net::SocketAddr;
use std::time::Duration;

use ledger::app::Application;
use ledger::config::Settings;
use ledger::db::PoolSettings;
use ledger_client::{Client, pb};
use tokio::sync::oneshot;

use super::server::TestDb;

pub struct TestApp {
    pub addr: SocketAddr,
    /// Dropped with the app: the service shuts down.
    _stop: oneshot::Sender<()>,
}

impl TestApp {
    pub async fn spawn(db: &TestDb) -> Self {
        Self::spawn_with(db, |_| {}).await
    }

    /// An instance with settings of its own (tokens, TLS).
    pub async fn spawn_with(db: &TestDb, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings =
            Settings::new("127.0.0.1:0".parse().unwrap(), db.url.clone()).expect("defaults");
        // Small: several tests share one database server.
        settings.pool = PoolSettings {
            size: 8,
            checkout_timeout: Duration::from_secs(10),
        };
        change(&mut settings);
        let app = Application::build(settings, None)
            .await
            .expect("app builds");
        let addr = app.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until(async move {
            let _ = stopped.await;
        }));
        Self { addr, _stop: stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client straight to the service, with the default budget.
    pub fn client(&self) -> Client {
        Client::builder().endpoint(self.url()).build().unwrap()
    }

    /// Opens an account in `currency` and credits it `balance`; its id.
    pub async fn funded_account(&self, currency: &str, balance: i64) -> u64 {
        let client = self.client();
        let account = client
            .open_account(pb::OpenAccountRequest {
                currency: currency.into(),
                ..Default::default()
            })
            .await
            .expect("open account")
            .reply
            .account
            .expect("an account")
            .account_id;
        if balance > 0 {
            client
                .credit(pb::CreditRequest {
                    account_id: account,
                    amount: balance,
                    currency: currency.into(),
                    description: "funding".into(),
                    ..Default::default()
                })
                .await
                .expect("credit");
        }
        account
    }
}

/// An instance in a runtime of its own, which a test can end as SIGKILL ends a
/// process (every task dropped: connections cut, nothing drained, the stream's
/// lease left to run out) or shut down as SIGTERM does (streams ended with
/// `SHUTTING_DOWN`, calls drained), and start again on the same address.
pub struct Instance {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<oneshot::Sender<()>>,
    stopped: Option<oneshot::Receiver<()>>,
}

impl Instance {
    /// An instance on `addr` (port 0: a free one), serving once this returns.
    pub async fn start(db: &TestDb, addr: SocketAddr) -> Self {
        let mut settings = Settings::new(addr, db.url.clone()).expect("defaults");
        settings.pool = PoolSettings {
            size: 8,
            checkout_timeout: Duration::from_secs(10),
        };
        settings.shutdown_delay = Duration::from_millis(100);
        settings.shutdown_grace = Duration::from_secs(2);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (bound, bound_at) = oneshot::channel();
        let (stop, stopping) = oneshot::channel::<()>();
        let (done, stopped) = oneshot::channel::<()>();
        runtime.spawn(async move {
            let app = Application::build(settings, None)
                .await
                .expect("app builds");
            let _ = bound.send(app.local_addr());
            let _ = app
                .run_until(async move {
                    let _ = stopping.await;
                })
                .await;
            let _ = done.send(());
        });
        let addr = bound_at.await.expect("the instance starts");
        Self {
            addr,
            runtime: Some(runtime),
            stop: Some(stop),
            stopped: Some(stopped),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Ends it at once, as SIGKILL would.
    pub async fn kill(mut self) {
        if let Some(runtime) = self.runtime.take() {
            tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(5)))
                .await
                .unwrap();
        }
    }

    /// Shuts it down as SIGTERM does; returns once it has stopped.
    pub async fn terminate(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(stopped) = self.stopped.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), stopped).await;
        }
        self.kill().await;
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
