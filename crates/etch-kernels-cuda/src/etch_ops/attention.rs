//! `etch::attention.out` (attention.cu), decoded by the CPU kernels' `attention_call`: the
//! position is read on the device; k and v are written into the caches (an out-of-range
//! position sets the device error word and nothing is written), then causal GQA attention
//! with an online softmax, one block per query row and key split. Few query rows (decode)
//! split the keys over several blocks (flash-decoding) whose partials a second kernel
//! merges; the split is chosen from the shapes alone. Many rows (prefill) take one block
//! per (token, KV head) with a warp per query head of the group. `etch::gated_attention.out`
//! runs the same kernels with its gate.

use super::{bytes, carve, grid_dim, io_kernel};
use crate::Family;
use crate::context::{Launch, config, rows_config, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::etch_ops::attention::{AttentionCall, attention_call, gated_attention_call};

/// `struct AttnArgs` in attention.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct AttnArgs {
    q: u64,
    k: u64,
    v: u64,
    kc: u64,
    vc: u64,
    pos: u64,
    out: u64,
    gate: u64,
    part: u64,
    err: u64,
    batch: i64,
    seq: i64,
    hq: i64,
    hkv: i64,
    dim: i64,
    cache: i64,
    splits: i64,
    chunk: i64,
    scale: f32,
    es: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for AttnArgs {}

/// Largest head_dim (`ATTN_MAXD`: 8 dims a lane).
pub(crate) const MAX_HEAD_DIM: usize = 256;
/// Threads of an attention block (`ATTN_WARPS` warps).
pub(crate) const THREADS: u32 = 256;
/// Blocks the key splits aim for, and the fewest keys a split takes.
const TARGET_BLOCKS: usize = 1024;
const MIN_CHUNK: usize = 16;

/// Key splits and keys per split for `rows` query rows over a cache of `cache` positions:
/// one split when the rows alone fill the GPU, else enough to reach about
/// [`TARGET_BLOCKS`] blocks.
pub(crate) fn split_keys(rows: usize, cache: usize) -> (usize, usize) {
    let cache = cache.max(1);
    if rows >= TARGET_BLOCKS / 4 || cache <= MIN_CHUNK {
        return (1, cache);
    }
    let splits = TARGET_BLOCKS
        .div_ceil(rows.max(1))
        .min(cache.div_ceil(MIN_CHUNK))
        .max(1);
    let chunk = cache.div_ceil(splits);
    (cache.div_ceil(chunk), chunk)
}

/// Whether one-split calls take `attn_fwd_heads` (`ETCH_ATTN_HEADS=0`: the row-per-block
/// kernel, for comparisons).
fn by_heads() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_ATTN_HEADS").map_or(true, |v| v != "0"))
}

/// `etch::attention.out` on CUDA.
pub(crate) fn attention_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let c = attention_call(ctx)?;
    launch(ctx, c)
}

/// `etch::gated_attention.out` on CUDA: the same kernels, each output element stored times
/// the rounded sigmoid of the gate's (`attn_store`).
pub(crate) fn gated_attention_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let c = gated_attention_call(ctx)?;
    launch(ctx, c)
}

fn launch(ctx: &mut KernelContext<'_>, c: AttentionCall<'_>) -> Result<()> {
    let op = ctx.op_name();
    same_device(
        op,
        &[&c.out, &c.q, &c.k, &c.v, &c.k_cache, &c.v_cache, &c.pos],
    )?;
    if let Some(g) = &c.gate {
        same_device(op, &[&c.out, g])?;
    }
    let [batch, seq, hq, dim] = [
        c.q.sizes()[0],
        c.q.sizes()[1],
        c.q.sizes()[2],
        c.q.sizes()[3],
    ];
    let (hkv, cache) = (c.k.sizes()[2], c.k_cache.sizes()[1]);
    if dim > MAX_HEAD_DIM {
        return Err(Error::not_supported(format!(
            "{op}: head_dim {dim} exceeds the CUDA kernel's {MAX_HEAD_DIM}"
        )));
    }
    let rows = batch * seq * hq;
    let (splits, chunk) = split_keys(rows, cache);
    let grid_rows = grid_dim(op, "query rows", rows, i32::MAX as usize)?;
    let dt = c.q.dtype();
    // One split and 2 to 8 query heads a KV head: a block per (b, t, KV head), a warp
    // per query head of the group (attn_fwd_heads), so the group shares each K/V row read.
    let group = hq / hkv.max(1);
    let heads = splits == 1 && (2..=8).contains(&group) && by_heads();
    let fwd = if heads {
        io_kernel(
            op,
            dt,
            [
                "attn_fwd_heads_f32",
                "attn_fwd_heads_bf16",
                "attn_fwd_heads_f16",
            ],
        )?
    } else {
        io_kernel(op, dt, ["attn_fwd_f32", "attn_fwd_bf16", "attn_fwd_f16"])?
    };
    let combine = io_kernel(
        op,
        dt,
        ["attn_combine_f32", "attn_combine_bf16", "attn_combine_f16"],
    )?;
    let part_bytes = if splits > 1 {
        bytes(op, &[rows, splits, dim + 2, 4])?
    } else {
        0
    };
    let (_, scratch) = carve(op, [part_bytes])?;
    let mut a = AttnArgs {
        q: ptr(&c.q),
        k: ptr(&c.k),
        v: ptr(&c.v),
        kc: ptr(&c.k_cache),
        vc: ptr(&c.v_cache),
        pos: ptr(&c.pos),
        out: ptr(&c.out),
        gate: c.gate.as_ref().map_or(0, ptr),
        part: 0,
        err: 0,
        batch: batch as i64,
        seq: seq as i64,
        hq: hq as i64,
        hkv: hkv as i64,
        dim: dim as i64,
        cache: cache as i64,
        splits: splits as i64,
        chunk: chunk as i64,
        scale: c.scale as f32,
        es: dt.element_size() as i32,
    };
    let write_cfg = config((batch * seq * hkv * dim) as i64);
    let fwd_cfg = if heads {
        LaunchConfig {
            grid_dim: (
                grid_dim(
                    op,
                    "query tokens x KV heads",
                    batch * seq * hkv,
                    i32::MAX as usize,
                )?,
                1,
                1,
            ),
            block_dim: (32 * group as u32, 1, 1),
            shared_mem_bytes: 0,
        }
    } else {
        LaunchConfig {
            grid_dim: (grid_rows, splits as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    };
    let combine_cfg = rows_config(rows, THREADS);
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        a.err = l.err_ptr();
        if splits > 1 {
            a.part = l.scratch(scratch)?;
        }
        let write = l.function(Family::Attention, "attn_cache_write")?;
        let mut args = [arg(&mut a)];
        // SAFETY: every pointer is live, contiguous device memory of the shapes
        // `attention_call` checked; the kernel writes only rows pos..pos+T of the caches
        // after checking them on the device; the argument matches `attn_cache_write`.
        unsafe { l.launch_with(write, write_cfg, &mut args) }?;
        if rows == 0 || dim == 0 {
            return Ok(());
        }
        let f = l.function(Family::Attention, fwd)?;
        // SAFETY: as above; `part` holds rows * splits partials when splits > 1.
        unsafe { l.launch_with(f, fwd_cfg, &mut args) }?;
        if splits > 1 {
            let g = l.function(Family::Attention, combine)?;
            // SAFETY: as above; reads the partials the previous kernel wrote.
            unsafe { l.launch_with(g, combine_cfg, &mut args) }?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::split_keys;

    #[test]
    fn keys_split_for_few_rows() {
        // Decode over a long cache: many splits, covering the cache.
        let (s, c) = split_keys(16, 32_768);
        assert!(s > 1 && s * c >= 32_768 && (s - 1) * c < 32_768);
        // Prefill: one split.
        assert_eq!(split_keys(4096, 32_768), (1, 32_768));
        // A small cache: one split.
        assert_eq!(split_keys(1, 16), (1, 16));
        assert_eq!(split_keys(4, 100), (7, 15));
    }
}
