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
// the selected experts. Many rows (long prefills: from ETCH_MOE_BY_EXPERT_FROM, default 512)
// go expert-major instead, so that each expert's weights are read once, not once per row
// that selects it:
// - moe_lists_*: one block per expert: its (row, slot) pairs in row order;
// - moe_up_ex_* / moe_down_ex_*: a block per (tile of 8 units, expert or shared expert)
//   holds the tile's weight rows in registers and runs over the expert's pairs (the up
//   kernel stages 8 rows of x at a time in shared memory); moe_combine then sums.
// Same rounding points and the same per-lane summation order as the row kernels.
// bfloat16 and float16 calls of ETCH_MOE_TC_FROM rows and more (default 64; a huge value
// turns it off, for comparisons) run expert-major on tensor cores instead (moe_tc.cu,
// compiled into this module): moe_lists, moe_tc_plan (the tile table), moe_up_tc_*,
// moe_down_tc_* (grouped mma.sync GEMMs with the same rounding points), then moe_combine.
// Shapes that do not fit its tiles (hidden, inter or shared inter not a multiple of 32,
// rows not 16-byte aligned) keep the kernels above.

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
    int* lists;           // [E, M] expert-major: the pairs m*(k+1)+j that selected expert e
    int* counts;          // [E] how many
    int2* tiles;          // [tile_max] tensor-core tiles: (slot block, first pair) or -1 (moe_tc.cu)
    i64 tile_max;
    i64 rank_all;         // routing ranks every expert against all (ETCH_MOE_RANK_ALL=1)
    i64 route_in_blocks;  // one row: moe_up's and moe_down_row's blocks route it themselves
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

// Appends, in ascending order of position, the flagged items of one block-wide pass to
// list/pv (at most K in all) and returns the new count; `base` items came before. warp_n:
// 32 ints of shared memory.
__device__ __forceinline__ int moe_append(bool flag, int e, float v, int base, int K, int* list,
                                          float* pv, int* warp_n) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const unsigned mask = __ballot_sync(FULL_MASK, flag);
    if (lane == 0) warp_n[w] = __popc(mask);
    __syncthreads();
    int at = base + __popc(mask & ((1u << lane) - 1u));
    for (int q = 0; q < w; ++q) at += warp_n[q];
    if (flag && at < K) {
        list[at] = e;
        pv[at] = v;
    }
    for (int q = 0; q < nw; ++q) base += warp_n[q];
    __syncthreads();
    return base;
}

// The top-k of p[0..E) by rank: each expert counts the experts ranking before it (MoeBefore,
// a total order) over all E. Returns how many were selected (min(E, K)).
__device__ int moe_rank_all(const float* p, int E, int K, bool nan, int* list, float* pv,
                            int* warp_n) {
    int base = 0;
    for (int e0 = 0; e0 < E; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        bool sel = false;
        float v = 0.0f;
        if (e < E) {
            v = p[e];
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
        base = moe_append(sel, e, v, base, K, list, pv, warp_n);
    }
    return base < K ? base : K;
}

// The same selection with less work, for E <= blockDim experts without NaN of which few are
// picked (2 K ceil(E / 32) <= E): an expert is a candidate when it ranks among the top K of
// its own group of 32 experts; the candidates are compacted over p in expert order (values
// at p[0..c), their experts' indices at p[E / 2..E / 2 + c): every thread has read p by
// then, moe_append's first barrier), and each candidate counts the candidates ranking
// before it. That count equals its rank among all experts whenever either is below K: an
// expert that ranks before a candidate but is no candidate itself has K candidates of its
// group before it, all of which rank before the candidate too.
__device__ int moe_rank_candidates(float* p, int E, int K, int* list, float* pv, int* warp_n) {
    const int lane = threadIdx.x & 31, e = threadIdx.x, g0 = e - lane;
    bool cand = false;
    float v = 0.0f;
    if (e < E) {
        v = p[e];
        const int len = E - g0 < 32 ? E - g0 : 32;
        int rank = 0;
#pragma unroll 8
        for (int j = 0; j < len; ++j) {
            const float q = p[g0 + j];
            rank += (q > v) | ((q == v) & (j < lane));
        }
        cand = rank < K;
    }
    int* ce = (int*)(p + E / 2);
    const int c = moe_append(cand, e, v, 0, E, ce, p, warp_n);
    // Candidate t (ascending expert order, so "equal at a lower index" is j < t).
    const int t = threadIdx.x;
    bool sel = false;
    int et = 0;
    if (t < c) {
        v = p[t];
        et = ce[t];
        int rank = 0;
        for (int j = 0; j < c; ++j) {
            const float q = p[j];
            rank += (q > v) | ((q == v) & (j < t));
        }
        sel = rank < K;
    }
    const int n = moe_append(sel, et, v, 0, K, list, pv, warp_n);
    return n < K ? n : K;
}

// Routes one row from its E logits (global memory, written by other blocks of this kernel
// or an earlier grid) with the whole block, into shared memory: softmax; each expert's rank = how many experts
// rank before it (MoeBefore, a total order), so the top-k are the ranks below k, found in
// parallel without k rounds of argmax; the selected experts in ascending order by a block
// prefix count; their weights renormalised over the selection summed in ascending expert
// order (as the CPU kernel) and rounded. The ranks: moe_rank_candidates when it applies
// (the usual case), else moe_rank_all. `p`: E floats of scratch; afterwards every thread
// sees the n selected experts in list[0..n) (n = min(E, k)) and their weights in
// pv[0..n). Every thread of the block calls it.
template <int DT>
__device__ int moe_route_block(const MoeArgs& a, const float* logits, float* p, int* list,
                               float* pv) {
    __shared__ float sh[32];
    __shared__ int warp_n[32];
    const int E = (int)a.experts, K = (int)a.top_k;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
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
    const bool few = !nan && E <= (int)blockDim.x && 2 * K * ((E + 31) / 32) <= E && !a.rank_all;
    const int n = few ? moe_rank_candidates(p, E, K, list, pv, warp_n)
                      : moe_rank_all(p, E, K, nan, list, pv, warp_n);
    if (w == 0) {
        float total = 0.0f;
        if (lane == 0)
            for (int j = 0; j < n; ++j) total += pv[j];
        // (The shuffle also orders lane 0's reads before the writes below.)
        total = __shfl_sync(FULL_MASK, total, 0);
        for (int j = lane; j < n; j += 32) pv[j] = io_rnd<DT>(pv[j] / total);
    }
    __syncthreads();
    return n;
}

// Routes row m into sel and wsel (moe_route_block; dynamic shared memory: E floats, then k
// ints and k floats).
template <int DT> __device__ void moe_route_row(const MoeArgs& a, i64 m, const float* logits) {
    const int K = (int)a.top_k;
    int* list = (int*)(moe_smem + a.experts);
    float* pv = (float*)(list + K);
    const int n = moe_route_block<DT>(a, logits, moe_smem, list, pv);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        a.sel[m * K + j] = list[j];
        a.wsel[m * K + j] = pv[j];
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

// Routing in the blocks (a.route_in_blocks, one row): a routed slot's block ranks the
// router logits itself (moe_route_block; dynamic shared memory as moe_route's) and takes the
// s-th selected expert, so no block routes after moe_logits' others have finished; the
// shared expert's blocks start their dot products at once.
template <int DT> __device__ void moe_up(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 i = blockIdx.x * (i64)(blockDim.x >> 5) + w;
    const i64 s = blockIdx.y, k = a.top_k, rb = a.hidden * es;
    int routed = 0;
    if (a.route_in_blocks && s < k) {
        int* list = (int*)(moe_smem + a.experts);
        routed = moe_route_block<DT>(a, a.logits, moe_smem, list, (float*)(list + k)) > s
                     ? list[s]
                     : 0;
    }
    for (i64 m = blockIdx.z; m < a.rows; m += gridDim.z) {
        const char *gate, *up;
        i64 n;
        if (s < k) {
            const i64 e = a.route_in_blocks ? routed : a.sel[m * k + s];
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
// sinter, rows 16-byte aligned, checked by the launcher), and combines them in registers
// in moe_combine's order: no ys scratch, no counter, no second pass. Each lane issues the
// 16-byte loads of its first two chunks of every slot at once, before the block stages
// the k+1 activation rows in shared memory as float32 (dynamic, (k+1) x width floats,
// converted once per block instead of once per warp), so that the weights' latency
// overlaps the staging and the dot products read ready floats. The _early entry points
// (EARLY) read the selection and issue those loads before waiting for the previous kernel
// (programmatic dependent launch): the selection comes from moe_logits, which completed
// before moe_up (the kernel waited for) passed its own wait and let this grid launch, and
// the weights are constants; only the activations come from moe_up.
#define MOE_ROW_SLOTS 9
template <int DT>
__device__ __forceinline__ void moe_row_dots(const uint4* w, const float* xs, i64 width, i64 c,
                                             int k, float* part) {
    const int V = IoVec<DT>::N;
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
        if (s > k) continue;
        float wf[8];
        io_cvt16<DT>(w[s], wf);
        const float4* x = (const float4*)(xs + s * width + c * V);
        const float4 x0 = x[0], x1 = V == 8 ? x[1] : x0;
        const float xf[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int q = 0; q < V; ++q) part[s] += wf[q] * xf[q];
    }
}

template <int DT, bool EARLY> __device__ void moe_down_row(const MoeArgs& a) {
    const int lane = threadIdx.x & 31;
    const int es = DT == DT_F32 ? 4 : 2, V = IoVec<DT>::N;
    const i64 h = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const int k = (int)a.top_k;
    const bool on = h < a.hidden;
    // With a.route_in_blocks each block routes the row itself (moe_up's comment), into the
    // shared memory after the activations: before the wait too, as moe_logits, which wrote
    // the logits, completed before moe_up passed its wait and let this grid launch.
    const float* wsel = a.wsel;
    int mine;
    if (a.route_in_blocks) {
        float* p = moe_smem + (k + 1) * a.width;
        int* list = (int*)(p + a.experts);
        wsel = (const float*)(list + k);
        moe_route_block<DT>(a, a.logits, p, list, (float*)wsel);
        mine = lane < k ? list[lane] : 0;
    } else {
        mine = lane < k ? a.sel[lane] : 0;
    }
    const char* row[MOE_ROW_SLOTS];
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
        const i64 e = __shfl_sync(FULL_MASK, mine, s);
        row[s] = s < k ? (const char*)a.down + (e * a.hidden + h) * a.inter * es
                       : (const char*)a.sd + h * a.sinter * es;
    }
    const i64 nv = a.inter / V;
    uint4 w0[MOE_ROW_SLOTS], w1[MOE_ROW_SLOTS];
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
        if (!on || s > k) continue;
        if (lane < nv) w0[s] = *(const uint4*)(row[s] + lane * 16);
        if (lane + 32 < nv) w1[s] = *(const uint4*)(row[s] + (lane + 32) * 16);
    }
    if (EARLY) PDL_WAIT();
    float* xs = moe_smem;
    const i64 nx = (k + 1) * a.width / V;
    for (i64 o = threadIdx.x; o < nx; o += blockDim.x) {
        float f[8];
        io_ld16<DT>((const char*)a.act + o * 16, f);
        float4* d = (float4*)(xs + o * V);
        d[0] = make_float4(f[0], f[1], f[2], f[3]);
        if (V == 8) d[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
    __syncthreads();
    if (!on) return;
    float part[MOE_ROW_SLOTS];
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) part[s] = 0.0f;
    if (lane < nv) moe_row_dots<DT>(w0, xs, a.width, lane, k, part);
    if (lane + 32 < nv) moe_row_dots<DT>(w1, xs, a.width, lane + 32, k, part);
    for (i64 c = lane + 64; c < nv; c += 32) {
#pragma unroll
        for (int s = 0; s < MOE_ROW_SLOTS; ++s)
            if (s <= k) w0[s] = *(const uint4*)(row[s] + c * 16);
        moe_row_dots<DT>(w0, xs, a.width, c, k, part);
    }
    float acc = 0.0f, shared_y = 0.0f;
#pragma unroll
    for (int s = 0; s < MOE_ROW_SLOTS; ++s) {
        if (s > k) continue;
        const float y = io_rnd<DT>(warp_sum(part[s]));
        // Expert slots: round(round(dot) * w), added in ascending expert order; the shared
        // slot: round(gate * round(dot)), added last.
        if (s < k) acc = io_rnd<DT>(acc + io_rnd<DT>(y * wsel[s]));
        else shared_y = io_rnd<DT>(a.sgate[0] * y);
    }
    if (lane == 0) io_st<DT>(a.out, h, acc + shared_y);
}
#define MOE_DOWN_ROW_ENTRY(SUFFIX, DT)                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) moe_down_row_##SUFFIX(MoeArgs a) { \
        PDL_ENTRY(); moe_down_row<DT, false>(a);                                           \
    }                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 2)                                   \
        moe_down_row_early_##SUFFIX(MoeArgs a) {                                           \
        PDL_EARLY(); moe_down_row<DT, true>(a);                                            \
    }
MOE_DOWN_ROW_ENTRY(f32, DT_F32)
MOE_DOWN_ROW_ENTRY(bf16, DT_BF16)
MOE_DOWN_ROW_ENTRY(f16, DT_F16)

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

// ---- Expert-major kernels for several rows (see the top of the file) ----
#define MOE_EX_VEC 8  // 16-byte chunks of a weight row a lane holds: rows of <= 4096 bytes
#define MOE_EX_TOK 8  // x rows staged per step in moe_up_ex

// One block per expert e: the pairs m*(k+1)+j with sel[m, j] == e, in row order.
template <int DT> __device__ void moe_lists(const MoeArgs& a) {
    __shared__ int warp_n[32];
    const int e = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const i64 K = a.top_k, total = a.rows * K;
    int base = 0;
    for (i64 b0 = 0; b0 < total; b0 += blockDim.x) {
        const i64 idx = b0 + threadIdx.x;
        const bool hit = idx < total && a.sel[idx] == e;
        const unsigned mask = __ballot_sync(FULL_MASK, hit);
        if (lane == 0) warp_n[w] = __popc(mask);
        __syncthreads();
        int at = base + __popc(mask & ((1u << lane) - 1u));
        for (int q = 0; q < w; ++q) at += warp_n[q];
        if (hit) a.lists[(i64)e * a.rows + at] = (int)((idx / K) * (K + 1) + idx % K);
        for (int q = 0; q < nw; ++q) base += warp_n[q];
        __syncthreads();
    }
    if (threadIdx.x == 0) a.counts[e] = base;
}
IO_KERNELS(moe_lists, MoeArgs, 256)

// The t-th pair of slot block e (the shared expert, e == E, takes every row's slot k).
__device__ __forceinline__ i64 moe_pair(const MoeArgs& a, int e, i64 t) {
    return e == a.experts ? t * (a.top_k + 1) + a.top_k : (i64)a.lists[(i64)e * a.rows + t];
}

// Loads a weight row of `bytes` (a multiple of 16, <= 32 * 16 * MOE_EX_VEC) into this
// lane's chunks lane, lane + 32, ... (zeros past the end or when !active).
__device__ __forceinline__ void moe_ex_row(const char* row, i64 bytes, bool active, uint4* r) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int q = 0; q < MOE_EX_VEC; ++q) {
        const i64 c = lane + 32 * q;
        r[q] = active && c * 16 < bytes ? *(const uint4*)(row + c * 16) : make_uint4(0, 0, 0, 0);
    }
}

// This lane's part of <w, x> over its chunks (x a row of `bytes` in memory).
template <int DT>
__device__ __forceinline__ float moe_ex_dot(const uint4* w, const char* x, i64 bytes) {
    const int lane = threadIdx.x & 31, V = IoVec<DT>::N;
    float acc = 0.0f;
#pragma unroll
    for (int q = 0; q < MOE_EX_VEC; ++q) {
        const i64 c = lane + 32 * q;
        if (c * 16 >= bytes) break;
        float wf[8], xf[8];
        io_cvt16<DT>(w[q], wf);
        io_cvt16<DT>(*(const uint4*)(x + c * 16), xf);
#pragma unroll
        for (int k = 0; k < V; ++k) acc += wf[k] * xf[k];
    }
    return acc;
}

// Block (tile of 8 units, slot block e): act[pair, i] = round(round(silu(g)) * u) for the
// expert's pairs, g and u its gate and up rows (in registers) against the pair's x row.
template <int DT> __device__ void moe_up_ex(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, es = DT == DT_F32 ? 4 : 2;
    const int e = blockIdx.y;
    const bool shared = e == a.experts;
    const i64 n_e = shared ? a.rows : a.counts[e];
    if (n_e == 0) return;
    const i64 ni = shared ? a.sinter : a.inter, rb = a.hidden * es;
    const i64 i = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const bool active = i < ni;
    const char* gate = shared ? (const char*)a.sg + i * rb
                              : (const char*)a.gate_up + ((i64)e * 2 * a.inter + i) * rb;
    const char* up = shared ? (const char*)a.su + i * rb : gate + a.inter * rb;
    uint4 g[MOE_EX_VEC], u[MOE_EX_VEC];
    moe_ex_row(gate, rb, active, g);
    moe_ex_row(up, rb, active, u);
    char* xs = (char*)moe_smem;  // [MOE_EX_TOK][rb]
    const i64 nv = rb / 16;
    for (i64 t0 = 0; t0 < n_e; t0 += MOE_EX_TOK) {
        const i64 nt = n_e - t0 < MOE_EX_TOK ? n_e - t0 : MOE_EX_TOK;
        __syncthreads();  // the previous step is done with xs
        for (i64 o = threadIdx.x; o < nt * nv; o += blockDim.x) {
            const i64 r = o / nv, c = o % nv;
            const i64 m = moe_pair(a, e, t0 + r) / (a.top_k + 1);
            *(uint4*)(xs + r * rb + c * 16) = *(const uint4*)((const char*)a.x + m * rb + c * 16);
        }
        __syncthreads();
        if (!active) continue;
        for (i64 r = 0; r < nt; ++r) {
            const float gs = io_rnd<DT>(warp_sum(moe_ex_dot<DT>(g, xs + r * rb, rb)));
            const float us = io_rnd<DT>(warp_sum(moe_ex_dot<DT>(u, xs + r * rb, rb)));
            if (lane == 0)
                io_st<DT>(a.act, moe_pair(a, e, t0 + r) * a.width + i,
                          io_rnd<DT>(io_rnd<DT>(e_silu(gs)) * us));
        }
    }
}
IO_KERNELS(moe_up_ex, MoeArgs, 256)

// Block (tile of 8 hidden units, slot block e): ys[pair, h] as moe_down computes it, the
// down row in registers against each pair's activation row (read through L1/L2).
template <int DT> __device__ void moe_down_ex(const MoeArgs& a) {
    const int lane = threadIdx.x & 31, es = DT == DT_F32 ? 4 : 2;
    const int e = blockIdx.y;
    const bool shared = e == a.experts;
    const i64 n_e = shared ? a.rows : a.counts[e];
    const i64 h = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n_e == 0 || h >= a.hidden) return;
    const i64 K = a.top_k, rb = (shared ? a.sinter : a.inter) * es;
    const char* row = shared ? (const char*)a.sd + h * rb
                             : (const char*)a.down + ((i64)e * a.hidden + h) * rb;
    uint4 d[MOE_EX_VEC];
    moe_ex_row(row, rb, true, d);
    for (i64 t = 0; t < n_e; ++t) {
        const i64 pair = moe_pair(a, e, t), m = pair / (K + 1), j = pair % (K + 1);
        const float y = io_rnd<DT>(warp_sum(moe_ex_dot<DT>(d, (const char*)a.act + pair * a.width * es, rb)));
        // Expert slots: round(round(dot) * w); the shared slot: round(gate * round(dot)).
        if (lane == 0)
            a.ys[pair * a.hidden + h] = shared ? io_rnd<DT>(a.sgate[m] * y) : io_rnd<DT>(y * a.wsel[m * K + j]);
    }
}
IO_KERNELS(moe_down_ex, MoeArgs, 256)
