//! Elementwise kernels (elementwise.cu): unary, binary and ternary maps over broadcast,
//! strided operands of any dtype, plus casts, fills and `arange`. Argument and dtype rules
//! come from the CPU kernels' helpers (`etch_kernels::util`), so both agree.

use crate::Family;
use crate::context::{Launch, with_device};
use crate::util::{MAX_DIMS, arg, check_rank, dt_code, ptr};
use etch_core::{Error, KernelContext, Result, Scalar, ScalarType, TensorRef};
use etch_kernels::util::{Shape, broadcast_shape, check_cast, promote, promote_scalar};

macro_rules! ops {
    ($($name:ident = $v:literal),* $(,)?) => {
        /// Elementwise operation codes (`OP_*` in elementwise.cu).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(missing_docs, non_camel_case_types, clippy::upper_case_acronyms)]
        pub enum Op { $($name = $v),* }
        const ALL: &[(&str, i32)] = &[$((stringify!($name), $v)),*];
    };
}

ops! {
    COPY = 0, FILL = 1, ARANGE = 2, ADD = 3, SUB = 4, MUL = 5, DIV = 6, DIV_TRUNC = 7,
    DIV_FLOOR = 8, REMAINDER = 9, FMOD = 10, MAXIMUM = 11, MINIMUM = 12, ATAN2 = 13, POW = 14,
    EQ = 15, NE = 16, LT = 17, LE = 18, GT = 19, GE = 20, LOGICAL_AND = 21, LOGICAL_OR = 22,
    LOGICAL_XOR = 23, LOGICAL_NOT = 24, BITWISE_AND = 25, BITWISE_OR = 26, BITWISE_XOR = 27,
    BITWISE_NOT = 28, WHERE = 29, ABS = 30, NEG = 31, SIGN = 32, RELU = 33, SIGMOID = 34,
    TANH = 35, EXP = 36, LOG = 37, SQRT = 38, RSQRT = 39, SIN = 40, COS = 41, TAN = 42,
    ASIN = 43, ACOS = 44, ATAN = 45, SINH = 46, COSH = 47, ASINH = 48, LOG2 = 49, LOG10 = 50,
    LOG1P = 51, EXPM1 = 52, ERF = 53, RECIPROCAL = 54, FLOOR = 55, CEIL = 56, ROUND = 57,
    TRUNC = 58, ISNAN = 59, ISINF = 60, SILU = 61, GELU = 62, GELU_TANH = 63, ELU = 64,
    LEAKY_RELU = 65, CLAMP = 67,
}

/// `#define OP_<NAME> <code>` for every op: prepended to every CUDA source.
pub(crate) fn prelude() -> String {
    let mut s = String::from("// Generated from elementwise.rs.\n");
    for (n, v) in ALL {
        s.push_str(&format!("#define OP_{n} {v}\n"));
    }
    s
}

/// Geometry (`struct Geo` in common.cuh).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Geo {
    pub ndim: i32,
    pub contig: i32,
    pub small: i32,
    pub pad: i32,
    pub size: [i64; MAX_DIMS],
    pub st: [[i64; MAX_DIMS]; 4],
}

/// `struct EwArgs` in elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct EwArgs {
    out: u64,
    ins: [u64; 3],
    dt: [i32; 4],
    err: u64,
    p: [f64; 8],
    q: [i64; 8],
    g: Geo,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for EwArgs {}

/// An operand: a tensor (broadcast to the output) or a scalar.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a> {
    T(&'a TensorRef<'a>),
    S(Scalar),
}

/// The compute domain of a map.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Domain {
    F32,
    F64,
    I64,
}

impl Domain {
    /// The domain PyTorch computes a result of dtype `t` in.
    pub(crate) fn of(t: ScalarType) -> Domain {
        match t {
            ScalarType::Double => Domain::F64,
            t if t.is_floating() => Domain::F32,
            _ => Domain::I64,
        }
    }
}

/// Broadcast strides of `t` (element units) for an output of `sizes`; 0 on broadcast dims.
pub(crate) fn bstrides(t: &TensorRef<'_>, sizes: &[usize]) -> [i64; MAX_DIMS] {
    let mut s = [0i64; MAX_DIMS];
    let off = sizes.len().saturating_sub(t.dim());
    for (d, (&size, &stride)) in t.sizes().iter().zip(t.strides()).enumerate() {
        if size != 1 && d + off < MAX_DIMS {
            s[d + off] = stride as i64;
        }
    }
    s
}

/// A strided operand of a map: address, dtype and element strides over the map's sizes.
#[derive(Clone, Copy)]
pub(crate) struct View {
    pub ptr: u64,
    pub dt: ScalarType,
    pub st: [i64; MAX_DIMS],
}

impl View {
    /// `t` broadcast to `sizes`.
    pub(crate) fn of(t: &TensorRef<'_>, sizes: &[usize]) -> View {
        View {
            ptr: ptr(t),
            dt: t.dtype(),
            st: bstrides(t, sizes),
        }
    }
}

/// A map's input: a strided view or a scalar.
#[derive(Clone, Copy)]
pub(crate) enum In {
    V(View),
    S(Scalar),
}

/// Runs map `op` into `out` (already sized) over `ins` in `domain`; `params` are the op's
/// parameters (p[0..4]; integer-domain values in `iparams`).
pub(crate) fn map(
    ctx: &KernelContext<'_>,
    op: Op,
    domain: Domain,
    out: &TensorRef<'_>,
    ins: &[Operand<'_>],
    params: [f64; 4],
    iparams: [i64; 4],
) -> Result<()> {
    let sizes = out.sizes();
    let mut contig = out.is_default_dim_order();
    let mut vs = [In::S(Scalar::Int(0)); 3];
    for (k, o) in ins.iter().enumerate().take(3) {
        vs[k] = match o {
            Operand::T(t) => {
                crate::util::same_device(ctx.op_name(), &[out, t])?;
                contig &= t.sizes() == sizes && t.is_default_dim_order();
                In::V(View::of(t, sizes))
            }
            Operand::S(s) => In::S(*s),
        };
    }
    let mut ost = [0i64; MAX_DIMS];
    for (d, &st) in out.strides().iter().enumerate().take(MAX_DIMS) {
        ost[d] = st as i64;
    }
    let ov = View {
        ptr: ptr(out),
        dt: out.dtype(),
        st: ost,
    };
    let dev = out.device();
    map_views(
        ctx,
        op,
        domain,
        dev,
        sizes,
        ov,
        &vs[..ins.len().min(3)],
        contig,
        params,
        iparams,
    )
}

/// Runs map `op` over explicit views (`contig`: every view is row-major over `sizes`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn map_views(
    ctx: &KernelContext<'_>,
    op: Op,
    domain: Domain,
    dev: etch_core::Device,
    sizes: &[usize],
    out: View,
    ins: &[In],
    contig: bool,
    params: [f64; 4],
    iparams: [i64; 4],
) -> Result<()> {
    let name = ctx.op_name();
    check_rank(name, sizes.len())?;
    let n: usize = sizes.iter().product();
    if n == 0 {
        return Ok(());
    }
    let mut g = Geo {
        ndim: sizes.len() as i32,
        contig: contig as i32,
        ..Default::default()
    };
    for (d, &v) in sizes.iter().enumerate() {
        g.size[d] = v as i64;
    }
    g.st[0] = out.st;
    for (k, o) in ins.iter().enumerate().take(3) {
        if let In::V(v) = o {
            g.st[k + 1] = v.st;
        }
    }
    collapse(&mut g);
    g.small = fits_32_bits(&g, n) as i32;
    let mut a = EwArgs {
        out: out.ptr,
        ins: [0; 3],
        dt: [dt_code(name, out.dt)?, 0, 0, 0],
        err: 0,
        p: [0.0; 8],
        q: [0; 8],
        g,
    };
    a.p[..4].copy_from_slice(&params);
    a.q[..4].copy_from_slice(&iparams);
    for (k, o) in ins.iter().enumerate().take(3) {
        match o {
            In::V(v) => {
                a.ins[k] = v.ptr;
                a.dt[k + 1] = dt_code(name, v.dt)?;
            }
            In::S(s) => {
                a.p[4 + k] = s.to_f64();
                a.q[4 + k] = s.to_i64();
            }
        }
    }
    let fname = match domain {
        Domain::F32 => "ew_f32",
        Domain::F64 => "ew_f64",
        Domain::I64 => "ew_i64",
    };
    let (mut opc, mut n) = (op as i32, n as i64);
    with_device(ctx, dev, |mut l: Launch<'_>| {
        a.err = l.err_ptr();
        let f = l.function(Family::Elementwise, fname)?;
        let mut args = [arg(&mut opc), arg(&mut n), arg(&mut a)];
        // SAFETY: pointers are live device memory of this device sized for the geometry
        // (checked by resize and the tensors' capacities); the arguments match
        // `ew_*(int op, i64 n, EwArgs a)`.
        unsafe { l.launch(f, n, &mut args) }
    })
}

/// Merges dims that every operand walks contiguously (dim `d` steps exactly over dim
/// `d + 1`) and drops size-1 dims, so the kernel decomposes fewer dims per element.
fn collapse(g: &mut Geo) {
    let n = g.ndim as usize;
    let mut size = [0i64; MAX_DIMS];
    let mut st = [[0i64; MAX_DIMS]; 4];
    let mut m = 0usize;
    for d in 0..n {
        if g.size[d] == 1 {
            continue;
        }
        let merge = m > 0 && (0..4).all(|k| st[k][m - 1] == g.st[k][d] * g.size[d]);
        let at = if merge { m - 1 } else { m };
        if merge {
            size[at] *= g.size[d];
        } else {
            size[at] = g.size[d];
            m += 1;
        }
        for (dst, src) in st.iter_mut().zip(&g.st) {
            dst[at] = src[d];
        }
    }
    g.ndim = m as i32;
    g.size = size;
    g.st = st;
}

/// True when 32-bit index arithmetic is exact: fewer than 2^31 elements and every offset
/// below 2^31, with no negative stride.
fn fits_32_bits(g: &Geo, n: usize) -> bool {
    let lim = 1i64 << 31;
    n < lim as usize
        && (0..4).all(|k| {
            let mut max = 0i64;
            for d in 0..g.ndim as usize {
                if g.st[k][d] < 0 {
                    return false;
                }
                max = max.saturating_add((g.size[d] - 1).saturating_mul(g.st[k][d]));
            }
            max < lim
        })
}

/// The domain a cast from `src` to `dst` computes in.
pub(crate) fn cast_domain(src: ScalarType, dst: ScalarType) -> Domain {
    if src == ScalarType::Double || dst == ScalarType::Double {
        Domain::F64
    } else if src.is_floating() {
        Domain::F32
    } else if dst.is_floating() {
        Domain::F64
    } else {
        Domain::I64
    }
}

fn tensor_out<'a>(ctx: &mut KernelContext<'a>, i: usize, sizes: &[usize]) -> Result<TensorRef<'a>> {
    ctx.resize_out(i, sizes)
}

fn no_bool(op: &str, t: ScalarType) -> Result<()> {
    if t == ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{op}: not supported for bool tensors"
        )));
    }
    Ok(())
}

fn integral_only(op: &str, t: ScalarType) -> Result<()> {
    if t.is_floating() {
        return Err(Error::invalid_argument(format!(
            "{op}: only integral and bool tensors are supported, got {t}"
        )));
    }
    Ok(())
}

/// A binary map of two operands with PyTorch's promotion; `float_result` makes an integral
/// common type compute in float (true division, atan2); `cmp` writes a comparison.
#[allow(clippy::too_many_arguments)]
fn binary_map(
    ctx: &mut KernelContext<'_>,
    op: Op,
    a: Operand<'_>,
    b: Operand<'_>,
    out_i: usize,
    alpha: Option<Scalar>,
    kind: Kind,
) -> Result<()> {
    let name = ctx.op_name();
    let (common, sizes) = match (a, b) {
        (Operand::T(x), Operand::T(y)) => (
            promote(x.dtype(), y.dtype())?,
            broadcast_shape(name, x.sizes(), y.sizes())?,
        ),
        (Operand::T(x), Operand::S(s)) | (Operand::S(s), Operand::T(x)) => {
            (promote_scalar(x.dtype(), s), Shape::from_slice(x.sizes())?)
        }
        _ => return Err(Error::internal(format!("{name}: no tensor operand"))),
    };
    let out = tensor_out(ctx, out_i, &sizes)?;
    let mut compute = common;
    match kind {
        Kind::Arith => check_cast(name, common, out.dtype())?,
        Kind::NoBool => {
            no_bool(name, common)?;
            check_cast(name, common, out.dtype())?;
        }
        Kind::FloatResult => {
            if !common.is_floating() {
                compute = ScalarType::Float;
            }
            check_cast(name, compute, out.dtype())?;
        }
        Kind::Cmp | Kind::Logical => {}
        Kind::Bitwise => {
            integral_only(name, common)?;
            check_cast(name, common, out.dtype())?;
        }
    }
    let (p, q) = match alpha {
        Some(s) => {
            if !common.is_floating() && s.is_floating() {
                return Err(Error::invalid_argument(format!(
                    "{name}: a floating-point alpha needs a floating-point result, got {common}"
                )));
            }
            ([s.to_f64(), 0.0, 0.0, 0.0], [s.to_i64(), 0, 0, 0])
        }
        None => ([1.0, 0.0, 0.0, 0.0], [1, 0, 0, 0]),
    };
    map(ctx, op, Domain::of(compute), &out, &[a, b], p, q)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Arith,
    NoBool,
    FloatResult,
    Cmp,
    Logical,
    Bitwise,
}

fn tt(ctx: &mut KernelContext<'_>, op: Op, kind: Kind, has_alpha: bool) -> Result<()> {
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    let alpha = if has_alpha {
        Some(ctx.scalar(2)?)
    } else {
        None
    };
    let out_i = if has_alpha { 3 } else { 2 };
    binary_map(ctx, op, Operand::T(&a), Operand::T(&b), out_i, alpha, kind)
}

fn ts(ctx: &mut KernelContext<'_>, op: Op, kind: Kind, has_alpha: bool) -> Result<()> {
    let a = ctx.tensor(0)?;
    let s = ctx.scalar(1)?;
    let alpha = if has_alpha {
        Some(ctx.scalar(2)?)
    } else {
        None
    };
    let out_i = if has_alpha { 3 } else { 2 };
    binary_map(ctx, op, Operand::T(&a), Operand::S(s), out_i, alpha, kind)
}

fn check_sub_bool(ctx: &KernelContext<'_>) -> Result<()> {
    let a = ctx.tensor(0)?;
    let b_bool = match ctx.value(1)? {
        etch_core::EValue::Tensor(t) => t.dtype() == ScalarType::Bool,
        etch_core::EValue::Bool(_) => true,
        _ => false,
    };
    if a.dtype() == ScalarType::Bool || b_bool {
        return Err(Error::invalid_argument(format!(
            "{}: subtraction with bool tensors is not supported; use logical_xor or ~",
            ctx.op_name()
        )));
    }
    Ok(())
}

fn rounding_mode(ctx: &KernelContext<'_>, i: usize) -> Result<Op> {
    match ctx.value(i)? {
        etch_core::EValue::None => Ok(Op::DIV),
        _ => match ctx.string(i)? {
            "trunc" => Ok(Op::DIV_TRUNC),
            "floor" => Ok(Op::DIV_FLOOR),
            other => Err(Error::invalid_argument(format!(
                "{}: rounding_mode must be None, 'trunc' or 'floor', got '{other}'",
                ctx.op_name()
            ))),
        },
    }
}

fn div_kind(op: Op) -> Kind {
    if op == Op::DIV {
        Kind::FloatResult
    } else {
        Kind::NoBool
    }
}

macro_rules! kernels {
    ($($f:ident => $body:expr;)*) => {
        $(pub(crate) fn $f(ctx: &mut KernelContext<'_>) -> Result<()> {
            #[allow(clippy::redundant_closure_call)]
            ($body)(ctx)
        })*
    };
}

kernels! {
    add_out => |c: &mut KernelContext<'_>| tt(c, Op::ADD, Kind::Arith, true);
    sub_out => |c: &mut KernelContext<'_>| { check_sub_bool(c)?; tt(c, Op::SUB, Kind::Arith, true) };
    mul_out => |c: &mut KernelContext<'_>| tt(c, Op::MUL, Kind::Arith, false);
    div_out => |c: &mut KernelContext<'_>| tt(c, Op::DIV, Kind::FloatResult, false);
    div_out_mode => |c: &mut KernelContext<'_>| { let op = rounding_mode(c, 2)?; let a = c.tensor(0)?; let b = c.tensor(1)?; binary_map(c, op, Operand::T(&a), Operand::T(&b), 3, None, div_kind(op)) };
    add_scalar_out => |c: &mut KernelContext<'_>| ts(c, Op::ADD, Kind::Arith, true);
    sub_scalar_out => |c: &mut KernelContext<'_>| { check_sub_bool(c)?; ts(c, Op::SUB, Kind::Arith, true) };
    mul_scalar_out => |c: &mut KernelContext<'_>| ts(c, Op::MUL, Kind::Arith, false);
    div_scalar_out => |c: &mut KernelContext<'_>| ts(c, Op::DIV, Kind::FloatResult, false);
    div_scalar_mode_out => |c: &mut KernelContext<'_>| { let op = rounding_mode(c, 2)?; let a = c.tensor(0)?; let s = c.scalar(1)?; binary_map(c, op, Operand::T(&a), Operand::S(s), 3, None, div_kind(op)) };
    rsub_scalar_out => |c: &mut KernelContext<'_>| { check_sub_bool(c)?; let a = c.tensor(0)?; let s = c.scalar(1)?; let alpha = c.scalar(2)?; rsub(c, &a, s, alpha) };
    remainder_tensor_out => |c: &mut KernelContext<'_>| tt(c, Op::REMAINDER, Kind::NoBool, false);
    remainder_scalar_out => |c: &mut KernelContext<'_>| ts(c, Op::REMAINDER, Kind::NoBool, false);
    fmod_tensor_out => |c: &mut KernelContext<'_>| tt(c, Op::FMOD, Kind::NoBool, false);
    fmod_scalar_out => |c: &mut KernelContext<'_>| ts(c, Op::FMOD, Kind::NoBool, false);
    floor_divide_out => |c: &mut KernelContext<'_>| tt(c, Op::DIV_FLOOR, Kind::NoBool, false);
    maximum_out => |c: &mut KernelContext<'_>| tt(c, Op::MAXIMUM, Kind::Arith, false);
    minimum_out => |c: &mut KernelContext<'_>| tt(c, Op::MINIMUM, Kind::Arith, false);
    atan2_out => |c: &mut KernelContext<'_>| tt(c, Op::ATAN2, Kind::FloatResult, false);
    pow_tt_out => |c: &mut KernelContext<'_>| pow(c, false);
    pow_ts_out => |c: &mut KernelContext<'_>| pow(c, true);
    pow_st_out => pow_scalar_base;
    eq_t => |c: &mut KernelContext<'_>| tt(c, Op::EQ, Kind::Cmp, false);
    ne_t => |c: &mut KernelContext<'_>| tt(c, Op::NE, Kind::Cmp, false);
    lt_t => |c: &mut KernelContext<'_>| tt(c, Op::LT, Kind::Cmp, false);
    le_t => |c: &mut KernelContext<'_>| tt(c, Op::LE, Kind::Cmp, false);
    gt_t => |c: &mut KernelContext<'_>| tt(c, Op::GT, Kind::Cmp, false);
    ge_t => |c: &mut KernelContext<'_>| tt(c, Op::GE, Kind::Cmp, false);
    eq_s => |c: &mut KernelContext<'_>| ts(c, Op::EQ, Kind::Cmp, false);
    ne_s => |c: &mut KernelContext<'_>| ts(c, Op::NE, Kind::Cmp, false);
    lt_s => |c: &mut KernelContext<'_>| ts(c, Op::LT, Kind::Cmp, false);
    le_s => |c: &mut KernelContext<'_>| ts(c, Op::LE, Kind::Cmp, false);
    gt_s => |c: &mut KernelContext<'_>| ts(c, Op::GT, Kind::Cmp, false);
    ge_s => |c: &mut KernelContext<'_>| ts(c, Op::GE, Kind::Cmp, false);
    logical_and_out => |c: &mut KernelContext<'_>| tt(c, Op::LOGICAL_AND, Kind::Logical, false);
    logical_or_out => |c: &mut KernelContext<'_>| tt(c, Op::LOGICAL_OR, Kind::Logical, false);
    logical_xor_out => |c: &mut KernelContext<'_>| tt(c, Op::LOGICAL_XOR, Kind::Logical, false);
    bitwise_and_t => |c: &mut KernelContext<'_>| tt(c, Op::BITWISE_AND, Kind::Bitwise, false);
    bitwise_or_t => |c: &mut KernelContext<'_>| tt(c, Op::BITWISE_OR, Kind::Bitwise, false);
    bitwise_xor_t => |c: &mut KernelContext<'_>| tt(c, Op::BITWISE_XOR, Kind::Bitwise, false);
    bitwise_and_s => |c: &mut KernelContext<'_>| ts(c, Op::BITWISE_AND, Kind::Bitwise, false);
}

fn rsub(ctx: &mut KernelContext<'_>, a: &TensorRef<'_>, s: Scalar, alpha: Scalar) -> Result<()> {
    // other - alpha * self == SUB(scalar, self) with the scalar as first operand.
    binary_map(
        ctx,
        Op::SUB,
        Operand::S(s),
        Operand::T(a),
        3,
        Some(alpha),
        Kind::Arith,
    )
}

/// `pow.Scalar_out(self: Scalar, exponent: Tensor, *, out)`.
fn pow_scalar_base(ctx: &mut KernelContext<'_>) -> Result<()> {
    let name = ctx.op_name();
    let s = ctx.scalar(0)?;
    let a = ctx.tensor(1)?;
    let common = promote_scalar(a.dtype(), s);
    if common == ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{name}: bool tensors are not supported"
        )));
    }
    binary_map(
        ctx,
        Op::POW,
        Operand::S(s),
        Operand::T(&a),
        2,
        None,
        Kind::Arith,
    )
}

fn pow(ctx: &mut KernelContext<'_>, scalar_exp: bool) -> Result<()> {
    let name = ctx.op_name();
    let a = ctx.tensor(0)?;
    if scalar_exp {
        let e = ctx.scalar(1)?;
        let common = promote_scalar(a.dtype(), e);
        if !common.is_floating() && e.to_i64() < 0 {
            return Err(Error::invalid_argument(format!(
                "{name}: integers to negative integer powers are not allowed"
            )));
        }
        binary_map(
            ctx,
            Op::POW,
            Operand::T(&a),
            Operand::S(e),
            2,
            None,
            Kind::Arith,
        )
    } else {
        let b = ctx.tensor(1)?;
        binary_map(
            ctx,
            Op::POW,
            Operand::T(&a),
            Operand::T(&b),
            2,
            None,
            Kind::Arith,
        )
    }
}

/// A unary map: `float_op` results are floating (integral inputs give float32, or the
/// out's float dtype); others keep the input's dtype class.
fn unary(
    ctx: &mut KernelContext<'_>,
    op: Op,
    float_op: bool,
    out_i: usize,
    p: [f64; 4],
) -> Result<()> {
    let name = ctx.op_name();
    let a = ctx.tensor(0)?;
    let out = ctx.resize_out(out_i, a.sizes())?;
    let domain = if float_op {
        if !out.dtype().is_floating() {
            return Err(Error::invalid_argument(format!(
                "{name}: out must be floating point, got {}",
                out.dtype()
            )));
        }
        if a.dtype().is_floating() && a.dtype() == ScalarType::Double {
            Domain::F64
        } else {
            Domain::of(out.dtype())
        }
    } else {
        check_cast(name, a.dtype(), out.dtype())?;
        Domain::of(a.dtype())
    };
    let q = [p[0] as i64, p[1] as i64, p[2] as i64, p[3] as i64];
    map(ctx, op, domain, &out, &[Operand::T(&a)], p, q)
}

fn float_only_input(ctx: &KernelContext<'_>) -> Result<()> {
    let dt = ctx.tensor(0)?.dtype();
    if !dt.is_floating() {
        return Err(Error::invalid_argument(format!(
            "{}: input must be floating point, got {dt}",
            ctx.op_name()
        )));
    }
    Ok(())
}

macro_rules! float_unary {
    ($($f:ident => $op:ident),* $(,)?) => {
        $(pub(crate) fn $f(ctx: &mut KernelContext<'_>) -> Result<()> {
            unary(ctx, Op::$op, true, 1, [0.0; 4])
        })*
    };
}

float_unary! {
    sigmoid_out => SIGMOID, tanh_out => TANH, exp_out => EXP, log_out => LOG, sqrt_out => SQRT,
    rsqrt_out => RSQRT, sin_out => SIN, cos_out => COS, tan_out => TAN, asin_out => ASIN,
    acos_out => ACOS, atan_out => ATAN, sinh_out => SINH, cosh_out => COSH, asinh_out => ASINH,
    log2_out => LOG2, log10_out => LOG10, log1p_out => LOG1P, expm1_out => EXPM1, erf_out => ERF,
    reciprocal_out => RECIPROCAL, silu_out => SILU,
}

kernels! {
    abs_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::ABS, false, 1, [0.0; 4]) };
    neg_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::NEG, false, 1, [0.0; 4]) };
    sign_out => |c: &mut KernelContext<'_>| unary(c, Op::SIGN, false, 1, [0.0; 4]);
    relu_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::RELU, false, 1, [0.0; 4]) };
    floor_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::FLOOR, false, 1, [0.0; 4]) };
    ceil_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::CEIL, false, 1, [0.0; 4]) };
    round_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::ROUND, false, 1, [0.0; 4]) };
    trunc_out => |c: &mut KernelContext<'_>| { no_bool(c.op_name(), c.tensor(0)?.dtype())?; unary(c, Op::TRUNC, false, 1, [0.0; 4]) };
    bitwise_not_out => |c: &mut KernelContext<'_>| bitwise_not(c);
    logical_not_out => |c: &mut KernelContext<'_>| predicate(c, Op::LOGICAL_NOT);
    isnan_out => |c: &mut KernelContext<'_>| predicate(c, Op::ISNAN);
    isinf_out => |c: &mut KernelContext<'_>| predicate(c, Op::ISINF);
    gelu_out => |c: &mut KernelContext<'_>| gelu(c);
    elu_out => |c: &mut KernelContext<'_>| { float_only_input(c)?; let p = [c.scalar(1)?.to_f64(), c.scalar(2)?.to_f64(), c.scalar(3)?.to_f64(), 0.0]; unary(c, Op::ELU, true, 4, p) };
    leaky_relu_out => |c: &mut KernelContext<'_>| { float_only_input(c)?; let p = [c.scalar(1)?.to_f64(), 0.0, 0.0, 0.0]; unary(c, Op::LEAKY_RELU, true, 2, p) };
    hardtanh_out => |c: &mut KernelContext<'_>| hardtanh(c);
    clamp_out => |c: &mut KernelContext<'_>| clamp(c);
}

fn bitwise_not(ctx: &mut KernelContext<'_>) -> Result<()> {
    let dt = ctx.tensor(0)?.dtype();
    integral_only(ctx.op_name(), dt)?;
    if dt == ScalarType::Bool {
        return predicate(ctx, Op::LOGICAL_NOT);
    }
    unary(ctx, Op::BITWISE_NOT, false, 1, [0.0; 4])
}

/// A test whose result is a bool (or any out dtype): computed in the input's domain.
fn predicate(ctx: &mut KernelContext<'_>, op: Op) -> Result<()> {
    let a = ctx.tensor(0)?;
    let out = ctx.resize_out(1, a.sizes())?;
    map(
        ctx,
        op,
        Domain::of(a.dtype()),
        &out,
        &[Operand::T(&a)],
        [0.0; 4],
        [0; 4],
    )
}

fn gelu(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = match ctx.string(1)? {
        "none" => Op::GELU,
        "tanh" => Op::GELU_TANH,
        other => {
            return Err(Error::invalid_argument(format!(
                "{}: unknown approximate mode '{other}'",
                ctx.op_name()
            )));
        }
    };
    unary(ctx, op, true, 2, [0.0; 4])
}

fn hardtanh(ctx: &mut KernelContext<'_>) -> Result<()> {
    let name = ctx.op_name();
    let a = ctx.tensor(0)?;
    no_bool(name, a.dtype())?;
    let (lo, hi) = (ctx.scalar(1)?, ctx.scalar(2)?);
    let out = ctx.resize_out(3, a.sizes())?;
    check_cast(name, a.dtype(), out.dtype())?;
    let p = [1.0, 1.0, 0.0, 0.0];
    let q = [1, 1, lo.to_i64(), hi.to_i64()];
    let mut pp = p;
    pp[0] = lo.to_f64();
    pp[1] = hi.to_f64();
    // Integers clamp through q[2]/q[3]; floats through p[0]/p[1] (CLAMP reads both).
    map(
        ctx,
        Op::CLAMP,
        Domain::of(a.dtype()),
        &out,
        &[Operand::T(&a)],
        pp,
        q,
    )
}

fn clamp(ctx: &mut KernelContext<'_>) -> Result<()> {
    let name = ctx.op_name();
    let a = ctx.tensor(0)?;
    let lo = ctx.opt_scalar(1)?;
    let hi = ctx.opt_scalar(2)?;
    let mut common = a.dtype();
    for s in [lo, hi].into_iter().flatten() {
        common = promote(common, promote_scalar(a.dtype(), s))?;
    }
    no_bool(name, common)?;
    if lo.is_none() && hi.is_none() {
        return Err(Error::invalid_argument(format!(
            "{name}: at least one of min and max must be given"
        )));
    }
    let out = ctx.resize_out(3, a.sizes())?;
    check_cast(name, common, out.dtype())?;
    let p = [
        lo.map_or(0.0, |s| s.to_f64()),
        hi.map_or(0.0, |s| s.to_f64()),
        0.0,
        0.0,
    ];
    let q = [
        lo.is_some() as i64,
        hi.is_some() as i64,
        lo.map_or(0, |s| s.to_i64()),
        hi.map_or(0, |s| s.to_i64()),
    ];
    map(
        ctx,
        Op::CLAMP,
        Domain::of(common),
        &out,
        &[Operand::T(&a)],
        p,
        q,
    )
}

/// `where.self_out(condition, self, other, out)`.
pub(crate) fn where_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let name = ctx.op_name();
    let c = ctx.tensor(0)?;
    let a = ctx.tensor(1)?;
    let b = ctx.tensor(2)?;
    if !matches!(c.dtype(), ScalarType::Bool | ScalarType::Byte) {
        return Err(Error::invalid_argument(format!(
            "{name}: condition must be bool, got {}",
            c.dtype()
        )));
    }
    let common = promote(a.dtype(), b.dtype())?;
    let s1 = broadcast_shape(name, c.sizes(), a.sizes())?;
    let sizes = broadcast_shape(name, &s1, b.sizes())?;
    let out = ctx.resize_out(3, &sizes)?;
    check_cast(name, common, out.dtype())?;
    map(
        ctx,
        Op::WHERE,
        Domain::of(common),
        &out,
        &[Operand::T(&c), Operand::T(&a), Operand::T(&b)],
        [0.0; 4],
        [0; 4],
    )
}

/// `masked_fill.Scalar_out(self, mask, value, out)`.
pub(crate) fn masked_fill_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let name = ctx.op_name();
    let a = ctx.tensor(0)?;
    let m = ctx.tensor(1)?;
    let v = ctx.scalar(2)?;
    if m.dtype() != ScalarType::Bool {
        return Err(Error::invalid_argument(format!(
            "{name}: mask must be bool, got {}",
            m.dtype()
        )));
    }
    let sizes = broadcast_shape(name, a.sizes(), m.sizes())?;
    if *sizes != *a.sizes() {
        return Err(Error::invalid_argument(format!(
            "{name}: mask {:?} does not broadcast to self {:?}",
            m.sizes(),
            a.sizes()
        )));
    }
    let out = ctx.resize_out(3, a.sizes())?;
    map(
        ctx,
        Op::WHERE,
        Domain::of(a.dtype()),
        &out,
        &[Operand::T(&m), Operand::S(v), Operand::T(&a)],
        [0.0; 4],
        [0; 4],
    )
}

/// Copies `src` (broadcast) into `out` with a dtype cast.
pub(crate) fn cast_into(
    ctx: &KernelContext<'_>,
    src: &TensorRef<'_>,
    out: &TensorRef<'_>,
) -> Result<()> {
    let domain = cast_domain(src.dtype(), out.dtype());
    map(
        ctx,
        Op::COPY,
        domain,
        out,
        &[Operand::T(src)],
        [0.0; 4],
        [0; 4],
    )
}

/// Fills `out` with `v`.
pub(crate) fn fill(ctx: &KernelContext<'_>, out: &TensorRef<'_>, v: Scalar) -> Result<()> {
    let name = ctx.op_name();
    if !out.dtype().is_floating() && v.is_floating() && out.dtype() != ScalarType::Bool {
        let x = v.to_f64();
        if x.fract() != 0.0 || !x.is_finite() {
            return Err(Error::invalid_argument(format!(
                "{name}: value {x} cannot be converted to {} without overflow",
                out.dtype()
            )));
        }
    }
    map(
        ctx,
        Op::FILL,
        Domain::of(out.dtype()),
        out,
        &[],
        [v.to_f64(), 0.0, 0.0, 0.0],
        [v.to_i64(), 0, 0, 0],
    )
}

/// `out[i] = start + step * i`, computed in `domain`.
pub(crate) fn arange_fill(
    ctx: &KernelContext<'_>,
    out: &TensorRef<'_>,
    start: Scalar,
    step: Scalar,
    domain: Domain,
) -> Result<()> {
    map(
        ctx,
        Op::ARANGE,
        domain,
        out,
        &[],
        [start.to_f64(), step.to_f64(), 0.0, 0.0],
        [start.to_i64(), step.to_i64(), 0, 0],
    )
}
