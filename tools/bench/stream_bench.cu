// Streaming-read microbenchmark (issue #13): how fast can a short kernel read 16–50 MB of
// weights that are not in L2, the sizes of the Qwen 3.5 MoE decode GEMVs and expert kernels?
// Session 12 measured etch's pattern (16-byte loads, 8 in flight a thread) at ≈2.4–3.0 TB/s
// for these sizes; this compares it with more loads in flight, the `L2::256B` prefetch hint,
// and Hopper bulk copies (`cp.async.bulk` into a shared-memory ring, one issuing thread a
// block, mbarrier completion). Each figure is a chain of launches with programmatic dependent
// launch (each kernel waits for the previous one before reading, as the decode graph does),
// every launch reading its own slice, so L2 is cold and launch gaps are hidden; time / launch.
// Not part of etch; run on a GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/bench/stream_bench.cu -o /tmp/sb && /tmp/sb
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

template <int HINT> __device__ __forceinline__ uint4 ld16(const uint4* q) {
    uint4 v;
    if (HINT == 0) v = __ldg(q);
    else asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(q));
    return v;
}

// grid-stride read, NV 16-byte loads in flight a thread
template <int NV, int HINT> __global__ void __launch_bounds__(256) stream_ld(const uint4* p, long nvec, float* out) {
    TRIG(); WAIT();
    const long t = blockIdx.x * (long)blockDim.x + threadIdx.x, nt = gridDim.x * (long)blockDim.x;
    unsigned acc = 0;
    for (long i = t; i < nvec; i += NV * nt) {
        uint4 v[NV];
#pragma unroll
        for (int j = 0; j < NV; ++j) if (i + j * nt < nvec) v[j] = ld16<HINT>(p + i + j * nt);
#pragma unroll
        for (int j = 0; j < NV; ++j) if (i + j * nt < nvec) acc ^= v[j].x ^ v[j].w;
    }
    if (acc == 0x12345678) out[0] = 1;
}

// contiguous per block: block b reads [b*per, (b+1)*per), NV loads in flight a thread
template <int NV> __global__ void __launch_bounds__(256) stream_blk(const uint4* p, long nvec, float* out) {
    TRIG(); WAIT();
    const long per = (nvec + gridDim.x - 1) / gridDim.x, b0 = blockIdx.x * per;
    const long e = min(nvec, b0 + per);
    unsigned acc = 0;
    for (long i = b0 + threadIdx.x; i < e; i += NV * 256) {
        uint4 v[NV];
#pragma unroll
        for (int j = 0; j < NV; ++j) if (i + j * 256 < e) v[j] = ld16<1>(p + i + j * 256);
#pragma unroll
        for (int j = 0; j < NV; ++j) if (i + j * 256 < e) acc ^= v[j].x ^ v[j].w;
    }
    if (acc == 0x12345678) out[0] = 1;
}

__device__ __forceinline__ unsigned sh(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// bulk copies: chunks of CH bytes, block b takes chunks b, b + grid, ...; an S-stage ring in
// shared memory, thread 0 issues (pieces of ≤ 16 KB), every thread consumes its part
template <int CH, int S> __global__ void __launch_bounds__(256) stream_bulk(const char* p, long bytes, float* out) {
    extern __shared__ __align__(128) char ring[];
    __shared__ __align__(8) unsigned long long bar[S];
    TRIG();
    const long nch = bytes / CH;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sh(&bar[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    WAIT();
    auto issue = [&](long c, int s) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sh(&bar[s])), "r"(CH) : "memory");
        for (int o = 0; o < CH; o += 16384) {
            const int n = CH - o < 16384 ? CH - o : 16384;
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(sh(ring + s * CH + o)), "l"(p + c * CH + o), "r"(n), "r"(sh(&bar[s])) : "memory");
        }
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < S; ++s) { const long c = blockIdx.x + (long)s * gridDim.x; if (c < nch) issue(c, s); }
    unsigned acc = 0; int it = 0;
    for (long c = blockIdx.x; c < nch; c += gridDim.x, ++it) {
        const int s = it % S; const unsigned par = (it / S) & 1;
        unsigned done;
        do {
            asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                         : "=r"(done) : "r"(sh(&bar[s])), "r"(par) : "memory");
        } while (!done);
        const uint4* q = (const uint4*)(ring + s * CH);
#pragma unroll 4
        for (int i = threadIdx.x; i < CH / 16; i += 256) { const uint4 v = q[i]; acc ^= v.x ^ v.w; }
        __syncthreads();
        if (threadIdx.x == 0) { const long cn = c + (long)S * gridDim.x; if (cn < nch) issue(cn, s); }
    }
    if (acc == 0x12345678) out[0] = 1;
}

template <typename... A> void launch(void (*f)(A...), int grid, int block, int smem, cudaStream_t s, A... args) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = block; c.stream = s; c.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, f, args...));
}

int main() {
    cudaStream_t s; CK(cudaStreamCreate(&s));
    size_t fl = 256ull << 20; float* fb; CK(cudaMalloc(&fb, fl));
    const int R = 20;
    size_t wbytes = (size_t)R * (1024ull << 20); char* w; CK(cudaMalloc(&w, wbytes)); CK(cudaMemset(w, 0x3c, wbytes));
    float* out; CK(cudaMalloc(&out, 1 << 20));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int dev; CK(cudaGetDevice(&dev)); cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, dev));
    const int sms = pr.multiProcessorCount;
    printf("device %s, L2 %d MB, SMs %d, chain of %d launches, each its own cold slice\n", pr.name, pr.l2CacheSize >> 20, sms, R);
    auto timed = [&](long bytes, auto body) {
        std::vector<float> t;
        for (int r = 0; r < 7; ++r) {
            flush<<<1024, 256, 0, s>>>(fb, fl / 4);
            CK(cudaEventRecord(e0, s));
            for (int i = 0; i < R; ++i) body(w + (size_t)i * (1024ull << 20));
            CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000 / R);
        }
        std::sort(t.begin(), t.end());
        return t[3];
    };
    auto row = [&](const char* name, long bytes, float us) {
        printf("  %-34s %7.2f us  %5.2f TB/s\n", name, us, bytes / us * 1e-6);
    };
#define BULK(CH, S, BPS)                                                                         \
    {                                                                                            \
        CK(cudaFuncSetAttribute(stream_bulk<CH, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, CH * S)); \
        char nm[64]; snprintf(nm, 64, "bulk %dK x %d stages, %d/SM", CH / 1024, S, BPS);       \
        row(nm, bytes, timed(bytes, [&](char* p) { launch(stream_bulk<CH, S>, sms * BPS, 256, CH * S, s, (const char*)p, bytes, out); })); \
    }
    for (int round = 0; round < 2; ++round)
        for (long mb : {4L, 16L, 32L, 50L, 1024L}) {
            const long bytes = mb << 20, nvec = bytes / 16;
            printf("== %ld MB (round %d)\n", mb, round + 1);
            row("ld x8 (etch's pattern), 1024 blocks", bytes, timed(bytes, [&](char* p) { launch(stream_ld<8, 0>, 1024, 256, 0, s, (const uint4*)p, nvec, out); }));
            row("ld x8 L2::256B, 1024 blocks", bytes, timed(bytes, [&](char* p) { launch(stream_ld<8, 1>, 1024, 256, 0, s, (const uint4*)p, nvec, out); }));
            row("ld x16 L2::256B, 8/SM", bytes, timed(bytes, [&](char* p) { launch(stream_ld<16, 1>, sms * 8, 256, 0, s, (const uint4*)p, nvec, out); }));
            row("ld x8 L2::256B, 8/SM", bytes, timed(bytes, [&](char* p) { launch(stream_ld<8, 1>, sms * 8, 256, 0, s, (const uint4*)p, nvec, out); }));
            row("ld x8 contiguous a block, 8/SM", bytes, timed(bytes, [&](char* p) { launch(stream_blk<8>, sms * 8, 256, 0, s, (const uint4*)p, nvec, out); }));
            row("ld x16 contiguous a block, 4/SM", bytes, timed(bytes, [&](char* p) { launch(stream_blk<16>, sms * 4, 256, 0, s, (const uint4*)p, nvec, out); }));
            BULK(16384, 8, 1)
            BULK(32768, 6, 1)
            BULK(16384, 4, 2)
            BULK(8192, 8, 2)
            BULK(8192, 4, 4)
            BULK(4096, 8, 4)
        }
    return 0;
}
