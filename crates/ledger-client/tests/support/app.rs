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
