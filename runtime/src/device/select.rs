//! Choosing the devices at start: the best available, or the one the operator forced;
//! every visible GPU (or a list of them) for a server with several.

use std::path::PathBuf;

use super::cuda::CudaDevice;
use super::{CpuDevice, Device};

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// The GPU if one is usable, else the CPU.
    #[default]
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// The GPU; fail if there is none.
    Cuda,
}

/// Settings of the backends.
#[derive(Clone, Debug, Default)]
pub struct DeviceSettings {
    /// Cores the CPU device's kernels may use (`None`: all).
    pub cpu_threads: Option<usize>,
    /// CUDA device ordinal (of [`open_device`]; [`open_devices`] takes a list).
    pub cuda_ordinal: usize,
    /// Where compiled kernels are cached across restarts.
    pub kernel_cache_dir: Option<PathBuf>,
    /// Let f32 GEMMs use TF32 tensor cores.
    pub allow_tf32: bool,
    /// SMs of a GPU reserved for latency-class work (a green-context partition;
    /// rounded up to what the hardware allows); 0: no partition.
    pub reserved_sms: u32,
}

/// The chosen device and why it was chosen, for the start-up log.
pub struct OpenedDevice {
    pub device: Box<dyn Device>,
    pub reason: String,
}

/// The devices [`open_devices`] opened (at least one), each with why it was chosen.
pub struct OpenedDevices(pub Vec<OpenedDevice>);

/// `--device cuda` where no GPU can be used.
#[derive(Debug, thiserror::Error)]
#[error("the CUDA backend was requested (--device cuda) but is unavailable: {0}")]
pub struct CudaRequired(pub String);

fn cpu(settings: &DeviceSettings) -> CpuDevice {
    match settings.cpu_threads {
        Some(n) => CpuDevice::with_threads(n),
        None => CpuDevice::new(),
    }
}

/// The CPU under `auto` because no GPU can be used, for `why`.
fn cpu_instead(settings: &DeviceSettings, why: &str) -> OpenedDevice {
    let mut reason = format!("{why}: using the CPU backend");
    if settings.reserved_sms > 0 {
        reason.push_str(" (no SM partition: the CPU backend has none)");
    }
    OpenedDevice { device: Box::new(cpu(settings)), reason }
}

/// Opens the device `choice` asks for.
pub fn open_device(choice: DeviceChoice, settings: &DeviceSettings) -> Result<OpenedDevice, CudaRequired> {
    if choice == DeviceChoice::Cpu {
        return Ok(OpenedDevice { device: Box::new(cpu(settings)), reason: "the CPU backend was requested".into() });
    }
    let cuda = settings;
    let options = sluice_backend_cuda::CudaOptions {
        ordinal: cuda.cuda_ordinal,
        kernel_cache_dir: cuda.kernel_cache_dir.clone(),
        allow_tf32: cuda.allow_tf32,
        reserved_sms: cuda.reserved_sms,
    };
    match CudaDevice::open(options) {
        Ok(gpu) => {
            let info = gpu.info();
            let reason = format!(
                "using {} with {} GiB and {} SMs; SM partition: {}",
                info.name,
                info.memory_bytes >> 30,
                info.compute_units,
                gpu.partition()
            );
            Ok(OpenedDevice { device: Box::new(gpu), reason })
        }
        Err(why) if choice == DeviceChoice::Auto => Ok(cpu_instead(settings, &why.to_string())),
        Err(why) => Err(CudaRequired(why.to_string())),
    }
}

/// Opens every GPU in `ordinals` (`None`: every GPU the driver shows), each with its
/// own [`Device`]; the CPU when `choice` asks for it, or under `auto` when no GPU opens.
/// With `--device cuda` a GPU of the list that cannot be opened is an error, as is an
/// empty list.
pub fn open_devices(
    choice: DeviceChoice,
    settings: &DeviceSettings,
    ordinals: Option<&[usize]>,
) -> Result<OpenedDevices, CudaRequired> {
    if choice == DeviceChoice::Cpu {
        return open_device(choice, settings).map(|d| OpenedDevices(vec![d]));
    }
    let listed: Vec<usize> = match ordinals {
        Some(list) => list.to_vec(),
        None => match sluice_backend_cuda::probe::device_count() {
            Ok(n) => (0..n).collect(),
            Err(why) if choice == DeviceChoice::Auto => {
                return Ok(OpenedDevices(vec![cpu_instead(settings, &why.to_string())]));
            }
            Err(why) => return Err(CudaRequired(why.to_string())),
        },
    };
    let mut opened = Vec::new();
    let mut failures = Vec::new();
    for &ordinal in &listed {
        let one = DeviceSettings { cuda_ordinal: ordinal, ..settings.clone() };
        match open_device(DeviceChoice::Cuda, &one) {
            Ok(d) => opened.push(OpenedDevice { device: d.device, reason: format!("GPU {ordinal}: {}", d.reason) }),
            Err(CudaRequired(why)) => failures.push(format!("GPU {ordinal}: {why}")),
        }
    }
    if choice == DeviceChoice::Cuda && (!failures.is_empty() || opened.is_empty()) {
        let why = if listed.is_empty() { "no GPU is visible".to_owned() } else { failures.join("; ") };
        return Err(CudaRequired(why));
    }
    for f in &failures {
        tracing::warn!(reason = %f, "a GPU could not be opened; serving without it");
    }
    if opened.is_empty() {
        let why = if failures.is_empty() { "no CUDA device is visible".to_owned() } else { failures.join("; ") };
        opened.push(cpu_instead(settings, &why));
    }
    Ok(OpenedDevices(opened))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_always_available_and_forcing_cuda_without_a_gpu_is_a_clear_error() {
        let cpu = open_device(DeviceChoice::Cpu, &DeviceSettings::default()).unwrap();
        assert_eq!(cpu.device.info().kind, crate::device::DeviceKind::Cpu);
        match open_device(DeviceChoice::Cuda, &DeviceSettings::default()) {
            // On a machine with a GPU the forced choice opens it.
            Ok(gpu) => assert_eq!(gpu.device.info().kind, crate::device::DeviceKind::Cuda),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("--device cuda") && text.contains("CUDA"), "{text}");
                let auto = open_device(DeviceChoice::Auto, &DeviceSettings::default()).unwrap();
                assert_eq!(auto.device.info().kind, crate::device::DeviceKind::Cpu);
                assert!(auto.reason.ends_with("using the CPU backend"), "{}", auto.reason);
            }
        }
    }

    #[test]
    fn opening_several_devices() {
        let cpu = open_devices(DeviceChoice::Cpu, &DeviceSettings::default(), None).unwrap();
        assert_eq!(cpu.0.len(), 1);
        assert_eq!(cpu.0[0].device.info().kind, crate::device::DeviceKind::Cpu);
        let Err(_) = sluice_backend_cuda::probe::device_count() else {
            eprintln!("a CUDA driver is present; the several-GPU path is tested by `cargo xtask test-cuda-fake`");
            return;
        };
        // Without a driver: forcing CUDA fails, naming a listed GPU; auto serves on the CPU.
        let forced = open_devices(DeviceChoice::Cuda, &DeviceSettings::default(), Some(&[0, 1]));
        let err = forced.err().expect("no GPU to force").to_string();
        assert!(err.contains("GPU 0") && err.contains("--device cuda"), "{err}");
        let none = open_devices(DeviceChoice::Cuda, &DeviceSettings::default(), Some(&[]));
        assert!(none.err().expect("an empty list").to_string().contains("no GPU"));
        let auto = open_devices(DeviceChoice::Auto, &DeviceSettings::default(), None).unwrap();
        assert_eq!(auto.0.len(), 1);
        assert_eq!(auto.0[0].device.info().kind, crate::device::DeviceKind::Cpu);
    }
}
