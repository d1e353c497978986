//! The host side of the WIT `requests` interface (continuous batching): a serving
//! invocation's `next`, and the `request` resources it answers. The requests
//! themselves and their queue are `serving`'s; a guest holds [`RequestHandle`]s to them.

use std::time::{Duration, Instant};

use sluice_host_api::{ApiError, ErrorCode};
use wasmtime::component::Resource;

use super::bindings::sluice::gpu::requests;
use super::bindings::{IoTensor, RunError};
use super::host_error::HostError;
use super::request_handle::RequestHandle;
use super::serving::ServedRequest;
use super::state::InvocationState;

impl requests::Host for InvocationState {
    fn serving(&mut self) -> wasmtime::Result<bool> {
        Ok(self.serving.is_some())
    }

    async fn next(&mut self, max: u32, wait_us: u32) -> wasmtime::Result<Vec<Resource<RequestHandle>>> {
        let Some(link) = self.serving.clone() else { return Ok(Vec::new()) };
        let now = Instant::now();
        if now >= link.accept_until || self.caller.link.gone() {
            return Ok(Vec::new());
        }
        let room = (max as usize).min(link.max_open.saturating_sub(self.served.len()));
        if room == 0 {
            return Ok(Vec::new());
        }
        self.enter_host();
        let wait = Duration::from_micros(wait_us.into()).min(link.accept_until - now);
        let taken = link.queue.take(room, wait).await;
        let mut handed = Vec::with_capacity(taken.len());
        for pending in taken {
            let id = self.next_served;
            self.next_served += 1;
            self.served.insert(id, ServedRequest::new(pending));
            handed.push(self.table.push(RequestHandle(id))?);
        }
        let open = self.served.len();
        for request in self.served.values_mut() {
            request.peers = request.peers.max(open);
        }
        self.guest_cpu.leave_host();
        Ok(handed)
    }
}

impl requests::HostRequest for InvocationState {
    fn inputs(&mut self, this: Resource<RequestHandle>) -> wasmtime::Result<Vec<IoTensor>> {
        let id = self.table.get(&this)?.0;
        Ok(self.served.get_mut(&id).map(|r| std::mem::take(&mut r.inputs)).unwrap_or_default())
    }

    async fn emit(&mut self, this: Resource<RequestHandle>, chunk: Vec<IoTensor>) -> Result<(), HostError> {
        self.enter_host();
        let id = self.table.get(&this)?.0;
        let request = self.served.get_mut(&id).ok_or_else(|| wasmtime::Error::msg("a served request is missing"))?;
        if Instant::now() >= request.deadline {
            return Err(ApiError::new(ErrorCode::Cancelled, "the request's time limit has passed: drop it").into());
        }
        request.caller.emit(chunk).await?;
        self.guest_cpu.leave_host();
        Ok(())
    }

    fn finish(
        &mut self,
        this: Resource<RequestHandle>,
        outputs: Result<Vec<IoTensor>, RunError>,
    ) -> wasmtime::Result<()> {
        let (id, open) = (self.table.get(&this)?.0, self.served.len());
        if let Some(request) = self.served.get_mut(&id) {
            request.finish(outputs, open);
        }
        Ok(())
    }

    fn gone(&mut self, this: Resource<RequestHandle>) -> wasmtime::Result<bool> {
        let id = self.table.get(&this)?.0;
        Ok(self.served.get(&id).is_none_or(ServedRequest::gone))
    }

    fn drop(&mut self, this: Resource<RequestHandle>) -> wasmtime::Result<()> {
        let id = self.table.delete(this)?.0;
        // Dropping it answers it, if the guest did not.
        self.served.remove(&id);
        Ok(())
    }
}
