// etch::rope (etch_kernels::etch_ops::rope has the math and the CPU kernel): one thread per
// output element of x [B, T, H, D] with cos/sin [T, R]; products and the sum rounded to the
// IO dtype where the CPU rounds them (no fused multiply-add, so float32 matches too).

struct RopeArgs {
    const void* x;
    const void* cos;
    const void* sin;
    void* out;
    i64 total, seq, heads, dim, rot;  // B*T*H*D, T, H, D, R
};

template <int DT> __device__ void rope(const RopeArgs& a) {
    const i64 half = a.rot / 2;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < a.total;
         idx += (i64)gridDim.x * blockDim.x) {
        const i64 i = idx % a.dim, row = idx / a.dim;
        const float xi = io_ld<DT>(a.x, idx);
        if (i >= a.rot) {
            io_st<DT>(a.out, idx, xi);
            continue;
        }
        const i64 pos = (row / a.heads) % a.seq;
        const float rot = i < half ? -io_ld<DT>(a.x, idx + half) : io_ld<DT>(a.x, idx - half);
        const float c = io_ld<DT>(a.cos, pos * a.rot + i), s = io_ld<DT>(a.sin, pos * a.rot + i);
        io_st<DT>(a.out, idx, __fadd_rn(io_rnd<DT>(__fmul_rn(xi, c)), io_rnd<DT>(__fmul_rn(rot, s))));
    }
}
IO_KERNELS(rope, RopeArgs, 256)

// etch::rope_cos_sin: one thread per (t, j < dim/2) computes f = float(pos0 + t) * inv_j,
// inv_j = 1 / theta^(2j/dim) (each step rounded to float32, as the model and the CPU
// kernel compute it: no fused multiply-add), and writes cos/sin(f), rounded to the IO
// dtype, at columns j and dim/2 + j of row t.
struct RopeCosSinArgs {
    const long long* pos;  // input_pos [1]
    void* cos;             // [T, dim]
    void* sin;             // [T, dim]
    i64 seq, dim;
    float theta;
};

template <int DT> __device__ void rope_cos_sin(const RopeCosSinArgs& a) {
    const i64 half = a.dim / 2, total = a.seq * half;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < total;
         idx += (i64)gridDim.x * blockDim.x) {
        const i64 t = idx / half, j = idx % half;
        const float e = __fdiv_rn((float)(2 * j), (float)a.dim);
        const float inv = __fdiv_rn(1.0f, powf(a.theta, e));
        const float f = __fmul_rn((float)(a.pos[0] + t), inv);
        const float c = cosf(f), s = sinf(f);
        io_st<DT>(a.cos, t * a.dim + j, c);
        io_st<DT>(a.cos, t * a.dim + half + j, c);
        io_st<DT>(a.sin, t * a.dim + j, s);
        io_st<DT>(a.sin, t * a.dim + half + j, s);
    }
}
IO_KERNELS(rope_cos_sin, RopeCosSinArgs, 256)
