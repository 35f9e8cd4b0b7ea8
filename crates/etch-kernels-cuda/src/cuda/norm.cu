// Row-wise normalisations: softmax / log_softmax over one dim, layer norm over the last
// dims. One warp per row; float accumulation (double for f64).

struct RowArgs {
    const void* in;
    void* out;
    int dt, log, nd, pad;
    i64 rows, n, sin, sout;  // rows, row length, element stride along the row (in / out)
    i64 size[MAXD], st_in[MAXD], st_out[MAXD];  // the row index space (dims but `dim`)
};

template <typename C> __device__ __forceinline__ C wmax(C v) {
    for (int off = 16; off > 0; off >>= 1) {
        C o = __shfl_xor_sync(0xffffffffu, v, off);
        v = (o > v || o != o) ? o : v;
    }
    return v;
}
template <typename C> __device__ __forceinline__ C wsum(C v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float c_exp(float x) { return expf(x); }
__device__ __forceinline__ double c_exp(double x) { return exp(x); }
__device__ __forceinline__ float c_log(float x) { return logf(x); }
__device__ __forceinline__ double c_log(double x) { return log(x); }
__device__ __forceinline__ float c_rsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ double c_rsqrt(double x) { return 1.0 / sqrt(x); }

template <typename C> __device__ void softmax_rows(const RowArgs& a) {
    int lane = threadIdx.x & 31;
    i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 r = warp; r < a.rows; r += nwarps) {
        i64 q = r, bi = 0, bo = 0;
        for (int d = a.nd - 1; d >= 0; --d) {
            i64 c = q % a.size[d];
            q /= a.size[d];
            bi += c * a.st_in[d];
            bo += c * a.st_out[d];
        }
        C mx = (C)(-1.0 / 0.0);
        for (i64 i = lane; i < a.n; i += 32) {
            C v = ld<C>(a.in, a.dt, bi + i * a.sin);
            if (v > mx || v != v) mx = v;
        }
        mx = wmax(mx);
        C sum = (C)0;
        for (i64 i = lane; i < a.n; i += 32) sum += c_exp(ld<C>(a.in, a.dt, bi + i * a.sin) - mx);
        sum = wsum(sum);
        C ls = c_log(sum);
        for (i64 i = lane; i < a.n; i += 32) {
            C v = ld<C>(a.in, a.dt, bi + i * a.sin) - mx;
            st(a.out, a.dt, bo + i * a.sout, a.log ? v - ls : c_exp(v) / sum);
        }
    }
}
extern "C" __global__ void softmax_f32(RowArgs a) { softmax_rows<float>(a); }
extern "C" __global__ void softmax_f64(RowArgs a) { softmax_rows<double>(a); }

struct LnArgs {
    const void* in;
    const void* w;   // null: no weight
    const void* b;   // null: no bias
    void* out;
    void* mean;
    void* rstd;
    int dt, pad;
    i64 m, n;
    double eps;
};

template <typename C> __device__ void layer_norm_rows(const LnArgs& a) {
    int lane = threadIdx.x & 31;
    i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 r = warp; r < a.m; r += nwarps) {
        i64 base = r * a.n;
        C s = (C)0;
        for (i64 i = lane; i < a.n; i += 32) s += ld<C>(a.in, a.dt, base + i);
        C mean = wsum(s) / (C)a.n;
        C q = (C)0;
        for (i64 i = lane; i < a.n; i += 32) {
            C d = ld<C>(a.in, a.dt, base + i) - mean;
            q += d * d;
        }
        C var = wsum(q) / (C)a.n;
        C rstd = c_rsqrt(var + (C)a.eps);
        for (i64 i = lane; i < a.n; i += 32) {
            C y = (ld<C>(a.in, a.dt, base + i) - mean) * rstd;
            if (a.w) y *= ld<C>(a.w, a.dt, i);
            if (a.b) y += ld<C>(a.b, a.dt, i);
            st(a.out, a.dt, base + i, y);
        }
        if (lane == 0) {
            if (a.mean) st(a.mean, a.dt, r, mean);
            if (a.rstd) st(a.rstd, a.dt, r, rstd);
        }
    }
}
extern "C" __global__ void layer_norm_f32(LnArgs a) { layer_norm_rows<float>(a); }
extern "C" __global__ void layer_norm_f64(LnArgs a) { layer_norm_rows<double>(a); }
