// Indexing: embedding, index_select, gather, scatter, index.Tensor and index_put, all as
// one "indexed copy" over an iteration shape. Every index tensor (int64 or int32) is read
// at strides over that shape; an index outside its dimension sets error 2 and the element
// is skipped (never an out-of-bounds access).

struct IdxArgs {
    char* dst;             // gather: out; put: out
    const char* src;       // gather: self; put: values
    int* err;
    int dt;                // dtype of the elements moved
    int es;                // their size in bytes
    int nidx;              // index tensors
    int ndim;              // dims of the iteration shape
    int put;               // 0: dst[pos] = src[indexed]; 1: dst[indexed] = src[pos]
    int accumulate;        // put only: dst[indexed] += src[pos]
    i64 size[MAXD];        // iteration shape
    i64 dst_st[MAXD];      // element strides of dst over the iteration shape
    i64 src_st[MAXD];      // element strides of src over the iteration shape
    const void* ix[MAXD];  // index tensors
    int ixdt[MAXD];        // their dtypes (DT_I64 or DT_I32)
    int ixneg[MAXD];       // 1: negative indices count from the end
    i64 ixn[MAXD];         // size of the dim each indexes
    i64 ixs[MAXD];         // element stride of that dim in the indexed operand
    i64 ist[MAXD][MAXD];   // index tensor strides over the iteration shape
};

__device__ __forceinline__ void copy_elem(char* d, const char* s, int es) {
    switch (es) {
        case 1: *(u8*)d = *(const u8*)s; break;
        case 2: *(u16*)d = *(const u16*)s; break;
        case 4: *(unsigned*)d = *(const unsigned*)s; break;
        default: *(u64*)d = *(const u64*)s; break;
    }
}

// *p += v for an element of dtype dt, atomically (CAS on the enclosing 32- or 64-bit word).
template <typename C>
__device__ void atomic_add_elem(char* p, int dt, int es, C v) {
    if (es == 8) {
        u64* w = (u64*)p;
        u64 old = *w, assumed;
        do {
            assumed = old;
            u64 nv = assumed;
            st(&nv, dt, 0, ld<C>(&assumed, dt, 0) + v);
            old = atomicCAS(w, assumed, nv);
        } while (old != assumed);
        return;
    }
    unsigned* w = (unsigned*)((u64)p & ~(u64)3);
    int sh = (int)((u64)p & 3);
    unsigned old = *w, assumed;
    do {
        assumed = old;
        unsigned nv = assumed;
        char* b = (char*)&nv + sh;
        st(b, dt, 0, ld<C>((const char*)&assumed + sh, dt, 0) + v);
        old = atomicCAS(w, assumed, nv);
    } while (old != assumed);
}

__device__ __forceinline__ void accumulate_elem(char* d, const char* s, int dt, int es) {
    switch (dt) {
        case DT_F64: atomic_add_elem<double>(d, dt, es, ld<double>(s, dt, 0)); break;
        case DT_F32: case DT_F16: case DT_BF16:
            atomic_add_elem<float>(d, dt, es, ld<float>(s, dt, 0)); break;
        case DT_BOOL: if (*(const u8*)s) *(u8*)d = 1; break;  // bool += is logical or
        default: atomic_add_elem<i64>(d, dt, es, ld<i64>(s, dt, 0)); break;
    }
}

extern "C" __global__ void index_copy(i64 n, IdxArgs a) { PDL_ENTRY();
    GRID_LOOP(t, n) {
        i64 r = t, od = 0, os = 0;
        i64 pos[MAXD];
        for (int k = a.ndim - 1; k >= 0; --k) {
            pos[k] = r % a.size[k];
            r /= a.size[k];
            od += pos[k] * a.dst_st[k];
            os += pos[k] * a.src_st[k];
        }
        i64 ioff = 0;
        bool ok = true;
        for (int j = 0; j < a.nidx; ++j) {
            i64 io = 0;
            for (int k = 0; k < a.ndim; ++k) io += pos[k] * a.ist[j][k];
            i64 v = a.ixdt[j] == DT_I64 ? ((const i64*)a.ix[j])[io] : (i64)((const int*)a.ix[j])[io];
            if (v < 0 && a.ixneg[j]) v += a.ixn[j];
            if (v < 0 || v >= a.ixn[j]) { ok = false; break; }
            ioff += v * a.ixs[j];
        }
        if (!ok) { set_error(a.err, 2); continue; }
        if (a.put) {
            char* d = a.dst + (od + ioff) * a.es;
            const char* s = a.src + os * a.es;
            if (a.accumulate) accumulate_elem(d, s, a.dt, a.es);
            else copy_elem(d, s, a.es);
        } else {
            copy_elem(a.dst + od * a.es, a.src + (os + ioff) * a.es, a.es);
        }
    }
}
