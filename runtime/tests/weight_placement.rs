//! Device placement against the tenant's quota, below HTTP, on a simulated device of
//! 1 MiB: a tenant whose quota is a quarter of it cannot place more artifact bytes than
//! that, however many functions it spreads them over (each refused before it is
//! stored or placed, with its own code), so another tenant's deploy with artifacts is
//! still placed and runs. Before, every version's artifacts were placed on the device
//! whatever the tenant's quota, and the other tenant got `insufficient_device_memory`.

mod common;

use sluice_host_api::Code;
use sluice_registry::{FunctionOptions, TenantSettings};
use sluice_runtime::clock::Clock;
use sluice_runtime::device::sim::SimDevice;
use sluice_runtime::engine::{IoData, IoTensor};
use sluice_runtime::platform::{Platform, PlatformConfig};

const DEVICE: u64 = 1 << 20;
const QUOTA: u64 = DEVICE / 4;
const ARTIFACT: usize = 200 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_artifacts_never_take_more_device_room_than_its_quota() {
    let dir = tempfile::tempdir().unwrap();
    let config = PlatformConfig {
        data_dir: dir.path().join("data"),
        default_memory_quota_bytes: Some(QUOTA),
        ..PlatformConfig::default()
    };
    let device = SimDevice::builder(Clock::monotonic()).memory(DEVICE).build();
    let platform = Platform::open(config, vec![Box::new(device)]).unwrap();
    platform.warm_up().unwrap();
    let echo = common::component("echo");
    for tenant in ["hog", "victim"] {
        platform.create_tenant(tenant, TenantSettings::default()).unwrap();
    }

    // The hog spreads artifacts over functions: the first fits in its quota, the next
    // would pass it (429, retryable once the first goes), and one larger than the quota
    // never fits (413).
    let mut codes = Vec::new();
    for f in ["f0", "f1", "f2", "f3", "f4"] {
        platform.deploy("hog", f, &echo, FunctionOptions::default()).unwrap();
        let put = platform.put_artifact("hog", f, "weights.bin", &vec![7u8; ARTIFACT][..]);
        codes.push(put.map(|v| v.version).map_err(|e| e.code()));
    }
    assert_eq!(
        codes,
        [Ok(2), Err(Code::QuotaExceeded), Err(Code::QuotaExceeded), Err(Code::QuotaExceeded), Err(Code::QuotaExceeded)]
    );
    platform.deploy("hog", "big", &echo, FunctionOptions::default()).unwrap();
    let big = platform.put_artifact("hog", "big", "weights.bin", &vec![7u8; QUOTA as usize + 1][..]).unwrap_err();
    assert_eq!(big.code(), Code::PayloadTooLarge, "{big}");
    assert!(big.to_string().contains("quota"), "{big}");
    // Refused uploads stored nothing: no new version.
    assert_eq!(platform.function_info("hog", "f1").unwrap().record.versions.len(), 1);
    let hog = platform.status().await.tenants.into_iter().find(|t| t.tenant == "hog").unwrap();
    assert_eq!(hog.weights_placed_bytes, ARTIFACT as u64, "only f0's artifact is placed");

    // The victim's deploy with an artifact is placed and runs.
    platform.deploy("victim", "f", &echo, FunctionOptions::default()).unwrap();
    let v = platform.put_artifact("victim", "f", "weights.bin", &vec![1u8; ARTIFACT][..]).expect("room for the victim");
    assert_eq!(v.version, 2);
    let input = IoTensor { name: "x".into(), shape: vec![1], data: IoData::F32(vec![1.0]) };
    let out = platform.invoke("victim", "f", vec![input.clone()]).await.expect("the victim runs");
    assert_eq!(out.output.outputs, [input]);
}
