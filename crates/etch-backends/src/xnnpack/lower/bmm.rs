//! `XNNBatchMatrixMultiply` of two fp32 values on etch's packed kernels ([`gemm512`]:
//! AVX-512F, or AVX2 and FMA): the attention products of a decoder (`q @ k^T`, `scores @ v`), whose
//! right operands are activations. Per call, each batch's right operand is packed into
//! scratch memory the plan owns (reserved at init), then multiplied with
//! [`gemm512::fully_connected`]; each output element's sum is in the packed kernel's order,
//! whatever the thread count.
//!
//! Only XNNPACK graphs use this: portable `aten::mm`/`aten::bmm` whose right operand is a
//! weight would pack the whole weight on every call (tried and reverted, BENCHMARKS.md).

use super::super::graph::Node;
use super::super::plan::Builder;
use etch_core::{Error, KernelContext, Result, ScalarType};
use etch_kernels::gemm512;
use etch_kernels::threads::{SharedMut, run_parts};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a batch product of `[ba, m, k]` by `[bw, k, n]` (`bw` is `ba` or 1) runs
/// here: fp32 operands and output, the packed kernels run ([`gemm512::available`]), and at
/// least one row tile.
pub fn applies(b: &Builder<'_>, [a, w, out]: [u32; 3], m: usize) -> bool {
    let f32s = [a, w, out]
        .iter()
        .all(|&id| b.dtype(id).is_ok_and(|t| t == ScalarType::Float));
    f32s && m >= gemm512::MR && gemm512::available()
}

/// Lowers the product: `a` viewed `[ba, m, k]`, `w` as stored (`[bw, n, k]` transposed,
/// `[bw, k, n]` otherwise), `out` `[ba, m, n]`, the node's clamp fused.
pub fn packed(
    b: &mut Builder<'_>,
    node: &Node,
    [a, w, out]: [u32; 3],
    transposed: bool,
    [ba, bw, m, n, k]: [usize; 5],
) -> Result<()> {
    let plen = gemm512::fc_packed_len(n, k)
        .and_then(|l| l.checked_mul(bw))
        .ok_or_else(|| Error::invalid_program("XNNBatchMatrixMultiply size overflows"))?;
    let x = b.view(a, &[ba, m, k], None)?;
    let y = b.view(w, &if transposed { [bw, n, k] } else { [bw, k, n] }, None)?;
    let o = b.view(out, &[ba, m, n], None)?;
    let p = b.scratch(ScalarType::Float, &[plen])?;
    let t = b.boolean(transposed);
    let (lo, hi) = b.clamp_bounds(node.clamp);
    b.kernel_fn(
        "xnnpack::f32_batch_matmul",
        run_packed,
        &[x, y, o, p, t, lo, hi],
    );
    Ok(())
}

/// Args `[x [ba, m, k], y ([bw, n, k] if transposed, else [bw, k, n]), out [ba, m, n],
/// scratch, transposed, lo, hi]`.
fn run_packed(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (x, y, mut o, mut p) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.tensor(3)?,
    );
    let transposed = ctx.bool(4)?;
    let (lo, hi) = (ctx.double(5)? as f32, ctx.double(6)? as f32);
    let ([ba, m, k], [bw, n]) = (
        [x.sizes()[0], x.sizes()[1], x.sizes()[2]],
        [y.sizes()[0], o.sizes()[2]],
    );
    let plen = gemm512::fc_packed_len(n, k).unwrap_or(usize::MAX);
    let (x, y) = (x.data::<f32>()?, y.data::<f32>()?);
    let (o, p) = (o.data_mut::<f32>()?, p.data_mut::<f32>()?);
    let sizes_ok = bw > 0
        && (bw == ba || bw == 1)
        && x.len() == ba * m * k
        && y.len() == bw * n * k
        && o.len() == ba * m * n
        && bw.checked_mul(plen).is_some_and(|l| l <= p.len());
    if !sizes_ok {
        return Err(Error::internal("packed batch matmul: operand sizes"));
    }
    let threads = etch_kernels::threads::num_threads();
    if bw == ba && ba >= threads {
        // One dispatch: each task packs and multiplies its own batches (the product's own
        // split runs inline inside a task), so the pool is not woken once per batch.
        let (packed, out) = (SharedMut::new(&mut p[..bw * plen]), SharedMut::new(o));
        let failed = AtomicBool::new(false);
        run_parts(ba, threads, &|batches| {
            for bi in batches {
                // SAFETY: batch `bi`'s packed panels and output rows are this task's alone.
                let (pb, ob) =
                    unsafe { (packed.slice(bi * plen, plen), out.slice(bi * m * n, m * n)) };
                pack(pb, &y[bi * n * k..][..n * k], n, k, transposed);
                let xb = &x[bi * m * k..][..m * k];
                if gemm512::fully_connected(xb, m, k, pb, n, ob, lo, hi).is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
            }
        });
        return match failed.load(Ordering::Relaxed) {
            true => Err(Error::internal("packed batch matmul refused")),
            false => Ok(()),
        };
    }
    let packed = SharedMut::new(&mut p[..bw * plen]);
    run_parts(bw, bw.min(threads), &|batches| {
        for bi in batches {
            let yb = &y[bi * n * k..(bi + 1) * n * k];
            // SAFETY: batch `bi`'s packed panels are this task's alone.
            let dst = unsafe { packed.slice(bi * plen, plen) };
            pack(dst, yb, n, k, transposed);
        }
    });
    for bi in 0..ba {
        let pb = &p[(bi % bw) * plen..][..plen];
        let (xb, ob) = (&x[bi * m * k..][..m * k], &mut o[bi * m * n..][..m * n]);
        gemm512::fully_connected(xb, m, k, pb, n, ob, lo, hi)
            .map_err(|e| Error::internal(format!("packed batch matmul: {e}")))?;
    }
    Ok(())
}

/// Packs `y` (`[n, k]` if `transposed`, else `[k, n]`) as [`gemm512::pack_fc`] does with no
/// bias: per panel of [`gemm512::NR`] columns, `NR` zeros (the bias), then `k` rows of `NR`
/// (columns past `n` zero). Reads `y` along its rows: a non-transposed operand is copied
/// a panel row at a time, a transposed one a column of the panel at a time.
fn pack(dst: &mut [f32], y: &[f32], n: usize, k: usize, transposed: bool) {
    const NR: usize = gemm512::NR;
    for (panel, d) in dst.chunks_exact_mut(NR * (k + 1)).enumerate() {
        let j0 = panel * NR;
        let cols = NR.min(n.saturating_sub(j0));
        d[..NR].fill(0.0);
        let rows = &mut d[NR..];
        if cols < NR {
            rows.fill(0.0);
        }
        if transposed {
            for jj in 0..cols {
                let src = &y[(j0 + jj) * k..(j0 + jj + 1) * k];
                for (kk, &v) in src.iter().enumerate() {
                    rows[kk * NR + jj] = v;
                }
            }
        } else {
            for (kk, row) in rows.chunks_exact_mut(NR).enumerate() {
                row[..cols].copy_from_slice(&y[kk * n + j0..kk * n + j0 + cols]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`pack`] writes what [`gemm512::pack_fc`] does, for both layouts, over a buffer
    /// holding garbage (as scratch does from the second call on), with a partial panel.
    #[test]
    fn pack_matches_pack_fc() {
        for (n, k) in [(64, 128), (128, 64), (37, 5), (1, 1)] {
            let y: Vec<f32> = (0..n * k).map(|i| i as f32 * 0.5 - 7.0).collect();
            for transposed in [false, true] {
                let want = gemm512::pack_fc(
                    n,
                    k,
                    |j, kk| {
                        if transposed {
                            y[j * k + kk]
                        } else {
                            y[kk * n + j]
                        }
                    },
                    None,
                )
                .unwrap();
                let mut got = vec![f32::NAN; want.len()];
                pack(&mut got, &y, n, k, transposed);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{n}x{k} transposed {transposed}");
            }
        }
    }
}
