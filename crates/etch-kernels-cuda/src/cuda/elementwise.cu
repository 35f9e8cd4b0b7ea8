// Elementwise maps: unary, binary and ternary ops over broadcast, strided operands of any
// dtype, computed in float (f32/f16/bf16 results), double (f64) or i64 (integers, bools).
// The OP_* codes come from the Rust table (elementwise.rs), prepended as #defines.

struct EwArgs {
    void* out;
    const void* in[3];   // null: the operand is the scalar p[k + 4] / q[k + 4]
    int dt[4];           // dtype of out, in0, in1, in2
    int* err;            // device error word
    double p[8];         // op parameters (p[0..4]) and scalar operands (p[4..7])
    i64 q[8];            // the same for the integer domain
    Geo g;
};

#define M1(NAME, F, D) \
    __device__ __forceinline__ float NAME(float x) { return F(x); } \
    __device__ __forceinline__ double NAME(double x) { return D(x); } \
    __device__ __forceinline__ i64 NAME(i64 x) { return (i64)D((double)x); }
M1(m_exp, expf, exp) M1(m_log, logf, log) M1(m_sqrt, sqrtf, sqrt) M1(m_sin, sinf, sin)
M1(m_cos, cosf, cos) M1(m_tan, tanf, tan) M1(m_asin, asinf, asin) M1(m_acos, acosf, acos)
M1(m_atan, atanf, atan) M1(m_sinh, sinhf, sinh) M1(m_cosh, coshf, cosh) M1(m_tanh, tanhf, tanh)
M1(m_asinh, asinhf, asinh) M1(m_log2, log2f, log2) M1(m_log10, log10f, log10)
M1(m_log1p, log1pf, log1p) M1(m_expm1, expm1f, expm1) M1(m_erf, erff, erf)
M1(m_floor, floorf, floor) M1(m_ceil, ceilf, ceil) M1(m_rint, rintf, rint) M1(m_trunc, truncf, trunc)
#define M2(NAME, F, D) \
    __device__ __forceinline__ float NAME(float x, float y) { return F(x, y); } \
    __device__ __forceinline__ double NAME(double x, double y) { return D(x, y); } \
    __device__ __forceinline__ i64 NAME(i64 x, i64 y) { return (i64)D((double)x, (double)y); }
M2(m_fmod, fmodf, fmod) M2(m_atan2, atan2f, atan2) M2(m_pow, powf, pow)

template <typename C> __device__ __forceinline__ bool is_nan(C x) { return x != x; }
template <typename C> __device__ __forceinline__ bool is_inf(C x) { return x == (C)(1.0 / 0.0) || x == (C)(-1.0 / 0.0); }
template <> __device__ __forceinline__ bool is_inf<i64>(i64) { return false; }
template <typename C> __device__ __forceinline__ C c_nan() { return (C)(0.0 / 0.0); }
template <> __device__ __forceinline__ i64 c_nan<i64>() { return 0; }

// Python-style floor division and remainder.
template <typename C> __device__ __forceinline__ C div_floor(C a, C b) {
    if (b == (C)0) return a / b;
    C mod = m_fmod(a, b);
    C div = (a - mod) / b;
    if (mod != (C)0 && ((b < (C)0) != (mod < (C)0))) div -= (C)1;
    C fl;
    if (div != (C)0) {
        fl = m_floor(div);
        if (div - fl > (C)0.5) fl += (C)1;
    } else {
        fl = ((a / b) < (C)0 || (a < (C)0) != (b < (C)0)) ? (C)-0.0 : (C)0.0;
    }
    return fl;
}
template <> __device__ __forceinline__ i64 div_floor<i64>(i64 a, i64 b) {
    i64 q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) q -= 1;
    return q;
}
template <typename C> __device__ __forceinline__ C rem(C a, C b) {
    C r = m_fmod(a, b);
    if (r != (C)0 && ((r < (C)0) != (b < (C)0))) r += b;
    return r;
}
template <> __device__ __forceinline__ i64 rem<i64>(i64 a, i64 b) {
    i64 r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
__device__ __forceinline__ i64 ipow(i64 b, i64 e) {
    i64 r = 1;
    while (e > 0) { if (e & 1) r *= b; b *= b; e >>= 1; }
    return r;
}
__device__ __forceinline__ float cpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double cpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ i64 cpow(i64 x, i64 y) { return ipow(x, y); }

template <typename C> __device__ __forceinline__ C param(const EwArgs& a, int k);
template <> __device__ __forceinline__ float param<float>(const EwArgs& a, int k) { return (float)a.p[k]; }
template <> __device__ __forceinline__ double param<double>(const EwArgs& a, int k) { return a.p[k]; }
template <> __device__ __forceinline__ i64 param<i64>(const EwArgs& a, int k) { return a.q[k]; }

template <typename C> __device__ __forceinline__ bool integral() { return false; }
template <> __device__ __forceinline__ bool integral<i64>() { return true; }

template <typename C, int OP>
__device__ __forceinline__ C apply(C x, C y, C z, i64 i, const EwArgs& a) {
    const C zero = (C)0, one = (C)1;
    switch (OP) {
    case OP_COPY: return x;
    case OP_FILL: return param<C>(a, 0);
    case OP_ARANGE: return param<C>(a, 0) + param<C>(a, 1) * (C)i;
    case OP_ADD: return x + param<C>(a, 0) * y;
    case OP_SUB: return x - param<C>(a, 0) * y;
    case OP_MUL: return x * y;
    case OP_DIV: return x / y;
    case OP_DIV_TRUNC: return integral<C>() ? x / y : m_trunc(x / y);
    case OP_DIV_FLOOR: return div_floor(x, y);
    case OP_REMAINDER: return rem(x, y);
    case OP_FMOD: return integral<C>() ? (C)(x - (x / y) * y) : m_fmod(x, y);
    case OP_MAXIMUM: return (is_nan(x) || is_nan(y)) ? c_nan<C>() : (x > y ? x : y);
    case OP_MINIMUM: return (is_nan(x) || is_nan(y)) ? c_nan<C>() : (x < y ? x : y);
    case OP_ATAN2: return m_atan2(x, y);
    case OP_POW: return cpow(x, y);
    case OP_EQ: return x == y ? one : zero;
    case OP_NE: return x != y ? one : zero;
    case OP_LT: return x < y ? one : zero;
    case OP_LE: return x <= y ? one : zero;
    case OP_GT: return x > y ? one : zero;
    case OP_GE: return x >= y ? one : zero;
    case OP_LOGICAL_AND: return (x != zero && y != zero) ? one : zero;
    case OP_LOGICAL_OR: return (x != zero || y != zero) ? one : zero;
    case OP_LOGICAL_XOR: return ((x != zero) != (y != zero)) ? one : zero;
    case OP_LOGICAL_NOT: return x == zero ? one : zero;
    case OP_BITWISE_AND: return (C)((i64)x & (i64)y);
    case OP_BITWISE_OR: return (C)((i64)x | (i64)y);
    case OP_BITWISE_XOR: return (C)((i64)x ^ (i64)y);
    case OP_BITWISE_NOT: return (C)(~(i64)x);
    case OP_WHERE: return x != zero ? y : z;
    case OP_ABS: return x < zero ? -x : x;
    case OP_NEG: return -x;
    case OP_SIGN: return x > zero ? one : (x < zero ? -one : zero);
    case OP_RELU: return (x > zero || is_nan(x)) ? x : zero;
    case OP_SIGMOID: return one / (one + m_exp(-x));
    case OP_TANH: return m_tanh(x);
    case OP_EXP: return m_exp(x);
    case OP_LOG: return m_log(x);
    case OP_SQRT: return m_sqrt(x);
    case OP_RSQRT: return one / m_sqrt(x);
    case OP_SIN: return m_sin(x);
    case OP_COS: return m_cos(x);
    case OP_TAN: return m_tan(x);
    case OP_ASIN: return m_asin(x);
    case OP_ACOS: return m_acos(x);
    case OP_ATAN: return m_atan(x);
    case OP_SINH: return m_sinh(x);
    case OP_COSH: return m_cosh(x);
    case OP_ASINH: return m_asinh(x);
    case OP_LOG2: return m_log2(x);
    case OP_LOG10: return m_log10(x);
    case OP_LOG1P: return m_log1p(x);
    case OP_EXPM1: return m_expm1(x);
    case OP_ERF: return m_erf(x);
    case OP_RECIPROCAL: return one / x;
    case OP_FLOOR: return integral<C>() ? x : m_floor(x);
    case OP_CEIL: return integral<C>() ? x : m_ceil(x);
    case OP_ROUND: return integral<C>() ? x : m_rint(x);
    case OP_TRUNC: return integral<C>() ? x : m_trunc(x);
    case OP_ISNAN: return is_nan(x) ? one : zero;
    case OP_ISINF: return is_inf(x) ? one : zero;
    case OP_SILU: return x / (one + m_exp(-x));
    case OP_GELU: return (C)0.5 * x * (one + m_erf(x * (C)0.70710678118654752440));
    case OP_GELU_TANH: {
        C inner = (C)0.79788456080286535588 * (x + (C)0.044715 * x * x * x);
        return (C)0.5 * x * (one + m_tanh(inner));
    }
    case OP_ELU: {
        C alpha = param<C>(a, 0), scale = param<C>(a, 1), in_scale = param<C>(a, 2);
        return x > zero ? scale * x : scale * alpha * (m_expm1(x * in_scale));
    }
    case OP_LEAKY_RELU: return x > zero ? x : x * param<C>(a, 0);
    case OP_CLAMP: {
        // q[0]/q[1]: has min / has max; bounds in p[0]/p[1] (q[2]/q[3] for integers).
        C lo = integral<C>() ? (C)a.q[2] : param<C>(a, 0);
        C hi = integral<C>() ? (C)a.q[3] : param<C>(a, 1);
        if (is_nan(x)) return x;
        if (a.q[0] && x < lo) x = lo;
        if (a.q[1] && x > hi) x = hi;
        return x;
    }
    }
    return zero;
}

template <typename C> __device__ __forceinline__ C operand(const EwArgs& a, int k, i64 off) {
    if (a.in[k] == 0) return param<C>(a, 4 + k);
    return ld<C>(a.in[k], a.dt[k + 1], off);
}

// Integer division by zero is an error (PyTorch raises); the result slot gets 0.
template <typename C, int OP> __device__ __forceinline__ bool bad_int_div(C y) {
    return integral<C>() && (OP == OP_DIV_TRUNC || OP == OP_DIV_FLOOR || OP == OP_REMAINDER || OP == OP_FMOD) && y == (C)0;
}

template <typename C, int OP, int NIN>
__device__ void ew_loop(i64 n, const EwArgs& a) {
    GRID_LOOP(i, n) {
        i64 o[NIN + 1];
        geo_offs<NIN + 1>(a.g, i, o);
        C x = NIN > 0 ? operand<C>(a, 0, o[NIN > 0 ? 1 : 0]) : (C)0;
        C y = NIN > 1 ? operand<C>(a, 1, o[NIN > 1 ? 2 : 0]) : (C)0;
        C z = NIN > 2 ? operand<C>(a, 2, o[NIN > 2 ? 3 : 0]) : (C)0;
        C r;
        if (bad_int_div<C, OP>(y)) { set_error(a.err, 1); r = (C)0; }
        else r = apply<C, OP>(x, y, z, i, a);
        st(a.out, a.dt[0], o[0], r);
    }
}

#define CASE(OP, NIN) case OP: ew_loop<C, OP, NIN>(n, a); break;
#define COMMON_OPS                                                                        \
    CASE(OP_COPY, 1) CASE(OP_FILL, 0) CASE(OP_ARANGE, 0) CASE(OP_ADD, 2) CASE(OP_SUB, 2)     \
    CASE(OP_MUL, 2) CASE(OP_DIV, 2) CASE(OP_DIV_TRUNC, 2) CASE(OP_DIV_FLOOR, 2)             \
    CASE(OP_REMAINDER, 2) CASE(OP_FMOD, 2) CASE(OP_MAXIMUM, 2) CASE(OP_MINIMUM, 2)          \
    CASE(OP_POW, 2) CASE(OP_EQ, 2) CASE(OP_NE, 2) CASE(OP_LT, 2) CASE(OP_LE, 2)             \
    CASE(OP_GT, 2) CASE(OP_GE, 2) CASE(OP_LOGICAL_AND, 2) CASE(OP_LOGICAL_OR, 2)            \
    CASE(OP_LOGICAL_XOR, 2) CASE(OP_LOGICAL_NOT, 1) CASE(OP_WHERE, 3) CASE(OP_ABS, 1)       \
    CASE(OP_NEG, 1) CASE(OP_SIGN, 1) CASE(OP_RELU, 1) CASE(OP_FLOOR, 1) CASE(OP_CEIL, 1)    \
    CASE(OP_ROUND, 1) CASE(OP_TRUNC, 1) CASE(OP_ISNAN, 1) CASE(OP_ISINF, 1)                 \
    CASE(OP_CLAMP, 1) CASE(OP_LEAKY_RELU, 1)
#define FLOAT_OPS                                                                         \
    CASE(OP_ATAN2, 2) CASE(OP_SIGMOID, 1) CASE(OP_TANH, 1) CASE(OP_EXP, 1) CASE(OP_LOG, 1)  \
    CASE(OP_SQRT, 1) CASE(OP_RSQRT, 1) CASE(OP_SIN, 1) CASE(OP_COS, 1) CASE(OP_TAN, 1)      \
    CASE(OP_ASIN, 1) CASE(OP_ACOS, 1) CASE(OP_ATAN, 1) CASE(OP_SINH, 1) CASE(OP_COSH, 1)    \
    CASE(OP_ASINH, 1) CASE(OP_LOG2, 1) CASE(OP_LOG10, 1) CASE(OP_LOG1P, 1)                  \
    CASE(OP_EXPM1, 1) CASE(OP_ERF, 1) CASE(OP_RECIPROCAL, 1) CASE(OP_SILU, 1)               \
    CASE(OP_GELU, 1) CASE(OP_GELU_TANH, 1) CASE(OP_ELU, 1)
#define INT_OPS CASE(OP_BITWISE_AND, 2) CASE(OP_BITWISE_OR, 2) CASE(OP_BITWISE_XOR, 2) CASE(OP_BITWISE_NOT, 1)

extern "C" __global__ void ew_f32(int op, i64 n, EwArgs a) { PDL_ENTRY();
    typedef float C;
    switch (op) { COMMON_OPS FLOAT_OPS }
}
extern "C" __global__ void ew_f64(int op, i64 n, EwArgs a) { PDL_ENTRY();
    typedef double C;
    switch (op) { COMMON_OPS FLOAT_OPS }
}
extern "C" __global__ void ew_i64(int op, i64 n, EwArgs a) { PDL_ENTRY();
    typedef i64 C;
    switch (op) { COMMON_OPS INT_OPS }
}
