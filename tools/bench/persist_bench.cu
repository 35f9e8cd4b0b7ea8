// Persistent-layer microbenchmark (issue #13): is one kernel per layer, with grid barriers
// between its phases, faster than one kernel per phase with programmatic dependent launch?
// A "layer" is the Qwen 3.5 MoE DeltaNet layer's weight-streaming chain as five dependent
// one-row GEMVs of 2048-wide bf16 rows: 50 MB (the input projections), 16 MB (out_proj),
// 1 MB (router), 36 MB (8 experts + shared gate/up), 18 MB (down); each phase's input is the
// previous phase's output. 20 layers, each its own weights (cold in L2).
//  - kernels: one launch a phase (etch's gemv_group pattern: a warp a row, the row's 4 KB
//    loaded before griddepcontrol.wait, PDL between launches);
//  - persistent: one launch a layer (or one for all 20), grid = the co-resident blocks, each
//    warp streams rows with the next row's loads in flight; before each grid barrier a warp
//    issues the loads of its first row of the next phase.
// Not part of etch; run on a GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/bench/persist_bench.cu -o /tmp/pb && /tmp/pb
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define TRIG() asm volatile("griddepcontrol.launch_dependents;" :::)

constexpr int K = 2048, NV = K / 8 / 32;  // 8 16-byte vectors a lane a row

struct Phase { const char* w; int n; const float* x; float* y; };
struct Layer { Phase p[8]; int np; };

__global__ void flush(float* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] += 1.0f;
}

__device__ __forceinline__ float bf(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ void load_row(const char* w, long r, int lane, uint4* v) {
    const uint4* row = (const uint4*)(w + r * (long)K * 2);
#pragma unroll
    for (int j = 0; j < NV; ++j) v[j] = __ldg(row + lane + 32 * j);
}
__device__ __forceinline__ float dot_row(const uint4* v, const float* x, int lane) {
    float a = 0;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const unsigned short* h = (const unsigned short*)&v[j];
        const float4* xv = (const float4*)(x + (lane + 32 * j) * 8);
        const float4 x0 = xv[0], x1 = xv[1];
        a += bf(h[0]) * x0.x + bf(h[1]) * x0.y + bf(h[2]) * x0.z + bf(h[3]) * x0.w
           + bf(h[4]) * x1.x + bf(h[5]) * x1.y + bf(h[6]) * x1.z + bf(h[7]) * x1.w;
    }
    for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
    return a;
}

// one phase, one launch: warp per row, the row loaded before the wait
__global__ void __launch_bounds__(256) gemv(Phase ph) {
    TRIG();
    const int lane = threadIdx.x & 31; const long r = blockIdx.x * 8L + (threadIdx.x >> 5);
    uint4 v[NV];
    if (r < ph.n) load_row(ph.w, r, lane, v);
    WAIT();
    if (r >= ph.n) return;
    const float a = dot_row(v, ph.x, lane);
    if (lane == 0) ph.y[r] = a * 1e-3f;
}

// one phase, one launch, RPW rows a warp: every row's loads before the wait (fewer blocks)
template <int RPW> __global__ void __launch_bounds__(256) gemv_r(Phase ph) {
    TRIG();
    const int lane = threadIdx.x & 31; const long r0 = (blockIdx.x * 8L + (threadIdx.x >> 5)) * RPW;
    uint4 v[RPW][NV];
#pragma unroll
    for (int q = 0; q < RPW; ++q) if (r0 + q < ph.n) load_row(ph.w, r0 + q, lane, v[q]);
    WAIT();
#pragma unroll
    for (int q = 0; q < RPW; ++q) {
        if (r0 + q >= ph.n) return;
        const float a = dot_row(v[q], ph.x, lane);
        if (lane == 0) ph.y[r0 + q] = a * 1e-3f;
    }
}

__device__ __forceinline__ void grid_sync(unsigned* c, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(c, 1u);
        unsigned v;
        do { asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory"); } while (v < target);
    }
    __syncthreads();
}

// persistent: the phases of `ls[0..nl)`, a grid barrier after each
__global__ void __launch_bounds__(256) persist(const Layer* ls, int nl, unsigned* bar) {
    TRIG();
    const int lane = threadIdx.x & 31;
    const long W = gridDim.x * 8L, gw = blockIdx.x * 8L + (threadIdx.x >> 5);
    uint4 a[NV], b[NV];
    const Phase* first = &ls[0].p[0];
    if (gw < first->n) load_row(first->w, gw, lane, a);
    WAIT();
    unsigned target = 0;
    for (int l = 0; l < nl; ++l)
        for (int q = 0; q < ls[l].np; ++q) {
            const Phase ph = ls[l].p[q];
            for (long r = gw; r < ph.n; r += 2 * W) {
                if (r + W < ph.n) load_row(ph.w, r + W, lane, b);
                float s = dot_row(a, ph.x, lane);
                if (lane == 0) ph.y[r] = s * 1e-3f;
                if (r + W >= ph.n) break;
                if (r + 2 * W < ph.n) load_row(ph.w, r + 2 * W, lane, a);
                s = dot_row(b, ph.x, lane);
                if (lane == 0) ph.y[r + W] = s * 1e-3f;
            }
            // the next phase's first row, before the barrier
            const Phase* nx = q + 1 < ls[l].np ? &ls[l].p[q + 1] : (l + 1 < nl ? &ls[l + 1].p[0] : nullptr);
            if (nx && gw < nx->n) load_row(nx->w, gw, lane, a);
            target += gridDim.x;
            grid_sync(bar, target);
        }
}

// persistent with PRE rows a warp in flight, across each barrier too: before the barrier a
// warp issues the loads of its first PRE rows of the next phase (registers as the buffer)
template <int PRE> __global__ void __launch_bounds__(256) persist_pre(const Layer* ls, int nl, unsigned* bar) {
    TRIG();
    const int lane = threadIdx.x & 31;
    const long W = gridDim.x * 8L, gw = blockIdx.x * 8L + (threadIdx.x >> 5);
    uint4 v[PRE][NV];
    auto preload = [&](const Phase* ph) {
#pragma unroll
        for (int s = 0; s < PRE; ++s) {
            const long r = gw + s * W;
            if (ph && r < ph->n) load_row(ph->w, r, lane, v[s]);
        }
    };
    preload(&ls[0].p[0]);
    WAIT();
    unsigned target = 0;
    for (int l = 0; l < nl; ++l)
        for (int q = 0; q < ls[l].np; ++q) {
            const Phase ph = ls[l].p[q];
            for (long i = 0; gw + i * W < ph.n; i += PRE) {
#pragma unroll
                for (int s = 0; s < PRE; ++s) {
                    const long r = gw + (i + s) * W;
                    if (r < ph.n) {
                        const float a = dot_row(v[s], ph.x, lane);
                        if (lane == 0) ph.y[r] = a * 1e-3f;
                        if (r + PRE * W < ph.n) load_row(ph.w, r + PRE * W, lane, v[s]);
                    }
                }
            }
            preload(q + 1 < ls[l].np ? &ls[l].p[q + 1] : (l + 1 < nl ? &ls[l + 1].p[0] : nullptr));
            target += gridDim.x;
            grid_sync(bar, target);
        }
}

// streaming persistent: a producer warp a block copies the block's rows of every phase, in
// order, into a ring of ST stages of RW rows (cp.async.bulk, mbarrier completion), never
// waiting for a grid barrier (weights are constants); 8 consumer warps take a row each from
// a stage, and meet the other blocks at a grid barrier after each phase.
constexpr int RW = 8, ST = 6, CW = 8;
__device__ __forceinline__ unsigned sh(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mb_wait(unsigned long long* b, unsigned par) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                     : "=r"(done) : "r"(sh(b)), "r"(par) : "memory");
    } while (!done);
}
// a byte cursor over a block's contiguous row slices of every phase, in order
struct Cur { int l = 0, q = 0; long off = 0; };
__device__ __forceinline__ bool cur_next(const Layer* ls, int nl, long b, long G, Cur& c, long want, const char** src, long* len) {
    while (c.l < nl) {
        const Phase& ph = ls[c.l].p[c.q];
        const long lo = b * ph.n / G * (long)K * 2, hi = (b + 1) * ph.n / G * (long)K * 2;
        if (lo + c.off < hi) {
            *src = ph.w + lo + c.off; *len = min(want, hi - lo - c.off); c.off += *len; return true;
        }
        c.off = 0; if (++c.q == ls[c.l].np) { c.q = 0; ++c.l; }
    }
    return false;
}
template <bool IL, int MODE = 0, long PFB = 0> __global__ void __launch_bounds__(288, 1) streamp(const Layer* ls, int nl, unsigned* bar) {
    extern __shared__ __align__(128) char ring[];
    __shared__ __align__(8) unsigned long long full[ST], empty[ST];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long G = gridDim.x, b = blockIdx.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; ++s) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sh(&full[s])) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sh(&empty[s])), "r"(CW) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    TRIG();
    if (warp == CW) {
        if (lane == 0) {
            int it = 0;
            Cur pc; long issued = 0, fetched = 0;
            for (int l = 0; l < nl; ++l)
                for (int q = 0; q < ls[l].np; ++q) {
                    const Phase ph = ls[l].p[q];
                    const long lo = IL ? b * RW : b * ph.n / G, hi = IL ? ph.n : (b + 1) * ph.n / G;
                    for (long r0 = lo; r0 < hi; r0 += IL ? G * RW : RW, ++it) {
                        const int s = it % ST;
                        const int bytes = (int)min((long)RW, hi - r0) * K * 2;
                        if (PFB > 0) {
                            issued += bytes;
                            const char* src; long len;
                            while (fetched < issued + PFB && cur_next(ls, nl, b, G, pc, 16384, &src, &len)) {
                                fetched += len;
                                if (fetched > issued) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(src), "r"((unsigned)len) : "memory");
                            }
                        }
                        if (it >= ST) mb_wait(&empty[s], ((it / ST) - 1) & 1);
                        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sh(&full[s])), "r"(bytes) : "memory");
                        for (int o = 0; o < bytes; o += 16384)
                            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                         :: "r"(sh(ring + s * RW * K * 2 + o)), "l"(ph.w + r0 * K * 2 + o), "r"(min(16384, bytes - o)), "r"(sh(&full[s])) : "memory");
                    }
                }
        }
        return;
    }
    WAIT();
    int it = 0; unsigned target = 0;
    for (int l = 0; l < nl; ++l)
        for (int q = 0; q < ls[l].np; ++q) {
            const Phase ph = ls[l].p[q];
            const long lo = IL ? b * RW : b * ph.n / G, hi = IL ? ph.n : (b + 1) * ph.n / G;
            for (long r0 = lo; r0 < hi; r0 += IL ? G * RW : RW, ++it) {
                const int s = it % ST;
                mb_wait(&full[s], (it / ST) & 1);
                if (MODE & 2) {
                    if (lane == 0 && r0 + warp < hi) ph.y[r0 + warp] = *(const float*)(ring + (s * RW + warp) * K * 2);
                } else if (r0 + warp < hi) {
                    uint4 v[NV];
                    const uint4* row = (const uint4*)(ring + (s * RW + warp) * K * 2);
#pragma unroll
                    for (int j = 0; j < NV; ++j) v[j] = row[lane + 32 * j];
                    const float a = dot_row(v, ph.x, lane);
                    if (lane == 0) ph.y[r0 + warp] = a * 1e-3f;
                }
                __syncwarp();
                if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sh(&empty[s])) : "memory");
            }
            if (MODE & 1) continue;
            target += gridDim.x;
            asm volatile("bar.sync 1, 256;" ::: "memory");
            if (threadIdx.x == 0) {
                __threadfence();
                atomicAdd(bar, 1u);
                unsigned v;
                do { asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory"); } while (v < target);
            }
            asm volatile("bar.sync 1, 256;" ::: "memory");
        }
}

template <typename... A> void launch_plain(void (*f)(A...), int grid, int block, cudaStream_t s, A... args) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = block; c.stream = s;
    CK(cudaLaunchKernelEx(&c, f, args...));
}
template <typename... A> void launch_smem(void (*f)(A...), int grid, int block, int smem, cudaStream_t s, A... args) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = block; c.stream = s; c.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, f, args...));
}

// the dependency points alone: n grid barriers in one kernel, or one empty kernel a point
__global__ void __launch_bounds__(256) barriers(int n, unsigned* bar) {
    TRIG(); WAIT();
    unsigned target = 0;
    for (int i = 0; i < n; ++i) { target += gridDim.x; grid_sync(bar, target); }
}
__global__ void __launch_bounds__(256) empty_step(float* out) {
    TRIG(); WAIT();
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] += 1.0f;
}

template <typename... A> void launch(void (*f)(A...), int grid, int block, cudaStream_t s, A... args) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = block; c.stream = s;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, f, args...));
}

int main() {
    cudaStream_t s; CK(cudaStreamCreate(&s));
    size_t fl = 256ull << 20; float* fb; CK(cudaMalloc(&fb, fl));
    const int L = 20;
    const int rows[] = {12352, 4096, 256, 9216, 4608};  // 50, 16, 1, 36, 18 MB
    const int np = 5;
    long lrows = 0; for (int r : rows) lrows += r;
    char* w; CK(cudaMalloc(&w, (size_t)L * lrows * K * 2)); CK(cudaMemset(w, 0x3c, (size_t)L * lrows * K * 2));
    float* act; CK(cudaMalloc(&act, (size_t)L * np * 16384 * 4)); CK(cudaMemset(act, 0, (size_t)L * np * 16384 * 4));
    float* x0; CK(cudaMalloc(&x0, K * 4)); CK(cudaMemset(x0, 0, K * 4));
    std::vector<Layer> hl(L);
    long off = 0;
    for (int l = 0; l < L; ++l) {
        hl[l].np = np;
        for (int q = 0; q < np; ++q) {
            Phase& p = hl[l].p[q];
            p.w = w + off * K * 2; off += rows[q]; p.n = rows[q];
            p.y = act + (size_t)(l * np + q) * 16384;
            p.x = (l == 0 && q == 0) ? x0 : (q == 0 ? hl[l - 1].p[np - 1].y : hl[l].p[q - 1].y);
        }
    }
    Layer* dl; CK(cudaMalloc(&dl, L * sizeof(Layer))); CK(cudaMemcpy(dl, hl.data(), L * sizeof(Layer), cudaMemcpyHostToDevice));
    unsigned* bar; CK(cudaMalloc(&bar, 4096));
    float* out_dummy; CK(cudaMalloc(&out_dummy, 4096));
    int dev; CK(cudaGetDevice(&dev)); cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, dev));
    int occ; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, persist, 256, 0));
    int occg; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occg, gemv, 256, 0));
    const double mb = lrows * K * 2.0 / 1e6;
    printf("device %s, %d SMs; persist %d blocks/SM, gemv %d blocks/SM; %d layers of %.0f MB (5 GEMVs)\n", pr.name, pr.multiProcessorCount, occ, occg, L, mb);
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    auto timed = [&](const char* name, auto body) {
        std::vector<float> t;
        for (int r = 0; r < 9; ++r) {
            flush<<<1024, 256, 0, s>>>(fb, fl / 4);
            CK(cudaMemsetAsync(bar, 0, 4096, s));
            CK(cudaEventRecord(e0, s)); body(); CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000 / L);
        }
        std::sort(t.begin(), t.end());
        printf("  %-44s %7.2f us a layer  %5.2f TB/s\n", name, t[4], mb / t[4]);
    };
    std::vector<float> ref(16384), got(16384);
    auto check = [&](const char* name) {
        CK(cudaMemcpy(got.data(), hl[L - 1].p[np - 1].y, rows[np - 1] * 4, cudaMemcpyDeviceToHost));
        double d = 0; for (int i = 0; i < rows[np - 1]; ++i) d = std::max(d, (double)std::abs(got[i] - ref[i]));
        printf("  (%s: last output max |diff| vs kernels %.3g)\n", name, d);
    };
    {
        // per dependency point: 1000 grid barriers in one kernel; 1000 empty PDL kernels
        const int nb = 1000;
        for (int bps : {1, 2}) {
            std::vector<float> t;
            for (int r = 0; r < 5; ++r) {
                CK(cudaMemsetAsync(bar, 0, 4096, s));
                CK(cudaEventRecord(e0, s)); launch(barriers, pr.multiProcessorCount * bps, 256, s, nb, bar);
                CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000 / nb);
            }
            std::sort(t.begin(), t.end());
            printf("empty grid barrier, %d blocks/SM: %.2f us each\n", bps, t[2]);
        }
        for (int grid : {132, 528, 1544}) {
            std::vector<float> t;
            for (int r = 0; r < 5; ++r) {
                CK(cudaEventRecord(e0, s));
                for (int i = 0; i < nb; ++i) launch(empty_step, grid, 256, s, out_dummy);
                CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000 / nb);
            }
            std::sort(t.begin(), t.end());
            printf("empty PDL kernel chain, %d blocks: %.2f us each\n", grid, t[2]);
        }
        for (int grid : {132, 528, 1544}) {
            // the same chain captured in a CUDA graph (as etch's decode step runs)
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < nb; ++i) launch(empty_step, grid, 256, s, out_dummy);
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
            std::vector<float> t;
            for (int r = 0; r < 5; ++r) {
                CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s));
                CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000 / nb);
            }
            std::sort(t.begin(), t.end());
            printf("empty PDL kernel chain in a CUDA graph, %d blocks: %.2f us each\n", grid, t[2]);
            CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
        }
    }
    // the per-phase chain captured in a CUDA graph (as etch's decode), 1, 2 or 4 rows a warp
    auto graph_chain = [&](const char* name, auto body) {
        cudaGraph_t g; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        body();
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        timed(name, [&] { CK(cudaGraphLaunch(ge, s)); });
        CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
    };
    for (int round = 0; round < 3; ++round) {
        printf("== graph round %d\n", round + 1);
        graph_chain("graph: one launch a phase, 1 row a warp", [&] {
            for (int l = 0; l < L; ++l) for (int q = 0; q < np; ++q) launch(gemv, (hl[l].p[q].n + 7) / 8, 256, s, hl[l].p[q]);
        });
        if (round == 0) { CK(cudaStreamSynchronize(s)); CK(cudaMemcpy(ref.data(), hl[L - 1].p[np - 1].y, rows[np - 1] * 4, cudaMemcpyDeviceToHost)); }
        graph_chain("graph: one launch a phase, 2 rows a warp", [&] {
            for (int l = 0; l < L; ++l) for (int q = 0; q < np; ++q) launch(gemv_r<2>, (hl[l].p[q].n + 15) / 16, 256, s, hl[l].p[q]);
        });
        graph_chain("graph: one launch a phase, 4 rows a warp", [&] {
            for (int l = 0; l < L; ++l) for (int q = 0; q < np; ++q) launch(gemv_r<4>, (hl[l].p[q].n + 31) / 32, 256, s, hl[l].p[q]);
        });
        if (round == 0) check("graph chains (last: 4 rows a warp)");
    }
    for (int round = 0; round < 3; ++round) {
        printf("== round %d\n", round + 1);
        timed("one launch a phase (PDL)", [&] {
            for (int l = 0; l < L; ++l) for (int q = 0; q < np; ++q) launch(gemv, (hl[l].p[q].n + 7) / 8, 256, s, hl[l].p[q]);
        });
        if (round == 0) { CK(cudaStreamSynchronize(s)); CK(cudaMemcpy(ref.data(), hl[L - 1].p[np - 1].y, rows[np - 1] * 4, cudaMemcpyDeviceToHost)); }
        for (int bps = 1; bps <= occ; bps *= 2) {
            char nm[80]; snprintf(nm, 80, "persistent, one launch a layer, %d/SM", bps);
            timed(nm, [&] {
                for (int l = 0; l < L; ++l) launch(persist, pr.multiProcessorCount * bps, 256, s, (const Layer*)(dl + l), 1, bar + 32 * l);
            });
            if (round == 0) check(nm);
            snprintf(nm, 80, "persistent, one launch for 20 layers, %d/SM", bps);
            timed(nm, [&] { launch(persist, pr.multiProcessorCount * bps, 256, s, (const Layer*)dl, L, bar); });
            if (round == 0) check(nm);
        }
#define PRERUN(P) { \
        int o; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, persist_pre<P>, 256, 0)); \
        for (int bps = 1; bps <= o; bps *= 2) { \
            char nm[80]; snprintf(nm, 80, "persistent, %d rows a warp ahead, %d/SM, for 20", P, bps); \
            timed(nm, [&] { launch(persist_pre<P>, pr.multiProcessorCount * bps, 256, s, (const Layer*)dl, L, bar); }); \
            if (round == 0) check(nm); } }
        PRERUN(1) PRERUN(2) PRERUN(3) PRERUN(4) PRERUN(6)
        const int smem = ST * RW * K * 2;
        CK(cudaFuncSetAttribute(streamp<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(streamp<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        timed("streaming persistent, one launch a layer", [&] {
            for (int l = 0; l < L; ++l) launch_smem(streamp<false>, pr.multiProcessorCount, 288, smem, s, (const Layer*)(dl + l), 1, bar + 32 * l);
        });
        if (round == 0) check("streaming, a layer");
        timed("streaming persistent, one launch for 20", [&] { launch_smem(streamp<false>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); });
        if (round == 0) check("streaming, 20");
        timed("streaming interleaved stages, a layer", [&] {
            for (int l = 0; l < L; ++l) launch_smem(streamp<true>, pr.multiProcessorCount, 288, smem, s, (const Layer*)(dl + l), 1, bar + 32 * l);
        });
        if (round == 0) check("interleaved, a layer");
        timed("streaming interleaved stages, one for 20", [&] { launch_smem(streamp<true>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); });
        if (round == 0) check("interleaved, 20");
        CK(cudaFuncSetAttribute(streamp<false, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(streamp<false, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(streamp<false, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        timed("streaming, one for 20, no grid barriers", [&] { launch_smem(streamp<false, 1>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); });
        timed("streaming, one for 20, no compute", [&] { launch_smem(streamp<false, 2>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); });
        timed("streaming, one for 20, neither", [&] { launch_smem(streamp<false, 3>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); });
#define PFRUN(PFB_) { \
        CK(cudaFuncSetAttribute(streamp<false, 0, PFB_>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)); \
        CK(cudaFuncSetAttribute(streamp<false, 2, PFB_>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)); \
        timed("streaming + L2 prefetch " #PFB_ " B ahead, for 20", [&] { launch_smem(streamp<false, 0, PFB_>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); }); \
        if (round == 0) check("pf"); \
        timed("  same, a layer a launch", [&] { for (int l = 0; l < L; ++l) launch_smem(streamp<false, 0, PFB_>, pr.multiProcessorCount, 288, smem, s, (const Layer*)(dl + l), 1, bar + 32 * l); }); \
        timed("  same, no compute", [&] { launch_smem(streamp<false, 2, PFB_>, pr.multiProcessorCount, 288, smem, s, (const Layer*)dl, L, bar); }); }
        PFRUN(65536L) PFRUN(131072L) PFRUN(262144L) PFRUN(393216L)
        // no barriers at all: the same stream with every phase's input the layer input (timing only)
        timed("one launch a phase, no dependency (stream)", [&] {
            for (int l = 0; l < L; ++l) for (int q = 0; q < np; ++q) { Phase p = hl[l].p[q]; p.x = x0; launch_plain(gemv, (p.n + 7) / 8, 256, s, p); }
        });
    }
    return 0;
}
