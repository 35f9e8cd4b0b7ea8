// quantized_decomposed:: ops of ExecuTorch's LLM recipes (etch_kernels::quantized has the
// CPU kernels and the argument checks, shared with src/quantized.rs), with the CPU's (and
// ExecuTorch's) arithmetic: the same float32 / float64 operations in the same order, so the
// results are bit for bit the CPU's.
// - q_choose_qparams: choose_qparams_per_token_asymmetric, one warp per token (row of D):
//   min and max as std::min_element / max_element take them (row[0], then every later
//   value that compares smaller / larger: a NaN first value sticks, later NaNs never win),
//   then ExecuTorch's calculate_scale_and_zero_point in float64 (int8's range).
// - q_quantize: quantize_per_token, one thread per element:
//   clamp(int32(zp) + rint(x * (1 / float(scale))), qmin, qmax) in float32.
// - q_embedding: embedding_byte / embedding_4bit, one thread per output element:
//   (w - zp) * scale in float32 for the looked-up row; an index outside the table sets the
//   device error word (code 2) and its output row is not written.

#define SMALL_SCALE 6.1e-5f

struct QParams {
    const float* x;  // [rows, d]
    double* scales;  // [rows]
    i64* zps;        // [rows]
    i64 rows, d;
};

// ExecuTorch's calculate_scale_and_zero_point for values in [mn, mx] onto [qmin, qmax].
__device__ void q_scale_zp(float mn, float mx, int qmin, int qmax, double* scale_out,
                           i64* zp_out) {
    mn = fminf(mn, 0.0f);
    mx = fmaxf(mx, 0.0f);
    const double range = (double)(qmax - qmin);
    double scale = ((double)mx - (double)mn) / range;
    if ((float)scale == 0.0f || isinf(1.0f / (float)scale)) scale = 0.1;
    if (scale < (double)SMALL_SCALE) {
        const float org = (float)scale;
        scale = (double)SMALL_SCALE;
        if (mn == 0.0f) {
            mx = SMALL_SCALE * (float)range;
        } else if (mx == 0.0f) {
            mn = -SMALL_SCALE * (float)range;
        } else {
            const float amp = SMALL_SCALE / org;
            mn *= amp;
            mx *= amp;
        }
    }
    const double lo = (double)qmin, hi = (double)qmax;
    const double from_min = lo - (double)mn / scale;
    const double from_max = hi - (double)mx / scale;
    const double err_min = fabs(lo) - fabs((double)mn / scale);
    const double err_max = fabs(hi) - fabs((double)mx / scale);
    const double zp = err_min < err_max ? from_min : from_max;
    i64 z;
    if (zp < lo) z = qmin;
    else if (zp > hi) z = qmax;
    else z = (i64)rintf((float)zp);
    *scale_out = scale;
    *zp_out = z;
}

extern "C" __global__ void __launch_bounds__(256) q_choose_qparams(QParams a) {
    PDL_ENTRY();
    const i64 row = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= a.rows) return;
    const float* x = a.x + row * a.d;
    // Over row[1..]: values that compare smaller / larger (NaN never does).
    float lo = 1.0f / 0.0f, hi = -1.0f / 0.0f;
    for (i64 i = 1 + lane; i < a.d; i += 32) {
        const float v = x[i];
        if (v < lo) lo = v;
        if (hi < v) hi = v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(FULL_MASK, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(FULL_MASK, hi, o));
    }
    if (lane != 0) return;
    float mn = x[0], mx = x[0];
    if (lo < mn) mn = lo;
    if (mx < hi) mx = hi;
    q_scale_zp(mn, mx, -128, 127, a.scales + row, a.zps + row);
}

struct QQuant {
    const float* x;        // [n] = [rows, d]
    const double* scales;  // [rows]
    const i64* zps;        // [rows]
    void* out;             // [n], dtype odt
    i64 n, d, qmin, qmax;
    int odt;
    int pad;
};

extern "C" __global__ void q_quantize(QQuant a) {
    PDL_ENTRY();
    GRID_LOOP(i, a.n) {
        const i64 r = i / a.d;
        const float inv = 1.0f / (float)a.scales[r];
        // ExecuTorch adds the zero point as an int32.
        const float z = (float)(int)a.zps[r];
        i64 q = (i64)(z + rintf(inv * a.x[i]));
        q = q < a.qmin ? a.qmin : (q > a.qmax ? a.qmax : q);
        st_int(a.out, a.odt, i, q);
    }
}

struct QEmbed {
    const void* w;    // [rows, row_bytes]: int8 / uint8, or two 4-bit values a byte
    const void* scales;  // [rows, groups], dtype sdt
    const void* zps;  // like scales, or null
    const i64* idx;   // [n_idx]
    void* out;        // [n_idx, dim], dtype odt
    int* err;
    i64 n_idx, rows, dim, row_bytes, group_size, groups;
    int sdt, odt;
    int is_signed, packed4;
};

extern "C" __global__ void q_embedding(QEmbed a) {
    PDL_ENTRY();
    GRID_LOOP(i, a.n_idx * a.dim) {
        const i64 k = i / a.dim, j = i % a.dim;
        const i64 r = a.idx[k];
        if (r < 0 || r >= a.rows) {
            if (j == 0) set_error(a.err, 2);
            continue;
        }
        const u8* row = (const u8*)a.w + r * a.row_bytes;
        float v;
        if (a.packed4) {
            const u8 b = row[j / 2];
            v = (float)((int)((j % 2 == 0) ? (b >> 4) : (b & 0x0f)) - 8);
        } else if (a.is_signed) {
            v = (float)(signed char)row[j];
        } else {
            v = (float)row[j];
        }
        const i64 g = r * a.groups + j / a.group_size;
        const float zp = a.zps ? ld<float>(a.zps, a.sdt, g) : 0.0f;
        st(a.out, a.odt, i, (v - zp) * ld<float>(a.scales, a.sdt, g));
    }
}
