// Row kernels along one dim: cumsum (block scan), sort and topk (bitonic sort of each row
// padded to a power of two, in shared memory or, for long rows, in a global scratch
// buffer). One block per row (grid-stride over rows). The sort order is total: NaN is the
// largest value, equal keys keep the lower index first, so the result equals a stable
// sort (and PyTorch's topk/sort tie order).

struct RowArgs {
    const char* a;     // input
    char* v;           // values out
    i64* ix;           // indices out (sort/topk)
    char* work;        // sort: per-block scratch (m keys then m ids); null: shared memory
    int dta, dtv, es;  // dtypes of a and v, element size of a
    int flag;          // sort: descending; cumsum: accumulate in double
    int ndim;
    int pad;
    i64 rows, n, k, m; // rows, row length, outputs per row, padded length
    i64 size[MAXD];    // row shape (the dim collapsed to 1)
    i64 st[3][MAXD];   // element strides of a, v, ix
    i64 dst[3];        // their strides along the dim
};

__device__ __forceinline__ void row_base(const RowArgs& a, i64 r, i64* o) {
    o[0] = o[1] = o[2] = 0;
    for (int d = a.ndim - 1; d >= 0; --d) {
        i64 c = r % a.size[d];
        r /= a.size[d];
        o[0] += c * a.st[0][d];
        o[1] += c * a.st[1][d];
        o[2] += c * a.st[2][d];
    }
}

__device__ __forceinline__ double acc_add(double x, double y) { return x + y; }
__device__ __forceinline__ i64 acc_add(i64 x, i64 y) { return (i64)((u64)x + (u64)y); }

template <typename C>
__device__ void cumsum_rows(const RowArgs& a, C* sh) {
    int t = threadIdx.x, nt = blockDim.x;
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        i64 o[3];
        row_base(a, r, o);
        C carry = (C)0;
        for (i64 base = 0; base < a.n; base += nt) {
            i64 j = base + t;
            sh[t] = j < a.n ? ld<C>(a.a, a.dta, o[0] + j * a.dst[0]) : (C)0;
            __syncthreads();
            for (int off = 1; off < nt; off <<= 1) {
                C y = t >= off ? sh[t - off] : (C)0;
                __syncthreads();
                sh[t] = acc_add(sh[t], y);
                __syncthreads();
            }
            if (j < a.n) st(a.v, a.dtv, o[1] + j * a.dst[1], acc_add(carry, sh[t]));
            carry = acc_add(carry, sh[nt - 1]);
            __syncthreads();
        }
    }
}

extern "C" __global__ void cumsum(RowArgs a) { PDL_ENTRY();
    __shared__ double shd[1024];
    if (a.flag) cumsum_rows<double>(a, shd);
    else cumsum_rows<i64>(a, (i64*)shd);
}

// True when (x, i) sorts before (y, j). Ids >= n are padding and sort last.
template <typename C>
__device__ __forceinline__ bool before(C x, i64 i, C y, i64 j, int desc, i64 n) {
    if (i >= n) return false;
    if (j >= n) return true;
    bool xn = x != x, yn = y != y;
    int c;
    if (xn || yn) c = (xn && yn) ? 0 : (xn ? 1 : -1);
    else c = x < y ? -1 : (x > y ? 1 : 0);
    if (desc) c = -c;
    return c < 0 || (c == 0 && i < j);
}

template <typename C>
__device__ void bitonic(C* key, i64* id, i64 m, int desc, i64 n) {
    for (i64 size = 2; size <= m; size <<= 1) {
        for (i64 stride = size >> 1; stride > 0; stride >>= 1) {
            for (i64 t = threadIdx.x; t < m / 2; t += blockDim.x) {
                i64 lo = 2 * t - (t & (stride - 1));
                i64 hi = lo + stride;
                bool up = (lo & size) == 0;
                bool sw = up ? before(key[hi], id[hi], key[lo], id[lo], desc, n)
                             : before(key[lo], id[lo], key[hi], id[hi], desc, n);
                if (sw) {
                    C tk = key[lo]; key[lo] = key[hi]; key[hi] = tk;
                    i64 ti = id[lo]; id[lo] = id[hi]; id[hi] = ti;
                }
            }
            __syncthreads();
        }
    }
}

__device__ __forceinline__ void copy_el(char* d, const char* s, int es) {
    switch (es) {
        case 1: *(u8*)d = *(const u8*)s; break;
        case 2: *(u16*)d = *(const u16*)s; break;
        case 4: *(unsigned*)d = *(const unsigned*)s; break;
        default: *(u64*)d = *(const u64*)s; break;
    }
}

template <typename C>
__device__ void sort_rows(const RowArgs& a, char* mem) {
    C* key = (C*)mem;
    i64* id = (i64*)(mem + a.m * sizeof(C));
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        i64 o[3];
        row_base(a, r, o);
        for (i64 j = threadIdx.x; j < a.m; j += blockDim.x) {
            id[j] = j;
            key[j] = j < a.n ? ld<C>(a.a, a.dta, o[0] + j * a.dst[0]) : (C)0;
        }
        __syncthreads();
        bitonic(key, id, a.m, a.flag, a.n);
        for (i64 j = threadIdx.x; j < a.k; j += blockDim.x) {
            i64 s = id[j];
            copy_el(a.v + (o[1] + j * a.dst[1]) * a.es, a.a + (o[0] + s * a.dst[0]) * a.es, a.es);
            a.ix[o[2] + j * a.dst[2]] = s;
        }
        __syncthreads();
    }
}

extern __shared__ __align__(16) unsigned char sort_smem[];

// Sorts each row by its values as double (floating dtypes) or i64 (integers, bools).
extern "C" __global__ void sort_f64(RowArgs a) { PDL_ENTRY();
    char* mem = a.work ? a.work + blockIdx.x * a.m * 16 : (char*)sort_smem;
    sort_rows<double>(a, mem);
}
extern "C" __global__ void sort_i64(RowArgs a) { PDL_ENTRY();
    char* mem = a.work ? a.work + blockIdx.x * a.m * 16 : (char*)sort_smem;
    sort_rows<i64>(a, mem);
}
