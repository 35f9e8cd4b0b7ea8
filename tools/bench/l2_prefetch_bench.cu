// L2 prefetch microbenchmark (issue #13, BENCHMARKS.md "Session 12"): does pulling a GEMV's
// weights into L2 while a latency-bound kernel runs (PDL, a prefetch grid co-resident with
// it, or the GEMV's own blocks prefetching later waves' rows before their wait) shorten
// the chain? Kernels: etch's one-row GEMV (a warp per row, 8 16-byte loads a lane before the
// wait), variants (more rows a warp, persistent grid), a streaming read, a spin kernel that
// stands for a latency-bound kernel, and prefetch grids. Not part of etch; run on a GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/bench/l2_prefetch_bench.cu -o /tmp/l2bench && /tmp/l2bench
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define TRIG() asm volatile("griddepcontrol.launch_dependents;" :::)

__global__ void flush(float* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] += 1.0f;
}

__device__ __forceinline__ float bf(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
    const unsigned short* a = (const unsigned short*)&w; const unsigned short* b = (const unsigned short*)&x;
    float s = 0; for (int i = 0; i < 8; ++i) s += bf(a[i]) * bf(b[i]); return s;
}

// one warp per row, first 8 vectors per lane fetched before the wait (as etch's gemv_group)
__global__ void __launch_bounds__(256) gemv(const char* w, const char* x, float* out, int n, int k, int ev) {
    TRIG();
    const int lane = threadIdx.x & 31; const long r = blockIdx.x * 8L + (threadIdx.x >> 5);
    const int nv = k / 8; uint4 v[8];
    const char* row = w + r * (long)k * 2;
    if (r < n) {
#pragma unroll
        for (int p = 0; p < 8; ++p) if (lane + 32 * p < nv) {
            if (ev) asm volatile("{.reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;}" : "=r"(v[p].x), "=r"(v[p].y), "=r"(v[p].z), "=r"(v[p].w) : "l"(row + (lane + 32 * p) * 16));
            else v[p] = __ldg((const uint4*)(row + (lane + 32 * p) * 16));
        }
    }
    WAIT();
    if (r >= n) return;
    float a = 0;
#pragma unroll
    for (int p = 0; p < 8; ++p) if (lane + 32 * p < nv) a += dot8(v[p], ((const uint4*)x)[lane + 32 * p]);
    for (int c = lane + 256; c < nv; c += 32) a += dot8(__ldg((const uint4*)(row + c * 16)), ((const uint4*)x)[c]);
    for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
    if (lane == 0) out[r] = a;
}


// variants: RPW rows per warp, PF vectors per lane of each fetched before the wait
template <int PF, int RPW> __global__ void __launch_bounds__(256) gemv_v(const char* w, const char* x, float* out, int n, int k) {
    TRIG();
    const int lane = threadIdx.x & 31; const long r0 = (blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5)) * RPW;
    const int nv = k / 8; uint4 v[RPW][PF];
#pragma unroll
    for (int q = 0; q < RPW; ++q) {
        const char* row = w + (r0 + q) * (long)k * 2;
        if (r0 + q < n) {
#pragma unroll
            for (int p = 0; p < PF; ++p) if (lane + 32 * p < nv) v[q][p] = __ldg((const uint4*)(row + (lane + 32 * p) * 16));
        }
    }
    WAIT();
#pragma unroll
    for (int q = 0; q < RPW; ++q) {
        if (r0 + q >= n) return;
        const char* row = w + (r0 + q) * (long)k * 2;
        float a = 0;
#pragma unroll
        for (int p = 0; p < PF; ++p) if (lane + 32 * p < nv) a += dot8(v[q][p], ((const uint4*)x)[lane + 32 * p]);
        for (int c = lane + 32 * PF; c < nv; c += 32) a += dot8(__ldg((const uint4*)(row + c * 16)), ((const uint4*)x)[c]);
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
        if (lane == 0) out[r0 + q] = a;
    }
}

// persistent: warps stride over rows, the next row's loads issued before this row's sums
template <int PF> __global__ void __launch_bounds__(256) gemv_p(const char* w, const char* x, float* out, int n, int k) {
    TRIG();
    const int lane = threadIdx.x & 31; const long step = gridDim.x * (long)(blockDim.x >> 5);
    long r = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const int nv = k / 8; uint4 a0[PF], a1[PF];
    auto fetch = [&](long rr, uint4* v) {
        const char* row = w + rr * (long)k * 2;
        if (rr < n) {
#pragma unroll
            for (int p = 0; p < PF; ++p) if (lane + 32 * p < nv) v[p] = __ldg((const uint4*)(row + (lane + 32 * p) * 16));
        }
    };
    fetch(r, a0);
    WAIT();
    for (; r < n; r += 2 * step) {
        fetch(r + step, a1);
        float a = 0;
#pragma unroll
        for (int p = 0; p < PF; ++p) if (lane + 32 * p < nv) a += dot8(a0[p], ((const uint4*)x)[lane + 32 * p]);
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
        if (lane == 0) out[r] = a;
        if (r + step >= n) break;
        fetch(r + 2 * step, a0);
        a = 0;
#pragma unroll
        for (int p = 0; p < PF; ++p) if (lane + 32 * p < nv) a += dot8(a1[p], ((const uint4*)x)[lane + 32 * p]);
        for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
        if (lane == 0) out[r + step] = a;
    }
}

// pure streaming read (reference): each thread sums 16-byte loads, 8 in flight
__global__ void __launch_bounds__(256) stream(const uint4* p, long nvec, float* out) {
    TRIG(); WAIT();
    const long t = blockIdx.x * (long)blockDim.x + threadIdx.x, nt = gridDim.x * (long)blockDim.x;
    unsigned acc = 0;
    for (long i = t; i < nvec; i += 8 * nt) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) if (i + j * nt < nvec) v[j] = __ldg(p + i + j * nt);
#pragma unroll
        for (int j = 0; j < 8; ++j) if (i + j * nt < nvec) acc ^= v[j].x ^ v[j].w;
    }
    if (acc == 0x12345678) out[0] = 1;
}


// base + L2 prefetch before the wait: the row tail beyond the registers, and (blocks below
// `ahead`) the rows of blocks b + j*ahead, up to `waves` waves ahead
__global__ void __launch_bounds__(256) gemv_a(const char* w, const char* x, float* out, int n, int k, int ahead, int waves) {
    TRIG();
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5; const long r = blockIdx.x * 8L + wp;
    const int nv = k / 8; uint4 v[8];
    const long rb = (long)k * 2;
    const char* row = w + r * rb;
    if (r < n) {
#pragma unroll
        for (int p = 0; p < 8; ++p) if (lane + 32 * p < nv) v[p] = __ldg((const uint4*)(row + (lane + 32 * p) * 16));
        for (long o = 4096 + lane * 128; o < rb; o += 32 * 128) asm volatile("prefetch.global.L2 [%0];" :: "l"(row + o));
    }
    if (blockIdx.x < ahead)
        for (int j = 1; j <= waves; ++j) {
            const long q = (blockIdx.x + (long)j * ahead) * 8 + wp;
            if (q >= n) break;
            for (long o = lane * 128; o < rb; o += 32 * 128) asm volatile("prefetch.global.L2 [%0];" :: "l"(w + q * rb + o));
        }
    WAIT();
    if (r >= n) return;
    float a = 0;
#pragma unroll
    for (int p = 0; p < 8; ++p) if (lane + 32 * p < nv) a += dot8(v[p], ((const uint4*)x)[lane + 32 * p]);
    for (int c = lane + 256; c < nv; c += 32) a += dot8(__ldg((const uint4*)(row + c * 16)), ((const uint4*)x)[c]);
    for (int o = 16; o; o >>= 1) a += __shfl_xor_sync(~0u, a, o);
    if (lane == 0) out[r] = a;
}

// latency-bound stand-in: every block waits, then spins `ns` nanoseconds (globaltimer)
__global__ void __launch_bounds__(256) spin(long ns) {
    TRIG(); WAIT();
    if (threadIdx.x == 0) {
        unsigned long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
    }
    __syncthreads();
}

// prefetch grid: trigger, prefetch [p, p+bytes) into L2, then wait for the previous grid
__global__ void __launch_bounds__(128) pf(const char* p, long bytes, int mode) {
    TRIG();
    const long tid = blockIdx.x * (long)blockDim.x + threadIdx.x, nt = (long)gridDim.x * blockDim.x;
    if (mode == 0) {
        for (long o = tid * 128; o < bytes; o += nt * 128) asm volatile("prefetch.global.L2 [%0];" :: "l"(p + o));
    } else if (mode == 1) {
        for (long o = tid * 128; o < bytes; o += nt * 128) asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(p + o));
    } else if (mode == 2) {
        for (long o = tid * 4096; o < bytes; o += nt * 4096) {
            long sz = bytes - o < 4096 ? bytes - o : 4096;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p + o), "r"((unsigned)sz) : "memory");
        }
    }
    WAIT();
}

template <typename... A> void launch(void (*f)(A...), int grid, int block, cudaStream_t s, bool pdl, A... args) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = block; c.stream = s;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at; c.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&c, f, args...));
}

int main() {
    cudaStream_t s; CK(cudaStreamCreate(&s));
    size_t fl = 256ull << 20; float* fb; CK(cudaMalloc(&fb, fl));
    size_t wbytes = 64ull << 20; char* w; CK(cudaMalloc(&w, wbytes)); CK(cudaMemset(w, 0x3c, wbytes));
    char* x; CK(cudaMalloc(&x, 16384)); CK(cudaMemset(x, 0x3c, 16384));
    float* out; CK(cudaMalloc(&out, 1 << 20));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int dev; CK(cudaGetDevice(&dev)); cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, dev));
    printf("device %s, L2 %d MB, SMs %d\n", pr.name, pr.l2CacheSize >> 20, pr.multiProcessorCount);
    struct Shape { const char* name; int n, k; } shapes[] = {{"out_proj 2048x4096 (16 MB)", 2048, 4096}, {"in_proj 12352x2048 (50 MB)", 12352, 2048}, {"qkv 8192x2048 (32 MB)", 8192, 2048}};
    const int reps = 30;
    auto timed = [&](auto body) {
        std::vector<float> t;
        for (int r = 0; r < reps; ++r) {
            flush<<<1024, 256, 0, s>>>(fb, fl / 4);
            CK(cudaEventRecord(e0, s)); body(); CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000);
        }
        std::sort(t.begin(), t.end()); return t[reps / 2];
    };
    const float spin10 = timed([&] { launch(spin, 128, 256, s, true, 10000L); });
    const float spin3 = timed([&] { launch(spin, 128, 256, s, true, 3000L); });
    printf("spin 10 us alone %.2f us, spin 3 %.2f\n", spin10, spin3);
    for (auto& sh : shapes) {
        long bytes = (long)sh.n * sh.k * 2; int g = (sh.n + 7) / 8;
        printf("== %s\n", sh.name);
        printf("gemv cold                          %7.2f us\n", timed([&] { launch(gemv, g, 256, s, true, (const char*)w, (const char*)x, out, sh.n, sh.k, 0); }));
        printf("gemv cold evict_first              %7.2f us\n", timed([&] { launch(gemv, g, 256, s, true, (const char*)w, (const char*)x, out, sh.n, sh.k, 1); }));
        if (0) printf("gemv warm (2nd of two)             %7.2f us (pair)\n", timed([&] { launch(gemv, g, 256, s, true, (const char*)w, (const char*)x, out, sh.n, sh.k, 0); launch(gemv, g, 256, s, true, (const char*)w, (const char*)x, out, sh.n, sh.k, 0); }));
        auto chain = [&](const char* name, auto lg) {
            float cold = timed([&] { lg(); });
            float pair = timed([&] { lg(); lg(); });
            float sp3 = timed([&] { launch(spin, 128, 256, s, true, 3000L); lg(); });
            float sp = timed([&] { launch(spin, 128, 256, s, true, 10000L); lg(); });
            printf("%-30s cold %6.2f warm %6.2f  after spin3 %6.2f  after spin10 %6.2f us\n", name, cold, pair - cold, sp3 - spin3, sp - spin10);
        };
        for (int rep = 0; rep < 2; ++rep) {
            chain("gemv base", [&] { launch(gemv, g, 256, s, true, (const char*)w, (const char*)x, out, sh.n, sh.k, 0); });
            for (int ahead : {264, 396, 528})
                for (int waves : {1, 2, 4}) {
                    if (ahead >= g && waves > 1) continue;
                    char nm[64]; snprintf(nm, 64, "ahead %d waves %d", ahead, waves);
                    chain(nm, [&] { launch(gemv_a, g, 256, s, true, (const char*)w, (const char*)x, out, sh.n, sh.k, ahead, waves); });
                }
        }
    }
    return 0;
}
