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
// - attn_fwd_heads_*: many query rows (one split) and 2 to 8 query heads a KV head:
//   grid (B*T*Hkv), one warp per query head of the group, keys staged in shared memory,
//   see there.
// etch::gated_attention runs the same kernels with a gate: each output element, wherever
// it is stored, times the rounded sigmoid of the gate's (attn_store in attn.cuh).
// NaN scores make the row NaN, as on the CPU.

// ATTN_MAXD, ATTN_WARPS, attn_dims, attn_add, attn_max and attn_weight: attn.cuh.

struct AttnArgs {
    const void* q;   // [B, T, Hq, D]
    const void* k;   // [B, T, Hkv, D]
    const void* v;
    void* kc;        // [B, S, Hkv, D]
    void* vc;
    const i64* pos;  // [1]
    void* out;       // [B, T, Hq, D]
    const void* gate;  // [B, T, Hq, D] (etch::gated_attention: out times sigmoid(gate)) or null
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

template <int DT> __device__ void attn_fwd(const AttnArgs& a) {
    const i64 pos = *a.pos;
    if (!attn_pos_ok(a, pos)) return;
    const i64 row = blockIdx.x;
    const i64 h = row % a.hq, t = (row / a.hq) % a.seq, b = row / (a.hq * a.seq);
    const i64 k0 = blockIdx.y * a.chunk, n_keys = pos + t + 1;
    const i64 k1 = k0 + a.chunk < n_keys ? k0 + a.chunk : n_keys;
    if (k0 >= k1) return;
    const int lane = threadIdx.x & 31;
    const int per = (int)((a.dim + 31) / 32);
    const i64 kvh = h / (a.hq / a.hkv);
    float qx[8], acc[8];
    attn_dims<DT>(a.q, row * a.dim, lane, per, a.dim, qx);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    AttnState st = {-1.0f / 0.0f, 0.0f};
    const AttnKeys kk = {a.kc, a.vc, 0, (b * a.cache * a.hkv + kvh) * a.dim, a.hkv * a.dim, 0};
    attn_keys<DT>(kk, qx, k0, k1, a.scale, per, a.dim, st, acc);
    float* part = a.splits == 1 ? 0 : a.part + (row * a.splits + blockIdx.y) * (a.dim + 2);
    attn_block_finish<DT>(st, acc, per, a.dim, a.out, row, part, a.gate);
}
IO_KERNELS(attn_fwd, AttnArgs, 256)

// Many query rows (prefill, one key split): block (b, t, KV head g) with one warp per query
// head of the group, each attending its row to all keys 0..=pos+t. The block stages the
// keys in tiles of ATTN_TILE_BYTES of K and of V in shared memory (each row read once from
// L2 by the block, coalesced), and every warp reads its dims from there, in key order as
// attn_keys_warp takes them: one block per query row reading every K/V row from L2 bounded
// attn_fwd (8.6 GB of L2 reads for a 1024-token prefill of 16 heads over 2 KV heads).
#define ATTN_TILE_BYTES 16384

// Copies keys k0..k0+cnt of (batch item, KV head) into the tiles (rows of D elements).
template <int DT>
__device__ void attn_stage(const AttnArgs& a, i64 base0, i64 k0, i64 cnt, char* ks, char* vs) {
    const int es = DT == DT_F32 ? 4 : 2;
    const i64 rb = a.dim * es, stride = a.hkv * a.dim;
    const char *kc = (const char*)a.kc, *vc = (const char*)a.vc;
    if (rb % 16 == 0 && (stride * es) % 16 == 0 && aligned16(kc + base0 * es) &&
        aligned16(vc + base0 * es)) {
        const i64 per_row = rb / 16;
        for (i64 i = threadIdx.x; i < cnt * per_row; i += blockDim.x) {
            const i64 r = i / per_row, c = i % per_row;
            const i64 src = (base0 + (k0 + r) * stride) * es + c * 16;
            *(uint4*)(ks + r * rb + c * 16) = *(const uint4*)(kc + src);
            *(uint4*)(vs + r * rb + c * 16) = *(const uint4*)(vc + src);
        }
        return;
    }
    for (i64 i = threadIdx.x; i < cnt * a.dim; i += blockDim.x) {
        const i64 r = i / a.dim, d = i % a.dim;
        const i64 src = base0 + (k0 + r) * stride + d;
        if (es == 4) {
            ((float*)ks)[i] = ((const float*)kc)[src];
            ((float*)vs)[i] = ((const float*)vc)[src];
        } else {
            ((u16*)ks)[i] = ((const u16*)kc)[src];
            ((u16*)vs)[i] = ((const u16*)vc)[src];
        }
    }
}

template <int DT> __device__ void attn_fwd_heads(const AttnArgs& a) {
    __shared__ __align__(16) char ks[ATTN_TILE_BYTES];
    __shared__ __align__(16) char vs[ATTN_TILE_BYTES];
    const i64 pos = *a.pos;
    if (!attn_pos_ok(a, pos)) return;
    const i64 gs = a.hq / a.hkv, g = blockIdx.x % a.hkv;
    const i64 t = (blockIdx.x / a.hkv) % a.seq, b = blockIdx.x / (a.hkv * a.seq);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const i64 row = (b * a.seq + t) * a.hq + g * gs + w;
    const int per = (int)((a.dim + 31) / 32);
    float qx[8], acc[8];
    attn_dims<DT>(a.q, row * a.dim, lane, per, a.dim, qx);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    AttnState st = {-1.0f / 0.0f, 0.0f};
    const i64 base0 = (b * a.cache * a.hkv + g) * a.dim, n = pos + t + 1;
    const i64 tk = ATTN_TILE_BYTES / (a.dim * (DT == DT_F32 ? 4 : 2));
    // Tile rows j at element j * D of ks / vs.
    const AttnKeys kk = {ks, vs, 0, 0, a.dim, 0};
    for (i64 k0 = 0; k0 < n; k0 += tk) {
        const i64 cnt = n - k0 < tk ? n - k0 : tk;
        __syncthreads();  // every warp is done with the previous tile
        attn_stage<DT>(a, base0, k0, cnt, ks, vs);
        __syncthreads();
        attn_keys_warp<DT>(kk, qx, 0, cnt, a.scale, per, a.dim, st, acc, 0, 1);
    }
    // One warp's state: the normalised row, rounded once (st.l > 0: key 0 is always seen).
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        const i64 d = (i64)lane * per + e;
        if (e < per && d < a.dim) attn_store<DT>(a.out, row * a.dim + d, acc[e] * (1.0f / st.l), a.gate);
    }
}
IO_KERNELS(attn_fwd_heads, AttnArgs, 256)

// Merges the partials of query row blockIdx.x over the splits that hold keys.
template <int DT> __device__ void attn_combine(const AttnArgs& a) {
    const i64 pos = *a.pos;
    if (!attn_pos_ok(a, pos)) return;
    const i64 row = blockIdx.x;
    const i64 t = (row / a.hq) % a.seq;
    const i64 used = (pos + t + 1 + a.chunk - 1) / a.chunk;
    attn_merge<DT>(a.part + row * a.splits * (a.dim + 2), used, a.dim, a.out, row, a.gate);
}
IO_KERNELS(attn_combine, AttnArgs, 256)
