//! The device actor's loop: executes commands against the device in order.
//!
//! The actor owns the table from [`TensorId`] to buffer. A failed kernel poisons
//! its output slot with the error, so every later op on it fails the same way and a
//! read reports the first cause instead of running on bad data.

use std::collections::HashMap;

use crossbeam_channel::Receiver;
use sluice_host_api::ApiError;

use super::{Command, QueueStats, TensorId};
use crate::backend::{Buffer, Device};

enum Slot {
    Ready(Buffer, u64),
    Failed(ApiError),
}

pub(super) fn run(device: Box<dyn Device>, rx: Receiver<Command>) {
    let mut tensors: HashMap<TensorId, Slot> = HashMap::new();
    let mut stats = QueueStats::default();
    while let Ok(command) = rx.recv() {
        match command {
            Command::Upload { id, meta, bytes } => {
                stats.uploads += 1;
                let slot = match device.upload(&meta, &bytes) {
                    Ok(b) => Slot::Ready(b, meta.byte_len() as u64),
                    Err(e) => Slot::Failed(e.into()),
                };
                insert(&mut tensors, &mut stats, id, slot);
            }
            Command::Adopt { id, buffer } => {
                let bytes = buffer_len(&buffer);
                insert(&mut tensors, &mut stats, id, Slot::Ready(buffer, bytes));
            }
            Command::Launch { id, op, inputs, out } => {
                stats.kernels += 1;
                let slot = launch(&*device, &tensors, &op, &inputs, &out);
                insert(&mut tensors, &mut stats, id, slot);
            }
            Command::Read { id, meta, reply } => {
                let result = match tensors.get(&id) {
                    Some(Slot::Ready(b, _)) => device.download(b, &meta).map_err(ApiError::from),
                    Some(Slot::Failed(e)) => Err(e.clone()),
                    None => Err(missing(id)),
                };
                let _ = reply.send(result);
            }
            Command::Free { id } => {
                if let Some(Slot::Ready(_, bytes)) = tensors.remove(&id) {
                    stats.resident_bytes -= bytes;
                }
            }
            Command::Fence { reply } => {
                if let Err(e) = device.synchronize() {
                    tracing::error!(error = %e, "device synchronize failed");
                }
                stats.resident_tensors = tensors.len();
                let _ = reply.send(stats.clone());
            }
        }
    }
}

fn buffer_len(buffer: &Buffer) -> u64 {
    match buffer {
        Buffer::Cpu(b) => b.byte_len() as u64,
    }
}

fn insert(tensors: &mut HashMap<TensorId, Slot>, stats: &mut QueueStats, id: TensorId, slot: Slot) {
    if let Slot::Ready(_, bytes) = &slot {
        stats.resident_bytes += bytes;
    }
    tensors.insert(id, slot);
}

fn launch(
    device: &dyn Device,
    tensors: &HashMap<TensorId, Slot>,
    op: &sluice_host_api::Op,
    inputs: &[(TensorId, sluice_host_api::TensorMeta)],
    out: &sluice_host_api::TensorMeta,
) -> Slot {
    let mut args = Vec::with_capacity(inputs.len());
    for (id, meta) in inputs {
        match tensors.get(id) {
            Some(Slot::Ready(b, _)) => args.push((b, meta)),
            Some(Slot::Failed(e)) => return Slot::Failed(e.clone()),
            None => return Slot::Failed(missing(*id)),
        }
    }
    match device.launch(op, &args, out) {
        Ok(b) => Slot::Ready(b, out.byte_len() as u64),
        Err(e) => Slot::Failed(e.into()),
    }
}

fn missing(id: TensorId) -> ApiError {
    ApiError::new(
        sluice_host_api::ErrorCode::DeviceFailure,
        format!("tensor {} is not resident on the device", id.0),
    )
}
