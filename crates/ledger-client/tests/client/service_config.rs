//! The gRPC service config for other languages' clients (`client/service-config.json`)
//! names every RPC of the proto and nothing else, each with a retry policy; and
//! this client calls every unary RPC.

use std::collections::BTreeSet;

use prost::Message as _;
use serde_json::Value;

const SERVICE: &str = "ledger.v1.Ledger";

/// The RPCs of `ledger.v1.Ledger` in the generated descriptor, with whether the
/// server streams.
fn proto_methods() -> Vec<(String, bool)> {
    let set =
        prost_types::FileDescriptorSet::decode(ledger_client::pb::FILE_DESCRIPTOR_SET).unwrap();
    set.file
        .iter()
        .filter(|file| file.package() == "ledger.v1")
        .flat_map(|file| &file.service)
        .filter(|service| service.name() == "Ledger")
        .flat_map(|service| &service.method)
        .map(|method| (method.name().to_owned(), method.server_streaming()))
        .collect()
}

#[test]
fn the_service_config_gives_every_rpc_a_retry_policy() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../client/service-config.json"
    ))
    .unwrap();
    let config: Value = serde_json::from_str(&text).unwrap();
    let mut named = BTreeSet::new();
    for method_config in config["methodConfig"].as_array().unwrap() {
        let policy = &method_config["retryPolicy"];
        assert!(policy["maxAttempts"].as_u64().unwrap() >= 2, "{policy}");
        for field in ["initialBackoff", "maxBackoff"] {
            let backoff = policy[field].as_str().unwrap();
            assert!(backoff.ends_with('s'), "{field}: {backoff}");
        }
        assert!(policy["backoffMultiplier"].as_f64().unwrap() > 1.0);
        let codes: BTreeSet<&str> = policy["retryableStatusCodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|code| code.as_str().unwrap())
            .collect();
        // RESOURCE_EXHAUSTED for TOO_MANY_CALLS: a policy lists codes, not
        // reasons, so MESSAGE_TOO_LARGE is retried too (refused again at once).
        assert_eq!(
            codes,
            BTreeSet::from([
                "UNAVAILABLE",
                "ABORTED",
                "DEADLINE_EXCEEDED",
                "RESOURCE_EXHAUSTED"
            ])
        );
        for name in method_config["name"].as_array().unwrap() {
            assert_eq!(name["service"], SERVICE);
            let method = name["method"]
                .as_str()
                .expect("a method, not the whole service");
            assert!(named.insert(method.to_owned()), "{method} named twice");
        }
    }
    let in_proto: BTreeSet<String> = proto_methods().into_iter().map(|(name, _)| name).collect();
    assert_eq!(named, in_proto, "the config names exactly the proto's RPCs");
}

#[test]
fn the_client_calls_every_unary_rpc() {
    let unary: BTreeSet<String> = proto_methods()
        .into_iter()
        .filter(|(_, streaming)| !streaming)
        .map(|(name, _)| name)
        .collect();
    let called: BTreeSet<String> = ledger_client::METHODS
        .iter()
        .map(|m| m.name.to_owned())
        .collect();
    assert_eq!(called, unary);
    for method in ledger_client::METHODS {
        assert_eq!(method.path, format!("/{SERVICE}/{}", method.name));
    }
}
