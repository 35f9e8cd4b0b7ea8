//! `etch::sample.out` (sample.cu), decoded by the CPU kernels' `sample_call`: a parallel
//! argmax over chunks of each row, then one block per row reads the sampling parameters on
//! the device and either takes the argmax (greedy) or draws by `sample_row`'s rule. The
//! probabilities of a drawn row live in the scratch buffer.

use super::{bytes, carve, grid_dim, io_kernel};
use crate::Family;
use crate::context::{Launch, rows_config, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::etch_ops::sample::sample_call;

/// `struct SampleArgs` in sample.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct SampleArgs {
    logits: u64,
    params: u64,
    out: u64,
    pv: u64,
    pi: u64,
    probs: u64,
    rows: i64,
    vocab: i64,
    chunks: i64,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for SampleArgs {}

/// Logits per block of the argmax pass (`SAMPLE_CHUNK`).
const CHUNK: usize = 4096;
/// Vocabulary bound: indices and counts must be exact in float32 (2^24).
const MAX_VOCAB: usize = 1 << 24;

/// `etch::sample.out` on CUDA.
pub(crate) fn sample_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = sample_call(ctx)?;
    same_device(op, &[&c.out, &c.logits, &c.sampling])?;
    if c.vocab >= MAX_VOCAB {
        return Err(Error::not_supported(format!(
            "{op}: a vocabulary of {} exceeds the CUDA kernel's {}",
            c.vocab,
            MAX_VOCAB - 1
        )));
    }
    let rows = grid_dim(op, "rows", c.rows, 65_535)?;
    if c.rows == 0 {
        return Ok(());
    }
    let chunks = c.vocab.div_ceil(CHUNK);
    let (offs, total) = carve(
        op,
        [
            bytes(op, &[c.rows, chunks, 4])?,
            bytes(op, &[c.rows, chunks, 4])?,
            bytes(op, &[c.rows, c.vocab, 4])?,
        ],
    )?;
    let dt = c.logits.dtype();
    let part = io_kernel(
        op,
        dt,
        ["sample_part_f32", "sample_part_bf16", "sample_part_f16"],
    )?;
    let pick = io_kernel(
        op,
        dt,
        ["sample_pick_f32", "sample_pick_bf16", "sample_pick_f16"],
    )?;
    let mut a = SampleArgs {
        logits: ptr(&c.logits),
        params: ptr(&c.sampling),
        out: ptr(&c.out),
        pv: 0,
        pi: 0,
        probs: 0,
        rows: c.rows as i64,
        vocab: c.vocab as i64,
        chunks: chunks as i64,
    };
    let part_cfg = LaunchConfig {
        grid_dim: (grid_dim(op, "chunks", chunks, 1 << 30)?, rows, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let pick_cfg = rows_config(c.rows, 1024);
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let base = l.scratch(total)?;
        [a.pv, a.pi, a.probs] = offs.map(|o| base + o);
        let f = l.function(Family::Sample, part)?;
        let g = l.function(Family::Sample, pick)?;
        let mut args = [arg(&mut a)];
        // SAFETY: logits, sampling and out are live, contiguous device memory of the shapes
        // `sample_call` checked; the scratch holds the carved regions; the argument
        // matches `sample_part_*(SampleArgs)`.
        unsafe { l.launch_with(f, part_cfg, &mut args) }?;
        // SAFETY: as above, for `sample_pick_*(SampleArgs)`, after the partials.
        unsafe { l.launch_with(g, pick_cfg, &mut args) }
    })
}
