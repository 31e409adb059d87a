//! Command-line and environment configuration, validated once at start: every flag
//! has a `LEDGER_*` environment twin, and a bad value stops the process with one
//! clear line before anything is opened.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::app::Settings;
use crate::db::{Limits, PoolSettings, migrate};

/// MySQL's upper bound for `innodb_lock_wait_timeout`, in seconds.
const MAX_LOCK_WAIT_SECS: u64 = 1_073_741_824;

#[derive(Debug, Parser)]
#[command(
    name = "ledger",
    version,
    about = "A gRPC ledger that charges accounts exactly once"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the ledger.v1.Ledger gRPC API
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address the gRPC server listens on
    #[arg(long, env = "LEDGER_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// MySQL or MariaDB URL, e.g. mysql://user:pass@db:3306/ledger; the database it
    /// names is created if missing. Without it, a private development server is run
    /// in --data-dir
    #[arg(
        long,
        env = "LEDGER_DATABASE_URL",
        hide_env_values = true,
        value_parser = parse_database_url
    )]
    pub database_url: Option<String>,

    /// Directory of the private development server used without --database-url
    #[arg(long, env = "LEDGER_DATA_DIR", default_value = "ledger-data")]
    pub data_dir: PathBuf,

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
}

impl ServeArgs {
    /// The settings to serve with, on the database at `database_url`.
    pub fn settings(&self, database_url: String) -> Settings {
        Settings {
            listen: self.listen,
            database_url,
            pool: PoolSettings {
                size: self.database.pool_size,
                checkout_timeout: self.database.pool_timeout,
            },
            limits: Limits {
                lock_wait: self.database.lock_wait_timeout,
                max_attempts: self.database.max_attempts,
            },
        }
    }
}

fn parse_database_url(raw: &str) -> Result<String, String> {
    // The URL may hold a password, so errors never echo it.
    migrate::database_name(raw).map_err(|e| e.to_string())?;
    Ok(raw.to_owned())
}

fn parse_positive_duration(raw: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(raw).map_err(|e| format!("{e} (e.g. 500ms, 5s, 1m)"))?;
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
        Cli::command().debug_assert();
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
}
