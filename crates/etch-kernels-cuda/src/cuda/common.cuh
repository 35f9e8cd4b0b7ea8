// Shared by every etch CUDA source (prepended before NVRTC compiles a family's file).
// No headers: half and bfloat16 are converted with PTX / bit operations.
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef unsigned char u8;

#define MAXD 16
// ExecuTorch ScalarType codes.
#define DT_U8 0
#define DT_I8 1
#define DT_I16 2
#define DT_I32 3
#define DT_I64 4
#define DT_F16 5
#define DT_F32 6
#define DT_F64 7
#define DT_BOOL 11
#define DT_BF16 15

// Geometry of an elementwise-style loop: sizes and element strides of the output
// (st[0]) and up to three inputs (st[1..3]), in a common logical order.
struct Geo {
    int ndim;
    int contig;  // 1: every operand is contiguous over `size` (index i everywhere)
    int small;   // 1: every index and offset fits 32 bits (cheaper division)
    int pad;
    i64 size[MAXD];
    i64 st[4][MAXD];
};

// Programmatic dependent launch (sm_90 and up; the launcher sets the attribute): a kernel
// may be scheduled while the one before it on the stream is still running. Every kernel
// therefore starts with PDL_ENTRY: wait until the previous grid has finished and its writes
// are visible (nothing is read or written before), then let the next grid be scheduled.
// Without the attribute, or before sm_90, both instructions do nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" :::)
#else
#define PDL_WAIT() do {} while (0)
#define PDL_TRIGGER() do {} while (0)
#endif
#define PDL_ENTRY() do { PDL_WAIT(); PDL_TRIGGER(); } while (0)
// For kernels that read constants (weights, which no kernel writes) before waiting: the
// entry point starts with PDL_EARLY() and the body calls PDL_WAIT() before it reads or
// writes anything else (linalg.cu's GEMVs).
#define PDL_EARLY() PDL_TRIGGER()
#define GRID_LOOP(i, n) for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

__device__ __forceinline__ float h2f(u16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ u16 f2h(float f) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float bf2f(u16 b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ u16 f2bf(float v) {
    unsigned b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (u16)(b >> 16);
}
// double -> half/bf16 through float (double rounding is what PyTorch's casts do too).
__device__ __forceinline__ u16 d2h(double v) {
    u16 h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(v)); return h;
}

// Loads element i of a tensor of dtype dt as compute type C.
template <typename C> __device__ __forceinline__ C ld(const void* p, int dt, i64 i);
template <> __device__ __forceinline__ float ld<float>(const void* p, int dt, i64 i) {
    switch (dt) {
        case DT_F32: return ((const float*)p)[i];
        case DT_F16: return h2f(((const u16*)p)[i]);
        case DT_BF16: return bf2f(((const u16*)p)[i]);
        case DT_F64: return (float)((const double*)p)[i];
        case DT_I64: return (float)((const i64*)p)[i];
        case DT_I32: return (float)((const int*)p)[i];
        case DT_I16: return (float)((const short*)p)[i];
        case DT_I8: return (float)((const signed char*)p)[i];
        case DT_U8: return (float)((const u8*)p)[i];
        case DT_BOOL: return ((const u8*)p)[i] ? 1.0f : 0.0f;
    }
    return 0.0f;
}
template <> __device__ __forceinline__ double ld<double>(const void* p, int dt, i64 i) {
    switch (dt) {
        case DT_F32: return ((const float*)p)[i];
        case DT_F16: return h2f(((const u16*)p)[i]);
        case DT_BF16: return bf2f(((const u16*)p)[i]);
        case DT_F64: return ((const double*)p)[i];
        case DT_I64: return (double)((const i64*)p)[i];
        case DT_I32: return ((const int*)p)[i];
        case DT_I16: return ((const short*)p)[i];
        case DT_I8: return ((const signed char*)p)[i];
        case DT_U8: return ((const u8*)p)[i];
        case DT_BOOL: return ((const u8*)p)[i] ? 1.0 : 0.0;
    }
    return 0.0;
}
template <> __device__ __forceinline__ i64 ld<i64>(const void* p, int dt, i64 i) {
    switch (dt) {
        case DT_F32: return (i64)((const float*)p)[i];
        case DT_F16: return (i64)h2f(((const u16*)p)[i]);
        case DT_BF16: return (i64)bf2f(((const u16*)p)[i]);
        case DT_F64: return (i64)((const double*)p)[i];
        case DT_I64: return ((const i64*)p)[i];
        case DT_I32: return ((const int*)p)[i];
        case DT_I16: return ((const short*)p)[i];
        case DT_I8: return ((const signed char*)p)[i];
        case DT_U8: return ((const u8*)p)[i];
        case DT_BOOL: return ((const u8*)p)[i] ? 1 : 0;
    }
    return 0;
}

// Stores v (compute type C) as element i of a tensor of dtype dt.
__device__ __forceinline__ void st_int(void* p, int dt, i64 i, i64 v) {
    switch (dt) {
        case DT_I64: ((i64*)p)[i] = v; break;
        case DT_I32: ((int*)p)[i] = (int)v; break;
        case DT_I16: ((short*)p)[i] = (short)v; break;
        case DT_I8: ((signed char*)p)[i] = (signed char)v; break;
        case DT_U8: ((u8*)p)[i] = (u8)v; break;
        case DT_BOOL: ((u8*)p)[i] = v != 0; break;
        case DT_F32: ((float*)p)[i] = (float)v; break;
        case DT_F64: ((double*)p)[i] = (double)v; break;
        case DT_F16: ((u16*)p)[i] = f2h((float)v); break;
        case DT_BF16: ((u16*)p)[i] = f2bf((float)v); break;
    }
}
__device__ __forceinline__ void st(void* p, int dt, i64 i, i64 v) { st_int(p, dt, i, v); }
__device__ __forceinline__ void st(void* p, int dt, i64 i, float v) {
    switch (dt) {
        case DT_F32: ((float*)p)[i] = v; break;
        case DT_F16: ((u16*)p)[i] = f2h(v); break;
        case DT_BF16: ((u16*)p)[i] = f2bf(v); break;
        case DT_F64: ((double*)p)[i] = v; break;
        case DT_BOOL: ((u8*)p)[i] = v != 0.0f; break;
        default: st_int(p, dt, i, (i64)v); break;
    }
}
__device__ __forceinline__ void st(void* p, int dt, i64 i, double v) {
    switch (dt) {
        case DT_F64: ((double*)p)[i] = v; break;
        case DT_F32: ((float*)p)[i] = (float)v; break;
        case DT_F16: ((u16*)p)[i] = d2h(v); break;
        case DT_BF16: ((u16*)p)[i] = f2bf((float)v); break;
        case DT_BOOL: ((u8*)p)[i] = v != 0.0; break;
        default: st_int(p, dt, i, (i64)v); break;
    }
}

// Offsets of logical element i for operands 0..K-1 (0: the output) under geometry g,
// decomposing i once (in 32 bits when the geometry allows).
template <int K>
__device__ __forceinline__ void geo_offs(const Geo& g, i64 i, i64* o) {
#pragma unroll
    for (int k = 0; k < K; ++k) o[k] = g.contig ? i : 0;
    if (g.contig) return;
    if (g.small) {
        unsigned r = (unsigned)i;
        unsigned acc[K];
#pragma unroll
        for (int k = 0; k < K; ++k) acc[k] = 0;
        for (int d = g.ndim - 1; d >= 0; --d) {
            unsigned sz = (unsigned)g.size[d];
            unsigned c = r % sz;
            r /= sz;
#pragma unroll
            for (int k = 0; k < K; ++k) acc[k] += c * (unsigned)g.st[k][d];
        }
#pragma unroll
        for (int k = 0; k < K; ++k) o[k] = (i64)acc[k];
        return;
    }
    i64 r = i;
    for (int d = g.ndim - 1; d >= 0; --d) {
        i64 c = r % g.size[d];
        r /= g.size[d];
#pragma unroll
        for (int k = 0; k < K; ++k) o[k] += c * g.st[k][d];
    }
}

// Offset of logical element i of operand k under geometry g.
__device__ __forceinline__ i64 geo_off(const Geo& g, int k, i64 i) {
    if (g.contig) return i;
    i64 r = i, o = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
        i64 c = r % g.size[d];
        r /= g.size[d];
        o += c * g.st[k][d];
    }
    return o;
}

// Records an error in the error word, which is host memory mapped into the device (written
// only on an error, so nothing crosses PCIe otherwise): a plain store, no system-scope atomic
// (over PCIe those depend on the platform); when threads fail differently, one code stays.
// The host reads the word after the kernels.
__device__ __forceinline__ void set_error(int* err, int code) { *(volatile int*)err = code; }
