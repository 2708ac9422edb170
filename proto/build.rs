//! Generates the wire types from `proto/` with `protox` (a protobuf compiler in pure
//! Rust), so a fresh machine needs no system `protoc`. The compiled descriptor set is
//! kept in `OUT_DIR` as well: the wire-compatibility test reads field numbers from it.

use std::path::PathBuf;

const FILES: &[&str] = &[
    "reward/v1/token.proto",
    "reward/v1/event.proto",
    "reward/v1/service.proto",
    "reward/v1/wallet.proto",
    "reward/v1/admin.proto",
    "reward/v1/agent.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(FILES, ["proto"])?;
    std::fs::write(
        out_dir.join("descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;

    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        .build_transport(grpc)
        // INVALID_ARGUMENT for a request that does not decode (src/codec.rs).
        .codec_path("crate::codec::ContractCodec")
        .emit_rerun_if_changed(false)
        .compile_fds(fds)?;
    Ok(())
}
