//! Generates the service's side of the gRPC code from `proto/` with a pure-Rust
//! protobuf compiler (protox), so neither a developer machine nor the Docker build
//! needs `protoc`: the `Ledger` server trait, and the encoded descriptor set its
//! reflection serves. The messages and the client are `ledger-proto`'s, shared with
//! every client (one set of types for the service, the clients and their tests), so
//! the server is generated against them and declares none of its own.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/ledger/v1/ledger.proto";
    println!("cargo:rerun-if-changed=proto");

    let descriptors = protox::compile([proto], ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("ledger_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_client(false)
        // Malformed requests are the caller's error: INVALID_ARGUMENT, not INTERNAL.
        .codec_path("::ledger_proto::codec::LedgerCodec")
        .extern_path(".ledger.v1", "::ledger_proto::pb")
        .extern_path(".google.rpc", "::tonic_types::pb")
        .compile_fds(descriptors)?;
    Ok(())
}
