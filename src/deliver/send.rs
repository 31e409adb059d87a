//! One delivery: the entries as canonical protobuf JSON of a `Delivery`, the
//! `Ledger-Delivery-Id` and `Ledger-Signature` headers, one POST on a kept
//! HTTP client (connections reused, HTTP/1.1 keep-alive or HTTP/2), a 10 s
//! timeout, no redirect followed, and the receiver's address checked first.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage};

use crate::ledger::Entry;
use crate::ops::entry_message;
use crate::proto::pb;
use ledger_proto::webhook::{DELIVERY_ID_HEADER, SIGNATURE_HEADER, sign};

/// How long a receiver has to answer (SPEC 3.15).
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle connection to a receiver is kept for the next delivery.
const IDLE: Duration = Duration::from_secs(90);

/// What became of a delivery.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The receiver answered 2xx.
    Acknowledged,
    /// Anything else, with why.
    Failed(String),
}

/// The HTTP client every subscription of the instance shares.
#[derive(Debug, Clone)]
pub(super) struct Sender {
    http: reqwest::Client,
    allow_private: bool,
}

impl Sender {
    pub(super) fn new(allow_private: bool) -> anyhow::Result<Self> {
        // The process's TLS provider, as tonic's: ring. Installing it twice is
        // harmless (the first stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(IDLE)
            .user_agent(concat!("ledger/", env!("CARGO_PKG_VERSION")));
        if !allow_private {
            http = http.dns_resolver(Arc::new(PublicOnly));
        }
        let http = http.build()?;
        Ok(Self {
            http,
            allow_private,
        })
    }

    /// POSTs `entries` (sequences `first..=last`) to `url`, signed with `secret`.
    pub(super) async fn send(
        &self,
        subscription: u64,
        url: &str,
        secret: &str,
        entries: &[Entry],
        first: u64,
        last: u64,
    ) -> Outcome {
        if let Err(why) = self.check_address(url) {
            return Outcome::Failed(why);
        }
        let body = match body(entries) {
            Ok(body) => body,
            Err(why) => return Outcome::Failed(why),
        };
        let signature = sign(secret, chrono::Utc::now().timestamp(), &body);
        let sent = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(DELIVERY_ID_HEADER, format!("{subscription}:{first}-{last}"))
            .header(SIGNATURE_HEADER, signature)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(reply) if reply.status().is_success() => {
                // Read the rest, so the connection is kept for the next one.
                let _ = reply.bytes().await;
                Outcome::Acknowledged
            }
            Ok(reply) => Outcome::Failed(format!("the receiver answered {}", reply.status())),
            Err(e) if e.is_timeout() => {
                Outcome::Failed(format!("the receiver did not answer within {TIMEOUT:?}"))
            }
            Err(e) => Outcome::Failed(format!("sending failed: {}", error_chain(&e))),
        }
    }

    /// Refuses a receiver at a loopback, private, link-local or unspecified
    /// address unless the operator allows them (`--webhook-allow-private`). An
    /// address in the url is checked here; a name, by [`PublicOnly`] as the
    /// connection resolves it.
    fn check_address(&self, url: &str) -> Result<(), String> {
        if self.allow_private {
            return Ok(());
        }
        let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a url"))?;
        let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
        match host.parse::<IpAddr>() {
            Ok(ip) if is_private(ip) => Err(refused(ip)),
            _ => Ok(()),
        }
    }
}

/// Resolves a receiver's name for its connection, and fails when any of its
/// addresses is private: the connection goes to the addresses checked, so a name
/// cannot answer a public address to a check and a private one to the request.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(ip) = addresses
                .iter()
                .map(SocketAddr::ip)
                .find(|ip| is_private(*ip))
            {
                return Err(refused(ip).into());
            }
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn refused(ip: IpAddr) -> String {
    format!(
        "the receiver's address {ip} is private or loopback; refused \
         (the operator allows these with --webhook-allow-private)"
    )
}

/// Whether an address is one a receiver may not have without the operator's
/// leave: loopback, private, link-local, unspecified, or unique-local.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                // Carrier-grade NAT, 100.64.0.0/10.
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xC0) == 64)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// The request's body: `{"entries": [...]}`, canonical protobuf JSON.
fn body(entries: &[Entry]) -> Result<Vec<u8>, String> {
    let delivery = pb::Delivery {
        entries: entries.iter().map(entry_message).collect(),
    };
    let pool = pool()?;
    let descriptor = pool
        .get_message_by_name("ledger.v1.Delivery")
        .ok_or("the contract lacks ledger.v1.Delivery")?;
    let message = DynamicMessage::decode(descriptor, delivery.encode_to_vec().as_slice())
        .map_err(|e| format!("encoding a delivery: {e}"))?;
    serde_json::to_vec(&message).map_err(|e| format!("encoding a delivery: {e}"))
}

/// The contract's descriptors.
fn pool() -> Result<&'static DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// An error and its causes, on one line: reqwest's own message names only the
/// outermost.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_told_apart() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.4",
            "169.254.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "100.128.0.1"] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }
}
