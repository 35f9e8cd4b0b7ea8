//! Shared machinery: element and compute traits, dtype dispatch macros, type promotion,
//! broadcasting and strided iteration.

use etch_core::{Element, Error, MAX_DIMS, Result, Scalar, ScalarType, TensorRef, bf16, f16};

/// A `bool` tensor element (one byte, 0 or 1), so that kernels can tell bools from `u8`.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[repr(transparent)]
pub struct Bool(pub u8);

impl Bool {
    /// As a Rust bool (any non-zero byte is true).
    #[inline(always)]
    pub fn get(self) -> bool {
        self.0 != 0
    }
    /// From a Rust bool.
    #[inline(always)]
    pub fn new(b: bool) -> Self {
        Bool(b as u8)
    }
}

// SAFETY: `Bool` is a transparent `u8` (size 1, the size of `ScalarType::Bool`), and every
// byte value is a valid `Bool` (non-zero reads as true).
unsafe impl Element for Bool {
    const SCALAR: ScalarType = ScalarType::Bool;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.get() as u8 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        Bool::new(v != 0.0)
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self.get() as i64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        Bool::new(v != 0)
    }
}

/// A type kernels compute in: `f32` (also for `f16`/`bf16` storage), `f64`, or `i64` (for
/// every integer type and bool). Integer arithmetic wraps, as in PyTorch.
pub trait Compute: Copy + PartialOrd + Send + Sync + 'static + std::fmt::Debug {
    /// True for the floating-point compute types.
    const IS_FLOAT: bool;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Converts from `f64` (floats truncate toward zero into integers).
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64`.
    fn to_f64(self) -> f64;
    /// Converts from `i64`.
    fn from_i64(v: i64) -> Self;
    /// Converts to `i64` (truncating).
    fn to_i64(self) -> i64;
    /// Converts a scalar argument.
    #[inline(always)]
    fn from_scalar(s: Scalar) -> Self {
        if Self::IS_FLOAT {
            Self::from_f64(s.to_f64())
        } else {
            Self::from_i64(s.to_i64())
        }
    }
    /// Converts to another compute type (exactly between integers).
    #[inline(always)]
    fn cast<D: Compute>(self) -> D {
        if Self::IS_FLOAT || D::IS_FLOAT {
            D::from_f64(self.to_f64())
        } else {
            D::from_i64(self.to_i64())
        }
    }
    /// `self + o`.
    fn add(self, o: Self) -> Self;
    /// `self - o`.
    fn sub(self, o: Self) -> Self;
    /// `self * o`.
    fn mul(self, o: Self) -> Self;
    /// `self / o` (integers: truncating; division by zero gives 0, callers check first).
    fn div(self, o: Self) -> Self;
    /// Floor division (integers: Python's `//`; floats: `floor(a / b)`).
    fn floor_div(self, o: Self) -> Self;
    /// Python-style remainder (the sign of the divisor).
    fn remainder(self, o: Self) -> Self;
    /// C-style remainder (the sign of the dividend).
    fn fmod(self, o: Self) -> Self;
    /// `self ** o`.
    fn pow(self, o: Self) -> Self;
    /// `-self`.
    fn neg(self) -> Self;
    /// `|self|`.
    fn abs(self) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// Bitwise and (integers only).
    fn bitand(self, o: Self) -> Self;
    /// Bitwise or (integers only).
    fn bitor(self, o: Self) -> Self;
    /// Bitwise xor (integers only).
    fn bitxor(self, o: Self) -> Self;
    /// True when non-zero.
    #[inline(always)]
    fn truthy(self) -> bool {
        self != Self::ZERO
    }
    /// `max` that propagates NaN (PyTorch's `maximum`).
    #[inline(always)]
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || self > o {
            self
        } else if o.is_nan() || o > self {
            o
        } else {
            self
        }
    }
    /// `min` that propagates NaN (PyTorch's `minimum`).
    #[inline(always)]
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || self < o {
            self
        } else if o.is_nan() || o < self {
            o
        } else {
            self
        }
    }
}

macro_rules! float_compute {
    ($t:ty) => {
        impl Compute for $t {
            const IS_FLOAT: bool = true;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline(always)]
            fn floor_div(self, o: Self) -> Self {
                // PyTorch's div_floor_floating: floor of the exact quotient's rounding.
                if o == 0.0 {
                    return self / o;
                }
                let m = self % o;
                let mut d = (self - m) / o;
                if m != 0.0 && ((o < 0.0) != (m < 0.0)) {
                    d -= 1.0;
                }
                if d == 0.0 {
                    return (0.0 as $t).copysign(self / o);
                }
                let f = d.floor();
                if d - f > 0.5 { f + 1.0 } else { f }
            }
            #[inline(always)]
            fn remainder(self, o: Self) -> Self {
                let m = self % o;
                if m != 0.0 && ((o < 0.0) != (m < 0.0)) {
                    m + o
                } else {
                    m
                }
            }
            #[inline(always)]
            fn fmod(self, o: Self) -> Self {
                self % o
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                self.powf(o)
            }
            #[inline(always)]
            fn neg(self) -> Self {
                -self
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn bitand(self, _o: Self) -> Self {
                self
            }
            #[inline(always)]
            fn bitor(self, _o: Self) -> Self {
                self
            }
            #[inline(always)]
            fn bitxor(self, _o: Self) -> Self {
                self
            }
        }
    };
}
float_compute!(f32);
float_compute!(f64);

impl Compute for i64 {
    const IS_FLOAT: bool = false;
    const ZERO: Self = 0;
    const ONE: Self = 1;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as i64
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        if o == 0 { 0 } else { self.wrapping_div(o) }
    }
    #[inline(always)]
    fn floor_div(self, o: Self) -> Self {
        if o == 0 {
            return 0;
        }
        let q = self.wrapping_div(o);
        if (self % o != 0) && ((self < 0) != (o < 0)) {
            q - 1
        } else {
            q
        }
    }
    #[inline(always)]
    fn remainder(self, o: Self) -> Self {
        if o == 0 {
            return 0;
        }
        let m = self.wrapping_rem(o);
        if m != 0 && ((o < 0) != (m < 0)) {
            m + o
        } else {
            m
        }
    }
    #[inline(always)]
    fn fmod(self, o: Self) -> Self {
        if o == 0 { 0 } else { self.wrapping_rem(o) }
    }
    #[inline(always)]
    fn pow(self, o: Self) -> Self {
        if o < 0 {
            // PyTorch: integer base to a negative power (only 1 and -1 are non-zero).
            return match self {
                1 => 1,
                -1 => {
                    if o % 2 == 0 {
                        1
                    } else {
                        -1
                    }
                }
                _ => 0,
            };
        }
        self.wrapping_pow(o.min(u32::MAX as i64) as u32)
    }
    #[inline(always)]
    fn neg(self) -> Self {
        self.wrapping_neg()
    }
    #[inline(always)]
    fn abs(self) -> Self {
        self.wrapping_abs()
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        false
    }
    #[inline(always)]
    fn bitand(self, o: Self) -> Self {
        self & o
    }
    #[inline(always)]
    fn bitor(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    fn bitxor(self, o: Self) -> Self {
        self ^ o
    }
}

/// Floating-point compute types (`f32`, `f64`) with the math kernels need.
pub trait Float:
    Compute
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::AddAssign
    + std::ops::MulAssign
{
    /// Positive infinity.
    const INFINITY: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// An `x` below which `e^x` rounds to `+0` (its exact value is under half the smallest
    /// subnormal), so [`Float::exp_or_zero`] need not call `exp`, whose underflow path is
    /// slow (glibc sets `errno`).
    const EXP_ZERO_BELOW: Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// `e^x`, the same value, with `+0` returned without calling `exp` below
    /// [`Float::EXP_ZERO_BELOW`] (masked attention scores).
    #[inline(always)]
    fn exp_or_zero(self) -> Self {
        if self < Self::EXP_ZERO_BELOW {
            Self::ZERO
        } else {
            self.exp()
        }
    }
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Floor.
    fn floor(self) -> Self;
    /// Ceiling.
    fn ceil(self) -> Self;
    /// Round half to even (`torch.round`).
    fn round_even(self) -> Self;
    /// Truncate toward zero.
    fn trunc(self) -> Self;
    /// `ln(1 + x)`, accurate near zero.
    fn ln_1p(self) -> Self;
    /// `e^x - 1`, accurate near zero.
    fn exp_m1(self) -> Self;
    /// `tan`.
    fn tan(self) -> Self;
    /// `asin`.
    fn asin(self) -> Self;
    /// `acos`.
    fn acos(self) -> Self;
    /// `atan`.
    fn atan(self) -> Self;
    /// `sinh`.
    fn sinh(self) -> Self;
    /// `cosh`.
    fn cosh(self) -> Self;
    /// `asinh`.
    fn asinh(self) -> Self;
    /// `log2`.
    fn log2(self) -> Self;
    /// `log10`.
    fn log10(self) -> Self;
    /// `self * a + b`, rounded once.
    fn mul_add(self, a: Self, b: Self) -> Self;
}

macro_rules! float_impl {
    ($t:ident, $erf:path, $zero_below:expr) => {
        impl Float for $t {
            const INFINITY: Self = $t::INFINITY;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const EXP_ZERO_BELOW: Self = $zero_below;
            #[inline(always)]
            fn exp(self) -> Self {
                $t::exp(self)
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                $t::mul_add(self, a, b)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $t::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $t::tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                $t::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                $t::cos(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                $t::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                $t::ceil(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                $t::round_ties_even(self)
            }
            #[inline(always)]
            fn trunc(self) -> Self {
                $t::trunc(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                $t::ln_1p(self)
            }
            #[inline(always)]
            fn exp_m1(self) -> Self {
                $t::exp_m1(self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                $t::tan(self)
            }
            #[inline(always)]
            fn asin(self) -> Self {
                $t::asin(self)
            }
            #[inline(always)]
            fn acos(self) -> Self {
                $t::acos(self)
            }
            #[inline(always)]
            fn atan(self) -> Self {
                $t::atan(self)
            }
            #[inline(always)]
            fn sinh(self) -> Self {
                $t::sinh(self)
            }
            #[inline(always)]
            fn cosh(self) -> Self {
                $t::cosh(self)
            }
            #[inline(always)]
            fn asinh(self) -> Self {
                $t::asinh(self)
            }
            #[inline(always)]
            fn log2(self) -> Self {
                $t::log2(self)
            }
            #[inline(always)]
            fn log10(self) -> Self {
                $t::log10(self)
            }
        }
    };
}
// ln(2^-150) = -103.97 (f32), ln(2^-1075) = -745.13 (f64).
float_impl!(f32, libm::erff, -104.0);
float_impl!(f64, libm::erf, -746.0);

/// A tensor element type together with the type kernels compute it in.
pub trait Elem: Element {
    /// The compute type.
    type C: Compute;
    /// Widens to the compute type.
    fn to_c(self) -> Self::C;
    /// Narrows from the compute type (rounding once for half types, wrapping for integers).
    fn from_c(c: Self::C) -> Self;
}

/// A floating-point tensor element type (`f32`, `f64`, `f16`, `bf16`).
pub trait FElem: Elem {
    /// The float compute type (`f32` for the half types).
    type F: Float + crate::scratch::ScratchElem + crate::gemm::GemmElem;
    /// Widens to the float compute type.
    fn to_f(self) -> Self::F;
    /// Rounds from the float compute type.
    fn from_f(f: Self::F) -> Self;
}

macro_rules! elem_same {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type C = $t;
            #[inline(always)]
            fn to_c(self) -> $t { self }
            #[inline(always)]
            fn from_c(c: $t) -> Self { c }
        }
        impl FElem for $t {
            type F = $t;
            #[inline(always)]
            fn to_f(self) -> $t { self }
            #[inline(always)]
            fn from_f(c: $t) -> Self { c }
        }
    )*};
}
elem_same!(f32, f64);

macro_rules! elem_half {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type C = f32;
            #[inline(always)]
            fn to_c(self) -> f32 { self.to_f32() }
            #[inline(always)]
            fn from_c(c: f32) -> Self { <$t>::from_f32(c) }
        }
        impl FElem for $t {
            type F = f32;
            #[inline(always)]
            fn to_f(self) -> f32 { self.to_f32() }
            #[inline(always)]
            fn from_f(c: f32) -> Self { <$t>::from_f32(c) }
        }
    )*};
}
elem_half!(f16, bf16);

macro_rules! elem_int {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type C = i64;
            #[inline(always)]
            fn to_c(self) -> i64 { self as i64 }
            #[inline(always)]
            fn from_c(c: i64) -> Self { c as $t }
        }
    )*};
}
elem_int!(u8, i8, i16, i32, i64);

impl Elem for Bool {
    type C = i64;
    #[inline(always)]
    fn to_c(self) -> i64 {
        self.get() as i64
    }
    #[inline(always)]
    fn from_c(c: i64) -> Self {
        Bool::new(c != 0)
    }
}

/// An error for an unsupported dtype.
pub fn bad_dtype(op: &str, what: &str, dt: ScalarType) -> Error {
    Error::invalid_argument(format!("{op}: {what} has unsupported dtype {dt}"))
}

/// Runs `$body` with `$T` bound to the Rust type of a floating dtype.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_float {
    ($dt:expr, $op:expr, $what:expr, |$T:ident| $body:expr) => {{
        use $crate::util::*;
        match $dt {
            etch_core::ScalarType::Float => {
                type $T = f32;
                $body
            }
            etch_core::ScalarType::Double => {
                type $T = f64;
                $body
            }
            etch_core::ScalarType::Half => {
                type $T = etch_core::f16;
                $body
            }
            etch_core::ScalarType::BFloat16 => {
                type $T = etch_core::bf16;
                $body
            }
            other => Err(bad_dtype($op, $what, other)),
        }
    }};
}

/// Runs `$body` with `$T` bound to the Rust type of any supported real dtype, or bool.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_all {
    ($dt:expr, $op:expr, $what:expr, |$T:ident| $body:expr) => {{
        use $crate::util::*;
        match $dt {
            etch_core::ScalarType::Byte => {
                type $T = u8;
                $body
            }
            etch_core::ScalarType::Char => {
                type $T = i8;
                $body
            }
            etch_core::ScalarType::Short => {
                type $T = i16;
                $body
            }
            etch_core::ScalarType::Int => {
                type $T = i32;
                $body
            }
            etch_core::ScalarType::Long => {
                type $T = i64;
                $body
            }
            etch_core::ScalarType::Bool => {
                type $T = Bool;
                $body
            }
            other => $crate::dispatch_float!(other, $op, $what, |$T| $body),
        }
    }};
}

/// Runs `$body` with `$T` bound to an element type of the same size as `$dt` (for copies
/// that only move bytes).
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_bytes {
    ($dt:expr, $op:expr, |$T:ident| $body:expr) => {{
        match $dt.element_size() {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            8 => {
                type $T = u64;
                $body
            }
            n => Err(etch_core::Error::not_supported(format!(
                "{}: elements of {n} bytes",
                $op
            ))),
        }
    }};
}

/// A short, fixed-capacity list of sizes or strides (no heap).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    len: usize,
    v: [usize; MAX_DIMS],
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            len: 0,
            v: [0; MAX_DIMS],
        }
    }
}

impl Shape {
    /// An empty shape (a 0-d tensor).
    pub fn new() -> Self {
        Self::default()
    }
    /// Copies a slice.
    pub fn from_slice(s: &[usize]) -> Result<Self> {
        let mut r = Shape::new();
        for &x in s {
            r.push(x)?;
        }
        Ok(r)
    }
    /// `n` copies of `x`.
    pub fn filled(n: usize, x: usize) -> Result<Self> {
        let mut r = Shape::new();
        for _ in 0..n {
            r.push(x)?;
        }
        Ok(r)
    }
    /// Appends a dimension.
    pub fn push(&mut self, x: usize) -> Result<()> {
        if self.len >= MAX_DIMS {
            return Err(Error::invalid_argument(format!(
                "more than {MAX_DIMS} dimensions"
            )));
        }
        self.v[self.len] = x;
        self.len += 1;
        Ok(())
    }
    /// Inserts a dimension at `at`.
    pub fn insert(&mut self, at: usize, x: usize) -> Result<()> {
        if self.len >= MAX_DIMS || at > self.len {
            return Err(Error::invalid_argument(format!(
                "cannot insert a dimension at {at} of a {}-d shape",
                self.len
            )));
        }
        self.v.copy_within(at..self.len, at + 1);
        self.v[at] = x;
        self.len += 1;
        Ok(())
    }
    /// Removes the dimension at `at`.
    pub fn remove(&mut self, at: usize) {
        if at < self.len {
            self.v.copy_within(at + 1..self.len, at);
            self.len -= 1;
        }
    }
}

impl std::ops::Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.v[..self.len]
    }
}

impl std::ops::DerefMut for Shape {
    fn deref_mut(&mut self) -> &mut [usize] {
        &mut self.v[..self.len]
    }
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// Row-major (contiguous) strides for `sizes`.
pub fn contiguous_strides(sizes: &[usize]) -> Shape {
    let mut s = Shape {
        len: sizes.len(),
        v: [0; MAX_DIMS],
    };
    let mut acc = 1usize;
    for d in (0..sizes.len()).rev() {
        s.v[d] = acc;
        acc = acc.saturating_mul(sizes[d].max(1));
    }
    s
}

/// Converts a list of (possibly negative) sizes to `usize`, rejecting negatives.
pub fn to_sizes(op: &str, s: &[i64]) -> Result<Shape> {
    let mut r = Shape::new();
    for &x in s {
        if x < 0 {
            return Err(Error::invalid_argument(format!(
                "{op}: negative size {x} in {s:?}"
            )));
        }
        r.push(x as usize)?;
    }
    Ok(r)
}

/// Normalises a possibly negative dim against `ndim`, with the op name in the error.
pub fn wrap(op: &str, dim: i64, ndim: usize) -> Result<usize> {
    etch_core::wrap_dim(dim, ndim)
        .map_err(|e| Error::invalid_argument(format!("{op}: {}", e.message())))
}

fn int_rank(t: ScalarType) -> Option<u8> {
    use ScalarType::*;
    Some(match t {
        Char => 1,
        Short => 2,
        Int => 3,
        Long => 4,
        _ => return None,
    })
}

/// PyTorch's `promote_types` for the dtypes etch computes on.
pub fn promote(a: ScalarType, b: ScalarType) -> Result<ScalarType> {
    use ScalarType::*;
    if a == b {
        return Ok(a);
    }
    if !a.is_compute_supported() || !b.is_compute_supported() {
        return Err(Error::not_supported(format!(
            "type promotion of {a} and {b} is not supported"
        )));
    }
    if a == Bool {
        return Ok(b);
    }
    if b == Bool {
        return Ok(a);
    }
    match (a.is_floating(), b.is_floating()) {
        (true, false) => Ok(a),
        (false, true) => Ok(b),
        (true, true) => Ok(match (a, b) {
            (Double, _) | (_, Double) => Double,
            _ => Float, // f16+bf16, f16+f32, bf16+f32
        }),
        (false, false) => Ok(match (a, b) {
            (Byte, o) | (o, Byte) => match o {
                Char => Short,
                other => other,
            },
            _ => {
                if int_rank(a) >= int_rank(b) {
                    a
                } else {
                    b
                }
            }
        }),
    }
}

/// The result dtype of a tensor of dtype `t` combined with a scalar (PyTorch's rule: a
/// scalar only raises the category, to the default dtype of that category).
pub fn promote_scalar(t: ScalarType, s: Scalar) -> ScalarType {
    match s {
        Scalar::Double(_) if !t.is_floating() => ScalarType::Float,
        Scalar::Int(_) if t == ScalarType::Bool => ScalarType::Long,
        _ => t,
    }
}

/// Checks that a result of dtype `from` may be written to an out tensor of dtype `to`
/// (PyTorch's `canCast`: no float to integer, no non-bool to bool).
pub fn check_cast(op: &str, from: ScalarType, to: ScalarType) -> Result<()> {
    let ok = if from.is_floating() {
        to.is_floating()
    } else if from.is_integral() {
        to != ScalarType::Bool
    } else {
        true
    };
    if ok && to.is_compute_supported() {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{op}: result type {from} cannot be written to an out tensor of dtype {to}"
        )))
    }
}

/// The broadcast shape of two shapes (numpy rules).
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let n = a.len().max(b.len());
    let mut out = Shape::filled(n, 1)?;
    for i in 0..n {
        let x = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let y = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err(Error::invalid_argument(format!(
                "{op}: shapes {a:?} and {b:?} cannot be broadcast together"
            )));
        };
    }
    Ok(out)
}

/// Strides that read a tensor of `sizes`/`strides` broadcast to `out` (0 on broadcast
/// dims). The caller has checked that the shapes broadcast.
pub fn broadcast_strides(sizes: &[usize], strides: &[usize], out: &[usize]) -> Shape {
    let mut s = Shape {
        len: out.len(),
        v: [0; MAX_DIMS],
    };
    let off = out.len() - sizes.len().min(out.len());
    for d in 0..sizes.len().min(out.len()) {
        if sizes[d] != 1 || out[off + d] == 1 {
            s.v[off + d] = strides[d];
        }
    }
    s
}

/// Strides of tensor `t` broadcast to `out`.
pub fn bstrides(t: &TensorRef<'_>, out: &[usize]) -> Shape {
    broadcast_strides(t.sizes(), t.strides(), out)
}

/// A strided iteration with the dims that are contiguous for every operand merged:
/// `n` dims, innermost first, their sizes and every operand's strides.
struct Coalesced<const N: usize> {
    n: usize,
    cs: [usize; MAX_DIMS],
    cst: [[usize; MAX_DIMS]; N],
}

impl<const N: usize> Coalesced<N> {
    /// `None` when the iteration is empty.
    #[inline(always)]
    fn new(sizes: &[usize], strides: [&[usize]; N]) -> Option<Self> {
        if sizes.contains(&0) {
            return None;
        }
        let mut c = Coalesced {
            n: 0,
            cs: [0; MAX_DIMS],
            cst: [[0; MAX_DIMS]; N],
        };
        for d in (0..sizes.len()).rev() {
            if sizes[d] == 1 {
                continue;
            }
            let n = c.n;
            if n > 0 && (0..N).all(|k| strides[k][d] == c.cst[k][n - 1] * c.cs[n - 1]) {
                c.cs[n - 1] *= sizes[d];
                continue;
            }
            c.cs[n] = sizes[d];
            for k in 0..N {
                c.cst[k][n] = strides[k][d];
            }
            c.n += 1;
        }
        Some(c)
    }

    /// [`Coalesced::new`] with the dims first ordered by operand `key`'s strides, largest
    /// outermost (stable: equal strides keep their order). For elementwise maps, which may
    /// visit elements in any order: an output laid out in another dim order than its shape's
    /// (a channels-first view of an NHWC-shaped value, say) then still gives the long rows
    /// of its memory order.
    #[inline(always)]
    fn by_memory(sizes: &[usize], strides: [&[usize]; N], key: usize) -> Option<Self> {
        let nd = sizes.len();
        if nd > MAX_DIMS {
            return Self::new(sizes, strides);
        }
        let mut order = [0usize; MAX_DIMS];
        for (d, o) in order.iter_mut().enumerate().take(nd) {
            *o = d;
        }
        // Insertion sort: at most MAX_DIMS dims.
        for i in 1..nd {
            let mut j = i;
            while j > 0 && strides[key][order[j - 1]] < strides[key][order[j]] {
                order.swap(j - 1, j);
                j -= 1;
            }
        }
        if order[..nd].iter().enumerate().all(|(i, &d)| i == d) {
            return Self::new(sizes, strides);
        }
        let mut sz = [0usize; MAX_DIMS];
        let mut st = [[0usize; MAX_DIMS]; N];
        for (i, &d) in order[..nd].iter().enumerate() {
            sz[i] = sizes[d];
            for k in 0..N {
                st[k][i] = strides[k][d];
            }
        }
        let st: [&[usize]; N] = std::array::from_fn(|k| &st[k][..nd]);
        Self::new(&sz[..nd], st)
    }

    /// Length of a row and every operand's step along it.
    #[inline(always)]
    fn row(&self) -> (usize, [usize; N]) {
        if self.n == 0 {
            return (1, [0; N]);
        }
        let mut step = [0usize; N];
        for k in 0..N {
            step[k] = self.cst[k][0];
        }
        (self.cs[0], step)
    }

    /// Number of rows.
    #[inline(always)]
    fn rows(&self) -> usize {
        self.cs[1..self.n.max(1)].iter().product()
    }

    /// Calls `f` for rows `rows` in order.
    #[inline(always)]
    fn each_row(
        &self,
        rows: std::ops::Range<usize>,
        f: &mut impl FnMut([usize; N], usize, [usize; N]),
    ) {
        let (len, step) = self.row();
        if rows.is_empty() {
            return;
        }
        // The multi-index and offsets of the first row.
        let mut idx = [0usize; MAX_DIMS];
        let mut off = [0usize; N];
        let mut r = rows.start;
        for j in 1..self.n {
            if r == 0 {
                break;
            }
            idx[j] = r % self.cs[j];
            r /= self.cs[j];
            for k in 0..N {
                off[k] += idx[j] * self.cst[k][j];
            }
        }
        for _ in rows {
            f(off, len, step);
            let mut j = 1;
            while j < self.n {
                idx[j] += 1;
                for k in 0..N {
                    off[k] += self.cst[k][j];
                }
                if idx[j] < self.cs[j] {
                    break;
                }
                for k in 0..N {
                    off[k] -= self.cst[k][j] * self.cs[j];
                }
                idx[j] = 0;
                j += 1;
            }
        }
    }
}

/// Walks an `N`-operand strided iteration over `sizes`, calling `f(offsets, len, steps)`
/// for each innermost row: the element offsets of the row's first element in every operand,
/// the row length, and every operand's step along the row. Dims that are contiguous for
/// every operand are merged first, so dense operands give one long row.
pub fn walk<const N: usize>(
    sizes: &[usize],
    strides: [&[usize]; N],
    mut f: impl FnMut([usize; N], usize, [usize; N]),
) {
    if let Some(c) = Coalesced::new(sizes, strides) {
        c.each_row(0..c.rows(), &mut f);
    }
}

/// Elements below which elementwise work stays on the calling thread, and the least a
/// thread is given (cheap operations: arithmetic, comparisons, copies).
pub const ELEMENTWISE_TASK: usize = 1 << 16;

/// Whether the CPU has AVX-512F, for kernels that compile a loop for it
/// (`#[target_feature]`) and call it where this holds (the detection is cached by `std`).
pub(crate) fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the CPU is AMD's (CPUID vendor "AuthenticAMD"), for choices that differ by
/// microarchitecture rather than by instruction set (cached).
pub(crate) fn amd_cpu() -> bool {
    static AMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AMD.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID leaf 0: the vendor string in EBX, EDX, ECX.
            let r = std::arch::x86_64::__cpuid(0);
            let mut v = [0u8; 12];
            v[..4].copy_from_slice(&r.ebx.to_le_bytes());
            v[4..8].copy_from_slice(&r.edx.to_le_bytes());
            v[8..].copy_from_slice(&r.ecx.to_le_bytes());
            &v == b"AuthenticAMD"
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// The CPU's family (CPUID leaf 1: the base family, plus the extended family where the
/// base is 15; AMD's Zen 3 and Zen 4 are 0x19, Zen 5 0x1A), 0 off x86 (cached).
pub(crate) fn cpu_family() -> u32 {
    static FAMILY: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *FAMILY.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let eax = std::arch::x86_64::__cpuid(1).eax;
            let base = (eax >> 8) & 0xF;
            match base {
                0xF => base + ((eax >> 20) & 0xFF),
                _ => base,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        0
    })
}

/// Whether the CPU has AVX2 and FMA (the 8-lane kernels' features).
pub(crate) fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// 8-lane `f32` helpers of the AVX2 kernels (CPUs without AVX-512F): the first `n` lanes
/// loaded or stored, and [`clamp_f32`](crate::conv::clamp_f32) on a vector.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// Lane masks: the 8 elements from `MASKS[8 - n]` enable the first `n` lanes.
    const MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

    /// The first `n` elements at `p` (`n <= 8`; the other lanes 0).
    ///
    /// # Safety
    /// AVX2; `p` readable at `n` elements.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn load(p: *const f32, n: usize) -> __m256 {
        // SAFETY: the caller's contract; the mask's 8 elements lie in the table.
        unsafe {
            if n >= 8 {
                _mm256_loadu_ps(p)
            } else {
                let m = _mm256_loadu_si256(MASKS.as_ptr().add(8 - n).cast());
                _mm256_maskload_ps(p, m)
            }
        }
    }

    /// Stores `v`'s first `n` lanes (`n <= 8`) at `p`: a full store, or halves, pairs and
    /// singles (no `vmaskmovps` to memory: microcoded on AMD Zen; no `memcpy` call).
    ///
    /// # Safety
    /// AVX2; `p` writable at `n` elements.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn store(p: *mut f32, v: __m256, n: usize) {
        // SAFETY: the caller's contract: each store writes lanes below `n` only.
        unsafe {
            if n >= 8 {
                return _mm256_storeu_ps(p, v);
            }
            let (mut x, mut p, mut n) = (_mm256_castps256_ps128(v), p, n);
            if n >= 4 {
                _mm_storeu_ps(p, x);
                (x, p, n) = (_mm256_extractf128_ps::<1>(v), p.add(4), n - 4);
            }
            if n >= 2 {
                _mm_store_sd(p.cast(), _mm_castps_pd(x));
                (x, p, n) = (_mm_movehl_ps(x, x), p.add(2), n - 2);
            }
            if n >= 1 {
                _mm_store_ss(p, x);
            }
        }
    }

    /// `clamp_f32` on 8 lanes: `lo` where below, else `hi` where above, NaN kept.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn clamp(v: __m256, lo: __m256, hi: __m256) -> __m256 {
        let lt = _mm256_cmp_ps::<_CMP_LT_OQ>(v, lo);
        let gt = _mm256_cmp_ps::<_CMP_GT_OQ>(v, hi);
        _mm256_blendv_ps(_mm256_blendv_ps(v, hi, gt), lo, lt)
    }
}

/// The same for costly elementwise math (`exp`, `tanh`, `erf`, `pow`, …).
pub const MATH_TASK: usize = 1 << 14;

/// [`walk`] split over the thread pool when the iteration has at least `2 · min_task`
/// elements: the rows (or the one long row, for dense operands) are divided into
/// contiguous parts. `f` sees the same rows or pieces of them, in any order and
/// concurrently, so it must only write elements of its own rows.
pub fn par_walk<const N: usize>(
    sizes: &[usize],
    strides: [&[usize]; N],
    min_task: usize,
    f: impl Fn([usize; N], usize, [usize; N]) + Sync,
) {
    if let Some(c) = Coalesced::new(sizes, strides) {
        par_walk_merged(&c, min_task, f);
    }
}

/// [`par_walk`] over an iteration already merged.
fn par_walk_merged<const N: usize>(
    c: &Coalesced<N>,
    min_task: usize,
    f: impl Fn([usize; N], usize, [usize; N]) + Sync,
) {
    let (len, step) = c.row();
    let rows = c.rows();
    let tasks = crate::threads::tasks_for(rows * len, min_task);
    if tasks <= 1 {
        c.each_row(0..rows, &mut |o, l, s| f(o, l, s));
    } else if rows == 1 {
        // One long row: pieces of it.
        crate::threads::run_parts(len, tasks, &|r| {
            let mut off = [0usize; N];
            for k in 0..N {
                off[k] = r.start * step[k];
            }
            f(off, r.len(), step);
        });
    } else {
        crate::threads::run_parts(rows, tasks, &|r| c.each_row(r, &mut |o, l, s| f(o, l, s)));
    }
}

/// `o[i] = f(a[i])`, with `f` copied to the stack first: the compiler then knows that
/// stores to `o` leave `f`'s state alone, hoists loop-invariant work (an op's parameters)
/// out of the loop and vectorises it.
#[inline(always)]
fn map_row<A: Copy, O>(o: &mut [O], a: &[A], f: impl Fn(A) -> O) {
    for (o, &x) in o.iter_mut().zip(a) {
        *o = f(x);
    }
}

/// `out[i] = f(a[i])` over a strided iteration (split over the thread pool when large).
pub fn map1<A: Copy + Sync, O: Send>(
    sizes: &[usize],
    a: &[A],
    sa: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(A) -> O + Sync + Copy,
) {
    map1_with(ELEMENTWISE_TASK, sizes, a, sa, out, so, f)
}

/// [`map1`] with the least elements a thread is given.
pub fn map1_with<A: Copy + Sync, O: Send>(
    min_task: usize,
    sizes: &[usize],
    a: &[A],
    sa: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(A) -> O + Sync + Copy,
) {
    map1_rows_with(min_task, sizes, a, sa, out, so, f, move |o, a| {
        map_row(o, a, f)
    })
}

/// [`map1_with`] where `row(o, a)` computes `o[i] = f(a[i])` over a dense row (or a piece
/// of one, whose bounds depend on the thread count), e.g. with a vectorised kernel; `f`
/// serves strided elements.
#[allow(clippy::too_many_arguments)]
pub fn map1_rows_with<A: Copy + Sync, O: Send>(
    min_task: usize,
    sizes: &[usize],
    a: &[A],
    sa: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(A) -> O + Sync + Copy,
    row: impl Fn(&mut [O], &[A]) + Sync + Copy,
) {
    if let Some(c) = Coalesced::by_memory(sizes, [sa, so], 1) {
        map1_coalesced(&c, min_task, a, out, f, row, None);
    }
}

/// [`map1_rows_with`] over the coalesced iteration `c`; a transposing copy of a matrix
/// larger than a few tiles goes tile by tile ([`map1_transposed`], with `block` for its
/// full blocks).
fn map1_coalesced<A: Copy + Sync, O: Send>(
    c: &Coalesced<2>,
    min_task: usize,
    a: &[A],
    out: &mut [O],
    f: impl Fn(A) -> O + Sync + Copy,
    row: impl Fn(&mut [O], &[A]) + Sync + Copy,
    block: Option<Block<A, O>>,
) {
    if transposing(c) {
        let out = crate::threads::SharedMut::new(out);
        return map1_transposed(c, a, out, min_task, f, block);
    }
    let (len, _) = c.row();
    if crate::threads::tasks_for(c.rows() * len, min_task) <= 1 {
        // One thread: plain slices (the common case of small tensors).
        c.each_row(0..c.rows(), &mut |[oa, oo], len, [xa, xo]| {
            if xa == 1 && xo == 1 {
                row(&mut out[oo..oo + len], &a[oa..oa + len]);
            } else {
                for i in 0..len {
                    out[oo + i * xo] = f(a[oa + i * xa]);
                }
            }
        });
        return;
    }
    let out = crate::threads::SharedMut::new(out);
    par_walk_merged(c, min_task, |[oa, oo], len, [xa, xo]| {
        if xa == 1 && xo == 1 {
            // SAFETY: rows of a dense out do not overlap; each row is one task's.
            row(unsafe { out.slice(oo, len) }, &a[oa..oa + len]);
        } else {
            for i in 0..len {
                // SAFETY: as above.
                unsafe { out.write(oo + i * xo, f(a[oa + i * xa])) };
            }
        }
    });
}

/// Whether the two innermost merged dims of `c` are transposed between `a` (`cst[0]`) and
/// `out` (`cst[1]`), both at least 64 long: a transposing copy worth tiling.
fn transposing(c: &Coalesced<2>) -> bool {
    c.n >= 2
        && c.cst[1][0] == 1
        && c.cst[0][0] != 1
        && c.cst[0][1] == 1
        && c.cs[0] >= 64
        && c.cs[1] >= 64
}

/// `map1(sizes, a, sa, out, so, |x| x)`: a copy. A transposing copy of 4-byte elements
/// moves its full 16×16 blocks through AVX-512F registers ([`crate::transpose16`]).
pub fn copy1<T: Copy + Send + Sync>(
    sizes: &[usize],
    a: &[T],
    sa: &[usize],
    out: &mut [T],
    so: &[usize],
) {
    // `transpose16::block` needs 4-byte elements and AVX-512F: `usable` says so.
    let block =
        crate::transpose16::usable::<T>().then_some(crate::transpose16::block::<T> as Block<T, T>);
    if let Some(c) = Coalesced::by_memory(sizes, [sa, so], 1) {
        let row = |o: &mut [T], a: &[T]| o.copy_from_slice(a);
        map1_coalesced(&c, ELEMENTWISE_TASK, a, out, |x| x, row, block);
    }
}

/// A 16×16 block of a transposing copy: `dst[j * ds + i] = src[i * ss + j]`.
type Block<A, O> = unsafe fn(*const A, usize, *mut O, usize);

/// [`map1`] when the two innermost merged dims are transposed between `a` and `out` (a
/// transposing copy, e.g. `permute_copy` of a matrix): 32×32 tiles, so that both sides
/// stay in cache, split over the thread pool by tile columns. With `block` (a copy: `f`
/// is the identity), full tiles go as four 16×16 blocks through it.
fn map1_transposed<A: Copy + Sync, O: Send>(
    c: &Coalesced<2>,
    a: &[A],
    out: crate::threads::SharedMut<'_, O>,
    min_task: usize,
    f: impl Fn(A) -> O + Sync + Copy,
    block: Option<Block<A, O>>,
) {
    const TILE: usize = 32;
    // dim 0: contiguous in `out`, stride `sa0` in `a`; dim 1: contiguous in `a`.
    let (l0, l1, sa0, so1) = (c.cs[0], c.cs[1], c.cst[0][0], c.cst[1][1]);
    let outer = c.cs[2..c.n].iter().product::<usize>();
    let jblocks = l1.div_ceil(TILE);
    let units = outer * jblocks;
    let tasks = crate::threads::tasks_for(outer * l0 * l1, min_task);
    crate::threads::run_parts(units, tasks, &|r| {
        for u in r {
            let (ob, jb) = (u / jblocks, u % jblocks);
            // Offsets of outer index `ob` (dims 2.., innermost first).
            let (mut oa, mut oo, mut rest) = (0, 0, ob);
            for d in 2..c.n {
                let i = rest % c.cs[d];
                rest /= c.cs[d];
                oa += i * c.cst[0][d];
                oo += i * c.cst[1][d];
            }
            let js = jb * TILE..((jb + 1) * TILE).min(l1);
            for ib in (0..l0).step_by(TILE) {
                let len = TILE.min(l0 - ib);
                if let Some(block) = block.filter(|_| len == TILE && js.len() == TILE) {
                    for (bi, bj) in [(0, 0), (0, 16), (16, 0), (16, 16)] {
                        let (i, j) = (ib + bi, js.start + bj);
                        let (first, last) = (oo + j * so1 + i, oo + (j + 15) * so1 + i + 15);
                        // The last elements the block reads and writes, checked as the
                        // loop's indexing checks each.
                        let src = a[oa + j + i * sa0..=oa + j + 15 + (i + 15) * sa0].as_ptr();
                        assert!(last < out.len(), "transposing copy: out of bounds");
                        // SAFETY: `block` is given only for 4-byte elements on a CPU with
                        // AVX-512F (`copy1`); the block's 16 source runs of 16 lie inside
                        // `a` (up to its last element, just indexed); its 16 output runs
                        // (output columns `j..j + 16`, rows `i..i + 16`, up to `last`) are
                        // inside `out` and belong to this unit alone, written through the
                        // pointer without a slice over other units' elements; `a` and
                        // `out` are different buffers.
                        unsafe { block(src, sa0, out.as_ptr().add(first), so1) };
                    }
                    continue;
                }
                for j in js.clone() {
                    // SAFETY: column `j` of the output belongs to this unit alone.
                    let o = unsafe { out.slice(oo + j * so1 + ib, len) };
                    let base = oa + j + ib * sa0;
                    for (k, o) in o.iter_mut().enumerate() {
                        *o = f(a[base + k * sa0]);
                    }
                }
            }
        }
    });
}

/// `out[i] = f(a[i], b[i])` over a strided (broadcasting) iteration (split over the thread
/// pool when large).
#[allow(clippy::too_many_arguments)]
pub fn map2<A: Copy + Sync, B: Copy + Sync, O: Send>(
    sizes: &[usize],
    a: &[A],
    sa: &[usize],
    b: &[B],
    sb: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(A, B) -> O + Sync + Copy,
) {
    map2_with(ELEMENTWISE_TASK, sizes, a, sa, b, sb, out, so, f)
}

/// [`map2`] with the least elements a thread is given.
#[allow(clippy::too_many_arguments)]
pub fn map2_with<A: Copy + Sync, B: Copy + Sync, O: Send>(
    min_task: usize,
    sizes: &[usize],
    a: &[A],
    sa: &[usize],
    b: &[B],
    sb: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(A, B) -> O + Sync + Copy,
) {
    let Some(c) = Coalesced::by_memory(sizes, [sa, sb, so], 2) else {
        return;
    };
    let (len, _) = c.row();
    if crate::threads::tasks_for(c.rows() * len, min_task) <= 1 {
        // One thread: plain slices (the common case of small tensors).
        c.each_row(0..c.rows(), &mut |[oa, ob, oo], len, [xa, xb, xo]| {
            if xo == 1 {
                map2_row(&mut out[oo..oo + len], a, oa, xa, b, ob, xb, f);
            } else {
                for i in 0..len {
                    out[oo + i * xo] = f(a[oa + i * xa], b[ob + i * xb]);
                }
            }
        });
        return;
    }
    let out = crate::threads::SharedMut::new(out);
    par_walk_merged(&c, min_task, |[oa, ob, oo], len, [xa, xb, xo]| {
        if xo == 1 {
            // SAFETY: rows of a dense out do not overlap; each row is one task's.
            let o = unsafe { out.slice(oo, len) };
            map2_row(o, a, oa, xa, b, ob, xb, f);
        } else {
            for i in 0..len {
                // SAFETY: as above.
                unsafe { out.write(oo + i * xo, f(a[oa + i * xa], b[ob + i * xb])) };
            }
        }
    });
}

/// `o[i] = f(a[oa + i·xa], b[ob + i·xb])`, with `f` on the stack (see [`map_row`]) and the
/// dense and broadcast cases written out so that they vectorise: with AVX-512 where the CPU
/// has it (the same operations on each element, so the same results; the baseline build
/// vectorises with SSE2 only), else as built.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn map2_row<A: Copy, B: Copy, O>(
    o: &mut [O],
    a: &[A],
    oa: usize,
    xa: usize,
    b: &[B],
    ob: usize,
    xb: usize,
    f: impl Fn(A, B) -> O,
) {
    #[cfg(target_arch = "x86_64")]
    if o.len() >= 16 && std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above).
        return unsafe { map2_row_avx512(o, a, oa, xa, b, ob, xb, f) };
    }
    #[cfg(target_arch = "x86_64")]
    if o.len() >= 8 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { map2_row_avx2(o, a, oa, xa, b, ob, xb, f) };
    }
    map2_row_any(o, a, oa, xa, b, ob, xb, f)
}

/// [`map2_row_any`] compiled for AVX2 (CPUs without AVX-512F: 8 lanes where the baseline
/// build has 4; efficientnet's residual sums of 56k elements 6.3 -> µs on Zen 1).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn map2_row_avx2<A: Copy, B: Copy, O>(
    o: &mut [O],
    a: &[A],
    oa: usize,
    xa: usize,
    b: &[B],
    ob: usize,
    xb: usize,
    f: impl Fn(A, B) -> O,
) {
    map2_row_any(o, a, oa, xa, b, ob, xb, f)
}

/// [`map2_row_any`] compiled for AVX-512F.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn map2_row_avx512<A: Copy, B: Copy, O>(
    o: &mut [O],
    a: &[A],
    oa: usize,
    xa: usize,
    b: &[B],
    ob: usize,
    xb: usize,
    f: impl Fn(A, B) -> O,
) {
    map2_row_any(o, a, oa, xa, b, ob, xb, f)
}

/// [`map2_row`]'s loops.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn map2_row_any<A: Copy, B: Copy, O>(
    o: &mut [O],
    a: &[A],
    oa: usize,
    xa: usize,
    b: &[B],
    ob: usize,
    xb: usize,
    f: impl Fn(A, B) -> O,
) {
    let len = o.len();
    if xa == 1 && xb == 1 {
        for ((o, &x), &y) in o.iter_mut().zip(&a[oa..oa + len]).zip(&b[ob..ob + len]) {
            *o = f(x, y);
        }
    } else if xa == 1 && xb == 0 {
        let y = b[ob];
        for (o, &x) in o.iter_mut().zip(&a[oa..oa + len]) {
            *o = f(x, y);
        }
    } else if xa == 0 && xb == 1 {
        let x = a[oa];
        for (o, &y) in o.iter_mut().zip(&b[ob..ob + len]) {
            *o = f(x, y);
        }
    } else {
        for (i, o) in o.iter_mut().enumerate() {
            *o = f(a[oa + i * xa], b[ob + i * xb]);
        }
    }
}

/// A tensor's elements of whatever dtype, for the (slower) mixed-dtype paths.
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub enum AnySlice<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    U8(&'a [u8]),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    Bool(&'a [Bool]),
}

/// A writable tensor of whatever dtype, for the mixed-dtype paths.
#[allow(missing_docs)]
pub enum AnySliceMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    U8(&'a mut [u8]),
    I8(&'a mut [i8]),
    I16(&'a mut [i16]),
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
    Bool(&'a mut [Bool]),
}

macro_rules! any_slice_arms {
    ($m:ident) => {
        $m!(F32, f32, Float);
        $m!(F64, f64, Double);
        $m!(F16, f16, Half);
        $m!(BF16, bf16, BFloat16);
        $m!(U8, u8, Byte);
        $m!(I8, i8, Char);
        $m!(I16, i16, Short);
        $m!(I32, i32, Int);
        $m!(I64, i64, Long);
        $m!(Bool, Bool, Bool);
    };
}

impl<'a> AnySlice<'a> {
    /// The elements of `t`.
    pub fn of(op: &str, t: &TensorRef<'a>) -> Result<Self> {
        macro_rules! arm {
            ($v:ident, $t:ty, $s:ident) => {
                if t.dtype() == ScalarType::$s {
                    return Ok(AnySlice::$v(t.data::<$t>()?));
                }
            };
        }
        any_slice_arms!(arm);
        Err(bad_dtype(op, "input", t.dtype()))
    }
    /// Element `i` converted to the compute type `C`.
    #[inline]
    pub fn get<C: Compute>(&self, i: usize) -> C {
        match self {
            AnySlice::F32(s) => s[i].to_c().cast(),
            AnySlice::F64(s) => s[i].to_c().cast(),
            AnySlice::F16(s) => s[i].to_c().cast(),
            AnySlice::BF16(s) => s[i].to_c().cast(),
            AnySlice::U8(s) => s[i].to_c().cast(),
            AnySlice::I8(s) => s[i].to_c().cast(),
            AnySlice::I16(s) => s[i].to_c().cast(),
            AnySlice::I32(s) => s[i].to_c().cast(),
            AnySlice::I64(s) => s[i].to_c().cast(),
            AnySlice::Bool(s) => s[i].to_c().cast(),
        }
    }
}

impl<'a> AnySliceMut<'a> {
    /// The elements of the out tensor `t`.
    pub fn of(op: &str, t: &mut TensorRef<'a>) -> Result<Self> {
        macro_rules! arm {
            ($v:ident, $t:ty, $s:ident) => {
                if t.dtype() == ScalarType::$s {
                    return Ok(AnySliceMut::$v(t.data_mut::<$t>()?));
                }
            };
        }
        any_slice_arms!(arm);
        Err(bad_dtype(op, "out", t.dtype()))
    }
    /// Stores `v` (of compute type `C`) at element `i`, converting to the dtype.
    #[inline]
    pub fn set<C: Compute>(&mut self, i: usize, v: C) {
        match self {
            AnySliceMut::F32(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::F64(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::F16(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::BF16(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::U8(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::I8(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::I16(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::I32(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::I64(s) => s[i] = Elem::from_c(v.cast()),
            AnySliceMut::Bool(s) => s[i] = Bool::new(v.truthy()),
        }
    }
}

/// Reads index values (Long or Int tensors) as `i64`.
pub enum Indices<'a> {
    /// `int64` indices.
    I64(&'a [i64]),
    /// `int32` indices.
    I32(&'a [i32]),
}

impl<'a> Indices<'a> {
    /// The indices of `t`, which must be Long or Int.
    pub fn of(op: &str, t: &TensorRef<'a>) -> Result<Self> {
        match t.dtype() {
            ScalarType::Long => Ok(Indices::I64(t.data()?)),
            ScalarType::Int => Ok(Indices::I32(t.data()?)),
            other => Err(Error::invalid_argument(format!(
                "{op}: indices must be int64 or int32, got {other}"
            ))),
        }
    }
    /// Index `i`.
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        match self {
            Indices::I64(s) => s[i],
            Indices::I32(s) => s[i] as i64,
        }
    }
}

/// Checks an index against a dimension of size `n` (negative counts from the end).
#[inline]
pub fn check_index(op: &str, idx: i64, n: usize) -> Result<usize> {
    let j = if idx < 0 { idx + n as i64 } else { idx };
    if j < 0 || j >= n as i64 {
        return Err(Error::invalid_argument(format!(
            "{op}: index {idx} is out of bounds for a dimension of size {n}"
        )));
    }
    Ok(j as usize)
}

/// Errors unless `t` is in the default (contiguous) dim order.
pub fn require_contiguous(op: &str, what: &str, t: &TensorRef<'_>) -> Result<()> {
    if t.is_default_dim_order() {
        Ok(())
    } else {
        Err(Error::not_supported(format!(
            "{op}: {what} has dim order {:?}; only the contiguous dim order is supported",
            t.dim_order()
        )))
    }
}

/// Errors unless `a` and `b` have the same dtype.
pub fn same_dtype(op: &str, a: ScalarType, b: ScalarType) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{op}: dtype mismatch ({a} vs {b})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::Float;

    /// `map1` and `map2` into an output whose memory order is not its shape's (a
    /// channels-first view of an NHWC shape, as the XNNPACK delegate lays out values) merge
    /// the dims in memory order (one row) and write every element as the element-by-element
    /// loop does, on one thread and split over three (large enough to split).
    #[test]
    fn maps_follow_the_output_memory_order() {
        let (n, h, w, c) = (2, 48, 40, 3);
        let sizes = [n, h, w, c];
        let total = n * h * w * c;
        // Input: contiguous NHWC. Output: NCHW memory (`c` outermost after `n`).
        let si = [h * w * c, w * c, c, 1];
        let so = [c * h * w, w, 1, h * w];
        let dense = [h * w * c, w * c, c, 1];
        let a: Vec<f32> = (0..total).map(|i| i as f32 * 0.5 - 7.0).collect();
        let b: Vec<f32> = (0..total).map(|i| (i % 97) as f32).collect();
        let at = |st: &[usize; 4], i: [usize; 4]| (0..4).map(|d| i[d] * st[d]).sum::<usize>();
        let mut want1 = vec![0f32; total];
        let mut want2 = vec![0f32; total];
        for i0 in 0..n {
            for i1 in 0..h {
                for i2 in 0..w {
                    for i3 in 0..c {
                        let i = [i0, i1, i2, i3];
                        want1[at(&so, i)] = a[at(&si, i)] * 2.0 + 1.0;
                        want2[at(&so, i)] = a[at(&si, i)] - b[at(&dense, i)];
                    }
                }
            }
        }
        for threads in [1, 3] {
            crate::threads::set_num_threads(threads);
            let mut got = vec![f32::NAN; total];
            super::map1_with(64, &sizes, &a, &si, &mut got, &so, |x| x * 2.0 + 1.0);
            assert_eq!(got, want1, "map1, {threads} threads");
            let mut got = vec![f32::NAN; total];
            super::map2_with(64, &sizes, &a, &si, &b, &dense, &mut got, &so, |x, y| x - y);
            assert_eq!(got, want2, "map2, {threads} threads");
        }
        crate::threads::set_num_threads(0);
        let c2 = super::Coalesced::by_memory(&sizes, [&si, &so], 1).unwrap();
        assert_eq!(
            (c2.n, c2.cs[0], c2.cst[1][0]),
            (3, w * h, 1),
            "merged in memory order"
        );
    }

    /// `exp_or_zero` is `exp`: below the cut `exp` gives `+0` too (f32: the first million
    /// values below it, then every 97th down to the largest negative, and `-inf`; f64:
    /// samples), and just above it `exp` is still called.
    #[test]
    fn exp_or_zero_is_exp() {
        let cut = f32::EXP_ZERO_BELOW.to_bits();
        let last = f32::MIN.to_bits();
        let bits = (cut..cut + (1 << 20)).chain((cut..=last).step_by(97));
        for x in bits.map(f32::from_bits).chain([f32::NEG_INFINITY]) {
            assert_eq!(x.exp().to_bits(), 0, "{x}");
            assert_eq!(Float::exp_or_zero(x).to_bits(), 0, "{x}");
        }
        for x in [-103.97f32, -100.0, -87.5, 0.0, 1.0, f32::NAN] {
            assert_eq!(x.exp().to_bits(), Float::exp_or_zero(x).to_bits(), "{x}");
        }
        let cut = f64::EXP_ZERO_BELOW.to_bits();
        let last = f64::MIN.to_bits();
        for x in (cut..=last)
            .step_by(1 << 40)
            .map(f64::from_bits)
            .chain([f64::NEG_INFINITY, -746.0])
        {
            assert_eq!(x.exp().to_bits(), 0, "{x}");
            assert_eq!(Float::exp_or_zero(x).to_bits(), 0, "{x}");
        }
        for x in [-745.0f64, -708.0, 0.0, f64::NAN] {
            assert_eq!(x.exp().to_bits(), Float::exp_or_zero(x).to_bits(), "{x}");
        }
    }
}
