//! Primitive ops on sizes and scalars (`sym_size`, `executorch_prim::*`, `et_view`), with
//! Python semantics: int ⊕ int stays int, `//` and `%` floor, `/` is always a float.

use crate::shape::infer_size;
use crate::util::*;
use etch_core::{EValue, Error, KernelContext, KernelRegistry, Result, Scalar, ScalarType};

/// `sym_size.int`: args [self, dim, ret].
fn sym_size(ctx: &mut KernelContext<'_>) -> Result<()> {
    let t = ctx.tensor(0)?;
    let d = wrap("aten::sym_size.int", ctx.int(1)?, t.dim())?;
    let v = t.sizes().get(d).copied().unwrap_or(1);
    ctx.set_int(2, v as i64)
}

/// `sym_stride.int`: args [self, dim, ret].
fn sym_stride(ctx: &mut KernelContext<'_>) -> Result<()> {
    let t = ctx.tensor(0)?;
    let d = wrap("aten::sym_stride.int", ctx.int(1)?, t.dim())?;
    let v = t.strides().get(d).copied().unwrap_or(1);
    ctx.set_int(2, v as i64)
}

/// `sym_numel`: args [self, ret].
fn sym_numel(ctx: &mut KernelContext<'_>) -> Result<()> {
    let n = ctx.tensor(0)?.numel();
    ctx.set_int(1, n as i64)
}

/// `_local_scalar_dense`: args [self, ret]; the one element as an Int, Double or Bool.
fn local_scalar_dense(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "aten::_local_scalar_dense";
    let t = ctx.tensor(0)?;
    if t.numel() != 1 {
        return Err(Error::invalid_argument(format!(
            "{OP}: expected one element, got shape {:?}",
            t.sizes()
        )));
    }
    let s = AnySlice::of(OP, &t)?;
    match t.dtype() {
        ScalarType::Bool => ctx.set_bool(1, s.get::<i64>(0) != 0),
        d if d.is_floating() => ctx.set_double(1, s.get::<f64>(0)),
        _ => ctx.set_int(1, s.get::<i64>(0)),
    }
}

/// `et_view`: args [self, size, out]; `out` becomes a view of `self`'s memory.
fn et_view(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "executorch_prim::et_view";
    let t = ctx.tensor(0)?;
    require_contiguous(OP, "self", &t)?;
    let sizes = infer_size(OP, ctx.int_list(1)?, t.numel())?;
    let src = *t.imp();
    ctx.alias_out(2, &src, &sizes)
}

fn num(ctx: &KernelContext<'_>, op: &str, i: usize) -> Result<Scalar> {
    match ctx.value(i)? {
        EValue::Int(v) => Ok(Scalar::Int(*v)),
        EValue::Bool(b) => Ok(Scalar::Int(*b as i64)),
        EValue::Double(v) => Ok(Scalar::Double(*v)),
        v => Err(Error::invalid_type(format!(
            "{op}: argument {i} is {}, expected a scalar",
            v.tag().name()
        ))),
    }
}

fn set_scalar(ctx: &mut KernelContext<'_>, i: usize, s: Scalar) -> Result<()> {
    match s {
        Scalar::Int(v) => ctx.set_int(i, v),
        Scalar::Double(v) => ctx.set_double(i, v),
        Scalar::Bool(b) => ctx.set_bool(i, b),
    }
}

/// Applies `fi` when both are ints, else `ff` on doubles; result at arg 2.
fn arith(
    ctx: &mut KernelContext<'_>,
    op: &str,
    fi: fn(i64, i64) -> Option<i64>,
    ff: fn(f64, f64) -> f64,
) -> Result<()> {
    let (a, b) = (num(ctx, op, 0)?, num(ctx, op, 1)?);
    let r = match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => Scalar::Int(fi(x, y).ok_or_else(|| {
            Error::invalid_argument(format!("{op}: integer division or modulo by zero"))
        })?),
        _ => Scalar::Double(ff(a.to_f64(), b.to_f64())),
    };
    set_scalar(ctx, 2, r)
}

fn cmp(
    ctx: &mut KernelContext<'_>,
    op: &str,
    fi: fn(i64, i64) -> bool,
    ff: fn(f64, f64) -> bool,
) -> Result<()> {
    let (a, b) = (num(ctx, op, 0)?, num(ctx, op, 1)?);
    let r = match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => fi(x, y),
        _ => ff(a.to_f64(), b.to_f64()),
    };
    ctx.set_bool(2, r)
}

fn floordiv_i(x: i64, y: i64) -> Option<i64> {
    if y == 0 {
        return None;
    }
    Some(<i64 as Compute>::floor_div(x, y))
}
fn mod_i(x: i64, y: i64) -> Option<i64> {
    if y == 0 {
        return None;
    }
    Some(<i64 as Compute>::remainder(x, y))
}

macro_rules! prim_arith {
    ($($f:ident, $n:literal, $fi:expr, $ff:expr);* $(;)?) => {$(
        fn $f(ctx: &mut KernelContext<'_>) -> Result<()> {
            arith(ctx, $n, $fi, $ff)
        }
    )*};
}
prim_arith!(
    add, "executorch_prim::add.Scalar", |x, y| Some(x.wrapping_add(y)), |x, y| x + y;
    sub, "executorch_prim::sub.Scalar", |x, y| Some(x.wrapping_sub(y)), |x, y| x - y;
    mul, "executorch_prim::mul.Scalar", |x, y| Some(x.wrapping_mul(y)), |x, y| x * y;
    floordiv, "executorch_prim::floordiv.Scalar", floordiv_i, |x, y| (x / y).floor();
    modulo, "executorch_prim::mod.Scalar", mod_i, <f64 as Compute>::remainder;
    sym_max, "executorch_prim::sym_max.Scalar", |x, y| Some(x.max(y)), f64::max;
    sym_min, "executorch_prim::sym_min.Scalar", |x, y| Some(x.min(y)), f64::min;
);

macro_rules! prim_cmp {
    ($($f:ident, $n:literal, $op:tt);* $(;)?) => {$(
        fn $f(ctx: &mut KernelContext<'_>) -> Result<()> {
            cmp(ctx, $n, |x, y| x $op y, |x, y| x $op y)
        }
    )*};
}
prim_cmp!(
    eq, "executorch_prim::eq.Scalar", ==;
    gt, "executorch_prim::gt.Scalar", >;
    lt, "executorch_prim::lt.Scalar", <;
    ge, "executorch_prim::ge.Scalar", >=;
    le, "executorch_prim::le.Scalar", <=;
);

fn truediv(ctx: &mut KernelContext<'_>) -> Result<()> {
    const OP: &str = "executorch_prim::truediv.Scalar";
    let (a, b) = (num(ctx, OP, 0)?, num(ctx, OP, 1)?);
    if !b.is_floating() && b.to_i64() == 0 {
        return Err(Error::invalid_argument(format!("{OP}: division by zero")));
    }
    ctx.set_double(2, a.to_f64() / b.to_f64())
}

/// One-argument prim ops: result at arg 1.
fn unary(ctx: &mut KernelContext<'_>, op: &str, f: fn(Scalar) -> Scalar) -> Result<()> {
    let a = num(ctx, op, 0)?;
    set_scalar(ctx, 1, f(a))
}

fn neg(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, "executorch_prim::neg.Scalar", |a| match a {
        Scalar::Int(v) => Scalar::Int(v.wrapping_neg()),
        o => Scalar::Double(-o.to_f64()),
    })
}
fn sym_float(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, "executorch_prim::sym_float.Scalar", |a| {
        Scalar::Double(a.to_f64())
    })
}
fn sym_int(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, "executorch_prim::sym_int.Scalar", |a| {
        Scalar::Int(a.to_i64())
    })
}
fn ceil(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, "executorch_prim::ceil.Scalar", |a| {
        Scalar::Int(a.to_f64().ceil() as i64)
    })
}
fn trunc(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, "executorch_prim::trunc.Scalar", |a| {
        Scalar::Int(a.to_f64().trunc() as i64)
    })
}
fn round(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, "executorch_prim::round.Scalar", |a| match a {
        Scalar::Int(v) => Scalar::Int(v),
        o => Scalar::Int(o.to_f64().round_ties_even() as i64),
    })
}
fn sym_not(ctx: &mut KernelContext<'_>) -> Result<()> {
    let a = num(ctx, "executorch_prim::sym_not.Scalar", 0)?;
    ctx.set_bool(1, a.to_f64() == 0.0)
}

/// This module's kernels (the overload-less names too, since the emitter drops `default`).
fn list() -> &'static [(&'static str, etch_core::KernelFn)] {
    &[
        ("aten::sym_size.int", sym_size),
        ("aten::sym_stride.int", sym_stride),
        ("aten::sym_numel", sym_numel),
        ("aten::sym_numel.default", sym_numel),
        ("aten::_local_scalar_dense", local_scalar_dense),
        ("aten::_local_scalar_dense.default", local_scalar_dense),
        ("executorch_prim::et_view", et_view),
        ("executorch_prim::et_view.default", et_view),
        ("executorch_prim::add.Scalar", add),
        ("executorch_prim::sub.Scalar", sub),
        ("executorch_prim::mul.Scalar", mul),
        ("executorch_prim::floordiv.Scalar", floordiv),
        ("executorch_prim::floordiv.int", floordiv),
        ("executorch_prim::truediv.Scalar", truediv),
        ("executorch_prim::mod.Scalar", modulo),
        ("executorch_prim::mod.int", modulo),
        ("executorch_prim::sym_max.Scalar", sym_max),
        ("executorch_prim::sym_min.Scalar", sym_min),
        ("executorch_prim::eq.Scalar", eq),
        ("executorch_prim::gt.Scalar", gt),
        ("executorch_prim::lt.Scalar", lt),
        ("executorch_prim::ge.Scalar", ge),
        ("executorch_prim::le.Scalar", le),
        ("executorch_prim::neg.Scalar", neg),
        ("executorch_prim::sym_float.Scalar", sym_float),
        ("executorch_prim::sym_int.Scalar", sym_int),
        ("executorch_prim::ceil.Scalar", ceil),
        ("executorch_prim::trunc.Scalar", trunc),
        ("executorch_prim::round.Scalar", round),
        ("executorch_prim::sym_not.Scalar", sym_not),
    ]
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    for &(n, f) in list() {
        reg.register(n, f)?;
    }
    Ok(())
}

/// The kernels that read only tensor metadata and scalars (every one but
/// `_local_scalar_dense`, which reads data): they run on the host for tensors on any
/// device, so a device's registry lists them too.
pub fn metadata_kernels() -> Vec<(&'static str, etch_core::KernelFn)> {
    list()
        .iter()
        .filter(|(n, _)| !n.starts_with("aten::_local_scalar_dense"))
        .copied()
        .collect()
}
