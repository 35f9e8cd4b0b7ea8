//! `etch::moe.out` (moe.cu), decoded by the CPU kernels' `moe_call`: routing on the device
//! (one block per row: router logits, softmax, top-k, renormalised weights), then GEMV
//! kernels over the selected experts only (gate and up projections with the SiLU product,
//! then the down projections summed in ascending expert order with the gated shared
//! expert). Selections, weights and activations live in the scratch buffer. Many rows
//! (prefill) go expert-major: bfloat16 and float16 on tensor cores from
//! `ETCH_MOE_TC_FROM` rows (moe_tc.cu), else on CUDA cores from `ETCH_MOE_BY_EXPERT_FROM`.

use super::{bytes, carve, grid_dim, io_kernel};
use crate::Family;
use crate::context::{Launch, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result, ScalarType};
use etch_kernels::etch_ops::moe::{MoeCall, moe_call};

/// `struct MoeArgs` in moe.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct MoeArgs {
    x: u64,
    router: u64,
    gate_up: u64,
    down: u64,
    sg: u64,
    su: u64,
    sd: u64,
    seg: u64,
    out: u64,
    sel: u64,
    wsel: u64,
    sgate: u64,
    act: u64,
    logits: u64,
    ys: u64,
    rows: i64,
    hidden: i64,
    experts: i64,
    inter: i64,
    sinter: i64,
    top_k: i64,
    width: i64,
    fuse_route: i64,
    fuse_combine: i64,
    lists: u64,
    counts: u64,
    tiles: u64,
    tile_max: i64,
    rank_all: i64,
    route_in_blocks: i64,
}
// SAFETY: plain `#[repr(C)]` data laid out as the CUDA struct.
unsafe impl cudarc::driver::DeviceRepr for MoeArgs {}

/// Most experts the routing holds in shared memory (4 bytes each, 8 more per selected
/// expert: at most 48 KiB).
const MAX_EXPERTS: usize = 4096;
/// Threads (8 warps, one output unit each) of every MoE block.
const THREADS: u32 = 256;
/// Counters of each fused kind in moe.cu (`MOE_COUNTERS`), and most rows in one grid z.
const COUNTERS: usize = 65_536;
const MAX_GRID_ROWS: usize = 65_535;
/// Hidden units per warp in moe_down (`MOE_DOWN_R`).
const DOWN_R: usize = 4;

/// Whether the routing and the final sum ride on their neighbours' last blocks;
/// `ETCH_MOE_FUSE=0` launches them as kernels of their own (for comparisons).
fn fusing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_MOE_FUSE").map_or(true, |v| v != "0"))
}

/// Whether one-row calls (decode) use `moe_down_row` (`ETCH_MOE_DOWN_ROW=0` keeps
/// moe_down and its combine, for comparisons).
fn down_by_row() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_MOE_DOWN_ROW").map_or(true, |v| v != "0"))
}

/// Whether moe_down_row reads the selection and loads its weights before waiting for
/// moe_up (`ETCH_MOE_DOWN_EARLY=0` waits first, for comparisons).
fn down_early() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_MOE_DOWN_EARLY").map_or(true, |v| v != "0"))
}

/// Whether the routing ranks every expert against all others (`ETCH_MOE_RANK_ALL=1`, for
/// comparisons) instead of first keeping the top k of each group of 32 (the same selection).
fn rank_all() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_MOE_RANK_ALL").is_ok_and(|v| v == "1"))
}

/// Whether one-row calls that take `moe_down_row` route in the blocks of `moe_up` and
/// `moe_down_row` themselves instead of in moe_logits' last block
/// (`ETCH_MOE_ROUTE_IN_BLOCKS=1`; off by default: 4-6% slower on the H200's 20-layer
/// decode step, BENCHMARKS.md, session 14).
fn route_in_blocks() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ETCH_MOE_ROUTE_IN_BLOCKS").is_ok_and(|v| v == "1"))
}

/// Rows from which the expert-major kernels run (`ETCH_MOE_BY_EXPERT_FROM`, default 512; a
/// huge value keeps the pair kernels, for comparisons). On the H200 (35B-A3B experts,
/// 4 layers) expert-major was 3% faster at 1024 rows and 14% slower at 128.
fn by_expert_from() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| super::env_usize("ETCH_MOE_BY_EXPERT_FROM", 512))
}

/// x rows moe_up_ex stages at a time (`MOE_EX_TOK`), and the most bytes of a weight row
/// its lanes hold in registers (`32 * 16 * MOE_EX_VEC`).
const EX_TOKENS: usize = 8;
const EX_ROW_BYTES: usize = 4096;

/// Whether `rows` rows go expert-major: every weight row fits the lanes' registers and is
/// 16-byte aligned, and the pair lists (experts x rows) stay within i32 indices.
fn expert_major(c: &MoeCall<'_>, es: usize, rows: usize) -> bool {
    let fits = |n: usize| n * es <= EX_ROW_BYTES && (n * es).is_multiple_of(16);
    let aligned = [
        &c.x,
        &c.gate_up,
        &c.down,
        &c.shared_gate,
        &c.shared_up,
        &c.shared_down,
    ]
    .iter()
    .all(|t| ptr(t).is_multiple_of(16));
    rows >= by_expert_from()
        && fits(c.hidden)
        && fits(c.inter)
        && fits(c.shared_inter)
        && aligned
        && rows.saturating_mul(c.top_k + 1) < i32::MAX as usize
        && c.experts.saturating_mul(rows) < i32::MAX as usize
}

/// Rows from which bfloat16 and float16 calls run on tensor cores (`ETCH_MOE_TC_FROM`,
/// default 64; a huge value keeps the CUDA-core kernels, for comparisons).
fn tc_from() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| super::env_usize("ETCH_MOE_TC_FROM", 64))
}

/// moe_tc.cu's tiles: pairs per tile (`MOE_TC_BM`), k per stage (`MOE_TC_BK`), and the
/// columns of a moe_up_tc block (intermediate units) and of a moe_down_tc block (hidden
/// units).
const TC_PAIRS: usize = 64;
const TC_K: usize = 32;
const TC_UP_UNITS: usize = 64;
const TC_DOWN_UNITS: usize = 128;

/// Tiles of the tensor-core kernels for any routing of `rows` rows: each expert's
/// ceil(count / 64) is at most count / 64 + 1 when it has pairs, the counts sum to
/// rows * k and at most min(E, rows * k) experts have pairs; then the shared expert's.
fn tc_tiles(c: &MoeCall<'_>, rows: usize) -> usize {
    let pairs = rows.saturating_mul(c.top_k);
    pairs
        .div_ceil(TC_PAIRS)
        .saturating_add(c.experts.min(pairs))
        .saturating_add(rows.div_ceil(TC_PAIRS))
}

/// Whether `rows` rows run on tensor cores (moe_tc.cu): a bfloat16 or float16 call of
/// enough rows whose k extents (hidden, inter, shared inter) are whole stages, every row
/// 16-byte aligned, the pair indices within i32 and the grid within CUDA's limits.
fn tensor_core(c: &MoeCall<'_>, dt: ScalarType, rows: usize) -> bool {
    let aligned = [
        &c.x,
        &c.gate_up,
        &c.down,
        &c.shared_gate,
        &c.shared_up,
        &c.shared_down,
    ]
    .iter()
    .all(|t| ptr(t).is_multiple_of(16));
    let units = c.inter.max(c.shared_inter).div_ceil(TC_UP_UNITS);
    matches!(dt, ScalarType::BFloat16 | ScalarType::Half)
        && rows >= tc_from()
        && [c.hidden, c.inter, c.shared_inter]
            .iter()
            .all(|n| n.is_multiple_of(TC_K))
        && aligned
        && rows.saturating_mul(c.top_k + 1) < i32::MAX as usize
        && c.experts.saturating_mul(rows) < i32::MAX as usize
        && tc_tiles(c, rows) <= 1 << 30
        && units <= 65_535
        && c.hidden.div_ceil(TC_DOWN_UNITS) <= 65_535
}

/// Slots (`k + 1`) moe_down_row handles at most (`MOE_ROW_SLOTS`).
const ROW_SLOTS: usize = 9;

fn check(op: &str, c: &MoeCall<'_>) -> Result<()> {
    same_device(
        op,
        &[
            &c.out,
            &c.x,
            &c.router,
            &c.gate_up,
            &c.down,
            &c.shared_gate,
            &c.shared_up,
            &c.shared_down,
            &c.shared_expert_gate,
        ],
    )?;
    if c.experts > MAX_EXPERTS {
        return Err(Error::not_supported(format!(
            "{op}: {} experts exceed the CUDA kernel's {MAX_EXPERTS}",
            c.experts
        )));
    }
    Ok(())
}

/// `etch::moe.out` on CUDA.
pub(crate) fn moe_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let c = moe_call(ctx)?;
    check(op, &c)?;
    if c.rows == 0 {
        return Ok(());
    }
    let dt = c.x.dtype();
    let es = dt.element_size();
    let (rows, k) = (c.rows, c.top_k);
    // Activation rows padded to 8 elements, so that each starts 16-byte aligned.
    let width = c.inter.max(c.shared_inter).next_multiple_of(8);
    // The tensor-core path's tile table (moe_tc_plan), when it may run.
    let tc_fits = tensor_core(&c, dt, rows);
    let tile_max = if tc_fits { tc_tiles(&c, rows) } else { 0 };
    let (offs, total) = carve(
        op,
        [
            bytes(op, &[rows, k, 4])?,
            bytes(op, &[rows, k, 4])?,
            bytes(op, &[rows, 4])?,
            bytes(op, &[rows, k + 1, width, es])?,
            bytes(op, &[rows, c.experts, 4])?,
            bytes(op, &[rows, k + 1, c.hidden, 4])?,
            bytes(op, &[c.experts, rows, 4])?,
            bytes(op, &[c.experts, 4])?,
            bytes(op, &[tile_max, 8])?,
        ],
    )?;
    let names = |n: [&'static str; 3]| io_kernel(op, dt, n);
    let logits = names(["moe_logits_f32", "moe_logits_bf16", "moe_logits_f16"])?;
    let route = names(["moe_route_f32", "moe_route_bf16", "moe_route_f16"])?;
    let up = names(["moe_up_f32", "moe_up_bf16", "moe_up_f16"])?;
    let down = names(["moe_down_f32", "moe_down_bf16", "moe_down_f16"])?;
    let combine = names(["moe_combine_f32", "moe_combine_bf16", "moe_combine_f16"])?;
    let down_row = if down_early() {
        [
            "moe_down_row_early_f32",
            "moe_down_row_early_bf16",
            "moe_down_row_early_f16",
        ]
    } else {
        ["moe_down_row_f32", "moe_down_row_bf16", "moe_down_row_f16"]
    };
    let down_row = names(down_row)?;
    let lists = names(["moe_lists_f32", "moe_lists_bf16", "moe_lists_f16"])?;
    let up_ex = names(["moe_up_ex_f32", "moe_up_ex_bf16", "moe_up_ex_f16"])?;
    let down_ex = names(["moe_down_ex_f32", "moe_down_ex_bf16", "moe_down_ex_f16"])?;
    // Tensor cores: bfloat16 and float16 only (tc_fits is false for float32).
    let tc_name = |n: [&'static str; 2]| if dt == ScalarType::Half { n[1] } else { n[0] };
    let up_tc = tc_name(["moe_up_tc_bf16", "moe_up_tc_f16"]);
    let down_tc = tc_name(["moe_down_tc_bf16", "moe_down_tc_f16"]);
    let warps = (THREADS / 32) as usize;
    let grid_rows = rows.min(MAX_GRID_ROWS) as u32;
    let cfg = |grid_dim: (u32, u32, u32), smem: usize| LaunchConfig {
        grid_dim,
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let e_units = grid_dim(op, "experts", (c.experts + 1).div_ceil(warps), 1 << 30)?;
    let units = c.inter.max(c.shared_inter).div_ceil(warps).max(1);
    let units = grid_dim(op, "units", units, 1 << 30)?;
    // moe_down: a warp per 4 hidden units (MOE_DOWN_R), so tiles of 32 a block.
    let tile = warps * DOWN_R;
    let h_units = grid_dim(op, "hidden units", c.hidden.div_ceil(tile), 1 << 30)?;
    let outs = grid_dim(
        op,
        "outputs",
        (rows * c.hidden).div_ceil(THREADS as usize),
        1 << 20,
    )?;
    // The routing and the final sum ride on the last block of the kernel before them when
    // every row has its own grid z (and its counters).
    let fuse_route = rows <= MAX_GRID_ROWS && fusing();
    // The fused combine stages the tile's (k+1) x 8 values in shared memory.
    let down_smem = 4 * (k + 1) * tile;
    let fuse_combine = rows <= MAX_GRID_ROWS
        && rows * h_units as usize <= COUNTERS
        && down_smem <= 48 << 10
        && fusing();
    // Routing's shared memory: E probabilities, k selected experts and their weights.
    let route_smem = 4 * c.experts + 8 * k;
    // The kernels in order; the routing and the sum only when not fused (no allocation:
    // this runs every step when CUDA graphs are off).
    let route_cfg = cfg((rows.min(1 << 30) as u32, 1, 1), route_smem);
    let down_smem = if fuse_combine { down_smem } else { 0 };
    // One row: a warp per hidden unit over every slot, combined in registers.
    // Its vector loads need equal expert and shared widths and 16-byte aligned rows (the
    // activation rows are: `width` is a multiple of 8 elements).
    let aligned = |t: &etch_core::TensorRef<'_>| ptr(t).is_multiple_of(16);
    // (The activations as float32.)
    let row_smem = (k + 1) * width * 4;
    let by_row = rows == 1
        && k < ROW_SLOTS
        && row_smem <= 48 << 10
        && c.inter == c.shared_inter
        && (c.inter * es).is_multiple_of(16)
        && aligned(&c.down)
        && aligned(&c.shared_down)
        && down_by_row();
    let row_units = grid_dim(op, "hidden units", c.hidden.div_ceil(warps), 1 << 30)?;
    // Several rows: expert-major, each expert's weights read once (see moe.cu), on tensor
    // cores (bfloat16, float16) or CUDA cores.
    let tc = !by_row && tc_fits;
    let by_expert = !by_row && !tc && expert_major(&c, es, rows);
    let slots = grid_dim(op, "experts", c.experts + 1, 65_535)?;
    let x_smem = EX_TOKENS * c.hidden * es;
    let by_pair = !by_row && !by_expert && !tc;
    // tensor_core() bounds these grids.
    let tc_units = c.inter.max(c.shared_inter).div_ceil(TC_UP_UNITS).max(1) as u32;
    let tc_hidden = c.hidden.div_ceil(TC_DOWN_UNITS) as u32;
    let tc_cfg = |n: u32| cfg((tile_max as u32, n, 1), 0);
    // One row on moe_down_row: the blocks of moe_up and moe_down_row route it themselves
    // (moe.cu), so moe_logits does not, and no moe_route runs.
    let in_blocks = by_row && row_smem + route_smem <= 48 << 10 && route_in_blocks();
    let fuse_route = fuse_route && !in_blocks;
    let up_smem = if in_blocks { route_smem } else { 0 };
    let row_smem = row_smem + if in_blocks { route_smem } else { 0 };
    let launches = [
        Some((logits, cfg((e_units, 1, grid_rows), route_smem))),
        (!fuse_route && !in_blocks).then_some((route, route_cfg)),
        (by_expert || tc).then_some((lists, cfg((c.experts as u32, 1, 1), 0))),
        tc.then_some(("moe_tc_plan", cfg((1, 1, 1), 0))),
        tc.then_some((up_tc, tc_cfg(tc_units))),
        by_expert.then_some((up_ex, cfg((units, slots, 1), x_smem))),
        (!by_expert && !tc).then_some((up, cfg((units, k as u32 + 1, grid_rows), up_smem))),
        tc.then_some((down_tc, tc_cfg(tc_hidden))),
        by_expert.then_some((down_ex, cfg((row_units, slots, 1), 0))),
        by_pair.then_some((down, cfg((h_units, k as u32 + 1, grid_rows), down_smem))),
        (by_expert || tc || (by_pair && !fuse_combine)).then_some((combine, cfg((outs, 1, 1), 0))),
        by_row.then_some((down_row, cfg((row_units, 1, 1), row_smem))),
    ];
    let mut a = MoeArgs {
        x: ptr(&c.x),
        router: ptr(&c.router),
        gate_up: ptr(&c.gate_up),
        down: ptr(&c.down),
        sg: ptr(&c.shared_gate),
        su: ptr(&c.shared_up),
        sd: ptr(&c.shared_down),
        seg: ptr(&c.shared_expert_gate),
        out: ptr(&c.out),
        sel: 0,
        wsel: 0,
        sgate: 0,
        act: 0,
        logits: 0,
        ys: 0,
        rows: rows as i64,
        hidden: c.hidden as i64,
        experts: c.experts as i64,
        inter: c.inter as i64,
        sinter: c.shared_inter as i64,
        top_k: k as i64,
        width: width as i64,
        fuse_route: fuse_route as i64,
        fuse_combine: fuse_combine as i64,
        lists: 0,
        counts: 0,
        tiles: 0,
        tile_max: tile_max as i64,
        rank_all: rank_all() as i64,
        route_in_blocks: in_blocks as i64,
    };
    with_device(ctx, c.out.device(), |mut l: Launch<'_>| {
        let base = l.scratch(total)?;
        [
            a.sel, a.wsel, a.sgate, a.act, a.logits, a.ys, a.lists, a.counts, a.tiles,
        ] = offs.map(|o| base + o);
        let mut args = [arg(&mut a)];
        for (name, cfg) in launches.into_iter().flatten() {
            let f = l.function(Family::Moe, name)?;
            // SAFETY: the weights and x/out are live, contiguous device memory of the shapes
            // `moe_call` checked; the scratch holds the carved regions; the argument
            // matches `moe_*(MoeArgs)`; the kernels run in order on one stream.
            unsafe { l.launch_with(f, cfg, &mut args) }?;
        }
        Ok(())
    })
}
