// etch::moe (etch_kernels::etch_ops::moe has the math and the CPU kernel), in three
// kernels on one stream, every intermediate rounded to the IO dtype where the CPU rounds:
// - moe_logits_*: grid (groups of 8 experts, 1, rows): one warp per (row, expert) computes
//   the rounded router logit (and, for "expert" E, the shared-expert gate), so that the
//   router's E x H weights are read by the whole GPU, not one block.
// - moe_route_*: one block per row: warp 0 takes the softmax, the top-k (NaN loses, ties to
//   the lower index) and writes the selected experts in ascending order with their
//   renormalised weights.
// - moe_up_*: grid (rows of 8 intermediate units, k+1 slots, rows): one warp per unit i
//   computes gate_i and up_i of the slot's expert (slot k: the shared expert) against x and
//   stores round(round(silu(gate)) * up) in the activation scratch.
// - moe_down_*: grid (rows of 8 hidden units, 1, rows): one warp per hidden unit h sums the
//   slots' down projections in ascending expert order (each add rounded), then adds the
//   gated shared expert.
// Every dot product reads a weight row once with 16-byte loads (GEMV): decode reads just
// the selected experts. Prefill runs the same GEMVs per (row, expert), so an expert's
// weights are read once per row that selects it (M rows cost M decode steps of weight
// traffic); a grouped GEMM over the rows of each expert is the faster prefill path.

struct MoeArgs {
    const void* x;        // [M, H]
    const void* router;   // [E, H]
    const void* gate_up;  // [E, 2I, H]
    const void* down;     // [E, H, I]
    const void* sg;       // [Is, H]
    const void* su;       // [Is, H]
    const void* sd;       // [H, Is]
    const void* seg;      // [1, H]
    void* out;            // [M, H]
    int* sel;             // [M, k] selected experts, ascending
    float* wsel;          // [M, k] their weights (rounded)
    float* sgate;         // [M] sigmoid gate of the shared expert (rounded)
    void* act;            // [M, k+1, width] activations (IO dtype)
    float* logits;        // [M, E] rounded router logits
    i64 rows, hidden, experts, inter, sinter, top_k, width;
};

extern __shared__ float moe_smem[];

// True when (v, i) ranks before (bv, bi) in the top-k: not NaN over NaN, larger, or equal
// at a lower index (an index < 0: no expert).
struct MoeBefore {
    __device__ bool operator()(float v, int i, float bv, int bi) const {
        if (bi < 0) return i >= 0;
        if (i < 0) return false;
        const bool vn = v != v, bn = bv != bv;
        if (vn != bn) return bn;
        if (!vn && v != bv) return v > bv;
        return i < bi;
    }
};

// Softmax over the E logits in p (in place), top-k, renormalised weights: warp 0 only.
template <int DT> __device__ void moe_topk(const MoeArgs& a, i64 m, float* p, int* taken) {
    const int lane = threadIdx.x & 31;
    const int E = (int)a.experts;
    float mx = -1.0f / 0.0f;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, p[e]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32) p[e] /= sum;
    __syncwarp();
    for (i64 j = 0; j < a.top_k; ++j) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = lane; e < E; e += 32)
            if (!taken[e] && MoeBefore()(p[e], e, bv, bi)) {
                bv = p[e];
                bi = e;
            }
        warp_best<MoeBefore>(bv, bi);
        if (lane == 0 && bi >= 0) taken[bi] = 1;
        __syncwarp();
    }
    if (lane == 0) {
        float total = 0.0f;
        for (int e = 0; e < E; ++e)
            if (taken[e]) total += p[e];
        i64 n = 0;
        for (int e = 0; e < E && n < a.top_k; ++e) {
            if (!taken[e]) continue;
            a.sel[m * a.top_k + n] = e;
            a.wsel[m * a.top_k + n] = io_rnd<DT>(p[e] / total);
            ++n;
        }
    }
}

template <int DT> __device__ void moe_logits(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 e = blockIdx.x * (i64)(blockDim.x >> 5) + w;
    if (e > a.experts) return;
    const bool gate = e == a.experts;
    const void* row = gate ? a.seg : (const char*)a.router + e * a.hidden * es;
    for (i64 m = blockIdx.z; m < a.rows; m += gridDim.z) {
        const char* x = (const char*)a.x + m * a.hidden * es;
        const float l = io_rnd<DT>(warp_dot<DT>(row, x, a.hidden));
        if (lane != 0) continue;
        if (gate)
            a.sgate[m] = io_rnd<DT>(e_sigmoid(l));
        else
            a.logits[m * a.experts + e] = l;
    }
}
IO_KERNELS(moe_logits, MoeArgs, 256)

// Dynamic shared memory: E floats (logits, then probabilities) and E ints (taken flags).
template <int DT> __device__ void moe_route(const MoeArgs& a) {
    float* p = moe_smem;
    int* taken = (int*)(moe_smem + a.experts);
    const int w = threadIdx.x >> 5;
    for (i64 m = blockIdx.x; m < a.rows; m += gridDim.x) {
        for (i64 e = threadIdx.x; e < a.experts; e += blockDim.x) {
            p[e] = a.logits[m * a.experts + e];
            taken[e] = 0;
        }
        __syncthreads();
        if (w == 0) moe_topk<DT>(a, m, p, taken);
        __syncthreads();
    }
}
IO_KERNELS(moe_route, MoeArgs, 256)

template <int DT> __device__ void moe_up(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 i = blockIdx.x * (i64)(blockDim.x >> 5) + w;
    const i64 s = blockIdx.y, k = a.top_k, rb = a.hidden * es;
    for (i64 m = blockIdx.z; m < a.rows; m += gridDim.z) {
        const char *gate, *up;
        i64 n;
        if (s < k) {
            const i64 e = a.sel[m * k + s];
            const char* base = (const char*)a.gate_up + e * 2 * a.inter * rb;
            n = a.inter;
            gate = base + i * rb;
            up = base + (a.inter + i) * rb;
        } else {
            n = a.sinter;
            gate = (const char*)a.sg + i * rb;
            up = (const char*)a.su + i * rb;
        }
        if (i >= n) continue;
        float g, u;
        warp_dot2<DT>(gate, up, (const char*)a.x + m * rb, a.hidden, g, u);
        g = io_rnd<DT>(g);
        u = io_rnd<DT>(u);
        if (lane == 0) io_st<DT>(a.act, (m * (k + 1) + s) * a.width + i, io_rnd<DT>(io_rnd<DT>(e_silu(g)) * u));
    }
}
IO_KERNELS(moe_up, MoeArgs, 256)

template <int DT> __device__ void moe_down(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 h = blockIdx.x * (i64)(blockDim.x >> 5) + w;
    const i64 k = a.top_k;
    if (h >= a.hidden) return;
    for (i64 m = blockIdx.z; m < a.rows; m += gridDim.z) {
        const char* act = (const char*)a.act + m * (k + 1) * a.width * es;
        float acc = 0.0f;
        for (i64 s = 0; s < k; ++s) {
            const i64 e = a.sel[m * k + s];
            const char* row = (const char*)a.down + (e * a.hidden + h) * a.inter * es;
            const float y = io_rnd<DT>(warp_dot<DT>(row, act + s * a.width * es, a.inter));
            acc = io_rnd<DT>(acc + io_rnd<DT>(y * a.wsel[m * k + s]));
        }
        const char* row = (const char*)a.sd + h * a.sinter * es;
        const float ys = io_rnd<DT>(warp_dot<DT>(row, act + k * a.width * es, a.sinter));
        if (lane == 0) io_st<DT>(a.out, m * a.hidden + h, acc + io_rnd<DT>(a.sgate[m] * ys));
    }
}
IO_KERNELS(moe_down, MoeArgs, 256)
