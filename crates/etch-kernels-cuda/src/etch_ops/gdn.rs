//! `etch::gated_delta_net.out` (gdn.cu), decoded by the CPU kernels' `gdn_call`: a
//! recurrence kernel with one block per (batch item, value head, tile of 32 value
//! columns), its state columns in registers, looping over the tokens (the conv, SiLU and
//! q/k L2 norm computed on the fly), which then shifts the conv inputs into `conv_state`
//! (or a kernel of its own does). `input_pos` is read on the device (0: both states start from zero).

use super::{grid_dim, io_kernel};
use crate::Family;
use crate::context::{Launch, config, with_device};
use crate::util::{arg, ptr, same_device};
use cudarc::driver::LaunchConfig;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::etch_ops::gdn::gdn_call;

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

/// State rows a thread holds (`GDN_R`) and warps a block has at most (`GDN_WARPS`).
const ROWS_PER_THREAD: usize = 16;
const MAX_WARPS: usize = 16;

/// Counters of gdn_recur's fused conv_state shift (`GDN_COUNTERS`): batch x key heads.
const COUNTERS: usize = 4096;

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
    let shift = io_kernel(
        op,
        dt,
        [
            "gdn_conv_state_f32",
            "gdn_conv_state_bf16",
            "gdn_conv_state_f16",
        ],
    )?;
    // gdn_recur shifts conv_state itself while its counters suffice (`GDN_COUNTERS`).
    let fuse_shift = c.batch * c.hk <= COUNTERS && fusing();
    let mut a = GdnArgs {
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
        fuse_shift: fuse_shift as i32,
    };
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
