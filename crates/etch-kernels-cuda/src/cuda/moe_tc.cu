// ---- etch::moe on tensor cores (bfloat16 / float16), for prefill ----
// Compiled after moe.cu into the same module (Family::Moe); moe.cu's header says when it
// runs. Expert-major grouped GEMMs on mma.sync m16n8k16 (float accumulation), fed by
// moe_lists' per-expert pair lists:
// - moe_tc_plan (one block): tiles of up to MOE_TC_BM pairs per slot block (each expert,
//   then the shared expert, whose list is every row), laid out from a prefix sum over the
//   counts into a[.tiles] (expert, first pair): a.tile_max entries, the worst case from the
//   shapes, the unused ones -1. The grids below are sized from shapes only (CUDA-graph
//   capturable); their surplus blocks exit at once.
// - moe_up_tc_*: block (tile, 64 intermediate units): the tile's x rows (gathered) times the
//   expert's 64 gate and 64 up rows, then act = round(round(silu(round(g))) * round(u)), as
//   moe_up stores it.
// - moe_down_tc_*: block (tile, 128 hidden units): the tile's activation rows times the
//   expert's down rows, then ys as moe_down stores it; moe_combine sums as before.
// Both: 8 warps (2 x 4) over a 64 x 128 block tile, k in steps of MOE_TC_BK staged by
// cp.async in MOE_TC_STAGES buffers (rows padded to 80 bytes: conflict-free ldmatrix);
// rows past a tile's pairs or a matrix's end are zero-filled and never stored. The launcher
// checks that the k extents (hidden, inter, shared inter) are multiples of MOE_TC_BK and
// that every row is 16-byte aligned.

#define MOE_TC_BM 64       // pairs per tile
#define MOE_TC_BN 128      // columns per block (moe_up_tc: 64 gate and the 64 up rows)
#define MOE_TC_BK 32       // k per stage
#define MOE_TC_STAGES 3
#define MOE_TC_LD 40       // elements per staged row (32 + 8 padding: 80 bytes)
#define MOE_TC_PLAN 4098   // most slot blocks + 1 (4096 experts, the shared expert)

struct MoeTcSmem {
    u16 a[MOE_TC_STAGES][MOE_TC_BM * MOE_TC_LD];
    u16 b[MOE_TC_STAGES][MOE_TC_BN * MOE_TC_LD];
    int pair[MOE_TC_BM];  // the tile's pairs, -1 past its end
};

__device__ __forceinline__ unsigned moe_tc_saddr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16 bytes from global src to shared dst without waiting; zeros (src unread) when !valid.
__device__ __forceinline__ void moe_tc_cp16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void moe_tc_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void moe_tc_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void moe_tc_ldsm4(unsigned addr, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a (16 x 16, row) * b (16 x 8, col), float accumulators.
template <int DT> __device__ __forceinline__ void moe_tc_mma(float* c, const unsigned* a, const unsigned* b) {
    if constexpr (DT == DT_BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// Two values rounded to the IO dtype, packed (the first in the low half).
template <int DT> __device__ __forceinline__ unsigned moe_tc_pack2(float x, float y) {
    if constexpr (DT == DT_BF16) return (unsigned)f2bf(x) | ((unsigned)f2bf(y) << 16);
    else return (unsigned)f2h(x) | ((unsigned)f2h(y) << 16);
}

// The rows this thread stages: A row threadIdx.x / 4 and B rows threadIdx.x / 4 and
// 64 + threadIdx.x / 4, each at 16-byte chunk threadIdx.x % 4 of a stage; a row that is
// not valid is zero-filled (its pointer is never read).
struct MoeTcRows {
    const char* a;
    const char* b0;
    const char* b1;
    bool av, b0v, b1v;
};

__device__ __forceinline__ void moe_tc_stage(MoeTcSmem& sm, const MoeTcRows& r, int s, int kt) {
    const int row = threadIdx.x >> 2, c = threadIdx.x & 3;
    const i64 off = (i64)kt * MOE_TC_BK * 2 + c * 16;
    const int at = row * MOE_TC_LD + c * 8;
    moe_tc_cp16(moe_tc_saddr(&sm.a[s][at]), r.a + (r.av ? off : 0), r.av);
    moe_tc_cp16(moe_tc_saddr(&sm.b[s][at]), r.b0 + (r.b0v ? off : 0), r.b0v);
    moe_tc_cp16(moe_tc_saddr(&sm.b[s][64 * MOE_TC_LD + at]), r.b1 + (r.b1v ? off : 0), r.b1v);
}

// One stage's MOE_TC_BK of k for this warp: rows wm*32 .. +32 of A against four n8 tiles
// of B. UP: tiles 0, 1 are gate rows wn*16 .. +16 and tiles 2, 3 the up rows 64 + wn*16
// .. +16 (so a thread holds gate and up of the same units); else rows wn*32 .. +32.
template <int DT, bool UP>
__device__ __forceinline__ void moe_tc_step(MoeTcSmem& sm, int s, float (&acc)[2][4][4]) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, wm = w & 1, wn = w >> 1;
#pragma unroll
    for (int ks = 0; ks < MOE_TC_BK; ks += 16) {
        unsigned af[2][4], bf[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            const int row = wm * 32 + mi * 16 + (lane & 15), col = ks + (lane >> 4) * 8;
            moe_tc_ldsm4(moe_tc_saddr(&sm.a[s][row * MOE_TC_LD + col]), af[mi]);
        }
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const int base = UP ? p * 64 + wn * 16 : wn * 32 + p * 16;
            const int row = base + (lane >> 4) * 8 + (lane & 7), col = ks + ((lane >> 3) & 1) * 8;
            moe_tc_ldsm4(moe_tc_saddr(&sm.b[s][row * MOE_TC_LD + col]), bf[p]);
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int j = 0; j < 4; ++j) moe_tc_mma<DT>(acc[mi][j], af[mi], &bf[j >> 1][(j & 1) * 2]);
    }
}

// The block's 64 x 128 product over `ktiles` stages of k (see moe_tc_step for which
// accumulators hold what): C fragment (mi, j) of warp (wm, wn) holds rows wm*32 + mi*16 +
// lane/4 (+8 for elements 2, 3) and the two columns 2 * (lane % 4) of its n8 tile.
template <int DT, bool UP>
__device__ void moe_tc_gemm(MoeTcSmem& sm, const MoeTcRows& r, int ktiles, float (&acc)[2][4][4]) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[mi][j][q] = 0.0f;
#pragma unroll
    for (int s = 0; s < MOE_TC_STAGES - 1; ++s) {
        if (s < ktiles) moe_tc_stage(sm, r, s, s);
        moe_tc_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        moe_tc_wait<MOE_TC_STAGES - 2>();
        // Stage kt has landed for every thread, and every warp is done with stage kt - 1,
        // which the prefetch below overwrites.
        __syncthreads();
        const int nk = kt + MOE_TC_STAGES - 1;
        if (nk < ktiles) moe_tc_stage(sm, r, nk % MOE_TC_STAGES, nk);
        moe_tc_commit();
        moe_tc_step<DT, UP>(sm, kt % MOE_TC_STAGES, acc);
    }
    moe_tc_wait<0>();
}

// The slot block of this block's tile (E: the shared expert), or -1 for a surplus block.
__device__ __forceinline__ int moe_tc_expert(const MoeArgs& a) {
    const int e = blockIdx.x < a.tile_max ? a.tiles[blockIdx.x].x : -1;
    return e >= 0 && e <= a.experts ? e : -1;
}

// The tile's pairs into sm.pair (-1 past the slot block's count); the whole block calls it.
__device__ __forceinline__ void moe_tc_pairs(const MoeArgs& a, MoeTcSmem& sm, int e) {
    if (threadIdx.x < MOE_TC_BM) {
        const i64 c = e == a.experts ? a.rows : a.counts[e];
        const i64 n = c < a.rows ? c : a.rows, t0 = a.tiles[blockIdx.x].y;
        const i64 i = t0 + threadIdx.x;
        sm.pair[threadIdx.x] = t0 >= 0 && i < n ? (int)moe_pair(a, e, i) : -1;
    }
    __syncthreads();
}

// Block (tile, 64 units from blockIdx.y * 64): act as moe_up stores it.
template <int DT> __device__ void moe_up_tc(const MoeArgs& a) {
    __shared__ __align__(16) MoeTcSmem sm;
    const int e = moe_tc_expert(a);
    const bool shared = e == a.experts;
    const i64 ni = shared ? a.sinter : a.inter, i0 = blockIdx.y * (i64)64;
    if (e < 0 || i0 >= ni) return;
    moe_tc_pairs(a, sm, e);
    const i64 rb = a.hidden * 2, K1 = a.top_k + 1;
    const int row = threadIdx.x >> 2, pr = sm.pair[row];
    const i64 u = i0 + row;
    MoeTcRows r;
    r.av = pr >= 0;
    r.a = (const char*)a.x + (r.av ? pr / K1 * rb : 0);
    r.b0v = r.b1v = u < ni;
    const i64 uu = r.b0v ? u : 0;
    r.b0 = shared ? (const char*)a.sg + uu * rb : (const char*)a.gate_up + ((i64)e * 2 * a.inter + uu) * rb;
    r.b1 = shared ? (const char*)a.su + uu * rb : r.b0 + a.inter * rb;
    float acc[2][4][4];
    moe_tc_gemm<DT, true>(sm, r, (int)(a.hidden / MOE_TC_BK), acc);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, wm = w & 1, wn = w >> 1;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int p = sm.pair[wm * 32 + mi * 16 + hf * 8 + (lane >> 2)];
            if (p < 0) continue;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                // Units i, i + 1 (ni is even, so both are in or out).
                const i64 i = i0 + wn * 16 + j * 8 + 2 * (lane & 3);
                if (i >= ni) continue;
                float v[2];
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const float g = io_rnd<DT>(acc[mi][j][2 * hf + q]);
                    const float up = io_rnd<DT>(acc[mi][j + 2][2 * hf + q]);
                    v[q] = io_rnd<DT>(io_rnd<DT>(e_silu(g)) * up);
                }
                *(unsigned*)((u16*)a.act + p * a.width + i) = moe_tc_pack2<DT>(v[0], v[1]);
            }
        }
}

// Block (tile, 128 hidden units from blockIdx.y * 128): ys as moe_down stores it.
template <int DT> __device__ void moe_down_tc(const MoeArgs& a) {
    __shared__ __align__(16) MoeTcSmem sm;
    const int e = moe_tc_expert(a);
    const i64 h0 = blockIdx.y * (i64)MOE_TC_BN;
    if (e < 0 || h0 >= a.hidden) return;
    moe_tc_pairs(a, sm, e);
    const bool shared = e == a.experts;
    const i64 ni = shared ? a.sinter : a.inter, K = a.top_k;
    const int row = threadIdx.x >> 2, pr = sm.pair[row];
    MoeTcRows r;
    r.av = pr >= 0;
    r.a = (const char*)a.act + (r.av ? pr * a.width * 2 : 0);
    const char* base = shared ? (const char*)a.sd : (const char*)a.down + (i64)e * a.hidden * ni * 2;
    r.b0v = h0 + row < a.hidden;
    r.b1v = h0 + 64 + row < a.hidden;
    r.b0 = base + (r.b0v ? (h0 + row) * ni * 2 : 0);
    r.b1 = base + (r.b1v ? (h0 + 64 + row) * ni * 2 : 0);
    float acc[2][4][4];
    moe_tc_gemm<DT, false>(sm, r, (int)(ni / MOE_TC_BK), acc);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, wm = w & 1, wn = w >> 1;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int p = sm.pair[wm * 32 + mi * 16 + hf * 8 + (lane >> 2)];
            if (p < 0) continue;
            const i64 m = p / (K + 1);
            const float g = shared ? a.sgate[m] : a.wsel[m * K + p % (K + 1)];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // Hidden units h, h + 1 (hidden is even, so both are in or out).
                const i64 h = h0 + wn * 32 + j * 8 + 2 * (lane & 3);
                if (h >= a.hidden) continue;
                float v[2];
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    const float y = io_rnd<DT>(acc[mi][j][2 * hf + q]);
                    // Expert slots: round(round(dot) * w); the shared slot: round(gate * round(dot)).
                    v[q] = shared ? io_rnd<DT>(g * y) : io_rnd<DT>(y * g);
                }
                *(float2*)(a.ys + p * a.hidden + h) = make_float2(v[0], v[1]);
            }
        }
}

#define MOE_TC_KERNELS(NAME)                                                              \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_bf16(MoeArgs a) {         \
        PDL_ENTRY(); NAME<DT_BF16>(a);                                                    \
    }                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_f16(MoeArgs a) {          \
        PDL_ENTRY(); NAME<DT_F16>(a);                                                     \
    }
MOE_TC_KERNELS(moe_up_tc)
MOE_TC_KERNELS(moe_down_tc)

// Tiles of slot block e (the shared expert: every row).
__device__ __forceinline__ int moe_tc_ntiles(const MoeArgs& a, int e) {
    const i64 c = e == a.experts ? a.rows : a.counts[e];
    const i64 n = c < 0 ? 0 : c < a.rows ? c : a.rows;
    return (int)((n + MOE_TC_BM - 1) / MOE_TC_BM);
}

// One block (of 256 threads): the tile table. A prefix sum over the slot blocks' tile
// counts (each thread sums a run of blocks), then tile i belongs to the last slot block
// whose prefix is <= i (a binary search); tiles from the total on are -1.
extern "C" __global__ void __launch_bounds__(256) moe_tc_plan(MoeArgs a) {
    PDL_ENTRY();
    __shared__ int pre[MOE_TC_PLAN];
    __shared__ int warp_sum[32];
    const int n = (int)a.experts + 1, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (n + 1 > MOE_TC_PLAN) {  // the launcher allows no more experts: no tiles
        for (i64 i = threadIdx.x; i < a.tile_max; i += blockDim.x) a.tiles[i] = make_int2(-1, -1);
        return;
    }
    const int per = (n + blockDim.x - 1) / blockDim.x;
    const int lo = threadIdx.x * per, hi = lo + per < n ? lo + per : n;
    int s = 0;
    for (int e = lo; e < hi; ++e) s += moe_tc_ntiles(a, e);
    int v = s;  // inclusive scan over the warp, then over the warps
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += y;
    }
    if (lane == 31) warp_sum[w] = v;
    __syncthreads();
    int at = v - s;
    for (int q = 0; q < w; ++q) at += warp_sum[q];
    for (int e = lo; e < hi; ++e) {
        pre[e] = at;
        at += moe_tc_ntiles(a, e);
    }
    if (threadIdx.x == blockDim.x - 1) pre[n] = at;
    __syncthreads();
    const i64 total = pre[n];
    for (i64 i = threadIdx.x; i < a.tile_max; i += blockDim.x) {
        if (i >= total) {
            a.tiles[i] = make_int2(-1, -1);
            continue;
        }
        int l = 0, h = n - 1;
        while (l < h) {
            const int mid = (l + h + 1) >> 1;
            if (pre[mid] <= i) l = mid;
            else h = mid - 1;
        }
        a.tiles[i] = make_int2(l, (int)((i - pre[l]) * MOE_TC_BM));
    }
}
