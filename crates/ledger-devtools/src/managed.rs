//! A private MySQL-compatible server for development and tests.
//!
//! Without a database URL, `ledger serve` (and the test suite) runs its own server:
//! the `mariadbd` or `mysqld` binary on PATH (or the one `LEDGER_MYSQLD` names),
//! initialized once into a data directory of its own (`mariadb-install-db`, or
//! `mysqld --initialize-insecure`), listening on a free loopback port and a socket
//! of its own. It is started through `setpriv --pdeathsig TERM`, so it shuts down
//! cleanly when the thread that started it ends, even if the owner is killed.
//!
//! Layout of the directory it owns:
//!
//! ```text
//! <dir>/data/          the server's datadir
//! <dir>/tmp/           its tmpdir: a starting server deletes every `#sql*` file in
//!                      its tmpdir, so a shared one (/tmp) would take the temporary
//!                      tables of every other server using it from under them
//! <dir>/initialized    written once initialization completed
//! <dir>/mysqld.pid     <dir>/mysqld.err     <dir>/mysqld.sock (if the path is short)
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, OptsBuilder};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// Names the server binary to run instead of searching PATH.
pub const BINARY_ENV: &str = "LEDGER_MYSQLD";
/// Extra server options, split on whitespace (e.g. `--basedir=...` for a
/// relocated install).
pub const ARGS_ENV: &str = "LEDGER_MYSQLD_ARGS";

/// How long a server may take to initialize or to accept connections: a first
/// MySQL start builds its system tables, which takes seconds on a slow disk.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a clean shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// `sun_path` holds 108 bytes; longer socket paths move to the temp directory.
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    #[error(
        "no MySQL-compatible server binary found: install MariaDB (apt-get install \
         mariadb-server) or MySQL, or name the binary with {BINARY_ENV}=/path/to/mysqld, \
         or pass --database-url to use a running server"
    )]
    NoBinary,
    #[error("{BINARY_ENV}={0} is not an executable file")]
    BadBinary(PathBuf),
    #[error("mariadb-install-db not found next to {0} or on PATH (install mariadb-server)")]
    NoInstallDb(PathBuf),
    #[error("a server is already running on {dir} (pid {pid}); stop it first")]
    AlreadyRunning { dir: PathBuf, pid: i32 },
    #[error("{what} failed: {detail}")]
    Failed { what: &'static str, detail: String },
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ManagedError {
    let context = context.into();
    move |e| ManagedError::Io(context, e)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

/// Where and how to run the server.
#[derive(Debug, Clone)]
pub struct ManagedOptions {
    /// The directory the server owns; created if missing, kept across restarts.
    pub dir: PathBuf,
    /// The server binary; `None` reads `LEDGER_MYSQLD`, then searches PATH.
    pub binary: Option<PathBuf>,
    /// Extra server options; `None` reads `LEDGER_MYSQLD_ARGS`.
    pub extra_args: Option<Vec<String>>,
}

impl ManagedOptions {
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            binary: None,
            extra_args: None,
        }
    }
}

/// A running private server. Dropping it kills the server; call [`stop`] for a
/// clean shutdown.
///
/// [`stop`]: ManagedServer::stop
#[derive(Debug)]
pub struct ManagedServer {
    binary: PathBuf,
    flavor: Flavor,
    extra_args: Vec<String>,
    dir: PathBuf,
    socket: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl ManagedServer {
    /// Initializes the directory if needed, starts the server on a free port and
    /// waits until it accepts connections.
    ///
    /// The server gets SIGTERM when the thread that calls this ends (`setpriv
    /// --pdeathsig`, Linux), so call it from a thread that lives as long as the
    /// server should: the main thread, or one kept for the purpose.
    pub async fn start(options: ManagedOptions) -> Result<Self, ManagedError> {
        let binary = match options.binary {
            Some(binary) => binary,
            None => find_binary()?,
        };
        let extra_args = options.extra_args.unwrap_or_else(|| {
            std::env::var(ARGS_ENV)
                .map(|a| a.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default()
        });
        let flavor = flavor_of(&binary).await?;
        let dir = absolute(&options.dir)?;
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let socket = socket_path(&dir);
        let mut server = Self {
            binary,
            flavor,
            extra_args,
            dir,
            socket,
            port: free_port()?,
            child: None,
        };
        server.refuse_if_running()?;
        server.initialize_once().await?;
        server.launch().await?;
        Ok(server)
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// "MariaDB" or "MySQL".
    pub fn flavor_name(&self) -> &'static str {
        match self.flavor {
            Flavor::MariaDb => "MariaDB",
            Flavor::MySql => "MySQL",
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for `database` on this server over TCP, as user root without password.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// The server's URL without a database.
    pub fn server_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// Shuts the server down cleanly (SIGTERM), killing it if it takes too long.
    pub async fn stop(&mut self) -> Result<(), ManagedError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        if let Ok(status) = tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
            return status
                .map(drop)
                .map_err(io("waiting for the server to stop"));
        }
        tracing::warn!("the database server did not stop in time; killing it");
        child.kill().await.map_err(io("killing the server"))
    }

    /// Starts a stopped server again, on the same port and data.
    pub async fn restart(&mut self) -> Result<(), ManagedError> {
        self.stop().await?;
        self.launch().await
    }

    fn refuse_if_running(&self) -> Result<(), ManagedError> {
        let Ok(text) = std::fs::read_to_string(self.dir.join("mysqld.pid")) else {
            return Ok(());
        };
        let Ok(pid) = text.trim().parse::<i32>() else {
            return Ok(());
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let datadir = self.dir.join("data");
        let ours = String::from_utf8_lossy(&cmdline).contains(&*datadir.to_string_lossy());
        if ours {
            return Err(ManagedError::AlreadyRunning {
                dir: self.dir.clone(),
                pid,
            });
        }
        Ok(())
    }

    /// The server's own tmpdir, created if missing.
    fn tmpdir(&self) -> Result<PathBuf, ManagedError> {
        let tmpdir = self.dir.join("tmp");
        std::fs::create_dir_all(&tmpdir).map_err(io("creating the tmpdir"))?;
        Ok(tmpdir)
    }

    async fn initialize_once(&self) -> Result<(), ManagedError> {
        let marker = self.dir.join("initialized");
        if marker.exists() {
            return Ok(());
        }
        let datadir = self.dir.join("data");
        // A directory without the marker is a half-finished initialization.
        if datadir.exists() {
            std::fs::remove_dir_all(&datadir).map_err(io("clearing a partial datadir"))?;
        }
        let log = self.dir.join("initialize.log");
        let tmpdir = self.tmpdir()?;
        let mut command = match self.flavor {
            Flavor::MariaDb => {
                let mut c = Command::new(install_db_for(&self.binary)?);
                c.arg("--no-defaults")
                    .arg(format!("--datadir={}", datadir.display()))
                    .arg(format!("--tmpdir={}", tmpdir.display()))
                    .args([
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                        "--skip-name-resolve",
                    ]);
                c
            }
            Flavor::MySql => {
                let mut c = Command::new(&self.binary);
                c.arg("--no-defaults")
                    .args(&self.extra_args)
                    .arg(format!("--datadir={}", datadir.display()))
                    .arg(format!("--tmpdir={}", tmpdir.display()))
                    .arg("--initialize-insecure")
                    .arg(format!("--log-error={}", log.display()));
                c
            }
        };
        command.args(run_as_args());
        let output = tokio::time::timeout(START_TIMEOUT, command.stdin(Stdio::null()).output())
            .await
            .map_err(|_| failed("initializing the database server", "timed out"))?
            .map_err(io("running the database initialization"))?;
        if !output.status.success() {
            let mut detail = String::from_utf8_lossy(&output.stderr).into_owned();
            detail.push_str(&tail(&log));
            return Err(failed("initializing the database server", detail));
        }
        std::fs::write(&marker, "").map_err(io("writing the initialization marker"))?;
        tracing::info!(dir = %self.dir.display(), flavor = self.flavor_name(), "database initialized");
        Ok(())
    }

    async fn launch(&mut self) -> Result<(), ManagedError> {
        let mut command = if let Some(setpriv) = find_on_path("setpriv") {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "TERM", "--"]).arg(&self.binary);
            c
        } else {
            tracing::warn!(
                "setpriv (util-linux) not found: the database server will outlive this \
                 process if it is killed"
            );
            Command::new(&self.binary)
        };
        command
            .arg("--no-defaults")
            .args(&self.extra_args)
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--tmpdir={}", self.tmpdir()?.display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket.display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mysqld.pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                self.dir.join("mysqld.err").display()
            ))
            .arg("--skip-name-resolve")
            .args(run_as_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.flavor == Flavor::MySql {
            // MySQL refuses to start if its compiled-in secure_file_priv directory is
            // missing, which it is outside a system install.
            let files = self.dir.join("files");
            std::fs::create_dir_all(&files).map_err(io("creating the files directory"))?;
            command
                .args(["--mysqlx=OFF", "--disable-log-bin"])
                .arg(format!("--secure-file-priv={}", files.display()));
        }
        let child = command
            .spawn()
            .map_err(io("starting the database server"))?;
        self.child = Some(child);
        self.until_ready().await?;
        self.grant_tcp_root().await
    }

    async fn until_ready(&mut self) -> Result<(), ManagedError> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(conn) = self.socket_conn().await {
                let _ = conn.disconnect().await;
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait().map_err(io("watching the server"))?,
                None => None,
            };
            if let Some(status) = exited {
                self.child = None;
                return Err(failed(
                    "starting the database server",
                    format!(
                        "it exited with {status}{}",
                        tail(&self.dir.join("mysqld.err"))
                    ),
                ));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(failed(
                    "starting the database server",
                    format!("not ready after {START_TIMEOUT:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `root@localhost` (socket) exists after initialization; the service connects
    /// over TCP as `root@127.0.0.1`, which MySQL does not create.
    async fn grant_tcp_root(&self) -> Result<(), ManagedError> {
        let mut conn = self
            .socket_conn()
            .await
            .map_err(|e| failed("connecting to the database server", e))?;
        conn.query_drop(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; \
             GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
        )
        .await
        .map_err(|e| failed("granting root over TCP", e))?;
        let _ = conn.disconnect().await;
        Ok(())
    }

    async fn socket_conn(&self) -> Result<Conn, mysql_async::Error> {
        let opts = OptsBuilder::default()
            .ip_or_hostname("localhost")
            .socket(Some(self.socket.to_string_lossy().into_owned()))
            .user(Some("root"));
        Conn::new(opts).await
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

fn failed(what: &'static str, detail: impl std::fmt::Display) -> ManagedError {
    ManagedError::Failed {
        what,
        detail: detail.to_string(),
    }
}

/// `LEDGER_MYSQLD`, else `mariadbd` or `mysqld` on PATH or in the usual sbin
/// directories (not always on a non-root PATH).
fn find_binary() -> Result<PathBuf, ManagedError> {
    if let Some(named) = std::env::var_os(BINARY_ENV) {
        let path = PathBuf::from(named);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(ManagedError::BadBinary(path))
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"].map(PathBuf::from));
    ["mariadbd", "mysqld"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| is_executable(p))
        .ok_or(ManagedError::NoBinary)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn install_db_for(binary: &Path) -> Result<PathBuf, ManagedError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = binary.parent() {
        dirs.extend([
            dir.to_path_buf(),
            dir.join("../bin"),
            dir.join("../scripts"),
        ]);
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.push(PathBuf::from("/usr/bin"));
    ["mariadb-install-db", "mysql_install_db"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| is_executable(p))
        .ok_or_else(|| ManagedError::NoInstallDb(binary.to_path_buf()))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

async fn flavor_of(binary: &Path) -> Result<Flavor, ManagedError> {
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(io(format!("running {} --version", binary.display())))?;
    let version = String::from_utf8_lossy(&output.stdout);
    Ok(if version.contains("MariaDB") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    })
}

/// mysqld refuses to run as root unless told to.
fn run_as_args() -> Vec<String> {
    if nix::unistd::geteuid().is_root() {
        vec!["--user=root".to_owned()]
    } else {
        Vec::new()
    }
}

fn absolute(dir: &Path) -> Result<PathBuf, ManagedError> {
    std::path::absolute(dir).map_err(io(format!("resolving {}", dir.display())))
}

fn socket_path(dir: &Path) -> PathBuf {
    use sha2::Digest as _;
    let socket = dir.join("mysqld.sock");
    if socket.as_os_str().len() <= MAX_SOCKET_PATH {
        return socket;
    }
    let digest = sha2::Sha256::digest(dir.as_os_str().as_encoded_bytes());
    let tag: String = digest
        .iter()
        .take(6)
        .fold(String::new(), |s, b| s + &format!("{b:02x}"));
    std::env::temp_dir().join(format!("ledger-mysqld-{tag}.sock"))
}

fn free_port() -> Result<u16, ManagedError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(io("finding a free port"))
}

/// The last lines of a log, for error messages.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(12);
    lines
        .get(start..)
        .map(|l| format!("\n{}", l.join("\n")))
        .unwrap_or_default()
}
