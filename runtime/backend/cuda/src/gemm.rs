//! GEMMs through cuBLAS: matmul (batched, broadcasting, with transposes), the products
//! of convolution, and `gemm_batched` over pointer arrays (the fused attention).
//!
//! sluice tensors are row-major and cuBLAS is column-major. A row-major `[r, c]` matrix is
//! the column-major `[c, r]` matrix with the same bytes, i.e. its transpose, so the
//! row-major product `C = op(A)·op(B)` is computed as the column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`:
//! cuBLAS gets B first, A second, and m/n swapped ([`GemmCall::row_major`]). Transposes
//! are cuBLAS op flags, never copies. f16/bf16 accumulate in f32; f32 uses TF32 only if
//! the device was opened with `allow_tf32`.
//!
//! [`crate::CudaDevice::matmul_rows`] computes output rows `r0..r1` of every batch with
//! the same call and a pointer offset: op(A)'s rows start `r0·k` elements in (or `r0`
//! when A is transposed: then they are columns of A's storage, still `M` apart), A keeps
//! its full leading dimension and batch stride, and the output is a dense
//! `[batch, r1 - r0, N]` ([`MatmulPlan::rows_call`]).

use std::ffi::c_void;
use std::ops::Range;

use cudarc::cublas::result as blas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use sluice_host_api::{DType, MatmulArgs, TensorMeta, broadcast_shapes};

use crate::{CudaBuffer, CudaDevice, CudaError};

/// One `cublasGemmStridedBatchedEx` call, in cuBLAS's column-major terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmCall {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
    pub batch: u64,
}

impl GemmCall {
    /// Row-major `C[m, n] = op(A)[m, k] · op(B)[k, n]` with A stored `[m, k]` (or `[k, m]`
    /// if `ta`) and B stored `[k, n]` (or `[n, k]` if `tb`). The returned call's "A" is the
    /// row-major B and its "B" the row-major A: pass the pointers in that order.
    pub fn row_major(m: u64, n: u64, k: u64, ta: bool, tb: bool) -> GemmCall {
        let lda = if tb { k } else { n };
        #[cfg(test)]
        let lda = if crate::mutants::planted(crate::mutants::Mutant::LdaOfTheOtherLayout) {
            if tb { n } else { k }
        } else {
            lda
        };
        GemmCall {
            trans_a: tb,
            trans_b: ta,
            m: n,
            n: m,
            k,
            lda,
            ldb: if ta { m } else { k },
            ldc: n,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            batch: 1,
        }
    }
}

/// How a matmul operand's batch axes map onto the output's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand {
    /// One matrix per output batch element, contiguous.
    Dense,
    /// A single matrix shared by every batch element (stride 0).
    Shared,
    /// Partially broadcast: copy it to this full shape first.
    Materialize(Vec<u32>),
}

/// How a matmul runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatmulPlan {
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: Operand,
    pub b: Operand,
    /// `a` is dense, `b` shared and `a` not transposed: the batch folds into m and the
    /// whole matmul is one GEMM (the usual `x · W` of a linear layer).
    pub fold: bool,
}

impl MatmulPlan {
    pub fn new(args: &MatmulArgs, a: &TensorMeta, b: &TensorMeta) -> MatmulPlan {
        let (ar, br) = (a.rank(), b.rank());
        let (m, k) = dims2(&a.shape[ar - 2..], args.transpose_a);
        let (_, n) = dims2(&b.shape[br - 2..], args.transpose_b);
        let batch_shape =
            broadcast_shapes(&a.shape[..ar - 2], &b.shape[..br - 2]).expect("matmul shapes were checked by infer");
        let batch: u64 = batch_shape.iter().map(|&d| d as u64).product();
        let operand = |shape: &[u32]| {
            let own = &shape[..shape.len() - 2];
            let count: u64 = own.iter().map(|&d| d as u64).product();
            let padded: Vec<u32> =
                std::iter::repeat_n(1, batch_shape.len() - own.len()).chain(own.iter().copied()).collect();
            if count == 1 {
                Operand::Shared
            } else if padded == batch_shape {
                Operand::Dense
            } else {
                let mut full = batch_shape.clone();
                full.extend_from_slice(&shape[shape.len() - 2..]);
                Operand::Materialize(full)
            }
        };
        let (oa, ob) = (operand(&a.shape), operand(&b.shape));
        let fold = batch > 1 && oa == Operand::Dense && ob == Operand::Shared && !args.transpose_a;
        #[cfg(test)]
        let fold = fold
            || (crate::mutants::planted(crate::mutants::Mutant::FoldTransposedA)
                && batch > 1
                && oa == Operand::Dense
                && ob == Operand::Shared);
        MatmulPlan { batch, m, n, k, a: oa, b: ob, fold }
    }

    /// The single cuBLAS call this plan makes once operands are materialized.
    pub fn call(&self, args: &MatmulArgs) -> GemmCall {
        if self.fold {
            return GemmCall::row_major(self.batch * self.m, self.n, self.k, false, args.transpose_b);
        }
        let mut c = GemmCall::row_major(self.m, self.n, self.k, args.transpose_a, args.transpose_b);
        let stride = |o: &Operand, size: u64| if *o == Operand::Shared { 0 } else { size };
        #[cfg(test)]
        let stride = |o: &Operand, size: u64| {
            if crate::mutants::planted(crate::mutants::Mutant::SharedOperandStrided) { size } else { stride(o, size) }
        };
        // cuBLAS's A is our B and vice versa.
        c.stride_a = stride(&self.b, self.k * self.n);
        c.stride_b = stride(&self.a, self.m * self.k);
        c.stride_c = self.m * self.n;
        c.batch = self.batch;
        c
    }
}

impl MatmulPlan {
    /// The cuBLAS call computing output rows `rows` of every batch into a dense
    /// `[batch, rows.len(), n]` output, and the element offset of op(A)'s first row to
    /// add to A's pointer. Never folds the batch into m (the rows of different batches
    /// are not adjacent).
    pub fn rows_call(&self, args: &MatmulArgs, rows: Range<u64>) -> (GemmCall, u64) {
        let r = rows.end - rows.start;
        let mut c = GemmCall::row_major(r, self.n, self.k, args.transpose_a, args.transpose_b);
        // cuBLAS's B is our A: its leading dimension is that of the whole matrix (a
        // transposed A is [k, M] in storage, its op rows being columns M apart).
        c.ldb = if args.transpose_a { self.m } else { self.k };
        #[cfg(test)]
        if crate::mutants::planted(crate::mutants::Mutant::RowsLdOfTheBlock) {
            c.ldb = if args.transpose_a { r } else { self.k };
        }
        let stride = |o: &Operand, size: u64| if *o == Operand::Shared { 0 } else { size };
        c.stride_a = stride(&self.b, self.k * self.n);
        c.stride_b = stride(&self.a, self.m * self.k);
        c.stride_c = r * self.n;
        c.batch = self.batch;
        let offset = rows.start * if args.transpose_a { 1 } else { self.k };
        #[cfg(test)]
        let offset = offset
            + if crate::mutants::planted(crate::mutants::Mutant::RowsOffsetOneRowLate) {
                if args.transpose_a { 1 } else { self.k }
            } else {
                0
            };
        (c, offset)
    }
}

/// (rows, cols) of the last two axes after the optional transpose.
fn dims2(last2: &[u32], t: bool) -> (u64, u64) {
    let (r, c) = (last2[0] as u64, last2[1] as u64);
    if t { (c, r) } else { (r, c) }
}

/// `a · b` as `op` = `Matmul(args)`.
pub(crate) fn matmul(
    dev: &CudaDevice,
    args: &MatmulArgs,
    (a, am): (&CudaBuffer, &TensorMeta),
    (b, bm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
) -> Result<CudaBuffer, CudaError> {
    let plan = MatmulPlan::new(args, am, bm);
    let c = dev.alloc(out.byte_len())?;
    if out.numel() == 0 {
        return Ok(c);
    }
    if plan.k == 0 {
        dev.memset_zero(&c)?;
        return Ok(c);
    }
    let a_full = materialize(dev, a, am, &plan.a)?;
    let b_full = materialize(dev, b, bm, &plan.b)?;
    let a_ptr = a_full.as_ref().unwrap_or(a).device_ptr();
    let b_ptr = b_full.as_ref().unwrap_or(b).device_ptr();
    // cuBLAS's A is our B.
    gemm(dev, out.dtype, &plan.call(args), b_ptr, a_ptr, c.device_ptr(), 0.0)
        .map_err(|e| annotate(e, &format!("matmul {:?} x {:?}", am.shape, bm.shape)))?;
    // The temporaries go back to the pool now; the stream keeps the GEMM ordered before
    // any reuse.
    drop((a_full, b_full));
    Ok(c)
}

/// A broadcast copy of an operand the GEMM cannot stride over, or `None` when it can
/// read `buf` in place.
fn materialize(
    dev: &CudaDevice,
    buf: &CudaBuffer,
    meta: &TensorMeta,
    operand: &Operand,
) -> Result<Option<CudaBuffer>, CudaError> {
    match operand {
        Operand::Materialize(full) => crate::ops::indexing::broadcast_to(dev, buf, meta, full).map(Some),
        _ => Ok(None),
    }
}

/// Output rows `rows` of `a · b` (see [`crate::CudaDevice::matmul_rows`]); `out` is the
/// whole product's meta and `rows` was checked against it.
pub(crate) fn matmul_rows(
    dev: &CudaDevice,
    args: &MatmulArgs,
    (a, am): (&CudaBuffer, &TensorMeta),
    (b, bm): (&CudaBuffer, &TensorMeta),
    out: &TensorMeta,
    rows: Range<usize>,
) -> Result<CudaBuffer, CudaError> {
    let plan = MatmulPlan::new(args, am, bm);
    if rows.start == 0 && rows.end as u64 == plan.m {
        return matmul(dev, args, (a, am), (b, bm), out);
    }
    let r = (rows.end - rows.start) as u64;
    let es = out.dtype.size_of() as u64;
    let c = dev.alloc((plan.batch * r * plan.n * es) as usize)?;
    if r * plan.batch * plan.n == 0 {
        return Ok(c);
    }
    if plan.k == 0 {
        dev.memset_zero(&c)?;
        return Ok(c);
    }
    let a_full = materialize(dev, a, am, &plan.a)?;
    let b_full = materialize(dev, b, bm, &plan.b)?;
    let (call, offset) = plan.rows_call(args, rows.start as u64..rows.end as u64);
    let a_ptr = a_full.as_ref().unwrap_or(a).device_ptr() + offset * es;
    let b_ptr = b_full.as_ref().unwrap_or(b).device_ptr();
    // cuBLAS's A is our B.
    gemm(dev, out.dtype, &call, b_ptr, a_ptr, c.device_ptr(), 0.0)
        .map_err(|e| annotate(e, &format!("matmul rows {rows:?} of {:?} x {:?}", am.shape, bm.shape)))?;
    drop((a_full, b_full));
    Ok(c)
}

/// `e` with `what` was being done put first; the variant is kept.
pub(crate) fn annotate(e: CudaError, what: &str) -> CudaError {
    match e {
        CudaError::OutOfMemory(m) => CudaError::OutOfMemory(format!("{what}: {m}")),
        CudaError::Failure(m) => CudaError::Failure(format!("{what}: {m}")),
        CudaError::Lost(m) => CudaError::Lost(format!("{what}: {m}")),
    }
}

fn int(v: u64, what: &str) -> Result<i32, CudaError> {
    i32::try_from(v.max(1)).map_err(|_| CudaError::failure(format!("GEMM {what} = {v} exceeds cuBLAS's 32-bit limit")))
}

/// cuBLAS's storage and compute types of a GEMM in `dtype`.
fn data_types(dev: &CudaDevice, dtype: DType) -> Result<(cudaDataType, cublasComputeType_t), CudaError> {
    Ok(match dtype {
        DType::F32 if dev.allow_tf32 => (cudaDataType::CUDA_R_32F, cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (cudaDataType::CUDA_R_32F, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::F16 => (cudaDataType::CUDA_R_16F, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::BF16 => (cudaDataType::CUDA_R_16BF, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        other => {
            return Err(CudaError::failure(format!("GEMM is not defined on {other}")));
        }
    })
}

/// Runs one `cublasGemmBatchedEx` call (`C = A·B` in cuBLAS terms) on the current lane's
/// stream: `c`'s transposes, sizes and leading dimensions (its strides are unused) for
/// `batch` products whose matrices are listed in the device arrays of `batch` pointers
/// at `a`, `b` and `out`, each product scaled by `alpha`. For batches that are not one
/// stride apart, like the heads of an attention across batch elements.
pub(crate) fn gemm_batched(
    dev: &CudaDevice,
    dtype: DType,
    c: &GemmCall,
    batch: u64,
    (a, b, out): (u64, u64, u64),
    alpha: f32,
) -> Result<(), CudaError> {
    let (ty, compute) = data_types(dev, dtype)?;
    let op = |t: bool| {
        if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N }
    };
    let (m, n, k) = (int(c.m, "m")?, int(c.n, "n")?, int(c.k, "k")?);
    let (lda, ldb, ldc) = (int(c.lda, "lda")?, int(c.ldb, "ldb")?, int(c.ldc, "ldc")?);
    let batch = int(batch, "batch")?;
    let beta = 0.0f32;
    let lane = dev.active();
    let blas_handle = lane.blas.lock().unwrap_or_else(|p| p.into_inner());
    lane.bind()?;
    let handle = *blas_handle.handle();
    let (alpha_p, beta_p) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
    // SAFETY: `a`, `b` and `out` are device arrays of `batch` pointers to live device
    // matrices of the sizes the call describes; alpha/beta are host f32 as the compute
    // type requires; the handle is used under its lock, on its lane's stream and context.
    let status = unsafe {
        cudarc::cublas::sys::cublasGemmBatchedEx(
            handle,
            op(c.trans_a),
            op(c.trans_b),
            m,
            n,
            k,
            alpha_p,
            a as *const *const c_void,
            ty,
            lda,
            b as *const *const c_void,
            ty,
            ldb,
            beta_p,
            out as *const *mut c_void,
            ty,
            ldc,
            batch,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    };
    status
        .result()
        .map_err(|e| CudaError::cublas(&format!("cublasGemmBatchedEx {dtype} m={m} n={n} k={k} batch={batch}"), e))
}

/// Runs one call (`C = A·B + beta·C` in cuBLAS terms, alpha 1) on the current lane's
/// stream, with that lane's cuBLAS handle.
pub(crate) fn gemm(
    dev: &CudaDevice,
    dtype: DType,
    c: &GemmCall,
    a: u64,
    b: u64,
    out: u64,
    beta: f32,
) -> Result<(), CudaError> {
    gemm_scaled(dev, dtype, c, (a, b, out), 1.0, beta)
}

/// [`gemm`] with a scale on the product: `C = alpha·A·B + beta·C`. The scale is applied
/// to the f32 accumulator before the result is rounded to the dtype, so a product that
/// would overflow f16 but whose scaled value fits (attention's raw scores) stays finite.
pub(crate) fn gemm_scaled(
    dev: &CudaDevice,
    dtype: DType,
    c: &GemmCall,
    (a, b, out): (u64, u64, u64),
    alpha: f32,
    beta: f32,
) -> Result<(), CudaError> {
    let (ty, compute) = data_types(dev, dtype)?;
    let op = |t: bool| {
        if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N }
    };
    let (m, n, k) = (int(c.m, "m")?, int(c.n, "n")?, int(c.k, "k")?);
    let (lda, ldb, ldc) = (int(c.lda, "lda")?, int(c.ldb, "ldb")?, int(c.ldc, "ldc")?);
    let batch = int(c.batch, "batch")?;
    let lane = dev.active();
    let blas_handle = lane.blas.lock().unwrap_or_else(|p| p.into_inner());
    lane.bind()?;
    let handle = *blas_handle.handle();
    let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let (alpha_p, beta_p) = (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void);
    let (a, b, out) = (a as *const c_void, b as *const c_void, out as *mut c_void);
    // SAFETY: the pointers are live device buffers of the sizes the call describes
    // (checked by `infer` and the allocator); alpha/beta are host f32 as the compute type
    // requires; the handle is used under its lock, on its lane's stream and context.
    let r = unsafe {
        if batch == 1 {
            blas::gemm_ex(
                handle,
                op(c.trans_a),
                op(c.trans_b),
                m,
                n,
                k,
                alpha_p,
                a,
                ty,
                lda,
                b,
                ty,
                ldb,
                beta_p,
                out,
                ty,
                ldc,
                compute,
                algo,
            )
        } else {
            blas::gemm_strided_batched_ex(
                handle,
                op(c.trans_a),
                op(c.trans_b),
                m,
                n,
                k,
                alpha_p,
                a,
                ty,
                lda,
                c.stride_a as i64,
                b,
                ty,
                ldb,
                c.stride_b as i64,
                beta_p,
                out,
                ty,
                ldc,
                c.stride_c as i64,
                batch,
                compute,
                algo,
            )
        }
    };
    r.map_err(|e| {
        CudaError::cublas(
            &format!(
                "cublasGemm{}Ex {dtype} m={m} n={n} k={k} batch={batch}",
                if batch == 1 { "" } else { "StridedBatched" }
            ),
            e,
        )
    })
}

#[cfg(test)]
mod tests;
