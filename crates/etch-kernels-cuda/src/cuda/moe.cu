// etch::moe (etch_kernels::etch_ops::moe has the math and the CPU kernel), in three to five
// kernels on one stream, every intermediate rounded to the IO dtype where the CPU rounds:
// - moe_logits_*: grid (groups of 8 experts, 1, rows): one warp per (row, expert) computes
//   the rounded router logit (and, for "expert" E, the shared-expert gate), so that the
//   router's E x H weights are read by the whole GPU, not one block.
// - moe_logits_* also routes when fuse_route (one row per grid z): the last block of a row
//   to finish (an atomic counter) routes it (moe_route_row); else moe_route_* runs, one
//   block per row. Routing: the softmax, the top-k (NaN loses, ties to the lower index) as
//   the experts whose rank (experts ranking before them, counted in parallel) is below k,
//   in ascending expert order, with their renormalised weights.
// - moe_up_*: grid (rows of 8 intermediate units, k+1 slots, rows): one warp per unit i
//   computes gate_i and up_i of the slot's expert (slot k: the shared expert) against x and
//   stores round(round(silu(gate)) * up) in the activation scratch.
// - moe_down_*: grid (tiles of 32 hidden units, k+1 slots, rows): one warp per (4 hidden
//   units, slot) computes that slot's weighted down projections into a float scratch, so
//   that all k+1 rows of a unit are read in parallel;
// - moe_down_* also combines when fuse_combine (the last of the k+1 slot blocks of a unit
//   tile, by an atomic counter); else moe_combine_*:
// - moe_down_row_* replaces moe_down and moe_combine for one row (decode): a warp per hidden
//   unit over all k+1 slots, combined in registers;
// - moe_combine_*: one thread per hidden unit sums the slots in ascending expert order
//   (each add rounded), then adds the gated shared expert.
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
    float* ys;            // [M, k+1, H] each slot's weighted, rounded down projection
    i64 rows, hidden, experts, inter, sinter, top_k, width;
    i64 fuse_route;       // moe_logits routes (see below); else moe_route runs
    i64 fuse_combine;     // moe_down combines; else moe_combine runs
};

extern __shared__ float moe_smem[];

// Blocks done per row (moe_logits) and per (row, unit tile) (moe_down): the last block of
// a group does the group's follow-up work and resets its counter, so every launch starts
// from zero (module globals start zeroed; one stream runs these kernels in order).
#define MOE_COUNTERS 65536
__device__ unsigned moe_logits_done[MOE_COUNTERS];
__device__ unsigned moe_down_done[MOE_COUNTERS];

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

// The max over the block (every thread gets it); sh holds 32 floats.
__device__ float moe_block_max(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = -1.0f / 0.0f;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) t = fmaxf(t, sh[k]);
    return t;
}

// Routes row m from its E logits (global memory, written by other blocks of this kernel or
// an earlier one) with the whole block: softmax; each expert's rank = how many experts
// rank before it (MoeBefore, a total order), so the top-k are the ranks below k, found in
// parallel without k rounds of argmax; the selected experts in ascending order by a block
// prefix count; their weights renormalised over the selection summed in ascending expert
// order (as the CPU kernel). Dynamic shared memory: E floats, then k ints and k floats.
template <int DT> __device__ void moe_route_row(const MoeArgs& a, i64 m, const float* logits) {
    __shared__ float sh[32];
    __shared__ int warp_n[32];
    const int E = (int)a.experts, K = (int)a.top_k;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float* p = moe_smem;
    int* list = (int*)(moe_smem + E);
    float* pv = (float*)(list + K);
    float mx = -1.0f / 0.0f;
    bool nan = false;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        p[e] = __ldcg(logits + e);
        mx = fmaxf(mx, p[e]);
        nan |= p[e] != p[e];
    }
    mx = moe_block_max(mx, sh);
    nan = __syncthreads_or(nan);
    float sum = 0.0f;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    sum = block_sumf(sum, sh);
    for (int e = threadIdx.x; e < E; e += blockDim.x) p[e] /= sum;
    __syncthreads();
    int base = 0;
    for (int e0 = 0; e0 < E; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        bool sel = false;
        if (e < E) {
            const float v = p[e];
            int rank = 0;
            if (!nan) {
                // No NaN: MoeBefore is "larger, or equal at a lower index".
#pragma unroll 8
                for (int j = 0; j < E; ++j) rank += (p[j] > v) | ((p[j] == v) & (j < e));
            } else {
                for (int j = 0; j < E && rank < K; ++j) rank += MoeBefore()(p[j], j, v, e);
            }
            sel = rank < K;
        }
        const unsigned mask = __ballot_sync(FULL_MASK, sel);
        if (lane == 0) warp_n[w] = __popc(mask);
        __syncthreads();
        int at = base + __popc(mask & ((1u << lane) - 1u));
        for (int k = 0; k < w; ++k) at += warp_n[k];
        if (sel && at < K) {
            list[at] = e;
            pv[at] = p[e];
        }
        for (int k = 0; k < nw; ++k) base += warp_n[k];
        __syncthreads();
    }
    const int n = base < K ? base : K;
    if (w == 0) {
        float total = 0.0f;
        if (lane == 0)
            for (int j = 0; j < n; ++j) total += pv[j];
        total = __shfl_sync(FULL_MASK, total, 0);
        for (int j = lane; j < n; j += 32) {
            a.sel[m * K + j] = list[j];
            a.wsel[m * K + j] = io_rnd<DT>(pv[j] / total);
        }
    }
}

template <int DT> __device__ void moe_logits(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 e = blockIdx.x * (i64)(blockDim.x >> 5) + w;
    const bool gate = e == a.experts;
    const void* row = gate ? a.seg : (const char*)a.router + e * a.hidden * es;
    for (i64 m = blockIdx.z; m < a.rows && e <= a.experts; m += gridDim.z) {
        const char* x = (const char*)a.x + m * a.hidden * es;
        const float l = io_rnd<DT>(warp_dot<DT>(row, x, a.hidden));
        if (lane != 0) continue;
        if (gate)
            a.sgate[m] = io_rnd<DT>(e_sigmoid(l));
        else
            a.logits[m * a.experts + e] = l;
    }
    // Fused routing (one row per grid z): the row's last block routes it.
    if (!a.fuse_route || !last_block(&moe_logits_done[blockIdx.z], gridDim.x)) return;
    moe_route_row<DT>(a, blockIdx.z, a.logits + blockIdx.z * a.experts);
}
IO_KERNELS(moe_logits, MoeArgs, 256)

// One block per row (grid-stride), when moe_logits does not route (see moe_route_row).
template <int DT> __device__ void moe_route(const MoeArgs& a) {
    for (i64 m = blockIdx.x; m < a.rows; m += gridDim.x) {
        moe_route_row<DT>(a, m, a.logits + m * a.experts);
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

// One warp per (hidden unit h, slot s): ys[m, s, h] = round(round(<down_e[h], act_s>) * w_s)
// for the k selected experts, round(sgate * round(<shared_down[h], act_k>)) for slot k.
#define MOE_DOWN_R 4  // hidden units per warp in moe_down
template <int DT> __device__ void moe_down(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 h0 = (blockIdx.x * (i64)(blockDim.x >> 5) + w) * MOE_DOWN_R;
    const i64 k = a.top_k, s = blockIdx.y;
    for (i64 m = blockIdx.z; m < a.rows && h0 < a.hidden; m += gridDim.z) {
        const char* act = (const char*)a.act + (m * (k + 1) + s) * a.width * es;
        const bool shared = s == k;
        const i64 n = shared ? a.sinter : a.inter;
        const char* base = shared ? (const char*)a.sd + h0 * n * es
                                  : (const char*)a.down + (a.sel[m * k + s] * a.hidden + h0) * n * es;
        float y[MOE_DOWN_R];
        if (h0 + MOE_DOWN_R <= a.hidden) {
            warp_dot_rows<DT, MOE_DOWN_R>(base, n * es, act, n, y);
        } else {
#pragma unroll
            for (int r = 0; r < MOE_DOWN_R; ++r)
                y[r] = h0 + r < a.hidden ? warp_dot<DT>(base + r * n * es, act, n) : 0.0f;
        }
        const float g = shared ? a.sgate[m] : a.wsel[m * k + s];
#pragma unroll
        for (int r = 0; r < MOE_DOWN_R; ++r) {
            // Expert slots: round(round(dot) * w); the shared slot: round(gate * round(dot)).
            const float v = shared ? io_rnd<DT>(g * io_rnd<DT>(y[r])) : io_rnd<DT>(io_rnd<DT>(y[r]) * g);
            if (lane == r && h0 + r < a.hidden) a.ys[(m * (k + 1) + s) * a.hidden + h0 + r] = v;
        }
    }
    // Fused combine (one row per grid z): the last slot block of a unit tile sums it.
    if (!a.fuse_combine) return;
    unsigned* c = &moe_down_done[blockIdx.z * gridDim.x + blockIdx.x];
    if (!last_block(c, gridDim.y)) return;
    // The tile's (k+1) x units values into shared memory in parallel, then one thread per
    // unit sums them in order.
    const i64 units = (blockDim.x >> 5) * MOE_DOWN_R, m = blockIdx.z, t0 = blockIdx.x * units;
    float* ys = moe_smem;
    for (i64 i = threadIdx.x; i < (k + 1) * units; i += blockDim.x) {
        const i64 j = i / units, h = t0 + i % units;
        if (h < a.hidden) ys[i] = __ldcg(a.ys + (m * (k + 1) + j) * a.hidden + h);
    }
    __syncthreads();
    if (threadIdx.x >= units || t0 + threadIdx.x >= a.hidden) return;
    float acc = 0.0f;
    for (i64 j = 0; j < k; ++j) acc = io_rnd<DT>(acc + ys[j * units + threadIdx.x]);
    io_st<DT>(a.out, m * a.hidden + t0 + threadIdx.x, acc + ys[k * units + threadIdx.x]);
}
IO_KERNELS(moe_down, MoeArgs, 256)

// Decode (one row): one warp per hidden unit h reads the h-th down row of all k+1 slots
// (the k selected experts, then the shared expert: k + 1 <= MOE_ROW_SLOTS, inter ==
// sinter, rows 16-byte aligned, checked by the launcher), each step issuing the 16-byte
// loads of every slot before any arithmetic, and combines them in registers in
// moe_combine's order: no ys scratch, no counter, no second pass. The block first stages
// the k+1 activation rows in shared memory (dynamic, (k+1) x width elements), so that a
// lane's registers hold only weights: 3 blocks of 256 fit an SM, and the grid one wave.
#define MOE_ROW_SLOTS 9
template <int DT> __device__ void moe_down_row(const MoeArgs& a) {
    const int lane = threadIdx.x & 31;
    const int es = DT == DT_F32 ? 4 : 2, V = IoVec<DT>::N;
    const i64 h = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const int k = (int)a.top_k;
    char* xs = (char*)moe_smem;
    const i64 xbytes = (k + 1) * a.width * es;
    for (i64 o = threadIdx.x * 16; o < xbytes; o += blockDim.x * 16)
        *(uint4*)(xs + o) = *(const uint4*)((const char*)a.act + o);
    __syncthreads();
    if (h >= a.hidden) return;
    const int mine = lane < k ? a.sel[lane] : 0;
    const char* row[MOE_ROW_SLOTS];
    float part[MOE_ROW_SLOTS];
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
        const i64 e = __shfl_sync(FULL_MASK, mine, s);
        row[s] = s < k ? (const char*)a.down + (e * a.hidden + h) * a.inter * es
                       : (const char*)a.sd + h * a.sinter * es;
        part[s] = 0.0f;
    }
    const i64 nv = a.inter / V;
    for (i64 c = lane; c < nv; c += 32) {
        uint4 w[MOE_ROW_SLOTS];
#pragma unroll
        for (int s = 0; s < MOE_ROW_SLOTS; ++s)
            if (s <= k) w[s] = *(const uint4*)(row[s] + c * 16);
#pragma unroll
        for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
            if (s > k) continue;
            float wf[8], xf[8];
            io_cvt16<DT>(w[s], wf);
            io_cvt16<DT>(*(const uint4*)(xs + s * a.width * es + c * 16), xf);
#pragma unroll
            for (int q = 0; q < V; ++q) part[s] += wf[q] * xf[q];
        }
    }
    float acc = 0.0f, shared_y = 0.0f;
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
        if (s > k) continue;
        const float y = io_rnd<DT>(warp_sum(part[s]));
        // Expert slots: round(round(dot) * w), added in ascending expert order; the shared
        // slot: round(gate * round(dot)), added last.
        if (s < k) acc = io_rnd<DT>(acc + io_rnd<DT>(y * a.wsel[s]));
        else shared_y = io_rnd<DT>(a.sgate[0] * y);
    }
    if (lane == 0) io_st<DT>(a.out, h, acc + shared_y);
}
extern "C" __global__ void __launch_bounds__(256, 3) moe_down_row_f32(MoeArgs a) {
    PDL_ENTRY(); moe_down_row<DT_F32>(a);
}
extern "C" __global__ void __launch_bounds__(256, 3) moe_down_row_bf16(MoeArgs a) {
    PDL_ENTRY(); moe_down_row<DT_BF16>(a);
}
extern "C" __global__ void __launch_bounds__(256, 3) moe_down_row_f16(MoeArgs a) {
    PDL_ENTRY(); moe_down_row<DT_F16>(a);
}

// One thread per (row, hidden unit): the slots summed in ascending expert order (each add
// rounded), plus the gated shared expert.
template <int DT> __device__ void moe_combine(const MoeArgs& a) {
    const i64 k = a.top_k;
    const i64 total = a.rows * a.hidden;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 m = i / a.hidden, h = i % a.hidden;
        const float* y = a.ys + m * (k + 1) * a.hidden + h;
        float acc = 0.0f;
        for (i64 s = 0; s < k; ++s) acc = io_rnd<DT>(acc + y[s * a.hidden]);
        io_st<DT>(a.out, i, acc + y[k * a.hidden]);
    }
}
IO_KERNELS(moe_combine, MoeArgs, 256)
