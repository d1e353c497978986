//! Device selection at start: the server says which device it uses and why, and
//! forcing the CUDA backend where no GPU is usable fails at once with a clear message.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_tests::skip::skip;
use sluice_tests::{ADMIN_KEY, Server, ServerOptions, free_port, sluice_bin};

#[test]
fn the_server_reports_its_device_and_why() {
    let server =
        Server::start_with(ServerOptions { args: vec!["--device".into(), "cpu".into()], ..Default::default() });
    let out = server.stdout();
    assert!(out.contains("device: the CPU backend was requested"), "{out}");
    assert_eq!(server.status(ADMIN_KEY)["device"]["kind"], "cpu");
}

#[test]
fn forcing_cuda_without_a_gpu_fails_clearly() {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(sluice_bin())
        .args(["serve", "--device", "cuda", "--addr", &format!("127.0.0.1:{}", free_port()), "--data-dir"])
        .arg(data.path().join("data"))
        .args(["--grpc-listen", "127.0.0.1:0"])
        .env("SLUICE_ADMIN_KEY", ADMIN_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running sluice serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            // Still serving: a GPU is usable here, so the forced choice is right to start.
            let _ = child.kill();
            skip("no-GPU", "a CUDA device is usable on this machine");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the CUDA backend was requested (--device cuda) but is unavailable"), "{stderr}");
    assert!(stderr.contains("no CUDA driver found"), "{stderr}");
}

#[test]
fn a_partition_request_without_a_gpu_is_reported_and_ignored() {
    let args = ["--device", "auto", "--reserved-sms", "16"].map(String::from).to_vec();
    let server = Server::start_with(ServerOptions { args, ..Default::default() });
    let status = server.status(ADMIN_KEY);
    if status["device"]["kind"] == "cuda" {
        // A GPU is usable here: the partition is in force or the reason is given.
        let partition = status["devices"][0]["partition"].as_str().unwrap_or_default().to_owned();
        println!("a CUDA device is usable on this machine; partition: {partition}");
        assert!(!partition.is_empty(), "{status}");
        return;
    }
    let out = server.stdout();
    assert!(out.contains("using the CPU backend (no SM partition: the CPU backend has none)"), "{out}");
    let text = status.to_string();
    assert!(text.contains("the CPU backend has no spatial partitions"), "the status names the partition: {text}");
}
