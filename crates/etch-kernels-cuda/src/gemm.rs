//! Matrix products on cuBLAS (`cublasGemmStridedBatchedEx`): mm, bmm, addmm, baddbmm and
//! linear in f32 (full f32 math, as PyTorch's default), f16/bf16 (tensor cores, f32
//! accumulation) and f64; integer dtypes on a kernel of ours (linalg.cu).

use crate::context::{Launch, with_device};
use crate::cuda_err;
use crate::elementwise::cast_into;
use crate::util::same_device;
use cudarc::cublas::{result as blas, sys as blas_sys};
use etch_core::{Error, KernelContext, Result, ScalarType, TensorRef};
use etch_kernels::util::broadcast_shape;

use blas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};

fn data_type(op: &str, t: ScalarType) -> Result<(blas_sys::cudaDataType, bool)> {
    Ok(match t {
        ScalarType::Float => (blas_sys::cudaDataType::CUDA_R_32F, false),
        ScalarType::Half => (blas_sys::cudaDataType::CUDA_R_16F, false),
        ScalarType::BFloat16 => (blas_sys::cudaDataType::CUDA_R_16BF, false),
        ScalarType::Double => (blas_sys::cudaDataType::CUDA_R_64F, true),
        other => {
            return Err(Error::not_supported(format!(
                "{op}: the CUDA matmul does not support {other}"
            )));
        }
    })
}

/// One strided-batched product: row-major `out[b] = alpha * a[b] @ op(w[b]) + beta * out[b]`
/// where `a[b]` is `m x k`, `op(w)` is `k x n` (`w` stored `n x k` when `w_t`), with batch
/// strides in elements (0 broadcasts an operand).
pub(crate) struct Gemm {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub w_t: bool,
    pub stride_a: i64,
    pub stride_w: i64,
    pub alpha: f64,
    pub beta: f64,
}

fn check_contiguous(op: &str, ts: &[&TensorRef<'_>]) -> Result<()> {
    for t in ts {
        if !t.is_default_dim_order() {
            return Err(Error::not_supported(format!(
                "{op}: the CUDA matmul needs contiguous row-major tensors"
            )));
        }
    }
    Ok(())
}

pub(crate) fn gemm(
    ctx: &KernelContext<'_>,
    a: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &TensorRef<'_>,
    g: Gemm,
) -> Result<()> {
    let op = ctx.op_name();
    same_device(op, &[a, w, out])?;
    if a.dtype() != out.dtype() || w.dtype() != out.dtype() {
        return Err(Error::invalid_argument(format!(
            "{op}: mixed dtypes {}, {} and {}",
            a.dtype(),
            w.dtype(),
            out.dtype()
        )));
    }
    check_contiguous(op, &[a, w, out])?;
    if g.batch == 0 || g.m == 0 || g.n == 0 {
        return Ok(());
    }
    if g.k == 0 {
        // An empty sum: out = beta * out (beta is 0 for plain products).
        if g.beta == 0.0 {
            return crate::elementwise::fill(ctx, out, etch_core::Scalar::Int(0));
        }
    }
    if out.dtype().is_integral() {
        return int_gemm(ctx, a, w, out, &g);
    }
    let p = Ptrs {
        a: a.data_ptr() as usize as u64,
        w: w.data_ptr() as usize as u64,
        out: out.data_ptr() as usize as u64,
        dt: out.dtype(),
        out_dt: out.dtype(),
        a_t: false,
        stride_o: (g.m * g.n) as i64,
    };
    with_device(ctx, out.device(), |mut l| gemm_raw(&mut l, op, &p, &g))
}

/// Raw operands of [`gemm_raw`]: device addresses, the dtype of `a` and `w` and of the
/// output (float32 output with float16/bfloat16 operands is allowed), whether `a` is stored
/// transposed (`k x m`), and the output's batch stride in elements.
pub(crate) struct Ptrs {
    pub a: u64,
    pub w: u64,
    pub out: u64,
    pub dt: ScalarType,
    pub out_dt: ScalarType,
    pub a_t: bool,
    pub stride_o: i64,
}

/// One strided-batched product on raw device memory (see [`Gemm`]; `g.k` must be positive),
/// on the stream of `l`.
pub(crate) fn gemm_raw(l: &mut Launch<'_>, op: &str, p: &Ptrs, g: &Gemm) -> Result<()> {
    if g.batch == 0 || g.m == 0 || g.n == 0 {
        return Ok(());
    }
    let (dt, f64_math) = data_type(op, p.dt)?;
    let (odt, _) = data_type(op, p.out_dt)?;
    let to_i32 = |v: usize| {
        i32::try_from(v).map_err(|_| Error::not_supported(format!("{op}: dimension {v} too large")))
    };
    let (mi, ki, ni, bi) = (to_i32(g.m)?, to_i32(g.k)?, to_i32(g.n)?, to_i32(g.batch)?);
    let (alpha32, beta32) = (g.alpha as f32, g.beta as f32);
    let (alpha_p, beta_p) = if f64_math {
        (
            &g.alpha as *const f64 as *const std::ffi::c_void,
            &g.beta as *const f64 as *const std::ffi::c_void,
        )
    } else {
        (
            &alpha32 as *const f32 as *const std::ffi::c_void,
            &beta32 as *const f32 as *const std::ffi::c_void,
        )
    };
    let compute = if f64_math {
        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_64F
    } else {
        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
    };
    // Column-major view: out^T (n x m) = op(w)^T (n x k) @ op(a)^T (k x m).
    let (opw, ldw) = if g.w_t {
        (CUBLAS_OP_T, ki)
    } else {
        (CUBLAS_OP_N, ni)
    };
    let (opa, lda) = if p.a_t {
        (CUBLAS_OP_T, mi)
    } else {
        (CUBLAS_OP_N, ki)
    };
    let h = l.blas()?;
    // SAFETY: the handle belongs to this launch's state (one user at a time) and is bound to
    // this device's stream; the caller passes live device memory of the described shapes;
    // alpha/beta are host values (cuBLAS's default pointer mode) of the compute type.
    unsafe {
        blas::gemm_strided_batched_ex(
            h,
            opw,
            opa,
            ni,
            mi,
            ki,
            alpha_p,
            p.w as *const _,
            dt,
            ldw,
            g.stride_w,
            p.a as *const _,
            dt,
            lda,
            g.stride_a,
            beta_p,
            p.out as *mut _,
            odt,
            ni,
            p.stride_o,
            bi,
            compute,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .map_err(|e| cuda_err(op, e))
    }
}

/// `struct IMatArgs` in linalg.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct IMatArgs {
    a: u64,
    w: u64,
    out: u64,
    dt: i32,
    has_bias: i32,
    batch: i64,
    m: i64,
    k: i64,
    n: i64,
    sa_b: i64,
    sw_b: i64,
    sw_k: i64,
    sw_n: i64,
    alpha: i64,
    beta: i64,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for IMatArgs {}

/// Integer products: wrapping i64 arithmetic (float alpha/beta truncate toward zero).
fn int_gemm(
    ctx: &KernelContext<'_>,
    a: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &TensorRef<'_>,
    g: &Gemm,
) -> Result<()> {
    let op = ctx.op_name();
    let (sw_k, sw_n) = if g.w_t {
        (1, g.k as i64)
    } else {
        (g.n as i64, 1)
    };
    let mut p = IMatArgs {
        a: crate::util::ptr(a),
        w: crate::util::ptr(w),
        out: crate::util::ptr(out),
        dt: crate::util::dt_code(op, out.dtype())?,
        has_bias: (g.beta != 0.0) as i32,
        batch: g.batch as i64,
        m: g.m as i64,
        k: g.k as i64,
        n: g.n as i64,
        sa_b: g.stride_a,
        sw_b: g.stride_w,
        sw_k,
        sw_n,
        alpha: g.alpha as i64,
        beta: g.beta as i64,
    };
    let n = (g.batch * g.m * g.n) as i64;
    with_device(ctx, out.device(), |mut l| {
        let f = l.function(crate::Family::Linalg, "imatmul")?;
        let mut args = [crate::util::arg(&mut p)];
        // SAFETY: contiguous device tensors of the checked shapes; matches `imatmul`.
        unsafe { l.launch(f, n, &mut args) }
    })
}

fn mat_err(op: &str, a: &TensorRef<'_>, b: &TensorRef<'_>) -> Error {
    Error::invalid_argument(format!(
        "{op}: cannot multiply {:?} by {:?}",
        a.sizes(),
        b.sizes()
    ))
}

/// Writes `beta`-scaled broadcast `bias` into `out` before a product accumulates into it.
fn bias_into(ctx: &KernelContext<'_>, bias: &TensorRef<'_>, out: &TensorRef<'_>) -> Result<()> {
    let op = ctx.op_name();
    let s = broadcast_shape(op, bias.sizes(), out.sizes())?;
    if *s != *out.sizes() {
        return Err(Error::invalid_argument(format!(
            "{op}: bias {:?} does not broadcast to {:?}",
            bias.sizes(),
            out.sizes()
        )));
    }
    cast_into(ctx, bias, out)
}

pub(crate) fn mm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    if a.dim() != 2 || b.dim() != 2 || a.sizes()[1] != b.sizes()[0] {
        return Err(mat_err(ctx.op_name(), &a, &b));
    }
    let (m, k, n) = (a.sizes()[0], a.sizes()[1], b.sizes()[1]);
    let out = ctx.resize_out(2, &[m, n])?;
    let g = Gemm {
        batch: 1,
        m,
        k,
        n,
        w_t: false,
        stride_a: 0,
        stride_w: 0,
        alpha: 1.0,
        beta: 0.0,
    };
    gemm(ctx, &a, &b, &out, g)
}

pub(crate) fn bmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    if a.dim() != 3 || b.dim() != 3 || a.sizes()[0] != b.sizes()[0] || a.sizes()[2] != b.sizes()[1]
    {
        return Err(mat_err(ctx.op_name(), &a, &b));
    }
    let (bs, m, k, n) = (a.sizes()[0], a.sizes()[1], a.sizes()[2], b.sizes()[2]);
    let out = ctx.resize_out(2, &[bs, m, n])?;
    let g = Gemm {
        batch: bs,
        m,
        k,
        n,
        w_t: false,
        stride_a: (m * k) as i64,
        stride_w: (k * n) as i64,
        alpha: 1.0,
        beta: 0.0,
    };
    gemm(ctx, &a, &b, &out, g)
}

/// `addmm.out(self, mat1, mat2, *, beta, alpha, out)`.
pub(crate) fn addmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let bias = ctx.tensor(0)?;
    let a = ctx.tensor(1)?;
    let b = ctx.tensor(2)?;
    let beta = ctx.scalar(3)?.to_f64();
    let alpha = ctx.scalar(4)?.to_f64();
    if a.dim() != 2 || b.dim() != 2 || a.sizes()[1] != b.sizes()[0] {
        return Err(mat_err(ctx.op_name(), &a, &b));
    }
    let (m, k, n) = (a.sizes()[0], a.sizes()[1], b.sizes()[1]);
    let out = ctx.resize_out(5, &[m, n])?;
    if beta != 0.0 {
        bias_into(ctx, &bias, &out)?;
    }
    let g = Gemm {
        batch: 1,
        m,
        k,
        n,
        w_t: false,
        stride_a: 0,
        stride_w: 0,
        alpha,
        beta,
    };
    gemm(ctx, &a, &b, &out, g)
}

/// `baddbmm.out(self, batch1, batch2, *, beta, alpha, out)`.
pub(crate) fn baddbmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let bias = ctx.tensor(0)?;
    let a = ctx.tensor(1)?;
    let b = ctx.tensor(2)?;
    let beta = ctx.scalar(3)?.to_f64();
    let alpha = ctx.scalar(4)?.to_f64();
    if a.dim() != 3 || b.dim() != 3 || a.sizes()[0] != b.sizes()[0] || a.sizes()[2] != b.sizes()[1]
    {
        return Err(mat_err(ctx.op_name(), &a, &b));
    }
    let (bs, m, k, n) = (a.sizes()[0], a.sizes()[1], a.sizes()[2], b.sizes()[2]);
    let out = ctx.resize_out(5, &[bs, m, n])?;
    if beta != 0.0 {
        bias_into(ctx, &bias, &out)?;
    }
    let g = Gemm {
        batch: bs,
        m,
        k,
        n,
        w_t: false,
        stride_a: (m * k) as i64,
        stride_w: (k * n) as i64,
        alpha,
        beta,
    };
    gemm(ctx, &a, &b, &out, g)
}

/// `linear.out(input, weight, bias=None, *, out)`: `input @ weight^T + bias`.
pub(crate) fn linear_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let x = ctx.tensor(0)?;
    let w = ctx.tensor(1)?;
    let bias = ctx.opt_tensor(2)?;
    if w.dim() != 2 || x.dim() == 0 || x.sizes()[x.dim() - 1] != w.sizes()[1] {
        return Err(mat_err(op, &x, &w));
    }
    let (k, n) = (w.sizes()[1], w.sizes()[0]);
    let m = x.numel() / k.max(1);
    let mut sizes = etch_kernels::util::Shape::from_slice(x.sizes())?;
    let last = sizes.len() - 1;
    sizes[last] = n;
    let out = ctx.resize_out(3, &sizes)?;
    let beta = if let Some(b) = &bias {
        bias_into(ctx, b, &out)?;
        1.0
    } else {
        0.0
    };
    if m == 1 && k > 0 && use_gemv(&x, &w, &out) {
        return gemv(ctx, &x, &w, &out, beta != 0.0);
    }
    let g = Gemm {
        batch: 1,
        m,
        k,
        n,
        w_t: true,
        stride_a: 0,
        stride_w: 0,
        alpha: 1.0,
        beta,
    };
    gemm(ctx, &x, &w, &out, g)
}

/// Whether a one-row linear runs on our GEMV kernel rather than cuBLAS: float32, bfloat16
/// or float16, one dtype, contiguous, on one device; `ETCH_CUDA_GEMV=0` turns it off (for
/// comparisons with cuBLAS).
pub(crate) fn use_gemv(x: &TensorRef<'_>, w: &TensorRef<'_>, out: &TensorRef<'_>) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("ETCH_CUDA_GEMV").map_or(true, |v| v != "0"));
    let dt = out.dtype();
    on && matches!(
        dt,
        ScalarType::Float | ScalarType::BFloat16 | ScalarType::Half
    ) && x.dtype() == dt
        && w.dtype() == dt
        && [x, w, out].iter().all(|t| t.is_default_dim_order())
        && same_device("linear", &[x, w, out]).is_ok()
}

/// `struct GemvArgs` in linalg.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct GemvArgs {
    x: u64,
    w: u64,
    out: u64,
    n: i64,
    k: i64,
    beta: i32,
    /// 1: the weight is a constant, fetched before the kernel waits for the previous one.
    early: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for GemvArgs {}

/// `out[1, n] = x[1, k] @ w[n, k]^T (+ out when beta)` on the GEMV kernel (see [`use_gemv`]).
pub(crate) fn gemv(
    ctx: &KernelContext<'_>,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &TensorRef<'_>,
    beta: bool,
) -> Result<()> {
    let op = ctx.op_name();
    let (n, k) = (w.sizes()[0], w.sizes()[1]);
    if n == 0 {
        return Ok(());
    }
    let name = crate::etch_ops::io_kernel(op, out.dtype(), ["gemv_f32", "gemv_bf16", "gemv_f16"])?;
    let mut a = GemvArgs {
        x: crate::util::ptr(x),
        w: crate::util::ptr(w),
        out: crate::util::ptr(out),
        n: n as i64,
        k: k as i64,
        beta: beta as i32,
        early: 0,
    };
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (n.div_ceil(8).min(1 << 30) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, out.device(), |mut l: Launch<'_>| {
        let f = l.function(crate::Family::Linalg, name)?;
        let mut args = [crate::util::arg(&mut a)];
        // SAFETY: x, w and out are live, contiguous device tensors of the checked shapes
        // (x holds k elements, w n x k, out n); the argument matches `gemv_*(GemvArgs)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}
