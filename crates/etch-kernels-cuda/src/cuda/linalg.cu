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
// each weight row is read once with 16-byte loads, several in flight per lane (io.cuh's
// warp_dot), float accumulation, one rounding at the store. For batch-1 decoding, where
// cuBLAS's GEMM tiles leave most of the bandwidth unused.
struct GemvArgs {
    const void* x;
    const void* w;
    void* out;
    i64 n, k;
    int beta, pad;
};

template <int DT> __device__ void gemv(const GemvArgs& a) {
    const int lane = threadIdx.x & 31, es = DT == DT_F32 ? 4 : 2;
    const i64 per = blockDim.x >> 5;
    for (i64 j = blockIdx.x * per + (threadIdx.x >> 5); j < a.n; j += (i64)gridDim.x * per) {
        float acc = warp_dot<DT>((const char*)a.w + j * a.k * es, a.x, a.k);
        if (lane == 0) {
            if (a.beta) acc += io_ld<DT>(a.out, j);
            io_st<DT>(a.out, j, acc);
        }
    }
}
IO_KERNELS(gemv, GemvArgs, 256)
