//! A convolution fused at load with the batch norm and elementwise activation after it
//! (`KernelRegistry::register_fusion` on `aten::convolution.out`): what exported portable
//! programs of torchvision's nets run as three to seven calls (convolution, batch norm,
//! ReLU / ReLU6 / SiLU as sigmoid and product / hardswish as add, clamps, product and
//! division, a residual add) becomes one.
//!
//! The batch norm is folded into the convolution's weights and bias once (in `f64`, rounded
//! to `f32`), as PyTorch's `fuse_conv_bn_eval` and ExecuTorch's XNNPACK exporter do: the
//! results differ from the unfused calls' in the last bits. Clamps alone are applied where
//! the convolution stores its tiles; other steps run over the output after it, each with
//! the unfused kernel's arithmetic (the same sigmoid, one rounding a step), so a chain
//! without a batch norm gives the unfused calls' values.

use super::channels_last::{self, NhwcWeights};
use super::{Conv, View4, conv_geometry, conv2d, depthwise_f32, packed_shape, weight_rows};
use crate::gemm512;
use crate::threads::{self, SharedMut};
use crate::util::{ELEMENTWISE_TASK, MATH_TASK};
use etch_core::{
    ChainCall, Dynamism, Error, Fused, KernelContext, Result, Scalar, ScalarType, TensorRef,
};

const CONV: &str = "aten::convolution.out";
/// The most steps after a convolution (a fused chain has at most 8 calls).
const MAX_STEPS: usize = 8;
const BATCH_NORM: &str = "aten::_native_batch_norm_legit_no_training.out";

/// One elementwise step after the convolution (and batch norm).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// `clamp` / `hardtanh` / `relu` (`relu` as `clamp(0, inf)`: `-0` stays `-0`).
    Clamp(f32, f32),
    Sigmoid,
    /// `x · sigmoid(x)` with the sigmoid rounded first: `Sigmoid` then `MulPre` as the
    /// first two steps, in one pass.
    SigmoidMul,
    /// Times the value before the first step (SiLU's and hardswish's product).
    MulPre,
    /// `x · clamp(x + 3, 0, 6) / 6` as the calls of PyTorch's decomposition compute it (the
    /// sum, the clamp, the product, the division: one rounding each), as the first step,
    /// in one pass instead of five.
    Hardswish,
    Add(f32),
    Mul(f32),
    Div(f32),
    /// Plus the tensor of this argument (a residual; same shape, contiguous).
    AddTensor(usize),
}

/// The convolution's weights, folded and packed at load.
enum Weights {
    /// One group, packed for [`gemm512::conv2d`].
    Packed {
        packed: Vec<f32>,
        layout: gemm512::ConvLayout,
    },
    /// One group where the packed kernels do not run (neither AVX-512F nor AVX2 with FMA,
    /// or `ETCH_F32_GEMM512=0`): `[cout, cin · kh · kw]` and a bias, for the portable
    /// convolution (its clamps as a step after it).
    Plain { w: Vec<f32>, b: Option<Vec<f32>> },
    /// Depthwise: `[c, kh, kw]` and a bias; `fma`: one fused multiply-add a tap.
    Depthwise {
        w: Vec<f32>,
        b: Option<Vec<f32>>,
        fma: bool,
    },
    /// A channels-last output ([`channels_last`]): the NHWC kernels' weights; `x_nhwc`:
    /// the input is channels-last too (else channels-first, transposed first).
    Nhwc { w: NhwcWeights, x_nhwc: bool },
}

/// What a fused call runs (its [`Fused::prepared`]).
struct FusedConv {
    weights: Weights,
    /// Input sizes at load (static).
    x_sizes: [usize; 4],
    /// Clamp at the tile store (every step a clamp), else none and `steps` after.
    clamp: (f32, f32),
    steps: Vec<Step>,
    /// The argument the fused call writes (the last call's out).
    out: usize,
    /// The batch norm's saved statistics (empty), when it is the last call.
    stats: Option<[usize; 2]>,
    /// The fused calls' arguments; one more is a scratch tensor (`Fused::takes_scratch`).
    nargs: usize,
}

/// `aten::convolution.out`'s fusion hook: `None` for anything it does not fuse, bad
/// arguments included (the kernels report those when they run).
pub(super) fn fuse_convolution(
    ctx: &KernelContext<'_>,
    chain: &[ChainCall<'_>],
) -> Result<Option<Fused>> {
    Ok(plan(ctx, chain).ok().flatten())
}

fn f32s(t: &TensorRef<'_>) -> bool {
    t.dtype() == ScalarType::Float
}

/// A static float32 tensor of these sizes and strides (the convolution output's: dense,
/// channels-first or channels-last).
fn plain(t: &TensorRef<'_>, sizes: &[usize], strides: &[usize]) -> bool {
    f32s(t) && t.sizes() == sizes && t.strides() == strides && t.dynamism() == Dynamism::Static
}

/// The value of a constant one-element float32 tensor argument.
fn constant_scalar(ctx: &KernelContext<'_>, i: usize) -> Option<f32> {
    let t = ctx.tensor(i).ok()?;
    let v = t.data::<f32>().ok()?;
    (ctx.is_constant(i) && v.len() == 1 && t.numel() == 1).then(|| v[0])
}

fn scalar_f32(s: Option<Scalar>, none: f32) -> Option<f32> {
    match s {
        None => Some(none),
        Some(Scalar::Int(v)) => Some(v as f32),
        Some(Scalar::Double(v)) => Some(v as f32),
        Some(Scalar::Bool(_)) => None,
    }
}

/// The fusion of a prefix of `chain`, or why not.
fn plan(ctx: &KernelContext<'_>, chain: &[ChainCall<'_>]) -> Result<Option<Fused>> {
    let (x, w) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let bias = ctx.opt_tensor(2)?;
    let no = Ok(None);
    if chain.len() < 2
        || chain[0].op != CONV
        || x.dim() != 4
        || ctx.bool(6)?
        || !ctx.is_constant(1)
        || bias
            .as_ref()
            .is_some_and(|b| !ctx.is_constant(2) || !f32s(b))
        || !f32s(&x)
        || !f32s(&w)
        || x.dynamism() != Dynamism::Static
    {
        return no;
    }
    let c = conv_geometry(ctx, &x, &w)?;
    let shape = [c.xv.n, c.wv.n, c.oh, c.ow];
    // The output's layout, which every step's output shares: contiguous or channels-last.
    let o9 = ctx.tensor(9)?;
    let nhwc = o9.is_channels_last();
    if !nhwc && !o9.is_default_dim_order() {
        return no;
    }
    let strides = o9.strides();
    let id = |i: usize| ctx.value_index(i);
    // Per-channel scale and shift of the batch norm, if the chain has one.
    let mut k = 1;
    let mut out = 9;
    let mut stats = None;
    let mut affine = None;
    if chain[1].op == BATCH_NORM && id(chain[1].args.start) == id(9) {
        let a = chain[1].args.start;
        affine = batch_norm_affine(ctx, a, shape[1]);
        if affine.is_none() {
            return no;
        }
        (k, out, stats) = (2, a + 7, Some([a + 8, a + 9]));
    }
    let pre = id(out);
    let mut made = vec![id(9), pre];
    let mut steps = Vec::new();
    while let Some(call) = chain.get(k).filter(|_| steps.len() < MAX_STEPS) {
        let Some((step, o)) = step_of(ctx, call, (id(out), pre), &made, (&shape, strides)) else {
            break;
        };
        if !ctx.tensor(o).is_ok_and(|t| plain(&t, &shape, strides)) {
            break;
        }
        steps.push(step);
        made.push(id(o));
        (k, out, stats) = (k + 1, o, None);
    }
    if k < 2 || !ctx.tensor(out).is_ok_and(|t| plain(&t, &shape, strides)) {
        return no;
    }
    let Some(mut weights) = fold_weights(&c, affine.as_ref(), &w, bias.as_ref(), nhwc)? else {
        return no;
    };
    if let Weights::Nhwc { x_nhwc, .. } = &mut weights {
        *x_nhwc = x.is_channels_last();
        if !*x_nhwc && !x.is_default_dim_order() {
            return no;
        }
    }
    // Clamps alone go to the tile store, merged (when their ranges meet).
    let mut clamp = (f32::NEG_INFINITY, f32::INFINITY);
    let clamps_only = steps.iter().all(|s| matches!(s, Step::Clamp(..)));
    if clamps_only {
        for s in &steps {
            if let Step::Clamp(lo, hi) = *s {
                clamp = (clamp.0.max(lo), clamp.1.min(hi));
            }
        }
        // Merged clamps equal the sequence only when the ranges meet (NaN bounds: no).
        if clamp.0.is_nan() || clamp.1.is_nan() || clamp.0 > clamp.1 {
            return no;
        }
        steps.clear();
    }
    if matches!(weights, Weights::Plain { .. }) && clamp != (f32::NEG_INFINITY, f32::INFINITY) {
        // The portable convolution has no clamp at the store: the merged clamp is a step.
        steps.push(Step::Clamp(clamp.0, clamp.1));
        clamp = (f32::NEG_INFINITY, f32::INFINITY);
    }
    if steps.starts_with(&[Step::Sigmoid, Step::MulPre]) {
        steps.splice(..2, [Step::SigmoidMul]);
    }
    // Hardswish as PyTorch decomposes it: `x + 3`, the clamps to [0, 6] (one call or two),
    // the product with `x`, the division by 6.
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    for clamps in [
        &[Step::Clamp(0.0, inf), Step::Clamp(ninf, 6.0)][..],
        &[Step::Clamp(0.0, 6.0)],
    ] {
        let pattern: Vec<Step> = [
            &[Step::Add(3.0)][..],
            clamps,
            &[Step::MulPre, Step::Div(6.0)],
        ]
        .concat();
        if steps.starts_with(&pattern) {
            steps.splice(..pattern.len(), [Step::Hardswish]);
        }
    }
    let s = x.sizes();
    Ok(Some(Fused {
        calls: k,
        kernel: fused_conv,
        name: "etch::fused_convolution",
        prepared: std::sync::Arc::new(FusedConv {
            weights,
            x_sizes: [s[0], s[1], s[2], s[3]],
            clamp,
            steps,
            out,
            stats,
            nargs: chain[k - 1].args.end,
        }),
        takes_scratch: true,
    }))
}

/// `(scale, shift)` per channel of a `_native_batch_norm_legit_no_training` call whose
/// arguments start at `a` (`f64`: `scale = weight / sqrt(var + eps)`, `shift = bias -
/// mean · scale`), if its parameters are float32 constants of `c` channels.
fn batch_norm_affine(ctx: &KernelContext<'_>, a: usize, c: usize) -> Option<Vec<(f64, f64)>> {
    let param = |i: usize, optional: bool| -> Option<Option<&[f32]>> {
        match ctx.opt_tensor(a + i).ok()? {
            None if optional => Some(None),
            None => None,
            Some(t) => {
                let ok = ctx.is_constant(a + i) && f32s(&t) && t.numel() == c;
                ok.then(|| t.data::<f32>().ok()).flatten().map(Some)
            }
        }
    };
    let (w, b) = (param(1, true)?, param(2, true)?);
    let (m, v) = (param(3, false)??, param(4, false)??);
    let eps = ctx.double(a + 6).ok()?;
    Some(
        (0..c)
            .map(|ch| {
                let scale = w.map_or(1.0, |w| w[ch] as f64) / (v[ch] as f64 + eps).sqrt();
                let shift = b.map_or(0.0, |b| b[ch] as f64) - m[ch] as f64 * scale;
                (scale, shift)
            })
            .collect(),
    )
}

/// The step `call` adds to the chain (reading `cur`, the chain's value so far) and the
/// argument it writes, if it is one the fused kernel runs.
fn step_of(
    ctx: &KernelContext<'_>,
    call: &ChainCall<'_>,
    (cur, pre): (Option<u32>, Option<u32>),
    made: &[Option<u32>],
    (shape, strides): (&[usize; 4], &[usize]),
) -> Option<(Step, usize)> {
    let a = call.args.start;
    let id = |i: usize| ctx.value_index(a + i);
    let unary = |o: usize| (id(0) == cur).then_some(o);
    let one = |s: Result<Scalar>| s.is_ok_and(|s| s.to_f64() == 1.0);
    match call.op {
        "aten::relu.out" => Some((Step::Clamp(0.0, f32::INFINITY), a + unary(1)?)),
        "aten::sigmoid.out" => Some((Step::Sigmoid, a + unary(1)?)),
        "aten::hardtanh.out" => {
            let lo = scalar_f32(Some(ctx.scalar(a + 1).ok()?), 0.0)?;
            let hi = scalar_f32(Some(ctx.scalar(a + 2).ok()?), 0.0)?;
            Some((Step::Clamp(lo, hi), a + unary(3)?))
        }
        "aten::clamp.out" => {
            let lo = scalar_f32(ctx.opt_scalar(a + 1).ok()?, f32::NEG_INFINITY)?;
            let hi = scalar_f32(ctx.opt_scalar(a + 2).ok()?, f32::INFINITY)?;
            Some((Step::Clamp(lo, hi), a + unary(3)?))
        }
        "aten::div.out" => Some((Step::Div(constant_scalar(ctx, a + 1)?), a + unary(2)?)),
        "aten::mul.out" => {
            let (p, q) = (id(0), id(1));
            let step = if (p, q) == (cur, pre) || (p, q) == (pre, cur) {
                Step::MulPre
            } else if p == cur {
                Step::Mul(constant_scalar(ctx, a + 1)?)
            } else if q == cur {
                Step::Mul(constant_scalar(ctx, a)?)
            } else {
                return None;
            };
            Some((step, a + 2))
        }
        "aten::add.out" if one(ctx.scalar(a + 2)) => {
            let other = match (id(0) == cur, id(1) == cur) {
                (true, false) => 1,
                (false, true) => 0,
                _ => return None,
            };
            let step = match constant_scalar(ctx, a + other) {
                Some(v) => Step::Add(v),
                // A residual: a tensor from outside the chain, of the output's shape.
                None if !made.contains(&id(other))
                    && ctx
                        .tensor(a + other)
                        .is_ok_and(|t| plain(&t, shape, strides)) =>
                {
                    Step::AddTensor(a + other)
                }
                None => return None,
            };
            Some((step, a + 3))
        }
        _ => None,
    }
}

/// The convolution's weights with the batch norm folded in (`affine`), packed for the
/// kernel that runs it: into a channels-last output (`nhwc`) on the NHWC kernels; else one
/// group on [`gemm512`] (else the portable convolution), depthwise on [`depthwise_f32`].
fn fold_weights(
    c: &Conv,
    affine: Option<&Vec<(f64, f64)>>,
    w: &TensorRef<'_>,
    bias: Option<&TensorRef<'_>>,
    nhwc: bool,
) -> Result<Option<Weights>> {
    let ws = w.data::<f32>()?;
    let bs = match bias {
        Some(b) => Some(b.data::<f32>()?),
        None => None,
    };
    let cout = c.wv.n;
    let Some((s, ld, kk)) = weight_rows(c, ws) else {
        return Ok(None);
    };
    if bs.is_some_and(|b| b.len() != cout) {
        return Ok(None);
    }
    let scale = |co: usize| affine.map_or(1.0, |a| a[co].0);
    let folded: Vec<f32> = (0..cout * kk)
        .map(|i| (ws[i / kk * ld + i % kk] as f64 * scale(i / kk)) as f32)
        .collect();
    let bias: Option<Vec<f32>> = match (affine, bs) {
        (None, b) => b.map(|b| b.to_vec()),
        (Some(a), b) => Some(
            (0..cout)
                .map(|co| (b.map_or(0.0, |b| b[co] as f64) * a[co].0 + a[co].1) as f32)
                .collect(),
        ),
    };
    if nhwc {
        let w = NhwcWeights::pack(c, |co, r| folded[co * kk + r], bias.as_deref());
        return Ok(w.map(|w| Weights::Nhwc { w, x_nhwc: false }));
    }
    if c.g == 1 && gemm512::available() {
        let layout = gemm512::conv_layout_for(&s);
        let packed = gemm512::pack_conv(
            1,
            cout,
            kk,
            |co, r| folded[co * kk + r],
            bias.as_deref(),
            layout,
        );
        return Ok(packed.map(|packed| Weights::Packed { packed, layout }));
    }
    if c.g == 1 {
        // Without a batch norm, the same weights and sums as the unfused call.
        return Ok(Some(Weights::Plain { w: folded, b: bias }));
    }
    if c.g == c.xv.c && c.cin_g == 1 && c.cout_g == 1 {
        // Without a batch norm, the portable depthwise sums (product, then sum) keep the
        // unfused call's values.
        return Ok(Some(Weights::Depthwise {
            w: folded,
            b: bias,
            fma: affine.is_some(),
        }));
    }
    Ok(None)
}

/// The fused call: the convolution into the last call's out, then the steps.
fn fused_conv(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let p = ctx
        .prepared::<FusedConv>()
        .ok_or_else(|| Error::invalid_state(format!("{op}: called without its load-time state")))?;
    let (x, w) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if x.sizes() != p.x_sizes {
        return Err(Error::invalid_argument(format!(
            "{op}: input {:?} is not the {:?} it was fused for at load",
            x.sizes(),
            p.x_sizes
        )));
    }
    let mut geom = conv_geometry(ctx, &x, &w)?;
    let shape = [geom.xv.n, geom.wv.n, geom.oh, geom.ow];
    let plane = geom.oh * geom.ow;
    let mut out = ctx.resize_out(p.out, &shape)?;
    if let Some([s1, s2]) = p.stats {
        ctx.resize_out(s1, &[0])?;
        ctx.resize_out(s2, &[0])?;
    }
    geom.ov = View4 {
        n: shape[0],
        c: shape[1],
        h: shape[2],
        w: shape[3],
        s: [shape[1] * plane, plane, shape[3], 1],
    };
    let xs = x.data::<f32>()?;
    let o = out.data_mut::<f32>()?;
    let n = o.len();
    let (adds, n_adds) = residuals(ctx, p, &shape)?;
    let adds = &adds[..n_adds];
    // With a scratch tensor (the output shares memory with the input): a copy of the input
    // when it is smaller than the output (and no residual could share memory with the
    // output), else the convolution goes there first.
    let mut scratch = match ctx.num_args() > p.nargs {
        true => {
            let t = ctx.tensor(p.nargs)?;
            Some(ctx.resize_out(p.nargs, t.sizes())?)
        }
        false => None,
    };
    let scratch = match scratch.as_mut() {
        Some(t) => Some(t.data_mut::<f32>()?),
        None => None,
    };
    match scratch {
        None => {
            convolve(op, p, &geom, xs, o)?;
            run_steps(&p.steps, None, o, adds);
        }
        Some(s) if adds.is_empty() && xs.len() < n && xs.len() <= s.len() => {
            let xc = &mut s[..xs.len()];
            xc.copy_from_slice(xs);
            convolve(op, p, &geom, xc, o)?;
            run_steps(&p.steps, None, o, adds);
        }
        Some(s) => {
            let len = s.len();
            let s = s.get_mut(..n).ok_or_else(|| {
                Error::invalid_state(format!("{op}: scratch of {len} elements, {n} needed"))
            })?;
            convolve(op, p, &geom, xs, s)?;
            if adds.is_empty() && !p.steps.is_empty() {
                // Chunk by chunk from the scratch tensor to the output.
                run_steps(&p.steps, Some(s), o, adds);
            } else {
                // In place, then copied: a residual may share memory with the output, so
                // every step reads before the output is written.
                run_steps(&p.steps, None, s, adds);
                o.copy_from_slice(s);
            }
        }
    }
    Ok(())
}

/// The residuals a fused call adds, in step order (a fixed array: no allocation).
fn residuals<'a>(
    ctx: &KernelContext<'a>,
    p: &FusedConv,
    shape: &[usize; 4],
) -> Result<([&'a [f32]; MAX_STEPS], usize)> {
    let mut adds: [&[f32]; MAX_STEPS] = [&[]; MAX_STEPS];
    let mut n = 0;
    for s in &p.steps {
        if let Step::AddTensor(i) = *s {
            let t = ctx.tensor(i)?;
            if t.sizes() != shape || n == MAX_STEPS {
                return Err(Error::invalid_argument(format!(
                    "{}: residual {:?} is not the output's {shape:?}",
                    ctx.op_name(),
                    t.sizes()
                )));
            }
            adds[n] = t.data::<f32>()?;
            n += 1;
        }
    }
    Ok((adds, n))
}

/// The convolution of `xs` into `dst` on the folded weights (clamps at the store).
fn convolve(op: &str, p: &FusedConv, geom: &Conv, xs: &[f32], dst: &mut [f32]) -> Result<()> {
    match &p.weights {
        Weights::Packed { packed, layout } => {
            let s = packed_shape(geom).map(|(s, _)| s);
            s.and_then(|s| gemm512::conv2d(&s, xs, packed, *layout, dst, p.clamp.0, p.clamp.1).ok())
                .ok_or_else(|| Error::invalid_state(format!("{op}: the packed kernel refused")))
        }
        Weights::Plain { w, b } => {
            let mut g = *geom;
            let (kh, kw) = (g.kh, g.kw);
            g.wv.s = [g.cin_g * kh * kw, kh * kw, kw, 1];
            conv2d::<f32>(&g, xs, w, b.as_deref(), dst);
            Ok(())
        }
        Weights::Depthwise { w, b, fma } => depthwise_f32(
            (geom.xv, xs),
            (w, b.as_deref()),
            (geom.ov, dst),
            [geom.kh, geom.kw],
            [geom.stride.0, geom.stride.1],
            [geom.pad.0, geom.pad.1],
            [geom.dil.0, geom.dil.1],
            p.clamp,
            *fma,
        ),
        Weights::Nhwc { w, x_nhwc } => channels_last::run(op, geom, w, (xs, *x_nhwc), dst, p.clamp),
    }
}

/// Elements a task handles at once (one pass a step over them, in L1: 4 KiB, with the
/// values before the steps 8; 256 spent a sixth of a SiLU in calls between chunks).
const CHUNK: usize = 1024;

/// Runs `steps` over `o` in place (over `src`'s values into `o` when given), a chunk at a
/// time (each element on its own, so the split over threads changes nothing).
fn run_steps(steps: &[Step], src: Option<&[f32]>, o: &mut [f32], adds: &[&[f32]]) {
    if steps.is_empty() {
        return;
    }
    let n = o.len();
    let chunks = n.div_ceil(CHUNK);
    // A sigmoid costs what an `exp` does (`MATH_TASK`), the other steps a pass each.
    let cost: usize = steps
        .iter()
        .map(|s| match s {
            Step::Sigmoid | Step::SigmoidMul | Step::Hardswish => ELEMENTWISE_TASK / MATH_TASK,
            _ => 1,
        })
        .sum();
    let tasks = threads::tasks_for(n * cost, ELEMENTWISE_TASK).clamp(1, chunks.max(1));
    let needs_pre = steps.contains(&Step::MulPre);
    // The widest variant this CPU has, chosen once.
    let chunk_fn: ChunkFn = {
        #[cfg(target_arch = "x86_64")]
        if crate::util::avx512() {
            chunk_avx512
        } else if std::arch::is_x86_feature_detected!("avx2") {
            chunk_avx2
        } else {
            chunk_baseline
        }
        #[cfg(not(target_arch = "x86_64"))]
        chunk_baseline
    };
    let out = SharedMut::new(o);
    threads::run_parts(chunks, tasks, &|part| {
        let mut copy = [0f32; CHUNK];
        for ch in part {
            let start = ch * CHUNK;
            let len = CHUNK.min(n - start);
            // SAFETY: chunk `ch` is this task's alone.
            let cur = unsafe { out.slice(start, len) };
            // The values before the steps: the source chunk, else a copy of the output's.
            let pre = match src {
                Some(src) => &src[start..start + len],
                None if needs_pre => {
                    copy[..len].copy_from_slice(cur);
                    &copy[..len]
                }
                None => &[][..],
            };
            let src = src.map(|src| &src[start..start + len]);
            // SAFETY: `chunk_fn` is a variant the CPU has (above).
            unsafe { chunk_fn(steps, src, cur, pre, (start, adds)) };
        }
    });
}

/// A variant of [`chunk`]; unsafe as its variants need their instruction sets.
type ChunkFn = unsafe fn(&[Step], Option<&[f32]>, &mut [f32], &[f32], (usize, &[&[f32]]));

/// [`chunk`] compiled for each instruction set: its loops in the set's vectors, the same
/// roundings (no contraction into fused multiply-adds).
macro_rules! chunk_variants {
    ($($(#[$attr:meta])* $name:ident, $needs:literal;)*) => {$(
        /// [`chunk`] for the variants of [`ChunkFn`].
        ///
        /// # Safety
        #[doc = $needs]
        $(#[$attr])*
        unsafe fn $name(
            steps: &[Step],
            src: Option<&[f32]>,
            cur: &mut [f32],
            pre: &[f32],
            rs: (usize, &[&[f32]]),
        ) {
            chunk(steps, src, cur, pre, rs)
        }
    )*};
}

chunk_variants! {
    chunk_baseline, "None (unsafe only to share [`ChunkFn`]'s type).";
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    chunk_avx2, "The CPU has AVX2.";
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    chunk_avx512, "The CPU has AVX-512F.";
}

/// The steps over one chunk `cur` (at `start` in the tensor; `pre`: its values before the
/// steps), the residuals of `adds` in step order. With `src`, the first step reads it and
/// writes `cur` (whose values are not read); every other step runs in place.
#[inline(always)]
fn chunk(
    steps: &[Step],
    src: Option<&[f32]>,
    cur: &mut [f32],
    pre: &[f32],
    (start, adds): (usize, &[&[f32]]),
) {
    let len = cur.len();
    let mut residual = adds.iter();
    for (k, &s) in steps.iter().enumerate() {
        let r = match s {
            Step::AddTensor(_) => residual.next().map(|r| &r[start..start + len]),
            _ => None,
        };
        step(s, src.filter(|_| k == 0), cur, pre, r);
    }
}

/// One step into `cur`, from `src` when given, else in place (`pre`: the values before the
/// steps; `r`: the residual of an `AddTensor`).
#[inline(always)]
fn step(s: Step, src: Option<&[f32]>, cur: &mut [f32], pre: &[f32], r: Option<&[f32]>) {
    /// `cur[i] = f(v[i])`, `v` being `src` or `cur` itself.
    #[inline(always)]
    fn each(src: Option<&[f32]>, cur: &mut [f32], f: impl Fn(f32) -> f32) {
        match src {
            Some(x) => cur.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)),
            None => cur.iter_mut().for_each(|v| *v = f(*v)),
        }
    }
    /// `cur[i] = f(v[i], w[i])`.
    #[inline(always)]
    fn each2(src: Option<&[f32]>, cur: &mut [f32], w: &[f32], f: impl Fn(f32, f32) -> f32) {
        match src {
            Some(x) => cur
                .iter_mut()
                .zip(x)
                .zip(w)
                .for_each(|((o, &v), &w)| *o = f(v, w)),
            None => cur.iter_mut().zip(w).for_each(|(v, &w)| *v = f(*v, w)),
        }
    }
    let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
    match s {
        // `aten::clamp`'s order: the lower bound, then the upper.
        Step::Clamp(lo, hi) => each(src, cur, |v| {
            let y = if v < lo { lo } else { v };
            if y > hi { hi } else { y }
        }),
        // In place (a copy through a scratch chunk, a `memmove` call per chunk, made these
        // steps 1.5x slower than the sigmoid into another buffer).
        Step::Sigmoid => {
            let vector = match src {
                Some(x) => crate::vmath::sigmoid(x, cur),
                None => crate::vmath::sigmoid_in_place(cur),
            };
            if !vector {
                each(src, cur, sigmoid);
            }
        }
        Step::SigmoidMul => {
            let vector = match src {
                Some(x) => crate::vmath::sigmoid_mul(x, cur),
                None => crate::vmath::sigmoid_mul_in_place(cur),
            };
            if !vector {
                each(src, cur, |v| v * sigmoid(v));
            }
        }
        Step::MulPre => each2(src, cur, pre, |v, p| v * p),
        Step::Hardswish => each(src, cur, hardswish),
        Step::Add(c) => each(src, cur, |v| v + c),
        Step::Mul(c) => each(src, cur, |v| v * c),
        Step::Div(c) => each(src, cur, |v| v / c),
        Step::AddTensor(_) => match r {
            Some(r) => each2(src, cur, r, |v, r| v + r),
            None => each(src, cur, |v| v),
        },
    }
}

/// PyTorch's decomposed hardswish, `x · clamp(x + 3, 0, 6) / 6` (NaN stays NaN).
#[inline(always)]
fn hardswish(x: f32) -> f32 {
    let t = x + 3.0;
    let t = if t < 0.0 { 0.0 } else { t };
    let t = if t > 6.0 { 6.0 } else { t };
    x * t / 6.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of first step gives the same bits reading a scratch tensor (the step
    /// out of place) as in place over a copy of it.
    #[test]
    fn first_step_from_the_source_equals_in_place() {
        let n = 3 * CHUNK + 5;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 29) % 97) as f32 * 0.21 - 9.0)
            .collect();
        let r: Vec<f32> = (0..n).map(|i| ((i * 11) % 31) as f32 * 0.3 - 4.0).collect();
        let firsts = [
            Step::Clamp(-1.5, 2.0),
            Step::Sigmoid,
            Step::SigmoidMul,
            Step::MulPre,
            Step::Hardswish,
            Step::Add(3.0),
            Step::Mul(0.5),
            Step::Div(6.0),
            Step::AddTensor(0),
        ];
        for first in firsts {
            let steps = [first, Step::MulPre, Step::Add(0.25)];
            let mut want = x.clone();
            run_steps(&steps, None, &mut want, &[&r]);
            let mut got = vec![0f32; n];
            run_steps(&steps, Some(&x), &mut got, &[&r]);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{first:?}");
        }
    }

    /// The hardswish step gives the bits of the five steps it replaces (PyTorch's
    /// decomposition), in place and from a scratch tensor, NaN and infinities included.
    #[test]
    fn hardswish_step_equals_the_decomposition() {
        let mut x: Vec<f32> = (0..5000).map(|i| (i as f32 - 2500.0) * 0.0037).collect();
        x.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -3.0,
            3.0,
            -0.0,
            1e-30,
        ]);
        let five = [
            Step::Add(3.0),
            Step::Clamp(0.0, f32::INFINITY),
            Step::Clamp(f32::NEG_INFINITY, 6.0),
            Step::MulPre,
            Step::Div(6.0),
        ];
        let mut want = x.clone();
        run_steps(&five, None, &mut want, &[]);
        for src in [false, true] {
            let mut got = if src { vec![0f32; x.len()] } else { x.clone() };
            run_steps(&[Step::Hardswish], src.then_some(&x[..]), &mut got, &[]);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "from the source: {src}");
        }
    }

    /// The steps over chunks and threads give what each op gives over the whole tensor
    /// (the unfused kernels' arithmetic: the same sigmoid, one rounding a step).
    #[test]
    fn steps_match_the_ops_one_after_the_other() {
        let n = 100 * CHUNK + 17;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 101) as f32 * 0.17 - 8.0)
            .collect();
        let r: Vec<f32> = (0..n).map(|i| ((i * 13) % 29) as f32 * 0.5 - 7.0).collect();
        // SiLU, then hardswish's add, clamps, product with the value before the steps and
        // division, then a residual.
        let steps = [
            Step::Sigmoid,
            Step::MulPre,
            Step::Add(3.0),
            Step::Clamp(0.0, f32::INFINITY),
            Step::Clamp(f32::NEG_INFINITY, 6.0),
            Step::MulPre,
            Step::Div(6.0),
            Step::Mul(0.5),
            Step::AddTensor(0),
        ];
        let mut sig = vec![0f32; n];
        if !crate::vmath::sigmoid(&x, &mut sig) {
            sig.iter_mut()
                .zip(&x)
                .for_each(|(s, v)| *s = 1.0 / (1.0 + (-v).exp()));
        }
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let silu = sig[i] * x[i];
                let c = (silu + 3.0).clamp(0.0, 6.0);
                (c * x[i] / 6.0) * 0.5 + r[i]
            })
            .collect();
        for threads in [1, 3] {
            crate::threads::set_num_threads(threads);
            let mut o = x.clone();
            run_steps(&steps, None, &mut o, &[&r]);
            assert!(o == want, "in place, {threads} threads");
            // The same from a scratch tensor (the first step reads it), and with the SiLU
            // pair as one step.
            let mut o1 = vec![0f32; n];
            run_steps(&steps, Some(&x), &mut o1, &[&r]);
            assert!(o1 == want, "from scratch, sigmoid first, {threads} threads");
            let mut steps2 = steps.to_vec();
            steps2.splice(..2, [Step::SigmoidMul]);
            let mut o2 = vec![0f32; n];
            run_steps(&steps2, Some(&x), &mut o2, &[&r]);
            assert!(o2 == want, "from scratch, {threads} threads");
        }
        crate::threads::set_num_threads(0);
    }
}
