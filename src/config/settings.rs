//! What serving needs, made from the flags once: building and serving never see
//! a flag.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use super::flags::{ServeArgs, Switch};
use crate::console::ConsoleSettings;
use crate::db::{Limits, PoolSettings, Routing, Session};
use crate::grpc::auth::Tokens;

impl ServeArgs {
    /// Every flag at its default, whatever the environment says: the one place
    /// the defaults are written is the flags' own declarations.
    pub fn defaults() -> anyhow::Result<Self> {
        use clap::{Args as _, FromArgMatches as _};
        let command = Self::augment_args(clap::Command::new("serve")).mut_args(|a| a.env(None));
        let matches = command.try_get_matches_from(["serve"])?;
        Ok(Self::from_arg_matches(&matches)?)
    }

    /// The settings to serve with, on the database at `database_url` (with the
    /// other configured URLs, if any, as failovers).
    pub fn settings(&self, database_url: String) -> anyhow::Result<Settings> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsIdentity::load(cert, key)?),
            _ => None,
        };
        let failover_urls = self
            .database
            .database_url
            .iter()
            .filter(|u| **u != database_url)
            .cloned()
            .collect();
        let console = self
            .console_addr
            .map(|addr| {
                console_settings(
                    addr,
                    self.auth_tokens_file.is_some(),
                    self.console_allow_remote,
                )
                .map(|console| self.console_options(console))
            })
            .transpose()?;
        Ok(Settings {
            listen: self.listen,
            console,
            database_url,
            failover_urls,
            session: Session {
                init: self.database.session_init.clone(),
                multi_primary: self.multi_primary,
            },
            routing: self.routing,
            pool: PoolSettings {
                size: self.pool_size,
                checkout_timeout: self.pool_timeout,
            },
            limits: Limits {
                lock_wait: self.lock_wait_timeout,
                max_attempts: self.max_attempts,
                batch_writers: usize::try_from(self.batch_writers)?,
                batch_stall: self.batch_stall,
                max_watchers: usize::try_from(self.max_watchers)?,
            },
            migrate: !self.no_migrate,
            connect_timeout: self.database.connect_timeout,
            shutdown_delay: self.shutdown_delay,
            shutdown_grace: self.shutdown_grace,
            metrics_listen: self.metrics_listen,
            auth: self.auth_tokens_file.clone(),
            tls,
            max_message_bytes: usize::try_from(self.max_message_size)?,
            max_concurrent_calls: usize::try_from(self.max_concurrent_calls)?,
            max_call_memory: usize::try_from(self.max_call_memory)? << 20,
            max_connections: usize::try_from(self.max_connections)?,
            max_concurrent_streams: self.max_concurrent_streams,
            key_retention: self.key_retention,
            stream_assigner: self.stream_assigner == Switch::On,
            webhook_allow_private: self.webhook_allow_private,
        })
    }
}

impl ServeArgs {
    /// The development setup's console (loopback, port 8080 or the next free
    /// one), with the console's flags.
    pub fn development_console(&self) -> ConsoleSettings {
        self.console_options(ConsoleSettings {
            next_free_port: true,
            ..ConsoleSettings::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)))
        })
    }

    fn console_options(&self, console: ConsoleSettings) -> ConsoleSettings {
        ConsoleSettings {
            secure_cookie: self.console_secure_cookie,
            hosts: self.console_host.clone(),
            ..console
        }
    }
}

/// Where the console listens, checked against the rule that an unauthenticated
/// console stays on loopback unless allowed off it.
fn console_settings(
    addr: SocketAddr,
    authenticated: bool,
    allow_remote: bool,
) -> anyhow::Result<ConsoleSettings> {
    anyhow::ensure!(
        authenticated || allow_remote || addr.ip().is_loopback(),
        "--console-addr {addr} is not a loopback address, and without --auth-tokens-file \
         anyone who reaches it reads every account: pass --console-allow-remote to mean it"
    );
    Ok(ConsoleSettings::new(addr))
}

/// Everything `Application::build` needs, already validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    /// The web console's address; off when `None`.
    pub console: Option<ConsoleSettings>,
    /// The database; on a cluster, the node this instance prefers.
    pub database_url: String,
    /// Other nodes of the same database, tried in order when the preferred one
    /// does not answer.
    pub failover_urls: Vec<String>,
    /// SQL run on every new connection, and whether to assume a multi-primary
    /// cluster.
    pub session: Session,
    /// How keyed transactions choose among several database URLs.
    pub routing: Routing,
    pub pool: PoolSettings,
    pub limits: Limits,
    /// Apply pending migrations at start; when false, refuse to start if any are.
    pub migrate: bool,
    /// How long to keep trying to reach the database at start.
    pub connect_timeout: Duration,
    /// After a shutdown signal, how long to keep serving while reporting
    /// NOT_SERVING, so load balancers stop sending calls first.
    pub shutdown_delay: Duration,
    /// Then, how long calls in flight may take to finish.
    pub shutdown_grace: Duration,
    /// Where to serve Prometheus metrics; off when `None`.
    pub metrics_listen: Option<SocketAddr>,
    /// Bearer tokens to require; every caller shares one namespace when `None`.
    pub auth: Option<Tokens>,
    pub tls: Option<TlsIdentity>,
    /// Largest request message accepted.
    pub max_message_bytes: usize,
    /// Ledger calls served at once; more are refused with RESOURCE_EXHAUSTED.
    pub max_concurrent_calls: usize,
    /// Bytes the calls in flight may hold between them, by their weights.
    pub max_call_memory: usize,
    /// Client connections served at once.
    pub max_connections: usize,
    /// HTTP/2 streams one connection may have open.
    pub max_concurrent_streams: u32,
    /// Purge key rows older than this (SPEC 3.5); `None` keeps them forever.
    pub key_retention: Option<Duration>,
    /// Run a candidate for the change stream's assigner lease (`db::stream`).
    pub stream_assigner: bool,
    /// Subscribers on loopback and private addresses are delivered to.
    pub webhook_allow_private: bool,
}

impl Settings {
    /// The defaults of `ledger serve` (its flags' defaults, not the environment)
    /// for everything but where to listen and which database to use.
    pub fn new(listen: SocketAddr, database_url: impl Into<String>) -> anyhow::Result<Self> {
        let mut settings = ServeArgs::defaults()?.settings(database_url.into())?;
        settings.listen = listen;
        Ok(settings)
    }
}

/// A server certificate chain and its key, checked to make a TLS configuration.
#[derive(Debug, Clone)]
pub struct TlsIdentity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl TlsIdentity {
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let read = |path: &Path| {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        };
        Self::from_pem(read(cert)?, read(key)?).with_context(|| {
            format!(
                "{} and {} do not make a TLS identity",
                cert.display(),
                key.display()
            )
        })
    }

    pub fn from_pem(cert_pem: Vec<u8>, key_pem: Vec<u8>) -> anyhow::Result<Self> {
        let identity = Self { cert_pem, key_pem };
        Server::builder().tls_config(identity.config())?;
        Ok(identity)
    }

    pub(crate) fn config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new().identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    use crate::config::{Cli, Command};
    use crate::console::HostName;

    /// Without tokens the console stays on loopback unless allowed off it; with
    /// tokens, or allowed, it may listen anywhere.
    #[test]
    fn an_unauthenticated_console_stays_on_loopback_unless_allowed() {
        let remote: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(console_settings(local, false, false).is_ok());
        assert!(console_settings("[::1]:8080".parse().unwrap(), false, false).is_ok());
        let refused = console_settings(remote, false, false).unwrap_err();
        assert!(
            refused.to_string().contains("--console-allow-remote"),
            "{refused}"
        );
        assert!(console_settings(remote, true, false).is_ok());
        assert!(console_settings(remote, false, true).is_ok());
        let serve = |args: &[&str]| {
            let mut argv = vec!["ledger", "serve"];
            argv.extend(args);
            let Command::Serve(serve) = Cli::<Command>::try_parse_from(argv).unwrap().command
            else {
                panic!("serve");
            };
            serve.settings("mysql://root@127.0.0.1:3306/ledger".into())
        };
        assert!(serve(&[]).unwrap().console.is_none(), "off unless given");
        assert!(serve(&["--console-addr", "0.0.0.0:8080"]).is_err());
        let allowed = serve(&["--console-addr", "0.0.0.0:8080", "--console-allow-remote"]);
        assert_eq!(allowed.unwrap().console.unwrap().addr, remote);
    }

    fn serve_args(flags: &[&str]) -> ServeArgs {
        let mut argv = vec!["ledger", "serve"];
        argv.extend(flags);
        let Command::Serve(serve) = Cli::<Command>::try_parse_from(argv).unwrap().command else {
            panic!("serve");
        };
        *serve
    }

    /// The console's flags reach its settings, the development setup's too.
    #[test]
    fn the_console_flags_reach_its_settings() {
        let url = || "mysql://root@127.0.0.1:3306/ledger".to_owned();
        let plain = serve_args(&["--console-addr", "127.0.0.1:8080"]);
        assert!(
            !plain
                .settings(url())
                .unwrap()
                .console
                .unwrap()
                .secure_cookie
        );
        let behind_tls = serve_args(&[
            "--console-addr",
            "127.0.0.1:8080",
            "--console-secure-cookie",
        ]);
        assert!(
            behind_tls
                .settings(url())
                .unwrap()
                .console
                .unwrap()
                .secure_cookie
        );
        let development = serve_args(&["--console-secure-cookie"]).development_console();
        assert!(development.secure_cookie && development.next_free_port);
        let named = serve_args(&[
            "--console-addr",
            "127.0.0.1:8080",
            "--console-host",
            "ledger.example.com",
            "--console-host",
            "10.0.0.5,Proxy.Example",
        ]);
        let hosts = named.settings(url()).unwrap().console.unwrap().hosts;
        let expected: Vec<HostName> = ["ledger.example.com", "10.0.0.5", "proxy.example"]
            .iter()
            .map(|h| h.parse().unwrap())
            .collect();
        assert_eq!(hosts, expected);
        let with_port = ["serve", "--console-host", "ledger.example.com:443"];
        assert!(
            Cli::<Command>::try_parse_from(std::iter::once("ledger").chain(with_port)).is_err()
        );
    }
}
