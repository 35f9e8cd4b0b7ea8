// Shared by the etch:: op families (gdn.cu, moe.cu, attention.cu, sample.cu): loads and
// stores of their IO dtypes (float32, bfloat16, float16: the template parameter DT is the
// dtype code), rounding to the IO dtype, 16-byte vector loads, warp sums and dot products.
// Arithmetic is float32 throughout, as in the CPU kernels (etch_kernels::etch_ops).

#define FULL_MASK 0xffffffffu

template <int DT> __device__ __forceinline__ float io_ld(const void* p, i64 i) {
    if (DT == DT_F32) return ((const float*)p)[i];
    if (DT == DT_BF16) return bf2f(((const u16*)p)[i]);
    return h2f(((const u16*)p)[i]);
}

template <int DT> __device__ __forceinline__ void io_st(void* p, i64 i, float v) {
    if (DT == DT_F32) ((float*)p)[i] = v;
    else if (DT == DT_BF16) ((u16*)p)[i] = f2bf(v);
    else ((u16*)p)[i] = f2h(v);
}

// v rounded to the IO dtype (and read back as float).
template <int DT> __device__ __forceinline__ float io_rnd(float v) {
    if (DT == DT_F32) return v;
    if (DT == DT_BF16) return bf2f(f2bf(v));
    return h2f(f2h(v));
}

// Elements of the IO dtype in 16 bytes.
template <int DT> struct IoVec {
    enum { N = DT == DT_F32 ? 4 : 8 };
};

// The IoVec<DT>::N elements of the 16 bytes u into x[0..N) (x holds 8).
template <int DT> __device__ __forceinline__ void io_cvt16(uint4 u, float* x) {
    unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (DT == DT_F32) {
            x[k] = __uint_as_float(w[k]);
        } else if (DT == DT_BF16) {
            x[2 * k] = bf2f((u16)(w[k] & 0xffffu));
            x[2 * k + 1] = bf2f((u16)(w[k] >> 16));
        } else {
            x[2 * k] = h2f((u16)(w[k] & 0xffffu));
            x[2 * k + 1] = h2f((u16)(w[k] >> 16));
        }
    }
}

// The IoVec<DT>::N elements at p (16-byte aligned) into x[0..N) (x holds 8).
template <int DT> __device__ __forceinline__ void io_ld16(const void* p, float* x) {
    io_cvt16<DT>(*(const uint4*)p, x);
}

// Stores x[0..IoVec<DT>::N) rounded to the IO dtype as 16 bytes at p (16-byte aligned).
template <int DT> __device__ __forceinline__ void io_st16(void* p, const float* x) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (DT == DT_F32) w[k] = __float_as_uint(x[k]);
        else if (DT == DT_BF16) w[k] = (unsigned)f2bf(x[2 * k]) | ((unsigned)f2bf(x[2 * k + 1]) << 16);
        else w[k] = (unsigned)f2h(x[2 * k]) | ((unsigned)f2h(x[2 * k + 1]) << 16);
    }
    *(uint4*)p = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// The sum over the block, in a fixed order (every thread gets it); sh: 32 floats.
__device__ float block_sumf(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = 0.0f;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) t += sh[k];
    return t;
}

// The best (value, index) pair over the warp under `Better` (a functor ordering pairs
// totally, so every lane ends with the same pair).
template <typename Better> __device__ __forceinline__ void warp_best(float& v, int& i) {
    const Better better;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL_MASK, v, o);
        const int oi = __shfl_xor_sync(FULL_MASK, i, o);
        if (better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
}

__device__ __forceinline__ bool aligned16(const void* p) { return ((u64)p & 15) == 0; }

// This lane's partial sums of <w1, x> and <w2, x> over n elements of IO-dtype rows (the
// warp's lanes together cover the rows; warp_sum adds them): 16-byte loads when the three
// rows are aligned, float accumulation. w2 may be null.
template <int DT>
__device__ __forceinline__ void lane_dot2(const void* w1, const void* w2, const void* x, i64 n,
                                          float& a1, float& a2) {
    const int lane = threadIdx.x & 31;
    const int V = IoVec<DT>::N;
    a1 = 0.0f;
    a2 = 0.0f;
    i64 done = 0;
    if (aligned16(w1) && aligned16(x) && (w2 == 0 || aligned16(w2))) {
        const i64 nv = n / V;
        // Unrolled so that several 16-byte loads of each row are in flight per lane.
#pragma unroll 8
        for (i64 c = lane; c < nv; c += 32) {
            float xv[8], wv[8];
            io_ld16<DT>((const char*)x + c * 16, xv);
            io_ld16<DT>((const char*)w1 + c * 16, wv);
#pragma unroll
            for (int k = 0; k < V; ++k) a1 += wv[k] * xv[k];
            if (w2) {
                io_ld16<DT>((const char*)w2 + c * 16, wv);
#pragma unroll
                for (int k = 0; k < V; ++k) a2 += wv[k] * xv[k];
            }
        }
        done = nv * V;
    }
    for (i64 i = done + lane; i < n; i += 32) {
        float xv = io_ld<DT>(x, i);
        a1 += io_ld<DT>(w1, i) * xv;
        if (w2) a2 += io_ld<DT>(w2, i) * xv;
    }
}

// <w1, x> and <w2, x> by one warp (every lane gets both); see lane_dot2.
template <int DT>
__device__ void warp_dot2(const void* w1, const void* w2, const void* x, i64 n, float& r1,
                          float& r2) {
    float a1, a2;
    lane_dot2<DT>(w1, w2, x, n, a1, a2);
    r1 = warp_sum(a1);
    r2 = w2 ? warp_sum(a2) : 0.0f;
}

// <w, x> by one warp (every lane gets it).
template <int DT> __device__ __forceinline__ float warp_dot(const void* w, const void* x, i64 n) {
    float r1, r2;
    warp_dot2<DT>(w, 0, x, n, r1, r2);
    return r1;
}

// <w_r, x> for the R rows w_r = w + r * stride (bytes) over n elements, by one warp (every
// lane gets all R): x's 16-byte vector is loaded once per step for all rows, so R row loads
// are in flight per lane. Rows and x must be 16-byte aligned for the vector path.
template <int DT, int R>
__device__ void warp_dot_rows(const char* w, i64 stride, const void* x, i64 n, float* out) {
    const int lane = threadIdx.x & 31;
    const int V = IoVec<DT>::N;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    i64 done = 0;
    if (aligned16(w) && aligned16(x) && (stride & 15) == 0) {
        const i64 nv = n / V;
#pragma unroll 2
        for (i64 c = lane; c < nv; c += 32) {
            float xv[8], wv[R][8];
            io_ld16<DT>((const char*)x + c * 16, xv);
#pragma unroll
            for (int r = 0; r < R; ++r) io_ld16<DT>(w + r * stride + c * 16, wv[r]);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int k = 0; k < V; ++k) acc[r] += wv[r][k] * xv[k];
        }
        done = nv * V;
    }
    for (i64 i = done + lane; i < n; i += 32) {
        const float xv = io_ld<DT>(x, i);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += io_ld<DT>(w + r * stride, i) * xv;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) out[r] = warp_sum(acc[r]);
}

// 1 / (1 + e^-x) and x * sigmoid(x), as the CPU kernels compute them.
__device__ __forceinline__ float e_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float e_silu(float x) { return x * e_sigmoid(x); }

// Kernel entry points for the three IO dtypes: NAME_f32, NAME_bf16, NAME_f16 calling
// the template NAME<DT>(args), launched with at most THREADS threads a block.
#define IO_KERNELS(NAME, ARGS, THREADS)                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_f32(ARGS a) {            \
        PDL_ENTRY(); NAME<DT_F32>(a);                                                     \
    }                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_bf16(ARGS a) {           \
        PDL_ENTRY(); NAME<DT_BF16>(a);                                                    \
    }                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_f16(ARGS a) {            \
        PDL_ENTRY(); NAME<DT_F16>(a);                                                     \
    }

// True for the one block of a group (counter *c, `blocks` blocks) that arrives last, after
// every block's global writes (and reads) are done and visible; that block resets the
// counter, so the next launch starts from zero (module globals start zeroed; one stream runs
// the kernels in order). Every thread of the block must call it.
__device__ bool last_block(unsigned* c, unsigned blocks) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(c, 1u) == blocks - 1;
        if (last) *c = 0;
    }
    __syncthreads();
    return last;
}
