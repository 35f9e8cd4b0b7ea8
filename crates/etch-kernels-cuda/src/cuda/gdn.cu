// etch::gated_delta_net (etch_kernels::etch_ops::gdn has the math and the CPU kernel).
// Calls of ETCH_GDN_CHUNK_FROM tokens and more (default 64) with
// head_k_dim and head_v_dim <= 128 take the chunked delta rule of gdn_chunk.cu (compiled
// after this file: prep, W/U, state and output kernels per pass of up to 1024 tokens, then
// gdn_conv_state). Other calls (decode) take two kernels on one stream:
// - gdn_recur_*: one block per (batch item, value head, tile of 32 value columns); warp w,
//   lane l owns state rows w, w+G, ..., w+(GDN_R-1)G of column tile*32+l in registers (G
//   warps, G = ceil(Dk / GDN_R) <= GDN_WARPS, so Dk <= 256). The columns of S are
//   independent in the delta rule, so tiles need no communication. Tokens run in order:
//   per token (4 block barriers; a prefill of T tokens is T sequential steps, hence the
//   chunked path above) the block computes the causal conv + SiLU of its q and k channels
//   (key head h / (Hv/Hk)) and v column into shared memory (reading [conv_state |
//   mixed_qkv], state as zero when input_pos is 0), L2-normalises q and k, then per
//   column: S *= exp(g); kv = S^T k; d = beta (v - kv); S += k d^T; o = S^T q, the sums
//   over Dk split over the warps and added in shared memory.
// - the conv_state shift (the last K-1 conv inputs) at the end of gdn_recur: each block its
//   v channels, and the last block of a key head (an atomic counter) its q and k channels;
//   or, past GDN_COUNTERS (batch x key heads) or with ETCH_GDN_FUSE=0, gdn_conv_state_*, one
//   thread per (batch item, channel), after the recurrence has read the old state.

#define GDN_R 16                // state rows per thread
#define GDN_WARPS 16            // at most (512 threads)
#define GDN_MAXDK (GDN_WARPS * GDN_R)

struct GdnArgs {
    const void* qkv;      // [B, T, C]
    const void* a;        // [B, T, Hv]
    const void* b;        // [B, T, Hv]
    const void* conv_w;   // [C, 1, K]
    const void* a_log;    // [Hv]
    const void* dt_bias;  // [Hv]
    void* conv_state;     // [B, C, K-1]
    float* state;         // [B, Hv, Dk, Dv]
    const i64* pos;       // [1]
    void* out;            // [B, T, Hv, Dv]
    i64 batch, seq, ch, taps, hk, dk, hv, dv;
    float scale;          // Dk^-0.5
    int fuse_shift;       // gdn_recur shifts conv_state itself (gdn_done counters)
};

// Blocks done per (batch item, key head) when gdn_recur shifts conv_state (see there).
#define GDN_COUNTERS 4096
__device__ unsigned gdn_done[GDN_COUNTERS];

// Element i of the conv input [conv_state | mixed_qkv] of (batch b, channel c): the state
// for i < K-1 (zero when fresh), else token i-(K-1).
template <int DT>
__device__ __forceinline__ float gdn_x(const GdnArgs& g, i64 b, i64 c, i64 i, bool fresh) {
    const i64 keep = g.taps - 1;
    if (i < keep) {
        // Loaded before `fresh` is known (input_pos is read at the same time), then dropped.
        const float v = io_ld<DT>(g.conv_state, (b * g.ch + c) * keep + i);
        return fresh ? 0.0f : v;
    }
    return io_ld<DT>(g.qkv, (b * g.seq + (i - keep)) * g.ch + c);
}

// SiLU of the causal conv of channel c at token t, rounded to the IO dtype.
template <int DT>
__device__ float gdn_conv(const GdnArgs& g, i64 b, i64 c, i64 t, bool fresh) {
    float acc = 0.0f;
    for (i64 j = 0; j < g.taps; ++j)
        acc += io_ld<DT>(g.conv_w, c * g.taps + j) * gdn_x<DT>(g, b, c, t + j, fresh);
    return io_rnd<DT>(e_silu(acc));
}

// log(1 + e^x), linear above 20 (PyTorch's threshold).
__device__ __forceinline__ float gdn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// q and k of token t (conv, SiLU, rounded) into qs and ks, then their L2 scales into nrm.
template <int DT>
__device__ void gdn_qk(const GdnArgs& g, i64 b, i64 kh, i64 t, bool fresh, float* qs,
                       float* ks, float* nrm) {
    for (i64 i = threadIdx.x; i < 2 * g.dk; i += blockDim.x) {
        const bool isq = i < g.dk;
        const i64 c = isq ? kh * g.dk + i : (g.hk + kh) * g.dk + (i - g.dk);
        const float y = gdn_conv<DT>(g, b, c, t, fresh);
        if (isq) qs[i] = y;
        else ks[i - g.dk] = y;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        float sq = 0.0f, sk = 0.0f;
        for (i64 i = threadIdx.x; i < g.dk; i += 32) {
            sq += qs[i] * qs[i];
            sk += ks[i] * ks[i];
        }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        if (threadIdx.x == 0) {
            nrm[0] = g.scale / sqrtf(sq + 1e-6f);
            nrm[1] = 1.0f / sqrtf(sk + 1e-6f);
        }
    }
    __syncthreads();
}

// conv_state[b, c] = the last K-1 elements of [conv_state | mixed_qkv] (zeros first when
// fresh). In place: element j reads old element T+j >= j, never overwritten before.
template <int DT>
__device__ __forceinline__ void gdn_shift_channel(const GdnArgs& g, i64 b, i64 c, bool fresh) {
    const i64 keep = g.taps - 1, r = b * g.ch + c;
    for (i64 j = 0; j < keep; ++j)
        io_st<DT>(g.conv_state, r * keep + j, gdn_x<DT>(g, b, c, g.seq + j, fresh));
}

template <int DT> __device__ void gdn_recur(const GdnArgs& g) {
    __shared__ float qs[GDN_MAXDK], ks[GDN_MAXDK];
    __shared__ float red_kv[GDN_WARPS][32], red_o[GDN_WARPS][32];  // [row group][column]
    __shared__ float nrm[2];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, G = blockDim.x >> 5;
    const i64 j = blockIdx.x * 32 + lane;
    const i64 h = blockIdx.y, b = blockIdx.z;
    const bool col = j < g.dv;
    const bool fresh = *g.pos == 0;
    const i64 kh = h / (g.hv / g.hk);
    float* st = g.state + (b * g.hv + h) * g.dk * g.dv;
    float s[GDN_R];
#pragma unroll
    for (int r = 0; r < GDN_R; ++r) {
        const i64 i = w + (i64)G * r;
        const float v = (col && i < g.dk) ? st[i * g.dv + j] : 0.0f;
        s[r] = fresh ? 0.0f : v;
    }
    const float decay = -expf(io_ld<DT>(g.a_log, h));
    const float bias = io_ld<DT>(g.dt_bias, h);
    const i64 vch = 2 * g.hk * g.dk + h * g.dv + j;
    for (i64 t = 0; t < g.seq; ++t) {
        // The gates and this column's v first: their loads overlap gdn_qk's (no barrier
        // between them).
        const i64 gi = (b * g.seq + t) * g.hv + h;
        const float beta = io_rnd<DT>(e_sigmoid(io_ld<DT>(g.b, gi)));
        const float eg = expf(decay * gdn_softplus(io_ld<DT>(g.a, gi) + bias));
        const float v = col ? gdn_conv<DT>(g, b, vch, t, fresh) : 0.0f;
        gdn_qk<DT>(g, b, kh, t, fresh, qs, ks, nrm);
        const float nq = nrm[0], nk = nrm[1];
        float p = 0.0f;
#pragma unroll
        for (int r = 0; r < GDN_R; ++r) {
            const i64 i = w + (i64)G * r;
            if (i < g.dk) {
                s[r] *= eg;
                p += s[r] * (ks[i] * nk);
            }
        }
        red_kv[w][lane] = p;
        __syncthreads();
        float kv = 0.0f;
        for (int x = 0; x < G; ++x) kv += red_kv[x][lane];
        const float d = beta * (v - kv);
        float o = 0.0f;
#pragma unroll
        for (int r = 0; r < GDN_R; ++r) {
            const i64 i = w + (i64)G * r;
            if (i < g.dk) {
                s[r] += (ks[i] * nk) * d;
                o += s[r] * (qs[i] * nq);
            }
        }
        red_o[w][lane] = o;
        __syncthreads();
        if (w == 0 && col) {
            float acc = 0.0f;
            for (int x = 0; x < G; ++x) acc += red_o[x][lane];
            io_st<DT>(g.out, gi * g.dv + j, acc);
        }
    }
#pragma unroll
    for (int r = 0; r < GDN_R; ++r) {
        const i64 i = w + (i64)G * r;
        if (col && i < g.dk) st[i * g.dv + j] = s[r];
    }
    if (!g.fuse_shift) return;
    // The conv_state shift, once every reader of a channel is done with the old state: the
    // v channels of this block's columns (no other block reads them) now; the q and k
    // channels of key head kh by the last of the (Hv/Hk) x tiles blocks that read them.
    __syncthreads();
    if (w == 0 && col) gdn_shift_channel<DT>(g, b, 2 * g.hk * g.dk + h * g.dv + j, fresh);
    const unsigned readers = (unsigned)(g.hv / g.hk) * gridDim.x;
    if (!last_block(&gdn_done[b * g.hk + kh], readers)) return;
    for (i64 i = threadIdx.x; i < 2 * g.dk; i += blockDim.x) {
        const i64 c = i < g.dk ? kh * g.dk + i : (g.hk + kh) * g.dk + (i - g.dk);
        gdn_shift_channel<DT>(g, b, c, fresh);
    }
}
// Entry points by block size: gdn_recur_* for head_k_dim <= 128 (at most 8 warps, so up to
// 255 registers a thread hold the state rows without spilling), gdn_recur_w_* up to 256.
IO_KERNELS(gdn_recur, GdnArgs, 256)
template <int DT> __device__ __forceinline__ void gdn_recur_w(const GdnArgs& g) { gdn_recur<DT>(g); }
IO_KERNELS(gdn_recur_w, GdnArgs, 512)


// The conv_state shift as a kernel of its own (when gdn_recur does not do it), one thread
// per (batch item, channel), after the recurrence has read the old state.
template <int DT> __device__ void gdn_conv_state(const GdnArgs& g) {
    const bool fresh = *g.pos == 0;
    GRID_LOOP(r, g.batch * g.ch) gdn_shift_channel<DT>(g, r / g.ch, r % g.ch, fresh);
}
IO_KERNELS(gdn_conv_state, GdnArgs, 256)
