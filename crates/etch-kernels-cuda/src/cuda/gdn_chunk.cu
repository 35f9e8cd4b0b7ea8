// ---- etch::gated_delta_net, chunked (prefill) ----
// Compiled after gdn.cu into the same module (Family::Gdn); gdn.cu's header says when it
// runs. The delta rule over chunks of GDN_C tokens (the last one partial), float32
// throughout, for head_k_dim and head_v_dim <= GDN_CD. Per chunk of a value head, with
// G_i = the cumulative sum of the log decays g within the chunk (in double, so that
// exp(G_i - G_j) is as exact as the recurrence's product of per-token factors), S its
// state at the chunk's start, and e^x factors all <= 1:
//   A = strictly_lower(beta_i (k_i . k_j) e^(G_i - G_j)), T = (I + A)^-1;
//   W = T diag(beta e^G) K; U = T diag(beta) V; U' = U - W S;
//   O = diag(e^G) Q S + lower(Q K^T e^(G_i - G_j)) U';
//   S <- e^(G_last) S + (diag(e^(G_last - G)) K)^T U'.
// The tokens go in passes of at most GDN_SEG (the scratch holds one pass), four kernels a
// pass, all reading and writing float scratch whose rows are GDN_CD floats (zero-padded):
// - gdn_prep_*: a warp per (token, q / k / v head): the causal conv + SiLU (rounded to the
//   IO dtype, as gdn_conv), q and k L2-normalised (q times Dk^-0.5); the v-head warps also
//   write beta (rounded) and g = -exp(A_log) softplus(a + dt_bias) of (token, value head).
// - gdn_wy_*: a block per (chunk, value head): e^G and e^(G_last - G), the Gram matrices
//   K K^T and Q K^T (Dk in slices of 32 through shared memory, 4 x 4 per thread), then A
//   in shared memory and P = lower(Q K^T e^(G_i - G_j)) to the scratch, then W and U by
//   forward substitution of (I + A) X = [diag(beta e^G) K | diag(beta) V], a thread per
//   column of X holding it in registers.
// - gdn_chunk_state_*: a block per (value-column tile of GDN_TV, value head), walking the
//   chunks in order: S (thread: 16 rows of its column) to the chunk-start state scratch H,
//   U' = U - W S (written over U), S <- e^(G_last) S + K~^T U'; the final S to `state`.
//   W and K go through shared memory in four 16 KB steps a chunk, each thread loading its
//   share of the next step into registers while the block computes on the current one.
// - gdn_chunk_out_*: a block per (chunk, value head x column tile): O = e^G (Q H) + P U',
//   rounded to the IO dtype into out.
// The conv_state shift runs after the last pass (gdn_conv_state). Blocks are 256 threads.

#define GDN_C 64        // tokens per chunk
#define GDN_CD 128      // head_k_dim, head_v_dim at most (scratch rows)
#define GDN_TV 32       // value columns per gdn_chunk_state / gdn_chunk_out block
#define GDN_SEG 1024    // tokens per pass (a multiple of GDN_C)
#define GDN_CT 256      // threads per block (gdn_wy: one per column of [W | U])

struct GdnChunkArgs {
    GdnArgs g;
    float* q;      // [B, L, Hk, CD]: normalised q times Dk^-0.5
    float* k;      // [B, L, Hk, CD]: normalised k
    float* v;      // [B, L, Hv, CD]
    float* beta;   // [B, L, Hv]
    float* lg;     // [B, L, Hv]: log decay g
    float* w;      // [B, Hv, L, CD]
    float* u;      // [B, Hv, L, CD]: U, then U'
    float* p;      // [B, Hv, L, C]: lower(Q K^T e^(G_i - G_j)) per chunk
    float* eg;     // [B, Hv, L]: e^G_i
    float* ec;     // [B, Hv, L]: e^(G_last - G_i)
    float* h;      // [B, Hv, NC, CD, CD]: the state at each chunk's start
    i64 t0, len;   // this pass: tokens t0 .. t0 + len (L = len, NC = ceil(len / C))
    int first;     // t0 == 0: the state starts from zero when input_pos is 0
    int pad;
};

// Rows of the chunk starting at local token i0 (at most GDN_C).
__device__ __forceinline__ int gdn_rows(const GdnChunkArgs& a, i64 i0) {
    return (int)min((i64)GDN_C, a.len - i0);
}

// dst[nrows][ncols] = rows of src (row stride ld floats; 16-byte aligned, ncols % 4 == 0),
// zero from row `valid` on. Every thread of the block takes part.
__device__ __forceinline__ void gdn_stage(float* dst, const float* src, i64 ld, int valid,
                                          int nrows, int ncols) {
    const int q = ncols / 4;
    for (int e = threadIdx.x; e < nrows * q; e += blockDim.x) {
        const int r = e / q, c = e % q;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < valid) x = *(const float4*)(src + r * ld + 4 * c);
        ((float4*)dst)[e] = x;
    }
}

// acc[m] += sum_{e < n} a[(w + 8m) lda + e] * bs[e GDN_TV + lane] (w: warp, 8 warps; a in
// shared memory, 16-byte aligned rows, n % 4 == 0): rows w, w+8, ... of a GDN_C-row tile
// times column `lane` of bs.
__device__ __forceinline__ void gdn_rows_mac(float* acc, const float* a, int lda,
                                             const float* bs, int n) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll 4
    for (int e = 0; e < n; e += 4) {
        const float b0 = bs[e * GDN_TV + lane], b1 = bs[(e + 1) * GDN_TV + lane];
        const float b2 = bs[(e + 2) * GDN_TV + lane], b3 = bs[(e + 3) * GDN_TV + lane];
#pragma unroll
        for (int m = 0; m < GDN_C / 8; ++m) {
            const float4 x = *(const float4*)(a + (w + 8 * m) * lda + e);
            acc[m] = fmaf(x.x, b0, acc[m]);
            acc[m] = fmaf(x.y, b1, acc[m]);
            acc[m] = fmaf(x.z, b2, acc[m]);
            acc[m] = fmaf(x.w, b3, acc[m]);
        }
    }
}

// One warp per (token, q / k / v head): conv, SiLU, rounding, L2 norm; gates for v heads.
template <int DT> __device__ void gdn_prep(const GdnChunkArgs& a) {
    const GdnArgs& g = a.g;
    const int lane = threadIdx.x & 31;
    const i64 unit = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const i64 tl = blockIdx.y, b = blockIdx.z;
    // Uniform per warp: the warp sums below see every lane.
    if (unit >= 2 * g.hk + g.hv || tl >= a.len) return;
    const bool fresh = *g.pos == 0;
    const i64 t = a.t0 + tl, row = b * a.len + tl;
    const bool isv = unit >= 2 * g.hk;
    const i64 n = isv ? g.dv : g.dk;
    const i64 c0 = isv ? 2 * g.hk * g.dk + (unit - 2 * g.hk) * g.dv : unit * g.dk;
    float y[GDN_CD / 32];
    float ss = 0.0f;
#pragma unroll
    for (int r = 0; r < GDN_CD / 32; ++r) {
        const i64 d = lane + 32 * r;
        y[r] = d < n ? gdn_conv<DT>(g, b, c0 + d, t, fresh) : 0.0f;
        ss += y[r] * y[r];
    }
    float mul = 1.0f;
    float* dst;
    if (isv) {
        dst = a.v + (row * g.hv + (unit - 2 * g.hk)) * GDN_CD;
    } else {
        ss = warp_sum(ss);
        const bool isq = unit < g.hk;
        mul = (isq ? g.scale : 1.0f) / sqrtf(ss + 1e-6f);
        dst = (isq ? a.q + (row * g.hk + unit) * GDN_CD
                   : a.k + (row * g.hk + (unit - g.hk)) * GDN_CD);
    }
#pragma unroll
    for (int r = 0; r < GDN_CD / 32; ++r) dst[lane + 32 * r] = y[r] * mul;
    if (!isv || lane != 0) return;
    const i64 h = unit - 2 * g.hk;
    const i64 gi = (b * g.seq + t) * g.hv + h;
    const float decay = -expf(io_ld<DT>(g.a_log, h));
    a.beta[row * g.hv + h] = io_rnd<DT>(e_sigmoid(io_ld<DT>(g.b, gi)));
    a.lg[row * g.hv + h] = decay * gdn_softplus(io_ld<DT>(g.a, gi) + io_ld<DT>(g.dt_bias, h));
}
IO_KERNELS(gdn_prep, GdnChunkArgs, GDN_CT)

// gdn_wy's shared memory.
struct GdnWySmem {
    float ks[GDN_C][33], qs[GDN_C][33];  // a slice of 32 of K and Q (padded rows)
    float __align__(16) as[GDN_C][GDN_C];  // A
    double gd[GDN_C];                    // G (the cumulative log decay)
    float lg[GDN_C], bs[GDN_C], egs[GDN_C];
};

// The chunk's gates: G in double, then e^G and e^(G_last - G) into sm and the scratch.
__device__ void gdn_wy_gates(const GdnChunkArgs& a, GdnWySmem& sm, i64 b, i64 h, i64 i0,
                             int rows) {
    const int t = threadIdx.x;
    const i64 gate = (b * a.len + i0 + t) * a.g.hv + h;
    if (t < GDN_C) {
        sm.lg[t] = t < rows ? a.lg[gate] : 0.0f;
        sm.bs[t] = t < rows ? a.beta[gate] : 0.0f;
    }
    __syncthreads();
    if (t == 0) {
        double s = 0.0;
        for (int i = 0; i < GDN_C; ++i) {
            s += sm.lg[i];
            sm.gd[i] = s;
        }
    }
    __syncthreads();
    if (t < GDN_C) {
        const i64 o = (b * a.g.hv + h) * a.len + i0 + t;
        const float eg = t < rows ? expf((float)sm.gd[t]) : 0.0f;
        sm.egs[t] = eg;
        if (t < rows) {
            a.eg[o] = eg;
            a.ec[o] = expf((float)(sm.gd[rows - 1] - sm.gd[t]));
        }
    }
}

// K K^T and Q K^T of the chunk: thread (ti, tj) = (t / 16, t % 16) the rows ti + 16x and
// columns tj + 16y (x, y < 4).
__device__ void gdn_wy_grams(const GdnChunkArgs& a, GdnWySmem& sm, i64 b, i64 kh, i64 i0,
                             int rows, float (&kk)[4][4], float (&qk)[4][4]) {
    const int t = threadIdx.x, ti = t >> 4, tj = t & 15;
    const i64 ld = a.g.hk * GDN_CD;
    const float* kr = a.k + ((b * a.len + i0) * a.g.hk + kh) * GDN_CD;
    const float* qr = a.q + ((b * a.len + i0) * a.g.hk + kh) * GDN_CD;
    for (int d0 = 0; d0 < a.g.dk; d0 += 32) {
        __syncthreads();  // the previous slice is consumed
        for (int e = t; e < GDN_C * 32; e += blockDim.x) {
            const int r = e >> 5, c = e & 31;
            sm.ks[r][c] = r < rows ? kr[r * ld + d0 + c] : 0.0f;
            sm.qs[r][c] = r < rows ? qr[r * ld + d0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int d = 0; d < 32; ++d) {
            float kx[4], qx[4], ky[4];
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                kx[x] = sm.ks[ti + 16 * x][d];
                qx[x] = sm.qs[ti + 16 * x][d];
                ky[x] = sm.ks[tj + 16 * x][d];
            }
#pragma unroll
            for (int x = 0; x < 4; ++x)
#pragma unroll
                for (int y = 0; y < 4; ++y) {
                    kk[x][y] = fmaf(kx[x], ky[y], kk[x][y]);
                    qk[x][y] = fmaf(qx[x], ky[y], qk[x][y]);
                }
        }
    }
}

// A (strictly lower) into sm.as and P (lower, zero above) into the scratch, from the Gram
// matrices and the decays e^(G_i - G_j) (only for j <= i: those are <= 1).
__device__ void gdn_wy_masks(const GdnChunkArgs& a, GdnWySmem& sm, i64 b, i64 h, i64 i0,
                             int rows, const float (&kk)[4][4], const float (&qk)[4][4]) {
    const int t = threadIdx.x, ti = t >> 4, tj = t & 15;
    float* pr = a.p + ((b * a.g.hv + h) * a.len + i0) * GDN_C;
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) {
            const int i = ti + 16 * x, j = tj + 16 * y;
            const float dec = (j <= i && i < rows) ? expf((float)(sm.gd[i] - sm.gd[j])) : 0.0f;
            sm.as[i][j] = j < i ? sm.bs[i] * kk[x][y] * dec : 0.0f;
            if (i < rows) pr[i * GDN_C + j] = qk[x][y] * dec;
        }
}

// (I + A) X = R by forward substitution, thread t the column t of X = [W | U] (R: beta e^G
// k for t < CD, beta v after), the column in registers.
__device__ void gdn_wy_solve(const GdnChunkArgs& a, const GdnWySmem& sm, i64 b, i64 h,
                             i64 kh, i64 i0, int rows) {
    const int t = threadIdx.x;
    const bool isw = t < GDN_CD;
    const int col = t & (GDN_CD - 1);
    const float* src = isw ? a.k + ((b * a.len + i0) * a.g.hk + kh) * GDN_CD + col
                           : a.v + ((b * a.len + i0) * a.g.hv + h) * GDN_CD + col;
    const i64 ld = (isw ? a.g.hk : a.g.hv) * GDN_CD;
    float x[GDN_C];
#pragma unroll
    for (int i = 0; i < GDN_C; ++i)
        x[i] = i < rows ? sm.bs[i] * (isw ? sm.egs[i] : 1.0f) * src[i * ld] : 0.0f;
#pragma unroll
    for (int i = 1; i < GDN_C; ++i) {
        float s = x[i];
#pragma unroll
        for (int j = 0; j < i; ++j) s = fmaf(-sm.as[i][j], x[j], s);
        x[i] = s;
    }
    float* dst = (isw ? a.w : a.u) + ((b * a.g.hv + h) * a.len + i0) * GDN_CD + col;
#pragma unroll
    for (int i = 0; i < GDN_C; ++i)
        if (i < rows) dst[i * GDN_CD] = x[i];
}

// Block (chunk, value head, batch item): gates, Gram matrices, A and P, then W and U.
template <int DT> __device__ void gdn_wy(const GdnChunkArgs& a) {
    __shared__ GdnWySmem sm;
    const i64 i0 = blockIdx.x * (i64)GDN_C, h = blockIdx.y, b = blockIdx.z;
    const int rows = gdn_rows(a, i0);
    if (rows <= 0 || blockDim.x != GDN_CT) return;
    const i64 kh = h / (a.g.hv / a.g.hk);
    gdn_wy_gates(a, sm, b, h, i0, rows);
    float kk[4][4] = {}, qk[4][4] = {};
    gdn_wy_grams(a, sm, b, kh, i0, rows, kk, qk);
    gdn_wy_masks(a, sm, b, h, i0, rows, kk, qk);
    __syncthreads();
    gdn_wy_solve(a, sm, b, h, kh, i0, rows);
}
IO_KERNELS(gdn_wy, GdnChunkArgs, GDN_CT)

// gdn_chunk_state's shared memory.
struct GdnStateSmem {
    float __align__(16) ss[GDN_CD][GDN_TV];  // S (this block's columns)
    float __align__(16) stg[GDN_C * GDN_C];  // half of W, or half of the chunk's K rows
    float us[GDN_C][GDN_TV];                 // U'
    float ecs[GDN_C];                        // e^(G_last - G_i)
};

// gdn_chunk_state stages 4 x 16 KB a chunk through sm.stg, step st = 4n + phase of chunk n:
// phases 0 and 1 W's columns 0-63 and 64-127 (64 rows of 16 float4), 2 and 3 K's rows 0-31
// and 32-63 (32 rows of 32 float4), zero past the chunk's rows. A thread fetches its 4
// float4 of the next step into registers while the block computes on the current one.
struct GdnStage {
    float4 x[4];
};

__device__ __forceinline__ void gdn_state_fetch(const GdnChunkArgs& a, i64 b, i64 h, i64 kh,
                                                i64 st, GdnStage& f) {
    const i64 i0 = (st >> 2) * GDN_C;
    const int ph = (int)(st & 3), rows = gdn_rows(a, i0);
    const bool isw = ph < 2;
    const int i1 = isw ? 0 : (ph - 2) * (GDN_C / 2), valid = rows - i1, q = isw ? 16 : 32;
    const float* src = isw ? a.w + ((b * a.g.hv + h) * a.len + i0) * GDN_CD + ph * GDN_C
                           : a.k + ((b * a.len + i0 + i1) * a.g.hk + kh) * GDN_CD;
    const i64 ld = isw ? GDN_CD : a.g.hk * GDN_CD;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int e = threadIdx.x + GDN_CT * r, row = e / q, c = e % q;
        f.x[r] = row < valid ? *(const float4*)(src + row * ld + 4 * c)
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// U' = U - acc (rows w + 8m of column `lane`; u: U's rows at this column) into sm.us and
// over U.
__device__ __forceinline__ void gdn_state_u(GdnStateSmem& sm, float* u, const float* acc,
                                            const float* uo, int rows) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < GDN_C / 8; ++m) {
        const int i = w + 8 * m;
        const float x = i < rows ? uo[m] - acc[m] : 0.0f;
        sm.us[i][lane] = x;
        if (i < rows) u[i * GDN_CD] = x;
    }
}

// s (rows 16w + r of column `lane`) += sum over the staged K rows i1 + i of
// k_i e^(G_last - G_i) U'_i.
__device__ __forceinline__ void gdn_state_k(const GdnStateSmem& sm, int i1, float* s) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int i = 0; i < GDN_C / 2; ++i) {
        const float x = sm.us[i1 + i][lane] * sm.ecs[i1 + i];
        const float4* kv = (const float4*)(sm.stg + i * GDN_CD + 16 * w);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 k4 = kv[q];
            s[4 * q] = fmaf(k4.x, x, s[4 * q]);
            s[4 * q + 1] = fmaf(k4.y, x, s[4 * q + 1]);
            s[4 * q + 2] = fmaf(k4.z, x, s[4 * q + 2]);
            s[4 * q + 3] = fmaf(k4.w, x, s[4 * q + 3]);
        }
    }
}

// Chunk n's four steps (see GdnStage): S to H and sm.ss, U' = U - W S, then
// S <- e^(G_last) S + K~^T U'. f holds step 4n's data and is left holding the next chunk's.
__device__ void gdn_state_chunk(const GdnChunkArgs& a, GdnStateSmem& sm, i64 b, i64 h, i64 kh,
                                i64 tile, i64 n, i64 nc, float* s, GdnStage& f) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const i64 i0 = n * GDN_C, r0 = (b * a.g.hv + h) * a.len + i0;
    const int rows = gdn_rows(a, i0);
    float* u = a.u + r0 * GDN_CD + tile * GDN_TV + lane;
    float uo[GDN_C / 8], acc[GDN_C / 8] = {};
#pragma unroll
    for (int m = 0; m < GDN_C / 8; ++m) uo[m] = w + 8 * m < rows ? u[(w + 8 * m) * GDN_CD] : 0.0f;
    const float ec = (int)threadIdx.x < rows ? a.ec[r0 + threadIdx.x] : 0.0f;
    const float decay = a.eg[r0 + rows - 1];
    for (int ph = 0; ph < 4; ++ph) {
        __syncthreads();  // sm.stg free; at phase 0 also sm.ss and sm.ecs
        if (ph == 0) {
            float* hn = a.h + ((b * a.g.hv + h) * nc + n) * GDN_CD * GDN_CD + tile * GDN_TV + lane;
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                hn[(16 * w + r) * GDN_CD] = s[r];
                sm.ss[16 * w + r][lane] = s[r];
            }
            if (threadIdx.x < GDN_C) sm.ecs[threadIdx.x] = ec;
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) ((float4*)sm.stg)[threadIdx.x + GDN_CT * r] = f.x[r];
        __syncthreads();
        if (4 * n + ph + 1 < 4 * nc) gdn_state_fetch(a, b, h, kh, 4 * n + ph + 1, f);
        if (ph < 2) {
            gdn_rows_mac(acc, sm.stg, GDN_C, &sm.ss[ph * GDN_C][0], GDN_C);
            if (ph == 1) gdn_state_u(sm, u, acc, uo, rows);
            continue;
        }
        if (ph == 2) {
#pragma unroll
            for (int r = 0; r < 16; ++r) s[r] *= decay;
        }
        gdn_state_k(sm, (ph - 2) * (GDN_C / 2), s);
    }
}

// Block (column tile, value head, batch item): the chunks in order (see the header).
template <int DT> __device__ void gdn_chunk_state(const GdnChunkArgs& a) {
    __shared__ GdnStateSmem sm;
    const GdnArgs& g = a.g;
    if (blockDim.x != GDN_CT) return;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const i64 tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const i64 j = tile * GDN_TV + lane;
    const bool col = j < g.dv;
    const bool zero = a.first && *g.pos == 0;
    const i64 kh = h / (g.hv / g.hk);
    float* st = g.state + (b * g.hv + h) * g.dk * g.dv;
    float s[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
        const i64 i = 16 * w + r;
        s[r] = (!zero && col && i < g.dk) ? st[i * g.dv + j] : 0.0f;
    }
    const i64 nc = (a.len + GDN_C - 1) / GDN_C;
    GdnStage f;
    gdn_state_fetch(a, b, h, kh, 0, f);
    for (i64 n = 0; n < nc; ++n) gdn_state_chunk(a, sm, b, h, kh, tile, n, nc, s, f);
#pragma unroll
    for (int r = 0; r < 16; ++r) {
        const i64 i = 16 * w + r;
        if (col && i < g.dk) st[i * g.dv + j] = s[r];
    }
}
IO_KERNELS(gdn_chunk_state, GdnChunkArgs, GDN_CT)

// gdn_chunk_out's shared memory.
struct GdnOutSmem {
    float __align__(16) hs[GDN_CD][GDN_TV];  // the chunk-start state (this tile)
    float __align__(16) stg[GDN_C * GDN_C];  // half of Q, then P
    float __align__(16) us[GDN_C][GDN_TV];   // U'
};

// Block (chunk, value head x column tile, batch item): O = e^G (Q S) + P U' (rows w + 8m
// of column `lane`).
template <int DT> __device__ void gdn_chunk_out(const GdnChunkArgs& a) {
    __shared__ GdnOutSmem sm;
    const GdnArgs& g = a.g;
    const i64 tiles = (g.dv + GDN_TV - 1) / GDN_TV;
    const i64 n = blockIdx.x, h = blockIdx.y / tiles, tile = blockIdx.y % tiles, b = blockIdx.z;
    const i64 i0 = n * GDN_C;
    const int rows = gdn_rows(a, i0);
    if (rows <= 0 || h >= g.hv || blockDim.x != GDN_CT) return;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const i64 kh = h / (g.hv / g.hk), nc = (a.len + GDN_C - 1) / GDN_C;
    const i64 r0 = (b * g.hv + h) * a.len + i0;
    const float* hn = a.h + ((b * g.hv + h) * nc + n) * GDN_CD * GDN_CD + tile * GDN_TV;
    gdn_stage(&sm.hs[0][0], hn, GDN_CD, GDN_CD, GDN_CD, GDN_TV);
    gdn_stage(&sm.us[0][0], a.u + r0 * GDN_CD + tile * GDN_TV, GDN_CD, rows, GDN_C, GDN_TV);
    const i64 ld = g.hk * GDN_CD;
    const float* qr = a.q + ((b * a.len + i0) * g.hk + kh) * GDN_CD;
    float acc[GDN_C / 8] = {};
    for (int half = 0; half < 2; ++half) {
        __syncthreads();  // sm.stg free (and sm.hs, sm.us staged)
        gdn_stage(sm.stg, qr + half * GDN_C, ld, rows, GDN_C, GDN_C);
        __syncthreads();
        gdn_rows_mac(acc, sm.stg, GDN_C, &sm.hs[half * GDN_C][0], GDN_C);
    }
#pragma unroll
    for (int m = 0; m < GDN_C / 8; ++m) {
        const int i = w + 8 * m;
        acc[m] *= i < rows ? a.eg[r0 + i] : 0.0f;
    }
    __syncthreads();
    gdn_stage(sm.stg, a.p + r0 * GDN_C, GDN_C, rows, GDN_C, GDN_C);
    __syncthreads();
    gdn_rows_mac(acc, sm.stg, GDN_C, &sm.us[0][0], GDN_C);
    const i64 j = tile * GDN_TV + lane;
    if (j >= g.dv) return;
#pragma unroll
    for (int m = 0; m < GDN_C / 8; ++m) {
        const int i = w + 8 * m;
        if (i < rows) io_st<DT>(g.out, ((b * g.seq + a.t0 + i0 + i) * g.hv + h) * g.dv + j, acc[m]);
    }
}
IO_KERNELS(gdn_chunk_out, GdnChunkArgs, GDN_CT)
