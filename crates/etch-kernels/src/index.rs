//! Indexing: `embedding`, `index_select`, `gather`, `index.Tensor`. Every index is checked
//! against its dimension; an out-of-range index is an error, never an out-of-bounds read.

use crate::dispatch_all;
use crate::shape::{Strided, copy_strided};
use crate::util::*;
use etch_core::{Error, KernelContext, KernelRegistry, MAX_DIMS, Result, TensorRef};

/// `embedding`: args [weight, indices, padding_idx, scale_grad_by_freq, sparse, out].
fn embedding_out(ctx: &mut KernelContext<'_>) -> Result<()> {
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
    let mut out = ctx.resize_out(5, &osz)?;
    same_dtype(OP, w.dtype(), out.dtype())?;
    require_contiguous(OP, "weight", &w)?;
    require_contiguous(OP, "indices", &ix)?;
    require_contiguous(OP, "out", &out)?;
    let idx = Indices::of(OP, &ix)?;
    for i in 0..ix.numel() {
        let j = idx.get(i);
        if j < 0 || j as usize >= v {
            return Err(Error::invalid_argument(format!(
                "{OP}: index {j} is out of range for an embedding of {v} rows"
            )));
        }
    }
    dispatch_all!(w.dtype(), OP, "weight", |T| {
        let ws = w.data::<T>()?;
        let o = out.data_mut::<T>()?;
        for i in 0..ix.numel() {
            let j = idx.get(i) as usize;
            o[i * d..(i + 1) * d].copy_from_slice(&ws[j * d..(j + 1) * d]);
        }
        Ok(())
    })
}

/// `index_select`: args [self, dim, index, out].
fn index_select_out(ctx: &mut KernelContext<'_>) -> Result<()> {
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
    let idx = Indices::of(OP, &ix)?;
    let n = ix.numel();
    let mut osz = Shape::from_slice(a.sizes())?;
    let size = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    if a.dim() > 0 {
        osz[dim] = n;
    }
    let mut out = ctx.resize_out(3, &osz)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let mut slice = Shape::from_slice(a.sizes())?;
    let (mut ss, os) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    let (sd, od) = if a.dim() == 0 {
        (0, 0)
    } else {
        (ss[dim], os[dim])
    };
    if a.dim() > 0 {
        slice[dim] = 1;
        ss[dim] = 0;
    }
    for i in 0..n {
        let j = check_index(OP, idx.get(i), size)?;
        let sv = Strided {
            offset: j * sd,
            strides: ss,
        };
        let dv = Strided {
            offset: i * od,
            strides: os,
        };
        copy_strided(OP, &a, &sv, &slice, &mut out, &dv)?;
    }
    Ok(())
}

/// `gather`: args [self, dim, index, sparse_grad, out].
fn gather_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::gather.out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let ix = ctx.tensor(2)?;
    let nd = a.dim().max(1);
    if ix.dim().max(1) != nd && ix.numel() > 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: index {:?} must have as many dims as self {:?}",
            ix.sizes(),
            a.sizes()
        )));
    }
    for d in 0..ix.dim() {
        if d != dim && ix.sizes()[d] > a.sizes().get(d).copied().unwrap_or(1) {
            return Err(Error::invalid_argument(format!(
                "{OP}: index {:?} is larger than self {:?} outside dim {dim}",
                ix.sizes(),
                a.sizes()
            )));
        }
    }
    let mut out = ctx.resize_out(4, ix.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let idx = Indices::of(OP, &ix)?;
    let size = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    for i in 0..ix.numel() {
        check_index(OP, idx.get(i), size)?;
    }
    let shape = Shape::from_slice(ix.sizes())?;
    let mut sa = Shape::from_slice(a.strides())?;
    let sd = if a.dim() == 0 { 0 } else { sa[dim] };
    if a.dim() > 0 {
        sa[dim] = 0;
    }
    let (si, so) = (
        Shape::from_slice(ix.strides())?,
        Shape::from_slice(out.strides())?,
    );
    if a.dim() == 0 {
        sa = Shape::filled(shape.len(), 0)?;
    }
    dispatch_all!(a.dtype(), OP, "self", |T| {
        let x = a.data::<T>()?;
        let o = out.data_mut::<T>()?;
        walk(
            &shape,
            [&sa, &si, &so],
            |[oa, oi, oo], len, [xa, xi, xo]| {
                for k in 0..len {
                    let j = idx.get(oi + k * xi);
                    let j = if j < 0 { j + size as i64 } else { j } as usize;
                    o[oo + k * xo] = x[oa + k * xa + j * sd];
                }
            },
        );
        Ok(())
    })
}

/// `index.Tensor`: args [self, indices (optional tensor list), out]. Integer index tensors
/// broadcast together; when the indexed dims are not adjacent the indexed result dims come
/// first, as in PyTorch. Boolean masks are not supported.
fn index_tensor_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::index.Tensor_out";
    let a = ctx.tensor(0)?;
    let nl = ctx.tensor_list_len(1)?;
    let nd = a.dim();
    if nl > nd {
        return Err(Error::invalid_argument(format!(
            "{OP}: {nl} indices for a {nd}-d tensor"
        )));
    }
    let mut idx: [Option<TensorRef<'_>>; MAX_DIMS] = [None; MAX_DIMS];
    let mut bshape = Shape::new();
    let (mut first, mut last, mut count) = (usize::MAX, 0usize, 0usize);
    for (d, slot) in idx.iter_mut().enumerate().take(nl) {
        if let Some(t) = ctx.opt_tensor_list_item(1, d)? {
            if t.dtype() == etch_core::ScalarType::Bool || t.dtype() == etch_core::ScalarType::Byte
            {
                return Err(Error::not_supported(format!("{OP}: boolean mask indices")));
            }
            Indices::of(OP, &t)?;
            bshape = if count == 0 {
                Shape::from_slice(t.sizes())?
            } else {
                broadcast_shape(OP, &bshape, t.sizes())?
            };
            first = first.min(d);
            last = d;
            count += 1;
            *slot = Some(t);
        }
    }
    if count == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: at least one index tensor is required"
        )));
    }
    let adjacent = last + 1 - first == count;
    // Out dims: for each, where it comes from (a self dim, or a broadcast-index dim).
    #[derive(Clone, Copy)]
    enum Src {
        SelfDim(usize),
        Bcast(usize),
    }
    let mut srcs = [Src::Bcast(0); MAX_DIMS];
    let mut osz = Shape::new();
    let insert_at = if adjacent { first } else { 0 };
    let mut push = |s: Src, n: usize, osz: &mut Shape| -> Result<()> {
        if osz.len() >= MAX_DIMS {
            return Err(Error::invalid_argument(format!(
                "{OP}: result has too many dims"
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
        if idx.get(d).is_some_and(|t| t.is_some()) {
            continue;
        }
        push(Src::SelfDim(d), a.sizes()[d], &mut osz)?;
    }
    let mut out = ctx.resize_out(2, &osz)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    // Per-index readers with strides broadcast to the index shape.
    let mut readers: [Option<(Indices<'_>, Shape)>; MAX_DIMS] = Default::default();
    for d in 0..nl {
        if let Some(t) = &idx[d] {
            readers[d] = Some((Indices::of(OP, t)?, bstrides(t, &bshape)));
        }
    }
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    let total = out.numel();
    let on = osz.len();
    dispatch_all!(a.dtype(), OP, "self", |T| {
        let x = a.data::<T>()?;
        let o = out.data_mut::<T>()?;
        let mut pos = [0usize; MAX_DIMS];
        for _ in 0..total {
            let (mut src, mut dst) = (0usize, 0usize);
            for k in 0..on {
                dst += pos[k] * so[k];
                if let Src::SelfDim(d) = srcs[k] {
                    src += pos[k] * sa[d];
                }
            }
            for d in 0..nl {
                if let Some((r, bs)) = &readers[d] {
                    let mut off = 0usize;
                    for k in 0..on {
                        if let Src::Bcast(b) = srcs[k] {
                            off += pos[k] * bs[b];
                        }
                    }
                    src += check_index(OP, r.get(off), a.sizes()[d])? * sa[d];
                }
            }
            o[dst] = x[src];
            for k in (0..on).rev() {
                pos[k] += 1;
                if pos[k] < osz[k] {
                    break;
                }
                pos[k] = 0;
            }
        }
        Ok(())
    })
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("aten::embedding.out", embedding_out)?;
    reg.register("aten::index_select.out", index_select_out)?;
    reg.register("aten::gather.out", gather_out)?;
    reg.register("aten::index.Tensor_out", index_tensor_out)?;
    Ok(())
}
