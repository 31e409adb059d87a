//! The names the console answers to (SPEC 6). A page of another site whose name
//! an attacker's DNS points at the console's address (DNS rebinding) is, to the
//! browser, of that other site: it may read what the console answers, and its
//! requests carry its own name as their `Host`. So the console answers only a
//! request whose `Host` is one of its own names, and any other 421 Misdirected
//! Request, having read nothing.
//!
//! Its own names, each with any port or none (a proxy in front of it may name
//! its own): `localhost` and the loopback addresses (`127.0.0.1`, `[::1]`);
//! the address it binds (when that is every address, `0.0.0.0` or `[::]`, any
//! address: DNS plays no part in a request sent to an address, so none can be
//! rebound); and the names given with `--console-host`.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::extract::{Request, State};
use axum::http::header;
use axum::http::uri::Authority;
use axum::middleware::Next;
use axum::response::Response;

use super::failure;

/// A host as the console compares it: an address, or a name in lower case
/// without a final dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    Address(IpAddr),
    Name(String),
}

impl FromStr for HostName {
    type Err = String;

    /// A name (`ledger.example.com`) or an address (`10.0.0.5`, `::1` or
    /// `[::1]`), without a port.
    fn from_str(raw: &str) -> Result<Self, String> {
        let inner = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        if let Ok(ip) = inner.unwrap_or(raw).parse::<IpAddr>() {
            return Ok(Self::Address(ip));
        }
        let name = raw.strip_suffix('.').unwrap_or(raw);
        let label = |l: &str| {
            (1..=63).contains(&l.len())
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.len() <= 253 && name.split('.').all(label) {
            Ok(Self::Name(name.to_ascii_lowercase()))
        } else {
            Err(format!(
                "{raw:?} is not a host name or an address (give it without a scheme, port \
                 or path, e.g. ledger.example.com)"
            ))
        }
    }
}

impl HostName {
    /// The host a `Host` header names, without its port; `None` if it names
    /// none (or a user, which no browser sends).
    fn of_header(value: &str) -> Option<Self> {
        let authority = Authority::from_str(value).ok()?;
        if authority.as_str().contains('@') {
            return None;
        }
        authority.host().parse().ok()
    }
}

/// The console's own names.
#[derive(Debug, Clone)]
pub(super) struct OwnNames {
    /// The address it binds.
    bound: IpAddr,
    /// The `--console-host` names.
    given: Vec<HostName>,
}

impl OwnNames {
    pub(super) fn new(bound: SocketAddr, given: &[HostName]) -> Self {
        Self {
            bound: bound.ip(),
            given: given.to_vec(),
        }
    }

    fn own(&self, host: &HostName) -> bool {
        let named = match host {
            HostName::Address(ip) => {
                ip.is_loopback() || *ip == self.bound || self.bound.is_unspecified()
            }
            HostName::Name(name) => name == "localhost",
        };
        named || self.given.contains(host)
    }

    /// Whether a request is sent to one of the console's names: its `Host`, and
    /// the authority of its address if it has one (`GET http://host/...`).
    fn addressed(&self, request: &Request) -> bool {
        let mut hosts = request.headers().get_all(header::HOST).iter();
        let host = match (hosts.next(), hosts.next()) {
            (Some(host), None) => host.to_str().ok().and_then(HostName::of_header),
            _ => None,
        };
        let in_address = request
            .uri()
            .authority()
            .map(|a| HostName::of_header(a.as_str()));
        host.is_some_and(|h| self.own(&h))
            && in_address.is_none_or(|a| a.is_some_and(|a| self.own(&a)))
    }
}

/// The router's outermost check: a request sent to another name is answered
/// 421 before any page runs.
pub(super) async fn checked(
    State(names): State<OwnNames>,
    request: Request,
    next: Next,
) -> Response {
    if names.addressed(&request) {
        next.run(request).await
    } else {
        failure::misdirected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: Option<&str>, uri: &str) -> Request {
        let mut request = Request::get(uri);
        if let Some(host) = host {
            request = request.header(header::HOST, host);
        }
        request.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn own_names_are_answered_with_any_port_or_none() {
        let names = OwnNames::new(
            "10.0.0.5:8080".parse().unwrap(),
            &[
                "Ledger.Example.com.".parse().unwrap(),
                "[fd00::7]".parse().unwrap(),
            ],
        );
        for own in [
            "localhost",
            "LOCALHOST:8080",
            "localhost.",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:8080",
            "10.0.0.5:8080",
            "10.0.0.5",
            "ledger.example.com",
            "ledger.EXAMPLE.com:443",
            "[fd00::7]:8080",
        ] {
            assert!(names.addressed(&request(Some(own), "/")), "{own}");
        }
        for foreign in [
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "10.0.0.6:8080",
            "user@localhost",
            "localhost:8080/x",
            "",
        ] {
            assert!(!names.addressed(&request(Some(foreign), "/")), "{foreign}");
        }
        assert!(!names.addressed(&request(None, "/")), "no Host");
        let absolute = request(Some("localhost"), "http://attacker.example/accounts/1");
        assert!(
            !names.addressed(&absolute),
            "an address naming another host"
        );
        assert!(names.addressed(&request(Some("localhost"), "http://localhost:8080/")));
    }

    #[test]
    fn a_console_on_every_address_answers_to_any_address() {
        let names = OwnNames::new("0.0.0.0:8080".parse().unwrap(), &[]);
        assert!(names.addressed(&request(Some("192.168.1.20:8080"), "/")));
        assert!(!names.addressed(&request(Some("ledger.example.com:8080"), "/")));
    }

    #[test]
    fn given_names_are_names_or_addresses_without_a_port() {
        for good in [
            "ledger",
            "ledger.example.com",
            "a-b_c.d",
            "10.1.2.3",
            "::1",
            "[::1]",
        ] {
            assert!(good.parse::<HostName>().is_ok(), "{good}");
        }
        for bad in [
            "",
            "ledger:8080",
            "https://ledger",
            "ledger/x",
            "a..b",
            "é.example",
        ] {
            assert!(bad.parse::<HostName>().is_err(), "{bad}");
        }
        assert_eq!(
            "Ledger.Example.".parse::<HostName>(),
            Ok(HostName::Name("ledger.example".to_owned()))
        );
    }
}
