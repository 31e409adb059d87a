//! The contract as ledgerctl reads it at run time: the descriptor set that
//! ledger-proto compiled from the proto, source info (the proto's comments)
//! included. The command line, the requests and the output are all read from
//! it, so an RPC or a field added to the proto is there with no edit here.

use std::sync::OnceLock;

use prost_reflect::{
    DescriptorPool, FileDescriptor, MessageDescriptor, MethodDescriptor, ServiceDescriptor,
};
use prost_types::method_options::IdempotencyLevel;

use ledger_client::pb;

/// The service every subcommand calls.
const SERVICE: &str = "ledger.v1.Ledger";
/// The field of a keyed request that carries the call's idempotency key.
pub(crate) const KEY_FIELD: &str = "idempotency_key";

/// The contract's descriptors (with the well-known types it imports).
pub(crate) fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET)
            .unwrap_or_else(|e| unreachable!("the generated descriptor set decodes: {e}"))
    })
}

/// `ledger.v1.Ledger` in `pool`.
pub(crate) fn service(pool: &DescriptorPool) -> Result<ServiceDescriptor, String> {
    pool.get_service_by_name(SERVICE)
        .ok_or_else(|| format!("no service {SERVICE} in the contract"))
}

pub(crate) fn message(name: &str) -> Result<MessageDescriptor, String> {
    pool()
        .get_message_by_name(name)
        .ok_or_else(|| format!("no message {name} in the contract"))
}

/// The full gRPC method name, as the client calls it and a `KeyRecord`
/// stores it: `/ledger.v1.Ledger/` and the RPC's name.
pub(crate) fn path(method: &MethodDescriptor) -> String {
    format!("/{}/{}", method.parent_service().full_name(), method.name())
}

/// Whether a call of `method` carries its own idempotency key: its request has
/// the key's field, and the RPC is not declared free of side effects (a read
/// whose request names a key names the one it reads, as LookupKey's does). The
/// rule the client's generated methods follow too.
pub(crate) fn keyed(method: &MethodDescriptor) -> bool {
    let reads = method
        .method_descriptor_proto()
        .options
        .as_ref()
        .is_some_and(|options| options.idempotency_level() == IdempotencyLevel::NoSideEffects);
    !reads && method.input().get_field_by_name(KEY_FIELD).is_some()
}

/// The comment above the element at `path` in `file`, its lines joined into
/// paragraphs; `None` without one.
pub(crate) fn comment(file: &FileDescriptor, path: &[i32]) -> Option<String> {
    let location = file
        .file_descriptor_proto()
        .source_code_info
        .as_ref()?
        .location
        .iter()
        .find(|location| location.path == path)?;
    let paragraphs: Vec<String> = location
        .leading_comments()
        .split("\n\n")
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|paragraph| !paragraph.is_empty())
        .collect();
    (!paragraphs.is_empty()).then(|| paragraphs.join("\n\n"))
}

/// The first sentence of a comment: a line of help; the whole is the long one.
pub(crate) fn summary(comment: &str) -> &str {
    let first = comment.split("\n\n").next().unwrap_or_default();
    first
        .match_indices(". ")
        .find(|(at, _)| {
            first
                .get(at + 2..)
                .and_then(|rest| rest.chars().next())
                .is_some_and(char::is_uppercase)
        })
        .and_then(|(at, _)| first.get(..=at))
        .unwrap_or(first)
}
