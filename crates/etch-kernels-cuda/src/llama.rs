//! ExecuTorch's `llama::` custom ops on CUDA (llama.cu, with attn.cuh's attention loop
//! shared with `etch::attention`): `update_cache`, `update_cache_with_indices`,
//! `custom_sdpa`, `sdpa_with_kv_cache` (f32, bf16, f16) and `custom_quantized_sdpa` (int8
//! operands, f32 output). Arguments are decoded and checked by the CPU kernels' `*_call`
//! functions (`etch_kernels::llama`). A start position given as a tensor (what `etch lower`
//! passes) is read on the device: out of range, it sets the device error word and nothing
//! is written. Few query rows (decode) split the keys over blocks (flash-decoding), the
//! split chosen from the shapes alone as for `etch::attention`, so a recorded CUDA graph
//! stays valid at every position. Partials live in the per-device scratch buffer.

use crate::Family;
use crate::context::{Launch, rows_config, with_device};
use crate::etch_ops::attention::{MAX_HEAD_DIM, THREADS, split_keys};
use crate::etch_ops::{bytes, carve, grid_dim, io_kernel};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result, TensorRef};
use etch_kernels::llama::{
    AttnShape, StartPos, custom_sdpa_call, quantized_sdpa_call, sdpa_with_kv_cache_call,
    update_cache_call, update_cache_with_indices_call,
};
use etch_kernels::llama_gdr::gated_delta_rule_call;

/// `struct LlamaWrite` in llama.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct LlamaWrite {
    src: u64,
    dst: u64,
    pos: u64,
    idx: u64,
    err: u64,
    pos_val: i64,
    batch: i64,
    seq: i64,
    cache: i64,
    row: i64,
    unit: i32,
    pad: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for LlamaWrite {}

/// `struct LlamaAttn` in llama.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct LlamaAttn {
    q: u64,
    kc: u64,
    vc: u64,
    mask: u64,
    pos: u64,
    out: u64,
    part: u64,
    err: u64,
    qz: u64,
    qs: u64,
    kz: u64,
    ks: u64,
    vz: u64,
    vs: u64,
    pos_val: i64,
    batch: i64,
    seq: i64,
    heads: i64,
    kv_heads: i64,
    dim: i64,
    cache: i64,
    splits: i64,
    chunk: i64,
    scale: f32,
    causal: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for LlamaAttn {}

/// The kernel's view of a start position: a device address (0 for an Int) and the Int.
fn pos_arg(start: &StartPos<'_>) -> (u64, i64) {
    match start {
        StartPos::Value(v) => (0, *v),
        StartPos::Tensor(t) => (ptr(t), 0),
    }
}

/// The tensor behind a start position, if any (for device checks).
fn pos_tensor<'t, 'a>(start: &'t StartPos<'a>) -> Option<&'t TensorRef<'a>> {
    match start {
        StartPos::Tensor(t) => Some(t),
        StartPos::Value(_) => None,
    }
}

/// The widest copy unit (16, 8, 4, 2 or 1 bytes) dividing `row` and aligning every address.
fn copy_unit(row: usize, addrs: &[u64]) -> i32 {
    for u in [16usize, 8, 4, 2] {
        if row.is_multiple_of(u) && addrs.iter().all(|&a| a.is_multiple_of(u as u64)) {
            return u as i32;
        }
    }
    1
}

/// Copies `value`'s rows into `cache` at `start` (or at `indices`), on the device.
fn write_rows(
    ctx: &KernelContext<'_>,
    value: &TensorRef<'_>,
    cache: &TensorRef<'_>,
    start: &StartPos<'_>,
    indices: Option<&TensorRef<'_>>,
) -> Result<()> {
    let op = ctx.op_name();
    same_device(op, &[cache, value])?;
    for t in pos_tensor(start).into_iter().chain(indices) {
        same_device(op, &[cache, t])?;
    }
    let s = value.sizes();
    let row = s[2] * s[3] * value.dtype().element_size();
    let (src, dst) = (ptr(value), ptr(cache));
    let unit = copy_unit(row, &[src, dst]);
    let (pos, pos_val) = pos_arg(start);
    let mut a = LlamaWrite {
        src,
        dst,
        pos,
        idx: indices.map_or(0, ptr),
        err: 0,
        pos_val,
        batch: s[0] as i64,
        seq: s[1] as i64,
        cache: cache.sizes()[1] as i64,
        row: row as i64,
        unit,
        pad: 0,
    };
    let n = (s[0] * s[1] * row / unit as usize) as i64;
    with_device(ctx, cache.device(), |mut l: Launch<'_>| {
        a.err = l.err_ptr();
        let f = l.function(Family::Llama, "llama_cache_write")?;
        // SAFETY: value and cache are live, contiguous device tensors of the shapes
        // `check_update` matched; the kernel checks the position (or each index) on the
        // device before writing a row of the cache; the argument matches the kernel's.
        unsafe { l.launch(f, n.max(1), &mut [arg(&mut a)]) }
    })
}

/// `llama::update_cache.out` on CUDA.
pub(crate) fn update_cache_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let c = update_cache_call(ctx)?;
    write_rows(ctx, &c.value, &c.cache, &c.start, None)
}

/// `llama::update_cache_with_indices.out` on CUDA.
pub(crate) fn update_cache_with_indices_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let c = update_cache_with_indices_call(ctx)?;
    write_rows(
        ctx,
        &c.value,
        &c.cache,
        &StartPos::Value(0),
        Some(&c.indices),
    )
}

/// One attention launch: the operands' addresses (int8 parameters zero for float
/// attention) and the kernels to run.
struct Attend<'t, 'a> {
    shape: &'t AttnShape,
    q: &'t TensorRef<'a>,
    k_cache: &'t TensorRef<'a>,
    v_cache: &'t TensorRef<'a>,
    mask: Option<&'t TensorRef<'a>>,
    start: &'t StartPos<'a>,
    out: &'t TensorRef<'a>,
    /// `(qz, qs, kz, ks, vz, vs)` for the int8 kernel.
    params: [u64; 6],
    fwd: &'static str,
    combine: &'static str,
}

/// Launches attention (and the split merge) for `x`.
fn attend(ctx: &KernelContext<'_>, x: &Attend<'_, '_>) -> Result<()> {
    let op = ctx.op_name();
    let s = x.shape;
    same_device(op, &[x.out, x.q, x.k_cache, x.v_cache])?;
    for t in pos_tensor(x.start).into_iter().chain(x.mask) {
        same_device(op, &[x.out, t])?;
    }
    if s.dim > MAX_HEAD_DIM {
        return Err(Error::not_supported(format!(
            "{op}: head_dim {} exceeds the CUDA kernel's {MAX_HEAD_DIM}",
            s.dim
        )));
    }
    let rows = s.batch * s.seq * s.heads;
    if rows == 0 || s.dim == 0 {
        return Ok(());
    }
    let (splits, chunk) = split_keys(rows, s.max_seq);
    let grid_rows = grid_dim(op, "query rows", rows, i32::MAX as usize)?;
    let part_bytes = if splits > 1 {
        bytes(op, &[rows, splits, s.dim + 2, 4])?
    } else {
        0
    };
    let (_, scratch) = carve(op, [part_bytes])?;
    let (pos, pos_val) = pos_arg(x.start);
    let [qz, qs, kz, ks, vz, vs] = x.params;
    let mut a = LlamaAttn {
        q: ptr(x.q),
        kc: ptr(x.k_cache),
        vc: ptr(x.v_cache),
        mask: x.mask.map_or(0, ptr),
        pos,
        out: ptr(x.out),
        qz,
        qs,
        kz,
        ks,
        vz,
        vs,
        pos_val,
        batch: s.batch as i64,
        seq: s.seq as i64,
        heads: s.heads as i64,
        kv_heads: s.kv_heads as i64,
        dim: s.dim as i64,
        cache: s.max_seq as i64,
        splits: splits as i64,
        chunk: chunk as i64,
        scale: s.scale as f32,
        causal: i32::from(s.causal),
        ..Default::default()
    };
    let fwd_cfg = LaunchConfig {
        grid_dim: (grid_rows, splits as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let combine_cfg = rows_config(rows, THREADS);
    with_device(ctx, x.out.device(), |mut l: Launch<'_>| {
        a.err = l.err_ptr();
        if splits > 1 {
            a.part = l.scratch(scratch)?;
        }
        let f = l.function(Family::Llama, x.fwd)?;
        let mut args = [arg(&mut a)];
        // SAFETY: every pointer is live, contiguous device memory of the shapes the
        // `*_call` decoder checked (the int8 parameters `[.., 1]` per head row); the
        // kernel reads the position on the device and writes nothing when it does not
        // fit; `part` holds rows * splits partials when splits > 1.
        unsafe { l.launch_with(f, fwd_cfg, &mut args) }?;
        if splits > 1 {
            let g = l.function(Family::Llama, x.combine)?;
            // SAFETY: as above; reads the partials the previous kernel wrote.
            unsafe { l.launch_with(g, combine_cfg, &mut args) }?;
        }
        Ok(())
    })
}

/// The f32 / bf16 / f16 attention kernels for the query's dtype.
fn float_kernels(op: &str, q: &TensorRef<'_>) -> Result<(&'static str, &'static str)> {
    let dt = q.dtype();
    Ok((
        io_kernel(
            op,
            dt,
            ["llama_sdpa_f32", "llama_sdpa_bf16", "llama_sdpa_f16"],
        )?,
        io_kernel(
            op,
            dt,
            [
                "llama_combine_f32",
                "llama_combine_bf16",
                "llama_combine_f16",
            ],
        )?,
    ))
}

/// `llama::custom_sdpa.out` on CUDA.
pub(crate) fn custom_sdpa_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = custom_sdpa_call(ctx)?;
    let (fwd, combine) = float_kernels(op, &c.q)?;
    attend(
        ctx,
        &Attend {
            shape: &c.shape,
            q: &c.q,
            k_cache: &c.k_cache,
            v_cache: &c.v_cache,
            mask: c.mask.as_ref(),
            start: &c.start,
            out: &c.out,
            params: [0; 6],
            fwd,
            combine,
        },
    )
}

/// `llama::sdpa_with_kv_cache.out` on CUDA: both cache writes, then the attention.
pub(crate) fn sdpa_with_kv_cache_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = sdpa_with_kv_cache_call(ctx)?;
    let s = &c.sdpa;
    let (fwd, combine) = float_kernels(op, &s.q)?;
    write_rows(ctx, &c.key, &s.k_cache, &s.start, None)?;
    write_rows(ctx, &c.value, &s.v_cache, &s.start, None)?;
    attend(
        ctx,
        &Attend {
            shape: &s.shape,
            q: &s.q,
            k_cache: &s.k_cache,
            v_cache: &s.v_cache,
            mask: s.mask.as_ref(),
            start: &s.start,
            out: &s.out,
            params: [0; 6],
            fwd,
            combine,
        },
    )
}

/// `llama::custom_quantized_sdpa.out` on CUDA.
pub(crate) fn custom_quantized_sdpa_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = quantized_sdpa_call(ctx)?;
    same_device(
        op,
        &[
            &c.out,
            &c.q.zero_points,
            &c.q.scales,
            &c.k.zero_points,
            &c.k.scales,
            &c.v.zero_points,
            &c.v.scales,
        ],
    )?;
    attend(
        ctx,
        &Attend {
            shape: &c.shape,
            q: &c.q.data,
            k_cache: &c.k.data,
            v_cache: &c.v.data,
            mask: c.mask.as_ref(),
            start: &c.start,
            out: &c.out,
            params: [
                ptr(&c.q.zero_points),
                ptr(&c.q.scales),
                ptr(&c.k.zero_points),
                ptr(&c.k.scales),
                ptr(&c.v.zero_points),
                ptr(&c.v.scales),
            ],
            fwd: "llama_qsdpa",
            combine: "llama_combine_f32",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::copy_unit;

    #[test]
    fn copy_unit_is_the_widest_aligned_divisor() {
        assert_eq!(copy_unit(128, &[0x1000, 0x2000]), 16);
        assert_eq!(copy_unit(64 * 2, &[0x1008, 0x2000]), 8);
        assert_eq!(copy_unit(12, &[0x1000, 0x2000]), 4);
        assert_eq!(copy_unit(6, &[0x1000, 0x2000]), 2);
        assert_eq!(copy_unit(3, &[0x1000, 0x2000]), 1);
        assert_eq!(copy_unit(16, &[0x1001, 0x2000]), 1);
    }
}

/// `struct LlamaGdr` in llama.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct LlamaGdr {
    q: u64,
    k: u64,
    v: u64,
    decay: u64,
    beta: u64,
    init: u64,
    out: u64,
    fin: u64,
    batch: i64,
    heads: i64,
    sheads: i64,
    seq: i64,
    kd: i64,
    vd: i64,
    channelwise: i32,
    pad: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for LlamaGdr {}

/// `llama::gated_delta_rule.out` (and `channelwise_gated_delta_rule.out`) on CUDA: one
/// thread per (batch item, state head, value column), tokens in order (see llama.cu).
pub(crate) fn gated_delta_rule_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = gated_delta_rule_call(ctx)?;
    let all = [
        (&c.out, "out"),
        (&c.final_state, "final_state_out"),
        (&c.query, "query"),
        (&c.key, "key"),
        (&c.value, "value"),
        (&c.decay, "decay"),
        (&c.beta, "beta"),
        (&c.initial_state, "initial_state"),
    ];
    same_device(op, &all.map(|(t, _)| t))?;
    for (t, what) in all {
        etch_kernels::util::require_contiguous(op, what, t)?;
    }
    if c.batch == 0 || c.v_dim == 0 {
        return Ok(());
    }
    let mut a = LlamaGdr {
        q: ptr(&c.query),
        k: ptr(&c.key),
        v: ptr(&c.value),
        decay: ptr(&c.decay),
        beta: ptr(&c.beta),
        init: ptr(&c.initial_state),
        out: ptr(&c.out),
        fin: ptr(&c.final_state),
        batch: c.batch as i64,
        heads: c.heads as i64,
        sheads: c.state_heads as i64,
        seq: c.seq as i64,
        kd: c.k_dim as i64,
        vd: c.v_dim as i64,
        channelwise: i32::from(c.channelwise),
        pad: 0,
    };
    let cfg = LaunchConfig {
        grid_dim: (
            grid_dim(op, "value column tiles", c.v_dim.div_ceil(128), 1 << 30)?,
            grid_dim(op, "state heads", c.state_heads, 65_535)?,
            grid_dim(op, "batch", c.batch, 65_535)?,
        ),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Llama, "llama_gdr")?;
        // SAFETY: every operand is a contiguous float32 tensor of the shape the decoder
        // checked, on this device; each thread writes its own column of its state and out.
        unsafe { l.launch_with(f, cfg, &mut [arg(&mut a)]) }
    })
}
