//! The tonic service: decode a request into domain values, run it, encode the
//! answer.
//!
//! - `service`: the `ledger.v1.Ledger` implementation: the keyed RPCs generated
//!   from the operations' registry (`ops`), the reads one line each.
//! - `auth`: optional bearer tokens, the key namespace per client, and the
//!   methods each client may call: a transport concern, read from the request's
//!   metadata before any RPC runs.
//! - `reads`: the read RPCs, shared with the console.
//! - `admission`: what every call goes through at either front door: the
//!   grants, the limit of calls served at once, the memory budget.
//! - `request`: the read RPCs' requests -> validated domain values.
//! - `outcome`: the bytes stored under a key -> the answer, and the encoding of
//!   declines.
//! - `status`: the one mapping from [`crate::error::Error`] to `tonic::Status`.
//! - `pages`: the page tokens of ListEntries and ListHolds.
//! - `deadline`: the caller's deadline from the `grpc-timeout` header.
//! - `limits`: RESOURCE_EXHAUSTED for oversized requests.
//! - `connections`: at most `--max-connections` client connections, and the
//!   HTTP/2 windows that bound what each holds unread.
//! - `weigh`: each call's place (under the limit of calls, and its share of the
//!   memory budget by its request's size) taken before its request is read.

mod admission;
pub mod auth;
pub mod connections;
mod deadline;
mod limits;
mod outcome;
mod pages;
mod reads;
mod request;
mod service;
mod status;
mod weigh;

pub use admission::Admission;
pub use limits::ResourceExhausted;
pub use outcome::ProtoEncoder;
pub use pages::PageTokens;
pub use reads::Reader;
pub use service::LedgerService;
pub use status::{DOMAIN, REPLAYED_HEADER, report, unauthenticated};
pub use weigh::Weighed;

/// The methods of `ledger.v1.Ledger`, as the wire contract names them.
pub fn method_names() -> Vec<String> {
    use prost::Message as _;
    let Ok(set) = prost_types::FileDescriptorSet::decode(crate::proto::pb::FILE_DESCRIPTOR_SET)
    else {
        return Vec::new();
    };
    set.file
        .iter()
        .filter(|f| f.package() == "ledger.v1")
        .flat_map(|f| &f.service)
        .filter(|s| s.name() == "Ledger")
        .flat_map(|s| &s.method)
        .map(|m| m.name().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    /// Statuses the codec makes (before any RPC runs) and those of `status` name
    /// the same domain.
    #[test]
    fn the_codec_and_the_status_mapping_share_one_domain() {
        assert_eq!(ledger_proto::ERROR_DOMAIN, super::DOMAIN);
    }
}
