// llama:: custom ops of ExecuTorch's LLM programs (etch_kernels::llama has the CPU kernels
// and the argument checks, shared with src/llama.rs).
//
// The start position is either an immediate (pos null: pos_val, already checked by the host)
// or read on the device from a one-element int64 tensor: `etch lower` passes the element of
// input_pos instead of the Int that `_local_scalar_dense` would read on the host, so that no
// kernel waits for the host and a recorded CUDA graph replays at every decode position. A
// position read on the device that does not fit the cache (pos < 0 or pos + S > L) sets the
// device error word (code 2) and nothing is written: the caches keep their rows and the
// output is left as it was; the delegate reports the error after the call.
//
// - llama_cache_write: update_cache (any dtype: rows of `row` bytes copied `unit` bytes at
//   a time) and, with idx, update_cache_with_indices (an index outside the cache sets the
//   error word and its row is skipped; the other rows are written).
// - llama_sdpa_*: custom_sdpa (and the attention of sdpa_with_kv_cache) over the caches, as
//   etch::attention: grid (query rows B*S*H, key splits), 8 warps a block over attn.cuh's
//   key loop, the warps' states merged in shared memory; query row (b, t, h) attends to
//   keys 0..n of KV head h / (H/Hkv), n = min(pos + t + 1, kv) when causal, else kv, where
//   kv = L with a mask (added to the scaled scores, row t of [S, L]) and pos + S without.
// - llama_qsdpa: custom_quantized_sdpa: int8 query and caches with one int8 zero point and
//   f32 scale per head row; scores (q - zq)·(k - zk) exact in int32, times the scales and
//   `scale`, an f32 mask if any; values (v - zv) * sv; f32 output.
// - llama_combine_*: merges the key splits' partials of each query row (splits > 1, which
//   the host picks from the shapes alone, for few query rows).
// NaN scores make the row NaN, as on the CPU.

struct LlamaWrite {
    const void* src;  // [B, S] rows of `row` bytes
    void* dst;        // [B, L] rows of `row` bytes
    const i64* pos;   // [1], or null: pos_val
    const i64* idx;   // [B, S] cache rows (update_cache_with_indices), or null
    int* err;
    i64 pos_val;
    i64 batch, seq, cache, row;  // B, S, L, bytes per position
    int unit;                    // 16, 8, 4, 2 or 1 (divides row; both bases aligned to it)
    int pad;
};

extern "C" __global__ void llama_cache_write(LlamaWrite a) {
    PDL_ENTRY();
    i64 pos = 0;
    if (!a.idx) {
        pos = a.pos ? *a.pos : a.pos_val;
        if (pos < 0 || pos >= a.cache || a.seq > a.cache - pos) {
            if (blockIdx.x == 0 && threadIdx.x == 0) set_error(a.err, 2);
            return;
        }
    }
    const i64 units = a.row / a.unit;
    GRID_LOOP(i, a.batch * a.seq * units) {
        const i64 r = i / units, u = i % units;  // source row (b, s), unit in it
        const i64 b = r / a.seq;
        i64 p = pos + r % a.seq;
        if (a.idx) {
            p = a.idx[r];
            if (p < 0 || p >= a.cache) {
                set_error(a.err, 2);
                continue;
            }
        }
        const char* s = (const char*)a.src + r * a.row + u * a.unit;
        char* d = (char*)a.dst + (b * a.cache + p) * a.row + u * a.unit;
        switch (a.unit) {
            case 16: *(uint4*)d = *(const uint4*)s; break;
            case 8: *(u64*)d = *(const u64*)s; break;
            case 4: *(unsigned*)d = *(const unsigned*)s; break;
            case 2: *(u16*)d = *(const u16*)s; break;
            default: *d = *s; break;
        }
    }
}

struct LlamaAttn {
    const void* q;     // [B, S, H, D] (IO dtype; int8 for llama_qsdpa)
    const void* kc;    // [B, L, Hkv, D]
    const void* vc;
    const void* mask;  // [S, L] added to the scaled scores (IO dtype; f32 for qsdpa), or null
    const i64* pos;    // [1], or null: pos_val
    void* out;         // [B, S, H, D] (IO dtype; f32 for qsdpa)
    float* part;       // [rows, splits, D + 2] partials (splits > 1)
    int* err;
    // llama_qsdpa: one int8 zero point and f32 scale per head row ([B, S, H] for q,
    // [B, L, Hkv] for the caches).
    const signed char* qz;
    const float* qs;
    const signed char* kz;
    const float* ks;
    const signed char* vz;
    const float* vs;
    i64 pos_val;
    i64 batch, seq, heads, kv_heads, dim, cache;  // B, S, H, Hkv, D, L
    i64 splits, chunk;                            // key splits and keys per split
    float scale;
    int causal;
};

__device__ __forceinline__ i64 llama_pos(const LlamaAttn& a) { return a.pos ? *a.pos : a.pos_val; }

// The position fits the cache; when it does not, the first block records it.
__device__ __forceinline__ bool llama_pos_ok(const LlamaAttn& a, i64 pos) {
    if (pos >= 0 && pos < a.cache && a.seq <= a.cache - pos) return true;
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) set_error(a.err, 2);
    return false;
}

// Keys query row t attends to.
__device__ __forceinline__ i64 llama_keys(const LlamaAttn& a, i64 pos, i64 t) {
    const i64 kv = a.mask ? a.cache : pos + a.seq;
    if (!a.causal) return kv;
    return pos + t + 1 < kv ? pos + t + 1 : kv;
}

template <int DT> __device__ void llama_sdpa(const LlamaAttn& a) {
    const i64 pos = llama_pos(a);
    if (!llama_pos_ok(a, pos)) return;
    const i64 row = blockIdx.x;
    const i64 h = row % a.heads, t = (row / a.heads) % a.seq, b = row / (a.heads * a.seq);
    const i64 k0 = blockIdx.y * a.chunk, n_keys = llama_keys(a, pos, t);
    const i64 k1 = k0 + a.chunk < n_keys ? k0 + a.chunk : n_keys;
    if (k0 >= k1) return;
    const int lane = threadIdx.x & 31;
    const int per = (int)((a.dim + 31) / 32);
    const i64 kvh = h / (a.heads / a.kv_heads);
    float qx[8], acc[8];
    attn_dims<DT>(a.q, row * a.dim, lane, per, a.dim, qx);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    AttnState st = {-1.0f / 0.0f, 0.0f};
    const AttnKeys kk = {a.kc, a.vc, a.mask, (b * a.cache * a.kv_heads + kvh) * a.dim,
                         a.kv_heads * a.dim, t * a.cache};
    attn_keys<DT>(kk, qx, k0, k1, a.scale, per, a.dim, st, acc);
    float* part = a.splits == 1 ? 0 : a.part + (row * a.splits + blockIdx.y) * (a.dim + 2);
    attn_block_finish<DT>(st, acc, per, a.dim, a.out, row, part, nullptr);
}
IO_KERNELS(llama_sdpa, LlamaAttn, 256)

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// This lane's dims of int8 row `r` (D values) into x (0 past D), each minus zero point z.
__device__ __forceinline__ void llama_i8_dims(const signed char* p, i64 r, int lane, int per,
                                              i64 d, int z, int* x) {
    const i64 d0 = (i64)lane * per;
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = (e < per && d0 + e < d) ? (int)p[r * d + d0 + e] - z : 0;
}

extern "C" __global__ void __launch_bounds__(256) llama_qsdpa(LlamaAttn a) {
    PDL_ENTRY();
    const i64 pos = llama_pos(a);
    if (!llama_pos_ok(a, pos)) return;
    const i64 row = blockIdx.x;
    const i64 h = row % a.heads, t = (row / a.heads) % a.seq, b = row / (a.heads * a.seq);
    const i64 k0 = blockIdx.y * a.chunk, n_keys = llama_keys(a, pos, t);
    const i64 k1 = k0 + a.chunk < n_keys ? k0 + a.chunk : n_keys;
    if (k0 >= k1) return;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = (int)((a.dim + 31) / 32);
    const i64 kvh = h / (a.heads / a.kv_heads);
    const signed char* q = (const signed char*)a.q;
    const signed char* kc = (const signed char*)a.kc;
    const signed char* vc = (const signed char*)a.vc;
    int qx[8], kx[8], vx[8];
    llama_i8_dims(q, row, lane, per, a.dim, a.qz[row], qx);
    const float qscale = a.qs[row];
    float acc[8], y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    AttnState st = {-1.0f / 0.0f, 0.0f};
    for (i64 j = k0 + w; j < k1; j += nw) {
        const i64 r = (b * a.cache + j) * a.kv_heads + kvh;  // cache row (and its parameters)
        llama_i8_dims(kc, r, lane, per, a.dim, a.kz[r], kx);
        llama_i8_dims(vc, r, lane, per, a.dim, a.vz[r], vx);
        int dot = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += qx[e] * kx[e];
        // As the CPU: the int32 sum as f32, times the q and k scales, then `scale`.
        float s = (float)warp_sum_int(dot) * qscale * a.ks[r] * a.scale;
        if (a.mask) s += ((const float*)a.mask)[t * a.cache + j];
        const float vscale = a.vs[r];
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = (float)vx[e] * vscale;
        attn_add(st, acc, s, y, per);
    }
    float* part = a.splits == 1 ? 0 : a.part + (row * a.splits + blockIdx.y) * (a.dim + 2);
    attn_block_finish<DT_F32>(st, acc, per, a.dim, a.out, row, part, nullptr);
}

// Merges the partials of query row blockIdx.x over the splits that hold keys.
template <int DT> __device__ void llama_combine(const LlamaAttn& a) {
    const i64 pos = llama_pos(a);
    if (pos < 0 || pos >= a.cache || a.seq > a.cache - pos) return;
    const i64 row = blockIdx.x;
    const i64 t = (row / a.heads) % a.seq;
    const i64 used = (llama_keys(a, pos, t) + a.chunk - 1) / a.chunk;
    attn_merge<DT>(a.part + row * a.splits * (a.dim + 2), used, a.dim, a.out, row, nullptr);
}
IO_KERNELS(llama_combine, LlamaAttn, 256)

// llama_gdr: gated_delta_rule (float32; etch_kernels::llama_gdr has the math and the CPU
// kernel): one thread per (batch item, state head, value column j), the state's column j
// kept in final_state (copied from initial_state first), tokens in order. Per token:
// S[:, j] *= decay (per key channel or one per token); v_pred = sum_i S[i, j] k_i; d =
// (v_j - v_pred) beta; S[:, j] += k d; then each of the state head's query heads reads
// out = sum_i S[i, j] q_i. Sums over K in order, as on the CPU.
struct LlamaGdr {
    const float* q;      // [B, Hq, T, K]
    const float* k;      // [B, Hs, T, K]
    const float* v;      // [B, Hs, T, V]
    const float* decay;  // [B, Hs, T] or [B, Hs, T, K]
    const float* beta;   // [B, Hs, T]
    const float* init;   // [B, Hs, K, V]
    float* out;          // [B, Hq, T, V]
    float* fin;          // [B, Hs, K, V]
    i64 batch, heads, sheads, seq, kd, vd;
    int channelwise;
    int pad;
};

extern "C" __global__ void __launch_bounds__(128) llama_gdr(LlamaGdr a) {
    PDL_ENTRY();
    const i64 j = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    const i64 s = blockIdx.y, b = blockIdx.z;
    if (j >= a.vd) return;
    const i64 K = a.kd, V = a.vd, T = a.seq, G = a.heads / a.sheads;
    const i64 bs = b * a.sheads + s;
    float* S = a.fin + bs * K * V;
    const float* S0 = a.init + bs * K * V;
    for (i64 i = 0; i < K; ++i) S[i * V + j] = S0[i * V + j];
    for (i64 t = 0; t < T; ++t) {
        const i64 tok = bs * T + t;
        const float* kt = a.k + tok * K;
        float vp = 0.0f;
        for (i64 i = 0; i < K; ++i) {
            const float g = a.channelwise ? a.decay[tok * K + i] : a.decay[tok];
            const float x = S[i * V + j] * g;
            S[i * V + j] = x;
            vp += x * kt[i];
        }
        const float d = (a.v[tok * V + j] - vp) * a.beta[tok];
        for (i64 i = 0; i < K; ++i) S[i * V + j] += kt[i] * d;
        for (i64 g = 0; g < G; ++g) {
            const i64 row = (b * a.heads + s * G + g) * T + t;
            const float* qt = a.q + row * K;
            float o = 0.0f;
            for (i64 i = 0; i < K; ++i) o += S[i * V + j] * qt[i];
            a.out[row * V + j] = o;
        }
    }
}
