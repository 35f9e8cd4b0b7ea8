//! Shape kernels (views, copies, concatenation, splits, factories): etch-kernels' own
//! shape kernels, instantiated with [`CudaMover`], so the CPU and CUDA share every argument
//! check and output-shape rule. The data moves through the elementwise COPY/FILL/ARANGE
//! maps over strided views.

use crate::elementwise::{self, Domain, In, Op, View, cast_domain, map_views};
use crate::util::{MAX_DIMS, check_rank, ptr};
use etch_core::{KernelContext, Result, Scalar, TensorRef};
use etch_kernels::shape::{Mover, Strided};

/// The CUDA data primitives.
pub struct CudaMover;

fn view(t: &TensorRef<'_>, s: &Strided, offset_sign: i64) -> View {
    let es = t.dtype().element_size() as u64;
    let mut st = [0i64; MAX_DIMS];
    for (d, &v) in s.strides.iter().enumerate().take(MAX_DIMS) {
        st[d] = v as i64;
    }
    View {
        ptr: (ptr(t) as i64 + offset_sign * (s.offset as u64 * es) as i64) as u64,
        dt: t.dtype(),
        st,
    }
}

fn row_major(v: &View, sizes: &[usize]) -> bool {
    let c = crate::util::contiguous(sizes);
    sizes
        .iter()
        .enumerate()
        .all(|(d, &n)| n == 1 || v.st[d] == c[d])
}

impl Mover for CudaMover {
    fn copy_strided(
        ctx: &KernelContext<'_>,
        op: &str,
        src: &TensorRef<'_>,
        sv: &Strided,
        sizes: &[usize],
        dst: &mut TensorRef<'_>,
        dv: &Strided,
    ) -> Result<()> {
        check_rank(op, sizes.len())?;
        if sizes.contains(&0) {
            return Ok(());
        }
        crate::util::same_device(op, &[src, dst])?;
        let (s, d) = (view(src, sv, 1), view(dst, dv, 1));
        let contig = row_major(&s, sizes) && row_major(&d, sizes);
        map_views(
            ctx,
            Op::COPY,
            cast_domain(src.dtype(), dst.dtype()),
            dst.device(),
            sizes,
            d,
            &[In::V(s)],
            contig,
            [0.0; 4],
            [0; 4],
        )
    }

    fn fill(ctx: &KernelContext<'_>, _op: &str, out: &mut TensorRef<'_>, s: Scalar) -> Result<()> {
        elementwise::fill(ctx, out, s)
    }

    fn arange(
        ctx: &KernelContext<'_>,
        _op: &str,
        out: &mut TensorRef<'_>,
        start: Scalar,
        step: Scalar,
        all_int: bool,
    ) -> Result<()> {
        let domain = if all_int { Domain::I64 } else { Domain::F64 };
        elementwise::arange_fill(ctx, out, start, step, domain)
    }

    fn flip(
        ctx: &KernelContext<'_>,
        op: &str,
        a: &TensorRef<'_>,
        out: &mut TensorRef<'_>,
        flipped: &[bool],
    ) -> Result<()> {
        check_rank(op, a.dim())?;
        let sizes = a.sizes();
        let es = a.dtype().element_size() as i64;
        let mut st = [0i64; MAX_DIMS];
        let mut start = 0i64;
        for d in 0..a.dim() {
            st[d] = a.strides()[d] as i64;
            if flipped.get(d).copied().unwrap_or(false) && sizes[d] > 0 {
                start += (sizes[d] as i64 - 1) * st[d];
                st[d] = -st[d];
            }
        }
        let src = View {
            ptr: (ptr(a) as i64 + start * es) as u64,
            dt: a.dtype(),
            st,
        };
        let dst = view(out, &Strided::of(out)?, 1);
        map_views(
            ctx,
            Op::COPY,
            Domain::of(a.dtype()),
            out.device(),
            sizes,
            dst,
            &[In::V(src)],
            false,
            [0.0; 4],
            [0; 4],
        )
    }
}
