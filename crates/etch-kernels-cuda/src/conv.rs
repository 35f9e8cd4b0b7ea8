//! Convolution (conv.cu + cuBLAS): `aten::convolution.out` in 1-D and 2-D, grouped,
//! strided, dilated and transposed, with the CPU kernel's argument decoding and checks
//! (`etch_kernels::conv`).
//!
//! A convolution is im2col into the device scratch buffer, then one strided-batched cuBLAS
//! product per group (batched over the batch items of a chunk) into a float (double for
//! f64) accumulator, then an epilogue that adds the bias and writes the output through its
//! strides. Depthwise convolutions (one channel per group) run a direct kernel. Transposed
//! convolutions multiply `Wᵀ · x` per group and gather the columns into the output
//! (col2im). Channels-last inputs are read through their strides; channels-last weights
//! (and inputs of transposed convolutions) are first packed contiguously in the scratch.

use crate::Family;
use crate::context::{Launch, with_device};
use crate::gemm::{Gemm, Ptrs, gemm_raw};
use crate::util::{arg, dt_code, ptr, same_device};
use etch_core::{Error, KernelContext, Result, ScalarType, TensorRef};
use etch_kernels::conv::{View4, conv_out, conv_out_size, pair, view4};

const OP: &str = "aten::convolution.out";

/// Scratch bytes a convolution chunk aims to stay under (one batch item may exceed it).
const CHUNK_BYTES: usize = 256 << 20;

/// `struct T4` in conv.cu: N, C, H, W sizes and element strides.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct T4 {
    pub n: i64,
    pub c: i64,
    pub h: i64,
    pub w: i64,
    pub s: [i64; 4],
}

impl From<View4> for T4 {
    fn from(v: View4) -> T4 {
        T4 {
            n: v.n as i64,
            c: v.c as i64,
            h: v.h as i64,
            w: v.w as i64,
            s: v.s.map(|s| s as i64),
        }
    }
}

/// `struct PackArgs` in conv.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct PackArgs {
    src: u64,
    dst: u64,
    es: i32,
    pad: i32,
    v: T4,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for PackArgs {}

/// `struct ConvArgs` in conv.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ConvArgs {
    x: u64,
    w: u64,
    b: u64,
    out: u64,
    col: u64,
    acc: u64,
    dt: i32,
    es: i32,
    n0: i64,
    nb: i64,
    g: i64,
    cin_g: i64,
    cout_g: i64,
    kh: i64,
    kw: i64,
    sh: i64,
    sw: i64,
    ph: i64,
    pw: i64,
    dh: i64,
    dw: i64,
    oh: i64,
    ow: i64,
    xv: T4,
    wv: T4,
    ov: T4,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for ConvArgs {}

/// Rounds a scratch offset up to 256 bytes.
fn align(n: usize) -> usize {
    n.next_multiple_of(256)
}

/// Batch items per chunk for `per_item` scratch bytes each.
fn chunk_items(n: usize, per_item: usize) -> usize {
    (CHUNK_BYTES / per_item.max(1)).clamp(1, n.max(1))
}

/// `name` + `_f32` / `_f64` by the compute type of `dt`.
fn suffixed(f32_name: &'static str, f64_name: &'static str, dt: ScalarType) -> &'static str {
    if dt == ScalarType::Double {
        f64_name
    } else {
        f32_name
    }
}

/// Launches conv.cu kernel `name` over `n` elements with `a`.
pub(crate) fn run<T: cudarc::driver::DeviceRepr>(
    l: &mut Launch<'_>,
    name: &'static str,
    n: usize,
    a: &mut T,
) -> Result<()> {
    let f = l.function(Family::Conv, name)?;
    let mut args = [arg(a)];
    // SAFETY: every conv.cu kernel takes one argument struct, which `T` mirrors; the
    // callers fill it with live device memory of the checked shapes.
    unsafe { l.launch(f, n as i64, &mut args) }
}

/// Packs tensor view `v` at `src` contiguously into `dst`.
fn pack(l: &mut Launch<'_>, src: u64, dst: u64, es: usize, v: T4) -> Result<()> {
    let n = (v.n * v.c * v.h * v.w) as usize;
    let mut p = PackArgs {
        src,
        dst,
        es: es as i32,
        pad: 0,
        v,
    };
    run(l, "pack4", n, &mut p)
}

/// The parameters of a convolution, decoded and checked as the CPU kernel does.
struct Plan {
    a: ConvArgs,
    n: usize,
    cout: usize,
}

/// Decodes `convolution`'s arguments into the kernel arguments (pointers left unset) and
/// the output size `[n, cout, oh, ow]`.
fn plan(ctx: &KernelContext<'_>, x: &TensorRef<'_>, w: &TensorRef<'_>) -> Result<Plan> {
    let transposed = ctx.bool(6)?;
    let one_d = x.dim() == 3;
    if x.dim() != w.dim() || !(x.dim() == 3 || x.dim() == 4) {
        return Err(Error::invalid_argument(format!(
            "{OP}: input {:?} and weight {:?} must both be 3-D or 4-D",
            x.sizes(),
            w.sizes()
        )));
    }
    let (sh, sw) = pair(OP, "stride", ctx.int_list(3)?, one_d, 1)?;
    let (ph, pw) = pair(OP, "padding", ctx.int_list(4)?, one_d, 0)?;
    let (dh, dw) = pair(OP, "dilation", ctx.int_list(5)?, one_d, 1)?;
    let groups = ctx.int(8)?;
    let xv = view4(OP, x, true)?;
    let wv = view4(OP, w, true)?;
    let (g, cin_g, cout_g, oh, ow) = if transposed {
        let (oph, opw) = pair(OP, "output_padding", ctx.int_list(7)?, one_d, 0)?;
        if groups <= 0 || xv.c % groups as usize != 0 || wv.n != xv.c {
            return Err(Error::invalid_argument(format!(
                "{OP}: groups={groups}, input channels {} and weight {:?} do not match",
                xv.c,
                w.sizes()
            )));
        }
        if sh == 0 || sw == 0 || dh == 0 || dw == 0 || oph >= sh.max(dh) || opw >= sw.max(dw) {
            return Err(Error::invalid_argument(format!(
                "{OP}: invalid stride/dilation/output_padding for a transposed convolution"
            )));
        }
        let full = |i: usize, s: usize, d: usize, k: usize, op: usize| {
            (i.max(1) - 1) * s + d * (k.max(1) - 1) + op + 1
        };
        let (fh, fw) = (full(xv.h, sh, dh, wv.h, oph), full(xv.w, sw, dw, wv.w, opw));
        if fh < 2 * ph + 1 || fw < 2 * pw + 1 {
            return Err(Error::invalid_argument(format!(
                "{OP}: padding leaves an empty output"
            )));
        }
        let g = groups as usize;
        (g, xv.c / g, wv.c, fh - 2 * ph, fw - 2 * pw)
    } else {
        if groups <= 0 || xv.c % groups as usize != 0 || wv.n % groups as usize != 0 {
            return Err(Error::invalid_argument(format!(
                "{OP}: groups={groups} does not divide {} input / {} output channels",
                xv.c, wv.n
            )));
        }
        let g = groups as usize;
        if wv.c != xv.c / g {
            return Err(Error::invalid_argument(format!(
                "{OP}: weight {:?} expects {} input channels per group, input has {}",
                w.sizes(),
                wv.c,
                xv.c / g
            )));
        }
        let oh = conv_out_size(OP, xv.h, wv.h, sh, ph, dh)?;
        let ow = conv_out_size(OP, xv.w, wv.w, sw, pw, dw)?;
        (g, xv.c / g, wv.n / g, oh, ow)
    };
    let i = |v: usize| v as i64;
    let a = ConvArgs {
        g: i(g),
        cin_g: i(cin_g),
        cout_g: i(cout_g),
        kh: i(wv.h),
        kw: i(wv.w),
        sh: i(sh),
        sw: i(sw),
        ph: i(ph),
        pw: i(pw),
        dh: i(dh),
        dw: i(dw),
        oh: i(oh),
        ow: i(ow),
        xv: xv.into(),
        wv: wv.into(),
        ..Default::default()
    };
    Ok(Plan {
        a,
        n: xv.n,
        cout: g * cout_g,
    })
}

/// `convolution.out`: args [input, weight, bias?, stride, padding, dilation, transposed,
/// output_padding, groups, out].
pub(crate) fn convolution_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let x = ctx.tensor(0)?;
    let w = ctx.tensor(1)?;
    let bias = ctx.opt_tensor(2)?;
    let transposed = ctx.bool(6)?;
    let Plan { mut a, n, cout } = plan(ctx, &x, &w)?;
    let one_d = x.dim() == 3;
    let (oh, ow) = (a.oh as usize, a.ow as usize);
    let (out, ov) = conv_out(ctx, &x, &w, bias.as_ref(), one_d, [n, cout, oh, ow])?;
    let dt = x.dtype();
    if !matches!(
        dt,
        ScalarType::Float | ScalarType::Half | ScalarType::BFloat16 | ScalarType::Double
    ) {
        return Err(etch_kernels::util::bad_dtype(OP, "input", dt));
    }
    same_device(OP, &[&x, &w, &out])?;
    if let Some(b) = &bias {
        same_device(OP, &[&x, b])?;
    }
    if n == 0 || cout == 0 || oh * ow == 0 {
        return Ok(());
    }
    a.x = ptr(&x);
    a.w = ptr(&w);
    a.b = bias.as_ref().map_or(0, ptr);
    a.out = ptr(&out);
    a.dt = dt_code(OP, dt)?;
    a.es = dt.element_size() as i32;
    a.ov = ov.into();
    if transposed {
        transposed_conv(ctx, a, &x, &w, &out)
    } else if a.cin_g == 1 && a.cout_g == 1 && a.g > 1 {
        let name = suffixed("depthwise_f32", "depthwise_f64", dt);
        with_device(ctx, out.device(), |mut l| {
            run(&mut l, name, n * cout * oh * ow, &mut a)
        })
    } else {
        forward_conv(ctx, a, &x, &w, &out)
    }
}

/// The dtype and byte size of the accumulator of `dt`.
fn acc_type(dt: ScalarType) -> (ScalarType, usize) {
    if dt == ScalarType::Double {
        (ScalarType::Double, 8)
    } else {
        (ScalarType::Float, 4)
    }
}

/// A (non-depthwise) convolution: im2col, one cuBLAS product per group, bias epilogue.
fn forward_conv(
    ctx: &KernelContext<'_>,
    mut a: ConvArgs,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &TensorRef<'_>,
) -> Result<()> {
    let (dt, es) = (x.dtype(), x.dtype().element_size());
    let (acc_dt, ca) = acc_type(dt);
    let u = |v: i64| v as usize;
    let (g, cout_g, n) = (u(a.g), u(a.cout_g), u(a.xv.n));
    let (kk, npix) = (u(a.cin_g * a.kh * a.kw), u(a.oh * a.ow));
    let cout = g * cout_g;
    let w_packed = !w.is_default_dim_order();
    let direct_in = a.kh == 1
        && a.kw == 1
        && (a.sh, a.sw, a.ph, a.pw) == (1, 1, 0, 0)
        && x.is_default_dim_order();
    let wbytes = if w_packed { align(cout * kk * es) } else { 0 };
    let col_item = if direct_in { 0 } else { g * kk * npix * es };
    let acc_item = cout * npix * ca;
    let nb = chunk_items(n, col_item + acc_item);
    let total = wbytes + align(nb * col_item) + nb * acc_item;
    let (epi, im2col) = (
        suffixed("conv_epilogue_f32", "conv_epilogue_f64", dt),
        "im2col",
    );
    with_device(ctx, out.device(), |mut l| {
        let base = l.scratch(total)?;
        let wptr = if w_packed {
            pack(&mut l, ptr(w), base, es, a.wv)?;
            base
        } else {
            ptr(w)
        };
        let col = base + wbytes as u64;
        let acc = col + align(nb * col_item) as u64;
        let mut n0 = 0;
        while n0 < n {
            let cnt = nb.min(n - n0);
            (a.n0, a.nb, a.col) = (n0 as i64, cnt as i64, col);
            a.acc = if kk > 0 { acc } else { 0 };
            if !direct_in {
                run(&mut l, im2col, cnt * g * kk * npix, &mut a)?;
            }
            let colp = if direct_in {
                ptr(x) + (n0 * g * kk * npix * es) as u64
            } else {
                col
            };
            let groups = if kk > 0 { g } else { 0 };
            for gi in 0..groups {
                let p = Ptrs {
                    a: wptr + (gi * cout_g * kk * es) as u64,
                    w: colp + (gi * kk * npix * es) as u64,
                    out: acc + (gi * cout_g * npix * ca) as u64,
                    dt,
                    out_dt: acc_dt,
                    a_t: false,
                    stride_o: (cout * npix) as i64,
                };
                let gm = Gemm {
                    batch: cnt,
                    m: cout_g,
                    k: kk,
                    n: npix,
                    w_t: false,
                    stride_a: 0,
                    stride_w: (g * kk * npix) as i64,
                    alpha: 1.0,
                    beta: 0.0,
                };
                gemm_raw(&mut l, OP, &p, &gm)?;
            }
            run(&mut l, epi, cnt * cout * npix, &mut a)?;
            n0 += cnt;
        }
        Ok(())
    })
}

/// A transposed convolution: per group `col = Wᵀ · x` on cuBLAS, then col2im and the bias.
fn transposed_conv(
    ctx: &KernelContext<'_>,
    mut a: ConvArgs,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    out: &TensorRef<'_>,
) -> Result<()> {
    let (dt, es) = (x.dtype(), x.dtype().element_size());
    let (acc_dt, ca) = acc_type(dt);
    let u = |v: i64| v as usize;
    let (g, cin_g, n, c) = (u(a.g), u(a.cin_g), u(a.xv.n), u(a.xv.c));
    let m = u(a.cout_g * a.kh * a.kw);
    let (ipix, opix) = (u(a.xv.h * a.xv.w), u(a.oh * a.ow));
    let cout = g * u(a.cout_g);
    let w_packed = !w.is_default_dim_order();
    let x_packed = !x.is_default_dim_order();
    let wbytes = if w_packed { align(c * m * es) } else { 0 };
    let x_item = if x_packed { c * ipix * es } else { 0 };
    let col_item = g * m * ipix * ca;
    let nb = chunk_items(n, x_item + col_item);
    let total = wbytes + align(nb * x_item) + nb * col_item;
    let name = suffixed("col2im_f32", "col2im_f64", dt);
    with_device(ctx, out.device(), |mut l| {
        let base = l.scratch(total)?;
        let wptr = if w_packed {
            pack(&mut l, ptr(w), base, es, a.wv)?;
            base
        } else {
            ptr(w)
        };
        let xbuf = base + wbytes as u64;
        let col = xbuf + align(nb * x_item) as u64;
        let mut n0 = 0;
        while n0 < n {
            let cnt = nb.min(n - n0);
            let xp = if x_packed {
                let src = ptr(x) + (n0 as i64 * a.xv.s[0]) as u64 * es as u64;
                pack(
                    &mut l,
                    src,
                    xbuf,
                    es,
                    T4 {
                        n: cnt as i64,
                        ..a.xv
                    },
                )?;
                xbuf
            } else {
                ptr(x) + (n0 * c * ipix * es) as u64
            };
            let groups = if cin_g > 0 { g } else { 0 };
            for gi in 0..groups {
                let p = Ptrs {
                    a: wptr + (gi * cin_g * m * es) as u64,
                    w: xp + (gi * cin_g * ipix * es) as u64,
                    out: col + (gi * m * ipix * ca) as u64,
                    dt,
                    out_dt: acc_dt,
                    a_t: true,
                    stride_o: (g * m * ipix) as i64,
                };
                let gm = Gemm {
                    batch: cnt,
                    m,
                    k: cin_g,
                    n: ipix,
                    w_t: false,
                    stride_a: 0,
                    stride_w: (c * ipix) as i64,
                    alpha: 1.0,
                    beta: 0.0,
                };
                gemm_raw(&mut l, OP, &p, &gm)?;
            }
            (a.n0, a.nb) = (n0 as i64, cnt as i64);
            a.col = if cin_g > 0 { col } else { 0 };
            run(&mut l, name, cnt * cout * opix, &mut a)?;
            n0 += cnt;
        }
        Ok(())
    })
}
