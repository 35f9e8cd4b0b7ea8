//! Matrix products on the `gemm` crate's micro-kernels, packing into memory the caller
//! provides.
//!
//! `gemm::gemm` allocates on every call that reaches its blocked path: a `MemBuffer` for
//! the packed operands and a `Vec<bool>` of packed-panel flags (gemm-common 0.18's
//! `gemm_basic_generic`), and it has no entry point that takes memory from the caller.
//! This module runs the same blocked algorithm with the same building blocks
//! (`gemm_common::pack_operands` and the `gemm_f32`/`gemm_f64` micro-kernel tables, chosen
//! for the CPU as `gemm` chooses them) and the same blocking parameters, so its results are
//! those of `gemm::gemm`, but the packing buffers are a workspace the caller passes in
//! (taken from the scratch pool): nothing allocates.
//!
//! A planned product can be computed block by block (disjoint ranges of output rows or
//! columns, each with its own workspace), which is how kernels split one product across
//! threads. The blocking is fixed by the whole product, and every output element is
//! computed by the same sequence of operations in whichever block it falls, so the result
//! does not depend on the split.
//!
//! Products that `gemm` sends to its small-size routines (outputs of at most 16×16, depth
//! at most 2, matrix–vector products) allocate nothing there: those go to `gemm::gemm`
//! whole. On CPUs other than x86-64 every product goes to `gemm::gemm` (its blocked path
//! there allocates).

use crate::scratch::ScratchElem;
use std::ops::Range;

/// Row and column strides (in elements) of the three operands.
#[derive(Clone, Copy, Debug)]
pub struct Strides {
    /// `[row, col]` strides of the output.
    pub dst: [usize; 2],
    /// `[row, col]` strides of the left operand (m×k).
    pub lhs: [usize; 2],
    /// `[row, col]` strides of the right operand (k×n).
    pub rhs: [usize; 2],
}

/// Which output dimension a product may be split along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Output rows.
    Rows,
    /// Output columns.
    Cols,
}

/// Element types with `gemm` micro-kernels: `f32` and `f64`.
pub trait GemmElem: Copy + Send + Sync + PartialEq + ScratchElem + 'static {
    #[doc(hidden)]
    const G_ZERO: Self;
    #[doc(hidden)]
    const G_ONE: Self;
    #[doc(hidden)]
    fn isa() -> Isa;
    #[doc(hidden)]
    unsafe fn drive(isa: Isa, b: &Block<Self>, ws: &mut [Self]);
}

/// The micro-kernel family in use.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX2 + FMA micro-kernels (x86-64).
    Fma {
        /// Rows of a micro-tile.
        mr: usize,
        /// Columns of a micro-tile.
        nr: usize,
        /// SIMD width.
        n: usize,
        /// Whether `gemm` has horizontal (small-output) kernels for this type.
        horizontal: bool,
    },
    /// Portable scalar micro-kernels.
    Scalar {
        /// Rows of a micro-tile.
        mr: usize,
        /// Columns of a micro-tile.
        nr: usize,
    },
    /// No driver for this CPU: every product goes to `gemm::gemm`.
    Fallback,
}

impl Isa {
    fn tile(self) -> (usize, usize, usize) {
        match self {
            Isa::Fma { mr, nr, n, .. } => (mr, nr, n),
            Isa::Scalar { mr, nr } => (mr, nr, 1),
            Isa::Fallback => (1, 1, 1),
        }
    }
}

/// A product `dst = alpha · dst + beta · lhs · rhs` (`dst` is not read when `read_dst` is
/// false) in `gemm`'s orientation: after transposing when the output is row-major, so
/// `m`, `n` and the operands here may be the caller's columns, rows and swapped operands.
#[doc(hidden)]
pub struct Block<T> {
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    dst_cs: isize,
    lhs: *const T,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const T,
    rhs_rs: isize,
    rhs_cs: isize,
    alpha: T,
    beta: T,
    read_dst: bool,
    kc: usize,
    mc: usize,
    nc: usize,
}

/// A planned product of an m×k and a k×n matrix.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    m: usize,
    n: usize,
    k: usize,
    isa: Isa,
    /// `gemm`'s orientation: output columns are its rows.
    transposed: bool,
    /// Goes to `gemm::gemm` whole.
    whole: bool,
    kc: usize,
    mc: usize,
    nc: usize,
}

/// Internal (`gemm`-oriented) dims and strides: (m, n, dst [rs, cs], lhs [rs, cs],
/// rhs [rs, cs]).
type Oriented = (usize, usize, [usize; 2], [usize; 2], [usize; 2]);

fn orient(transposed: bool, m: usize, n: usize, s: Strides) -> Oriented {
    if transposed {
        (
            n,
            m,
            [s.dst[1], s.dst[0]],
            [s.rhs[1], s.rhs[0]],
            [s.lhs[1], s.lhs[0]],
        )
    } else {
        (m, n, s.dst, s.lhs, s.rhs)
    }
}

impl Plan {
    /// Plans an m×k by k×n product with these strides, as `gemm::gemm` would run it.
    pub fn new<T: GemmElem>(m: usize, n: usize, k: usize, s: Strides) -> Plan {
        Self::with_isa::<T>(T::isa(), m, n, k, s)
    }

    fn with_isa<T: GemmElem>(isa: Isa, m: usize, n: usize, k: usize, s: Strides) -> Plan {
        let transposed = s.dst[1] < s.dst[0];
        let (im, in_, d, l, r) = orient(transposed, m, n, s);
        let (mr, nr, _) = isa.tile();
        let horizontal = matches!(
            isa,
            Isa::Fma {
                horizontal: true,
                ..
            }
        );
        // The routines `gemm_basic_generic` takes before its blocked path.
        let whole = matches!(isa, Isa::Fallback)
            || im == 0
            || in_ == 0
            || k <= 2
            || (horizontal && l[1] == 1 && r[0] == 1 && im * in_ <= 16 * 16)
            || (in_ <= 1 && l[0] == 1 && d[0] == 1)
            || (in_ <= 1 && l[1] == 1 && r[0] == 1)
            || (im <= 1 && r[1] == 1 && d[1] == 1)
            || (im <= 1 && r[0] == 1 && l[1] == 1);
        let (mut kc, mut mc, mut nc) = (k, im, in_);
        if !whole {
            if im <= 64 && in_ <= 64 {
                kc = k.min(512);
                let l2 = gemm_common::cache::CACHE_INFO[1].cache_bytes / size_of::<T>();
                mc = (l2 / kc) / mr * mr;
                nc = in_.next_multiple_of(nr);
            } else {
                let p = gemm_common::cache::kernel_params(im, in_, k, mr, nr, size_of::<T>());
                (kc, mc, nc) = (p.kc, p.mc, p.nc);
            }
            if nc == 0 {
                nc = 128 * nr;
            }
            mc = mc.max(mr);
        }
        Plan {
            m,
            n,
            k,
            isa,
            transposed,
            whole,
            kc,
            mc,
            nc,
        }
    }

    /// The output dimension blocks may split, and the multiple block boundaries must fall
    /// on (`None`: the product must run whole).
    pub fn split(&self) -> Option<(Axis, usize)> {
        if self.whole {
            return None;
        }
        let (mr, nr, _) = self.isa.tile();
        // Split gemm's larger dimension: the other operand is packed once per block.
        let (im, in_) = if self.transposed {
            (self.n, self.m)
        } else {
            (self.m, self.n)
        };
        let split_rows_of_gemm = im >= in_;
        let (axis_is_gemm_rows, mult) = if split_rows_of_gemm {
            (true, mr)
        } else {
            (false, nr)
        };
        // gemm's rows are the caller's columns when transposed.
        let axis = match (axis_is_gemm_rows, self.transposed) {
            (true, false) | (false, true) => Axis::Rows,
            _ => Axis::Cols,
        };
        Some((axis, mult))
    }

    /// The multiple that block boundaries along `axis` must fall on (`None`: the product
    /// must run whole). Any axis works; [`Plan::split`] names the cheaper one.
    pub fn align(&self, axis: Axis) -> Option<usize> {
        if self.whole {
            return None;
        }
        let (mr, nr, _) = self.isa.tile();
        // gemm's rows are the caller's columns when transposed.
        Some(match (axis, self.transposed) {
            (Axis::Rows, false) | (Axis::Cols, true) => mr,
            _ => nr,
        })
    }

    /// Elements of workspace a block of `rows` × `cols` output elements needs.
    pub fn workspace_len<T: GemmElem>(&self, rows: usize, cols: usize) -> usize {
        if self.whole {
            return 0;
        }
        let (im, in_) = if self.transposed {
            (cols, rows)
        } else {
            (rows, cols)
        };
        Layout::new::<T>(self, im, in_, true, true).total
    }

    /// Computes output rows `rows` × columns `cols` of `dst = alpha · dst + beta · lhs · rhs`
    /// (`dst` is not read unless `read_dst`), packing into `ws`. A plan that must run whole
    /// (`split()` is `None`) takes the full ranges only.
    ///
    /// # Safety
    /// The pointers with `s` must address valid m×k, k×n and m×n matrices (the output not
    /// overlapping the inputs), and no other thread may touch the block's output elements.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run<T: GemmElem>(
        &self,
        dst: *mut T,
        lhs: *const T,
        rhs: *const T,
        s: Strides,
        alpha: T,
        beta: T,
        read_dst: bool,
        rows: Range<usize>,
        cols: Range<usize>,
        ws: &mut [T],
    ) {
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        if self.whole {
            debug_assert!(rows == (0..self.m) && cols == (0..self.n));
            // SAFETY: the caller's contract; `gemm` reads and writes inside the operands.
            unsafe {
                gemm::gemm(
                    self.m,
                    self.n,
                    self.k,
                    dst,
                    s.dst[1] as isize,
                    s.dst[0] as isize,
                    read_dst,
                    lhs,
                    s.lhs[1] as isize,
                    s.lhs[0] as isize,
                    rhs,
                    s.rhs[1] as isize,
                    s.rhs[0] as isize,
                    alpha,
                    beta,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            return;
        }
        // The block's corner; then gemm's orientation.
        // SAFETY: the ranges lie inside the matrices (caller's contract).
        let (dst, lhs, rhs) = unsafe {
            (
                dst.add(rows.start * s.dst[0] + cols.start * s.dst[1]),
                lhs.add(rows.start * s.lhs[0]),
                rhs.add(cols.start * s.rhs[1]),
            )
        };
        let (m, n, d, l, r) = orient(self.transposed, rows.len(), cols.len(), s);
        let (lhs, rhs) = if self.transposed {
            (rhs, lhs)
        } else {
            (lhs, rhs)
        };
        let b = Block {
            m,
            n,
            k: self.k,
            dst,
            dst_rs: d[0] as isize,
            dst_cs: d[1] as isize,
            lhs,
            lhs_rs: l[0] as isize,
            lhs_cs: l[1] as isize,
            rhs,
            rhs_rs: r[0] as isize,
            rhs_cs: r[1] as isize,
            alpha,
            beta,
            read_dst,
            kc: self.kc,
            mc: self.mc,
            nc: self.nc,
        };
        // SAFETY: as above; the workspace is sized by `workspace_len` (checked in `drive`).
        unsafe { T::drive(self.isa, &b, ws) }
    }
}

/// Where the packed operands of one block live in its workspace (offsets in elements).
struct Layout {
    pack_rhs: bool,
    prepack_lhs: bool,
    rhs: usize,
    lhs: usize,
    total: usize,
}

const ALIGN_BYTES: usize = 128;

impl Layout {
    /// `m`, `n`: the block's dims in gemm's orientation. `worst`: size for any strides.
    fn new<T>(p: &Plan, m: usize, n: usize, pack_rhs: bool, prepack_lhs: bool) -> Layout {
        let (mr, nr, _) = p.isa.tile();
        let pad = ALIGN_BYTES / size_of::<T>();
        let nc = p.nc.min(n.next_multiple_of(nr));
        let rhs_len = if pack_rhs { p.kc * nc } else { 0 };
        let rows = m.min(p.mc).next_multiple_of(mr);
        // Prepacked: every row panel of the block; otherwise one row block at a time.
        let lhs_len = if prepack_lhs {
            p.kc * m.next_multiple_of(mr).max(rows)
        } else {
            p.kc * rows
        };
        let rhs = 0;
        let lhs = rhs + rhs_len + pad;
        Layout {
            pack_rhs,
            prepack_lhs,
            rhs,
            lhs,
            total: lhs + lhs_len + pad,
        }
    }
}

macro_rules! gemm_elem {
    ($t:ident, $n_fma:expr) => {
        impl GemmElem for $t {
            const G_ZERO: Self = 0.0;
            const G_ONE: Self = 1.0;

            fn isa() -> Isa {
                static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
                *ISA.get_or_init(|| {
                    #[cfg(target_arch = "x86_64")]
                    {
                        use gemm_common::simd::MixedSimd;
                        if std::arch::is_x86_feature_detected!("fma")
                            && <gemm_common::simd::V3 as MixedSimd<$t, $t, $t, $t>>::try_new()
                                .is_some()
                        {
                            use $crate::gemm::kernels::$t::fma as k;
                            return Isa::Fma {
                                mr: k::MR_DIV_N * $n_fma,
                                nr: k::NR,
                                n: $n_fma,
                                horizontal: k::H_M > 0 && k::H_N > 0,
                            };
                        }
                        use $crate::gemm::kernels::$t::scalar as k;
                        Isa::Scalar {
                            mr: k::MR_DIV_N,
                            nr: k::NR,
                        }
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    Isa::Fallback
                })
            }

            unsafe fn drive(isa: Isa, b: &Block<Self>, ws: &mut [Self]) {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Fma { .. } => {
                        use gemm_common::simd::MixedSimd;
                        use $crate::gemm::kernels::$t::fma as k;
                        let Some(simd) =
                            <gemm_common::simd::V3 as MixedSimd<$t, $t, $t, $t>>::try_new()
                        else {
                            return;
                        };
                        // SAFETY: the caller's contract; V3 was detected.
                        unsafe {
                            drive::<
                                $t,
                                _,
                                $n_fma,
                                { k::MR_DIV_N * $n_fma },
                                { k::NR },
                                { k::MR_DIV_N },
                            >(simd, &k::UKR, isa, b, ws)
                        }
                    }
                    #[cfg(target_arch = "x86_64")]
                    Isa::Scalar { .. } => {
                        use $crate::gemm::kernels::$t::scalar as k;
                        // SAFETY: the caller's contract.
                        unsafe {
                            drive::<$t, _, 1, { k::MR_DIV_N }, { k::NR }, { k::MR_DIV_N }>(
                                gemm_common::simd::Scalar,
                                &k::UKR,
                                isa,
                                b,
                                ws,
                            )
                        }
                    }
                    _ => {}
                }
            }
        }
    };
}

/// The micro-kernel tables, by element type and instruction set.
#[cfg(target_arch = "x86_64")]
mod kernels {
    pub mod f32 {
        pub use gemm_f32::microkernel::fma::f32 as fma;
        pub use gemm_f32::microkernel::scalar::f32 as scalar;
    }
    pub mod f64 {
        pub use gemm_f64::microkernel::fma::f64 as fma;
        pub use gemm_f64::microkernel::scalar::f64 as scalar;
    }
}

gemm_elem!(f32, 8);
gemm_elem!(f64, 4);

/// `gemm_basic_generic`'s blocked path, single-threaded, with the packed operands in
/// `ws`. `N`: SIMD width; `MR` × `NR`: the micro-tile.
///
/// # Safety
/// `b` addresses valid matrices; `ws` is at least `Layout::new(..).total` long.
#[allow(clippy::needless_range_loop)]
unsafe fn drive<
    T: GemmElem,
    S: gemm_common::simd::Simd,
    const N: usize,
    const MR: usize,
    const NR: usize,
    const MR_DIV_N: usize,
>(
    simd: S,
    ukr: &[[gemm_common::microkernel::MicroKernelFn<T>; NR]; MR_DIV_N],
    isa: Isa,
    b: &Block<T>,
    ws: &mut [T],
) {
    use gemm_common::Ptr;
    use gemm_common::pack_operands::{pack_lhs, pack_rhs};
    let (m, n, k) = (b.m, b.n, b.k);
    let (kc, mc, nc) = (b.kc, b.mc, b.nc);
    let plan = Plan {
        m,
        n,
        k,
        isa,
        transposed: false,
        whole: false,
        kc,
        mc,
        nc,
    };
    let do_pack_rhs = (b.rhs_rs.unsigned_abs() != 1 && m > 2 * MR)
        || (b.rhs_rs.unsigned_abs() == 1 && m > gemm::get_rhs_packing_threshold() * MR);
    let do_prepack_lhs = m <= 2 * mc && (m % N != 0 || b.lhs_rs != 1);
    let lay = Layout::new::<T>(&plan, m, n, do_pack_rhs, do_prepack_lhs);
    if ws.len() < lay.total {
        debug_assert!(false, "gemm workspace too small");
        return;
    }
    let base = ws.as_mut_ptr();
    let align = |off: usize| {
        // SAFETY: `off` is inside `ws`, which has room for the alignment padding.
        let p = unsafe { base.add(off) };
        let a = p.align_offset(ALIGN_BYTES);
        // SAFETY: the layout reserves `ALIGN_BYTES` of padding after every region.
        unsafe { p.add(if a == usize::MAX { 0 } else { a }) }
    };
    let packed_rhs = Ptr(align(lay.rhs));
    let packed_lhs_buf = Ptr(align(lay.lhs));
    debug_assert!(lay.pack_rhs == do_pack_rhs && lay.prepack_lhs == do_prepack_lhs);

    let packed_rhs_stride = kc * NR;
    let packed_lhs_stride = kc * MR;
    let packed_rhs_rs = if do_pack_rhs { NR as isize } else { b.rhs_rs };
    let packed_rhs_cs = if do_pack_rhs { 1 } else { b.rhs_cs };
    let packing_threshold = gemm::get_lhs_packing_threshold_single_thread();
    let (dst, lhs, rhs) = (Ptr(b.dst), Ptr(b.lhs as *mut T), Ptr(b.rhs as *mut T));
    let mut did_pack_lhs = [false; 64];

    let mut alpha = if b.read_dst { b.alpha } else { T::G_ZERO };
    let mut col_outer = 0;
    while col_outer != n {
        let n_chunk = nc.min(n - col_outer);
        let mut depth_outer = 0;
        while depth_outer != k {
            let k_chunk = kc.min(k - depth_outer);
            let alpha_status = if alpha == T::G_ZERO {
                0
            } else if alpha == T::G_ONE {
                1
            } else {
                2
            };
            if do_pack_rhs {
                // SAFETY: the packed panel fits `lay`'s rhs region; the source is inside rhs.
                unsafe {
                    pack_rhs::<T, 1, NR, _>(
                        simd,
                        n_chunk,
                        k_chunk,
                        packed_rhs,
                        rhs.wrapping_offset(
                            depth_outer as isize * b.rhs_rs + col_outer as isize * b.rhs_cs,
                        ),
                        b.rhs_cs,
                        b.rhs_rs,
                        packed_rhs_stride,
                    );
                }
            }
            if do_prepack_lhs {
                // SAFETY: as above, for the lhs region.
                unsafe {
                    pack_lhs::<T, N, MR, _>(
                        simd,
                        m,
                        k_chunk,
                        packed_lhs_buf,
                        lhs.wrapping_offset(depth_outer as isize * b.lhs_cs),
                        b.lhs_cs,
                        b.lhs_rs,
                        packed_lhs_stride,
                    );
                }
            }
            let n_col_mini_chunks = n_chunk.div_ceil(NR);
            let mut row_outer = 0;
            while row_outer != m {
                let mut m_chunk = mc.min(m - row_outer);
                if m_chunk > N && !do_prepack_lhs {
                    m_chunk = m_chunk / N * N;
                }
                let n_row_mini_chunks = m_chunk.div_ceil(MR);
                let do_pack_lhs = !do_prepack_lhs
                    && (m_chunk % N != 0 || b.lhs_rs != 1 || n_chunk > packing_threshold * NR);
                let packed_lhs_cs = if do_prepack_lhs || do_pack_lhs {
                    MR as isize
                } else {
                    b.lhs_cs
                };
                did_pack_lhs.fill(false);
                for j in 0..n_col_mini_chunks {
                    for i in 0..n_row_mini_chunks {
                        let col_inner = NR * j;
                        let n_chunk_inner = NR.min(n_chunk - col_inner);
                        let row_inner = MR * i;
                        let m_chunk_inner = MR.min(m_chunk - row_inner);
                        let dst = dst.wrapping_offset(
                            (row_outer + row_inner) as isize * b.dst_rs
                                + (col_outer + col_inner) as isize * b.dst_cs,
                        );
                        let func = ukr[m_chunk_inner.div_ceil(N) - 1][n_chunk_inner - 1];
                        let packed = i < did_pack_lhs.len() && did_pack_lhs[i];
                        if do_pack_lhs && !packed {
                            // SAFETY: panel `i` fits the lhs region (rows ≤ mc).
                            unsafe {
                                pack_lhs::<T, N, MR, _>(
                                    simd,
                                    m_chunk_inner,
                                    k_chunk,
                                    packed_lhs_buf.wrapping_add(i * packed_lhs_stride),
                                    lhs.wrapping_offset(
                                        (row_outer + row_inner) as isize * b.lhs_rs
                                            + depth_outer as isize * b.lhs_cs,
                                    ),
                                    b.lhs_cs,
                                    b.lhs_rs,
                                    packed_lhs_stride,
                                );
                            }
                            if i < did_pack_lhs.len() {
                                did_pack_lhs[i] = true;
                            }
                        }
                        let lhs_ptr = if do_pack_lhs {
                            packed_lhs_buf.wrapping_add(i * packed_lhs_stride).0
                        } else if do_prepack_lhs {
                            packed_lhs_buf
                                .wrapping_add((i + row_outer / MR) * packed_lhs_stride)
                                .0
                        } else {
                            lhs.wrapping_offset(
                                (row_outer + row_inner) as isize * b.lhs_rs
                                    + depth_outer as isize * b.lhs_cs,
                            )
                            .0
                        };
                        let rhs_ptr = if do_pack_rhs {
                            packed_rhs.wrapping_add(j * packed_rhs_stride).0
                        } else {
                            rhs.wrapping_offset(
                                depth_outer as isize * b.rhs_rs
                                    + (col_outer + col_inner) as isize * b.rhs_cs,
                            )
                            .0
                        };
                        // SAFETY: the micro-kernel reads an m_chunk_inner × k_chunk panel and
                        // a k_chunk × n_chunk_inner panel and updates that tile of dst, all
                        // inside the operands or the workspace.
                        unsafe {
                            func(
                                m_chunk_inner,
                                n_chunk_inner,
                                k_chunk,
                                dst.0,
                                lhs_ptr,
                                rhs_ptr,
                                b.dst_cs,
                                b.dst_rs,
                                packed_lhs_cs,
                                packed_rhs_rs,
                                packed_rhs_cs,
                                alpha,
                                b.beta,
                                alpha_status,
                                false,
                                false,
                                false,
                                std::ptr::null(),
                            );
                        }
                    }
                }
                row_outer += m_chunk;
            }
            alpha = T::G_ONE;
            depth_outer += k_chunk;
        }
        col_outer += n_chunk;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn val(&mut self) -> f64 {
            (self.next() % 2001) as f64 / 1000.0 - 1.0
        }
    }

    /// Strides of an r×c matrix stored row-major (or column-major), with padding.
    fn layout(rng: &mut Rng, r: usize, c: usize) -> ([usize; 2], usize) {
        let pad = rng.below(3);
        if rng.below(3) == 0 {
            ([1, r + pad], (r + pad) * c.max(1))
        } else {
            ([c + pad, 1], (c + pad) * r.max(1))
        }
    }

    struct Case<T> {
        m: usize,
        n: usize,
        k: usize,
        s: Strides,
        a: Vec<T>,
        b: Vec<T>,
        c: Vec<T>,
        alpha: T,
        beta: T,
        read_dst: bool,
    }

    fn case<T: GemmElem>(rng: &mut Rng, conv: impl Fn(f64) -> T) -> Case<T> {
        let dims = [1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 64, 65, 100, 130, 257];
        let (m, n, k) = (
            dims[rng.below(dims.len())],
            dims[rng.below(dims.len())],
            dims[rng.below(dims.len())],
        );
        let (ls, la) = layout(rng, m, k);
        let (rs, ra) = layout(rng, k, n);
        let (ds, da) = layout(rng, m, n);
        let mut v = |len: usize| (0..len).map(|_| conv(rng.val())).collect::<Vec<T>>();
        let (a, b, c) = (v(la), v(ra), v(da));
        let read_dst = rng.below(2) == 0;
        Case {
            m,
            n,
            k,
            s: Strides {
                dst: ds,
                lhs: ls,
                rhs: rs,
            },
            a,
            b,
            c,
            alpha: conv(if read_dst { 0.5 } else { 1.0 }),
            beta: conv(if rng.below(2) == 0 { 1.0 } else { -1.5 }),
            read_dst,
        }
    }

    fn by_gemm<T: GemmElem>(c: &Case<T>) -> Vec<T> {
        let mut out = c.c.clone();
        // SAFETY: the operands are sized for their strides.
        unsafe {
            gemm::gemm(
                c.m,
                c.n,
                c.k,
                out.as_mut_ptr(),
                c.s.dst[1] as isize,
                c.s.dst[0] as isize,
                c.read_dst,
                c.a.as_ptr(),
                c.s.lhs[1] as isize,
                c.s.lhs[0] as isize,
                c.b.as_ptr(),
                c.s.rhs[1] as isize,
                c.s.rhs[0] as isize,
                c.alpha,
                c.beta,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        out
    }

    /// Runs `plan` in blocks: `cuts` split the split axis (rounded to its multiple).
    fn by_plan<T: GemmElem>(c: &Case<T>, plan: &Plan, cuts: &[usize]) -> Vec<T> {
        let mut out = c.c.clone();
        let mut bounds = vec![0];
        let split = plan.split();
        let len = match split {
            Some((Axis::Rows, _)) => c.m,
            Some((Axis::Cols, _)) => c.n,
            None => 0,
        };
        if let Some((_, mult)) = split {
            for &x in cuts {
                let b = (x % len.max(1)) / mult * mult;
                if b > *bounds.last().unwrap() {
                    bounds.push(b);
                }
            }
        }
        bounds.push(len);
        for w in bounds.windows(2) {
            let (rows, cols) = match split {
                Some((Axis::Rows, _)) => (w[0]..w[1], 0..c.n),
                Some((Axis::Cols, _)) => (0..c.m, w[0]..w[1]),
                None => (0..c.m, 0..c.n),
            };
            let mut ws = vec![T::G_ZERO; plan.workspace_len::<T>(rows.len(), cols.len())];
            // SAFETY: as in `by_gemm`; blocks are disjoint and run one after another.
            unsafe {
                plan.run(
                    out.as_mut_ptr(),
                    c.a.as_ptr(),
                    c.b.as_ptr(),
                    c.s,
                    c.alpha,
                    c.beta,
                    c.read_dst,
                    rows,
                    cols,
                    &mut ws,
                );
            }
        }
        out
    }

    fn check<T: GemmElem + std::fmt::Debug>(conv: impl Fn(f64) -> T + Copy) {
        let mut rng = Rng(7);
        for i in 0..300 {
            let c = case(&mut rng, conv);
            let want = by_gemm(&c);
            let plan = Plan::new::<T>(c.m, c.n, c.k, c.s);
            let cuts = [rng.below(300), rng.below(300), rng.below(300)];
            assert!(
                by_plan(&c, &plan, &[]) == want,
                "case {i}: {}x{}x{} {:?} differs from gemm",
                c.m,
                c.n,
                c.k,
                c.s
            );
            assert!(
                by_plan(&c, &plan, &cuts) == want,
                "case {i}: {}x{}x{} {:?} split at {cuts:?} differs",
                c.m,
                c.n,
                c.k,
                c.s
            );
        }
    }

    #[test]
    fn matches_gemm_bit_for_bit_whole_and_split_f32() {
        check::<f32>(|v| v as f32);
    }

    #[test]
    fn matches_gemm_bit_for_bit_whole_and_split_f64() {
        check::<f64>(|v| v);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn scalar_kernels_compute_the_product() {
        use kernels::f32::scalar as k;
        let isa = Isa::Scalar {
            mr: k::MR_DIV_N,
            nr: k::NR,
        };
        let mut rng = Rng(11);
        for _ in 0..100 {
            let c = case(&mut rng, |v| v as f32);
            let plan = Plan::with_isa::<f32>(isa, c.m, c.n, c.k, c.s);
            if plan.whole {
                continue;
            }
            let got = by_plan(&c, &plan, &[rng.below(200)]);
            for i in 0..c.m {
                for j in 0..c.n {
                    let mut acc = 0f64;
                    for p in 0..c.k {
                        acc += c.a[i * c.s.lhs[0] + p * c.s.lhs[1]] as f64
                            * c.b[p * c.s.rhs[0] + j * c.s.rhs[1]] as f64;
                    }
                    let o = i * c.s.dst[0] + j * c.s.dst[1];
                    let prev = if c.read_dst {
                        c.alpha as f64 * c.c[o] as f64
                    } else {
                        0.0
                    };
                    let want = prev + c.beta as f64 * acc;
                    assert!((got[o] as f64 - want).abs() < 1e-3 * (1.0 + want.abs()));
                }
            }
        }
    }
}
