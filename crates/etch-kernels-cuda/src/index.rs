//! Indexing kernels (index.cu): `embedding`, `index_select`, `gather`, `scatter`,
//! `index.Tensor` and `index_put`, each an "indexed copy" over an iteration shape with up
//! to 16 index tensors (int64 or int32) read at strides over that shape. Argument checks,
//! output shapes and dtype rules follow the CPU kernels (`etch_kernels::index`); index
//! values live on the device, so the kernel checks them, records error 2 and skips the
//! element (reported by `check_device_errors`).
//!
//! Boolean (and uint8) masks are supported as in PyTorch: the result shape depends on the
//! mask's true count, so the mask is read back to the host (one synchronous copy per
//! mask) and its true elements' coordinates are uploaded as int64 index tensors.

use crate::context::{Launch, with_device};
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr, same_device};
use crate::{Family, cuda_err};
use etch_core::{DeviceType, Error, KernelContext, Result, ScalarType, TensorRef};
use etch_devices::cuda::CudaAllocator;
use etch_kernels::util::{Shape, broadcast_shape, broadcast_strides, same_dtype, wrap};

/// `struct IdxArgs` in index.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct IdxArgs {
    dst: u64,
    src: u64,
    err: u64,
    dt: i32,
    es: i32,
    nidx: i32,
    ndim: i32,
    put: i32,
    accumulate: i32,
    size: [i64; MAX_DIMS],
    dst_st: [i64; MAX_DIMS],
    src_st: [i64; MAX_DIMS],
    ix: [u64; MAX_DIMS],
    ixdt: [i32; MAX_DIMS],
    ixneg: [i32; MAX_DIMS],
    ixn: [i64; MAX_DIMS],
    ixs: [i64; MAX_DIMS],
    ist: [[i64; MAX_DIMS]; MAX_DIMS],
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for IdxArgs {}

/// One index operand of an indexed copy.
struct Ix {
    ptr: u64,
    dt: i32,
    /// Negative values count from the end of the dim.
    neg: bool,
    /// Size of the indexed dim.
    n: usize,
    /// Element stride of the indexed dim in the indexed operand.
    stride: i64,
    /// Strides of the index values over the iteration shape.
    st: [i64; MAX_DIMS],
}

fn index_dtype(op: &str, t: &TensorRef<'_>) -> Result<i32> {
    match t.dtype() {
        ScalarType::Long | ScalarType::Int => dt_code(op, t.dtype()),
        other => Err(Error::invalid_argument(format!(
            "{op}: indices must be int64 or int32, got {other}"
        ))),
    }
}

fn strides_of(s: &[usize]) -> [i64; MAX_DIMS] {
    let mut r = [0i64; MAX_DIMS];
    for (d, &v) in s.iter().enumerate().take(MAX_DIMS) {
        r[d] = v as i64;
    }
    r
}

impl Ix {
    /// Index tensor `t` whose dims are the first `t.dim()` dims of the iteration shape.
    fn leading(op: &str, t: &TensorRef<'_>, neg: bool, n: usize, stride: usize) -> Result<Ix> {
        check_rank(op, t.dim())?;
        Ok(Ix {
            ptr: ptr(t),
            dt: index_dtype(op, t)?,
            neg,
            n,
            stride: stride as i64,
            st: strides_of(t.strides()),
        })
    }
}

/// An indexed copy: `put` false: `dst[pos] = src[pos + indexed]`; true:
/// `dst[pos + indexed] = src[pos]` (`+=` when `accumulate`).
struct Copy<'a> {
    dst: &'a TensorRef<'a>,
    src: u64,
    sizes: &'a [usize],
    dst_st: [i64; MAX_DIMS],
    src_st: [i64; MAX_DIMS],
    put: bool,
    accumulate: bool,
}

fn run(ctx: &KernelContext<'_>, c: &Copy<'_>, ixs: &[Ix]) -> Result<()> {
    let name = ctx.op_name();
    check_rank(name, c.sizes.len())?;
    if ixs.len() > MAX_DIMS {
        return Err(Error::not_supported(format!(
            "{name}: at most {MAX_DIMS} index tensors"
        )));
    }
    let n: usize = c.sizes.iter().product();
    if n == 0 {
        return Ok(());
    }
    let dt = c.dst.dtype();
    let mut a = IdxArgs {
        dst: ptr(c.dst),
        src: c.src,
        err: 0,
        dt: dt_code(name, dt)?,
        es: dt.element_size() as i32,
        nidx: ixs.len() as i32,
        ndim: c.sizes.len() as i32,
        put: c.put as i32,
        accumulate: c.accumulate as i32,
        size: strides_of(c.sizes),
        dst_st: c.dst_st,
        src_st: c.src_st,
        ix: [0; MAX_DIMS],
        ixdt: [0; MAX_DIMS],
        ixneg: [0; MAX_DIMS],
        ixn: [0; MAX_DIMS],
        ixs: [0; MAX_DIMS],
        ist: [[0; MAX_DIMS]; MAX_DIMS],
    };
    for (j, x) in ixs.iter().enumerate() {
        a.ix[j] = x.ptr;
        a.ixdt[j] = x.dt;
        a.ixneg[j] = x.neg as i32;
        a.ixn[j] = x.n as i64;
        a.ixs[j] = x.stride;
        a.ist[j] = x.st;
    }
    let mut n = n as i64;
    with_device(ctx, c.dst.device(), |mut l: Launch<'_>| {
        a.err = l.err_ptr();
        let f = l.function(Family::Index, "index_copy")?;
        let mut args = [arg(&mut n), arg(&mut a)];
        // SAFETY: every pointer is live device memory of this device; the strides and
        // sizes stay inside the tensors (checked above), index values are checked in the
        // kernel; the arguments match `index_copy(i64 n, IdxArgs a)`.
        unsafe { l.launch(f, n, &mut args) }
    })
}

/// Copies `a` into `out` (same sizes and dtype).
fn copy_self(ctx: &KernelContext<'_>, a: &TensorRef<'_>, out: &TensorRef<'_>) -> Result<()> {
    if a.numel() == 0 || a.data_ptr() == out.data_ptr() && a.strides() == out.strides() {
        return Ok(());
    }
    crate::elementwise::cast_into(ctx, a, out)
}

/// `embedding`: args [weight, indices, padding_idx, scale_grad_by_freq, sparse, out].
pub(crate) fn embedding_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::embedding.out";
    let w = ctx.tensor(0)?;
    let ix = ctx.tensor(1)?;
    if w.dim() != 2 {
        return Err(Error::invalid_argument(format!(
            "{OP}: weight must be 2-D, got {:?}",
            w.sizes()
        )));
    }
    let (v, d) = (w.sizes()[0], w.sizes()[1]);
    let mut osz = Shape::from_slice(ix.sizes())?;
    osz.push(d)?;
    let out = ctx.resize_out(5, &osz)?;
    same_dtype(OP, w.dtype(), out.dtype())?;
    same_device(OP, &[&out, &w, &ix])?;
    check_rank(OP, osz.len())?;
    let x = Ix::leading(OP, &ix, false, v, w.strides()[0])?;
    let mut src_st = [0i64; MAX_DIMS];
    src_st[ix.dim()] = w.strides()[1] as i64;
    let c = Copy {
        dst: &out,
        src: ptr(&w),
        sizes: &osz,
        dst_st: strides_of(out.strides()),
        src_st,
        put: false,
        accumulate: false,
    };
    run(ctx, &c, &[x])
}

/// `index_select`: args [self, dim, index, out].
pub(crate) fn index_select_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::index_select.out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let ix = ctx.tensor(2)?;
    if ix.dim() > 1 {
        return Err(Error::invalid_argument(format!(
            "{OP}: index must be 0-D or 1-D, got {:?}",
            ix.sizes()
        )));
    }
    let dt = index_dtype(OP, &ix)?;
    let n = ix.numel();
    let mut osz = Shape::from_slice(a.sizes())?;
    if a.dim() > 0 {
        osz[dim] = n;
    }
    let out = ctx.resize_out(3, &osz)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    same_device(OP, &[&out, &a, &ix])?;
    let ixst = ix.strides().first().copied().unwrap_or(0) as i64;
    let mut x = Ix {
        ptr: ptr(&ix),
        dt,
        neg: false,
        n: 1,
        stride: 0,
        st: [0; MAX_DIMS],
    };
    if a.dim() == 0 {
        // A 0-d self: every index must be 0; each writes the one element.
        x.st[0] = ixst;
        let c = Copy {
            dst: &out,
            src: ptr(&a),
            sizes: &[n],
            dst_st: [0; MAX_DIMS],
            src_st: [0; MAX_DIMS],
            put: false,
            accumulate: false,
        };
        return run(ctx, &c, &[x]);
    }
    x.n = a.sizes()[dim];
    x.stride = a.strides()[dim] as i64;
    x.st[dim] = ixst;
    let mut src_st = strides_of(a.strides());
    src_st[dim] = 0;
    let c = Copy {
        dst: &out,
        src: ptr(&a),
        sizes: &osz,
        dst_st: strides_of(out.strides()),
        src_st,
        put: false,
        accumulate: false,
    };
    run(ctx, &c, &[x])
}

/// Shape checks shared by gather and scatter (as the CPU kernels make them).
fn gather_scatter_checks(
    op: &str,
    a: &TensorRef<'_>,
    dim: usize,
    ix: &TensorRef<'_>,
    src: Option<&TensorRef<'_>>,
) -> Result<()> {
    let nd = a.dim().max(1);
    let src_bad = src.is_some_and(|s| s.dim().max(1) != nd);
    if ix.numel() > 0 && (ix.dim().max(1) != nd || src_bad) {
        return Err(Error::invalid_argument(format!(
            "{op}: index {:?} must have as many dims as self {:?}",
            ix.sizes(),
            a.sizes()
        )));
    }
    for d in 0..ix.dim() {
        let s = src.map_or(usize::MAX, |s| s.sizes().get(d).copied().unwrap_or(1));
        let n = a.sizes().get(d).copied().unwrap_or(1);
        if ix.sizes()[d] > s || (d != dim && ix.sizes()[d] > n) {
            return Err(Error::invalid_argument(format!(
                "{op}: index {:?} is larger than self {:?} (or src) outside dim {dim}",
                ix.sizes(),
                a.sizes()
            )));
        }
    }
    Ok(())
}

/// Strides of `t` over the first dims of an iteration shape, `dim` zeroed (all zero for a
/// 0-d tensor).
fn strides_without(t: &TensorRef<'_>, dim: usize) -> [i64; MAX_DIMS] {
    let mut s = strides_of(t.strides());
    if t.dim() > 0 {
        s[dim] = 0;
    }
    s
}

/// `gather`: args [self, dim, index, sparse_grad, out].
pub(crate) fn gather_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::gather.out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let ix = ctx.tensor(2)?;
    gather_scatter_checks(OP, &a, dim, &ix, None)?;
    let out = ctx.resize_out(4, ix.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    same_device(OP, &[&out, &a, &ix])?;
    let (n, stride) = if a.dim() == 0 {
        (1, 0)
    } else {
        (a.sizes()[dim], a.strides()[dim])
    };
    let x = Ix::leading(OP, &ix, false, n, stride)?;
    let c = Copy {
        dst: &out,
        src: ptr(&a),
        sizes: ix.sizes(),
        dst_st: strides_of(out.strides()),
        src_st: strides_without(&a, dim),
        put: false,
        accumulate: false,
    };
    run(ctx, &c, &[x])
}

/// `scatter.src_out`: args [self, dim, index, src, out].
pub(crate) fn scatter_src_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::scatter.src_out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let ix = ctx.tensor(2)?;
    let src = ctx.tensor(3)?;
    same_dtype(OP, a.dtype(), src.dtype())?;
    gather_scatter_checks(OP, &a, dim, &ix, Some(&src))?;
    let out = ctx.resize_out(4, a.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    same_device(OP, &[&out, &a, &ix, &src])?;
    let (n, stride) = if a.dim() == 0 {
        (1, 0)
    } else {
        (a.sizes()[dim], out.strides()[dim])
    };
    let x = Ix::leading(OP, &ix, false, n, stride)?;
    copy_self(ctx, &a, &out)?;
    let src_st = if src.dim() == 0 {
        [0; MAX_DIMS]
    } else {
        strides_of(src.strides())
    };
    let c = Copy {
        dst: &out,
        src: ptr(&src),
        sizes: ix.sizes(),
        dst_st: strides_without(&out, dim),
        src_st,
        put: true,
        accumulate: false,
    };
    run(ctx, &c, &[x])
}

/// Where a dim of an indexing result comes from.
#[derive(Clone, Copy)]
enum Src {
    SelfDim(usize),
    Bcast(usize),
}

fn is_mask(t: &TensorRef<'_>) -> bool {
    t.dtype() == ScalarType::Bool || t.dtype() == ScalarType::Byte
}

/// The plan of `self[indices]` (PyTorch advanced indexing), as the CPU kernel builds it:
/// index tensors and masks broadcast together; a mask over `d` dims acts as `d` 1-D index
/// tensors holding its true elements' coordinates.
struct Plan {
    osz: Shape,
    srcs: [Src; MAX_DIMS],
    /// Per indexed self dim: (self dim, index pointer or coordinate offset, dtype,
    /// strides over the broadcast shape, coordinates of a mask).
    readers: Vec<(usize, Reader, Shape)>,
    /// Coordinates of the masks' true elements (uploaded before the launch).
    coords: Vec<i64>,
}

#[derive(Clone, Copy)]
enum Reader {
    Tensor(u64, i32),
    Coords(usize),
}

impl Plan {
    fn new(op: &str, ctx: &KernelContext<'_>, list_i: usize, sizes: &[usize]) -> Result<Plan> {
        let nl = ctx.tensor_list_len(list_i)?;
        let nd = sizes.len();
        if nl > nd {
            return Err(Error::invalid_argument(format!(
                "{op}: {nl} indices for a {nd}-d tensor"
            )));
        }
        let mut items = Vec::new();
        let mut coords = Vec::new();
        let mut bshape = Shape::new();
        let (mut first, mut last, mut count, mut dim) = (usize::MAX, 0usize, 0usize, 0usize);
        for j in 0..nl {
            let Some(t) = ctx.opt_tensor_list_item(list_i, j)? else {
                dim += 1;
                continue;
            };
            let (span, shape, reader) = if is_mask(&t) {
                if t.dim() == 0 {
                    return Err(Error::invalid_argument(format!(
                        "{op}: a 0-d mask index is not supported"
                    )));
                }
                let end = dim + t.dim();
                if end > nd || sizes[dim..end] != *t.sizes() {
                    return Err(Error::invalid_argument(format!(
                        "{op}: mask of shape {:?} does not match dims {dim}.. of self {sizes:?}",
                        t.sizes()
                    )));
                }
                let start = coords.len();
                let c = mask_coords(ctx, &t, &mut coords)?;
                (
                    t.dim(),
                    Shape::from_slice(&[c])?,
                    (Reader::Coords(start), c),
                )
            } else {
                let dt = index_dtype(op, &t)?;
                let r = Reader::Tensor(ptr(&t), dt);
                (1, Shape::from_slice(t.sizes())?, (r, 0))
            };
            bshape = if count == 0 {
                shape
            } else {
                broadcast_shape(op, &bshape, &shape)?
            };
            first = first.min(dim);
            last = dim + span - 1;
            count += span;
            items.push((dim, t, reader));
            dim += span;
        }
        if dim > nd {
            return Err(Error::invalid_argument(format!(
                "{op}: {nl} indices index {dim} dims of a {nd}-d tensor"
            )));
        }
        if count == 0 {
            return Err(Error::invalid_argument(format!(
                "{op}: at least one index tensor is required"
            )));
        }
        let mut readers = Vec::new();
        let mut indexed = [false; MAX_DIMS];
        for (d, t, (r, c)) in &items {
            match r {
                Reader::Coords(start) => {
                    let st = broadcast_strides(&[*c], &[1], &bshape);
                    for k in 0..t.dim() {
                        readers.push((d + k, Reader::Coords(start + k * c), st));
                        indexed[d + k] = true;
                    }
                }
                Reader::Tensor(..) => {
                    readers.push((*d, *r, etch_kernels::util::bstrides(t, &bshape)));
                    indexed[*d] = true;
                }
            }
        }
        let adjacent = last + 1 - first == count;
        let insert_at = if adjacent { first } else { 0 };
        let mut srcs = [Src::Bcast(0); MAX_DIMS];
        let mut osz = Shape::new();
        let mut push = |s: Src, n: usize, osz: &mut Shape| -> Result<()> {
            if osz.len() >= MAX_DIMS {
                return Err(Error::invalid_argument(format!(
                    "{op}: result has too many dims"
                )));
            }
            srcs[osz.len()] = s;
            osz.push(n)
        };
        for d in 0..nd {
            if d == insert_at {
                for (k, &b) in bshape.iter().enumerate() {
                    push(Src::Bcast(k), b, &mut osz)?;
                }
            }
            if !indexed[d] {
                push(Src::SelfDim(d), sizes[d], &mut osz)?;
            }
        }
        Ok(Plan {
            osz,
            srcs,
            readers,
            coords,
        })
    }

    /// The strides over the result shape of an operand with `strides` along self's dims
    /// (0 on broadcast dims).
    fn self_strides(&self, strides: &[usize]) -> [i64; MAX_DIMS] {
        let mut s = [0i64; MAX_DIMS];
        for (k, src) in self.srcs.iter().enumerate().take(self.osz.len()) {
            if let Src::SelfDim(d) = *src {
                s[k] = strides[d] as i64;
            }
        }
        s
    }

    /// The index operands, reading coordinates at `coords_ptr`; `strides` are those of the
    /// indexed tensor.
    fn ixs(&self, sizes: &[usize], strides: &[usize], coords_ptr: u64) -> Vec<Ix> {
        self.readers
            .iter()
            .map(|(d, r, bs)| {
                let mut st = [0i64; MAX_DIMS];
                for (k, src) in self.srcs.iter().enumerate().take(self.osz.len()) {
                    if let Src::Bcast(b) = *src {
                        st[k] = bs[b] as i64;
                    }
                }
                let (p, dt) = match *r {
                    Reader::Tensor(p, dt) => (p, dt),
                    Reader::Coords(start) => (coords_ptr + 8 * start as u64, 4),
                };
                Ix {
                    ptr: p,
                    dt,
                    neg: true,
                    n: sizes[*d],
                    stride: strides[*d] as i64,
                    st,
                }
            })
            .collect()
    }
}

/// Runs `f` with the CUDA allocator behind `ctx`'s CUDA device.
fn with_alloc<R>(
    ctx: &KernelContext<'_>,
    f: impl FnOnce(&CudaAllocator) -> Result<R>,
) -> Result<R> {
    let alloc = ctx.devices()?.require(DeviceType::Cuda)?;
    let cuda = alloc
        .as_any()
        .downcast_ref::<CudaAllocator>()
        .ok_or_else(|| {
            Error::not_supported(format!(
                "{}: CUDA kernels need the CUDA allocator",
                ctx.op_name()
            ))
        })?;
    f(cuda)
}

/// Reads `mask` back and appends the coordinates of its true elements, dim by dim (count
/// values per dim); returns the count. The one host synchronisation of these kernels:
/// the result's shape depends on the mask's contents.
fn mask_coords(
    ctx: &KernelContext<'_>,
    mask: &TensorRef<'_>,
    coords: &mut Vec<i64>,
) -> Result<usize> {
    let (sizes, strides) = (mask.sizes(), mask.strides());
    let numel = mask.numel();
    if numel == 0 {
        return Ok(0);
    }
    let span = 1 + sizes
        .iter()
        .zip(strides)
        .map(|(&n, &s)| (n - 1) * s)
        .sum::<usize>();
    let mut bytes = vec![0u8; span];
    use etch_core::DeviceAllocator;
    with_alloc(ctx, |c| {
        c.copy_device_to_host(&mut bytes, mask.data_ptr(), mask.device().index)
    })
    .map_err(|e| cuda_err(&format!("{}: read mask", ctx.op_name()), e))?;
    let d = sizes.len();
    let offset_of = |mut li: usize| {
        let mut off = 0;
        for k in (0..d).rev() {
            off += (li % sizes[k]) * strides[k];
            li /= sizes[k];
        }
        off
    };
    let trues: Vec<usize> = (0..numel).filter(|&li| bytes[offset_of(li)] != 0).collect();
    let count = trues.len();
    let start = coords.len();
    coords.resize(start + count * d, 0);
    for (j, &li) in trues.iter().enumerate() {
        let mut rest = li;
        for k in (0..d).rev() {
            coords[start + k * count + j] = (rest % sizes[k]) as i64;
            rest /= sizes[k];
        }
    }
    Ok(count)
}

/// Runs an indexed copy of a plan: uploads the mask coordinates (if any) into the scratch
/// buffer, then launches.
fn run_plan(
    ctx: &KernelContext<'_>,
    plan: &Plan,
    c: &Copy<'_>,
    indexed: &TensorRef<'_>,
) -> Result<()> {
    let mut coords_ptr = 0u64;
    if !plan.coords.is_empty() && plan.osz.iter().product::<usize>() > 0 {
        let nbytes = plan.coords.len() * 8;
        coords_ptr = with_device(ctx, c.dst.device(), |mut l| l.scratch(nbytes))?;
        let bytes: Vec<u8> = plan.coords.iter().flat_map(|v| v.to_ne_bytes()).collect();
        use etch_core::DeviceAllocator;
        let dev = c.dst.device().index;
        with_alloc(ctx, |a| {
            a.copy_host_to_device(coords_ptr as usize as *mut u8, &bytes, dev)
        })
        .map_err(|e| cuda_err(&format!("{}: upload mask coordinates", ctx.op_name()), e))?;
    }
    let ixs = plan.ixs(indexed.sizes(), indexed.strides(), coords_ptr);
    run(ctx, c, &ixs)
}

/// `index.Tensor`: args [self, indices (optional tensor list), out].
pub(crate) fn index_tensor_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::index.Tensor_out";
    let a = ctx.tensor(0)?;
    check_rank(OP, a.dim())?;
    let plan = Plan::new(OP, ctx, 1, a.sizes())?;
    let out = ctx.resize_out(2, &plan.osz)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    same_device(OP, &[&out, &a])?;
    let c = Copy {
        dst: &out,
        src: ptr(&a),
        sizes: &plan.osz,
        dst_st: strides_of(out.strides()),
        src_st: plan.self_strides(a.strides()),
        put: false,
        accumulate: false,
    };
    run_plan(ctx, &plan, &c, &a)
}

/// `index_put`: args [self, indices, values, accumulate, out]: `out` is `self` with
/// `out[indices] = values` (`+=` when accumulating, atomically); `values` broadcasts to
/// the indexed shape.
pub(crate) fn index_put_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::index_put.out";
    let a = ctx.tensor(0)?;
    let v = ctx.tensor(2)?;
    let accumulate = ctx.bool(3)?;
    check_rank(OP, a.dim())?;
    let plan = Plan::new(OP, ctx, 1, a.sizes())?;
    same_dtype(OP, a.dtype(), v.dtype())?;
    let vsz = broadcast_shape(OP, &plan.osz, v.sizes())?;
    if vsz.as_ref() as &[usize] != plan.osz.as_ref() as &[usize] {
        return Err(Error::invalid_argument(format!(
            "{OP}: values {:?} do not broadcast to the indexed shape {:?}",
            v.sizes(),
            &plan.osz[..]
        )));
    }
    let out = ctx.resize_out(4, a.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    same_device(OP, &[&out, &a, &v])?;
    copy_self(ctx, &a, &out)?;
    let c = Copy {
        dst: &out,
        src: ptr(&v),
        sizes: &plan.osz,
        dst_st: plan.self_strides(out.strides()),
        src_st: crate::elementwise::bstrides(&v, &plan.osz),
        put: true,
        accumulate,
    };
    run_plan(ctx, &plan, &c, &out)
}
