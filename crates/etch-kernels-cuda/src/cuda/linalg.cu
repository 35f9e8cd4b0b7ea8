// Integer matrix products (cuBLAS has none for these dtypes): one thread per output
// element, i64 wrapping arithmetic truncated to the dtype once, as the CPU kernel.

struct IMatArgs {
    const void* a;
    const void* w;
    void* out;
    int dt, has_bias;
    i64 batch, m, k, n;
    i64 sa_b, sw_b, sw_k, sw_n;  // a is row-major m x k per batch; w through strides
    i64 alpha, beta;
};

extern "C" __global__ void imatmul(IMatArgs p) { PDL_ENTRY();
    i64 total = p.batch * p.m * p.n;
    GRID_LOOP(idx, total) {
        i64 j = idx % p.n;
        i64 i = (idx / p.n) % p.m;
        i64 b = idx / (p.m * p.n);
        u64 acc = 0;
        for (i64 kk = 0; kk < p.k; ++kk) {
            u64 x = (u64)ld<i64>(p.a, p.dt, b * p.sa_b + i * p.k + kk);
            u64 y = (u64)ld<i64>(p.w, p.dt, b * p.sw_b + kk * p.sw_k + j * p.sw_n);
            acc += x * y;
        }
        u64 r = (u64)p.alpha * acc;
        if (p.has_bias) r += (u64)p.beta * (u64)ld<i64>(p.out, p.dt, idx);
        st_int(p.out, p.dt, idx, (i64)r);
    }
}

// ---- GEMV: out[j] = <w[j], x> (+ out[j] when beta) for one row x of k floats (f32, bf16,
// f16), w stored n x k row-major (linear's weight). One warp per output j, 8 a block:
// each weight row is read once with 16-byte loads, several in flight per lane, float
// accumulation, one rounding at the store. For batch-1 decoding, where cuBLAS's GEMM
// tiles leave most of the bandwidth unused.
//
// Weight prefetch under programmatic dependent launch: a constant weight (one no kernel
// writes: etch::linear_group's, which etch lower groups only from constants) lets each
// warp load (up to GEMV_PF 16-byte vectors a lane of) its weight
// row *before* griddepcontrol.wait, while the previous kernels finish; x and the output
// only after the wait. Entry points start with PDL_EARLY() (the trigger) and wait inside.
// The per-lane summation order is lane_dot2's (io.cuh), so results are identical.
struct GemvArgs {
    const void* x;
    const void* w;
    void* out;
    i64 n, k;
    int beta;
    int early;  // w is a constant: fetch before the wait (aten::linear's weight may not be)
};

#define GEMV_PF 8

struct GemvRow {
    uint4 v[GEMV_PF];
};

// This lane's first GEMV_PF vectors of the row w (k elements, 16-byte aligned).
template <int DT> __device__ __forceinline__ void gemv_fetch(const char* w, i64 k, GemvRow& r) {
    const int lane = threadIdx.x & 31;
    const i64 nv = k / IoVec<DT>::N;
#pragma unroll
    for (int p = 0; p < GEMV_PF; ++p) {
        const i64 c = lane + 32 * p;
        if (c < nv) r.v[p] = __ldg((const uint4*)(w + c * 16));
    }
}

// <w, x> by one warp (every lane gets it) after gemv_fetch of w; w and x 16-byte aligned.
template <int DT>
__device__ __forceinline__ float gemv_finish(const char* w, const void* x, i64 k, const GemvRow& r) {
    const int lane = threadIdx.x & 31, V = IoVec<DT>::N;
    const i64 nv = k / V;
    float a = 0.0f, xv[8], wv[8];
#pragma unroll
    for (int p = 0; p < GEMV_PF; ++p) {
        const i64 c = lane + 32 * p;
        if (c < nv) {
            io_ld16<DT>((const char*)x + c * 16, xv);
            io_cvt16<DT>(r.v[p], wv);
#pragma unroll
            for (int e = 0; e < V; ++e) a += wv[e] * xv[e];
        }
    }
#pragma unroll 4
    for (i64 c = lane + 32 * GEMV_PF; c < nv; c += 32) {
        io_ld16<DT>((const char*)x + c * 16, xv);
        io_ld16<DT>(w + c * 16, wv);
#pragma unroll
        for (int e = 0; e < V; ++e) a += wv[e] * xv[e];
    }
    for (i64 i = nv * V + lane; i < k; i += 32) a += io_ld<DT>(w, i) * io_ld<DT>(x, i);
    return warp_sum(a);
}

// Whether rows of k elements starting at w (and x) take the vector path.
template <int DT> __device__ __forceinline__ bool gemv_vec(const void* w, const void* x, i64 k) {
    return aligned16(w) && aligned16(x) && ((k * (DT == DT_F32 ? 4 : 2)) & 15) == 0;
}

// Entry points that wait inside, after their weight prefetch (see above).
#define IO_KERNELS_EARLY(NAME, ARGS, THREADS)                                             \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_f32(ARGS a) {            \
        PDL_EARLY(); NAME<DT_F32>(a);                                                     \
    }                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_bf16(ARGS a) {           \
        PDL_EARLY(); NAME<DT_BF16>(a);                                                    \
    }                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_f16(ARGS a) {            \
        PDL_EARLY(); NAME<DT_F16>(a);                                                     \
    }

template <int DT> __device__ void gemv(const GemvArgs& a) {
    const int lane = threadIdx.x & 31, es = DT == DT_F32 ? 4 : 2;
    const i64 per = blockDim.x >> 5, step = (i64)gridDim.x * per;
    const i64 j0 = blockIdx.x * per + (threadIdx.x >> 5);
    const bool vec = gemv_vec<DT>(a.w, a.x, a.k);
    GemvRow r;
    const bool pre = a.early && vec && j0 < a.n;
    if (pre) gemv_fetch<DT>((const char*)a.w + j0 * a.k * es, a.k, r);
    PDL_WAIT();
    for (i64 j = j0; j < a.n; j += step) {
        const char* row = (const char*)a.w + j * a.k * es;
        float acc;
        if (vec) {
            if (!(j == j0 && pre)) gemv_fetch<DT>(row, a.k, r);
            acc = gemv_finish<DT>(row, a.x, a.k, r);
        } else {
            acc = warp_dot<DT>(row, a.x, a.k);
        }
        if (lane == 0) {
            if (a.beta) acc += io_ld<DT>(a.out, j);
            io_st<DT>(a.out, j, acc);
        }
    }
}
IO_KERNELS_EARLY(gemv, GemvArgs, 256)

// ---- Grouped GEMV (etch::linear_group, one row): the linears' weight rows as one range of
// rows, start[s] .. start[s+1] those of linear s; each warp finds the linear of its row,
// then as gemv (weight row fetched before the wait). One launch for the projections of a
// layer that share their input.
#define GEMV_GROUP 8
struct GemvGroupArgs {
    const void* x;
    const void* w[GEMV_GROUP];
    void* out[GEMV_GROUP];
    i64 start[GEMV_GROUP + 1];
    i64 k;
    int len, pad;
};

template <int DT> __device__ void gemv_group(const GemvGroupArgs& a) {
    const int lane = threadIdx.x & 31, es = DT == DT_F32 ? 4 : 2;
    const i64 per = blockDim.x >> 5, step = (i64)gridDim.x * per, total = a.start[a.len];
    const i64 r0 = blockIdx.x * per + (threadIdx.x >> 5);
    int s = 0;  // the linear of the current row (rows only increase)
    while (s + 1 < a.len && r0 >= a.start[s + 1]) ++s;
    GemvRow r;
    const bool fetched = r0 < total && gemv_vec<DT>(a.w[s], a.x, a.k);
    if (fetched) gemv_fetch<DT>((const char*)a.w[s] + (r0 - a.start[s]) * a.k * es, a.k, r);
    PDL_WAIT();
    for (i64 q = r0; q < total; q += step) {
        while (s + 1 < a.len && q >= a.start[s + 1]) ++s;
        const i64 j = q - a.start[s];
        const char* row = (const char*)a.w[s] + j * a.k * es;
        float acc;
        if (gemv_vec<DT>(a.w[s], a.x, a.k)) {
            if (!(q == r0 && fetched)) gemv_fetch<DT>(row, a.k, r);
            acc = gemv_finish<DT>(row, a.x, a.k, r);
        } else {
            acc = warp_dot<DT>(row, a.x, a.k);
        }
        if (lane == 0) io_st<DT>(a.out[s], j, acc);
    }
}
IO_KERNELS_EARLY(gemv_group, GemvGroupArgs, 256)
