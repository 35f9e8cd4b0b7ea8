//! Copies, view-like copies, concatenation/splitting and tensor factories.
//!
//! Everything here goes through [`copy_strided`], which reads the source through (possibly
//! permuted, broadcast or offset) strides and writes the destination through its own
//! strides, so any dim order (channels-last included) is handled, and converts dtypes when
//! source and destination differ.

use crate::dispatch_all;
use crate::util::*;
use etch_core::{
    Element, Error, KernelContext, KernelRegistry, Result, Scalar, ScalarType, TensorRef,
};

/// A strided window into a tensor: element offset plus per-dim strides.
#[derive(Clone, Copy, Debug)]
pub struct Strided {
    /// Offset of the first element.
    pub offset: usize,
    /// Strides in elements, one per dim of the iteration shape.
    pub strides: Shape,
}

impl Strided {
    /// The whole tensor, through its own strides.
    pub fn of(t: &TensorRef<'_>) -> Result<Self> {
        Ok(Strided {
            offset: 0,
            strides: Shape::from_slice(t.strides())?,
        })
    }
}

/// Copies `sizes` elements from `src` (through `sv`) to `dst` (through `dv`), converting the
/// dtype when the two differ.
pub fn copy_strided(
    op: &str,
    src: &TensorRef<'_>,
    sv: &Strided,
    sizes: &[usize],
    dst: &mut TensorRef<'_>,
    dv: &Strided,
) -> Result<()> {
    if sizes.contains(&0) {
        return Ok(());
    }
    let oob = || Error::internal(format!("{op}: copy window out of bounds"));
    if src.dtype() == dst.dtype() {
        return dispatch_all!(src.dtype(), op, "input", |T| {
            let s = src.data::<T>()?.get(sv.offset..).ok_or_else(oob)?;
            let d = dst.data_mut::<T>()?.get_mut(dv.offset..).ok_or_else(oob)?;
            copy1(sizes, s, &sv.strides, d, &dv.strides);
            Ok(())
        });
    }
    let s = AnySlice::of(op, src)?;
    let mut d = AnySliceMut::of(op, dst)?;
    let as_int = !src.dtype().is_floating() && !dst.dtype().is_floating();
    if src.numel() <= sv.offset || dst.numel() <= dv.offset {
        return Err(oob());
    }
    walk(
        sizes,
        [&sv.strides[..], &dv.strides[..]],
        |[os, od], len, [xs, xd]| {
            for i in 0..len {
                let (a, b) = (sv.offset + os + i * xs, dv.offset + od + i * xd);
                if as_int {
                    d.set(b, s.get::<i64>(a));
                } else {
                    d.set(b, s.get::<f64>(a));
                }
            }
        },
    );
    Ok(())
}

/// Copies all of `src` into `dst` (same sizes), converting dtype and dim order.
pub fn copy_all(op: &str, src: &TensorRef<'_>, dst: &mut TensorRef<'_>) -> Result<()> {
    if src.sizes() != dst.sizes() {
        return Err(Error::invalid_argument(format!(
            "{op}: shape mismatch: {:?} vs {:?}",
            src.sizes(),
            dst.sizes()
        )));
    }
    let sizes = Shape::from_slice(src.sizes())?;
    copy_strided(op, src, &Strided::of(src)?, &sizes, dst, &Strided::of(dst)?)
}

/// Converts a scalar to element type `T` the way PyTorch fills tensors.
pub fn scalar_to<T: Element>(s: Scalar) -> T {
    if T::SCALAR.is_floating() || T::SCALAR == ScalarType::Bool {
        T::from_f64(s.to_f64())
    } else {
        T::from_i64(s.to_i64())
    }
}

/// Fills every element of `out` with `s`.
pub fn fill(op: &str, out: &mut TensorRef<'_>, s: Scalar) -> Result<()> {
    if out.dtype() == ScalarType::Bool && s.is_floating() {
        // Fine: non-zero floats are true.
    } else if !out.dtype().is_floating() && s.is_floating() && out.dtype() != ScalarType::Bool {
        let v = s.to_f64();
        if v.fract() != 0.0 || !v.is_finite() {
            return Err(Error::invalid_argument(format!(
                "{op}: cannot fill a {} tensor with {v}",
                out.dtype()
            )));
        }
    }
    dispatch_all!(out.dtype(), op, "out", |T| {
        let v = scalar_to::<T>(s);
        out.data_mut::<T>()?.fill(v);
        Ok(())
    })
}

/// Resolves a view size list (one entry may be -1) against `numel`.
pub fn infer_size(op: &str, size: &[i64], numel: usize) -> Result<Shape> {
    let mut out = Shape::new();
    let mut infer = None;
    let mut known = 1usize;
    for (i, &s) in size.iter().enumerate() {
        if s == -1 {
            if infer.is_some() {
                return Err(Error::invalid_argument(format!(
                    "{op}: only one dimension can be -1 in {size:?}"
                )));
            }
            infer = Some(i);
            out.push(1)?;
        } else if s < 0 {
            return Err(Error::invalid_argument(format!(
                "{op}: invalid size {s} in {size:?}"
            )));
        } else {
            known = known
                .checked_mul(s as usize)
                .ok_or_else(|| Error::invalid_argument(format!("{op}: size {size:?} overflows")))?;
            out.push(s as usize)?;
        }
    }
    match infer {
        Some(i) => {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(Error::invalid_argument(format!(
                    "{op}: shape {size:?} is invalid for {numel} elements"
                )));
            }
            out[i] = numel / known;
        }
        None if known != numel => {
            return Err(Error::invalid_argument(format!(
                "{op}: shape {size:?} is invalid for {numel} elements"
            )));
        }
        None => {}
    }
    Ok(out)
}

/// The data-touching primitives the shape kernels are written in. The CPU implements them
/// with host loops ([`Host`]); a device crate implements them with its kernels, so both
/// share every argument check and output-shape rule of this module.
pub trait Mover {
    /// Copies `sizes` elements from `src` (through `sv`) to `dst` (through `dv`),
    /// converting the dtype when the two differ.
    fn copy_strided(
        ctx: &KernelContext<'_>,
        op: &str,
        src: &TensorRef<'_>,
        sv: &Strided,
        sizes: &[usize],
        dst: &mut TensorRef<'_>,
        dv: &Strided,
    ) -> Result<()>;
    /// Fills every element of `out` with `s` (errors as [`fill`]).
    fn fill(ctx: &KernelContext<'_>, op: &str, out: &mut TensorRef<'_>, s: Scalar) -> Result<()>;
    /// `out[i] = start + i * step`, in integers when `all_int`, else in f64.
    fn arange(
        ctx: &KernelContext<'_>,
        op: &str,
        out: &mut TensorRef<'_>,
        start: Scalar,
        step: Scalar,
        all_int: bool,
    ) -> Result<()>;
    /// `out` = `a` reversed along the dims marked in `flipped` (same shape and dtype).
    fn flip(
        ctx: &KernelContext<'_>,
        op: &str,
        a: &TensorRef<'_>,
        out: &mut TensorRef<'_>,
        flipped: &[bool],
    ) -> Result<()>;
    /// Copies all of `src` into `dst` (same sizes), converting dtype and dim order.
    fn copy_all(
        ctx: &KernelContext<'_>,
        op: &str,
        src: &TensorRef<'_>,
        dst: &mut TensorRef<'_>,
    ) -> Result<()> {
        if src.sizes() != dst.sizes() {
            return Err(Error::invalid_argument(format!(
                "{op}: shape mismatch: {:?} vs {:?}",
                src.sizes(),
                dst.sizes()
            )));
        }
        let sizes = Shape::from_slice(src.sizes())?;
        let (sv, dv) = (Strided::of(src)?, Strided::of(dst)?);
        Self::copy_strided(ctx, op, src, &sv, &sizes, dst, &dv)
    }
}

/// The CPU's data primitives.
pub struct Host;

impl Mover for Host {
    fn copy_strided(
        _: &KernelContext<'_>,
        op: &str,
        src: &TensorRef<'_>,
        sv: &Strided,
        sizes: &[usize],
        dst: &mut TensorRef<'_>,
        dv: &Strided,
    ) -> Result<()> {
        copy_strided(op, src, sv, sizes, dst, dv)
    }
    fn fill(_: &KernelContext<'_>, op: &str, out: &mut TensorRef<'_>, s: Scalar) -> Result<()> {
        fill(op, out, s)
    }
    fn arange(
        _: &KernelContext<'_>,
        op: &str,
        out: &mut TensorRef<'_>,
        start: Scalar,
        step: Scalar,
        all_int: bool,
    ) -> Result<()> {
        let (s, st) = (start.to_f64(), step.to_f64());
        dispatch_all!(out.dtype(), op, "out", |T| {
            let o = out.data_mut::<T>()?;
            for (i, v) in o.iter_mut().enumerate() {
                *v = if all_int {
                    <T as Element>::from_i64(
                        start
                            .to_i64()
                            .wrapping_add((i as i64).wrapping_mul(step.to_i64())),
                    )
                } else {
                    <T as Element>::from_f64(s + i as f64 * st)
                };
            }
            Ok(())
        })
    }
    fn flip(
        _: &KernelContext<'_>,
        op: &str,
        a: &TensorRef<'_>,
        out: &mut TensorRef<'_>,
        flipped: &[bool],
    ) -> Result<()> {
        flip_host(op, a, out, flipped)
    }
}

fn view_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::view_copy.out";
    let a = ctx.tensor(0)?;
    let sizes = infer_size(OP, ctx.int_list(1)?, a.numel())?;
    let mut out = ctx.resize_out(2, &sizes)?;
    require_contiguous(OP, "self", &a)?;
    require_contiguous(OP, "out", &out)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    // Both are row-major: copy the elements as one flat run.
    let flat = Shape::from_slice(&[a.numel()])?;
    let unit = Strided {
        offset: 0,
        strides: Shape::from_slice(&[1])?,
    };
    M::copy_strided(ctx, OP, &a, &unit, &flat, &mut out, &unit)
}

fn permute_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::permute_copy.out";
    let a = ctx.tensor(0)?;
    let dims = ctx.dims(1)?;
    let n = a.dim();
    if dims.len() != n {
        return Err(Error::invalid_argument(format!(
            "{OP}: {} dims given for a {n}-d tensor",
            dims.len()
        )));
    }
    let mut seen = [false; etch_core::MAX_DIMS];
    let (mut sizes, mut strides) = (Shape::new(), Shape::new());
    for &d in dims.iter() {
        let d = wrap(OP, d, n)?;
        if seen[d] {
            return Err(Error::invalid_argument(format!(
                "{OP}: repeated dim in {dims:?}"
            )));
        }
        seen[d] = true;
        sizes.push(a.sizes()[d])?;
        strides.push(a.strides()[d])?;
    }
    let mut out = ctx.resize_out(2, &sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let dv = Strided::of(&out)?;
    M::copy_strided(
        ctx,
        OP,
        &a,
        &Strided { offset: 0, strides },
        &sizes,
        &mut out,
        &dv,
    )
}

fn transpose_impl<M: Mover>(
    ctx: &mut KernelContext<'_>,
    op: &str,
    d0: i64,
    d1: i64,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let n = a.dim();
    let (d0, d1) = if n == 0 {
        (0, 0)
    } else {
        (wrap(op, d0, n)?, wrap(op, d1, n)?)
    };
    let mut sizes = Shape::from_slice(a.sizes())?;
    let mut strides = Shape::from_slice(a.strides())?;
    if n > 0 {
        sizes.swap(d0, d1);
        strides.swap(d0, d1);
    }
    let mut out = ctx.resize_out(out_i, &sizes)?;
    same_dtype(op, a.dtype(), out.dtype())?;
    let dv = Strided::of(&out)?;
    M::copy_strided(
        ctx,
        op,
        &a,
        &Strided { offset: 0, strides },
        &sizes,
        &mut out,
        &dv,
    )
}

fn transpose_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (d0, d1) = (ctx.int(1)?, ctx.int(2)?);
    transpose_impl::<M>(ctx, "aten::transpose_copy.int_out", d0, d1, 3)
}

fn t_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::t_copy.out";
    if ctx.tensor(0)?.dim() > 2 {
        return Err(Error::invalid_argument(format!(
            "{OP}: self must be at most 2-D"
        )));
    }
    transpose_impl::<M>(ctx, OP, 0, -1, 1)
}

fn expand_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::expand_copy.out";
    let a = ctx.tensor(0)?;
    let size = ctx.dims(1)?;
    if size.len() < a.dim() {
        return Err(Error::invalid_argument(format!(
            "{OP}: cannot expand {:?} to {size:?}: fewer dims",
            a.sizes()
        )));
    }
    let lead = size.len() - a.dim();
    let mut sizes = Shape::new();
    for (i, &s) in size.iter().enumerate() {
        let v = if i >= lead {
            let cur = a.sizes()[i - lead];
            if s == -1 {
                cur
            } else if s < 0 || (cur != 1 && cur as i64 != s) {
                return Err(Error::invalid_argument(format!(
                    "{OP}: cannot expand {:?} to {size:?}",
                    a.sizes()
                )));
            } else {
                s as usize
            }
        } else if s < 0 {
            return Err(Error::invalid_argument(format!(
                "{OP}: -1 is not allowed for new leading dim {i} in {size:?}"
            )));
        } else {
            s as usize
        };
        sizes.push(v)?;
    }
    let mut out = ctx.resize_out(3, &sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let strides = bstrides(&a, &sizes);
    let dv = Strided::of(&out)?;
    M::copy_strided(
        ctx,
        OP,
        &a,
        &Strided { offset: 0, strides },
        &sizes,
        &mut out,
        &dv,
    )
}

/// Copies `a` into `out` reshaped to `sizes` where only size-1 dims were added or removed
/// (`keep[i]` maps each new dim to the old dim it came from, or `None` for a new 1).
fn reshape_ones<M: Mover>(
    ctx: &KernelContext<'_>,
    op: &str,
    a: &TensorRef<'_>,
    sizes: &[usize],
    keep: &[Option<usize>],
    out: &mut TensorRef<'_>,
) -> Result<()> {
    same_dtype(op, a.dtype(), out.dtype())?;
    let mut strides = Shape::new();
    for k in keep {
        strides.push(k.map(|d| a.strides()[d]).unwrap_or(0))?;
    }
    let dv = Strided::of(out)?;
    M::copy_strided(ctx, op, a, &Strided { offset: 0, strides }, sizes, out, &dv)
}

fn unsqueeze_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::unsqueeze_copy.out";
    let a = ctx.tensor(0)?;
    let d = wrap(OP, ctx.int(1)?, a.dim() + 1)?;
    let mut sizes = Shape::from_slice(a.sizes())?;
    sizes.insert(d, 1)?;
    let mut keep = [None; etch_core::MAX_DIMS];
    for (i, k) in keep.iter_mut().enumerate().take(sizes.len()) {
        *k = match i.cmp(&d) {
            std::cmp::Ordering::Less => Some(i),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(i - 1),
        };
    }
    let mut out = ctx.resize_out(2, &sizes)?;
    reshape_ones::<M>(ctx, OP, &a, &sizes, &keep[..sizes.len()], &mut out)
}

fn squeeze_impl<M: Mover>(
    ctx: &mut KernelContext<'_>,
    op: &str,
    dims: Option<&[i64]>,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let n = a.dim();
    let mut drop = [false; etch_core::MAX_DIMS];
    match dims {
        Some(ds) => {
            for &d in ds {
                if n == 0 {
                    wrap(op, d, 0)?;
                    continue;
                }
                let d = wrap(op, d, n)?;
                drop[d] = a.sizes()[d] == 1;
            }
        }
        None => {
            for d in 0..n {
                drop[d] = a.sizes()[d] == 1;
            }
        }
    }
    let mut sizes = Shape::new();
    let mut keep = [None; etch_core::MAX_DIMS];
    for d in 0..n {
        if !drop[d] {
            keep[sizes.len()] = Some(d);
            sizes.push(a.sizes()[d])?;
        }
    }
    let mut out = ctx.resize_out(out_i, &sizes)?;
    reshape_ones::<M>(ctx, op, &a, &sizes, &keep[..sizes.len()], &mut out)
}

fn squeeze_copy_dim_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = ctx.int(1)?;
    squeeze_impl::<M>(ctx, "aten::squeeze_copy.dim_out", Some(&[d]), 2)
}
fn squeeze_copy_dims_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let d = ctx.dims(1)?;
    squeeze_impl::<M>(ctx, "aten::squeeze_copy.dims_out", Some(&d), 2)
}
fn squeeze_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    squeeze_impl::<M>(ctx, "aten::squeeze_copy.out", None, 1)
}

/// Copy to `out` (resized to self's shape), converting dtype and dim order.
fn copy_to_out<M: Mover>(
    ctx: &mut KernelContext<'_>,
    op: &str,
    out_i: usize,
    same_type: bool,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let mut out = ctx.resize_out(out_i, a.sizes())?;
    if same_type {
        same_dtype(op, a.dtype(), out.dtype())?;
    }
    M::copy_all(ctx, op, &a, &mut out)
}

fn check_dim_order_arg(ctx: &KernelContext<'_>, op: &str, i: usize, out_i: usize) -> Result<()> {
    if let Some(order) = ctx.opt_int_list(i)? {
        let out = ctx.tensor(out_i)?;
        let matches = order.len() == out.dim()
            && order
                .iter()
                .zip(out.dim_order())
                .all(|(&a, &b)| a == b as i64);
        if !matches {
            return Err(Error::invalid_argument(format!(
                "{op}: dim_order {order:?} does not match the out tensor's {:?}",
                out.dim_order()
            )));
        }
    }
    Ok(())
}

fn clone_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    copy_to_out::<M>(ctx, "aten::clone.out", 2, true)
}
fn to_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    copy_to_out::<M>(ctx, "aten::_to_copy.out", 3, false)
}
fn to_dim_order_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "dim_order_ops::_to_dim_order_copy.out";
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    ctx.resize_out(3, &sizes)?;
    check_dim_order_arg(ctx, OP, 2, 3)?;
    copy_to_out::<M>(ctx, OP, 3, false)
}
fn clone_dim_order_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "dim_order_ops::_clone_dim_order.out";
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    ctx.resize_out(3, &sizes)?;
    check_dim_order_arg(ctx, OP, 2, 3)?;
    copy_to_out::<M>(ctx, OP, 3, true)
}
fn alias_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    copy_to_out::<M>(ctx, "aten::alias_copy.out", 1, true)
}
fn detach_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    copy_to_out::<M>(ctx, "aten::detach_copy.out", 1, true)
}

/// Broadcast-copies `src` into `dst` (dst's shape), converting dtype.
fn broadcast_copy<M: Mover>(
    ctx: &KernelContext<'_>,
    op: &str,
    src: &TensorRef<'_>,
    dst: &mut TensorRef<'_>,
) -> Result<()> {
    let sizes = Shape::from_slice(dst.sizes())?;
    let shape = broadcast_shape(op, src.sizes(), &sizes)?;
    if shape != sizes {
        return Err(Error::invalid_argument(format!(
            "{op}: src of shape {:?} does not broadcast to {:?}",
            src.sizes(),
            dst.sizes()
        )));
    }
    let sv = Strided {
        offset: 0,
        strides: bstrides(src, &sizes),
    };
    let dv = Strided::of(dst)?;
    M::copy_strided(ctx, op, src, &sv, &sizes, dst, &dv)
}

/// `copy(self, src, non_blocking)`: args [self, src, non_blocking, out].
fn copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::copy.out";
    let a = ctx.tensor(0)?;
    let src = ctx.tensor(1)?;
    let mut out = ctx.resize_out(3, a.sizes())?;
    broadcast_copy::<M>(ctx, OP, &src, &mut out)
}

/// In-place `self.copy_(src)`: args [self, src, non_blocking, ret].
fn copy_inplace<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::copy_";
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    let src = ctx.tensor(1)?;
    let mut dst = ctx.resize_out(0, &sizes)?;
    if std::ptr::eq(src.data_ptr(), dst.data_ptr())
        && src.strides() == dst.strides()
        && src.dtype() == dst.dtype()
    {
        return Ok(());
    }
    broadcast_copy::<M>(ctx, OP, &src, &mut dst)
}

/// Output shape of concatenating `n` tensors of list argument 0 along `dim`.
fn cat_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::cat.out";
    let n = ctx.tensor_list_len(0)?;
    let dim_arg = ctx.int(1)?;
    // PyTorch skips 1-D empty tensors (legacy behaviour).
    let skip = |t: &TensorRef<'_>| t.dim() == 1 && t.numel() == 0;
    let mut reference: Option<TensorRef<'_>> = None;
    for j in 0..n {
        let t = ctx.tensor_list_item(0, j)?;
        if !skip(&t) {
            reference = Some(t);
            break;
        }
    }
    let Some(r) = reference else {
        // Everything is empty: the out is empty too.
        let sizes = Shape::from_slice(&[0])?;
        ctx.resize_out(2, &sizes)?;
        return Ok(());
    };
    let nd = r.dim();
    if nd == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: zero-dimensional tensors cannot be concatenated"
        )));
    }
    let dim = wrap(OP, dim_arg, nd)?;
    let mut sizes = Shape::from_slice(r.sizes())?;
    let mut total = 0usize;
    for j in 0..n {
        let t = ctx.tensor_list_item(0, j)?;
        if skip(&t) {
            continue;
        }
        let ok = t.dim() == nd && (0..nd).all(|d| d == dim || t.sizes()[d] == r.sizes()[d]);
        if !ok {
            return Err(Error::invalid_argument(format!(
                "{OP}: tensor {j} of shape {:?} does not match {:?} outside dim {dim}",
                t.sizes(),
                r.sizes()
            )));
        }
        total += t.sizes()[dim];
    }
    sizes[dim] = total;
    let mut out = ctx.resize_out(2, &sizes)?;
    let ostrides = Shape::from_slice(out.strides())?;
    let mut at = 0usize;
    for j in 0..n {
        let t = ctx.tensor_list_item(0, j)?;
        if skip(&t) {
            continue;
        }
        check_cast(OP, t.dtype(), out.dtype())?;
        let dv = Strided {
            offset: at * ostrides[dim],
            strides: ostrides,
        };
        M::copy_strided(ctx, OP, &t, &Strided::of(&t)?, t.sizes(), &mut out, &dv)?;
        at += t.sizes()[dim];
    }
    Ok(())
}

fn stack_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::stack.out";
    let n = ctx.tensor_list_len(0)?;
    if n == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: expects a non-empty list"
        )));
    }
    let r = ctx.tensor_list_item(0, 0)?;
    let dim = wrap(OP, ctx.int(1)?, r.dim() + 1)?;
    let mut sizes = Shape::from_slice(r.sizes())?;
    sizes.insert(dim, n)?;
    let mut out = ctx.resize_out(2, &sizes)?;
    let ostrides = Shape::from_slice(out.strides())?;
    let mut inner = ostrides;
    inner.remove(dim);
    for j in 0..n {
        let t = ctx.tensor_list_item(0, j)?;
        if t.sizes() != r.sizes() {
            return Err(Error::invalid_argument(format!(
                "{OP}: tensor {j} has shape {:?}, expected {:?}",
                t.sizes(),
                r.sizes()
            )));
        }
        check_cast(OP, t.dtype(), out.dtype())?;
        let dv = Strided {
            offset: j * ostrides[dim],
            strides: inner,
        };
        M::copy_strided(ctx, OP, &t, &Strided::of(&t)?, t.sizes(), &mut out, &dv)?;
    }
    Ok(())
}

/// Copies consecutive chunks of `self` along `dim` into the tensors of list argument
/// `list_i`. List outputs cannot be resized through the kernel ABI, so they must already
/// have the right shapes.
fn split_into<M: Mover>(
    ctx: &mut KernelContext<'_>,
    op: &str,
    dim: usize,
    chunk: &dyn Fn(usize) -> usize,
    list_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    if dim >= a.dim() {
        return Err(Error::invalid_argument(format!(
            "{op}: expected a tensor of at least {} dims, got a {}-d one",
            dim + 1,
            a.dim()
        )));
    }
    let n = ctx.tensor_list_len(list_i)?;
    let mut at = 0usize;
    let sstrides = Shape::from_slice(a.strides())?;
    for j in 0..n {
        let len = chunk(j);
        // Chunks past the end would read outside the input.
        if at.checked_add(len).is_none_or(|end| end > a.sizes()[dim]) {
            return Err(Error::invalid_argument(format!(
                "{op}: split sizes run past the {} elements along dim {dim}",
                a.sizes()[dim]
            )));
        }
        let mut want = Shape::from_slice(a.sizes())?;
        want[dim] = len;
        // Dynamic shapes: outputs take the split's shape within their capacity.
        let mut out = ctx.resize_list_item(list_i, j, &want).map_err(|e| {
            Error::new(
                e.code(),
                format!(
                    "{op}: output {j} cannot take shape {want:?}: {}",
                    e.message()
                ),
            )
        })?;
        same_dtype(op, a.dtype(), out.dtype())?;
        let sv = Strided {
            offset: at * sstrides[dim],
            strides: sstrides,
        };
        let dv = Strided::of(&out)?;
        M::copy_strided(ctx, op, &a, &sv, &want, &mut out, &dv)?;
        at += len;
    }
    if at != a.sizes()[dim] {
        return Err(Error::invalid_argument(format!(
            "{op}: split sizes cover {at} of {} elements along dim {dim}",
            a.sizes()[dim]
        )));
    }
    Ok(())
}

fn split_with_sizes_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::split_with_sizes_copy.out";
    let a = ctx.tensor(0)?;
    let mut sizes = crate::scratch::take(0, 0i64); // scratch: the split sizes (pooled).
    sizes.extend_from_slice(ctx.int_list(1)?);
    let dim = wrap(OP, ctx.int(2)?, a.dim())?;
    if sizes.iter().any(|&s| s < 0) || sizes.len() != ctx.tensor_list_len(3)? {
        return Err(Error::invalid_argument(format!(
            "{OP}: split sizes {sizes:?} do not match the {} outputs",
            ctx.tensor_list_len(3)?
        )));
    }
    split_into::<M>(ctx, OP, dim, &|j| sizes[j] as usize, 3)
}

fn split_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::split_copy.Tensor_out";
    let a = ctx.tensor(0)?;
    let split = ctx.int(1)?;
    let dim = wrap(OP, ctx.int(2)?, a.dim())?;
    if split < 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: negative split size {split}"
        )));
    }
    if a.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: cannot split a 0-d tensor"
        )));
    }
    let total = a.sizes()[dim];
    let split = split as usize;
    split_into::<M>(
        ctx,
        OP,
        dim,
        &|j| total.saturating_sub(j * split).min(split),
        3,
    )
}

fn unbind_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::unbind_copy.int_out";
    let a = ctx.tensor(0)?;
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    if a.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: cannot unbind a 0-d tensor"
        )));
    }
    let n = ctx.tensor_list_len(2)?;
    if n != a.sizes()[dim] {
        return Err(Error::invalid_argument(format!(
            "{OP}: {n} outputs for a dim of size {}",
            a.sizes()[dim]
        )));
    }
    let mut sizes = Shape::from_slice(a.sizes())?;
    sizes.remove(dim);
    let mut strides = Shape::from_slice(a.strides())?;
    let step = strides[dim];
    strides.remove(dim);
    for j in 0..n {
        let mut out = ctx.resize_list_item(2, j, &sizes).map_err(|e| {
            Error::new(
                e.code(),
                format!(
                    "{OP}: output {j} cannot take shape {sizes:?}: {}",
                    e.message()
                ),
            )
        })?;
        same_dtype(OP, a.dtype(), out.dtype())?;
        let dv = Strided::of(&out)?;
        M::copy_strided(
            ctx,
            OP,
            &a,
            &Strided {
                offset: j * step,
                strides,
            },
            &sizes,
            &mut out,
            &dv,
        )?;
    }
    Ok(())
}

fn select_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::select_copy.int_out";
    let a = ctx.tensor(0)?;
    if a.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: cannot select from a 0-d tensor"
        )));
    }
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let idx = check_index(OP, ctx.int(2)?, a.sizes()[dim])?;
    let mut sizes = Shape::from_slice(a.sizes())?;
    sizes.remove(dim);
    let mut strides = Shape::from_slice(a.strides())?;
    let offset = idx * strides[dim];
    strides.remove(dim);
    let mut out = ctx.resize_out(3, &sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let dv = Strided::of(&out)?;
    M::copy_strided(
        ctx,
        OP,
        &a,
        &Strided { offset, strides },
        &sizes,
        &mut out,
        &dv,
    )
}

/// PyTorch's slice bounds: clamps `start`/`end` into `[0, n]`.
pub fn slice_bounds(start: Option<i64>, end: Option<i64>, n: usize) -> (usize, usize) {
    let n = n as i64;
    let norm = |v: i64| {
        let v = if v < 0 { v + n } else { v };
        v.clamp(0, n)
    };
    let s = norm(start.unwrap_or(0));
    let e = norm(end.unwrap_or(n)).max(s);
    (s as usize, e as usize)
}

fn slice_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::slice_copy.Tensor_out";
    let a = ctx.tensor(0)?;
    if a.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: cannot slice a 0-d tensor"
        )));
    }
    let dim = wrap(OP, ctx.int(1)?, a.dim())?;
    let (start, end) = slice_bounds(ctx.opt_int(2)?, ctx.opt_int(3)?, a.sizes()[dim]);
    let step = ctx.int(4)?;
    if step <= 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: step must be positive, got {step}"
        )));
    }
    let step = step as usize;
    let len = (end - start).div_ceil(step);
    let mut sizes = Shape::from_slice(a.sizes())?;
    sizes[dim] = len;
    let mut strides = Shape::from_slice(a.strides())?;
    let offset = if len > 0 { start * strides[dim] } else { 0 };
    strides[dim] *= step;
    let mut out = ctx.resize_out(5, &sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let dv = Strided::of(&out)?;
    M::copy_strided(
        ctx,
        OP,
        &a,
        &Strided { offset, strides },
        &sizes,
        &mut out,
        &dv,
    )
}

fn full_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::full.out";
    let sizes = to_sizes(OP, ctx.int_list(0)?)?;
    let v = ctx.scalar(1)?;
    let mut out = ctx.resize_out(2, &sizes)?;
    M::fill(ctx, OP, &mut out, v)
}
fn full_like_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::full_like.out";
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    let v = ctx.scalar(1)?;
    let mut out = ctx.resize_out(3, &sizes)?;
    M::fill(ctx, OP, &mut out, v)
}
fn zeros_like_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    let mut out = ctx.resize_out(2, &sizes)?;
    M::fill(ctx, "aten::zeros_like.out", &mut out, Scalar::Int(0))
}
fn ones_like_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    let mut out = ctx.resize_out(2, &sizes)?;
    M::fill(ctx, "aten::ones_like.out", &mut out, Scalar::Int(1))
}
fn fill_scalar_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    let v = ctx.scalar(1)?;
    let mut out = ctx.resize_out(2, &sizes)?;
    M::fill(ctx, "aten::fill.Scalar_out", &mut out, v)
}
fn fill_inplace<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let sizes = Shape::from_slice(ctx.tensor(0)?.sizes())?;
    let v = ctx.scalar(1)?;
    let mut out = ctx.resize_out(0, &sizes)?;
    M::fill(ctx, "aten::fill_.Scalar", &mut out, v)
}
fn scalar_tensor_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let v = ctx.scalar(0)?;
    let mut out = ctx.resize_out(1, &[])?;
    M::fill(ctx, "aten::scalar_tensor.out", &mut out, v)
}

fn arange_impl<M: Mover>(
    ctx: &mut KernelContext<'_>,
    op: &str,
    start: Scalar,
    end: Scalar,
    step: Scalar,
    out_i: usize,
) -> Result<()> {
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    if st == 0.0 || !s.is_finite() || !e.is_finite() || (st > 0.0 && e < s) || (st < 0.0 && e > s) {
        return Err(Error::invalid_argument(format!(
            "{op}: invalid range start={s}, end={e}, step={st}"
        )));
    }
    let all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
    let n = if all_int {
        let (s, e, st) = (
            start.to_i64() as i128,
            end.to_i64() as i128,
            step.to_i64() as i128,
        );
        ((e - s + st - st.signum()) / st).max(0) as usize
    } else {
        ((e - s) / st).ceil().max(0.0) as usize
    };
    let mut out = ctx.resize_out(out_i, &[n])?;
    M::arange(ctx, op, &mut out, start, step, all_int)
}

fn arange_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let end = ctx.scalar(0)?;
    arange_impl::<M>(
        ctx,
        "aten::arange.out",
        Scalar::Int(0),
        end,
        Scalar::Int(1),
        1,
    )
}
fn arange_start_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (s, e, st) = (ctx.scalar(0)?, ctx.scalar(1)?, ctx.scalar(2)?);
    arange_impl::<M>(ctx, "aten::arange.start_out", s, e, st, 3)
}

/// `as_strided_copy`: args [self, size, stride, storage_offset?, out]. Reads `self`'s
/// memory (in its memory order) through the given strides; every element read must lie
/// inside `self`.
fn as_strided_copy_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::as_strided_copy.out";
    let a = ctx.tensor(0)?;
    let sizes = to_sizes(OP, ctx.int_list(1)?)?;
    let strides = to_sizes(OP, ctx.int_list(2)?)?;
    let offset = ctx.opt_int(3)?.unwrap_or(0);
    if strides.len() != sizes.len() || offset < 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: size {sizes:?}, stride {strides:?} and offset {offset} do not match"
        )));
    }
    let offset = offset as usize;
    if !sizes.contains(&0) {
        let last = sizes
            .iter()
            .zip(strides.iter())
            .try_fold(offset, |acc, (&n, &st)| {
                (n - 1).checked_mul(st).and_then(|v| v.checked_add(acc))
            });
        if last.is_none_or(|l| l >= a.numel()) {
            return Err(Error::invalid_argument(format!(
                "{OP}: size {sizes:?}, stride {strides:?} and offset {offset} reach past the \
                 {} elements of the input",
                a.numel()
            )));
        }
    }
    let mut out = ctx.resize_out(4, &sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    let dv = Strided::of(&out)?;
    M::copy_strided(
        ctx,
        OP,
        &a,
        &Strided { offset, strides },
        &sizes,
        &mut out,
        &dv,
    )
}

/// `flip`: args [self, dims, out]. Reverses the order of elements along each of `dims`.
fn flip_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::flip.out";
    let a = ctx.tensor(0)?;
    let dims = ctx.dims(1)?;
    let nd = a.dim();
    let mut flipped = [false; etch_core::MAX_DIMS];
    for &d in dims.iter() {
        let d = wrap(OP, d, nd)?;
        if nd > 0 {
            if flipped[d] {
                return Err(Error::invalid_argument(format!(
                    "{OP}: dim {d} appears twice"
                )));
            }
            flipped[d] = true;
        }
    }
    let mut out = ctx.resize_out(2, a.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    if a.numel() == 0 {
        return Ok(());
    }
    M::flip(ctx, OP, &a, &mut out, &flipped[..nd])
}

/// `constant_pad_nd`: args [self, pad, value, out]. `pad` holds (before, after) pairs from
/// the last dim backwards; negative entries crop.
fn constant_pad_nd_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::constant_pad_nd.out";
    let a = ctx.tensor(0)?;
    let pad = ctx.dims(1)?;
    let value = ctx.scalar(2)?;
    let nd = a.dim();
    if pad.len() % 2 != 0 || pad.len() / 2 > nd {
        return Err(Error::invalid_argument(format!(
            "{OP}: padding {pad:?} does not fit a {nd}-D input"
        )));
    }
    let mut out_sizes = Shape::from_slice(a.sizes())?;
    let mut copy_sizes = out_sizes;
    let mut src_off = 0usize;
    let mut dst_start = [0usize; etch_core::MAX_DIMS];
    for (k, pr) in pad.chunks(2).enumerate() {
        let d = nd - 1 - k;
        let (before, after) = (pr[0], pr[1]);
        let n = a.sizes()[d] as i64;
        let o = n + before + after;
        let c = n - (-before).max(0) - (-after).max(0);
        if o < 0 {
            return Err(Error::invalid_argument(format!(
                "{OP}: padding {pad:?} gives a negative size for dim {d} of {:?}",
                a.sizes()
            )));
        }
        out_sizes[d] = o as usize;
        copy_sizes[d] = c.max(0) as usize;
        src_off += (-before).max(0) as usize * a.strides()[d];
        dst_start[d] = before.max(0) as usize;
    }
    let mut out = ctx.resize_out(3, &out_sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    M::fill(ctx, OP, &mut out, value)?;
    if copy_sizes.contains(&0) {
        return Ok(());
    }
    let dst_off = (0..nd).map(|d| dst_start[d] * out.strides()[d]).sum();
    let dv = Strided {
        offset: dst_off,
        strides: Shape::from_slice(out.strides())?,
    };
    let sv = Strided {
        offset: src_off,
        strides: Shape::from_slice(a.strides())?,
    };
    M::copy_strided(ctx, OP, &a, &sv, &copy_sizes, &mut out, &dv)
}

/// `slice_scatter`: args [self, src, dim, start?, end?, step, out]. `out` is `self` with
/// the slice `[start:end:step]` along `dim` replaced by `src`.
fn slice_scatter_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::slice_scatter.out";
    let a = ctx.tensor(0)?;
    let src = ctx.tensor(1)?;
    if a.dim() == 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: cannot slice a 0-d tensor"
        )));
    }
    let dim = wrap(OP, ctx.int(2)?, a.dim())?;
    let (start, end) = slice_bounds(ctx.opt_int(3)?, ctx.opt_int(4)?, a.sizes()[dim]);
    let step = ctx.int(5)?;
    if step <= 0 {
        return Err(Error::invalid_argument(format!(
            "{OP}: step must be positive, got {step}"
        )));
    }
    let step = step as usize;
    let len = (end - start).div_ceil(step);
    let mut want = Shape::from_slice(a.sizes())?;
    want[dim] = len;
    if src.sizes() != &want[..] {
        return Err(Error::invalid_argument(format!(
            "{OP}: src has shape {:?}, the slice has {want:?}",
            src.sizes()
        )));
    }
    let mut out = ctx.resize_out(6, a.sizes())?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    same_dtype(OP, a.dtype(), src.dtype())?;
    M::copy_all(ctx, OP, &a, &mut out)?;
    if len == 0 {
        return Ok(());
    }
    let mut strides = Shape::from_slice(out.strides())?;
    let offset = start * strides[dim];
    strides[dim] *= step;
    let sv = Strided::of(&src)?;
    M::copy_strided(
        ctx,
        OP,
        &src,
        &sv,
        &want,
        &mut out,
        &Strided { offset, strides },
    )
}

/// `repeat`: args [self, repeats, out]. `self` is tiled `repeats[i]` times along each dim
/// (leading dims of size 1 are added when `repeats` is longer than `self`'s rank).
fn repeat_out<M: Mover>(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::repeat.out";
    let a = ctx.tensor(0)?;
    let reps = to_sizes(OP, ctx.int_list(1)?)?;
    let nd = reps.len();
    if nd < a.dim() {
        return Err(Error::invalid_argument(format!(
            "{OP}: {nd} repeats for a {}-D input",
            a.dim()
        )));
    }
    let lead = nd - a.dim();
    let mut in_sizes = Shape::filled(nd, 1)?;
    let mut in_strides = Shape::filled(nd, 0)?;
    let mut out_sizes = Shape::filled(nd, 0)?;
    for d in 0..nd {
        if d >= lead {
            in_sizes[d] = a.sizes()[d - lead];
            in_strides[d] = a.strides()[d - lead];
        }
        out_sizes[d] = in_sizes[d]
            .checked_mul(reps[d])
            .ok_or_else(|| Error::invalid_argument(format!("{OP}: repeated size overflows")))?;
    }
    let mut out = ctx.resize_out(2, &out_sizes)?;
    same_dtype(OP, a.dtype(), out.dtype())?;
    if out.numel() == 0 {
        return Ok(());
    }
    let ostr = Shape::from_slice(out.strides())?;
    let sv = Strided {
        offset: 0,
        strides: in_strides,
    };
    // One copy of `self` per tile, tiles visited as an odometer over `reps`.
    let mut tile = [0usize; etch_core::MAX_DIMS];
    loop {
        let offset = (0..nd).map(|d| tile[d] * in_sizes[d] * ostr[d]).sum();
        M::copy_strided(
            ctx,
            OP,
            &a,
            &sv,
            &in_sizes,
            &mut out,
            &Strided {
                offset,
                strides: ostr,
            },
        )?;
        let mut d = nd;
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            tile[d] += 1;
            if tile[d] < reps[d] {
                break;
            }
            tile[d] = 0;
        }
    }
}

/// The CPU's flip: `out` = `a` reversed along the dims marked in `flipped`.
fn flip_host(op: &str, a: &TensorRef<'_>, out: &mut TensorRef<'_>, flipped: &[bool]) -> Result<()> {
    let nd = a.dim();
    let sizes = Shape::from_slice(a.sizes())?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    // Start at the far end of every flipped dim and step backwards through it.
    let mut start = 0usize;
    for d in 0..nd {
        if flipped[d] {
            start += (sizes[d] - 1) * sa[d];
        }
    }
    dispatch_all!(a.dtype(), op, "input", |T| {
        let x = a.data::<T>()?;
        let o = out.data_mut::<T>()?;
        let mut idx = [0usize; etch_core::MAX_DIMS];
        let (mut src, mut dst) = (start, 0usize);
        for _ in 0..a.numel() {
            o[dst] = x[src];
            let mut d = nd;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                dst += so[d];
                if flipped[d] {
                    src = src.wrapping_sub(sa[d]);
                } else {
                    src += sa[d];
                }
                if idx[d] < sizes[d] {
                    break;
                }
                idx[d] = 0;
                dst -= so[d] * sizes[d];
                if flipped[d] {
                    src = src.wrapping_add(sa[d] * sizes[d]);
                } else {
                    src -= sa[d] * sizes[d];
                }
            }
        }
        Ok(())
    })
}

/// The shape kernels written over the data primitives of `M`: the CPU registers them
/// with [`Host`], a device crate with its own [`Mover`].
pub fn kernels<M: Mover>() -> Vec<(&'static str, etch_core::KernelFn)> {
    vec![
        ("aten::view_copy.out", view_copy_out::<M>),
        ("aten::permute_copy.out", permute_copy_out::<M>),
        ("aten::transpose_copy.int_out", transpose_copy_out::<M>),
        ("aten::t_copy.out", t_copy_out::<M>),
        ("aten::expand_copy.out", expand_copy_out::<M>),
        ("aten::unsqueeze_copy.out", unsqueeze_copy_out::<M>),
        ("aten::squeeze_copy.dim_out", squeeze_copy_dim_out::<M>),
        ("aten::squeeze_copy.dims_out", squeeze_copy_dims_out::<M>),
        ("aten::squeeze_copy.out", squeeze_copy_out::<M>),
        ("aten::clone.out", clone_out::<M>),
        ("aten::_to_copy.out", to_copy_out::<M>),
        (
            "dim_order_ops::_to_dim_order_copy.out",
            to_dim_order_copy_out::<M>,
        ),
        (
            "dim_order_ops::_clone_dim_order.out",
            clone_dim_order_out::<M>,
        ),
        ("aten::alias_copy.out", alias_copy_out::<M>),
        ("aten::detach_copy.out", detach_copy_out::<M>),
        ("aten::copy.out", copy_out::<M>),
        ("aten::copy_", copy_inplace::<M>),
        ("aten::cat.out", cat_out::<M>),
        ("aten::stack.out", stack_out::<M>),
        (
            "aten::split_with_sizes_copy.out",
            split_with_sizes_copy_out::<M>,
        ),
        ("aten::split_copy.Tensor_out", split_copy_out::<M>),
        ("aten::unbind_copy.int_out", unbind_copy_out::<M>),
        ("aten::select_copy.int_out", select_copy_out::<M>),
        ("aten::slice_copy.Tensor_out", slice_copy_out::<M>),
        ("aten::full.out", full_out::<M>),
        ("aten::full_like.out", full_like_out::<M>),
        ("aten::zeros_like.out", zeros_like_out::<M>),
        ("aten::ones_like.out", ones_like_out::<M>),
        ("aten::fill.Scalar_out", fill_scalar_out::<M>),
        ("aten::fill_.Scalar", fill_inplace::<M>),
        ("aten::scalar_tensor.out", scalar_tensor_out::<M>),
        ("aten::arange.out", arange_out::<M>),
        ("aten::arange.start_out", arange_start_out::<M>),
        ("aten::as_strided_copy.out", as_strided_copy_out::<M>),
        ("aten::flip.out", flip_out::<M>),
        ("aten::constant_pad_nd.out", constant_pad_nd_out::<M>),
        ("aten::slice_scatter.out", slice_scatter_out::<M>),
        ("aten::repeat.out", repeat_out::<M>),
    ]
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    for (n, f) in kernels::<Host>() {
        reg.register(n, f)?;
    }
    Ok(())
}
