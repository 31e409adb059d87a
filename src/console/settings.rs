//! The console's settings, made from the flags (`config`): where it listens,
//! the names it answers to, and how its sessions' cookie is marked.

use std::net::SocketAddr;

use super::host::HostName;
use super::session::Clock;

/// The web console's listener, and how it keeps its sessions.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    pub addr: SocketAddr,
    /// When the port is taken, try the next ones (the development setup's
    /// default); otherwise a taken port stops the start.
    pub next_free_port: bool,
    /// Mark the session cookie `Secure`: the console is reached over TLS, at a
    /// proxy in front of it.
    pub secure_cookie: bool,
    /// The names it answers to besides its loopback names and address.
    pub hosts: Vec<HostName>,
    /// What the sessions' idle and absolute ends are measured by.
    pub clock: Clock,
}

impl ConsoleSettings {
    /// A console at `addr`, with the flags' defaults.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            next_free_port: false,
            secure_cookie: false,
            hosts: Vec::new(),
            clock: Clock::default(),
        }
    }
}
