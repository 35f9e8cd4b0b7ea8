// etch::attention (etch_kernels::etch_ops::attention has the CPU kernel): the position is
// read on the device; when pos < 0 or pos + T > S, attn_cache_write sets the error word
// and no kernel writes anything.
// - attn_cache_write: grid-stride copy of k and v into the caches at rows pos..pos+T.
// - attn_fwd_*: grid (query rows B*T*Hq, key splits), 8 warps a block: the block attends
//   query row (b, t, h) to its split's keys among 0..=pos+t (KV head h / (Hq/Hkv)). Each
//   warp takes every 8th key, two at a time: a warp-wide dot product (lane l holds dims l*per..l*per+per,
//   per = ceil(D/32) <= 8, one 16-byte load when the row allows), an online softmax in
//   float and the weighted sum of v rows; the warps' states merge in shared memory. With
//   one split the block writes the output row; with several (flash-decoding, chosen by
//   the host for few rows) it writes (max, sum, acc[D]) partials and attn_combine_*
//   merges them.
// NaN scores make the row NaN, as on the CPU.

#define ATTN_MAXD 256
#define ATTN_WARPS 8

struct AttnArgs {
    const void* q;   // [B, T, Hq, D]
    const void* k;   // [B, T, Hkv, D]
    const void* v;
    void* kc;        // [B, S, Hkv, D]
    void* vc;
    const i64* pos;  // [1]
    void* out;       // [B, T, Hq, D]
    float* part;     // [rows, splits, D + 2] partials (splits > 1)
    int* err;
    i64 batch, seq, hq, hkv, dim, cache;  // B, T, Hq, Hkv, D, S
    i64 splits, chunk;                    // key splits and keys per split
    float scale;
    int es;                               // element size
};

__device__ __forceinline__ bool attn_pos_ok(const AttnArgs& a, i64 pos) {
    return pos >= 0 && pos < a.cache && a.seq <= a.cache - pos;
}

extern "C" __global__ void attn_cache_write(AttnArgs a) { PDL_ENTRY();
    const i64 pos = *a.pos;
    if (!attn_pos_ok(a, pos)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) set_error(a.err, 2);
        return;
    }
    const i64 row = a.hkv * a.dim;  // elements per token
    GRID_LOOP(i, a.batch * a.seq * row) {
        const i64 b = i / (a.seq * row);
        const i64 dst = (b * a.cache + pos) * row + i % (a.seq * row);
        if (a.es == 2) {
            ((u16*)a.kc)[dst] = ((const u16*)a.k)[i];
            ((u16*)a.vc)[dst] = ((const u16*)a.v)[i];
        } else {
            ((float*)a.kc)[dst] = ((const float*)a.k)[i];
            ((float*)a.vc)[dst] = ((const float*)a.v)[i];
        }
    }
}

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

template <int DT> __device__ void attn_fwd(const AttnArgs& a) {
    __shared__ float wm[ATTN_WARPS], wl[ATTN_WARPS];
    __shared__ float wacc[ATTN_WARPS][ATTN_MAXD];
    const i64 pos = *a.pos;
    if (!attn_pos_ok(a, pos)) return;
    const i64 row = blockIdx.x;
    const i64 h = row % a.hq, t = (row / a.hq) % a.seq, b = row / (a.hq * a.seq);
    const i64 k0 = blockIdx.y * a.chunk, n_keys = pos + t + 1;
    const i64 k1 = k0 + a.chunk < n_keys ? k0 + a.chunk : n_keys;
    if (k0 >= k1) return;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = (int)((a.dim + 31) / 32);
    const i64 kvh = h / (a.hq / a.hkv);
    float qx[8], acc[8], x[8];
    attn_dims<DT>(a.q, row * a.dim, lane, per, a.dim, qx);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    AttnState st = {-1.0f / 0.0f, 0.0f};
    // Two keys per step (j and j + nw, the order one key per step would take): both k and
    // v rows are loaded before the reductions, so four row loads are in flight per lane.
    float x2[8], y[8], y2[8];
    for (i64 j = k0 + w; j < k1; j += 2 * nw) {
        const bool two = j + nw < k1;
        const i64 base = ((b * a.cache + j) * a.hkv + kvh) * a.dim;
        const i64 base2 = base + nw * a.hkv * a.dim;
        attn_dims<DT>(a.kc, base, lane, per, a.dim, x);
        attn_dims<DT>(a.vc, base, lane, per, a.dim, y);
        if (two) {
            attn_dims<DT>(a.kc, base2, lane, per, a.dim, x2);
            attn_dims<DT>(a.vc, base2, lane, per, a.dim, y2);
        }
        float s = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            s += qx[e] * x[e];
            s2 += two ? qx[e] * x2[e] : 0.0f;
        }
        s = warp_sum(s) * a.scale;
        s2 = warp_sum(s2) * a.scale;
        attn_add(st, acc, s, y, per);
        if (two) attn_add(st, acc, s2, y2, per);
    }
    if (lane == 0) {
        wm[w] = st.m;
        wl[w] = st.l;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (e < per && lane * per + e < a.dim) wacc[w][lane * per + e] = acc[e];
    __syncthreads();
    float M = -1.0f / 0.0f;
    for (int x2 = 0; x2 < nw; ++x2) M = attn_max(M, wm[x2]);
    float L = 0.0f;
    for (int x2 = 0; x2 < nw; ++x2) L += wl[x2] * attn_weight(wm[x2], M);
    const bool one = a.splits == 1;
    float* part = one ? 0 : a.part + (row * a.splits + blockIdx.y) * (a.dim + 2);
    if (!one && threadIdx.x == 0) {
        part[0] = M;
        part[1] = L;
    }
    for (i64 d = threadIdx.x; d < a.dim; d += blockDim.x) {
        float A = 0.0f;
        for (int x2 = 0; x2 < nw; ++x2) A += wacc[x2][d] * attn_weight(wm[x2], M);
        if (one) io_st<DT>(a.out, row * a.dim + d, A * (1.0f / L));
        else part[2 + d] = A;
    }
}
IO_KERNELS(attn_fwd, AttnArgs, 256)

// Merges the partials of query row blockIdx.x over the splits that hold keys.
template <int DT> __device__ void attn_combine(const AttnArgs& a) {
    const i64 pos = *a.pos;
    if (!attn_pos_ok(a, pos)) return;
    const i64 row = blockIdx.x;
    const i64 t = (row / a.hq) % a.seq;
    const i64 used = (pos + t + 1 + a.chunk - 1) / a.chunk;
    const float* part = a.part + row * a.splits * (a.dim + 2);
    float M = -1.0f / 0.0f;
    for (i64 c = 0; c < used; ++c) M = attn_max(M, part[c * (a.dim + 2)]);
    float L = 0.0f;
    for (i64 c = 0; c < used; ++c) {
        const float* pc = part + c * (a.dim + 2);
        L += pc[1] * attn_weight(pc[0], M);
    }
    for (i64 d = threadIdx.x; d < a.dim; d += blockDim.x) {
        float A = 0.0f;
        for (i64 c = 0; c < used; ++c) {
            const float* pc = part + c * (a.dim + 2);
            A += pc[2 + d] * attn_weight(pc[0], M);
        }
        io_st<DT>(a.out, row * a.dim + d, A * (1.0f / L));
    }
}
IO_KERNELS(attn_combine, AttnArgs, 256)
