//! The gRPC service config for other languages' clients (`client/service-config.json`)
//! gives every RPC of the proto a retry policy, as gRPC resolves a method's config,
//! and names nothing the proto does not have; and this client's generated
//! [`METHODS`](ledger_client::METHODS) are the proto's unary RPCs.

use std::collections::BTreeSet;

use prost::Message as _;
use prost_types::method_options::IdempotencyLevel;
use prost_types::{DescriptorProto, FileDescriptorProto, MethodDescriptorProto};
use serde_json::Value;

const PACKAGE: &str = "ledger.v1";
const SERVICE: &str = "ledger.v1.Ledger";

fn contract() -> FileDescriptorProto {
    let set =
        prost_types::FileDescriptorSet::decode(ledger_client::pb::FILE_DESCRIPTOR_SET).unwrap();
    set.file
        .into_iter()
        .find(|file| file.package() == PACKAGE && !file.service.is_empty())
        .unwrap()
}

/// The RPCs of `ledger.v1.Ledger` in the generated descriptor.
fn proto_methods(file: &FileDescriptorProto) -> Vec<MethodDescriptorProto> {
    file.service
        .iter()
        .filter(|service| service.name() == "Ledger")
        .flat_map(|service| service.method.clone())
        .collect()
}

fn service_config() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../client/service-config.json"
    ))
    .unwrap();
    let config: Value = serde_json::from_str(&text).unwrap();
    config["methodConfig"].as_array().unwrap().clone()
}

/// A name's service and method, `""` where absent (gRPC reads them so).
fn names(method_config: &Value) -> Vec<(String, String)> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    method_config["name"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| (text(&name["service"]), text(&name["method"])))
        .collect()
}

/// The config gRPC applies to `method` of `service`: the one that names the
/// method, else the one that names its whole service, else the default (an
/// empty name).
fn config_for<'a>(configs: &'a [Value], service: &str, method: &str) -> Option<&'a Value> {
    let naming = |service: &str, method: &str| {
        configs.iter().find(|config| {
            names(config)
                .iter()
                .any(|(s, m)| s == service && m == method)
        })
    };
    naming(service, method)
        .or_else(|| naming(service, ""))
        .or_else(|| naming("", ""))
}

fn assert_retries(policy: &Value) {
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
}

#[test]
fn the_service_config_gives_every_rpc_a_retry_policy() {
    let configs = service_config();
    let methods = proto_methods(&contract());
    assert!(!methods.is_empty());
    for method in &methods {
        let config = config_for(&configs, SERVICE, method.name())
            .unwrap_or_else(|| panic!("no config applies to {}", method.name()));
        assert_retries(&config["retryPolicy"]);
    }

    // gRPC refuses a config that names a method twice; a name the proto does
    // not have is a stale one.
    let in_proto: BTreeSet<&str> = methods.iter().map(MethodDescriptorProto::name).collect();
    let mut named = BTreeSet::new();
    for (service, method) in configs.iter().flat_map(names) {
        assert_eq!(service, SERVICE, "a config names another service");
        assert!(
            method.is_empty() || in_proto.contains(method.as_str()),
            "{method} is not an RPC of the proto"
        );
        assert!(
            named.insert((service, method.clone())),
            "{method} named twice"
        );
    }
}

/// Keyed as the generated list says: its request has an `idempotency_key`,
/// and the RPC is not declared free of side effects (LookupKey's key is the
/// one it looks up).
fn keyed(file: &FileDescriptorProto, method: &MethodDescriptorProto) -> bool {
    let request = method.input_type().rsplit('.').next().unwrap();
    let request: &DescriptorProto = file
        .message_type
        .iter()
        .find(|message| message.name() == request)
        .unwrap();
    let reads = method
        .options
        .as_ref()
        .is_some_and(|options| options.idempotency_level() == IdempotencyLevel::NoSideEffects);
    !reads
        && request
            .field
            .iter()
            .any(|field| field.name() == "idempotency_key")
}

#[test]
fn the_client_calls_every_unary_rpc() {
    let file = contract();
    let unary: Vec<(String, String, bool)> = proto_methods(&file)
        .iter()
        .filter(|method| !method.server_streaming() && !method.client_streaming())
        .map(|method| {
            (
                method.name().to_owned(),
                format!("/{SERVICE}/{}", method.name()),
                keyed(&file, method),
            )
        })
        .collect();
    let called: Vec<(String, String, bool)> = ledger_client::METHODS
        .iter()
        .map(|m| (m.name.to_owned(), m.path.to_owned(), m.keyed))
        .collect();
    assert_eq!(called, unary, "in the proto's order");
    let reads = unary.iter().filter(|(_, _, keyed)| !keyed).count();
    assert!(
        reads > 0 && reads < unary.len(),
        "keyed RPCs and reads both"
    );
    assert!(
        called
            .iter()
            .any(|(name, _, keyed)| name == "LookupKey" && !keyed),
        "LookupKey is a read"
    );
}
