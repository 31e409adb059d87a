//! Generates the messages and the client from the repository's `proto/` (the wire
//! contract stays at the repository's top, beside the service) with a pure-Rust
//! protobuf compiler (protox), so neither a developer machine nor the Docker build
//! needs `protoc`. The server trait is the service's own: its package's `build.rs`
//! generates it against these messages. The encoded descriptor set is written next
//! to the code for clients that read messages by name.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/ledger/v1/ledger.proto";
    println!("cargo:rerun-if-changed=../../proto");

    let descriptors = protox::compile([proto], ["../../proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("ledger_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(false)
        // Malformed requests are the caller's error: INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::codec::LedgerCodec")
        // google.rpc.Status (a KeyRecord's stored decline) is tonic-types' own.
        .extern_path(".google.rpc", "::tonic_types::pb")
        // Maps in key order: a message encodes the same bytes every time, so a
        // stored reply rendered again is the reply, byte for byte.
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
