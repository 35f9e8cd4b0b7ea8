//! Unary elementwise operators: float math (`exp`, `gelu`, ...) and ops defined on every
//! real type (`neg`, `abs`, `relu`, `clamp`, ...).

use crate::binary::{Class, class_of};
use crate::util::*;
use crate::{dispatch_all, dispatch_float};
use etch_core::{Error, KernelContext, KernelRegistry, Result, Scalar, ScalarType, TensorRef};

/// A floating-point unary function, generic over `f32`/`f64`.
pub trait FloatOp: Copy + Sync {
    /// Applies the function.
    fn apply<F: Float>(&self, x: F) -> F;

    /// Applies the function over a row of `f32`s. Ops with a vectorised kernel override
    /// this; same-dtype `f32` tensors then take it for every element (strided ones one at
    /// a time), so an element's value depends neither on the layout nor on how the rows
    /// are split over threads.
    #[inline(always)]
    fn apply_f32_row(&self, x: &[f32], out: &mut [f32]) {
        for (o, &x) in out.iter_mut().zip(x) {
            *o = self.apply(x);
        }
    }
}

/// A unary function on any compute type.
pub trait UnaryOp: Copy + Sync {
    /// Applies the function.
    fn apply<C: Compute>(&self, x: C) -> C;
}

macro_rules! float_op {
    ($(#[$m:meta])* $name:ident, |$x:ident| $e:expr $(, f32_row = $row:path)?) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        pub struct $name;
        impl FloatOp for $name {
            #[inline(always)]
            fn apply<F: Float>(&self, $x: F) -> F {
                $e
            }
            $(
            fn apply_f32_row(&self, x: &[f32], out: &mut [f32]) {
                // The vectorised kernel, else (a CPU without one) the formula above.
                if !$row(x, out) {
                    for (o, &x) in out.iter_mut().zip(x) {
                        *o = self.apply(x);
                    }
                }
            }
            )?
        }
    };
}

#[inline(always)]
fn k<F: Float>(v: f64) -> F {
    F::from_f64(v)
}

float_op!(
    /// `e^x`.
    Exp, |x| x.exp());
float_op!(
    /// `ln x`.
    Log, |x| x.ln());
float_op!(
    /// `sqrt x`.
    Sqrt, |x| x.sqrt());
float_op!(
    /// `1 / sqrt x`.
    Rsqrt, |x| F::ONE.div(x.sqrt()));
float_op!(
    /// `1 / x`.
    Reciprocal, |x| F::ONE.div(x));
float_op!(
    /// `tanh x`.
    Tanh, |x| x.tanh());
float_op!(
    /// `1 / (1 + e^-x)`.
    Sigmoid, |x| F::ONE.div(F::ONE + x.neg().exp()), f32_row = crate::vmath::sigmoid);
float_op!(
    /// `x * sigmoid(x)` with the sigmoid rounded first ([`Sigmoid`] then a multiplication:
    /// XNNPACK's SiLU, `XNNSigmoid` followed by `XNNMultiply`, in one pass).
    SigmoidMul, |x| x * F::ONE.div(F::ONE + x.neg().exp()), f32_row = crate::vmath::sigmoid_mul);
float_op!(
    /// `x * sigmoid(x)`.
    Silu, |x| x.div(F::ONE + x.neg().exp()), f32_row = crate::vmath::silu);
float_op!(
    /// The error function.
    Erf, |x| x.erf());
float_op!(
    /// Sine.
    Sin, |x| x.sin());
float_op!(
    /// Cosine.
    Cos, |x| x.cos());
float_op!(
    /// Floor.
    Floor, |x| x.floor());
float_op!(
    /// Ceiling.
    Ceil, |x| x.ceil());
float_op!(
    /// Round half to even.
    Round, |x| x.round_even());
float_op!(
    /// Truncate.
    Trunc, |x| x.trunc());
float_op!(
    /// Exact GELU: `x/2 * (1 + erf(x / sqrt 2))`.
    GeluErf, |x| k::<F>(0.5) * x * (F::ONE + (x * k::<F>(std::f64::consts::FRAC_1_SQRT_2)).erf()));
float_op!(
/// Tanh-approximated GELU.
GeluTanh, |x| {
    let inner = k::<F>(0.797_884_560_802_865_4) * (x + k::<F>(0.044715) * x * x * x);
    k::<F>(0.5) * x * (F::ONE + inner.tanh())
});

float_op!(
/// Hard swish as XNNPACK computes its `XNNHardswish` nodes: `x * clamp(x / 6 + 1 / 2, 0, 1)`
/// with `x / 6 + 1 / 2` one fused multiply-add by `1 / 6` rounded to `f32` (the bits of
/// ExecuTorch+XNNPACK on CPUs with FMA, checked on every element of a 64k sweep; PyTorch's
/// `x * clamp(x + 3, 0, 6) / 6` differs in the last bit on about a quarter of them, and its
/// division bounded the kernel). The exporter decomposes `aten::hardswish` in portable
/// programs, so only the delegate runs this.
Hardswish, |x| {
    // `maxps(a, 0)` then `minps(a, 1)`: NaN becomes 0 (and the product NaN again).
    let a = x.mul_add(k::<F>(SIXTH as f64), k::<F>(0.5));
    let a = if a > F::ZERO { a } else { F::ZERO };
    let a = if a < F::ONE { a } else { F::ONE };
    a * x
}, f32_row = crate::vmath::hardswish);

/// `1 / 6` rounded to `f32` (XNNPACK's `0x1.555556p-3`).
pub const SIXTH: f32 = 1.0 / 6.0;

/// The constants of XNNPACK's `f32` sine and cosine (`rational_5_4_div`): the argument
/// reduced by multiples of 2π (in two parts) to `[-π, π]`, folded into `[-π/2, π/2]`, then
/// `x · (1 + a3·x² + a5·x⁴) / (1 + b2·x² + b4·x⁴)`.
pub mod xnn_trig {
    /// 1 / (2π).
    pub const INV_2PI: f32 = 0.159_154_94;
    /// 2π's first 11 bits.
    pub const TWO_PI_HI: f32 = 6.281_25;
    /// The rest of 2π.
    pub const TWO_PI_LO: f32 = 1.935_307_2e-3;
    /// π.
    pub const PI: f32 = std::f32::consts::PI;
    /// π / 2.
    pub const PI_HALF: f32 = std::f32::consts::FRAC_PI_2;
    /// The numerator's coefficients.
    pub const A3: f32 = -1.331_466_4e-1;
    /// The numerator's coefficients.
    pub const A5: f32 = 3.234_058_2e-3;
    /// The denominator's coefficients.
    pub const B2: f32 = 3.351_991_3e-2;
    /// The denominator's coefficients.
    pub const B4: f32 = 4.877_077_6e-4;
}

/// XNNPACK's sine (`cos = false`) or cosine of `x`, in `F`'s arithmetic: for `f32` the bits
/// of its AVX-512F and FMA3 kernels (one rounding a fused multiply-add, correctly rounded
/// division).
#[inline(always)]
fn xnn_trig<F: Float>(x: F, cos: bool) -> F {
    use xnn_trig as c;
    let f = |v: f32| k::<F>(v as f64);
    // `minps` / `maxps`: the second operand unless the first is less (greater).
    let min = |a: F, b: F| if a < b { a } else { b };
    let max = |a: F, b: F| if a > b { a } else { b };
    let q = (x * f(c::INV_2PI)).round_even();
    let v = q.mul_add(f(-c::TWO_PI_HI), x);
    let mut v = q.mul_add(f(-c::TWO_PI_LO), v);
    if cos {
        v = f(c::PI_HALF).sub(v);
    }
    let v = min(v, f(c::PI).sub(v));
    let v = max(v, f(-c::PI).sub(v));
    let v = min(v, f(c::PI).sub(v));
    let v2 = v * v;
    let p = v * v2.mul_add(v2.mul_add(f(c::A5), f(c::A3)), F::ONE);
    let d = v2.mul_add(v2.mul_add(f(c::B4), f(c::B2)), F::ONE);
    p.div(d)
}

float_op!(
    /// XNNPACK's `XNNSigmoid`: its AVX-512F kernel's bits where the CPU has AVX-512F
    /// (`crate::xnn_sigmoid`), else [`Sigmoid`]'s.
    XnnSigmoid, |x| Sigmoid.apply(x), f32_row = crate::xnn_sigmoid::sigmoid_row);
float_op!(
    /// XNNPACK's `XNNSigmoid` then `XNNMultiply` by `x` (its SiLU), in one pass.
    XnnSigmoidMul, |x| SigmoidMul.apply(x), f32_row = crate::xnn_sigmoid::sigmoid_mul_row);
float_op!(
    /// XNNPACK's `XNNSin` (a rational approximation, within 4e-7 of `sin` on `[-100, 100]`).
    XnnSin, |x| xnn_trig(x, false), f32_row = crate::vmath::xnn_sin);
float_op!(
    /// XNNPACK's `XNNCos`.
    XnnCos, |x| xnn_trig(x, true), f32_row = crate::vmath::xnn_cos);

float_op!(
    /// `tan`.
    Tan, |x| x.tan());
float_op!(
    /// `asin`.
    Asin, |x| x.asin());
float_op!(
    /// `acos`.
    Acos, |x| x.acos());
float_op!(
    /// `atan`.
    Atan, |x| x.atan());
float_op!(
    /// `sinh`.
    Sinh, |x| x.sinh());
float_op!(
    /// `cosh`.
    Cosh, |x| x.cosh());
float_op!(
    /// `asinh`.
    Asinh, |x| x.asinh());
float_op!(
    /// `log2`.
    Log2, |x| x.log2());
float_op!(
    /// `log10`.
    Log10, |x| x.log10());
float_op!(
    /// `ln(1 + x)`.
    Log1p, |x| x.ln_1p());
float_op!(
    /// `e^x - 1`.
    Expm1, |x| x.exp_m1());

/// `x > 0 ? x : slope * x` (NaN stays NaN).
#[derive(Clone, Copy)]
pub struct LeakyRelu(pub f64);
impl FloatOp for LeakyRelu {
    #[inline(always)]
    fn apply<F: Float>(&self, x: F) -> F {
        if x > F::ZERO {
            x
        } else {
            x * F::from_f64(self.0)
        }
    }
}

/// ELU with PyTorch's parameters `(alpha, scale, input_scale)`:
/// `x > 0 ? scale * x : alpha * scale * (e^(x * input_scale) - 1)`.
#[derive(Clone, Copy)]
pub struct Elu(pub f64, pub f64, pub f64);
impl FloatOp for Elu {
    #[inline(always)]
    fn apply<F: Float>(&self, x: F) -> F {
        if x > F::ZERO || x.is_nan() {
            x * F::from_f64(self.1)
        } else {
            (x * F::from_f64(self.2)).exp_m1() * F::from_f64(self.0 * self.1)
        }
    }
}

macro_rules! unary_op {
    ($(#[$m:meta])* $name:ident $(($($ft:ty),*))?, |$s:ident, $x:ident| $e:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        pub struct $name $(($(pub $ft),*))?;
        impl UnaryOp for $name {
            #[inline(always)]
            #[allow(unused_variables)]
            fn apply<C: Compute>(&self, $x: C) -> C {
                let $s = self;
                $e
            }
        }
    };
}

unary_op!(
    /// `-x`.
    Neg, |s, x| x.neg());
unary_op!(
    /// `|x|`.
    Abs, |s, x| x.abs());
unary_op!(
    /// `max(x, 0)`, keeping NaN.
    Relu, |s, x| if x > C::ZERO || x.is_nan() { x } else { C::ZERO });
/// `clamp(x, min, max)` with optional bounds (NaN stays NaN). The bounds are kept in both
/// compute kinds (a missing one as the widest value), so the per-element work is two
/// selects that the compiler vectorises.
#[derive(Clone, Copy)]
pub struct Clamp {
    lo: (f64, i64),
    hi: (f64, i64),
}

impl Clamp {
    fn new(lo: Option<Scalar>, hi: Option<Scalar>) -> Self {
        let both = |s: Scalar| (s.to_f64(), s.to_i64());
        Clamp {
            lo: lo.map_or((f64::NEG_INFINITY, i64::MIN), both),
            hi: hi.map_or((f64::INFINITY, i64::MAX), both),
        }
    }
}

impl UnaryOp for Clamp {
    #[inline(always)]
    fn apply<C: Compute>(&self, x: C) -> C {
        let (lo, hi) = if C::IS_FLOAT {
            (C::from_f64(self.lo.0), C::from_f64(self.hi.0))
        } else {
            (C::from_i64(self.lo.1), C::from_i64(self.hi.1))
        };
        let y = if x < lo { lo } else { x };
        if y > hi { hi } else { y }
    }
}

/// Float unary op: arg 0 in, out at `out_i` (integer inputs compute in the out dtype).
pub fn unary_float<O: FloatOp>(
    ctx: &mut KernelContext<'_>,
    name: &str,
    op: O,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let mut out = ctx.resize_out(out_i, a.sizes())?;
    apply_float(name, op, &a, &mut out)
}

/// Applies a float op from `a` into `out` (same shape).
pub fn apply_float<O: FloatOp>(
    name: &str,
    op: O,
    a: &TensorRef<'_>,
    out: &mut TensorRef<'_>,
) -> Result<()> {
    if !out.dtype().is_floating() {
        return Err(Error::invalid_argument(format!(
            "{name}: out must be floating point, got {}",
            out.dtype()
        )));
    }
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    if a.dtype() == ScalarType::Float && out.dtype() == ScalarType::Float {
        let x = a.data::<f32>()?;
        let o = out.data_mut::<f32>()?;
        let one = move |p: f32| {
            let mut y = [0.0];
            op.apply_f32_row(&[p], &mut y);
            y[0]
        };
        map1_rows_with(MATH_TASK, &shape, x, &sa, o, &so, one, move |o, x| {
            op.apply_f32_row(x, o)
        });
        return Ok(());
    }
    if a.dtype() == out.dtype() {
        return dispatch_float!(a.dtype(), name, "input", |T| {
            let x = a.data::<T>()?;
            let o = out.data_mut::<T>()?;
            map1_with(MATH_TASK, &shape, x, &sa, o, &so, move |p: T| {
                T::from_f(op.apply(p.to_f()))
            });
            Ok(())
        });
    }
    if a.dtype().is_floating() && !a.dtype().is_compute_supported() {
        return Err(bad_dtype(name, "input", a.dtype()));
    }
    fn mixed<F: Float, O: FloatOp>(
        name: &str,
        op: O,
        a: &TensorRef<'_>,
        out: &mut TensorRef<'_>,
        st: [&[usize]; 3],
    ) -> Result<()> {
        let x = AnySlice::of(name, a)?;
        let mut o = AnySliceMut::of(name, out)?;
        walk(st[0], [st[1], st[2]], |[oa, oo], len, [xa, xo]| {
            for i in 0..len {
                o.set(oo + i * xo, op.apply(x.get::<F>(oa + i * xa)));
            }
        });
        Ok(())
    }
    let st = [&shape[..], &sa[..], &so[..]];
    if out.dtype() == ScalarType::Double {
        mixed::<f64, O>(name, op, a, out, st)
    } else {
        mixed::<f32, O>(name, op, a, out, st)
    }
}

/// Unary op on any real type: arg 0 in, out at `out_i`, computing in `common`.
pub fn unary_any<O: UnaryOp>(
    ctx: &mut KernelContext<'_>,
    name: &str,
    op: O,
    common: ScalarType,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let mut out = ctx.resize_out(out_i, a.sizes())?;
    check_cast(name, common, out.dtype())?;
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    if a.dtype() == common && out.dtype() == common {
        return dispatch_all!(common, name, "input", |T| {
            let x = a.data::<T>()?;
            let o = out.data_mut::<T>()?;
            map1(&shape, x, &sa, o, &so, move |p: T| {
                T::from_c(op.apply(p.to_c()))
            });
            Ok(())
        });
    }
    fn mixed<C: Compute, O: UnaryOp>(
        name: &str,
        op: O,
        a: &TensorRef<'_>,
        out: &mut TensorRef<'_>,
        st: [&[usize]; 3],
    ) -> Result<()> {
        let x = AnySlice::of(name, a)?;
        let mut o = AnySliceMut::of(name, out)?;
        walk(st[0], [st[1], st[2]], |[oa, oo], len, [xa, xo]| {
            for i in 0..len {
                o.set(oo + i * xo, op.apply(x.get::<C>(oa + i * xa)));
            }
        });
        Ok(())
    }
    let st = [&shape[..], &sa[..], &so[..]];
    match class_of(common) {
        Class::F32 => mixed::<f32, O>(name, op, &a, &mut out, st),
        Class::F64 => mixed::<f64, O>(name, op, &a, &mut out, st),
        Class::I64 => mixed::<i64, O>(name, op, &a, &mut out, st),
    }
}

macro_rules! float_kernels {
    ($($f:ident, $n:literal, $op:expr);* $(;)?) => {$(
        fn $f(ctx: &mut KernelContext<'_>) -> Result<()> {
            unary_float(ctx, $n, $op, 1)
        }
    )*};
}
float_kernels!(
    exp_out, "aten::exp.out", Exp;
    log_out, "aten::log.out", Log;
    sqrt_out, "aten::sqrt.out", Sqrt;
    rsqrt_out, "aten::rsqrt.out", Rsqrt;
    reciprocal_out, "aten::reciprocal.out", Reciprocal;
    tanh_out, "aten::tanh.out", Tanh;
    sigmoid_out, "aten::sigmoid.out", Sigmoid;
    silu_out, "aten::silu.out", Silu;
    erf_out, "aten::erf.out", Erf;
    sin_out, "aten::sin.out", Sin;
    cos_out, "aten::cos.out", Cos;
    log1p_out, "aten::log1p.out", Log1p;
    expm1_out, "aten::expm1.out", Expm1;
    tan_out, "aten::tan.out", Tan;
    asin_out, "aten::asin.out", Asin;
    acos_out, "aten::acos.out", Acos;
    atan_out, "aten::atan.out", Atan;
    sinh_out, "aten::sinh.out", Sinh;
    cosh_out, "aten::cosh.out", Cosh;
    asinh_out, "aten::asinh.out", Asinh;
    log2_out, "aten::log2.out", Log2;
    log10_out, "aten::log10.out", Log10;
);

fn leaky_relu_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::leaky_relu.out";
    let slope = ctx.scalar(1)?.to_f64();
    let dt = ctx.tensor(0)?.dtype();
    if !dt.is_floating() {
        return Err(bad_dtype(NAME, "input", dt));
    }
    unary_float(ctx, NAME, LeakyRelu(slope), 2)
}

fn elu_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::elu.out";
    let (alpha, scale, input_scale) = (
        ctx.scalar(1)?.to_f64(),
        ctx.scalar(2)?.to_f64(),
        ctx.scalar(3)?.to_f64(),
    );
    let dt = ctx.tensor(0)?.dtype();
    if !dt.is_floating() {
        return Err(bad_dtype(NAME, "input", dt));
    }
    unary_float(ctx, NAME, Elu(alpha, scale, input_scale), 4)
}

/// `bitwise_not`: `!x` for integers, logical not for bools; floats are an error.
fn bitwise_not_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::bitwise_not.out";
    let a = ctx.tensor(0)?;
    let mut out = ctx.resize_out(1, a.sizes())?;
    same_dtype(NAME, a.dtype(), out.dtype())?;
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    macro_rules! int_not {
        ($($dt:ident => $t:ty),*) => {
            match a.dtype() {
                ScalarType::Bool => {
                    let x = a.data::<Bool>()?;
                    let o = out.data_mut::<Bool>()?;
                    map1(&shape, x, &sa, o, &so, move |p: Bool| Bool::new(!p.get()));
                    Ok(())
                }
                $(ScalarType::$dt => {
                    let x = a.data::<$t>()?;
                    let o = out.data_mut::<$t>()?;
                    map1(&shape, x, &sa, o, &so, move |p: $t| !p);
                    Ok(())
                })*
                other => Err(bad_dtype(NAME, "input", other)),
            }
        };
    }
    int_not!(Byte => u8, Char => i8, Short => i16, Int => i32, Long => i64)
}

macro_rules! rounding_kernels {
    ($($f:ident, $n:literal, $op:expr);* $(;)?) => {$(
        fn $f(ctx: &mut KernelContext<'_>) -> Result<()> {
            let dt = ctx.tensor(0)?.dtype();
            if dt == ScalarType::Bool {
                return Err(bad_dtype($n, "input", dt));
            }
            if dt.is_floating() {
                unary_float(ctx, $n, $op, 1)
            } else {
                // Rounding an integer is the identity.
                unary_any(ctx, $n, Clamp::new(None, None), dt, 1)
            }
        }
    )*};
}
rounding_kernels!(
    floor_out, "aten::floor.out", Floor;
    ceil_out, "aten::ceil.out", Ceil;
    round_out, "aten::round.out", Round;
    trunc_out, "aten::trunc.out", Trunc;
);

fn gelu_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::gelu.out";
    match ctx.string(1)? {
        "none" => unary_float(ctx, NAME, GeluErf, 2),
        "tanh" => unary_float(ctx, NAME, GeluTanh, 2),
        other => Err(Error::invalid_argument(format!(
            "{NAME}: unknown approximate mode '{other}'"
        ))),
    }
}

fn neg_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::neg.out";
    let dt = ctx.tensor(0)?.dtype();
    if dt == ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{NAME}: not supported for bool tensors"
        )));
    }
    unary_any(ctx, NAME, Neg, dt, 1)
}

fn abs_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let dt = ctx.tensor(0)?.dtype();
    if dt == ScalarType::Bool {
        return Err(bad_dtype("aten::abs.out", "input", dt));
    }
    unary_any(ctx, "aten::abs.out", Abs, dt, 1)
}

fn relu_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let dt = ctx.tensor(0)?.dtype();
    unary_any(ctx, "aten::relu.out", Relu, dt, 1)
}

fn clamp_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::clamp.out";
    let dt = ctx.tensor(0)?.dtype();
    let lo = ctx.opt_scalar(1)?;
    let hi = ctx.opt_scalar(2)?;
    let mut common = dt;
    for s in [lo, hi].into_iter().flatten() {
        common = promote(common, promote_scalar(dt, s))?;
    }
    if common == ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{NAME}: not supported for bool tensors"
        )));
    }
    unary_any(ctx, NAME, Clamp::new(lo, hi), common, 3)
}

fn hardtanh_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::hardtanh.out";
    let dt = ctx.tensor(0)?.dtype();
    let lo = ctx.scalar(1)?;
    let hi = ctx.scalar(2)?;
    if dt == ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{NAME}: not supported for bool tensors"
        )));
    }
    unary_any(ctx, NAME, Clamp::new(Some(lo), Some(hi)), dt, 3)
}

fn logical_not_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::logical_not.out";
    let a = ctx.tensor(0)?;
    let mut out = ctx.resize_out(1, a.sizes())?;
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    if out.dtype() == ScalarType::Bool {
        return dispatch_all!(a.dtype(), NAME, "input", |T| {
            let x = a.data::<T>()?;
            let o = out.data_mut::<Bool>()?;
            map1(&shape, x, &sa, o, &so, move |p: T| {
                Bool::new(!p.to_c().truthy())
            });
            Ok(())
        });
    }
    let x = AnySlice::of(NAME, &a)?;
    let mut o = AnySliceMut::of(NAME, &mut out)?;
    walk(&shape, [&sa, &so], |[oa, oo], len, [xa, xo]| {
        for i in 0..len {
            o.set(oo + i * xo, !x.get::<f64>(oa + i * xa).truthy() as i64);
        }
    });
    Ok(())
}

unary_op!(
    /// `sign(x)`: -1, 0 or 1 (NaN gives 0, as in PyTorch).
    Sign, |s, x| if x > C::ZERO { C::ONE } else if x < C::ZERO { C::ONE.neg() } else { C::ZERO });

fn sign_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::sign.out";
    let dt = ctx.tensor(0)?.dtype();
    if dt == ScalarType::Bool {
        // The sign of a bool is the bool itself.
        return unary_any(ctx, NAME, Clamp::new(None, None), dt, 1);
    }
    unary_any(ctx, NAME, Sign, dt, 1)
}

/// `isnan` / `isinf`: a bool per element (always false for integers).
fn float_test(ctx: &mut KernelContext<'_>, name: &str, inf: bool) -> Result<()> {
    let a = ctx.tensor(0)?;
    let mut out = ctx.resize_out(1, a.sizes())?;
    if out.dtype() != ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{name}: out must be bool, got {}",
            out.dtype()
        )));
    }
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, so) = (
        Shape::from_slice(a.strides())?,
        Shape::from_slice(out.strides())?,
    );
    dispatch_all!(a.dtype(), name, "input", |T| {
        let x = a.data::<T>()?;
        let o = out.data_mut::<Bool>()?;
        map1(&shape, x, &sa, o, &so, move |p: T| {
            let v = p.to_c().to_f64();
            Bool::new(if inf { v.is_infinite() } else { v.is_nan() })
        });
        Ok(())
    })
}
fn isnan_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    float_test(ctx, "aten::isnan.out", false)
}
fn isinf_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    float_test(ctx, "aten::isinf.out", true)
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    let list: &[(&str, etch_core::KernelFn)] = &[
        ("aten::exp.out", exp_out),
        ("aten::log.out", log_out),
        ("aten::sqrt.out", sqrt_out),
        ("aten::rsqrt.out", rsqrt_out),
        ("aten::reciprocal.out", reciprocal_out),
        ("aten::tanh.out", tanh_out),
        ("aten::sigmoid.out", sigmoid_out),
        ("aten::silu.out", silu_out),
        ("aten::erf.out", erf_out),
        ("aten::sin.out", sin_out),
        ("aten::cos.out", cos_out),
        ("aten::log1p.out", log1p_out),
        ("aten::expm1.out", expm1_out),
        ("aten::tan.out", tan_out),
        ("aten::asin.out", asin_out),
        ("aten::acos.out", acos_out),
        ("aten::atan.out", atan_out),
        ("aten::sinh.out", sinh_out),
        ("aten::cosh.out", cosh_out),
        ("aten::asinh.out", asinh_out),
        ("aten::log2.out", log2_out),
        ("aten::log10.out", log10_out),
        ("aten::leaky_relu.out", leaky_relu_out),
        ("aten::elu.out", elu_out),
        ("aten::bitwise_not.out", bitwise_not_out),
        ("aten::floor.out", floor_out),
        ("aten::ceil.out", ceil_out),
        ("aten::round.out", round_out),
        ("aten::trunc.out", trunc_out),
        ("aten::gelu.out", gelu_out),
        ("aten::neg.out", neg_out),
        ("aten::abs.out", abs_out),
        ("aten::relu.out", relu_out),
        ("aten::clamp.out", clamp_out),
        ("aten::hardtanh.out", hardtanh_out),
        ("aten::logical_not.out", logical_not_out),
        ("aten::sign.out", sign_out),
        ("aten::isnan.out", isnan_out),
        ("aten::isinf.out", isinf_out),
    ];
    for &(n, f) in list {
        reg.register(n, f)?;
    }
    Ok(())
}
