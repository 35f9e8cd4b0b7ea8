// Convolution helpers (im2col, col2im, bias epilogue, depthwise), 2-D pooling and 2-D
// upsampling. Tensors are viewed as N x C x H x W (struct T4: sizes and element strides),
// so channels-last and 1-D tensors need no copies. Float accumulation (double for f64).

struct T4 {
    i64 n, c, h, w;
    i64 s[4];
};

// One element of es bytes from src[si] to dst[di] (a bit copy: exact for every dtype).
__device__ __forceinline__ void copy_el(void* dst, i64 di, const void* src, i64 si, int es) {
    switch (es) {
        case 1: ((u8*)dst)[di] = ((const u8*)src)[si]; break;
        case 2: ((u16*)dst)[di] = ((const u16*)src)[si]; break;
        case 4: ((unsigned*)dst)[di] = ((const unsigned*)src)[si]; break;
        default: ((u64*)dst)[di] = ((const u64*)src)[si]; break;
    }
}
__device__ __forceinline__ void zero_el(void* dst, i64 di, int es) {
    switch (es) {
        case 1: ((u8*)dst)[di] = 0; break;
        case 2: ((u16*)dst)[di] = 0; break;
        case 4: ((unsigned*)dst)[di] = 0; break;
        default: ((u64*)dst)[di] = 0; break;
    }
}

// Copies a strided N x C x H x W view into contiguous memory (row-major over n, c, h, w).
struct PackArgs {
    const void* src;
    void* dst;
    int es, pad;
    T4 v;
};
extern "C" __global__ void pack4(PackArgs a) { PDL_ENTRY();
    i64 total = a.v.n * a.v.c * a.v.h * a.v.w;
    GRID_LOOP(e, total) {
        i64 r = e;
        i64 x = r % a.v.w; r /= a.v.w;
        i64 y = r % a.v.h; r /= a.v.h;
        i64 c = r % a.v.c;
        i64 n = r / a.v.c;
        copy_el(a.dst, e, a.src, n * a.v.s[0] + c * a.v.s[1] + y * a.v.s[2] + x * a.v.s[3], a.es);
    }
}

struct ConvArgs {
    const void* x;
    const void* w;
    const void* b;     // null: no bias
    void* out;
    void* col;         // im2col matrix (dtype dt) / transposed product (compute type)
    const void* acc;   // product [nb][cout][oh*ow] (compute type); null: all zero
    int dt, es;
    i64 n0, nb;        // first batch item of this chunk and its item count
    i64 g, cin_g, cout_g, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    T4 xv, wv, ov;
};

// col[b][c][i][j][p] = x[n0 + b][c][y*sh + i*dh - ph][x*sw + j*dw - pw] (0 outside), for
// the chunk's items, every input channel c and output pixel p = (y, x).
extern "C" __global__ void im2col(ConvArgs a) { PDL_ENTRY();
    i64 npix = a.oh * a.ow;
    i64 total = a.nb * a.xv.c * a.kh * a.kw * npix;
    GRID_LOOP(e, total) {
        i64 r = e;
        i64 p = r % npix; r /= npix;
        i64 j = r % a.kw; r /= a.kw;
        i64 i = r % a.kh; r /= a.kh;
        i64 c = r % a.xv.c;
        i64 b = r / a.xv.c;
        i64 ih = (p / a.ow) * a.sh + i * a.dh - a.ph;
        i64 iw = (p % a.ow) * a.sw + j * a.dw - a.pw;
        if (ih < 0 || ih >= a.xv.h || iw < 0 || iw >= a.xv.w) {
            zero_el(a.col, e, a.es);
        } else {
            i64 src = (a.n0 + b) * a.xv.s[0] + c * a.xv.s[1] + ih * a.xv.s[2] + iw * a.xv.s[3];
            copy_el(a.col, e, a.x, src, a.es);
        }
    }
}

template <typename C> __device__ __forceinline__ C bias_of(const ConvArgs& a, i64 c) {
    return a.b ? ld<C>(a.b, a.dt, c) : (C)0;
}
__device__ __forceinline__ i64 out_off(const ConvArgs& a, i64 n, i64 c, i64 y, i64 x) {
    return n * a.ov.s[0] + c * a.ov.s[1] + y * a.ov.s[2] + x * a.ov.s[3];
}

// out[n0 + b][c][p] = acc[b][c][p] + bias[c], through the output's strides.
template <typename C> __device__ void epilogue(const ConvArgs& a) {
    i64 npix = a.oh * a.ow, cout = a.g * a.cout_g;
    i64 total = a.nb * cout * npix;
    GRID_LOOP(e, total) {
        i64 p = e % npix, c = (e / npix) % cout, b = e / (npix * cout);
        C v = a.acc ? ((const C*)a.acc)[e] : (C)0;
        st(a.out, a.dt, out_off(a, a.n0 + b, c, p / a.ow, p % a.ow), v + bias_of<C>(a, c));
    }
}
extern "C" __global__ void conv_epilogue_f32(ConvArgs a) { PDL_ENTRY(); epilogue<float>(a); }
extern "C" __global__ void conv_epilogue_f64(ConvArgs a) { PDL_ENTRY(); epilogue<double>(a); }

// Transposed convolution: col[b][g][co][i][j][q] (q over input pixels, compute type) is
// gathered into out[n0 + b][g*cout_g + co][oy][ox] (col2im) and the bias added.
template <typename C> __device__ void col2im(const ConvArgs& a) {
    i64 cout = a.g * a.cout_g, opix = a.oh * a.ow, ipix = a.xv.h * a.xv.w;
    i64 total = a.nb * cout * opix;
    GRID_LOOP(e, total) {
        i64 p = e % opix, c = (e / opix) % cout, b = e / (opix * cout);
        i64 oy = p / a.ow, ox = p % a.ow;
        C s = (C)0;
        if (a.col) {
            const C* col = (const C*)a.col + (b * cout + c) * a.kh * a.kw * ipix;
            for (i64 i = 0; i < a.kh; ++i) {
                i64 ty = oy + a.ph - i * a.dh;
                if (ty < 0 || ty % a.sh != 0 || ty / a.sh >= a.xv.h) continue;
                for (i64 j = 0; j < a.kw; ++j) {
                    i64 tx = ox + a.pw - j * a.dw;
                    if (tx < 0 || tx % a.sw != 0 || tx / a.sw >= a.xv.w) continue;
                    s += col[(i * a.kw + j) * ipix + (ty / a.sh) * a.xv.w + tx / a.sw];
                }
            }
        }
        st(a.out, a.dt, out_off(a, a.n0 + b, c, oy, ox), s + bias_of<C>(a, c));
    }
}
extern "C" __global__ void col2im_f32(ConvArgs a) { PDL_ENTRY(); col2im<float>(a); }
extern "C" __global__ void col2im_f64(ConvArgs a) { PDL_ENTRY(); col2im<double>(a); }

// Depthwise convolution (one input and one output channel per group), directly: one
// thread per output element over the whole batch.
template <typename C> __device__ void depthwise(const ConvArgs& a) {
    i64 npix = a.oh * a.ow;
    i64 total = a.xv.n * a.xv.c * npix;
    GRID_LOOP(e, total) {
        i64 p = e % npix, c = (e / npix) % a.xv.c, n = e / (npix * a.xv.c);
        i64 y = p / a.ow, x = p % a.ow;
        i64 xb = n * a.xv.s[0] + c * a.xv.s[1], wb = c * a.wv.s[0];
        C s = (C)0;
        for (i64 i = 0; i < a.kh; ++i) {
            i64 ih = y * a.sh + i * a.dh - a.ph;
            if (ih < 0 || ih >= a.xv.h) continue;
            for (i64 j = 0; j < a.kw; ++j) {
                i64 iw = x * a.sw + j * a.dw - a.pw;
                if (iw < 0 || iw >= a.xv.w) continue;
                C xv = ld<C>(a.x, a.dt, xb + ih * a.xv.s[2] + iw * a.xv.s[3]);
                s += ld<C>(a.w, a.dt, wb + i * a.wv.s[2] + j * a.wv.s[3]) * xv;
            }
        }
        st(a.out, a.dt, out_off(a, n, c, y, x), s + bias_of<C>(a, c));
    }
}
extern "C" __global__ void depthwise_f32(ConvArgs a) { PDL_ENTRY(); depthwise<float>(a); }
extern "C" __global__ void depthwise_f64(ConvArgs a) { PDL_ENTRY(); depthwise<double>(a); }

// ---- Pooling ----

struct PoolArgs {
    const void* x;
    void* out;
    void* idx;         // max pooling: int64 indices
    int dt, include_pad;
    i64 kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
    i64 divisor;       // avg pooling: divisor_override, 0 when none
    T4 xv, ov, iv;
};

// (n, c, y, x) of output element e (N x C x oh x ow).
#define POOL_COORDS(a, e) \
    i64 xo = e % a.ow, y = (e / a.ow) % a.oh, c = (e / (a.ow * a.oh)) % a.xv.c, \
        n = e / (a.ow * a.oh * a.xv.c); \
    i64 xb = n * a.xv.s[0] + c * a.xv.s[1]; \
    i64 oi = n * a.ov.s[0] + c * a.ov.s[1] + y * a.ov.s[2] + xo * a.ov.s[3]

template <typename C> __device__ void max_pool(const PoolArgs& a) {
    i64 total = a.xv.n * a.xv.c * a.oh * a.ow;
    GRID_LOOP(e, total) {
        POOL_COORDS(a, e);
        C best = (C)(-1.0 / 0.0);
        i64 bi = -1;
        for (i64 i = 0; i < a.kh; ++i) {
            i64 ih = y * a.sh + i * a.dh - a.ph;
            if (ih < 0 || ih >= a.xv.h) continue;
            for (i64 j = 0; j < a.kw; ++j) {
                i64 iw = xo * a.sw + j * a.dw - a.pw;
                if (iw < 0 || iw >= a.xv.w) continue;
                C v = ld<C>(a.x, a.dt, xb + ih * a.xv.s[2] + iw * a.xv.s[3]);
                if (bi < 0 || v > best || (v != v && best == best)) {
                    best = v;
                    bi = ih * a.xv.w + iw;
                }
            }
        }
        st(a.out, a.dt, oi, best);
        ((i64*)a.idx)[n * a.iv.s[0] + c * a.iv.s[1] + y * a.iv.s[2] + xo * a.iv.s[3]] =
            bi < 0 ? 0 : bi;
    }
}
extern "C" __global__ void max_pool2d_f32(PoolArgs a) { PDL_ENTRY(); max_pool<float>(a); }
extern "C" __global__ void max_pool2d_f64(PoolArgs a) { PDL_ENTRY(); max_pool<double>(a); }

template <typename C> __device__ void avg_pool(const PoolArgs& a) {
    i64 total = a.xv.n * a.xv.c * a.oh * a.ow;
    GRID_LOOP(e, total) {
        POOL_COORDS(a, e);
        i64 hs = y * a.sh - a.ph, ws = xo * a.sw - a.pw;
        i64 he = min(hs + a.kh, a.xv.h + a.ph), we = min(ws + a.kw, a.xv.w + a.pw);
        i64 pool = (he - hs) * (we - ws);
        hs = max(hs, (i64)0);
        ws = max(ws, (i64)0);
        he = min(he, a.xv.h);
        we = min(we, a.xv.w);
        C s = (C)0;
        for (i64 ih = hs; ih < he; ++ih)
            for (i64 iw = ws; iw < we; ++iw) s += ld<C>(a.x, a.dt, xb + ih * a.xv.s[2] + iw * a.xv.s[3]);
        i64 div = a.divisor ? a.divisor
                  : a.include_pad ? pool
                                  : max(he - hs, (i64)0) * max(we - ws, (i64)0);
        st(a.out, a.dt, oi, div == 0 ? (C)0 : s / (C)div);
    }
}
extern "C" __global__ void avg_pool2d_f32(PoolArgs a) { PDL_ENTRY(); avg_pool<float>(a); }
extern "C" __global__ void avg_pool2d_f64(PoolArgs a) { PDL_ENTRY(); avg_pool<double>(a); }

template <typename C> __device__ void adaptive_avg_pool(const PoolArgs& a) {
    i64 total = a.xv.n * a.xv.c * a.oh * a.ow;
    GRID_LOOP(e, total) {
        POOL_COORDS(a, e);
        i64 hs = y * a.xv.h / a.oh, he = ((y + 1) * a.xv.h + a.oh - 1) / a.oh;
        i64 ws = xo * a.xv.w / a.ow, we = ((xo + 1) * a.xv.w + a.ow - 1) / a.ow;
        C s = (C)0;
        for (i64 ih = hs; ih < he; ++ih)
            for (i64 iw = ws; iw < we; ++iw) s += ld<C>(a.x, a.dt, xb + ih * a.xv.s[2] + iw * a.xv.s[3]);
        i64 cnt = max((he - hs) * (we - ws), (i64)1);
        st(a.out, a.dt, oi, s / (C)cnt);
    }
}
extern "C" __global__ void adaptive_avg_pool2d_f32(PoolArgs a) { PDL_ENTRY(); adaptive_avg_pool<float>(a); }
extern "C" __global__ void adaptive_avg_pool2d_f64(PoolArgs a) { PDL_ENTRY(); adaptive_avg_pool<double>(a); }

// ---- Upsampling (PyTorch's CPU index and weight arithmetic, rounded step by step) ----

struct UpArgs {
    const void* x;
    void* out;
    int dt, es;
    int align, pad;
    double ratio_h, ratio_w;  // per-axis scale (nearest) or ratio (bilinear), in C precision
    T4 xv, ov;
};

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// PyTorch's nearest_idx.
template <typename C> __device__ i64 nearest_idx(i64 o, i64 in, i64 out, C scale) {
    if (out == in) return o;
    if (out == 2 * in) return o >> 1;
    C v = floor(mul_rn((C)o, scale));
    i64 i = v > (C)0 ? (i64)v : 0;
    return min(i, in - 1);
}

template <typename C> __device__ void nearest(const UpArgs& a) {
    i64 oh = a.ov.h, ow = a.ov.w;
    i64 total = a.ov.n * a.ov.c * oh * ow;
    GRID_LOOP(e, total) {
        i64 xo = e % ow, y = (e / ow) % oh, c = (e / (ow * oh)) % a.ov.c, n = e / (ow * oh * a.ov.c);
        i64 h = nearest_idx<C>(y, a.xv.h, oh, (C)a.ratio_h);
        i64 w = nearest_idx<C>(xo, a.xv.w, ow, (C)a.ratio_w);
        i64 si = n * a.xv.s[0] + c * a.xv.s[1] + h * a.xv.s[2] + w * a.xv.s[3];
        i64 di = n * a.ov.s[0] + c * a.ov.s[1] + y * a.ov.s[2] + xo * a.ov.s[3];
        copy_el(a.out, di, a.x, si, a.es);
    }
}
extern "C" __global__ void upsample_nearest2d_f32(UpArgs a) { PDL_ENTRY(); nearest<float>(a); }
extern "C" __global__ void upsample_nearest2d_f64(UpArgs a) { PDL_ENTRY(); nearest<double>(a); }

// PyTorch's compute_source_index_and_lambda: source indices i0, i1 and weights w0, w1.
template <typename C>
__device__ void linear_tap(i64 o, i64 in, i64 out, int align, C ratio, i64& i0, i64& i1, C& w0, C& w1) {
    if (out == in) {
        i0 = i1 = o;
        w0 = (C)1;
        w1 = (C)0;
        return;
    }
    C real;
    if (align) {
        real = mul_rn(ratio, (C)o);
    } else {
        real = add_rn(mul_rn(ratio, add_rn((C)o, (C)0.5)), (C)(-0.5));
        if (real < (C)0) real = (C)0;
    }
    C f = floor(real);
    i0 = min(f > (C)0 ? (i64)f : (i64)0, in - 1);
    C l1 = add_rn(real, -(C)i0);
    l1 = l1 < (C)0 ? (C)0 : (l1 > (C)1 ? (C)1 : l1);
    i1 = i0 < in - 1 ? i0 + 1 : i0;
    w0 = add_rn((C)1, -l1);
    w1 = l1;
}

template <typename C> __device__ void bilinear(const UpArgs& a) {
    i64 oh = a.ov.h, ow = a.ov.w;
    i64 total = a.ov.n * a.ov.c * oh * ow;
    GRID_LOOP(e, total) {
        i64 xo = e % ow, y = (e / ow) % oh, c = (e / (ow * oh)) % a.ov.c, n = e / (ow * oh * a.ov.c);
        i64 h0, h1, x0, x1;
        C hl0, hl1, wl0, wl1;
        linear_tap<C>(y, a.xv.h, oh, a.align, (C)a.ratio_h, h0, h1, hl0, hl1);
        linear_tap<C>(xo, a.xv.w, ow, a.align, (C)a.ratio_w, x0, x1, wl0, wl1);
        i64 b = n * a.xv.s[0] + c * a.xv.s[1];
        i64 r0 = b + h0 * a.xv.s[2], r1 = b + h1 * a.xv.s[2];
        i64 a0 = x0 * a.xv.s[3], a1 = x1 * a.xv.s[3];
        C top = add_rn(mul_rn(wl0, ld<C>(a.x, a.dt, r0 + a0)), mul_rn(wl1, ld<C>(a.x, a.dt, r0 + a1)));
        C bot = add_rn(mul_rn(wl0, ld<C>(a.x, a.dt, r1 + a0)), mul_rn(wl1, ld<C>(a.x, a.dt, r1 + a1)));
        C v = add_rn(mul_rn(hl0, top), mul_rn(hl1, bot));
        st(a.out, a.dt, n * a.ov.s[0] + c * a.ov.s[1] + y * a.ov.s[2] + xo * a.ov.s[3], v);
    }
}
extern "C" __global__ void upsample_bilinear2d_f32(UpArgs a) { PDL_ENTRY(); bilinear<float>(a); }
extern "C" __global__ void upsample_bilinear2d_f64(UpArgs a) { PDL_ENTRY(); bilinear<double>(a); }
