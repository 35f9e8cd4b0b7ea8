//! Indexing: `embedding`, `index_select`, `gather`, `index.Tensor` and `index_put` (integer
//! indices and boolean masks), `scatter`. Every index is checked against its dimension; an
//! out-of-range index is an error, never an out-of-bounds read.

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
        let j = check_plain_index(OP, idx.get(i), size)?;
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
        check_plain_index(OP, idx.get(i), size)?;
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
                    let j = idx.get(oi + k * xi) as usize;
                    o[oo + k * xo] = x[oa + k * xa + j * sd];
                }
            },
        );
        Ok(())
    })
}

/// `gather`/`scatter` indices: PyTorch rejects negative ones (no wrapping).
fn check_plain_index(op: &str, idx: i64, n: usize) -> Result<usize> {
    if idx < 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: index {idx} is out of bounds for a dimension of size {n}"
        )));
    }
    check_index(op, idx, n)
}

/// Where a dim of an indexing result comes from.
#[derive(Clone, Copy)]
enum Src {
    SelfDim(usize),
    Bcast(usize),
}

/// The index values of one indexed dim: an integer index tensor, or the coordinates along
/// that dim of a boolean mask's true elements (`coords[start..start + count]`).
enum Reader<'a> {
    Tensor(Indices<'a>),
    Coords(usize),
}

/// The plan of `self[indices]` (PyTorch advanced indexing). Integer index tensors and
/// masks broadcast together; a mask over `d` dims acts as `d` one-dimensional index tensors
/// (its true elements' coordinates, in row-major order), as in PyTorch.
struct IndexPlan<'a> {
    /// The result's shape.
    osz: Shape,
    srcs: [Src; MAX_DIMS],
    /// Per dim of `self`: its index values and their strides over the broadcast shape.
    readers: [Option<(Reader<'a>, Shape)>; MAX_DIMS],
    nd: usize,
    /// Coordinates of the masks' true elements.
    coords: crate::scratch::Scratch<i64>,
}

fn is_mask(t: &TensorRef<'_>) -> bool {
    t.dtype() == etch_core::ScalarType::Bool || t.dtype() == etch_core::ScalarType::Byte
}

/// Appends the coordinates of `mask`'s true elements, dim by dim (`count` values per dim),
/// and returns `count`.
fn mask_coords(
    op: &str,
    mask: &TensorRef<'_>,
    coords: &mut crate::scratch::Scratch<i64>,
) -> Result<usize> {
    let bytes: &[u8] = if mask.dtype() == etch_core::ScalarType::Bool {
        let b = mask.data::<Bool>()?;
        // SAFETY: `Bool` is a transparent `u8`.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), b.len()) }
    } else {
        mask.data::<u8>()?
    };
    let (sizes, strides) = (mask.sizes(), mask.strides());
    let d = sizes.len();
    let numel = mask.numel();
    let offset_of = |mut li: usize| {
        let mut off = 0;
        for k in (0..d).rev() {
            off += (li % sizes[k]) * strides[k];
            li /= sizes[k];
        }
        off
    };
    let count = (0..numel).filter(|&li| bytes[offset_of(li)] != 0).count();
    let start = coords.len();
    coords.resize(start + count * d, 0);
    let mut j = 0;
    for li in 0..numel {
        if bytes[offset_of(li)] == 0 {
            continue;
        }
        let mut rest = li;
        for k in (0..d).rev() {
            coords[start + k * count + j] = (rest % sizes[k]) as i64;
            rest /= sizes[k];
        }
        j += 1;
    }
    if j != count {
        return Err(Error::internal(format!("{op}: mask changed while read")));
    }
    Ok(count)
}

impl<'a> IndexPlan<'a> {
    /// Plans indexing a tensor of `sizes` with the optional tensor list at arg `list_i`.
    /// Integer index tensors and boolean (or uint8) masks broadcast together; when the
    /// indexed dims are not adjacent the indexed result dims come first, as in PyTorch.
    fn new(op: &str, ctx: &KernelContext<'a>, list_i: usize, sizes: &[usize]) -> Result<Self> {
        let nl = ctx.tensor_list_len(list_i)?;
        let nd = sizes.len();
        // Every item indexes at least one dim.
        if nl > nd {
            return Err(Error::invalid_argument(format!(
                "{op}: {nl} indices for a {nd}-d tensor"
            )));
        }
        // Per list item: the first self dim it indexes, and the tensor.
        let mut items: [Option<(usize, TensorRef<'a>)>; MAX_DIMS] = [None; MAX_DIMS];
        // Per list item: the mask's true count (masks only).
        let mut counts = [0usize; MAX_DIMS];
        // scratch: coordinates of the masks' true elements.
        let mut coords = crate::scratch::take(0, 0i64);
        let mut bshape = Shape::new();
        let (mut first, mut last, mut count) = (usize::MAX, 0usize, 0usize);
        let mut dim = 0usize;
        for j in 0..nl {
            let Some(t) = ctx.opt_tensor_list_item(list_i, j)? else {
                dim += 1;
                continue;
            };
            let (span, shape) = if is_mask(&t) {
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
                counts[j] = mask_coords(op, &t, &mut coords)?;
                (t.dim(), Shape::from_slice(&[counts[j]])?)
            } else {
                Indices::of(op, &t)?;
                (1, Shape::from_slice(t.sizes())?)
            };
            bshape = if count == 0 {
                shape
            } else {
                broadcast_shape(op, &bshape, &shape)?
            };
            first = first.min(dim);
            last = dim + span - 1;
            count += span;
            items[j] = Some((dim, t));
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
        let adjacent = last + 1 - first == count;
        let mut readers: [Option<(Reader<'a>, Shape)>; MAX_DIMS] = Default::default();
        let mut start = 0usize;
        for (j, item) in items.iter().enumerate().take(nl) {
            let Some((d, t)) = item else { continue };
            if is_mask(t) {
                let c = counts[j];
                let strides = broadcast_strides(&[c], &[1], &bshape);
                for k in 0..t.dim() {
                    readers[d + k] = Some((Reader::Coords(start + k * c), strides));
                }
                start += c * t.dim();
            } else {
                readers[*d] = Some((Reader::Tensor(Indices::of(op, t)?), bstrides(t, &bshape)));
            }
        }
        let mut srcs = [Src::Bcast(0); MAX_DIMS];
        let mut osz = Shape::new();
        let insert_at = if adjacent { first } else { 0 };
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
            if readers[d].is_some() {
                continue;
            }
            push(Src::SelfDim(d), sizes[d], &mut osz)?;
        }
        Ok(IndexPlan {
            osz,
            srcs,
            readers,
            nd,
            coords,
        })
    }

    /// Calls `f(position, offset)` for every result element in row-major order, where
    /// `offset` is the indexed element's offset in a tensor of `sizes` and `strides`.
    /// Every index is checked first.
    fn visit(
        &self,
        op: &str,
        sizes: &[usize],
        strides: &[usize],
        mut f: impl FnMut(&[usize], usize),
    ) -> Result<()> {
        let total: usize = self.osz.iter().product();
        let on = self.osz.len();
        let mut pos = [0usize; MAX_DIMS];
        // scratch: the source offset of every result element.
        let mut offs = crate::scratch::take(0, 0usize);
        offs.reserve(total);
        for pass in 0..2 {
            for t in 0..total {
                if pass == 0 {
                    let mut src = 0usize;
                    for k in 0..on {
                        if let Src::SelfDim(d) = self.srcs[k] {
                            src += pos[k] * strides[d];
                        }
                    }
                    for d in 0..self.nd {
                        if let Some((r, bs)) = &self.readers[d] {
                            let mut off = 0usize;
                            for k in 0..on {
                                if let Src::Bcast(b) = self.srcs[k] {
                                    off += pos[k] * bs[b];
                                }
                            }
                            let v = match r {
                                Reader::Tensor(ix) => ix.get(off),
                                Reader::Coords(start) => self.coords[start + off],
                            };
                            src += check_index(op, v, sizes[d])? * strides[d];
                        }
                    }
                    offs.push(src);
                } else {
                    f(&pos[..on], offs[t]);
                }
                for k in (0..on).rev() {
                    pos[k] += 1;
                    if pos[k] < self.osz[k] {
                        break;
                    }
                    pos[k] = 0;
                }
            }
        }
        Ok(())
    }
}

/// `index.Tensor`: args [self, indices (optional tensor list), out].
fn index_tensor_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::index.Tensor_out";
    let a = ctx.tensor(0)?;
    let plan = IndexPlan::new(OP, ctx, 1, a.sizes())?;
    let mut out = ctx.resize_out(2, &plan.osz)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let so = Shape::from_slice(out.strides())?;
    dispatch_all!(a.dtype(), OP, "self", |T| {
        let x = a.data::<T>()?;
        let o = out.data_mut::<T>()?;
        plan.visit(OP, a.sizes(), a.strides(), |pos, src| {
            let dst: usize = pos.iter().zip(so.iter()).map(|(p, s)| p * s).sum();
            o[dst] = x[src];
        })
    })
}

/// `index_put`: args [self, indices, values, accumulate, out]. `out` is `self` with
/// `out[indices] = values` (`+=` when accumulating); `values` broadcasts to the indexed
/// shape.
fn index_put_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::index_put.out";
    let a = ctx.tensor(0)?;
    let v = ctx.tensor(2)?;
    let accumulate = ctx.bool(3)?;
    let plan = IndexPlan::new(OP, ctx, 1, a.sizes())?;
    same_dtype(OP, a.dtype(), v.dtype())?;
    let vsz = broadcast_shape(OP, &plan.osz, v.sizes())?;
    if vsz.as_ref() as &[usize] != plan.osz.as_ref() as &[usize] {
        return Err(Error::invalid_argument(format!(
            "{OP}: values {:?} do not broadcast to the indexed shape {:?}",
            v.sizes(),
            &plan.osz[..]
        )));
    }
    let mut out = ctx.resize_out(4, a.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let sizes = Shape::from_slice(a.sizes())?;
    let dv = Strided::of(&out)?;
    copy_strided(OP, &a, &Strided::of(&a)?, &sizes, &mut out, &dv)?;
    let sv = bstrides(&v, &plan.osz);
    let so = Shape::from_slice(out.strides())?;
    dispatch_all!(a.dtype(), OP, "self", |T| {
        let y = v.data::<T>()?;
        let o = out.data_mut::<T>()?;
        plan.visit(OP, &sizes, &so, |pos, dst| {
            let src: usize = pos.iter().zip(sv.iter()).map(|(p, s)| p * s).sum();
            o[dst] = if accumulate {
                T::from_c(o[dst].to_c().add(y[src].to_c()))
            } else {
                y[src]
            };
        })
    })
}

/// `scatter.src_out`: args [self, dim, index, src, out]. `out` is `self` with
/// `out[..., index[i], ...] = src[i]` along `dim`.
fn scatter_src_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::scatter.src_out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let ix = ctx.tensor(2)?;
    let src = ctx.tensor(3)?;
    same_dtype(OP, a.dtype(), src.dtype())?;
    let nd = a.dim().max(1);
    if ix.numel() > 0 && (ix.dim().max(1) != nd || src.dim().max(1) != nd) {
        return Err(Error::invalid_argument(format!(
            "{OP}: index {:?} and src {:?} must have as many dims as self {:?}",
            ix.sizes(),
            src.sizes(),
            a.sizes()
        )));
    }
    for d in 0..ix.dim() {
        let s = src.sizes().get(d).copied().unwrap_or(1);
        let n = a.sizes().get(d).copied().unwrap_or(1);
        if ix.sizes()[d] > s || (d != dim && ix.sizes()[d] > n) {
            return Err(Error::invalid_argument(format!(
                "{OP}: index {:?} is larger than src {:?} or self {:?}",
                ix.sizes(),
                src.sizes(),
                a.sizes()
            )));
        }
    }
    let idx = Indices::of(OP, &ix)?;
    let size = if a.dim() == 0 { 1 } else { a.sizes()[dim] };
    for i in 0..ix.numel() {
        check_plain_index(OP, idx.get(i), size)?;
    }
    let mut out = ctx.resize_out(4, a.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let sizes = Shape::from_slice(a.sizes())?;
    let dv = Strided::of(&out)?;
    copy_strided(OP, &a, &Strided::of(&a)?, &sizes, &mut out, &dv)?;
    if ix.numel() == 0 {
        return Ok(());
    }
    let shape = Shape::from_slice(ix.sizes())?;
    let mut so = Shape::from_slice(out.strides())?;
    let sd = if a.dim() == 0 { 0 } else { so[dim] };
    if a.dim() > 0 {
        so[dim] = 0;
    } else {
        so = Shape::filled(shape.len(), 0)?;
    }
    let (si, ss) = (
        Shape::from_slice(ix.strides())?,
        if src.dim() == 0 {
            Shape::filled(shape.len(), 0)?
        } else {
            Shape::from_slice(src.strides())?
        },
    );
    dispatch_all!(a.dtype(), OP, "self", |T| {
        let y = src.data::<T>()?;
        let o = out.data_mut::<T>()?;
        walk(
            &shape,
            [&so, &si, &ss],
            |[oo, oi, os], len, [xo, xi, xs]| {
                for k in 0..len {
                    let j = idx.get(oi + k * xi) as usize;
                    o[oo + k * xo + j * sd] = y[os + k * xs];
                }
            },
        );
        Ok(())
    })
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("aten::embedding.out", embedding_out)?;
    reg.register("aten::index_select.out", index_select_out)?;
    reg.register("aten::gather.out", gather_out)?;
    reg.register("aten::index.Tensor_out", index_tensor_out)?;
    reg.register("aten::index_put.out", index_put_out)?;
    reg.register("aten::scatter.src_out", scatter_src_out)?;
    Ok(())
}
