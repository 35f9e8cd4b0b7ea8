// MoE down-projection microbenchmark (issue #13, BENCHMARKS.md "Session 13"): why does
// etch's decode kernel `moe_down_row` (a warp per hidden unit over the 9 slots: 8 selected
// experts and the shared one, 18 MB of bf16 weights of the 35B-A3B) move its bytes at only
// ~1.3 TB/s? Same access pattern, cold L2 (a 256 MB write between launches), timed with CUDA
// events, medians of 30:
//   row9 spread   the kernel's pattern, experts 3, 40, 77, ... (9 distinct 2 MB regions)
//   row9 adjacent the same with experts 0..8 (one contiguous 18 MB region)
//   slot-major    a block per (slot, 64 hidden units), a warp per 8 rows of one expert
//   stream        a plain 18 MB read, 16-byte loads, 8 in flight a lane
// and (session 17) what makes row9 slow: its loads alone (no products, no staging), the
// activations staged before the weight loads, the activations read from global memory
// without staging, loads without L1 allocation, and two warps a hidden unit.
// Not part of etch; run on a GPU:
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/bench/moe_down_bench.cu -o /tmp/mdb && /tmp/mdb
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int H = 2048, I = 512, E = 256, S = 9;

__global__ void flush(float* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] += 1.0f;
}

__device__ __forceinline__ float dot8(uint4 w, const float* x) {
    const unsigned* a = (const unsigned*)&w;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) s += __uint_as_float(a[i] << 16) * x[2 * i] + __uint_as_float(a[i] & 0xffff0000u) * x[2 * i + 1];
    return s;
}

__device__ __forceinline__ float wsum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    return v;
}

// etch's moe_down_row pattern: a warp per hidden unit h, both 16-byte chunks of each of the
// 9 slots' rows loaded at once, activations (float) from shared memory.
__global__ void __launch_bounds__(256, 2) row9(const char* down, const int* sel, const float* act, float* out) {
    __shared__ float xs[S * I];
    const int lane = threadIdx.x & 31;
    const int h = blockIdx.x * 8 + (threadIdx.x >> 5);
    const int mine = lane < S ? sel[lane] : 0;
    uint4 w0[S], w1[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const long e = __shfl_sync(~0u, mine, s);
        const char* row = down + (e * H + h) * (long)I * 2;
        w0[s] = *(const uint4*)(row + lane * 16);
        w1[s] = *(const uint4*)(row + (lane + 32) * 16);
    }
    for (int i = threadIdx.x; i < S * I; i += blockDim.x) xs[i] = act[i];
    __syncthreads();
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < S; ++s) acc += wsum(dot8(w0[s], xs + s * I + lane * 8) + dot8(w1[s], xs + s * I + (lane + 32) * 8));
    if (lane == 0) out[h] = acc;
}

// A block per (slot, 64 hidden units): warp w takes rows h0 + 8w .. h0 + 8w + 7 of one
// expert (8 contiguous KB), partial sums per (slot, h) to out (no combine).
__global__ void __launch_bounds__(256) slot_major(const char* down, const int* sel, const float* act, float* out) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int s = blockIdx.y;
    const long e = sel[s];
    const int h0 = blockIdx.x * 64 + w * 8;
    const char* base = down + (e * H + h0) * (long)I * 2;
    uint4 v0[8], v1[8];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        v0[r] = *(const uint4*)(base + r * I * 2 + lane * 16);
        v1[r] = *(const uint4*)(base + r * I * 2 + (lane + 32) * 16);
    }
    const float* x = act + s * I;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        const float y = wsum(dot8(v0[r], x + lane * 8) + dot8(v1[r], x + (lane + 32) * 8));
        if (lane == 0) out[s * H + h0 + r] = y;
    }
}

// A plain read of n 16-byte vectors, 8 in flight a lane.
__global__ void __launch_bounds__(256) stream(const uint4* p, long n, float* out) {
    float acc = 0.0f;
    const long t = blockIdx.x * (long)blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
    for (long i = t; i < n; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) v[q] = i + q * stride < n ? p[i + q * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc += __uint_as_float(v[q].x) + __uint_as_float(v[q].w);
    }
    if (acc == 12345.0f) out[0] = acc;
}


// row9's loads only: the same 18 loads a lane, no staging and no products (xor of words).
__global__ void __launch_bounds__(256, 2) row9_loads(const char* down, const int* sel, const float* act, float* out) {
    const int lane = threadIdx.x & 31;
    const int h = blockIdx.x * 8 + (threadIdx.x >> 5);
    const int mine = lane < S ? sel[lane] : 0;
    uint4 w0[S], w1[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const long e = __shfl_sync(~0u, mine, s);
        const char* row = down + (e * H + h) * (long)I * 2;
        w0[s] = *(const uint4*)(row + lane * 16);
        w1[s] = *(const uint4*)(row + (lane + 32) * 16);
    }
    unsigned x = 0;
#pragma unroll
    for (int s = 0; s < S; ++s) x ^= w0[s].x ^ w1[s].w;
    if (x == 0x12345u) out[h] = 1.0f;
}

template <int MODE>  // 0: stage activations first; 1: no staging (float4 loads from global); 2: .nc no-allocate weights
__global__ void __launch_bounds__(256, 2) row9_v(const char* down, const int* sel, const float* act, float* out) {
    __shared__ float xs[S * I];
    const int lane = threadIdx.x & 31;
    const int h = blockIdx.x * 8 + (threadIdx.x >> 5);
    const int mine = lane < S ? sel[lane] : 0;
    if (MODE == 0) {
        for (int i = threadIdx.x; i < S * I; i += blockDim.x) xs[i] = act[i];
    }
    uint4 w0[S], w1[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const long e = __shfl_sync(~0u, mine, s);
        const char* row = down + (e * H + h) * (long)I * 2;
        if (MODE == 2) {
            const uint4* q0 = (const uint4*)(row + lane * 16);
            const uint4* q1 = (const uint4*)(row + (lane + 32) * 16);
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w0[s].x), "=r"(w0[s].y), "=r"(w0[s].z), "=r"(w0[s].w) : "l"(q0));
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w1[s].x), "=r"(w1[s].y), "=r"(w1[s].z), "=r"(w1[s].w) : "l"(q1));
        } else {
            w0[s] = *(const uint4*)(row + lane * 16);
            w1[s] = *(const uint4*)(row + (lane + 32) * 16);
        }
    }
    if (MODE == 2) {
        for (int i = threadIdx.x; i < S * I; i += blockDim.x) xs[i] = act[i];
    }
    if (MODE != 1) __syncthreads();
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < S; ++s) {
        float p;
        if (MODE == 1) {
            const float4* a = (const float4*)(act + s * I);
            float x0[8], x1[8];
            *(float4*)x0 = __ldg(a + lane * 2); *(float4*)(x0 + 4) = __ldg(a + lane * 2 + 1);
            *(float4*)x1 = __ldg(a + (lane + 32) * 2); *(float4*)(x1 + 4) = __ldg(a + (lane + 32) * 2 + 1);
            p = dot8(w0[s], x0) + dot8(w1[s], x1);
        } else {
            p = dot8(w0[s], xs + s * I + lane * 8) + dot8(w1[s], xs + s * I + (lane + 32) * 8);
        }
        acc += wsum(p);
    }
    if (lane == 0) out[h] = acc;
}

// Two warps a hidden unit: warp pair (h, half) takes chunk `half` of each of the 9 rows (9
// loads a lane), partial sums combined through shared memory.
__global__ void __launch_bounds__(256, 2) row9_half(const char* down, const int* sel, const float* act, float* out) {
    __shared__ float xs[S * I];
    __shared__ float part[8];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int h = blockIdx.x * 4 + (w >> 1), half = w & 1;
    const int mine = lane < S ? sel[lane] : 0;
    uint4 wv[S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const long e = __shfl_sync(~0u, mine, s);
        wv[s] = *(const uint4*)(down + (e * H + h) * (long)I * 2 + (lane + 32 * half) * 16);
    }
    for (int i = threadIdx.x; i < S * I; i += blockDim.x) xs[i] = act[i];
    __syncthreads();
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < S; ++s) acc += wsum(dot8(wv[s], xs + s * I + (lane + 32 * half) * 8));
    if (lane == 0) part[w] = acc;
    __syncthreads();
    if (threadIdx.x < 4) out[blockIdx.x * 4 + threadIdx.x] = part[2 * threadIdx.x] + part[2 * threadIdx.x + 1];
}

int main() {
    char* down;
    const size_t bytes = (size_t)E * H * I * 2;
    CK(cudaMalloc(&down, bytes));
    CK(cudaMemset(down, 0x3c, bytes));
    float *act, *out, *junk;
    int* sel;
    CK(cudaMalloc(&act, S * I * 4));
    CK(cudaMemset(act, 0, S * I * 4));
    CK(cudaMalloc(&out, S * H * 4));
    CK(cudaMalloc(&sel, S * 4));
    const size_t jn = 64 << 20;
    CK(cudaMalloc(&junk, jn * 4));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    auto time = [&](const char* name, auto launch) {
        std::vector<float> t;
        for (int r = 0; r < 31; ++r) {
            flush<<<1024, 256>>>(junk, jn);
            CK(cudaEventRecord(a));
            launch();
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (r) t.push_back(ms * 1000.0f);
        }
        std::sort(t.begin(), t.end());
        printf("%-28s median %6.2f us  min %6.2f us  %5.2f TB/s (18.9 MB)\n", name, t[t.size() / 2], t[0], 18.87e6 / (t[t.size() / 2] * 1e-6) / 1e12);
    };
    int spread[S] = {3, 40, 77, 120, 150, 181, 200, 230, 255};
    int adj[S] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    for (int round = 0; round < 2; ++round) {
        CK(cudaMemcpy(sel, spread, sizeof spread, cudaMemcpyHostToDevice));
        time("row9, spread experts", [&] { row9<<<H / 8, 256>>>(down, sel, act, out); });
        time("slot-major, spread experts", [&] { slot_major<<<dim3(H / 64, S), 256>>>(down, sel, act, out); });
        CK(cudaMemcpy(sel, adj, sizeof adj, cudaMemcpyHostToDevice));
        time("row9, adjacent experts", [&] { row9<<<H / 8, 256>>>(down, sel, act, out); });
        time("slot-major, adjacent experts", [&] { slot_major<<<dim3(H / 64, S), 256>>>(down, sel, act, out); });
        time("row9 loads only", [&] { row9_loads<<<H / 8, 256>>>(down, sel, act, out); });
        time("row9, staging first", [&] { row9_v<0><<<H / 8, 256>>>(down, sel, act, out); });
        time("row9, no staging", [&] { row9_v<1><<<H / 8, 256>>>(down, sel, act, out); });
        time("row9, no-allocate loads", [&] { row9_v<2><<<H / 8, 256>>>(down, sel, act, out); });
        time("row9, two warps a unit", [&] { row9_half<<<H / 4, 256>>>(down, sel, act, out); });
        time("stream 18 MB", [&] { stream<<<132 * 4, 256>>>((const uint4*)down, 18870000L / 16, out); });
        time("stream 18 MB, 2x blocks", [&] { stream<<<132 * 8, 256>>>((const uint4*)down, 18870000L / 16, out); });
    }
    CK(cudaGetLastError());
    return 0;
}
