//! The host side of the WIT imports: tensors, the op launches (`ops` and `fused`),
//! artifacts and streaming.
//!
//! All of them go through [`InvocationState::create`], so every new tensor is
//! validated, charged to the invocation's memory account and handed to the
//! device's scheduler in exactly one place. Every import returns `Result` and uses `?`:
//! an [`ApiError`] becomes the guest's WIT `error`, a resource-table fault a trap
//! ([`HostError`], decided in `convert.rs`). Once the caller has gone, every import that
//! can fail fails with `cancelled` ([`super::caller`]).

use sluice_host_api::{ApiError, DType, ErrorCode, Op, TensorMeta, infer};
use wasmtime::component::Resource;

use super::bindings::WitDtype;
use super::bindings::sluice::gpu::{artifacts, fused, io, ops, streaming, tensors, types};
use super::handle::TensorHandle;
use super::host_error::HostError;
use super::state::InvocationState;
use crate::scheduler::{Reservation, TensorLease};

/// What an import that returns a WIT `result` returns: a refusal or a trap in the `Err`.
type HostResult<T> = Result<T, HostError>;

/// What a new tensor is made from.
enum Source {
    Bytes(Vec<u8>),
    Op(Op, Vec<(crate::scheduler::TensorId, TensorMeta)>),
}

impl InvocationState {
    /// The single path by which a guest gets a new tensor: reserve memory, wait for
    /// room in the invocation's queue, queue the work, and hand back a handle.
    async fn create(&mut self, meta: TensorMeta, source: Source) -> HostResult<Resource<TensorHandle>> {
        self.caller.check()?;
        self.check_handle_room()?;
        let lease = TensorLease::reserve(&self.queue, &self.account, &meta).map_err(|e| self.refused(e))?;
        self.room.wait().await;
        let id = lease.id();
        match source {
            Source::Bytes(bytes) => self.queue.upload(self.invocation, id, meta.clone(), bytes),
            Source::Op(op, inputs) => {
                // The kernel's scratch is the invocation's too, until the kernel ran.
                let metas: Vec<&TensorMeta> = inputs.iter().map(|(_, m)| m).collect();
                let bytes = self.queue.scratch_bytes(&op, &metas, &meta);
                let scratch = if bytes == 0 {
                    None
                } else {
                    let scratch = Reservation::new(&self.account, self.queue.memory(), bytes).map_err(|e| {
                        ApiError::new(e.code, format!("{} (the scratch memory of {})", e.message, op.name()))
                    });
                    Some(scratch.map_err(|e| self.refused(e))?)
                };
                self.launches += 1;
                self.queue.launch_charged(self.invocation, id, op, inputs, meta.clone(), scratch);
            }
        }
        let handle = self.table.push(TensorHandle::owned(lease, meta))?;
        self.live_tensors += 1;
        Ok(handle)
    }

    async fn upload(&mut self, dtype: DType, shape: Vec<u32>, bytes: Vec<u8>) -> HostResult<Resource<TensorHandle>> {
        self.enter_host();
        let meta = TensorMeta::new(dtype, shape)?;
        if bytes.len() != meta.byte_len() {
            return Err(ApiError::shape(format!(
                "{} bytes given for a {} tensor of shape {:?}, which needs {}",
                bytes.len(),
                meta.dtype,
                meta.shape,
                meta.byte_len()
            ))
            .into());
        }
        let handle = self.create(meta, Source::Bytes(bytes)).await?;
        self.guest_cpu.leave_host();
        Ok(handle)
    }

    /// A host import that may take time is entered (see [`super::guest_cpu`]).
    pub(super) fn enter_host(&mut self) {
        self.guest_cpu.enter_host(&self.queue, self.invocation);
    }

    /// Refuses a new handle once the invocation holds its limit.
    fn check_handle_room(&mut self) -> Result<(), ApiError> {
        if self.live_tensors < self.max_live_tensors {
            return Ok(());
        }
        let e = ApiError::new(
            ErrorCode::QuotaExceeded,
            format!("the invocation holds {} tensor handles, its limit; drop some first", self.live_tensors),
        );
        Err(self.refused(e))
    }

    /// Remembers the first quota refusal (the invocation's error if the guest then
    /// fails), and passes the error on.
    fn refused(&mut self, e: ApiError) -> ApiError {
        if e.code == ErrorCode::QuotaExceeded && self.quota_refusal.is_none() {
            self.quota_refusal = Some(e.message.clone());
        }
        e
    }

    fn handle(&self, r: &Resource<TensorHandle>) -> wasmtime::Result<&TensorHandle> {
        Ok(self.table.get(r)?)
    }
}

impl types::Host for InvocationState {
    fn convert_error(&mut self, err: HostError) -> wasmtime::Result<types::Error> {
        err.into_wit()
    }
}

impl io::Host for InvocationState {}

impl tensors::Host for InvocationState {}

impl tensors::HostTensor for InvocationState {
    async fn from_bytes(
        &mut self,
        dtype: WitDtype,
        shape: Vec<u32>,
        data: Vec<u8>,
    ) -> HostResult<Resource<TensorHandle>> {
        self.upload(dtype.into(), shape, data).await
    }

    async fn from_f32(&mut self, shape: Vec<u32>, data: Vec<f32>) -> HostResult<Resource<TensorHandle>> {
        let bytes = bytemuck::cast_slice(&data).to_vec();
        self.upload(DType::F32, shape, bytes).await
    }

    async fn from_i32(&mut self, shape: Vec<u32>, data: Vec<i32>) -> HostResult<Resource<TensorHandle>> {
        let bytes = bytemuck::cast_slice(&data).to_vec();
        self.upload(DType::I32, shape, bytes).await
    }

    async fn zeros(&mut self, dtype: WitDtype, shape: Vec<u32>) -> HostResult<Resource<TensorHandle>> {
        let dtype = DType::from(dtype);
        if dtype.is_quantized() {
            return Err(ApiError::dtype(format!("zeros cannot make a tensor of the block format {dtype}")).into());
        }
        let meta = TensorMeta::new(dtype, shape)?;
        let bytes = vec![0; meta.byte_len()];
        let handle = self.upload(dtype, meta.shape, bytes).await?;
        self.table.get_mut(&handle)?.writable = true;
        Ok(handle)
    }

    async fn write_rows(
        &mut self,
        this: Resource<TensorHandle>,
        offset: u32,
        src: Resource<TensorHandle>,
    ) -> HostResult<()> {
        if !self.handle(&this)?.writable {
            return Err(ApiError::arg(
                "only a tensor made by tensor.zeros can be written in place (not a weight, an upload or an op's output)",
            )
            .into());
        }
        // The write's output is an empty tensor that only orders it: dropped at once.
        let ordering = self.launch_op(Op::WriteRows { offset }, &[this, src]).await?;
        self.table.delete(ordering)?;
        self.live_tensors -= 1;
        Ok(())
    }

    fn dtype(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<WitDtype> {
        Ok(self.handle(&this)?.meta.dtype.into())
    }

    fn shape(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<Vec<u32>> {
        Ok(self.handle(&this)?.meta.shape.clone())
    }

    async fn read(&mut self, this: Resource<TensorHandle>) -> HostResult<Vec<u8>> {
        self.enter_host();
        self.caller.check()?;
        let handle = self.handle(&this)?;
        let (id, meta) = (handle.id, handle.meta.clone());
        if meta.byte_len() > self.limits.max_read_bytes {
            return Err(ApiError::new(
                ErrorCode::TooLarge,
                format!(
                    "reading {} bytes exceeds the limit of {} bytes per read",
                    meta.byte_len(),
                    self.limits.max_read_bytes
                ),
            )
            .into());
        }
        let bytes = self.queue.read(id, meta).await?;
        self.guest_cpu.leave_host();
        Ok(bytes)
    }

    fn drop(&mut self, this: Resource<TensorHandle>) -> wasmtime::Result<()> {
        // Dropping the handle releases the lease: memory and quota come back.
        self.table.delete(this)?;
        self.live_tensors -= 1;
        Ok(())
    }
}

impl ops::Host for InvocationState {
    async fn launch(&mut self, op: ops::Op, inputs: Vec<Resource<TensorHandle>>) -> HostResult<Resource<TensorHandle>> {
        self.launch_op(op.into(), &inputs).await
    }

    async fn kv_attention(
        &mut self,
        q: Resource<TensorHandle>,
        k: Resource<TensorHandle>,
        v: Resource<TensorHandle>,
        k_caches: Vec<Resource<TensorHandle>>,
        v_caches: Vec<Resource<TensorHandle>>,
        args: ops::KvAttentionArgs,
    ) -> HostResult<Resource<TensorHandle>> {
        if k_caches.len() != v_caches.len() {
            return Err(ApiError::arg(format!(
                "kv-attention takes a v cache per k cache, got {} k and {} v caches",
                k_caches.len(),
                v_caches.len()
            ))
            .into());
        }
        let caches: Vec<Resource<TensorHandle>> =
            k_caches.into_iter().zip(v_caches).flat_map(|(k, v)| [k, v]).collect();
        // The caches are written in place: each must be a `tensor.zeros` buffer, and
        // none may be given twice or also be read as q, k or v (views share an id).
        let mut ids = Vec::with_capacity(caches.len() + 3);
        for r in [&q, &k, &v] {
            ids.push(self.handle(r)?.id);
        }
        for (i, cache) in caches.iter().enumerate() {
            let handle = self.handle(cache)?;
            let which = if i % 2 == 0 { "k" } else { "v" };
            if !handle.writable {
                return Err(ApiError::arg(format!(
                    "kv-attention {which} cache {} is not a tensor made by tensor.zeros (only those can be written in place)",
                    i / 2
                ))
                .into());
            }
            if ids.contains(&handle.id) {
                return Err(ApiError::arg(format!(
                    "kv-attention {which} cache {} is given twice (as another cache, or as q, k or v)",
                    i / 2
                ))
                .into());
            }
            ids.push(handle.id);
        }
        let inputs: Vec<Resource<TensorHandle>> = [q, k, v].into_iter().chain(caches).collect();
        self.launch_op(Op::KvAttention(Box::new(args.into())), &inputs).await
    }
}

impl fused::Host for InvocationState {
    async fn launch(
        &mut self,
        op: fused::FusedOp,
        inputs: Vec<Resource<TensorHandle>>,
    ) -> HostResult<Resource<TensorHandle>> {
        self.launch_op(op.into(), &inputs).await
    }
}

impl InvocationState {
    /// Both launch imports: infer the output, then queue the op through [`Self::create`].
    async fn launch_op(&mut self, op: Op, inputs: &[Resource<TensorHandle>]) -> HostResult<Resource<TensorHandle>> {
        self.enter_host();
        let mut args = Vec::with_capacity(inputs.len());
        for r in inputs {
            let h = self.handle(r)?;
            args.push((h.id, h.meta.clone()));
        }
        let metas: Vec<&TensorMeta> = args.iter().map(|(_, m)| m).collect();
        let out = infer(&op, &metas)?;
        let handle = match (&op, inputs) {
            (Op::Reshape(_), [input]) => self.view(input, out)?,
            _ => self.create(out, Source::Op(op, args)).await?,
        };
        self.guest_cpu.leave_host();
        Ok(handle)
    }

    /// A reshape: a new handle on its input's tensor, with no kernel, no memory and no
    /// place in the queue (a backend's reshape kernel only aliases its input anyway).
    fn view(&mut self, input: &Resource<TensorHandle>, meta: TensorMeta) -> HostResult<Resource<TensorHandle>> {
        self.caller.check()?;
        self.check_handle_room()?;
        let view = self.handle(input)?.view(meta);
        let handle = self.table.push(view)?;
        self.live_tensors += 1;
        Ok(handle)
    }
}

impl artifacts::Host for InvocationState {
    fn read(&mut self, artifact: String) -> HostResult<Vec<u8>> {
        self.caller.check()?;
        Ok(self.artifacts.read(&artifact, self.limits.max_artifact_read_bytes)?)
    }

    fn metadata(&mut self, artifact: String) -> HostResult<String> {
        self.caller.check()?;
        Ok(self.artifacts.metadata(&artifact, self.limits.max_artifact_read_bytes)?)
    }

    fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        let mut names: Vec<String> = self.artifacts.names().map(str::to_owned).collect();
        names.sort_unstable();
        Ok(names)
    }

    fn load_tensor(
        &mut self,
        artifact: String,
        name: String,
        as_dtype: Option<WitDtype>,
    ) -> HostResult<Resource<TensorHandle>> {
        self.caller.check()?;
        self.check_handle_room()?;
        let (lease, meta) = self
            .artifacts
            .load_tensor(&self.queue, &artifact, &name, as_dtype.map(Into::into))
            .map_err(|e| self.refused(e))?;
        let handle = self.table.push(TensorHandle::shared(lease, meta))?;
        self.live_tensors += 1;
        Ok(handle)
    }
}

impl streaming::Host for InvocationState {
    async fn emit(&mut self, chunk: Vec<io::IoTensor>) -> HostResult<()> {
        self.enter_host();
        self.caller.emit(chunk).await?;
        self.guest_cpu.leave_host();
        Ok(())
    }

    fn caller_gone(&mut self) -> wasmtime::Result<bool> {
        Ok(self.caller.link.gone())
    }
}
