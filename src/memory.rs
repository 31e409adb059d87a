//! The memory an instance can come to hold, computed from its configuration and
//! logged at start: its size then, and for each limit what what it admits can
//! hold. Each term is a count the configuration caps times what one of them
//! holds at most, for entries of up to [`ENTRY`] bytes (an entry with a few
//! short pairs of metadata; one with 50 long pairs holds some 30 KiB).

use std::fmt;

use crate::config::Settings;
use crate::grpc::connections::CONNECTION_WINDOW;

/// An entry in memory: its row, its message, its encoding.
pub const ENTRY: usize = 1024;
/// A database connection: its packet buffer and its prepared statements (a
/// keyed connection that sent a batch past 128 KiB is closed, not pooled).
const DATABASE_CONNECTION: usize = 256 * 1024;
/// The driver's pool of packet buffers: 64 of 64 KiB (`src/main.rs`).
const DRIVER_BUFFERS: usize = 64 * 64 * 1024;
/// A client connection's HTTP/2 state: its read and write buffers and its
/// header tables, besides its window.
const CLIENT_CONNECTION: usize = 48 * 1024;
/// What a call holds before it is weighed: the first frame of its request
/// (HTTP/2's smallest largest frame) and its headers.
const UNWEIGHED_CALL: usize = 16 * 1024 + 16 * 1024;
/// A watcher: its stream's buffer of 64 entries, a backlog page of 500 while it
/// catches up, and what HTTP/2 buffers for its stream (hyper's 400 KiB).
const WATCHER: usize = (64 + 500) * ENTRY + 400 * 1024;
/// The tail's batches kept for watchers that are behind: 8 of up to 1,000
/// entries.
const TAIL: usize = 8 * 1000 * ENTRY;

/// The bound, term by term.
#[derive(Debug, Clone)]
pub struct Bound {
    pub terms: Vec<(&'static str, usize)>,
}

impl Bound {
    /// The bound of an instance configured by `settings` that held `at_start`
    /// bytes when it began to serve.
    pub fn of(settings: &Settings, at_start: usize) -> Self {
        let nodes = 1 + settings.failover_urls.len();
        let keyed = settings.pool.size as usize * nodes;
        // The reads' pool, the stream's assigner and the purger.
        let others = (settings.pool.size as usize / 4).max(2) + 2;
        let window = CONNECTION_WINDOW as usize;
        Self {
            terms: vec![
                ("at_start", at_start),
                (
                    "database",
                    (keyed + others) * DATABASE_CONNECTION + DRIVER_BUFFERS,
                ),
                (
                    "connections",
                    settings.max_connections * (CLIENT_CONNECTION + window),
                ),
                (
                    "calls",
                    settings.max_call_memory + settings.max_concurrent_calls * UNWEIGHED_CALL,
                ),
                ("watchers", settings.limits.max_watchers * WATCHER + TAIL),
            ],
        }
    }

    pub fn total(&self) -> usize {
        self.terms.iter().map(|(_, bytes)| bytes).sum()
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: usize| bytes.div_ceil(1 << 20);
        write!(f, "{} MiB:", mib(self.total()))?;
        for (name, bytes) in &self.terms {
            write!(f, " {name} {}", mib(*bytes))?;
        }
        Ok(())
    }
}

/// The process's resident size, from `/proc/self/status`; `None` where there is
/// none.
pub fn resident() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_adds_what_it_admits() {
        let mut settings = Settings::new(
            "127.0.0.1:0".parse().unwrap(),
            "mysql://root@127.0.0.1:3306/test",
        )
        .unwrap();
        let before = Bound::of(&settings, 16 << 20).total();
        settings.limits.max_watchers += 1;
        assert_eq!(Bound::of(&settings, 16 << 20).total(), before + WATCHER);
        settings.max_connections += 1;
        settings.max_call_memory += 1 << 20;
        assert_eq!(
            Bound::of(&settings, 16 << 20).total(),
            before + WATCHER + CLIENT_CONNECTION + CONNECTION_WINDOW as usize + (1 << 20)
        );
    }
}
