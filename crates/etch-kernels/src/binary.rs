//! Binary elementwise operators with broadcasting and PyTorch type promotion: arithmetic,
//! comparisons, logical and bitwise ops, `where`, `masked_fill`.

use crate::dispatch_all;
use crate::util::*;
use etch_core::{Error, KernelContext, KernelRegistry, Result, Scalar, ScalarType, TensorRef};

/// A binary arithmetic operation, generic over the compute type.
pub trait BinOp: Copy + Sync {
    /// True when the result is always floating point (true division).
    const FLOAT_ONLY: bool = false;
    /// The least elements a thread is given (lower for costly ops).
    const MIN_TASK: usize = ELEMENTWISE_TASK;
    /// True when integer inputs need a non-zero divisor.
    const INT_DIVISION: bool = false;
    /// Applies the operation.
    fn apply<C: Compute>(&self, a: C, b: C) -> C;
    /// Validates the computation dtype.
    fn check(&self, _op: &str, _common: ScalarType) -> Result<()> {
        Ok(())
    }
}

/// A comparison producing a bool.
pub trait CmpOp: Copy + Sync {
    /// Compares.
    fn cmp<C: Compute>(&self, a: C, b: C) -> bool;
}

fn no_bool(op: &str, common: ScalarType) -> Result<()> {
    if common == ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{op}: not supported for bool tensors"
        )));
    }
    Ok(())
}

fn integral_only(op: &str, common: ScalarType) -> Result<()> {
    if common.is_floating() {
        return Err(Error::invalid_argument(format!(
            "{op}: only integral and bool tensors are supported, got {common}"
        )));
    }
    Ok(())
}

macro_rules! binop {
    ($(#[$m:meta])* $name:ident $(($ft:ty))?, |$s:ident, $a:ident, $b:ident| $e:expr $(, check = $chk:expr)? $(, float_only = $fo:expr)? $(, int_div = $idv:expr)? $(, min_task = $mt:expr)?) => {
        $(#[$m])*
        #[derive(Clone, Copy)]
        pub struct $name $((pub $ft))?;
        impl BinOp for $name {
            $(const FLOAT_ONLY: bool = $fo;)?
            $(const INT_DIVISION: bool = $idv;)?
            $(const MIN_TASK: usize = $mt;)?
            #[inline(always)]
            #[allow(unused_variables)]
            fn apply<C: Compute>(&self, $a: C, $b: C) -> C {
                let $s = self;
                $e
            }
            $(fn check(&self, op: &str, common: ScalarType) -> Result<()> { $chk(op, common) })?
        }
    };
}

binop!(
    /// `a + b`.
    Add, |s, a, b| a.add(b));
binop!(
    /// `a + alpha * b`.
    AddAlpha (Scalar), |s, a, b| a.add(b.mul(C::from_scalar(s.0))));
binop!(
    /// `a - alpha * b`.
    SubAlpha (Scalar), |s, a, b| a.sub(b.mul(C::from_scalar(s.0))), check = no_bool);
binop!(
    /// `a - b`.
    Sub, |s, a, b| a.sub(b), check = no_bool);
binop!(
    /// `b - alpha * a` (`rsub`).
    RSubAlpha (Scalar), |s, a, b| b.sub(a.mul(C::from_scalar(s.0))), check = no_bool);
binop!(
    /// `a * b`.
    Mul, |s, a, b| a.mul(b));
binop!(
    /// True division.
    Div, |s, a, b| a.div(b), float_only = true);
binop!(
    /// Division rounded toward zero.
    DivTrunc, |s, a, b| {
        if C::IS_FLOAT { C::from_f64(a.div(b).to_f64().trunc()) } else { a.div(b) }
    }, int_div = true);
binop!(
    /// Floor division.
    DivFloor, |s, a, b| a.floor_div(b), int_div = true);
binop!(
    /// Python-style remainder.
    Remainder, |s, a, b| a.remainder(b), int_div = true);
binop!(
    /// C-style remainder.
    Fmod, |s, a, b| a.fmod(b), int_div = true);
binop!(
    /// `a ** b`.
    Pow, |s, a, b| a.pow(b), check = no_bool, min_task = MATH_TASK);
binop!(
    /// NaN-propagating maximum.
    Maximum, |s, a, b| a.max_nan(b));
binop!(
    /// NaN-propagating minimum.
    Minimum, |s, a, b| a.min_nan(b));
binop!(
    /// `a > 0 ? a : a * b`: PReLU with slope `b` (XNNPACK's `XNNPReLU`; the exporter
    /// decomposes `aten::prelu` in portable programs).
    PRelu, |s, a, b| if a > C::ZERO { a } else { a.mul(b) });
/// `op(a, b)`, then the output clamp `x < lo ? lo : (x > hi ? hi : x)` (NaN kept): an
/// XNNPACK binary node with its fused clamp in one pass, where the clamp would otherwise be
/// a second pass over the output. The bounds convert to the compute type, so the result
/// equals the op then the clamp exactly when the compute type is `f32`.
#[derive(Clone, Copy)]
pub struct Clamped<O> {
    /// The operation.
    pub op: O,
    /// The lower bound.
    pub lo: f32,
    /// The upper bound.
    pub hi: f32,
}

impl<O: BinOp> BinOp for Clamped<O> {
    const FLOAT_ONLY: bool = O::FLOAT_ONLY;
    const MIN_TASK: usize = O::MIN_TASK;
    const INT_DIVISION: bool = O::INT_DIVISION;
    #[inline(always)]
    fn apply<C: Compute>(&self, a: C, b: C) -> C {
        let x = self.op.apply(a, b);
        let (lo, hi) = (C::from_f64(self.lo as f64), C::from_f64(self.hi as f64));
        if x < lo {
            lo
        } else if x > hi {
            hi
        } else {
            x
        }
    }
    fn check(&self, op: &str, common: ScalarType) -> Result<()> {
        self.op.check(op, common)
    }
}

binop!(
    /// `atan2(a, b)`, always floating point.
    Atan2, |s, a, b| C::from_f64(a.to_f64().atan2(b.to_f64())), float_only = true, min_task = MATH_TASK);
binop!(
    /// Bitwise and.
    BitAnd, |s, a, b| a.bitand(b), check = integral_only);
binop!(
    /// Bitwise or.
    BitOr, |s, a, b| a.bitor(b), check = integral_only);
binop!(
    /// Bitwise xor.
    BitXor, |s, a, b| a.bitxor(b), check = integral_only);

macro_rules! cmpop {
    ($name:ident, $doc:literal, |$a:ident, $b:ident| $e:expr) => {
        #[doc = $doc]
        #[derive(Clone, Copy)]
        pub struct $name;
        impl CmpOp for $name {
            #[inline(always)]
            fn cmp<C: Compute>(&self, $a: C, $b: C) -> bool {
                $e
            }
        }
    };
}
cmpop!(Eq, "`a == b`.", |a, b| a == b);
cmpop!(Ne, "`a != b`.", |a, b| a != b);
cmpop!(Lt, "`a < b`.", |a, b| a < b);
cmpop!(Le, "`a <= b`.", |a, b| a <= b);
cmpop!(Gt, "`a > b`.", |a, b| a > b);
cmpop!(Ge, "`a >= b`.", |a, b| a >= b);
cmpop!(LogicalAnd, "Logical and.", |a, b| a.truthy() && b.truthy());
cmpop!(LogicalOr, "Logical or.", |a, b| a.truthy() || b.truthy());
cmpop!(LogicalXor, "Logical xor.", |a, b| a.truthy() != b.truthy());

/// Which compute type a dtype computes in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Class {
    /// `f32` (float, half, bfloat16).
    F32,
    /// `f64`.
    F64,
    /// `i64` (integers and bool).
    I64,
}

/// The compute class of a dtype.
pub fn class_of(dt: ScalarType) -> Class {
    match dt {
        ScalarType::Double => Class::F64,
        d if d.is_floating() => Class::F32,
        _ => Class::I64,
    }
}

fn check_divisor(op: &str, t: &TensorRef<'_>) -> Result<()> {
    if t.dtype().is_floating() {
        return Ok(());
    }
    let s = AnySlice::of(op, t)?;
    for i in 0..t.numel() {
        if s.get::<i64>(i) == 0 {
            return Err(Error::invalid_argument(format!(
                "{op}: integer division by zero"
            )));
        }
    }
    Ok(())
}

/// Computes `out = op(a, b)` with broadcasting, computing in `common`.
pub fn apply2<O: BinOp>(
    name: &str,
    op: O,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    out: &mut TensorRef<'_>,
    common: ScalarType,
) -> Result<()> {
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, sb, so) = (
        bstrides(a, &shape),
        bstrides(b, &shape),
        Shape::from_slice(out.strides())?,
    );
    let floats = [a.dtype(), b.dtype(), out.dtype()]
        .iter()
        .all(|&t| t == ScalarType::Float);
    if floats && let Some(done) = by_channel_f32(op, a, b, [&sa, &sb, &so], out) {
        return done;
    }
    if a.dtype() == common && b.dtype() == common && out.dtype() == common {
        return dispatch_all!(common, name, "input", |T| {
            let (x, y) = (a.data::<T>()?, b.data::<T>()?);
            let o = out.data_mut::<T>()?;
            map2_with(
                O::MIN_TASK,
                &shape,
                x,
                &sa,
                y,
                &sb,
                o,
                &so,
                move |p: T, q: T| T::from_c(op.apply(p.to_c(), q.to_c())),
            );
            Ok(())
        });
    }
    fn mixed<C: Compute, O: BinOp>(
        name: &str,
        op: O,
        a: &TensorRef<'_>,
        b: &TensorRef<'_>,
        out: &mut TensorRef<'_>,
        st: [&[usize]; 4],
    ) -> Result<()> {
        let (x, y) = (AnySlice::of(name, a)?, AnySlice::of(name, b)?);
        let mut o = AnySliceMut::of(name, out)?;
        walk(
            st[0],
            [st[1], st[2], st[3]],
            |[oa, ob, oo], len, [xa, xb, xo]| {
                for i in 0..len {
                    let r = op.apply(x.get::<C>(oa + i * xa), y.get::<C>(ob + i * xb));
                    o.set(oo + i * xo, r);
                }
            },
        );
        Ok(())
    }
    let st = [&shape[..], &sa[..], &sb[..], &so[..]];
    match class_of(common) {
        Class::F32 => mixed::<f32, O>(name, op, a, b, out, st),
        Class::F64 => mixed::<f64, O>(name, op, a, b, out, st),
        Class::I64 => mixed::<i64, O>(name, op, a, b, out, st),
    }
}

/// `op` of a dense float32 tensor and a per-channel vector into a dense output (`x · s`
/// of a squeeze-excitation, `[n, c, h, w]` times `[1, c, 1, 1]`): over planes
/// ([`planes_by_vector_f32`]) or rows ([`rows_by_vector_f32`]) instead of the broadcasting
/// walk; `None` for other broadcasts. `[sa, sb, so]`: the operands' broadcast strides and
/// the output's strides.
fn by_channel_f32<O: BinOp>(
    op: O,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    [sa, sb, so]: [&[usize]; 3],
    out: &mut TensorRef<'_>,
) -> Option<Result<()>> {
    // The dims in the output's memory order (a channels-last output: `n, h, w, c`, where a
    // `[n, c, 1, 1]` vector is per row of channels).
    let order = out.dim_order();
    let perm = |st: &[usize]| -> Option<Shape> {
        let mut p = Shape::new();
        for &d in order {
            p.push(*st.get(d as usize)?).ok()?;
        }
        Some(p)
    };
    let (shape, sa, sb, so) = (perm(out.sizes())?, perm(sa)?, perm(sb)?, perm(so)?);
    let (shape, sa, sb, so) = (&shape[..], &sa[..], &sb[..], &so[..]);
    let dense = contiguous_strides(shape);
    // Strides with the dims of size 1 as 0 (they never move).
    let norm = |st: &[usize]| -> Shape {
        let mut n = Shape::from_slice(st).unwrap_or_default();
        n.iter_mut()
            .zip(shape)
            .for_each(|(s, &d)| *s = if d == 1 { 0 } else { *s });
        n
    };
    let (na, nb, nd) = (norm(sa), norm(sb), norm(&dense));
    if norm(so)[..] != nd[..] {
        return None;
    }
    let (x, v, vs, swap) = match (na[..] == nd[..], nb[..] == nd[..]) {
        (true, false) => (a, b, nb, false),
        (false, true) => (b, a, na, true),
        _ => return None,
    };
    // The vector's dims: one run of dims with its own dense strides; broadcast elsewhere.
    let first = vs.iter().position(|&s| s != 0)?;
    let end = first
        + vs[first..]
            .iter()
            .position(|&s| s == 0)
            .unwrap_or(vs.len() - first);
    let run = contiguous_strides(&shape[first..end]);
    if vs[end..].iter().any(|&s| s != 0) || *run != vs[first..end] {
        return None;
    }
    let c: usize = shape[first..end].iter().product();
    let hw: usize = shape[end..].iter().product();
    let (xs, vs) = (x.data::<f32>().ok()?, v.data::<f32>().ok()?);
    let v = vs.get(..c)?;
    let o = out.data_mut::<f32>().ok()?;
    if c < 2 || xs.len() != o.len() {
        return None;
    }
    Some(match hw {
        1 => rows_by_vector_f32(op, xs, v, swap, o),
        _ => planes_by_vector_f32(op, xs, v, hw, swap, o),
    })
}

/// `out[r, i] = op(x[r, i], v[i])` (`op(v[i], x[r, i])` with `swap`) for the rows of
/// `v.len()` elements of `x` and `out`: an NHWC tensor times a per-channel vector (the
/// squeeze-excitation products of mobilenet_v3 and efficientnet), where the broadcasting
/// walk would take each row of a few dozen channels as a row of its own. Split over the
/// thread pool by rows; each element computed as [`apply2`] computes it.
pub fn rows_by_vector_f32<O: BinOp>(
    op: O,
    x: &[f32],
    v: &[f32],
    swap: bool,
    out: &mut [f32],
) -> Result<()> {
    let c = v.len();
    if c == 0 || x.len() != out.len() || !x.len().is_multiple_of(c) {
        return Err(Error::invalid_argument(format!(
            "rows of {c} over {} inputs and {} outputs",
            x.len(),
            out.len()
        )));
    }
    let rows = x.len() / c;
    let tasks = crate::threads::tasks_for(x.len(), O::MIN_TASK);
    let o = crate::threads::SharedMut::new(out);
    crate::threads::run_parts(rows, tasks, &|range| {
        // SAFETY: rows `range` of `out` are this part's alone.
        let o = unsafe { o.slice(range.start * c, range.len() * c) };
        let x = &x[range.start * c..range.end * c];
        #[cfg(target_arch = "x86_64")]
        if crate::util::avx512() {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { rows_avx512(op, x, v, swap, o) };
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { rows_avx2(op, x, v, swap, o) };
        }
        rows_any(op, x, v, swap, o);
    });
    Ok(())
}

/// `o[i] = op(o[i], y[(i / run) % y.len()])` (`op(y[..], o[i])` with `swap`), in place:
/// `y` element by element (`run` 1, `y` as long as `o`), repeated along `o` (`run` 1: a
/// row vector), or each of its elements over a run of `run` elements (a column, or a
/// scalar). For a node whose output takes the bytes of an input read last there, as
/// XNNPACK's runtime does: the output is written where the input's lines are still in
/// the cache. Split over the thread pool; each element computed as [`apply2`] computes
/// it.
pub fn inplace_f32<O: BinOp>(
    op: O,
    o: &mut [f32],
    y: &[f32],
    run: usize,
    swap: bool,
) -> Result<()> {
    let (n, c) = (o.len(), y.len());
    if n == 0 {
        return Ok(());
    }
    let period = run.checked_mul(c).filter(|&p| p > 0);
    if period.is_none_or(|p| !n.is_multiple_of(p)) {
        return Err(Error::invalid_argument(format!(
            "{c} values over runs of {run} of {n} elements"
        )));
    }
    // Units: whole rows of `y` (run 1, short rows), pieces of PIECE elements of a long row
    // (run 1) or of a run, each with the values it meets: a slice of `y` or one value.
    const PIECE: usize = 4096;
    let rows_a_unit = (PIECE / c).max(1);
    let (span, per) = if run == 1 {
        (c, c.div_ceil(PIECE))
    } else {
        (run, run.div_ceil(PIECE))
    };
    let units = if run == 1 && c <= PIECE {
        (n / c).div_ceil(rows_a_unit)
    } else {
        n / span * per
    };
    let tasks = crate::threads::tasks_for(n, O::MIN_TASK);
    let shared = crate::threads::SharedMut::new(o);
    crate::threads::run_parts(units, tasks, &|range| {
        for u in range {
            let (start, len, ys, v) = if run == 1 && c <= PIECE {
                let start = u * rows_a_unit * c;
                (start, (rows_a_unit * c).min(n - start), y, None)
            } else {
                let (r, piece) = (u / per, u % per);
                let (at, len) = (piece * PIECE, PIECE.min(span - piece * PIECE));
                match run {
                    1 => (r * span + at, len, &y[at..at + len], None),
                    _ => (r * span + at, len, y, Some(y[r % c])),
                }
            };
            // SAFETY: elements `start..start + len` are this unit's alone.
            let o = unsafe { shared.slice(start, len) };
            #[cfg(target_arch = "x86_64")]
            if crate::util::avx512() {
                // SAFETY: the CPU has AVX-512F.
                unsafe { inplace_avx512(op, o, ys, v, swap) };
                continue;
            }
            inplace_any(op, o, ys, v, swap);
        }
    });
    Ok(())
}

/// [`inplace_any`] compiled for AVX-512F.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn inplace_avx512<O: BinOp>(op: O, o: &mut [f32], y: &[f32], v: Option<f32>, swap: bool) {
    inplace_any(op, o, y, v, swap)
}

/// `o` with the scalar `v`, or with `y` repeated along it (`o` whole rows of `y`).
#[inline(always)]
fn inplace_any<O: BinOp>(op: O, o: &mut [f32], y: &[f32], v: Option<f32>, swap: bool) {
    match (v, swap) {
        (Some(v), false) => o.iter_mut().for_each(|o| *o = op.apply(*o, v)),
        (Some(v), true) => o.iter_mut().for_each(|o| *o = op.apply(v, *o)),
        (None, false) => o.chunks_exact_mut(y.len()).for_each(|row| {
            row.iter_mut()
                .zip(y)
                .for_each(|(o, &b)| *o = op.apply(*o, b))
        }),
        (None, true) => o.chunks_exact_mut(y.len()).for_each(|row| {
            row.iter_mut()
                .zip(y)
                .for_each(|(o, &a)| *o = op.apply(a, *o))
        }),
    }
}

/// `out[p, i] = op(x[p, i], v[p % c])` (`op(v[p % c], x[p, i])` with `swap`) for the
/// planes of `hw` elements of `x` and `out`, `c = v.len()`: an NCHW tensor times a
/// per-channel vector (the squeeze-excitation products of networks laid out
/// channels-first), where the broadcasting walk takes each plane of 7² to 112² pixels as
/// a row of its own through a closure. Split over the thread pool by planes; each element
/// computed as [`apply2`] computes it.
pub fn planes_by_vector_f32<O: BinOp>(
    op: O,
    x: &[f32],
    v: &[f32],
    hw: usize,
    swap: bool,
    out: &mut [f32],
) -> Result<()> {
    let c = v.len();
    let plane_set = c.saturating_mul(hw);
    if plane_set == 0 || x.len() != out.len() || !x.len().is_multiple_of(plane_set) {
        return Err(Error::invalid_argument(format!(
            "planes of {hw} for {c} channels over {} inputs and {} outputs",
            x.len(),
            out.len()
        )));
    }
    let planes = x.len() / hw;
    let tasks = crate::threads::tasks_for(x.len(), O::MIN_TASK);
    let o = crate::threads::SharedMut::new(out);
    // The widest variant this CPU has, chosen once.
    let plane: PlaneFn<O> = {
        #[cfg(target_arch = "x86_64")]
        if crate::util::avx512() {
            plane_avx512::<O>
        } else if std::arch::is_x86_feature_detected!("avx2") {
            plane_avx2::<O>
        } else {
            plane_baseline::<O>
        }
        #[cfg(not(target_arch = "x86_64"))]
        plane_baseline::<O>
    };
    crate::threads::run_parts(planes, tasks, &|range| {
        // (The channel counted along: a division per plane cost as much as its products.)
        let mut ch = range.start % c;
        for p in range {
            // SAFETY: plane `p` of `out` is this part's alone.
            let o = unsafe { o.slice(p * hw, hw) };
            // SAFETY: `plane` is a variant the CPU has (above).
            unsafe { plane(op, &x[p * hw..(p + 1) * hw], v[ch], swap, o) };
            ch = if ch + 1 == c { 0 } else { ch + 1 };
        }
    });
    Ok(())
}

/// A plane kernel: `out[i] = op(x[i], s)` (`op(s, x[i])` with `swap`); unsafe as its
/// variants need their instruction sets.
type PlaneFn<O> = unsafe fn(O, &[f32], f32, bool, &mut [f32]);

/// [`plane_any`] as built (the baseline variant of [`PlaneFn`]).
///
/// # Safety
/// None (unsafe only to share [`PlaneFn`]'s type).
unsafe fn plane_baseline<O: BinOp>(op: O, x: &[f32], s: f32, swap: bool, out: &mut [f32]) {
    plane_any(op, x, s, swap, out)
}

/// [`plane_any`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plane_avx2<O: BinOp>(op: O, x: &[f32], s: f32, swap: bool, out: &mut [f32]) {
    plane_any(op, x, s, swap, out)
}

/// [`plane_any`] compiled for AVX-512F.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn plane_avx512<O: BinOp>(op: O, x: &[f32], s: f32, swap: bool, out: &mut [f32]) {
    plane_any(op, x, s, swap, out)
}

/// `out[i] = op(x[i], s)` (`op(s, x[i])` with `swap`).
#[inline(always)]
fn plane_any<O: BinOp>(op: O, x: &[f32], s: f32, swap: bool, out: &mut [f32]) {
    if swap {
        for (o, &a) in out.iter_mut().zip(x) {
            *o = op.apply(s, a);
        }
    } else {
        for (o, &a) in out.iter_mut().zip(x) {
            *o = op.apply(a, s);
        }
    }
}

/// [`rows_any`] compiled for AVX2 (8 lanes where the baseline has 4).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2<O: BinOp>(op: O, x: &[f32], v: &[f32], swap: bool, out: &mut [f32]) {
    rows_any(op, x, v, swap, out)
}

/// [`rows_any`] compiled for AVX-512F.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_avx512<O: BinOp>(op: O, x: &[f32], v: &[f32], swap: bool, out: &mut [f32]) {
    rows_any(op, x, v, swap, out)
}

#[inline(always)]
fn rows_any<O: BinOp>(op: O, x: &[f32], v: &[f32], swap: bool, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(v.len()).zip(out.chunks_exact_mut(v.len())) {
        if swap {
            for ((o, &a), &b) in or.iter_mut().zip(xr).zip(v) {
                *o = op.apply(b, a);
            }
        } else {
            for ((o, &a), &b) in or.iter_mut().zip(xr).zip(v) {
                *o = op.apply(a, b);
            }
        }
    }
}

/// Tensor ⊕ tensor: inputs at 0 and 1, out at `out_i`.
pub fn tensor_tensor<O: BinOp>(
    ctx: &mut KernelContext<'_>,
    name: &str,
    op: O,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    let shape = broadcast_shape(name, a.sizes(), b.sizes())?;
    let mut common = promote(a.dtype(), b.dtype())?;
    op.check(name, common)?;
    let mut out = ctx.resize_out(out_i, &shape)?;
    if O::FLOAT_ONLY && !common.is_floating() {
        common = if out.dtype().is_floating() {
            out.dtype()
        } else {
            ScalarType::Float
        };
    }
    if O::INT_DIVISION && !common.is_floating() {
        check_divisor(name, &b)?;
    }
    check_cast(name, common, out.dtype())?;
    apply2(name, op, &a, &b, &mut out, common)
}

/// Computes `out = f(a)` elementwise where `f` is written in the compute type.
pub fn apply_scalar<O: BinOp>(
    name: &str,
    op: O,
    a: &TensorRef<'_>,
    s: Scalar,
    out: &mut TensorRef<'_>,
    common: ScalarType,
) -> Result<()> {
    let shape = Shape::from_slice(out.sizes())?;
    let (sa, so) = (bstrides(a, &shape), Shape::from_slice(out.strides())?);
    if a.dtype() == common && out.dtype() == common {
        return dispatch_all!(common, name, "input", |T| {
            let x = a.data::<T>()?;
            let o = out.data_mut::<T>()?;
            let sc = <<T as Elem>::C as Compute>::from_scalar(s);
            map1_with(O::MIN_TASK, &shape, x, &sa, o, &so, move |p: T| {
                T::from_c(op.apply(p.to_c(), sc))
            });
            Ok(())
        });
    }
    fn mixed<C: Compute, O: BinOp>(
        name: &str,
        op: O,
        a: &TensorRef<'_>,
        s: Scalar,
        out: &mut TensorRef<'_>,
        st: [&[usize]; 3],
    ) -> Result<()> {
        let x = AnySlice::of(name, a)?;
        let mut o = AnySliceMut::of(name, out)?;
        let sc = C::from_scalar(s);
        walk(st[0], [st[1], st[2]], |[oa, oo], len, [xa, xo]| {
            for i in 0..len {
                o.set(oo + i * xo, op.apply(x.get::<C>(oa + i * xa), sc));
            }
        });
        Ok(())
    }
    let st = [&shape[..], &sa[..], &so[..]];
    match class_of(common) {
        Class::F32 => mixed::<f32, O>(name, op, a, s, out, st),
        Class::F64 => mixed::<f64, O>(name, op, a, s, out, st),
        Class::I64 => mixed::<i64, O>(name, op, a, s, out, st),
    }
}

/// Tensor ⊕ scalar: tensor at 0, scalar at 1, out at `out_i`.
pub fn tensor_scalar<O: BinOp>(
    ctx: &mut KernelContext<'_>,
    name: &str,
    op: O,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let s = ctx.scalar(1)?;
    let mut common = promote_scalar(a.dtype(), s);
    op.check(name, common)?;
    let mut out = ctx.resize_out(out_i, a.sizes())?;
    if O::FLOAT_ONLY && !common.is_floating() {
        common = if out.dtype().is_floating() {
            out.dtype()
        } else {
            ScalarType::Float
        };
    }
    if O::INT_DIVISION && !common.is_floating() && s.to_i64() == 0 {
        return Err(Error::invalid_argument(format!(
            "{name}: integer division by zero"
        )));
    }
    check_cast(name, common, out.dtype())?;
    apply_scalar(name, op, &a, s, &mut out, common)
}

/// Comparison of `a` and `b` (a tensor, or a scalar when `b` is `None`) into `out`.
fn compare<O: CmpOp>(
    ctx: &mut KernelContext<'_>,
    name: &str,
    op: O,
    scalar: bool,
    out_i: usize,
) -> Result<()> {
    let a = ctx.tensor(0)?;
    let (b, s) = if scalar {
        (None, Some(ctx.scalar(1)?))
    } else {
        (Some(ctx.tensor(1)?), None)
    };
    let shape = match &b {
        Some(b) => broadcast_shape(name, a.sizes(), b.sizes())?,
        None => Shape::from_slice(a.sizes())?,
    };
    let common = match (&b, s) {
        (Some(b), _) => promote(a.dtype(), b.dtype())?,
        (None, Some(s)) => promote_scalar(a.dtype(), s),
        _ => a.dtype(),
    };
    let mut out = ctx.resize_out(out_i, &shape)?;
    let sa = bstrides(&a, &shape);
    let so = Shape::from_slice(out.strides())?;
    if out.dtype() == ScalarType::Bool && a.dtype() == common {
        match (&b, s) {
            (Some(b), _) if b.dtype() == common => {
                let sb = bstrides(b, &shape);
                return dispatch_all!(common, name, "input", |T| {
                    let (x, y) = (a.data::<T>()?, b.data::<T>()?);
                    let o = out.data_mut::<Bool>()?;
                    map2(&shape, x, &sa, y, &sb, o, &so, move |p: T, q: T| {
                        Bool::new(op.cmp(p.to_c(), q.to_c()))
                    });
                    Ok(())
                });
            }
            (None, Some(s)) => {
                return dispatch_all!(common, name, "input", |T| {
                    let x = a.data::<T>()?;
                    let o = out.data_mut::<Bool>()?;
                    let sc = <<T as Elem>::C as Compute>::from_scalar(s);
                    map1(&shape, x, &sa, o, &so, move |p: T| {
                        Bool::new(op.cmp(p.to_c(), sc))
                    });
                    Ok(())
                });
            }
            _ => {}
        }
    }
    #[allow(clippy::too_many_arguments)]
    fn mixed<C: Compute, O: CmpOp>(
        name: &str,
        op: O,
        a: &TensorRef<'_>,
        b: Result<&TensorRef<'_>, Scalar>,
        out: &mut TensorRef<'_>,
        shape: &[usize],
        sa: &[usize],
        so: &[usize],
    ) -> Result<()> {
        let x = AnySlice::of(name, a)?;
        let mut o = AnySliceMut::of(name, out)?;
        match b {
            Ok(b) => {
                let y = AnySlice::of(name, b)?;
                let sb = bstrides(b, shape);
                walk(shape, [sa, &sb, so], |[oa, ob, oo], len, [xa, xb, xo]| {
                    for i in 0..len {
                        let r = op.cmp(x.get::<C>(oa + i * xa), y.get::<C>(ob + i * xb));
                        o.set(oo + i * xo, r as i64);
                    }
                });
            }
            Err(s) => {
                let sc = C::from_scalar(s);
                walk(shape, [sa, so], |[oa, oo], len, [xa, xo]| {
                    for i in 0..len {
                        o.set(oo + i * xo, op.cmp(x.get::<C>(oa + i * xa), sc) as i64);
                    }
                });
            }
        }
        Ok(())
    }
    let bb = match (&b, s) {
        (Some(b), _) => Ok(b),
        (None, s) => Err(s.unwrap_or(Scalar::Int(0))),
    };
    #[allow(clippy::type_complexity)]
    let f: fn(
        &str,
        O,
        &TensorRef<'_>,
        Result<&TensorRef<'_>, Scalar>,
        &mut TensorRef<'_>,
        &[usize],
        &[usize],
        &[usize],
    ) -> Result<()> = match class_of(common) {
        Class::F32 => mixed::<f32, O>,
        Class::F64 => mixed::<f64, O>,
        Class::I64 => mixed::<i64, O>,
    };
    f(name, op, &a, bb, &mut out, &shape, &sa, &so)
}

/// `where(cond, a, b)`: args [condition, self, other, out].
fn where_self_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::where.self_out";
    let c = ctx.tensor(0)?;
    let a = ctx.tensor(1)?;
    let b = ctx.tensor(2)?;
    if c.dtype() != ScalarType::Bool && c.dtype() != ScalarType::Byte {
        return Err(Error::invalid_argument(format!(
            "{NAME}: condition must be bool, got {}",
            c.dtype()
        )));
    }
    let shape = broadcast_shape(NAME, c.sizes(), a.sizes())?;
    let shape = broadcast_shape(NAME, &shape, b.sizes())?;
    let common = promote(a.dtype(), b.dtype())?;
    let mut out = ctx.resize_out(3, &shape)?;
    check_cast(NAME, common, out.dtype())?;
    let (sc, sa, sb) = (
        bstrides(&c, &shape),
        bstrides(&a, &shape),
        bstrides(&b, &shape),
    );
    let so = Shape::from_slice(out.strides())?;
    let cond = c.data::<u8>()?;
    if a.dtype() == out.dtype() && b.dtype() == out.dtype() {
        return dispatch_all!(out.dtype(), NAME, "out", |T| {
            let (x, y) = (a.data::<T>()?, b.data::<T>()?);
            let o = out.data_mut::<T>()?;
            walk(
                &shape,
                [&sc, &sa, &sb, &so],
                |[oc, oa, ob, oo], len, [xc, xa, xb, xo]| {
                    for i in 0..len {
                        o[oo + i * xo] = if cond[oc + i * xc] != 0 {
                            x[oa + i * xa]
                        } else {
                            y[ob + i * xb]
                        };
                    }
                },
            );
            Ok(())
        });
    }
    let (x, y) = (AnySlice::of(NAME, &a)?, AnySlice::of(NAME, &b)?);
    let mut o = AnySliceMut::of(NAME, &mut out)?;
    let float = common.is_floating();
    walk(
        &shape,
        [&sc, &sa, &sb, &so],
        |[oc, oa, ob, oo], len, [xc, xa, xb, xo]| {
            for i in 0..len {
                let (src, j) = if cond[oc + i * xc] != 0 {
                    (&x, oa + i * xa)
                } else {
                    (&y, ob + i * xb)
                };
                if float {
                    o.set(oo + i * xo, src.get::<f64>(j));
                } else {
                    o.set(oo + i * xo, src.get::<i64>(j));
                }
            }
        },
    );
    Ok(())
}

/// `masked_fill(self, mask, value)`: args [self, mask, value, out].
fn masked_fill_scalar_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::masked_fill.Scalar_out";
    let a = ctx.tensor(0)?;
    let m = ctx.tensor(1)?;
    let v = ctx.scalar(2)?;
    if m.dtype() != ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{NAME}: mask must be bool, got {}",
            m.dtype()
        )));
    }
    let shape = broadcast_shape(NAME, a.sizes(), m.sizes())?;
    if &shape[..] != a.sizes() {
        return Err(Error::invalid_argument(format!(
            "{NAME}: mask {:?} does not broadcast to self {:?}",
            m.sizes(),
            a.sizes()
        )));
    }
    let mut out = ctx.resize_out(3, &shape)?;
    same_dtype(NAME, a.dtype(), out.dtype())?;
    let (sm, sa) = (bstrides(&m, &shape), bstrides(&a, &shape));
    let so = Shape::from_slice(out.strides())?;
    let mask = m.data::<u8>()?;
    dispatch_all!(a.dtype(), NAME, "self", |T| {
        let x = a.data::<T>()?;
        let o = out.data_mut::<T>()?;
        let fill = T::from_c(<<T as Elem>::C as Compute>::from_scalar(v));
        map2(&shape, mask, &sm, x, &sa, o, &so, move |k: u8, p: T| {
            if k != 0 { fill } else { p }
        });
        Ok(())
    })
}

macro_rules! tt {
    ($fname:ident, $name:literal, $op:expr, $out:expr) => {
        fn $fname(ctx: &mut KernelContext<'_>) -> Result<()> {
            tensor_tensor(ctx, $name, $op, $out)
        }
    };
}
macro_rules! ts {
    ($fname:ident, $name:literal, $op:expr, $out:expr) => {
        fn $fname(ctx: &mut KernelContext<'_>) -> Result<()> {
            tensor_scalar(ctx, $name, $op, $out)
        }
    };
}

fn add_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::add.out";
    let alpha = ctx.scalar(2)?;
    if alpha.to_f64() == 1.0 {
        tensor_tensor(ctx, NAME, Add, 3)
    } else {
        tensor_tensor(ctx, NAME, AddAlpha(alpha), 3)
    }
}
fn sub_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::sub.out";
    let alpha = ctx.scalar(2)?;
    if alpha.to_f64() == 1.0 {
        tensor_tensor(ctx, NAME, Sub, 3)
    } else {
        tensor_tensor(ctx, NAME, SubAlpha(alpha), 3)
    }
}
fn add_scalar_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let alpha = ctx.scalar(2)?;
    tensor_scalar(ctx, "aten::add.Scalar_out", AddAlpha(alpha), 3)
}
fn sub_scalar_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let alpha = ctx.scalar(2)?;
    tensor_scalar(ctx, "aten::sub.Scalar_out", SubAlpha(alpha), 3)
}
fn rsub_scalar_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let alpha = ctx.scalar(2)?;
    tensor_scalar(ctx, "aten::rsub.Scalar_out", RSubAlpha(alpha), 3)
}

fn rounding_mode(ctx: &KernelContext<'_>, name: &str, i: usize) -> Result<Option<bool>> {
    // None: true division; Some(false): trunc; Some(true): floor.
    match ctx.value(i)? {
        etch_core::EValue::None => Ok(None),
        _ => match ctx.string(i)? {
            "trunc" => Ok(Some(false)),
            "floor" => Ok(Some(true)),
            other => Err(Error::invalid_argument(format!(
                "{name}: unknown rounding_mode '{other}'"
            ))),
        },
    }
}

fn div_out_mode(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::div.out_mode";
    match rounding_mode(ctx, NAME, 2)? {
        None => tensor_tensor(ctx, NAME, Div, 3),
        Some(false) => tensor_tensor(ctx, NAME, DivTrunc, 3),
        Some(true) => tensor_tensor(ctx, NAME, DivFloor, 3),
    }
}
fn div_scalar_mode_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::div.Scalar_mode_out";
    match rounding_mode(ctx, NAME, 2)? {
        None => tensor_scalar(ctx, NAME, Div, 3),
        Some(false) => tensor_scalar(ctx, NAME, DivTrunc, 3),
        Some(true) => tensor_scalar(ctx, NAME, DivFloor, 3),
    }
}

tt!(mul_out, "aten::mul.out", Mul, 2);
tt!(div_out, "aten::div.out", Div, 2);
tt!(floor_divide_out, "aten::floor_divide.out", DivFloor, 2);
tt!(
    remainder_tensor_out,
    "aten::remainder.Tensor_out",
    Remainder,
    2
);
tt!(fmod_tensor_out, "aten::fmod.Tensor_out", Fmod, 2);
tt!(pow_tensor_tensor_out, "aten::pow.Tensor_Tensor_out", Pow, 2);
tt!(atan2_out, "aten::atan2.out", Atan2, 2);
tt!(maximum_out, "aten::maximum.out", Maximum, 2);
tt!(minimum_out, "aten::minimum.out", Minimum, 2);
tt!(
    bitwise_and_tensor_out,
    "aten::bitwise_and.Tensor_out",
    BitAnd,
    2
);
tt!(
    bitwise_or_tensor_out,
    "aten::bitwise_or.Tensor_out",
    BitOr,
    2
);
tt!(
    bitwise_xor_tensor_out,
    "aten::bitwise_xor.Tensor_out",
    BitXor,
    2
);
ts!(mul_scalar_out, "aten::mul.Scalar_out", Mul, 2);
ts!(div_scalar_out, "aten::div.Scalar_out", Div, 2);
ts!(
    remainder_scalar_out,
    "aten::remainder.Scalar_out",
    Remainder,
    2
);
ts!(fmod_scalar_out, "aten::fmod.Scalar_out", Fmod, 2);
ts!(
    bitwise_and_scalar_out,
    "aten::bitwise_and.Scalar_out",
    BitAnd,
    2
);

/// `pow(self, exponent)` with a scalar exponent; float exponents on integer tensors
/// promote, and `x ** 2` (either exponent kind) is `x * x`: exact, and no `powf` call.
fn pow_tensor_scalar_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::pow.Tensor_Scalar_out";
    let e = ctx.scalar(1)?;
    if matches!(e, Scalar::Int(2)) || matches!(e, Scalar::Double(v) if v == 2.0) {
        let a = ctx.tensor(0)?;
        let common = promote_scalar(a.dtype(), e);
        no_bool(NAME, common)?;
        let mut out = ctx.resize_out(2, a.sizes())?;
        check_cast(NAME, common, out.dtype())?;
        return apply_scalar(NAME, Square, &a, e, &mut out, common);
    }
    tensor_scalar(ctx, NAME, Pow, 2)
}

binop!(
    /// `a * a` (ignores `b`).
    Square, |s, a, b| a.mul(a));

binop!(
    /// `b ** a`: `pow` with the scalar as the base.
    RPow, |s, a, b| b.pow(a), check = no_bool, min_task = MATH_TASK);

/// `pow(self, exponent)` with a scalar base: args [self, exponent, out].
fn pow_scalar_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    const NAME: &str = "aten::pow.Scalar_out";
    let s = ctx.scalar(0)?;
    let a = ctx.tensor(1)?;
    let common = promote_scalar(a.dtype(), s);
    no_bool(NAME, common)?;
    let mut out = ctx.resize_out(2, a.sizes())?;
    check_cast(NAME, common, out.dtype())?;
    apply_scalar(NAME, RPow, &a, s, &mut out, common)
}

macro_rules! cmp_kernels {
    ($($tf:ident, $tn:literal, $sf:ident, $sn:literal, $op:ident);* $(;)?) => {$(
        fn $tf(ctx: &mut KernelContext<'_>) -> Result<()> {
            compare(ctx, $tn, $op, false, 2)
        }
        fn $sf(ctx: &mut KernelContext<'_>) -> Result<()> {
            compare(ctx, $sn, $op, true, 2)
        }
    )*};
}
cmp_kernels!(
    eq_tensor_out, "aten::eq.Tensor_out", eq_scalar_out, "aten::eq.Scalar_out", Eq;
    ne_tensor_out, "aten::ne.Tensor_out", ne_scalar_out, "aten::ne.Scalar_out", Ne;
    lt_tensor_out, "aten::lt.Tensor_out", lt_scalar_out, "aten::lt.Scalar_out", Lt;
    le_tensor_out, "aten::le.Tensor_out", le_scalar_out, "aten::le.Scalar_out", Le;
    gt_tensor_out, "aten::gt.Tensor_out", gt_scalar_out, "aten::gt.Scalar_out", Gt;
    ge_tensor_out, "aten::ge.Tensor_out", ge_scalar_out, "aten::ge.Scalar_out", Ge;
);
fn logical_and_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    compare(ctx, "aten::logical_and.out", LogicalAnd, false, 2)
}
fn logical_or_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    compare(ctx, "aten::logical_or.out", LogicalOr, false, 2)
}
fn logical_xor_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    compare(ctx, "aten::logical_xor.out", LogicalXor, false, 2)
}

/// Registers this module's kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    let list: &[(&str, etch_core::KernelFn)] = &[
        ("aten::add.out", add_out),
        ("aten::sub.out", sub_out),
        ("aten::mul.out", mul_out),
        ("aten::div.out", div_out),
        ("aten::div.out_mode", div_out_mode),
        ("aten::add.Scalar_out", add_scalar_out),
        ("aten::sub.Scalar_out", sub_scalar_out),
        ("aten::rsub.Scalar_out", rsub_scalar_out),
        ("aten::mul.Scalar_out", mul_scalar_out),
        ("aten::div.Scalar_out", div_scalar_out),
        ("aten::div.Scalar_mode_out", div_scalar_mode_out),
        ("aten::floor_divide.out", floor_divide_out),
        ("aten::remainder.Tensor_out", remainder_tensor_out),
        ("aten::remainder.Scalar_out", remainder_scalar_out),
        ("aten::fmod.Tensor_out", fmod_tensor_out),
        ("aten::fmod.Scalar_out", fmod_scalar_out),
        ("aten::pow.Tensor_Tensor_out", pow_tensor_tensor_out),
        ("aten::pow.Tensor_Scalar_out", pow_tensor_scalar_out),
        ("aten::pow.Scalar_out", pow_scalar_out),
        ("aten::maximum.out", maximum_out),
        ("aten::atan2.out", atan2_out),
        ("aten::minimum.out", minimum_out),
        ("aten::bitwise_and.Tensor_out", bitwise_and_tensor_out),
        ("aten::bitwise_and.Scalar_out", bitwise_and_scalar_out),
        ("aten::bitwise_or.Tensor_out", bitwise_or_tensor_out),
        ("aten::bitwise_xor.Tensor_out", bitwise_xor_tensor_out),
        ("aten::eq.Tensor_out", eq_tensor_out),
        ("aten::eq.Scalar_out", eq_scalar_out),
        ("aten::ne.Tensor_out", ne_tensor_out),
        ("aten::ne.Scalar_out", ne_scalar_out),
        ("aten::lt.Tensor_out", lt_tensor_out),
        ("aten::lt.Scalar_out", lt_scalar_out),
        ("aten::le.Tensor_out", le_tensor_out),
        ("aten::le.Scalar_out", le_scalar_out),
        ("aten::gt.Tensor_out", gt_tensor_out),
        ("aten::gt.Scalar_out", gt_scalar_out),
        ("aten::ge.Tensor_out", ge_tensor_out),
        ("aten::ge.Scalar_out", ge_scalar_out),
        ("aten::logical_and.out", logical_and_out),
        ("aten::logical_or.out", logical_or_out),
        ("aten::logical_xor.out", logical_xor_out),
        ("aten::where.self_out", where_self_out),
        ("aten::masked_fill.Scalar_out", masked_fill_scalar_out),
    ];
    for &(n, f) in list {
        reg.register(n, f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Add, BinOp, Clamped, Div, Mul, Sub};

    /// The fused clamp gives the op's result clamped, bit for bit on `f32`, NaN kept.
    #[test]
    fn clamped_is_the_op_then_the_clamp() {
        let vals = [
            -7.5f32,
            -0.0,
            0.0,
            1e-30,
            3.25,
            6.0,
            6.5,
            f32::INFINITY,
            f32::NAN,
        ];
        let clamp = |x: f32, lo: f32, hi: f32| {
            if x < lo {
                lo
            } else if x > hi {
                hi
            } else {
                x
            }
        };
        for (lo, hi) in [(0.0, 6.0), (0.0, f32::INFINITY), (f32::NEG_INFINITY, 1.0)] {
            for &a in &vals {
                for &b in &vals {
                    let pairs: [(f32, f32); 4] = [
                        (Clamped { op: Add, lo, hi }.apply(a, b), Add.apply(a, b)),
                        (Clamped { op: Sub, lo, hi }.apply(a, b), Sub.apply(a, b)),
                        (Clamped { op: Mul, lo, hi }.apply(a, b), Mul.apply(a, b)),
                        (Clamped { op: Div, lo, hi }.apply(a, b), Div.apply(a, b)),
                    ];
                    for (got, op) in pairs {
                        let want = clamp(op, lo, hi);
                        assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod rows_tests {
    use super::*;

    #[test]
    fn rows_by_vector_is_the_broadcast() {
        let x: Vec<f32> = (0..96).map(|i| (i as f32 * 0.37).sin()).collect();
        let v: Vec<f32> = (0..24).map(|i| (i as f32 * 0.11).cos()).collect();
        let op = Clamped {
            op: Sub,
            lo: -0.5,
            hi: 0.5,
        };
        for swap in [false, true] {
            let mut out = vec![0f32; 96];
            rows_by_vector_f32(op, &x, &v, swap, &mut out).unwrap();
            for (i, &o) in out.iter().enumerate() {
                let (a, b) = (x[i], v[i % 24]);
                let want: f32 = if swap { op.apply(b, a) } else { op.apply(a, b) };
                assert_eq!(o.to_bits(), want.to_bits());
            }
        }
        assert!(rows_by_vector_f32(Mul, &x[1..], &v, false, &mut vec![0f32; 95]).is_err());
    }

    /// In place, every spread (element by element, short and long rows, columns, a
    /// scalar, runs longer than a piece), both operand orders, one and two threads.
    #[test]
    fn inplace_is_the_broadcast() {
        let op = Clamped {
            op: Sub,
            lo: -0.5,
            hi: 0.5,
        };
        // (elements, values, run)
        for (n, c, run) in [
            (96, 96, 1),
            (20_000, 20_000, 1),
            (96, 24, 1),
            (3 * 9000, 9000, 1),
            (96, 8, 12),
            (40_000, 1, 40_000),
            (2 * 3 * 5000, 3, 5000),
        ] {
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let y: Vec<f32> = (0..c).map(|i| (i as f32 * 0.11).cos()).collect();
            for swap in [false, true] {
                for threads in [1, 2] {
                    crate::threads::set_num_threads(threads);
                    let mut o = x.clone();
                    inplace_f32(op, &mut o, &y, run, swap).unwrap();
                    for (i, &got) in o.iter().enumerate() {
                        let (a, b) = (x[i], y[(i / run) % c]);
                        let want: f32 = if swap { op.apply(b, a) } else { op.apply(a, b) };
                        assert_eq!(got.to_bits(), want.to_bits(), "{n} {c} {run} {swap} at {i}");
                    }
                }
            }
        }
        crate::threads::set_num_threads(0);
        assert!(inplace_f32(Mul, &mut [0f32; 10], &[1.0; 3], 1, false).is_err());
        assert!(inplace_f32(Mul, &mut [0f32; 10], &[1.0; 2], 0, false).is_err());
        assert!(inplace_f32(Mul, &mut [0f32; 0], &[1.0; 1], 0, false).is_ok());
    }

    /// Timing of the per-channel products of NCHW planes and of a dense sum (not a test: `cargo test
    /// --release -p etch-kernels --lib planes_speed -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn planes_speed() {
        crate::threads::set_num_threads(1);
        for (c, hw) in [(1152, 49), (672, 196), (144, 3136)] {
            let x: Vec<f32> = (0..c * hw).map(|i| (i % 13) as f32).collect();
            let v: Vec<f32> = (0..c).map(|i| i as f32 * 0.5).collect();
            let mut out = vec![0f32; x.len()];
            let time = |f: &mut dyn FnMut()| {
                (0..300)
                    .map(|_| {
                        let t0 = std::time::Instant::now();
                        f();
                        t0.elapsed().as_secs_f64() * 1e6
                    })
                    .fold(f64::MAX, f64::min)
            };
            let inf = Clamped {
                op: Mul,
                lo: f32::NEG_INFINITY,
                hi: f32::INFINITY,
            };
            let a = time(&mut || planes_by_vector_f32(inf, &x, &v, hw, false, &mut out).unwrap());
            let b = time(&mut || planes_by_vector_f32(Mul, &x, &v, hw, false, &mut out).unwrap());
            let sizes = [c, hw];
            let d = time(&mut || {
                map2_with(
                    1 << 20,
                    &sizes,
                    &x,
                    &[hw, 1],
                    &v,
                    &[1, 0],
                    &mut out,
                    &[hw, 1],
                    |p, q| Mul.apply::<f32>(p, q),
                )
            });
            println!("{c} x {hw}: clamped {a:.1} us, plain {b:.1} us, broadcast walk {d:.1} us");
            let y: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
            let n = [x.len()];
            let e = time(&mut || {
                map2_with(1 << 20, &n, &x, &[1], &y, &[1], &mut out, &[1], |p, q| {
                    Add.apply::<f32>(p, q)
                })
            });
            println!("  add of {} elements: {e:.1} us", x.len());
        }
        crate::threads::set_num_threads(0);
    }

    /// [`planes_by_vector_f32`]: plane `p` of `hw` elements takes `v[p % c]` (two batch
    /// items), the same bits as the broadcast, on one and two threads.
    #[test]
    fn planes_by_vector_is_the_broadcast() {
        let (c, hw) = (24, 49);
        let x: Vec<f32> = (0..2 * c * hw).map(|i| (i as f32 * 0.37).sin()).collect();
        let v: Vec<f32> = (0..c).map(|i| (i as f32 * 0.11).cos()).collect();
        let op = Clamped {
            op: Div,
            lo: -3.0,
            hi: 2.5,
        };
        for (swap, nt) in [(false, 1), (true, 1), (false, 2), (true, 2)] {
            crate::threads::set_num_threads(nt);
            let mut out = vec![0f32; x.len()];
            planes_by_vector_f32(op, &x, &v, hw, swap, &mut out).unwrap();
            crate::threads::set_num_threads(0);
            for (i, &o) in out.iter().enumerate() {
                let (a, b) = (x[i], v[i / hw % c]);
                let want: f32 = if swap { op.apply(b, a) } else { op.apply(a, b) };
                assert_eq!(o.to_bits(), want.to_bits());
            }
        }
        let mut out = vec![0f32; 2 * c * hw - 1];
        assert!(planes_by_vector_f32(Mul, &x[1..], &v, hw, false, &mut out).is_err());
        assert!(planes_by_vector_f32(Mul, &x, &v, 0, false, &mut vec![0f32; x.len()]).is_err());
    }
}
