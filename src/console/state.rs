//! What every page of the console needs, shared by its handlers as axum's state:
//! the reads, the health state, the tokens and sessions, and the names it
//! answers to. Its routes are `router`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic_health::server::HealthService;

use super::host::OwnNames;
use super::session::{MAX_SESSIONS, Sessions};
use super::settings::ConsoleSettings;
use crate::call::Call;
use crate::grpc::Reader;
use crate::grpc::auth::Tokens;

/// How long a page's reads may take before it is answered 504: a person waits
/// for a page about as long as a client waits for a read.
const PAGE_DEADLINE: Duration = Duration::from_secs(10);

/// What every page needs: the reads, the health state, and the tokens.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    reader: Reader,
    /// The gRPC health service's state, which `/health` shows.
    health: HealthService,
    /// The clients' tokens; `None`: no authentication, every reader anonymous.
    tokens: Option<Tokens>,
    /// The browsers logged in, with tokens.
    sessions: Sessions,
    /// Whether the session cookie is `Secure`.
    secure_cookie: bool,
    /// The names it answers to.
    names: OwnNames,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("authenticated", &self.inner.tokens.is_some())
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of `settings`, bound at `bound`.
    pub fn new(
        reader: Reader,
        health: HealthService,
        tokens: Option<Tokens>,
        settings: &ConsoleSettings,
        bound: SocketAddr,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                reader,
                health,
                tokens,
                sessions: Sessions::new(settings.clock.clone(), MAX_SESSIONS),
                secure_cookie: settings.secure_cookie,
                names: OwnNames::new(bound, &settings.hosts),
            }),
        }
    }

    pub(super) fn reader(&self) -> &Reader {
        &self.inner.reader
    }

    pub(super) fn health(&self) -> &HealthService {
        &self.inner.health
    }

    pub(super) fn tokens(&self) -> Option<&Tokens> {
        self.inner.tokens.as_ref()
    }

    pub(super) fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    pub(super) fn secure_cookie(&self) -> bool {
        self.inner.secure_cookie
    }

    pub(super) fn names(&self) -> &OwnNames {
        &self.inner.names
    }

    /// A page's call: its deadline starts now.
    pub(super) fn call() -> Call {
        Call::new(Some(tokio::time::Instant::now() + PAGE_DEADLINE))
    }
}
