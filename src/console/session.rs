//! Console sessions (SPEC 6): what a browser's cookie names once its token was
//! checked. A session is a random id (32 bytes from the operating system's
//! generator, base64url), kept here in memory, and carries the client it was
//! opened for with only the grants the console can use (its reads), never the
//! token: the cookie moves no money, and is no bearer token to the gRPC API.
//! It ends after [`IDLE`] without a request, [`LIFETIME`] after its login
//! whatever its use, at logout, or when the process ends (so a client removed
//! from the tokens file keeps no session past a restart).
//!
//! The store is bounded: past [`MAX_SESSIONS`], a login ends the oldest
//! session. It keeps each id's SHA-256, not the id, as the tokens file keeps
//! the tokens'.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::TryRng as _;
use rand::rngs::SysRng;
use sha2::{Digest as _, Sha256};

use crate::grpc::auth::Client;

/// A session ends after this long without a request.
pub(super) const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after its login, however busy.
pub(super) const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// Sessions kept at once. The console's readers are people, each logging in a
/// few times a day, and a session lasts 12 hours at most: 4,096 is a login
/// every 11 seconds for 12 hours, far past any team, while each session holds
/// about 1 KiB (its id's hash, its client's id and grants, two instants), so
/// the store never holds more than some 4 MiB. A client that logs in again
/// and again (it holds a token) ends the oldest sessions, and no more.
pub(super) const MAX_SESSIONS: usize = 4096;

/// The methods the console calls, the only grants a session carries.
pub(super) const CONSOLE_READS: &[&str] = &[
    "GetAccount",
    "GetBalance",
    "GetEntry",
    "GetHold",
    "ListAccounts",
    "ListEntries",
    "ListHolds",
    "LookupKey",
    "SearchEntries",
    "WatchEntries",
];

/// The time sessions are measured by: the process's monotonic clock, moved on
/// by [`advance`](Self::advance), which only a test calls, so a test passes 30
/// idle minutes without waiting them.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// How far the clock was moved on, in milliseconds.
    ahead: Arc<AtomicU64>,
}

impl Clock {
    pub fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.ahead.fetch_add(millis, Ordering::Relaxed);
    }

    fn now(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.ahead.load(Ordering::Relaxed))
    }
}

/// The sessions of a console.
#[derive(Debug)]
pub(super) struct Sessions {
    clock: Clock,
    /// How many are kept: [`MAX_SESSIONS`] but in tests of the cap.
    cap: usize,
    store: Mutex<Store>,
}

#[derive(Debug, Default)]
struct Store {
    /// By the SHA-256 of their id.
    open: HashMap<[u8; 32], Session>,
    /// Their ids' hashes in the order they were opened, by a running number:
    /// the oldest first, to end at the cap.
    by_age: BTreeMap<u64, [u8; 32]>,
    opened: u64,
}

#[derive(Debug)]
struct Session {
    client: Client,
    /// Its number in `by_age`.
    number: u64,
    started: Instant,
    last_used: Instant,
}

/// No session could be opened: the operating system gave no random bytes.
#[derive(Debug, thiserror::Error)]
#[error("no random bytes for a session id: {0}")]
pub(super) struct NoRandomness(String);

impl Sessions {
    pub(super) fn new(clock: Clock, cap: usize) -> Self {
        Self {
            clock,
            cap,
            store: Mutex::default(),
        }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // The maps change by inserts and removes alone, none of which panics:
        // a lock poisoned elsewhere still guards consistent maps.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session for `client`, with the console's grants alone; its id.
    pub(super) fn open(&self, client: &Client) -> Result<String, NoRandomness> {
        let mut bytes = [0_u8; 32];
        SysRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| NoRandomness(e.to_string()))?;
        let id = URL_SAFE_NO_PAD.encode(bytes);
        let now = self.clock.now();
        let mut store = self.store();
        if store.open.len() >= self.cap {
            store.end_oldest();
        }
        store.opened += 1;
        let number = store.opened;
        let session = Session {
            client: client.only(CONSOLE_READS),
            number,
            started: now,
            last_used: now,
        };
        store.by_age.insert(number, hash(&id));
        store.open.insert(hash(&id), session);
        Ok(id)
    }

    /// The client of session `id`, if it is open; the request counts as its
    /// use. One that has ended is removed.
    pub(super) fn client(&self, id: &str) -> Option<Client> {
        let now = self.clock.now();
        let key = hash(id);
        let mut store = self.store();
        let session = store.open.get_mut(&key)?;
        let ended = now.saturating_duration_since(session.last_used) >= IDLE
            || now.saturating_duration_since(session.started) >= LIFETIME;
        if ended {
            store.end(&key);
            return None;
        }
        session.last_used = now;
        Some(session.client.clone())
    }

    /// Ends session `id` (a logout).
    pub(super) fn close(&self, id: &str) {
        self.store().end(&hash(id));
    }
}

impl Store {
    fn end(&mut self, key: &[u8; 32]) {
        if let Some(session) = self.open.remove(key) {
            self.by_age.remove(&session.number);
        }
    }

    fn end_oldest(&mut self) {
        if let Some((_, key)) = self.by_age.pop_first() {
            self.open.remove(&key);
        }
    }
}

fn hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::auth::Tokens;

    const HELLO_SHA256: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    fn shop() -> Client {
        let tokens = Tokens::parse(&format!("shop {HELLO_SHA256}\n")).unwrap();
        tokens.client("hello").unwrap().clone()
    }

    #[test]
    fn a_session_carries_the_console_reads_alone() {
        let sessions = Sessions::new(Clock::default(), MAX_SESSIONS);
        let id = sessions.open(&shop()).unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(&id).unwrap().len(), 32);
        let client = sessions.client(&id).unwrap();
        assert_eq!(client.namespace.as_str(), "shop");
        assert!(CONSOLE_READS.iter().all(|m| client.may_call(m)));
        for moves_money in [
            "Charge",
            "Credit",
            "Transfer",
            "Refund",
            "Post",
            "OpenAccount",
        ] {
            assert!(!client.may_call(moves_money), "{moves_money}");
        }
        assert_ne!(sessions.open(&shop()).unwrap(), id, "each id is new");
        assert!(sessions.client("forged").is_none());
    }

    #[test]
    fn a_session_ends_idle_after_30_minutes_and_in_any_case_after_12_hours() {
        let clock = Clock::default();
        let sessions = Sessions::new(clock.clone(), MAX_SESSIONS);
        let idle = sessions.open(&shop()).unwrap();
        let almost = Duration::from_secs(29 * 60);
        clock.advance(almost);
        assert!(sessions.client(&idle).is_some(), "used in time");
        clock.advance(almost);
        assert!(
            sessions.client(&idle).is_some(),
            "idle counts from its last use"
        );
        clock.advance(IDLE);
        assert!(sessions.client(&idle).is_none(), "30 idle minutes");

        let busy = sessions.open(&shop()).unwrap();
        let step = IDLE / 2;
        let mut used = Duration::ZERO;
        while used + step < LIFETIME {
            clock.advance(step);
            used += step;
            assert!(sessions.client(&busy).is_some(), "after {used:?}");
        }
        clock.advance(LIFETIME.saturating_sub(used));
        assert!(sessions.client(&busy).is_none(), "12 hours");
        assert!(
            sessions.store().open.is_empty(),
            "ended sessions are removed"
        );
    }

    #[test]
    fn a_logout_ends_its_session_alone() {
        let sessions = Sessions::new(Clock::default(), MAX_SESSIONS);
        let (one, two) = (
            sessions.open(&shop()).unwrap(),
            sessions.open(&shop()).unwrap(),
        );
        sessions.close(&one);
        assert!(sessions.client(&one).is_none());
        assert!(sessions.client(&two).is_some());
    }

    #[test]
    fn past_the_cap_a_login_ends_the_oldest_session() {
        const CAP: usize = 3;
        let sessions = Sessions::new(Clock::default(), CAP);
        let first = sessions.open(&shop()).unwrap();
        let second = sessions.open(&shop()).unwrap();
        let third = sessions.open(&shop()).unwrap();
        sessions.close(&second);
        let fourth = sessions.open(&shop()).unwrap();
        assert!(sessions.client(&first).is_some(), "at the cap, all kept");
        let last = sessions.open(&shop()).unwrap();
        assert!(sessions.client(&first).is_none(), "the oldest ended");
        for kept in [&third, &fourth, &last] {
            assert!(sessions.client(kept).is_some());
        }
        let store = sessions.store();
        assert_eq!((store.open.len(), store.by_age.len()), (CAP, CAP));
    }
}
