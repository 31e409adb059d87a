//! The subcommands and their flags: each flag has a `LEDGER_*` environment twin
//! and is checked as it is parsed, so a bad value stops the process with one
//! clear line before anything is opened.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::console::HostName;
use crate::db::admin::migrate;
use crate::db::{MultiPrimary, Routing};
use crate::grpc::auth::Tokens;
use crate::telemetry::LogFormat;

/// MySQL's upper bound for `innodb_lock_wait_timeout`, in seconds.
const MAX_LOCK_WAIT_SECS: u64 = 1_073_741_824;

#[derive(Debug, Parser)]
#[command(
    name = "ledger",
    version,
    about = "A gRPC ledger that charges accounts exactly once"
)]
pub struct Cli<C: Subcommand> {
    /// Log format
    #[arg(
        long,
        env = "LEDGER_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: C,
}

/// The service's subcommands; the `ledger` binary adds its tools' to them.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the ledger.v1.Ledger gRPC API (with health and reflection)
    Serve(Box<ServeArgs>),
    /// Apply pending database migrations and exit
    Migrate(MigrateArgs),
    /// Ask a running server's health service: exit 0 if SERVING, 1 otherwise
    Healthcheck(HealthcheckArgs),
    /// Check the ledger's invariants on a live database; exit 1 on any violation
    Audit(AuditArgs),
    /// Purge idempotency key rows older than a duration once, in small batches,
    /// and exit (what `serve --key-retention` does continuously)
    Purge(PurgeArgs),
}

#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each is a switch on the command line"
)]
pub struct ServeArgs {
    /// Address the gRPC server listens on
    #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Connections in the pool
    #[arg(long, env = "LEDGER_POOL_SIZE", default_value_t = 16,
        value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub pool_size: u32,

    /// Longest wait for a pooled connection (a call's deadline can only shorten it)
    #[arg(long, env = "LEDGER_POOL_TIMEOUT", default_value = "5s", value_parser = parse_positive_duration)]
    pub pool_timeout: Duration,

    /// Longest wait for a row lock, in whole seconds (lowered to each call's deadline)
    #[arg(long, env = "LEDGER_LOCK_WAIT_TIMEOUT", default_value = "5s", value_parser = parse_lock_wait)]
    pub lock_wait_timeout: Duration,

    /// Attempts per call across deadlocks and lost connections
    #[arg(long, env = "LEDGER_MAX_ATTEMPTS", default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max_attempts: u32,

    /// Do not apply migrations at start (refuse to start if any are pending)
    #[arg(long, env = "LEDGER_NO_MIGRATE")]
    pub no_migrate: bool,

    /// On SIGTERM or SIGINT, how long to keep serving while reporting NOT_SERVING,
    /// so load balancers stop sending calls before the listener closes
    #[arg(long, env = "LEDGER_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,

    /// Then, how long calls in flight may take to finish
    #[arg(long, env = "LEDGER_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// Serve Prometheus metrics at http://<address>/metrics (off when unset)
    #[arg(long, env = "LEDGER_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Require bearer tokens: a file of `<client-id> <sha256-hex-of-token>` lines;
    /// idempotency keys are then scoped per client
    #[arg(long, env = "LEDGER_AUTH_TOKENS_FILE", value_parser = parse_tokens_file)]
    pub auth_tokens_file: Option<Tokens>,

    /// Serve the web console (read-only pages, a live tail) at this address (off
    /// when unset; on at 127.0.0.1:8080, or the next free port, in the
    /// development setup). Without --auth-tokens-file it must be a loopback
    /// address, unless --console-allow-remote
    #[arg(long, env = "LEDGER_CONSOLE_ADDR")]
    pub console_addr: Option<SocketAddr>,

    /// Let the console listen on a non-loopback address without authentication:
    /// anyone who reaches it then reads every account
    #[arg(long, env = "LEDGER_CONSOLE_ALLOW_REMOTE")]
    pub console_allow_remote: bool,

    /// Mark the console's session cookie `Secure` (browsers then send it over
    /// HTTPS alone): for a console reached through a TLS-terminating proxy, as
    /// the console itself speaks plain HTTP
    #[arg(long, env = "LEDGER_CONSOLE_SECURE_COOKIE")]
    pub console_secure_cookie: bool,

    /// A name the console answers to besides localhost, the loopback addresses
    /// and the address it binds (a request sent to any other is refused with
    /// 421, so a page whose DNS name was pointed at the console reads nothing):
    /// the name people reach it by, e.g. through a proxy. Repeatable; the
    /// environment's is comma-separated
    #[arg(long, env = "LEDGER_CONSOLE_HOST", value_delimiter = ',')]
    pub console_host: Vec<HostName>,

    /// Serve TLS with this PEM certificate chain (needs --tls-key)
    #[arg(long, env = "LEDGER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert
    #[arg(long, env = "LEDGER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Whether the database is a multi-primary cluster (Galera, Group Replication),
    /// where each transaction's final batch is guarded and checked after COMMIT
    #[arg(long, env = "LEDGER_MULTI_PRIMARY", value_enum, default_value_t)]
    pub multi_primary: MultiPrimary,

    /// With several database URLs, where keyed transactions go: `account` sends
    /// each to a node chosen from the account it writes (so instances on
    /// different nodes do not conflict over an account), `first` all to the
    /// first node that answers
    #[arg(long, env = "LEDGER_ROUTING", value_enum, default_value_t)]
    pub routing: Routing,

    /// Largest request message accepted, in bytes; larger ones get RESOURCE_EXHAUSTED
    /// (1 MiB by default: the largest request the contract allows, a post of 256
    /// legs with their descriptions and 50 long pairs of metadata, fits)
    #[arg(long, env = "LEDGER_MAX_MESSAGE_SIZE", default_value_t = 1_048_576,
        value_parser = clap::value_parser!(u32).range(1024..=4_194_304))]
    pub max_message_size: u32,

    /// Ledger calls served at once across all connections; more are refused at once
    /// with RESOURCE_EXHAUSTED, rather than queued without end
    #[arg(long, env = "LEDGER_MAX_CONCURRENT_CALLS", default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_concurrent_calls: u32,

    /// Memory the calls in flight may hold between them, in MiB: each call is
    /// weighed by its request's size before the request is read, and waits for
    /// room within its deadline (at most --pool-timeout without one), else is
    /// refused with RESOURCE_EXHAUSTED having done nothing
    #[arg(long, env = "LEDGER_MAX_CALL_MEMORY", default_value_t = 32,
        value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_call_memory: u32,

    /// WatchEntries streams served at once; more are refused with RESOURCE_EXHAUSTED
    #[arg(long, env = "LEDGER_MAX_WATCHERS", default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_watchers: u32,

    /// Client connections served at once; at the limit new ones wait to be accepted
    /// until one closes
    #[arg(long, env = "LEDGER_MAX_CONNECTIONS", default_value_t = 256,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_connections: u32,

    /// Concurrent calls (HTTP/2 streams) one client connection may open; a client
    /// queues more until one ends
    #[arg(long, env = "LEDGER_MAX_CONCURRENT_STREAMS", default_value_t = 256,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_concurrent_streams: u32,

    /// Group commit: writers, each serving the keyed calls of a share of the accounts
    /// in batches; calls that arrive while a writer is busy form its next batch, and
    /// a writer with a backlog runs several batches at once. 0: one transaction per
    /// call
    #[arg(long, env = "LEDGER_BATCH_WRITERS", default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(0..=256))]
    pub batch_writers: u32,

    /// Group commit: how long a writer waits for a batch, from its start, before it
    /// leaves the batch to finish on its own and serves its other accounts (armed
    /// once another call waits); calls on the batch's accounts wait for it either
    /// way
    #[arg(long, env = "LEDGER_BATCH_STALL", default_value = "20ms",
        value_parser = parse_positive_duration)]
    pub batch_stall: Duration,

    /// Keep idempotency key rows this long, then purge them in small batches (one
    /// instance of a fleet at a time); a retry of a purged key that took effect is
    /// refused as IDEMPOTENCY_KEY_EXPIRED. Unset: keys are kept forever
    #[arg(long, env = "LEDGER_KEY_RETENTION", value_parser = parse_positive_duration)]
    pub key_retention: Option<Duration>,

    /// Whether this instance is a candidate for numbering the change stream (one
    /// instance of a fleet numbers at a time, under a lease; another takes over
    /// within seconds when it stops). At least one instance must be on
    #[arg(long, env = "LEDGER_STREAM_ASSIGNER", value_enum, default_value_t = Switch::On)]
    pub stream_assigner: Switch,

    /// Deliver to subscribers (SPEC 3.15) on loopback and private addresses
    /// too. Off, such a receiver's deliveries fail with a message saying so; the
    /// development setup turns it on
    #[arg(long, env = "LEDGER_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,
}

/// A setting that is on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// Where the database is.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// MySQL or MariaDB URL, e.g. mysql://user:pass@db:3306/ledger; the database it
    /// names is created if missing. Several, comma-separated, for the nodes of a
    /// cluster (see --routing). Without any, a private
    /// development server is run in --data-dir
    #[arg(
        long,
        env = "LEDGER_DATABASE_URL",
        hide_env_values = true,
        value_delimiter = ',',
        value_parser = parse_database_url
    )]
    pub database_url: Vec<String>,

    /// SQL run on every new database connection, after the service's own setup
    /// (which makes keyed sessions on a cluster node read causally)
    #[arg(long, env = "LEDGER_SESSION_INIT")]
    pub session_init: Option<String>,

    /// Directory of the private development server used without --database-url
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "ledger-data")]
    pub data_dir: PathBuf,

    /// How long to keep trying to reach the database at start
    #[arg(long, env = "LEDGER_CONNECT_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Purge key rows created longer ago than this, e.g. 30d
    #[arg(long, value_parser = parse_positive_duration)]
    pub older_than: Duration,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Args)]
pub struct HealthcheckArgs {
    /// The server's listen address; an unspecified one (0.0.0.0) is reached on loopback
    #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// The service to ask about ("" is the whole server)
    #[arg(long, default_value = "")]
    pub service: String,

    /// Give up after this long
    #[arg(long, default_value = "3s", value_parser = parse_positive_duration)]
    pub timeout: Duration,

    /// Connect with TLS, trusting this PEM CA certificate
    #[arg(long, env = "LEDGER_HEALTHCHECK_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// The name the server's certificate is checked against
    #[arg(
        long,
        env = "LEDGER_HEALTHCHECK_TLS_DOMAIN",
        default_value = "localhost"
    )]
    pub tls_domain: String,
}

impl HealthcheckArgs {
    /// The address to dial for `--listen`.
    pub fn target(&self) -> SocketAddr {
        let mut addr = self.listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        addr
    }
}

fn parse_database_url(raw: &str) -> Result<String, String> {
    // The URL may hold a password, so errors never echo it.
    migrate::database_name(raw).map_err(|e| e.to_string())?;
    Ok(raw.to_owned())
}

fn parse_tokens_file(raw: &str) -> Result<Tokens, String> {
    Tokens::load(Path::new(raw))
}

fn parse_duration(raw: &str) -> Result<Duration, String> {
    humantime::parse_duration(raw).map_err(|e| format!("{e} (e.g. 500ms, 5s, 1m)"))
}

fn parse_positive_duration(raw: &str) -> Result<Duration, String> {
    let d = parse_duration(raw)?;
    if d.is_zero() {
        return Err("must be positive".into());
    }
    Ok(d)
}

fn parse_lock_wait(raw: &str) -> Result<Duration, String> {
    let d = parse_positive_duration(raw)?;
    if d.subsec_nanos() != 0 || d.as_secs() > MAX_LOCK_WAIT_SECS {
        return Err(format!(
            "must be whole seconds from 1s to {MAX_LOCK_WAIT_SECS}s: the server counts lock waits in seconds"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::<Command>::command().debug_assert();
    }

    #[test]
    fn the_defaults_ignore_the_environment() {
        let defaults = ServeArgs::defaults().unwrap();
        assert_eq!(defaults.pool_size, 16);
        assert_eq!(defaults.lock_wait_timeout, Duration::from_secs(5));
        assert!(defaults.database.database_url.is_empty());
        assert_eq!(defaults.routing, Routing::Account);
    }

    #[test]
    fn lock_waits_are_whole_seconds() {
        assert_eq!(parse_lock_wait("5s"), Ok(Duration::from_secs(5)));
        assert!(parse_lock_wait("500ms").is_err());
        assert!(parse_lock_wait("0s").is_err());
        assert!(parse_lock_wait("five").is_err());
    }

    #[test]
    fn database_urls_must_name_a_plain_database() {
        assert!(parse_database_url("mysql://root@127.0.0.1:3306/ledger").is_ok());
        assert!(parse_database_url("mysql://root@127.0.0.1:3306").is_err());
        assert!(parse_database_url("mysql://root@127.0.0.1/le`dger").is_err());
        assert!(parse_database_url("postgres://x").is_err());
    }

    #[test]
    fn bad_database_urls_do_not_echo_the_password() {
        let err = parse_database_url("mysql://root:hunter2@127.0.0.1:3306").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn the_healthcheck_dials_loopback_for_an_unspecified_address() {
        let args =
            Cli::<Command>::try_parse_from(["ledger", "healthcheck", "--listen", "0.0.0.0:7000"])
                .unwrap();
        let Command::Healthcheck(args) = args.command else {
            panic!("healthcheck");
        };
        assert_eq!(args.target(), "127.0.0.1:7000".parse().unwrap());
    }
}
