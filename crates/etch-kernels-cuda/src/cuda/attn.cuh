// Shared by the attention kernels (attention.cu: etch::attention; llama.cu: llama::
// custom_sdpa, sdpa_with_kv_cache, custom_quantized_sdpa): a lane's slice of a head row,
// the online-softmax state and the merge weights of partial states. A warp handles one
// key at a time: lane l holds dims l*per..l*per+per (per = ceil(D/32) <= 8).

#define ATTN_MAXD 256
#define ATTN_WARPS 8

// Lane `lane`'s dims of row `base` (elements) of an IO-dtype tensor into x (zero past D).
template <int DT>
__device__ __forceinline__ void attn_dims(const void* p, i64 base, int lane, int per, i64 d,
                                          float* x) {
    const i64 d0 = (i64)lane * per;
    const char* src = (const char*)p + (base + d0) * (DT == DT_F32 ? 4 : 2);
    if (per == IoVec<DT>::N && d0 + per <= d && aligned16(src)) {
        io_ld16<DT>(src, x);
#pragma unroll
        for (int e = IoVec<DT>::N; e < 8; ++e) x[e] = 0.0f;
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = (e < per && d0 + e < d) ? io_ld<DT>(p, base + d0 + e) : 0.0f;
}

// One online-softmax state: running max, sum of exponentials and weighted sum.
struct AttnState {
    float m, l;
};

// Adds score s with value dims vx to (st, acc): NaN sticks, all -inf so far adds nothing.
__device__ __forceinline__ void attn_add(AttnState& st, float* acc, float s, const float* vx, int per) {
    const float mn = (s > st.m || s != s) ? s : st.m;
    const bool none = mn == -1.0f / 0.0f;
    const float c = none ? 1.0f : expf(st.m - mn);
    const float p = none ? 0.0f : expf(s - mn);
    st.l = st.l * c + p;
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (e < per) acc[e] = acc[e] * c + p * vx[e];
    st.m = mn;
}

// The merge of states m_x (weights e^(m_x - M)): M over them (NaN sticks).
__device__ __forceinline__ float attn_max(float M, float m) { return (m > M || m != m) ? m : M; }
__device__ __forceinline__ float attn_weight(float m, float M) {
    return m == -1.0f / 0.0f ? 0.0f : expf(m - M);
}


// Where a block's keys are: rows j of the caches kc / vc start at element base0 + j * stride
// (the batch item's KV head); mask, when not null, holds one IO-dtype value per key
// (element mask_base + j) added to the scaled score.
struct AttnKeys {
    const void* kc;
    const void* vc;
    const void* mask;
    i64 base0, stride, mask_base;
};

// Attends this lane's query dims qx to keys k0..k1: warp w of nw takes keys k0 + w,
// k0 + w + nw, ..., two at a time (j and j + nw, the order one key per step would take) so
// that both k and v rows are loaded before the reductions (four row loads in flight per
// lane), and adds them to the warp's online-softmax state (st, acc). attn_keys: the
// block's warps share the keys; attn_keys_warp: w and nw given (0 and 1: all of them).
template <int DT>
__device__ void attn_keys_warp(const AttnKeys& kk, const float* qx, i64 k0, i64 k1, float scale,
                               int per, i64 dim, AttnState& st, float* acc, int w, int nw) {
    const int lane = threadIdx.x & 31;
    float x[8], x2[8], y[8], y2[8];
    for (i64 j = k0 + w; j < k1; j += 2 * nw) {
        const bool two = j + nw < k1;
        const i64 base = kk.base0 + j * kk.stride;
        const i64 base2 = base + nw * kk.stride;
        attn_dims<DT>(kk.kc, base, lane, per, dim, x);
        attn_dims<DT>(kk.vc, base, lane, per, dim, y);
        if (two) {
            attn_dims<DT>(kk.kc, base2, lane, per, dim, x2);
            attn_dims<DT>(kk.vc, base2, lane, per, dim, y2);
        }
        float s = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            s += qx[e] * x[e];
            s2 += two ? qx[e] * x2[e] : 0.0f;
        }
        s = warp_sum(s) * scale;
        s2 = warp_sum(s2) * scale;
        if (kk.mask) {
            s += io_ld<DT>(kk.mask, kk.mask_base + j);
            if (two) s2 += io_ld<DT>(kk.mask, kk.mask_base + j + nw);
        }
        attn_add(st, acc, s, y, per);
        if (two) attn_add(st, acc, s2, y2, per);
    }
}

template <int DT>
__device__ __forceinline__ void attn_keys(const AttnKeys& kk, const float* qx, i64 k0, i64 k1,
                                          float scale, int per, i64 dim, AttnState& st,
                                          float* acc) {
    attn_keys_warp<DT>(kk, qx, k0, k1, scale, per, dim, st, acc, threadIdx.x >> 5, blockDim.x >> 5);
}

// Stores query-row element i of out from its float value o, rounded to the IO dtype; with a
// gate (etch::gated_attention, shaped like out) times the rounded sigmoid of gate[i], the
// product rounded: what the attention, aten::sigmoid and aten::mul compute one after another.
template <int DT>
__device__ __forceinline__ void attn_store(void* out, i64 i, float o, const void* gate) {
    if (gate) o = __fmul_rn(io_rnd<DT>(o), io_rnd<DT>(e_sigmoid(io_ld<DT>(gate, i))));
    io_st<DT>(out, i, o);
}

// Merges the block's warp states (each warp's (st, acc), lane l holding dims l*per..) and
// writes either query row `orow` of `out` (part null: the normalised row, rounded to the IO
// dtype once) or the block's partial part = (max, sum, acc[D]) for attn_merge.
template <int DT>
__device__ void attn_block_finish(const AttnState& st, const float* acc, int per, i64 dim,
                                  void* out, i64 orow, float* part, const void* gate) {
    __shared__ float wm[ATTN_WARPS], wl[ATTN_WARPS];
    __shared__ float wacc[ATTN_WARPS][ATTN_MAXD];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        wm[w] = st.m;
        wl[w] = st.l;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (e < per && lane * per + e < dim) wacc[w][lane * per + e] = acc[e];
    __syncthreads();
    float M = -1.0f / 0.0f;
    for (int x2 = 0; x2 < nw; ++x2) M = attn_max(M, wm[x2]);
    float L = 0.0f;
    for (int x2 = 0; x2 < nw; ++x2) L += wl[x2] * attn_weight(wm[x2], M);
    if (part && threadIdx.x == 0) {
        part[0] = M;
        part[1] = L;
    }
    for (i64 d = threadIdx.x; d < dim; d += blockDim.x) {
        float A = 0.0f;
        for (int x2 = 0; x2 < nw; ++x2) A += wacc[x2][d] * attn_weight(wm[x2], M);
        if (part) part[2 + d] = A;
        else attn_store<DT>(out, orow * dim + d, A * (1.0f / L), gate);
    }
}

// Merges the partials part[c] (c < used, each (max, sum, acc[D])) of query row `orow` and
// writes it to `out`, rounded to the IO dtype once.
template <int DT>
__device__ void attn_merge(const float* part, i64 used, i64 dim, void* out, i64 orow,
                           const void* gate) {
    float M = -1.0f / 0.0f;
    for (i64 c = 0; c < used; ++c) M = attn_max(M, part[c * (dim + 2)]);
    float L = 0.0f;
    for (i64 c = 0; c < used; ++c) {
        const float* pc = part + c * (dim + 2);
        L += pc[1] * attn_weight(pc[0], M);
    }
    for (i64 d = threadIdx.x; d < dim; d += blockDim.x) {
        float A = 0.0f;
        for (i64 c = 0; c < used; ++c) {
            const float* pc = part + c * (dim + 2);
            A += pc[2 + d] * attn_weight(pc[0], M);
        }
        attn_store<DT>(out, orow * dim + d, A * (1.0f / L), gate);
    }
}
