//! Compiles `proto/grpc_service.proto` (the Open Inference Protocol over gRPC) into
//! prost messages and a tonic service, with protox: no system `protoc` is needed.
//! The generated code is included by `src/server/grpc/proto.rs`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/grpc_service.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        // The client is generated too: the Rust tests and the benchmark speak to the
        // server through it (over any transport they bring; this crate links none).
        .build_client(true)
        .build_transport(false)
        // Tensor bytes stay reference-counted slices of the received frame (no copy).
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        .compile_fds(descriptors)?;
    Ok(())
}
