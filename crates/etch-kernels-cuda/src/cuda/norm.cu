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
extern "C" __global__ void softmax_f32(RowArgs a) { PDL_ENTRY(); softmax_rows<float>(a); }
extern "C" __global__ void softmax_f64(RowArgs a) { PDL_ENTRY(); softmax_rows<double>(a); }

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
extern "C" __global__ void layer_norm_f32(LnArgs a) { PDL_ENTRY(); layer_norm_rows<float>(a); }
extern "C" __global__ void layer_norm_f64(LnArgs a) { PDL_ENTRY(); layer_norm_rows<double>(a); }

// ---- Batch and group normalisation ----
// A "channel row" r holds the elements normalised together: batch norm's channel r (every
// dim but 1, strided) or group norm's (batch item, group) row r (contiguous). Element i of
// row r sits at r * rx + off(i) in x (r * ro + off(i) in out), off over the `rest` dims;
// the parameter channel of element i is (r % groups) * cg + i / hw.
struct BnArgs {
    const void* in;
    const void* w;      // null: no weight
    const void* b;      // null: no bias
    const void* rmean;  // no_training: running statistics (null otherwise)
    const void* rvar;
    void* out;
    void* mean;         // saved statistics (null: not written)
    void* rstd;
    int dt, nd;
    i64 rows, len, rx, ro, groups, cg, hw;
    double eps;
    i64 size[MAXD], st_in[MAXD], st_out[MAXD];
};

__device__ __forceinline__ void bn_off(const BnArgs& a, i64 i, i64& oi, i64& oo) {
    oi = 0;
    oo = 0;
    for (int d = a.nd - 1; d >= 0; --d) {
        i64 c = i % a.size[d];
        i /= a.size[d];
        oi += c * a.st_in[d];
        oo += c * a.st_out[d];
    }
}

// Sum of v over the block (every thread gets it); `sh` holds 32 values.
template <typename C> __device__ C block_sum(C v, C* sh) {
    v = wsum(v);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    C t = (C)0;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) t += sh[k];
    return t;
}

// Statistics from the data (double accumulation, biased variance): one block per row.
template <typename C> __device__ void moments_norm(const BnArgs& a) {
    __shared__ double sh[32];
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        double s = 0.0;
        i64 oi, oo;
        for (i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
            bn_off(a, i, oi, oo);
            s += (double)ld<C>(a.in, a.dt, r * a.rx + oi);
        }
        double mean = a.len > 0 ? block_sum(s, sh) / (double)a.len : 0.0;
        double q = 0.0;
        for (i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
            bn_off(a, i, oi, oo);
            double d = (double)ld<C>(a.in, a.dt, r * a.rx + oi) - mean;
            q += d * d;
        }
        double var = a.len > 0 ? block_sum(q, sh) / (double)a.len : 0.0;
        double rstd = 1.0 / sqrt(var + a.eps);
        if (threadIdx.x == 0) {
            if (a.mean) st(a.mean, a.dt, r, (C)mean);
            if (a.rstd) st(a.rstd, a.dt, r, (C)rstd);
        }
        for (i64 i = threadIdx.x; i < a.len; i += blockDim.x) {
            i64 ch = (r % a.groups) * a.cg + i / a.hw;
            double scale = (a.w ? (double)ld<C>(a.w, a.dt, ch) : 1.0) * rstd;
            double shift = (a.b ? (double)ld<C>(a.b, a.dt, ch) : 0.0) - mean * scale;
            bn_off(a, i, oi, oo);
            C v = ld<C>(a.in, a.dt, r * a.rx + oi) * (C)scale + (C)shift;
            st(a.out, a.dt, r * a.ro + oo, v);
        }
        __syncthreads();
    }
}
extern "C" __global__ void moments_norm_f32(BnArgs a) { PDL_ENTRY(); moments_norm<float>(a); }
extern "C" __global__ void moments_norm_f64(BnArgs a) { PDL_ENTRY(); moments_norm<double>(a); }

// Batch norm with running statistics: channel blockIdx.x, its elements split over
// blockIdx.y; computed in C as the CPU kernel does.
template <typename C> __device__ void batch_norm_stats(const BnArgs& a) {
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        C rstd = (C)1 / sqrt(ld<C>(a.rvar, a.dt, r) + (C)a.eps);
        C scale = (a.w ? ld<C>(a.w, a.dt, r) : (C)1) * rstd;
        C shift = (a.b ? ld<C>(a.b, a.dt, r) : (C)0) - ld<C>(a.rmean, a.dt, r) * scale;
        for (i64 i = blockIdx.y * (i64)blockDim.x + threadIdx.x; i < a.len;
             i += (i64)gridDim.y * blockDim.x) {
            i64 oi, oo;
            bn_off(a, i, oi, oo);
            st(a.out, a.dt, r * a.ro + oo, ld<C>(a.in, a.dt, r * a.rx + oi) * scale + shift);
        }
    }
}
extern "C" __global__ void batch_norm_f32(BnArgs a) { PDL_ENTRY(); batch_norm_stats<float>(a); }
extern "C" __global__ void batch_norm_f64(BnArgs a) { PDL_ENTRY(); batch_norm_stats<double>(a); }

// ---- etch::rms_norm / etch::rms_norm_gated / etch::add_rms_norm (Qwen 3.5) ----
// One block per row (grid-stride over rows); the sum of squares in f32 over the block.
// Plain: out = rnd(x * inv * (offset + w)). Gated (z != null):
// out = rnd(rnd(w * rnd(x * inv)) * silu(z)), rnd = rounding to the IO dtype.
struct RmsArgs {
    const void* x;
    const void* z;  // null: plain norm
    const void* y;  // add_rms_norm: the addend (else null); the norm is of sum = rnd(x + y)
    void* sum;
    const void* w;
    void* out;
    int dt;
    int pad;
    i64 rows, n;
    float eps, offset;
};

__device__ __forceinline__ float rnd_dt(float v, int dt) {
    if (dt == DT_BF16) return bf2f(f2bf(v));
    if (dt == DT_F16) return h2f(f2h(v));
    return v;
}

extern "C" __global__ void etch_rms_norm(RmsArgs a) { PDL_ENTRY();
    __shared__ float sh[32];
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const i64 base = r * a.n;
        const void* x = a.y ? a.sum : a.x;
        float ss = 0.0f;
        for (i64 i = threadIdx.x; i < a.n; i += blockDim.x) {
            float v = ld<float>(a.x, a.dt, base + i);
            if (a.y) {
                v = rnd_dt(v + ld<float>(a.y, a.dt, base + i), a.dt);
                st(a.sum, a.dt, base + i, v);
            }
            ss += v * v;
        }
        // (block_sum's barriers also make this block's sum writes visible to it.)
        const float tot = block_sum(ss, sh);
        const float inv = 1.0f / sqrtf(tot / (float)a.n + a.eps);
        for (i64 i = threadIdx.x; i < a.n; i += blockDim.x) {
            float h = ld<float>(x, a.dt, base + i) * inv;
            float w = ld<float>(a.w, a.dt, i);
            float y;
            if (a.z) {
                h = rnd_dt(w * rnd_dt(h, a.dt), a.dt);
                float z = ld<float>(a.z, a.dt, base + i);
                y = h * (z / (1.0f + expf(-z)));
            } else {
                y = h * (a.offset + w);
            }
            st(a.out, a.dt, base + i, y);
        }
    }
}

// The same norms with the row held in registers (one read of x): 16-byte vectors, at most
// RMS_CACHE per thread. WARP: one warp per row (rows of at most 32 * RMS_CACHE vectors),
// else one block per row (at most blockDim.x * RMS_CACHE vectors). Needs n a multiple of
// the vector width and 16-byte aligned rows (the launcher checks, else etch_rms_norm).
#define RMS_CACHE 4
template <int DT, bool WARP> __device__ void rms_rows(const RmsArgs& a) {
    __shared__ float sh[32];
    const int V = IoVec<DT>::N, es = DT == DT_F32 ? 4 : 2;
    const int g = WARP ? 32 : (int)blockDim.x;
    const int t = WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
    const i64 per = WARP ? (i64)(blockDim.x >> 5) : 1;
    const i64 nv = a.n / V, rb = a.n * es;
    for (i64 r = blockIdx.x * per + (WARP ? (threadIdx.x >> 5) : 0); r < a.rows;
         r += (i64)gridDim.x * per) {
        const char* x = (const char*)a.x + r * rb;
        float v[RMS_CACHE][8];
        float ss = 0.0f;
#pragma unroll
        for (int c = 0; c < RMS_CACHE; ++c) {
            const i64 ch = t + (i64)c * g;
            if (ch < nv) {
                io_ld16<DT>(x + ch * 16, v[c]);
                if (a.y) {
                    float y[8];
                    io_ld16<DT>((const char*)a.y + r * rb + ch * 16, y);
#pragma unroll
                    for (int k = 0; k < V; ++k) v[c][k] = io_rnd<DT>(v[c][k] + y[k]);
                    io_st16<DT>((char*)a.sum + r * rb + ch * 16, v[c]);
                }
#pragma unroll
                for (int k = 0; k < V; ++k) ss += v[c][k] * v[c][k];
            }
        }
        const float tot = WARP ? warp_sum(ss) : block_sum(ss, sh);
        const float inv = 1.0f / sqrtf(tot / (float)a.n + a.eps);
#pragma unroll
        for (int c = 0; c < RMS_CACHE; ++c) {
            const i64 ch = t + (i64)c * g;
            if (ch >= nv) continue;
            float w[8], y[8];
            io_ld16<DT>((const char*)a.w + ch * 16, w);
            if (a.z) {
                float z[8];
                io_ld16<DT>((const char*)a.z + r * rb + ch * 16, z);
#pragma unroll
                for (int k = 0; k < V; ++k) {
                    const float h = io_rnd<DT>(w[k] * io_rnd<DT>(v[c][k] * inv));
                    y[k] = h * (z[k] / (1.0f + expf(-z[k])));
                }
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) y[k] = v[c][k] * inv * (a.offset + w[k]);
            }
            io_st16<DT>((char*)a.out + r * rb + ch * 16, y);
        }
    }
}
template <int DT> __device__ void rms_warp(const RmsArgs& a) { rms_rows<DT, true>(a); }
template <int DT> __device__ void rms_block(const RmsArgs& a) { rms_rows<DT, false>(a); }
IO_KERNELS(rms_warp, RmsArgs, 256)
IO_KERNELS(rms_block, RmsArgs, 256)
