// etch's first CUDA kernels, compiled once per device with NVRTC. No headers: half and
// bfloat16 are converted with PTX / bit operations; all arithmetic is in f32.
typedef unsigned short u16;
typedef long long i64;

struct Shape {
    int ndim;
    i64 size[8];
    i64 sa[8];
    i64 sb[8];
};

__device__ __forceinline__ float ld_f32(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float ld_f16(const u16* p, i64 i) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i])); return f;
}
__device__ __forceinline__ float ld_bf16(const u16* p, i64 i) {
    return __uint_as_float(((unsigned)p[i]) << 16);
}
__device__ __forceinline__ void st_f32(float* p, i64 i, float v) { p[i] = v; }
__device__ __forceinline__ void st_f16(u16* p, i64 i, float v) {
    u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); p[i] = h;
}
__device__ __forceinline__ void st_bf16(u16* p, i64 i, float v) {
    unsigned b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) { p[i] = (u16)((b >> 16) | 0x40u); return; }
    b += 0x7fffu + ((b >> 16) & 1u);
    p[i] = (u16)(b >> 16);
}

// Offsets of output element `i` in two broadcast/strided inputs.
__device__ __forceinline__ void offsets(const Shape& s, i64 i, i64* oa, i64* ob) {
    i64 r = i, a = 0, b = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
        i64 c = r % s.size[d];
        r /= s.size[d];
        a += c * s.sa[d];
        b += c * s.sb[d];
    }
    *oa = a; *ob = b;
}

#define GRID_LOOP(n) for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

#define BINARY(NAME, T, SUF, EXPR)                                                        \
extern "C" __global__ void NAME##_##SUF(const T* a, const T* b, T* out, i64 n, float alpha, Shape s) { \
    GRID_LOOP(n) {                                                                        \
        i64 oa, ob; offsets(s, i, &oa, &ob);                                              \
        float x = ld_##SUF(a, oa), y = ld_##SUF(b, ob);                                   \
        st_##SUF(out, i, (EXPR));                                                         \
    }                                                                                     \
}

#define UNARY(NAME, T, SUF, EXPR)                                                         \
extern "C" __global__ void NAME##_##SUF(const T* a, T* out, i64 n, Shape s) {             \
    GRID_LOOP(n) {                                                                        \
        i64 oa, ob; offsets(s, i, &oa, &ob);                                              \
        float x = ld_##SUF(a, oa);                                                        \
        st_##SUF(out, i, (EXPR));                                                         \
    }                                                                                     \
}

#define ALL(T, SUF)                                                                       \
    BINARY(add, T, SUF, x + alpha * y)                                                    \
    BINARY(sub, T, SUF, x - alpha * y)                                                    \
    BINARY(mul, T, SUF, x * y)                                                            \
    BINARY(div, T, SUF, x / y)                                                            \
    UNARY(relu, T, SUF, (x > 0.0f || x != x) ? x : 0.0f)                                 \
    UNARY(sigmoid, T, SUF, 1.0f / (1.0f + expf(-x)))                                      \
    UNARY(tanh, T, SUF, tanhf(x))                                                         \
    UNARY(copy, T, SUF, x)

ALL(float, f32)
ALL(u16, f16)
ALL(u16, bf16)

// Byte-wise strided copy for any element size (permute / dim-order conversion of ints).
extern "C" __global__ void copy_bytes(const unsigned char* a, unsigned char* out, i64 n, int es, Shape s) {
    GRID_LOOP(n) {
        i64 oa, ob; offsets(s, i, &oa, &ob);
        for (int k = 0; k < es; ++k) out[i * es + k] = a[oa * es + k];
    }
}
