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

extern "C" __global__ void imatmul(IMatArgs p) {
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
