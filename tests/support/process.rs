//! The `ledger` binary run as separate processes, and polling their health.

use std::net::SocketAddr;
use std::time::Duration;

use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

use super::server::TestDb;

/// The `ledger` binary, run as a separate process.
pub struct LedgerProcess {
    child: tokio::process::Child,
    pub addr: SocketAddr,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl LedgerProcess {
    /// `ledger serve` on `db`, on a free port; returns once it reports SERVING.
    pub async fn serve(db: &TestDb, extra: &[&str]) -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::serve_on(db, addr, extra).await
    }

    /// `ledger serve` on `db` at `addr`. It is killed when the test's thread ends
    /// (`setpriv --pdeathsig`), so no server outlives a failed test.
    pub async fn serve_on(db: &TestDb, addr: SocketAddr, extra: &[&str]) -> Self {
        Self::serve_urls(&db.url, addr, extra).await
    }

    /// `ledger serve --database-url <urls>` (comma-separated) at `addr`.
    pub async fn serve_urls(urls: &str, addr: SocketAddr, extra: &[&str]) -> Self {
        let child = tokio::process::Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", env!("CARGO_BIN_EXE_ledger")])
            .args([
                "serve",
                "--database-url",
                urls,
                "--listen",
                &addr.to_string(),
            ])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .kill_on_drop(true)
            .spawn()
            .expect("ledger starts");
        let process = Self { child, addr };
        process
            .until_health(tonic_health::pb::health_check_response::ServingStatus::Serving)
            .await;
        process
    }

    pub fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect_lazy()
    }

    pub async fn until_health(&self, status: ServingStatus) {
        until_health(self.addr, status).await;
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = i32::try_from(self.child.id().expect("running")).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    }

    pub async fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .expect("ledger exits in time")
            .unwrap()
    }
}

/// Runs a one-shot `ledger` command with logs off; returns its exit code and
/// stderr.
pub async fn run_ledger(args: &[&str]) -> (Option<i32>, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_ledger"))
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("LEDGER_DATABASE_URL")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("ledger exits in time")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Polls the health of `ledger.v1.Ledger` at `addr` until it is `status`; fails
/// after 30 s.
pub async fn until_health(addr: SocketAddr, status: ServingStatus) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let request = tonic_health::pb::HealthCheckRequest {
            service: "ledger.v1.Ledger".into(),
        };
        let answer = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(request)
            .await;
        if answer.is_ok_and(|a| a.into_inner().status() == status) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "health never became {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
