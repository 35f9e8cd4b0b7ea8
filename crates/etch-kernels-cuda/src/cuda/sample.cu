// etch::sample (the rule is etch_kernels::sample::sample_row), in two kernels:
// - sample_part_*: grid (chunks of SAMPLE_CHUNK logits, rows): each block's argmax (first
//   maximum, NaN never wins) into a partials scratch.
// - sample_pick_*: one block of 1024 threads per row. Reads (temperature, top_k, top_p, u)
//   from the device; greedy (temperature <= 0 or NaN, or top_k == 1) merges the partials
//   and is done. Otherwise it writes p = softmax(logits / temperature) (NaN -> 0) to a
//   scratch row and finds the kept set without sorting the vocabulary: the order "p
//   descending, then index ascending" is the order of the 64-bit keys (bits of p << 32 |
//   ~index), and each cut (the top_k-th key; the shortest prefix reaching top_p; the first
//   kept key whose running sum passes u * sum(kept)) is the largest key whose prefix
//   count or mass passes a test, found digit by digit (16 passes of 4 bits, deterministic
//   block sums). When at most SAMPLE_SMALL keys are kept after top_k (the usual top_k),
//   they are gathered into shared memory, sorted, and thread 0 walks them exactly as the
//   CPU does. Sums run in a different order than the CPU's sequential ones, so a draw can
//   differ only where u lands within rounding of a boundary.

#define SAMPLE_CHUNK 4096
#define SAMPLE_SMALL 1024
#define SAMPLE_THREADS 1024

struct SampleArgs {
    const void* logits;   // [B, V]
    const float* params;  // temperature, top_k, top_p, u
    i64* out;             // [B, 1]
    float* pv;            // [B, chunks] chunk maxima
    int* pi;              // [B, chunks] their indices (-1: none)
    float* probs;         // [B, V] probabilities (sampling only)
    i64 rows, vocab, chunks;
};

// True when (v, i) beats (bv, bi) for the argmax: not NaN, and larger or equal at a lower
// index (i < 0: no candidate).
struct AmBetter {
    __device__ bool operator()(float v, int i, float bv, int bi) const {
        if (i < 0 || v != v) return false;
        return bi < 0 || v > bv || (v == bv && i < bi);
    }
};
__device__ __forceinline__ bool am_better(float v, int i, float bv, int bi) {
    return AmBetter()(v, i, bv, bi);
}

// The argmax over the block (every thread gets it); sv, si: 32 slots of shared memory.
__device__ void block_argmax(float& v, int& i, float* sv, int* si) {
    warp_best<AmBetter>(v, i);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) {
        sv[w] = v;
        si[w] = i;
    }
    __syncthreads();
    v = 0.0f;
    i = -1;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k)
        if (am_better(sv[k], si[k], v, i)) {
            v = sv[k];
            i = si[k];
        }
}

template <int DT> __device__ void sample_part(const SampleArgs& a) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const i64 r = blockIdx.y, c = blockIdx.x;
    const i64 lo = c * SAMPLE_CHUNK;
    const i64 hi = lo + SAMPLE_CHUNK < a.vocab ? lo + SAMPLE_CHUNK : a.vocab;
    float bv = 0.0f;
    int bi = -1;
    for (i64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float v = io_ld<DT>(a.logits, r * a.vocab + i);
        if (am_better(v, (int)i, bv, bi)) {
            bv = v;
            bi = (int)i;
        }
    }
    block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        a.pv[r * a.chunks + c] = bv;
        a.pi[r * a.chunks + c] = bi;
    }
}
IO_KERNELS(sample_part, SampleArgs, 256)

// The sort key of probability p at index i: descending keys are p descending, then the
// index ascending (p >= 0, so its bits order as the value).
__device__ __forceinline__ u64 sample_key(float p, i64 i) {
    return ((u64)__float_as_uint(p) << 32) | (u64)(0xffffffffu - (unsigned)i);
}
__device__ __forceinline__ i64 key_index(u64 k) { return (i64)(0xffffffffu - (unsigned)k); }
__device__ __forceinline__ float key_prob(u64 k) { return __uint_as_float((unsigned)(k >> 32)); }

// Tests of sample_search: F(κ) sums w over the keys >= κ (and >= floor).
#define SEARCH_COUNT 0  // w = 1, F >= goal
#define SEARCH_MASS 1   // w = p, F >= goal
#define SEARCH_WALK 2   // w = p, F > goal * F(floor)

struct Found {
    u64 key;
    bool ok;  // false: not even F(floor) passes
};

// The largest key κ whose F(κ) passes the mode's test, four bits a pass from the top: the
// bins count (or weigh) the keys under the bits found so far by their next digit; the
// keys above that prefix count for every digit. sh: 32 * 17 + 17 floats.
__device__ Found sample_search(const float* p, i64 n, u64 floor, int mode, float goal, float* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    u64 pre = 0;
    for (int s = 60; s >= 0; s -= 4) {
        float bins[17];  // the 16 digits, then the keys above the prefix
        for (int d = 0; d < 17; ++d) bins[d] = 0.0f;
        const u64 hp = s == 60 ? 0 : pre >> (s + 4);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const u64 key = sample_key(p[i], i);
            if (key < floor) continue;
            const float wt = mode == SEARCH_COUNT ? 1.0f : p[i];
            const u64 hk = s == 60 ? 0 : key >> (s + 4);
            if (hk == hp) bins[(key >> s) & 15] += wt;
            else if (hk > hp) bins[16] += wt;
        }
        for (int d = 0; d < 17; ++d) {
            const float v = warp_sum(bins[d]);
            if (lane == 0) sh[w * 17 + d] = v;
        }
        __syncthreads();
        if (threadIdx.x < 17) {
            float t = 0.0f;
            for (int k = 0; k < nw; ++k) t += sh[k * 17 + threadIdx.x];
            sh[32 * 17 + threadIdx.x] = t;
        }
        __syncthreads();
        const float* tot = sh + 32 * 17;
        if (s == 60 && mode == SEARCH_WALK) {
            float all = tot[16];
            for (int d = 15; d >= 0; --d) all += tot[d];
            goal *= all;
        }
        float f = tot[16];
        int pick = -1;
        for (int d = 15; d >= 0; --d) {
            f += tot[d];
            if (mode == SEARCH_WALK ? f > goal : f >= goal) {
                pick = d;
                break;
            }
        }
        if (pick < 0) {
            if (s == 60) return Found{floor, false};
            pick = 0;  // rounding between passes: keep the prefix
        }
        pre |= (u64)pick << s;
    }
    return Found{pre, true};
}

// The smallest key (the last in sampling order) over the block; sh: 32 slots.
__device__ u64 sample_min_key(const float* p, i64 n, u64* sh) {
    u64 m = ~0ull;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const u64 k = sample_key(p[i], i);
        m = k < m ? k : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const u64 x = __shfl_xor_sync(FULL_MASK, m, o);
        m = x < m ? x : m;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    m = ~0ull;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) m = sh[k] < m ? sh[k] : m;
    return m;
}

// The exclusive prefix sum of v over the block, and the total; sh: 32 ints.
__device__ int block_scan(int v, int* sh, int& total) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) sh[w] = x;
    __syncthreads();
    int before = 0;
    total = 0;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) {
        if (k < w) before += sh[k];
        total += sh[k];
    }
    return before + x - v;
}

// Sorts keys[0..SAMPLE_SMALL) descending (bitonic).
__device__ void sort_keys_desc(u64* keys) {
    for (int size = 2; size <= SAMPLE_SMALL; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < SAMPLE_SMALL / 2; t += blockDim.x) {
                const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                const bool desc = (lo & size) == 0;
                const u64 x = keys[lo], y = keys[hi];
                if (desc ? x < y : x > y) {
                    keys[lo] = y;
                    keys[hi] = x;
                }
            }
            __syncthreads();
        }
    }
}

// The draw from the kept keys >= floor (at most SAMPLE_SMALL of them): gathered, sorted,
// and walked by thread 0 as sample_row does (top_p cut, then the running sum against
// u * total).
__device__ i64 sample_small(const float* p, i64 n, u64 floor, float top_p, float u, u64* keys,
                            int* shi, i64* result) {
    int cnt = 0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) cnt += sample_key(p[i], i) >= floor;
    int total;
    int off = block_scan(cnt, shi, total);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const u64 k = sample_key(p[i], i);
        if (k < floor) continue;
        if (off < SAMPLE_SMALL) keys[off] = k;
        ++off;
    }
    for (int j = total + threadIdx.x; j < SAMPLE_SMALL; j += blockDim.x) keys[j] = 0;  // last
    __syncthreads();
    sort_keys_desc(keys);
    if (threadIdx.x == 0) {
        int kept = total < SAMPLE_SMALL ? total : SAMPLE_SMALL;
        if (top_p < 1.0f) {
            float acc = 0.0f;
            for (int j = 0; j < kept; ++j) {
                acc += key_prob(keys[j]);
                if (acc >= top_p) {
                    kept = j + 1;
                    break;
                }
            }
        }
        kept = kept < 1 ? 1 : kept;
        float sum = 0.0f;
        for (int j = 0; j < kept; ++j) sum += key_prob(keys[j]);
        const float target = u * sum;
        float acc = 0.0f;
        i64 pick = key_index(keys[kept - 1]);
        for (int j = 0; j < kept; ++j) {
            acc += key_prob(keys[j]);
            if (acc > target) {
                pick = key_index(keys[j]);
                break;
            }
        }
        *result = pick;
    }
    __syncthreads();
    return *result;
}

// Shared memory of sample_pick.
struct SampleShared {
    float sv[32];
    int si[32];
    float sh[32 * 17 + 17];
    u64 keys[SAMPLE_SMALL];
    i64 result;
};

// sample_row's draw for row r (not greedy): mx is the largest logit (-inf if all NaN),
// best the argmax (the answer whenever the probabilities do not sum to a positive,
// finite number).
template <int DT>
__device__ i64 sample_draw(const SampleArgs& a, i64 r, float mx, float temp, i64 top_k,
                           float top_p, float u, i64 best, SampleShared& sm) {
    const i64 V = a.vocab;
    float* p = a.probs + r * V;
    float sum = 0.0f;
    for (i64 i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf((io_ld<DT>(a.logits, r * V + i) - mx) / temp);
        if (e != e) e = 0.0f;
        p[i] = e;
        sum += e;
    }
    sum = block_sumf(sum, sm.sh);
    if (!(sum > 0.0f) || !(sum < 1.0f / 0.0f)) return best;
    for (i64 i = threadIdx.x; i < V; i += blockDim.x) p[i] = p[i] / sum;
    __syncthreads();
    const i64 n = top_k == 0 ? V : top_k;
    u64 floor = 0;
    if (n < V) floor = sample_search(p, V, 0, SEARCH_COUNT, (float)n, sm.sh).key;
    if (n <= SAMPLE_SMALL) return sample_small(p, V, floor, top_p, u, sm.keys, sm.si, &sm.result);
    if (n == V) floor = sample_min_key(p, V, sm.keys);
    u64 kept = floor;
    if (top_p < 1.0f) {
        const Found f = sample_search(p, V, floor, SEARCH_MASS, top_p, sm.sh);
        if (f.ok) kept = f.key;
    }
    const Found f = sample_search(p, V, kept, SEARCH_WALK, u, sm.sh);
    return key_index(f.ok ? f.key : kept);
}

template <int DT> __device__ void sample_pick(const SampleArgs& a) {
    __shared__ SampleShared sm;
    const i64 r = blockIdx.x;
    float bv = 0.0f;
    int bi = -1;
    for (i64 c = threadIdx.x; c < a.chunks; c += blockDim.x) {
        const float v = a.pv[r * a.chunks + c];
        const int i = a.pi[r * a.chunks + c];
        if (am_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    block_argmax(bv, bi, sm.sv, sm.si);
    const i64 best = bi < 0 ? 0 : bi;
    const float temp = a.params[0], kf = a.params[1], top_p = a.params[2], u = a.params[3];
    // top_k as sample_out converts it: finite and positive, else 0 (all); at most V.
    const bool finite_k = kf > 0.0f && kf < 1.0f / 0.0f;
    const i64 top_k = !finite_k ? 0 : (kf >= (float)a.vocab ? a.vocab : (i64)kf);
    i64 pick = best;
    if (temp > 0.0f && top_k != 1 && a.vocab > 1) {
        const float mx = bi < 0 ? -1.0f / 0.0f : bv;
        pick = sample_draw<DT>(a, r, mx, temp, top_k, top_p, u, best, sm);
    }
    if (threadIdx.x == 0) a.out[r] = pick;
}
IO_KERNELS(sample_pick, SampleArgs, SAMPLE_THREADS)
