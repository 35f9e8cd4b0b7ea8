//! `etch::gated_delta_net.out` (gdn.cu), decoded by the CPU kernels' `gdn_call`: a
//! recurrence kernel with one block per (batch item, value head, tile of 32 value
//! columns), its state columns in registers, looping over the tokens (the conv, SiLU and
//! q/k L2 norm computed on the fly), which then shifts the conv inputs into `conv_state`
//! (or a kernel of its own does). `input_pos` is read on the device (0: both states start
//! from zero). Prefill (from `ETCH_GDN_CHUNK_FROM` tokens, default 64) takes the chunked delta rule
//! (gdn_chunk.cu): per pass of up to 1024 tokens a prep kernel (conv, SiLU, norms, gates
//! into the scratch), the chunks' W / U / P, the state walk over the chunks, the outputs;
//! then the conv_state shift.

use super::{bytes, carve, grid_dim, io_kernel};
use crate::Family;
use crate::context::{Launch, config, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::etch_ops::gdn::{GdnCall, gdn_call};

/// `struct GdnArgs` in gdn.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct GdnArgs {
    qkv: u64,
    a: u64,
    b: u64,
    conv_w: u64,
    a_log: u64,
    dt_bias: u64,
    conv_state: u64,
    state: u64,
    pos: u64,
    out: u64,
    batch: i64,
    seq: i64,
    ch: i64,
    taps: i64,
    hk: i64,
    dk: i64,
    hv: i64,
    dv: i64,
    scale: f32,
    fuse_shift: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for GdnArgs {}

/// `struct GdnChunkArgs` in gdn_chunk.cu: the call, the scratch regions, the pass.
#[repr(C)]
#[derive(Clone, Copy)]
struct GdnChunkArgs {
    g: GdnArgs,
    q: u64,
    k: u64,
    v: u64,
    beta: u64,
    lg: u64,
    w: u64,
    u: u64,
    p: u64,
    eg: u64,
    ec: u64,
    h: u64,
    t0: i64,
    len: i64,
    first: i32,
    pad: i32,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for GdnChunkArgs {}
// GdnArgs (152 bytes), 11 pointers, two i64 and two i32, as gdn_chunk.cu lays them out.
const _: () = assert!(std::mem::size_of::<GdnChunkArgs>() == 152 + 11 * 8 + 2 * 8 + 2 * 4);

/// State rows a thread holds (`GDN_R`) and warps a block has at most (`GDN_WARPS`).
const ROWS_PER_THREAD: usize = 16;
const MAX_WARPS: usize = 16;

/// Counters of gdn_recur's fused conv_state shift (`GDN_COUNTERS`): batch x key heads.
const COUNTERS: usize = 4096;

/// gdn_chunk.cu's sizes: tokens per chunk (`GDN_C`), the largest head_k_dim and
/// head_v_dim (`GDN_CD`, the scratch rows), value columns per block (`GDN_TV`), tokens per
/// pass (`GDN_SEG`) and threads per block (`GDN_CT`).
const CHUNK: usize = 64;
const CHUNK_DIM: usize = 128;
const CHUNK_COLS: usize = 32;
const PASS: usize = 1024;
const CHUNK_THREADS: u32 = 256;

/// Tokens from which calls take the chunked delta rule (`ETCH_GDN_CHUNK_FROM`, default
/// 64, the chunk; a huge value keeps the token-by-token kernel, for comparisons). Checked
/// against the CPU kernel on the H200 (`bench/gpu/2026-12-01-h200-session8-linear-groups.log`).
fn chunk_from() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| super::env_usize("ETCH_GDN_CHUNK_FROM", CHUNK))
}

/// Whether gdn_recur shifts conv_state itself (`ETCH_GDN_FUSE=0`: a kernel of its own, for
/// comparisons).
fn fusing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_GDN_FUSE").map_or(true, |v| v != "0"))
}

/// `etch::gated_delta_net.out` on CUDA.
pub(crate) fn gated_delta_net_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = gdn_call(ctx)?;
    same_device(
        op,
        &[
            &c.out,
            &c.qkv,
            &c.a,
            &c.b,
            &c.conv_w,
            &c.a_log,
            &c.dt_bias,
            &c.conv_state,
            &c.state,
            &c.pos,
        ],
    )?;
    let warps = c.dk.div_ceil(ROWS_PER_THREAD);
    if warps > MAX_WARPS {
        return Err(Error::not_supported(format!(
            "{op}: head_k_dim {} exceeds the CUDA kernel's {}",
            c.dk,
            MAX_WARPS * ROWS_PER_THREAD
        )));
    }
    let grid = (
        grid_dim(op, "value-column tiles", c.dv.div_ceil(32).max(1), 1 << 30)?,
        grid_dim(op, "value heads", c.hv, 65_535)?,
        grid_dim(op, "batch items", c.batch, 65_535)?,
    );
    if c.batch == 0 {
        return Ok(());
    }
    let a = GdnArgs {
        qkv: ptr(&c.qkv),
        a: ptr(&c.a),
        b: ptr(&c.b),
        conv_w: ptr(&c.conv_w),
        a_log: ptr(&c.a_log),
        dt_bias: ptr(&c.dt_bias),
        conv_state: ptr(&c.conv_state),
        state: ptr(&c.state),
        pos: ptr(&c.pos),
        out: ptr(&c.out),
        batch: c.batch as i64,
        seq: c.seq as i64,
        ch: c.channels as i64,
        taps: c.taps as i64,
        hk: c.hk as i64,
        dk: c.dk as i64,
        hv: c.hv as i64,
        dv: c.dv as i64,
        scale: 1.0 / (c.dk as f32).sqrt(),
        fuse_shift: 0,
    };
    if chunked(&c) {
        return gdn_chunked(ctx, &c, a);
    }
    gdn_recurrent(ctx, &c, a, grid, warps)
}

/// Whether the call takes the chunked delta rule: enough tokens, heads within the chunk
/// kernels' 128 and grids within CUDA's limits.
fn chunked(c: &GdnCall<'_>) -> bool {
    c.seq >= chunk_from()
        && c.dk <= CHUNK_DIM
        && c.dv <= CHUNK_DIM
        && c.hv * c.dv.div_ceil(CHUNK_COLS) <= 65_535
        && (2 * c.hk + c.hv).div_ceil(CHUNK_THREADS as usize / 32) <= 1 << 30
}

/// The recurrence kernel (decode, and calls the chunked path does not take), then the
/// conv_state shift unless it fuses it.
fn gdn_recurrent(
    ctx: &mut KernelContext<'_>,
    c: &GdnCall<'_>,
    mut a: GdnArgs,
    grid: (u32, u32, u32),
    warps: usize,
) -> Result<()> {
    let op = ctx.op_name();
    let dt = c.qkv.dtype();
    // Up to 8 warps: the entry points compiled for 256 threads (no register spills).
    let recur = if warps <= 8 {
        io_kernel(op, dt, ["gdn_recur_f32", "gdn_recur_bf16", "gdn_recur_f16"])?
    } else {
        io_kernel(
            op,
            dt,
            ["gdn_recur_w_f32", "gdn_recur_w_bf16", "gdn_recur_w_f16"],
        )?
    };
    let shift = shift_kernel(op, dt)?;
    // gdn_recur shifts conv_state itself while its counters suffice (`GDN_COUNTERS`).
    let fuse_shift = c.batch * c.hk <= COUNTERS && fusing();
    a.fuse_shift = fuse_shift as i32;
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: (32 * warps.max(1) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let shift_cfg = config((c.batch * c.channels) as i64);
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let f = l.function(Family::Gdn, recur)?;
        let g = l.function(Family::Gdn, shift)?;
        let mut args = [arg(&mut a)];
        // SAFETY: every pointer is live, contiguous device memory of the shapes `gdn_call`
        // checked; the argument matches `gdn_recur_*(GdnArgs)`. The recurrence reads the
        // old conv_state before the shift (same stream) overwrites it.
        unsafe { l.launch_with(f, cfg, &mut args) }?;
        if fuse_shift {
            return Ok(());
        }
        // SAFETY: as above, for `gdn_conv_state_*(GdnArgs)`.
        unsafe { l.launch_with(g, shift_cfg, &mut args) }
    })
}

/// The conv_state shift kernel for IO dtype `dt`.
fn shift_kernel(op: &str, dt: etch_core::ScalarType) -> Result<&'static str> {
    io_kernel(
        op,
        dt,
        [
            "gdn_conv_state_f32",
            "gdn_conv_state_bf16",
            "gdn_conv_state_f16",
        ],
    )
}

/// Scratch bytes of the chunked path for passes of up to `len` tokens: q, k, v, beta, g,
/// W, U, P, e^G, e^(G_last - G), the chunk-start states (gdn_chunk.cu's GdnChunkArgs).
fn chunk_scratch(op: &str, c: &GdnCall<'_>, len: usize) -> Result<([u64; 11], usize)> {
    let (b, hk, hv, d) = (c.batch, c.hk, c.hv, CHUNK_DIM);
    let chunks = len.div_ceil(CHUNK);
    carve(
        op,
        [
            bytes(op, &[b, len, hk, d, 4])?,
            bytes(op, &[b, len, hk, d, 4])?,
            bytes(op, &[b, len, hv, d, 4])?,
            bytes(op, &[b, len, hv, 4])?,
            bytes(op, &[b, len, hv, 4])?,
            bytes(op, &[b, hv, len, d, 4])?,
            bytes(op, &[b, hv, len, d, 4])?,
            bytes(op, &[b, hv, len, CHUNK, 4])?,
            bytes(op, &[b, hv, len, 4])?,
            bytes(op, &[b, hv, len, 4])?,
            bytes(op, &[b, hv, chunks, d, d, 4])?,
        ],
    )
}

/// The chunked delta rule: per pass of up to `PASS` tokens the prep, W / U, state and
/// output kernels, then the conv_state shift (after every pass has read the old state).
fn gdn_chunked(ctx: &mut KernelContext<'_>, c: &GdnCall<'_>, g: GdnArgs) -> Result<()> {
    let op = ctx.op_name();
    let dt = c.qkv.dtype();
    let names = |n: [&'static str; 3]| io_kernel(op, dt, n);
    let prep = names(["gdn_prep_f32", "gdn_prep_bf16", "gdn_prep_f16"])?;
    let wy = names(["gdn_wy_f32", "gdn_wy_bf16", "gdn_wy_f16"])?;
    let state = names([
        "gdn_chunk_state_f32",
        "gdn_chunk_state_bf16",
        "gdn_chunk_state_f16",
    ])?;
    let outk = names([
        "gdn_chunk_out_f32",
        "gdn_chunk_out_bf16",
        "gdn_chunk_out_f16",
    ])?;
    let shift = shift_kernel(op, dt)?;
    let (offs, total) = chunk_scratch(op, c, c.seq.min(PASS))?;
    let tiles = c.dv.div_ceil(CHUNK_COLS);
    // `chunked` bounds these grids; `gdn_call` bounds batch and heads (grid_dim above).
    let (b, hv) = (c.batch as u32, c.hv as u32);
    let units = (2 * c.hk + c.hv).div_ceil(CHUNK_THREADS as usize / 32) as u32;
    let cfg = |grid_dim: (u32, u32, u32)| LaunchConfig {
        grid_dim,
        block_dim: (CHUNK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let shift_cfg = config((c.batch * c.channels) as i64);
    let mut a = GdnChunkArgs {
        g,
        q: 0,
        k: 0,
        v: 0,
        beta: 0,
        lg: 0,
        w: 0,
        u: 0,
        p: 0,
        eg: 0,
        ec: 0,
        h: 0,
        t0: 0,
        len: 0,
        first: 0,
        pad: 0,
    };
    let mut shift_args = g;
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let base = l.scratch(total)?;
        [a.q, a.k, a.v, a.beta, a.lg, a.w, a.u, a.p, a.eg, a.ec, a.h] = offs.map(|o| base + o);
        let mut kernels = [std::ptr::null_mut(); 5];
        for (k, n) in kernels.iter_mut().zip([prep, wy, state, outk, shift]) {
            *k = l.function(Family::Gdn, n)?;
        }
        let [prep, wy, state, outk, shift] = kernels;
        for t0 in (0..c.seq).step_by(PASS) {
            let len = PASS.min(c.seq - t0);
            let nc = len.div_ceil(CHUNK) as u32;
            (a.t0, a.len, a.first) = (t0 as i64, len as i64, (t0 == 0) as i32);
            let mut args = [arg(&mut a)];
            let launches = [
                (prep, cfg((units, len as u32, b))),
                (wy, cfg((nc, hv, b))),
                (state, cfg((tiles as u32, hv, b))),
                (outk, cfg((nc, hv * tiles as u32, b))),
            ];
            for (f, cfg) in launches {
                // SAFETY: every pointer is live, contiguous device memory of the shapes
                // `gdn_call` checked; the scratch holds the carved regions for passes of
                // up to `PASS` tokens; the argument matches `gdn_*(GdnChunkArgs)`; the
                // kernels run in order on one stream.
                unsafe { l.launch_with(f, cfg, &mut args) }?;
            }
        }
        let mut args = [arg(&mut shift_args)];
        // SAFETY: as above, for `gdn_conv_state_*(GdnArgs)`, after every pass has read the
        // old conv_state (same stream).
        unsafe { l.launch_with(shift, shift_cfg, &mut args) }
    })
}
