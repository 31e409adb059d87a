//! The service as the wire contract declares it: its methods, read from the
//! proto's descriptor, and every one of them served by a registry line.

/// The methods of `ledger.v1.Ledger`, as the wire contract names them.
pub(super) fn method_names() -> Vec<String> {
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
    use strum::IntoEnumIterator as _;

    use super::method_names;
    use crate::grpc::batch::BATCH;
    use crate::grpc::reads::ReadRpc;
    use crate::grpc::service::WATCH_ENTRIES;
    use crate::ops::Method;

    /// Statuses the codec makes (before any RPC runs) and those of `status` name
    /// the same domain.
    #[test]
    fn the_codec_and_the_status_mapping_share_one_domain() {
        assert_eq!(ledger_proto::ERROR_DOMAIN, crate::grpc::DOMAIN);
    }

    /// Every method of the contract is a keyed operation, a read, Batch or the stream,
    /// each once.
    #[test]
    fn every_method_has_its_registry_line() {
        let mut served: Vec<String> = Method::iter()
            .map(|m| m.name().to_owned())
            .chain(ReadRpc::iter().map(|r| r.name().to_owned()))
            .chain([WATCH_ENTRIES, BATCH].map(str::to_owned))
            .collect();
        let mut declared = method_names();
        served.sort();
        declared.sort();
        assert_eq!(served, declared);
    }
}
