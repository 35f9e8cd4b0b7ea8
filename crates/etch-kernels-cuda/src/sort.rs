//! Row kernels along one dim (sort.cu): `cumsum`, `sort` (stable), `topk`. Argument
//! decoding, output shapes and dtype rules follow the CPU kernels (`etch_kernels::reduce`):
//! NaN is the largest value, ties keep the lower index first, cumsum of integers and bools
//! sums into int64 (wrapping) and floats accumulate in double.

use crate::Family;
use crate::context::{Launch, rows_config, with_device};
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result, ScalarType, TensorRef};
use etch_kernels::util::{same_dtype, wrap};

/// `struct RowArgs` in sort.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct RowArgs {
    a: u64,
    v: u64,
    ix: u64,
    work: u64,
    dta: i32,
    dtv: i32,
    es: i32,
    flag: i32,
    ndim: i32,
    pad: i32,
    rows: i64,
    n: i64,
    k: i64,
    m: i64,
    size: [i64; MAX_DIMS],
    st: [[i64; MAX_DIMS]; 3],
    dst: [i64; 3],
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for RowArgs {}

/// Rows sorted in shared memory when their padded length is at most this (16 bytes each).
const SHARED_MAX: usize = 2048;
/// Most scratch memory the long-row sort uses at once (one row per block).
const SCRATCH_MAX: usize = 256 << 20;

/// The row geometry of `a` along `dim`, with `v` and (optionally) `ix` written per row.
fn rows_args(
    op: &str,
    a: &TensorRef<'_>,
    v: &TensorRef<'_>,
    ix: Option<&TensorRef<'_>>,
    dim: usize,
) -> Result<RowArgs> {
    check_rank(op, a.dim())?;
    let mut r = RowArgs {
        a: ptr(a),
        v: ptr(v),
        ix: ix.map_or(0, ptr),
        work: 0,
        dta: dt_code(op, a.dtype())?,
        dtv: dt_code(op, v.dtype())?,
        es: a.dtype().element_size() as i32,
        flag: 0,
        ndim: a.dim() as i32,
        pad: 0,
        rows: 1,
        n: 1,
        k: 1,
        m: 1,
        size: [1; MAX_DIMS],
        st: [[0; MAX_DIMS]; 3],
        dst: [0; 3],
    };
    let ts: [Option<&TensorRef<'_>>; 3] = [Some(a), Some(v), ix];
    for (j, t) in ts.iter().enumerate() {
        let Some(t) = t else { continue };
        for (d, &s) in t.strides().iter().enumerate().take(MAX_DIMS) {
            r.st[j][d] = s as i64;
        }
        if a.dim() > 0 {
            r.dst[j] = t.strides()[dim] as i64;
        }
    }
    for (d, &s) in a.sizes().iter().enumerate() {
        r.size[d] = if d == dim { 1 } else { s as i64 };
    }
    if a.dim() > 0 {
        r.n = a.sizes()[dim] as i64;
    }
    r.rows = r.size[..a.dim()].iter().product();
    Ok(r)
}

/// `cumsum`: args [self, dim, dtype?, out].
pub(crate) fn cumsum_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::cumsum.out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let dtype = match ctx.opt_int(2)? {
        None => None,
        Some(v) => Some(ScalarType::from_i8(v as i8)?),
    };
    let out = ctx.resize_out(3, a.sizes())?;
    let want = dtype.unwrap_or(if a.dtype().is_floating() {
        a.dtype()
    } else {
        ScalarType::Long
    });
    same_dtype(OP, want, out.dtype())?;
    same_device(OP, &[&out, &a])?;
    if a.numel() == 0 {
        return Ok(());
    }
    let mut r = rows_args(OP, &a, &out, None, dim)?;
    r.flag = want.is_floating() as i32;
    let threads = (r.n as u64).next_power_of_two().clamp(32, 1024) as u32;
    let cfg = rows_config(r.rows as usize, threads);
    with_device(ctx, out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Sort, "cumsum")?;
        let mut args = [arg(&mut r)];
        // SAFETY: the pointers are live device memory sized for the row geometry; the
        // argument matches `cumsum(RowArgs a)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

/// Sorts every row of `r` (`r.flag`: descending) and writes the first `r.k` of each.
fn sort_rows(
    ctx: &KernelContext<'_>,
    dev: etch_core::Device,
    mut r: RowArgs,
    key: ScalarType,
) -> Result<()> {
    let name = ctx.op_name();
    if r.rows == 0 || r.k == 0 {
        return Ok(());
    }
    let m = (r.n as usize).next_power_of_two();
    r.m = m as i64;
    let threads = (m / 2).clamp(32, 1024) as u32;
    let fname = if key.is_floating() {
        "sort_f64"
    } else {
        "sort_i64"
    };
    let per_row = m
        .checked_mul(16)
        .ok_or_else(|| Error::invalid_argument(format!("{name}: row of {m} elements too long")))?;
    with_device(ctx, dev, |mut l: Launch<'_>| {
        let rows = r.rows.clamp(1, 1 << 30) as usize;
        let (blocks, shared) = if m <= SHARED_MAX {
            (rows, per_row as u32)
        } else {
            let blocks = rows.min((SCRATCH_MAX / per_row).max(1));
            r.work = l.scratch(blocks * per_row)?;
            (blocks, 0)
        };
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: shared,
        };
        let f = l.function(Family::Sort, fname)?;
        let mut args = [arg(&mut r)];
        // SAFETY: the pointers are live device memory sized for the row geometry; the
        // scratch holds `blocks` rows of `m` keys and ids; the argument matches
        // `sort_*(RowArgs a)`.
        unsafe { l.launch_with(f, cfg, &mut args) }
    })
}

fn check_indices_out(op: &str, t: &TensorRef<'_>) -> Result<()> {
    if t.dtype() != ScalarType::Long {
        return Err(Error::invalid_argument(format!(
            "{op}: indices must be int64, got {}",
            t.dtype()
        )));
    }
    Ok(())
}

/// Shared body of `sort.values` and `sort.values_stable`.
fn sort(
    ctx: &mut KernelContext<'_>,
    op: &str,
    dim_i: usize,
    desc_i: usize,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let dim = wrap(op, ctx.int(dim_i)?, a.dim())?;
    let descending = ctx.bool(desc_i)?;
    let vals = ctx.resize_out(out_i, a.sizes())?;
    let idxs = ctx.resize_out(out_i + 1, a.sizes())?;
    same_dtype(op, a.dtype(), vals.dtype())?;
    check_indices_out(op, &idxs)?;
    same_device(op, &[&vals, &a, &idxs])?;
    if a.numel() == 0 {
        return Ok(());
    }
    let mut r = rows_args(op, &a, &vals, Some(&idxs), dim)?;
    r.flag = descending as i32;
    r.k = r.n;
    sort_rows(ctx, vals.device(), r, a.dtype())
}

/// `sort.values`: args [self, dim, descending, values, indices].
pub(crate) fn sort_values(ctx: &mut KernelContext<'_>) -> Result<()> {
    sort(ctx, "aten::sort.values", 1, 2, 3)
}

/// `sort.values_stable`: args [self, stable, dim, descending, values, indices].
pub(crate) fn sort_values_stable(ctx: &mut KernelContext<'_>) -> Result<()> {
    sort(ctx, "aten::sort.values_stable", 2, 3, 4)
}

/// `topk`: args [self, k, dim, largest, sorted, values, indices]. Results are always
/// sorted.
pub(crate) fn topk_values(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::topk.values";
    let a = ctx.tensor(0)?;
    let k = ctx.int(1)?;
    let dim = wrap(OP, ctx.int(2)?, a.dim())?;
    let largest = ctx.bool(3)?;
    let n = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    if k < 0 || k as usize > n {
        return Err(Error::invalid_argument(format!(
            "{OP}: k={k} out of range for a dim of size {n}"
        )));
    }
    let mut osz = etch_kernels::util::Shape::from_slice(a.sizes())?;
    if a.dim() > 0 {
        osz[dim] = k as usize;
    }
    let vals = ctx.resize_out(5, &osz)?;
    let idxs = ctx.resize_out(6, &osz)?;
    same_dtype(OP, a.dtype(), vals.dtype())?;
    check_indices_out(OP, &idxs)?;
    same_device(OP, &[&vals, &a, &idxs])?;
    if a.numel() == 0 || k == 0 {
        return Ok(());
    }
    let mut r = rows_args(OP, &a, &vals, Some(&idxs), dim)?;
    r.flag = largest as i32;
    r.k = k;
    sort_rows(ctx, vals.device(), r, a.dtype())
}
