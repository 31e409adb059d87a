//! Optional bearer-token authentication, the key namespace it implies, and the
//! methods each client may call.
//!
//! The tokens file (`--auth-tokens-file`) lists one client per line: its id, the
//! SHA-256 (hex) of its token, and optionally the `ledger.v1.Ledger` methods it is
//! granted, comma-separated (none listed: every method); blank lines and `#`
//! comments are ignored. The file holds no secret: the tokens themselves never
//! touch the server's disk.
//!
//! ```text
//! # client-id   sha256(token)                                                     methods
//! checkout      9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! reports       60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  GetAccount,GetEntry,ListEntries
//! ```
//!
//! With tokens configured, a call needs `authorization: Bearer <token>`, and its
//! idempotency keys live in its client's namespace: the same key from two clients is
//! two operations, and no client can ever be answered with another's stored reply.
//! A call to a method the client is not granted is refused with PERMISSION_DENIED
//! before anything runs. Without tokens, every call shares one anonymous namespace
//! and every method is open.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::ledger::Namespace;

/// A caller, as the handlers see it: its key namespace and what it may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    pub namespace: Namespace,
    /// The methods it may call; `None`: every method.
    grants: Option<Arc<BTreeSet<String>>>,
}

impl Client {
    /// Every caller of a service without authentication.
    pub fn anonymous() -> Self {
        Self {
            namespace: Namespace::anonymous(),
            grants: None,
        }
    }

    /// Whether the client may call `method` (its name in `ledger.v1.Ledger`).
    pub fn may_call(&self, method: &str) -> bool {
        self.grants.as_ref().is_none_or(|g| g.contains(method))
    }

    /// The same client granted only those of `methods` it may call.
    #[must_use]
    pub fn only(&self, methods: &[&str]) -> Self {
        let grants = methods
            .iter()
            .filter(|m| self.may_call(m))
            .map(|m| (*m).to_owned())
            .collect();
        Self {
            namespace: self.namespace.clone(),
            grants: Some(Arc::new(grants)),
        }
    }
}

/// The configured clients, by the SHA-256 of their token.
#[derive(Debug, Clone, Default)]
pub struct Tokens(Arc<HashMap<[u8; 32], Client>>);

impl Tokens {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let methods = super::contract::method_names();
        let mut by_hash = HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(id), Some(hash), grants, None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(format!(
                    "line {n}: expected `<client-id> <sha256-hex> [<Method>,<Method>,...]`"
                ));
            };
            let grants = grants
                .map(|list| parse_grants(list, &methods).map_err(|e| format!("line {n}: {e}")))
                .transpose()?;
            let namespace = client_namespace(id).ok_or_else(|| {
                format!("line {n}: client id must be 1 to 64 of A-Z a-z 0-9 . _ -")
            })?;
            let hash = parse_sha256(hash)
                .ok_or_else(|| format!("line {n}: not a SHA-256 in hex (64 characters)"))?;
            if !ids.insert(id.to_owned()) {
                return Err(format!("line {n}: client {id} is listed twice"));
            }
            let client = Client { namespace, grants };
            if by_hash.insert(hash, client).is_some() {
                return Err(format!("line {n}: two clients share one token"));
            }
        }
        if by_hash.is_empty() {
            return Err("no clients listed".into());
        }
        Ok(Self(Arc::new(by_hash)))
    }

    /// The client whose token this is.
    pub fn client(&self, token: &str) -> Option<&Client> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.0.get(&hash)
    }
}

fn client_namespace(id: &str) -> Option<Namespace> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || !id.chars().all(allowed) {
        return None;
    }
    Namespace::client(id)
}

fn parse_grants(list: &str, methods: &[String]) -> Result<Arc<BTreeSet<String>>, String> {
    let mut grants = BTreeSet::new();
    for method in list.split(',').filter(|m| !m.is_empty()) {
        if !methods.iter().any(|m| m == method) {
            return Err(format!(
                "{method} is not a method of ledger.v1.Ledger (one of {})",
                methods.join(", ")
            ));
        }
        grants.insert(method.to_owned());
    }
    if grants.is_empty() {
        return Err("an empty list of methods".into());
    }
    Ok(Arc::new(grants))
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0_u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// Puts the caller's [`Client`] in the request's extensions, or refuses the call
/// with UNAUTHENTICATED before anything else runs.
#[derive(Debug, Clone, Default)]
pub struct Authenticator {
    tokens: Option<Tokens>,
}

impl Authenticator {
    pub fn new(tokens: Option<Tokens>) -> Self {
        Self { tokens }
    }
}

impl Interceptor for Authenticator {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let client = match &self.tokens {
            None => Client::anonymous(),
            Some(tokens) => {
                let token = request
                    .metadata()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .ok_or_else(|| super::status::unauthenticated("missing bearer token"))?;
                tokens
                    .client(token.trim())
                    .cloned()
                    .ok_or_else(|| super::status::unauthenticated("unknown bearer token"))?
            }
        };
        request.extensions_mut().insert(client);
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::reads::ReadRpc;
    use crate::ops::Method;

    const GET_ACCOUNT: &str = ReadRpc::GetAccount.name();
    const GET_ENTRY: &str = ReadRpc::GetEntry.name();

    const HELLO_SHA256: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn parses_clients_and_finds_them_by_token() {
        let tokens = Tokens::parse(&format!("# comment\n\nshop {HELLO_SHA256}\n")).unwrap();
        assert_eq!(
            tokens.client("hello").map(|c| c.namespace.as_str()),
            Some("shop")
        );
        assert!(
            tokens
                .client("hello")
                .unwrap()
                .may_call(Method::Charge.name())
        );
        assert!(tokens.client("hello ").is_none());
        assert!(tokens.client("other").is_none());
    }

    #[test]
    fn grants_name_methods_of_the_service() {
        let tokens =
            Tokens::parse(&format!("reports {HELLO_SHA256} GetAccount,ListEntries\n")).unwrap();
        let client = tokens.client("hello").unwrap();
        assert!(client.may_call(GET_ACCOUNT) && client.may_call(ReadRpc::ListEntries.name()));
        assert!(!client.may_call(Method::Charge.name()));
        assert!(Tokens::parse(&format!("r {HELLO_SHA256} GetAccount,Chrage")).is_err());
        assert!(Tokens::parse(&format!("r {HELLO_SHA256} ,")).is_err());
    }

    #[test]
    fn a_client_can_be_narrowed_to_some_methods() {
        let tokens =
            Tokens::parse(&format!("reports {HELLO_SHA256} GetAccount,OpenAccount\n")).unwrap();
        let narrowed = tokens
            .client("hello")
            .unwrap()
            .only(&[GET_ACCOUNT, GET_ENTRY]);
        assert!(narrowed.may_call(GET_ACCOUNT));
        assert!(!narrowed.may_call(GET_ENTRY), "not granted before");
        assert!(
            !narrowed.may_call(Method::Charge.name()),
            "not among the methods"
        );
        assert!(Client::anonymous().only(&[GET_ENTRY]).may_call(GET_ENTRY));
        assert!(
            !Client::anonymous()
                .only(&[GET_ENTRY])
                .may_call(Method::Charge.name())
        );
    }

    #[test]
    fn rejects_malformed_files() {
        for bad in [
            "",
            "shop",
            "shop 1234",
            &format!("sh op {HELLO_SHA256}"),
            &format!("shop {HELLO_SHA256}\nshop {}", "0".repeat(64)),
            &format!("a {HELLO_SHA256}\nb {HELLO_SHA256}"),
            &format!("{} {HELLO_SHA256}", "x".repeat(65)),
            &format!("shop {HELLO_SHA256} Charge extra"),
        ] {
            assert!(Tokens::parse(bad).is_err(), "{bad:?}");
        }
    }
}
