//! `etch::linear_group` on CUDA: for one row (decode) and GEMV-eligible tensors, one
//! `gemv_group_*` launch (`cuda/linalg.cu`) over the rows of every weight; otherwise each
//! linear as `aten::linear` runs it (the GEMV, or cuBLAS).

use crate::context::{Launch, with_device};
use crate::gemm::{Gemm, gemm, gemv, use_gemv};
use etch_core::{KernelContext, Result};
use etch_kernels::etch_ops::linear_group::{LinearGroupCall, MAX_LINEARS, linear_group_call};

/// `struct GemvGroupArgs` in linalg.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct GemvGroupArgs {
    x: u64,
    w: [u64; MAX_LINEARS],
    out: [u64; MAX_LINEARS],
    start: [i64; MAX_LINEARS + 1],
    k: i64,
    len: i32,
    pad: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for GemvGroupArgs {}

/// `etch::linear_group.out` on CUDA.
pub(crate) fn linear_group_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let c = linear_group_call(ctx)?;
    let mut grouped = c.m == 1;
    for j in 0..c.len {
        let (w, out) = c.pair(ctx, j)?;
        grouped &= use_gemv(&c.x, &w, &out);
    }
    if grouped {
        return gemv_group(ctx, &c);
    }
    for j in 0..c.len {
        let (w, out) = c.pair(ctx, j)?;
        if c.m == 1 && use_gemv(&c.x, &w, &out) {
            gemv(ctx, &c.x, &w, &out, false)?;
            continue;
        }
        let g = Gemm {
            batch: 1,
            m: c.m,
            k: c.k,
            n: w.sizes()[0],
            w_t: true,
            stride_a: 0,
            stride_w: 0,
            alpha: 1.0,
            beta: 0.0,
        };
        gemm(ctx, &c.x, &w, &out, g)?;
    }
    Ok(())
}

/// One launch of `gemv_group_*` for every linear of a one-row call.
fn gemv_group(ctx: &KernelContext<'_>, c: &LinearGroupCall<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut a = GemvGroupArgs {
        x: crate::util::ptr(&c.x),
        w: [0; MAX_LINEARS],
        out: [0; MAX_LINEARS],
        start: [0; MAX_LINEARS + 1],
        k: c.k as i64,
        len: c.len as i32,
        pad: 0,
    };
    for j in 0..c.len {
        let (w, out) = c.pair(ctx, j)?;
        a.w[j] = crate::util::ptr(&w);
        a.out[j] = crate::util::ptr(&out);
        a.start[j + 1] = a.start[j] + w.sizes()[0] as i64;
    }
    let rows = a.start[c.len] as usize;
    if rows == 0 {
        return Ok(());
    }
    let name = super::io_kernel(
        op,
        c.x.dtype(),
        ["gemv_group_f32", "gemv_group_bf16", "gemv_group_f16"],
    )?;
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (rows.div_ceil(8).min(1 << 30) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let dev = c.x.device();
    with_device(ctx, dev, |mut l: Launch<'_>| {
        let f = l.function(crate::Family::Linalg, name)?;
        let mut args = [crate::util::arg(&mut a)];
        // SAFETY: x ([1, k]), each weight ([n_j, k]) and each output ([1, n_j]) are live,
        // contiguous device tensors on one device (use_gemv checked each pair), and
        // `start` holds the running sums of the n_j; the argument matches
        // `gemv_group_*(GemvGroupArgs)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}
