// Reductions: one warp per output element. Lanes stride over the reduced elements and
// combine with warp shuffles. Floats accumulate in float (double for f64), integers in i64.

#define RK_SUM 0
#define RK_MEAN 1
#define RK_PROD 2
#define RK_AMAX 3
#define RK_AMIN 4
#define RK_ANY 5
#define RK_ALL 6
#define RK_ARGMAX 7
#define RK_ARGMIN 8
#define RK_VAR 9
#define RK_STD 10

struct RedArgs {
    const void* in;
    void* out;   // values (or argmax/argmin indices)
    void* out2;  // indices of max.dim / min.dim, or null
    int dt_in, dt_out, kind, nk, nr, pad;
    i64 n_out, count;
    double corr;
    i64 kept[MAXD], kept_in[MAXD], kept_out[MAXD], kept_out2[MAXD];
    i64 red[MAXD], red_in[MAXD];
};

__device__ __forceinline__ i64 red_off(const RedArgs& a, i64 j) {
    if (a.nr == 1) return j * a.red_in[0];
    i64 o = 0;
    for (int d = a.nr - 1; d >= 0; --d) {
        i64 c = j % a.red[d];
        j /= a.red[d];
        o += c * a.red_in[d];
    }
    return o;
}

template <typename C> __device__ __forceinline__ C shfl(C v, int off) { return __shfl_down_sync(0xffffffffu, v, off); }

template <typename C> __device__ __forceinline__ bool nan_(C v) { return v != v; }

// (v, k) beats (b, bk) for argmax (mx) / argmin: NaN first, then the extreme, then the
// lower index. `has` flags mark empty lanes.
template <typename C> __device__ __forceinline__ bool beats(C v, i64 k, bool hv, C b, i64 bk, bool hb, bool mx) {
    if (!hv) return false;
    if (!hb) return true;
    bool vn = nan_(v), bn = nan_(b);
    if (vn || bn) return vn && (!bn || k < bk);
    if (v == b) return k < bk;
    return mx ? v > b : v < b;
}

template <typename C> __device__ __forceinline__ C warp_sum(C v) {
    for (int off = 16; off > 0; off >>= 1) v += shfl(v, off);
    return v;
}

template <typename C>
__device__ void reduce_one(const RedArgs& a, i64 base, i64 oo, i64 oo2, int lane) {
    const int kind = a.kind;
    if (kind == RK_ARGMAX || kind == RK_ARGMIN || a.out2) {
        bool mx = kind == RK_ARGMAX || kind == RK_AMAX;
        C b = (C)0; i64 bk = 0; bool hb = false;
        for (i64 j = lane; j < a.count; j += 32) {
            C v = ld<C>(a.in, a.dt_in, base + red_off(a, j));
            if (beats(v, j, true, b, bk, hb, mx)) { b = v; bk = j; hb = true; }
        }
        for (int off = 16; off > 0; off >>= 1) {
            C v = shfl(b, off); i64 k = shfl(bk, off); bool h = shfl((int)hb, off);
            if (beats(v, k, h, b, bk, hb, mx)) { b = v; bk = k; hb = h; }
        }
        if (lane == 0) {
            if (a.out2) { st(a.out, a.dt_out, oo, b); ((i64*)a.out2)[oo2] = bk; }
            else ((i64*)a.out)[oo] = bk;
        }
        return;
    }
    if (kind == RK_VAR || kind == RK_STD) {
        C s = (C)0;
        for (i64 j = lane; j < a.count; j += 32) s += ld<C>(a.in, a.dt_in, base + red_off(a, j));
        s = warp_sum(s);
        C mean = __shfl_sync(0xffffffffu, s, 0) / (C)a.count;
        C q = (C)0;
        for (i64 j = lane; j < a.count; j += 32) {
            C d = ld<C>(a.in, a.dt_in, base + red_off(a, j)) - mean;
            q += d * d;
        }
        q = warp_sum(q);
        if (lane == 0) {
            double den = (double)a.count - a.corr;
            if (den < 0.0) den = 0.0;
            C v = (C)((double)q / den);
            st(a.out, a.dt_out, oo, kind == RK_STD ? (C)sqrt((double)v) : v);
        }
        return;
    }
    C acc = (kind == RK_PROD || kind == RK_ALL) ? (C)1 : (C)0;
    bool has = false;
    for (i64 j = lane; j < a.count; j += 32) {
        C v = ld<C>(a.in, a.dt_in, base + red_off(a, j));
        switch (kind) {
        case RK_SUM: case RK_MEAN: acc += v; break;
        case RK_PROD: acc *= v; break;
        case RK_ANY: acc = (acc != (C)0 || v != (C)0) ? (C)1 : (C)0; break;
        case RK_ALL: acc = (acc != (C)0 && v != (C)0) ? (C)1 : (C)0; break;
        case RK_AMAX: acc = !has ? v : ((nan_(acc) || nan_(v)) ? (nan_(acc) ? acc : v) : (v > acc ? v : acc)); has = true; break;
        case RK_AMIN: acc = !has ? v : ((nan_(acc) || nan_(v)) ? (nan_(acc) ? acc : v) : (v < acc ? v : acc)); has = true; break;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        C v = shfl(acc, off);
        bool h = shfl((int)has, off);
        switch (kind) {
        case RK_SUM: case RK_MEAN: acc += v; break;
        case RK_PROD: acc *= v; break;
        case RK_ANY: acc = (acc != (C)0 || v != (C)0) ? (C)1 : (C)0; break;
        case RK_ALL: acc = (acc != (C)0 && v != (C)0) ? (C)1 : (C)0; break;
        case RK_AMAX: if (h) { acc = !has ? v : ((nan_(acc) || nan_(v)) ? (nan_(acc) ? acc : v) : (v > acc ? v : acc)); has = true; } break;
        case RK_AMIN: if (h) { acc = !has ? v : ((nan_(acc) || nan_(v)) ? (nan_(acc) ? acc : v) : (v < acc ? v : acc)); has = true; } break;
        }
    }
    if (lane == 0) {
        if (kind == RK_MEAN) acc = acc / (C)a.count;
        st(a.out, a.dt_out, oo, acc);
    }
}

template <typename C> __device__ void reduce_all(const RedArgs& a) {
    int lane = threadIdx.x & 31;
    i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    i64 nwarps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 o = warp; o < a.n_out; o += nwarps) {
        i64 r = o, base = 0, oo = 0, oo2 = 0;
        for (int d = a.nk - 1; d >= 0; --d) {
            i64 c = r % a.kept[d];
            r /= a.kept[d];
            base += c * a.kept_in[d];
            oo += c * a.kept_out[d];
            oo2 += c * a.kept_out2[d];
        }
        reduce_one<C>(a, base, oo, oo2, lane);
    }
}

extern "C" __global__ void reduce_f32(RedArgs a) { PDL_ENTRY(); reduce_all<float>(a); }
extern "C" __global__ void reduce_f64(RedArgs a) { PDL_ENTRY(); reduce_all<double>(a); }
extern "C" __global__ void reduce_i64(RedArgs a) { PDL_ENTRY(); reduce_all<i64>(a); }
