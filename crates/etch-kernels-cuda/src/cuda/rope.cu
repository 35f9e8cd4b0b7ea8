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

// etch::qk_norm_rope: one warp per row (a token's query head: the first D of its 2D
// values in qg, or a key head of k), 8 rows a block. The warp takes etch::rms_norm's warp
// order (lane l sums the squares of elements (l + 32c)·V + j, c and j ascending, then a
// warp sum; V the 16-byte vector width), so the norm is rms_warp's to the bit; the
// normalised row, rounded to the IO dtype, goes to shared memory, and etch::rope's
// arithmetic reads it there. Query rows also copy their gate (qg's last D values).
#define QKNR_MAXD 1024
struct QkNormRopeArgs {
    const void* qg;  // [tokens, Hq, 2D]
    const void* k;   // [tokens, Hkv, D]
    const void* wq;  // [D]
    const void* wk;  // [D]
    const void* cos; // [T, R]
    const void* sin;
    void* q;         // [tokens, Hq, D]
    void* gate;      // [tokens, Hq, D]
    void* kout;      // [tokens, Hkv, D]
    i64 tokens, hq, hkv, dim, rot, seq;
    float eps, offset;
};

template <int DT> __device__ void qk_norm_rope(const QkNormRopeArgs& a) {
    __shared__ float hs[8][QKNR_MAXD];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int V = IoVec<DT>::N;
    const i64 heads = a.hq + a.hkv, row = blockIdx.x * 8LL + w;
    if (row >= a.tokens * heads) return;
    const i64 tok = row / heads, head = row % heads, pos = tok % a.seq, d = a.dim;
    const bool isq = head < a.hq;
    const void* x = isq ? a.qg : a.k;
    const i64 xb = isq ? (tok * a.hq + head) * 2 * d : (tok * a.hkv + head - a.hq) * d;
    const i64 ob = isq ? (tok * a.hq + head) * d : (tok * a.hkv + head - a.hq) * d;
    const void* wt = isq ? a.wq : a.wk;
    void* out = isq ? a.q : a.kout;
    float ss = 0.0f;
    for (i64 c = lane; c * V < d; c += 32)
        for (int j = 0; j < V; ++j) {
            const i64 e = c * V + j;
            if (e < d) {
                const float v = io_ld<DT>(x, xb + e);
                ss += v * v;
            }
        }
    const float tot = warp_sum(ss);
    const float inv = 1.0f / sqrtf(tot / (float)d + a.eps);
    float* h = hs[w];
    for (i64 e = lane; e < d; e += 32) {
        h[e] = io_rnd<DT>(io_ld<DT>(x, xb + e) * inv * (a.offset + io_ld<DT>(wt, e)));
        if (isq) io_st<DT>(a.gate, ob + e, io_ld<DT>(a.qg, xb + d + e));
    }
    __syncwarp();
    const i64 half = a.rot / 2;
    for (i64 i = lane; i < d; i += 32) {
        const float xi = h[i];
        if (i >= a.rot) {
            io_st<DT>(out, ob + i, xi);
            continue;
        }
        const float rot = i < half ? -h[i + half] : h[i - half];
        const float c = io_ld<DT>(a.cos, pos * a.rot + i), s = io_ld<DT>(a.sin, pos * a.rot + i);
        io_st<DT>(out, ob + i, __fadd_rn(io_rnd<DT>(__fmul_rn(xi, c)), io_rnd<DT>(__fmul_rn(rot, s))));
    }
}
IO_KERNELS(qk_norm_rope, QkNormRopeArgs, 256)
