//! Statically quantized addition and multiplication with broadcasting (XNNPACK's
//! `qs8_vadd` and `qs8_vmul`, fp32 flavour).

use super::Requant;
use etch_core::{Error, KernelContext, Result};
use etch_kernels::threads::{SharedMut, run_parts, tasks_for};

/// Dims a broadcast is walked over (XNNPACK's `XNN_MAX_TENSOR_DIMS`).
pub const DIMS: usize = 6;

/// XNNPACK's addition parameters (`xnn_init_qs8_add_minmax_scalar_params`):
/// `out = ((bias + a * a_mult + b * b_mult) >> shift) + zp`, then clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddParams {
    pub a_mult: i32,
    pub b_mult: i32,
    pub bias: i32,
    pub shift: u32,
}

impl AddParams {
    /// From the operands' and output's scales and zero points.
    pub fn new(a: (f32, i32), b: (f32, i32), out_scale: f32) -> Result<Self> {
        let (a_os, b_os) = (a.0 / out_scale, b.0 / out_scale);
        let max = a_os.abs().max(b_os.abs());
        let ok = |s: f32| (2f32.powi(-10)..256.0).contains(&s.abs());
        if !ok(a_os) || !ok(b_os) {
            return Err(Error::not_supported(format!(
                "a quantized addition with input / output scale ratios {a_os} and {b_os} \
                 (XNNPACK takes [2^-10, 256))"
            )));
        }
        let max_exp = (max.to_bits() >> 23) as i32 - 127;
        let shift = (20 - max_exp) as u32;
        // `|s| * 2^shift`, by the exponent's bits as XNNPACK does, rounded half to even.
        let mult = |s: f32| {
            let m = f32::from_bits(s.abs().to_bits() + (shift << 23)).round_ties_even() as i32;
            if s.is_sign_negative() { -m } else { m }
        };
        let (a_mult, b_mult) = (mult(a_os), mult(b_os));
        let rounding = 1i32 << (shift - 1);
        let bias = rounding
            .wrapping_sub(a_mult.wrapping_mul(a.1))
            .wrapping_sub(b_mult.wrapping_mul(b.1));
        Ok(AddParams {
            a_mult,
            b_mult,
            bias,
            shift,
        })
    }

    #[inline(always)]
    pub(super) fn apply(&self, a: i8, b: i8, out: &Requant) -> i8 {
        let acc = self
            .bias
            .wrapping_add((a as i32).wrapping_mul(self.a_mult))
            .wrapping_add((b as i32).wrapping_mul(self.b_mult));
        ((acc >> self.shift) + out.zp).clamp(out.lo, out.hi) as i8
    }
}

/// The walk of a broadcast: output dims and the operands' element strides (0 where an
/// operand is broadcast), all `DIMS` long (leading dims 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broadcast {
    pub dims: [usize; DIMS],
    pub a: [usize; DIMS],
    pub b: [usize; DIMS],
}

impl Broadcast {
    /// Of operands of dims `a` and `b` (NumPy's rules) into `out`.
    pub fn new(a: &[usize], b: &[usize], out: &[usize]) -> Result<Self> {
        let err = || {
            Error::invalid_program(format!(
                "broadcast of {a:?} and {b:?} into {out:?} (at most {DIMS} dims)"
            ))
        };
        if out.len() > DIMS || a.len() > out.len() || b.len() > out.len() {
            return Err(err());
        }
        let mut bc = Broadcast {
            dims: [1; DIMS],
            a: [0; DIMS],
            b: [0; DIMS],
        };
        let pad = |d: &[usize]| {
            let mut p = [1usize; DIMS];
            p[DIMS - d.len()..].copy_from_slice(d);
            p
        };
        let (pa, pb) = (pad(a), pad(b));
        bc.dims[DIMS - out.len()..].copy_from_slice(out);
        let (mut sa, mut sb) = (1usize, 1usize);
        for d in (0..DIMS).rev() {
            let n = bc.dims[d];
            for (p, s, st) in [(&pa, &mut bc.a, &mut sa), (&pb, &mut bc.b, &mut sb)] {
                if p[d] == n {
                    s[d] = if n == 1 { 0 } else { *st };
                } else if p[d] != 1 {
                    return Err(err());
                }
                *st *= p[d];
            }
        }
        Ok(bc)
    }

    /// The lowering's encoding: dims, then `a`'s and `b`'s strides.
    pub fn ints(&self) -> Vec<i64> {
        self.dims
            .iter()
            .chain(&self.a)
            .chain(&self.b)
            .map(|&v| v as i64)
            .collect()
    }

    /// Reads [`Broadcast::ints`].
    pub fn from_ints(v: &[i64]) -> Result<Self> {
        if v.len() != 3 * DIMS || v.iter().any(|&x| x < 0) {
            return Err(Error::internal(format!("qs8 broadcast {v:?}")));
        }
        let get = |i: usize| std::array::from_fn(|d| v[i * DIMS + d] as usize);
        Ok(Broadcast {
            dims: get(0),
            a: get(1),
            b: get(2),
        })
    }

    /// The operands' offsets of innermost run `k` (in output order).
    fn offsets(&self, mut k: usize) -> (usize, usize) {
        let (mut oa, mut ob) = (0, 0);
        for d in (0..DIMS - 1).rev() {
            let i = k % self.dims[d];
            k /= self.dims[d];
            oa += i * self.a[d];
            ob += i * self.b[d];
        }
        (oa, ob)
    }

    fn check(&self, a: usize, b: usize, out: usize) -> Result<()> {
        let extent =
            |s: &[usize; DIMS]| (0..DIMS).map(|d| s[d] * (self.dims[d] - 1)).sum::<usize>() + 1;
        let n: usize = self.dims.iter().product();
        if n != out || (n > 0 && (extent(&self.a) > a || extent(&self.b) > b)) {
            return Err(Error::internal(format!(
                "qs8 binary operands {a}, {b}, {out} for {self:?}"
            )));
        }
        Ok(())
    }
}

/// One operand of a run of outputs: elements from a slice (stride 1), or one element
/// repeated (stride 0).
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    Run(&'a [i8]),
    Splat(i8),
}

impl Operand<'_> {
    /// Element `i` of the run.
    #[inline(always)]
    pub fn get(&self, i: usize) -> i8 {
        match self {
            Operand::Run(s) => s[i],
            Operand::Splat(v) => *v,
        }
    }
}

/// A loop over one run of outputs.
type RunFn<'a> = dyn Fn(Operand<'_>, Operand<'_>, &mut [i8]) + Sync + 'a;

/// Runs `f(a, b, out)` over the runs of the innermost dim of a broadcast into `out`, split
/// over threads; operands of one shape run as pieces of the whole.
fn each(ctx: &mut KernelContext<'_>, f: &RunFn<'_>) -> Result<()> {
    let (a, b) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let bc = Broadcast::from_ints(ctx.int_list(3)?)?;
    let mut o = ctx.tensor(2)?;
    let (a, b, o) = (a.data::<i8>()?, b.data::<i8>()?, o.data_mut::<i8>()?);
    bc.check(a.len(), b.len(), o.len())?;
    if bc == Broadcast::new(&bc.dims, &bc.dims, &bc.dims)? {
        super::flat(o, &|at, o| {
            let n = o.len();
            f(
                Operand::Run(&a[at..at + n]),
                Operand::Run(&b[at..at + n]),
                o,
            )
        });
        return Ok(());
    }
    let run = bc.dims[DIMS - 1];
    if run == 0 || o.is_empty() {
        return Ok(());
    }
    let (sa, sb) = (bc.a[DIMS - 1], bc.b[DIMS - 1]);
    fn operand(x: &[i8], at: usize, stride: usize, run: usize) -> Operand<'_> {
        match stride {
            0 => Operand::Splat(x[at]),
            _ => Operand::Run(&x[at..at + run]),
        }
    }
    let shared = SharedMut::new(o);
    let n = shared.len();
    run_parts(n / run, tasks_for(n, super::FLAT_TASK), &|r| {
        for k in r {
            let (oa, ob) = bc.offsets(k);
            // SAFETY: each run of outputs is written by the one task whose range has it.
            let o = unsafe { shared.slice(k * run, run) };
            f(operand(a, oa, sa, run), operand(b, ob, sb, run), o);
        }
    });
    Ok(())
}

/// `add(a, b, out, broadcast, [a_mult, b_mult, bias, shift], [zp, lo, hi])`.
pub fn add(ctx: &mut KernelContext<'_>) -> Result<()> {
    let p = match ctx.int_list(4)? {
        &[a_mult, b_mult, bias, shift] if (1..32).contains(&shift) => AddParams {
            a_mult: a_mult as i32,
            b_mult: b_mult as i32,
            bias: bias as i32,
            shift: shift as u32,
        },
        v => return Err(Error::internal(format!("qs8 add parameters {v:?}"))),
    };
    let out = Requant::from_ints(ctx.int_list(5)?)?;
    #[cfg(target_arch = "x86_64")]
    if super::flat512::available() {
        // SAFETY: the CPU has the features; the operands' runs are the output's length.
        return each(ctx, &|a, b, o| unsafe {
            super::flat512::add(a, b, o, &p, &out)
        });
    }
    each(ctx, &|a, b, o| {
        for (i, o) in o.iter_mut().enumerate() {
            *o = p.apply(a.get(i), b.get(i), &out);
        }
    })
}

/// `mul(a, b, out, broadcast, [a_zp, b_zp], scale, [zp, lo, hi])`:
/// `requant((a - a_zp) * (b - b_zp) as f32 * scale)`.
pub fn mul(ctx: &mut KernelContext<'_>) -> Result<()> {
    let (a_zp, b_zp) = match ctx.int_list(4)? {
        &[a, b] => (a as i32, b as i32),
        v => return Err(Error::internal(format!("qs8 mul zero points {v:?}"))),
    };
    let scale = ctx.double(5)? as f32;
    let out = Requant::from_ints(ctx.int_list(6)?)?;
    #[cfg(target_arch = "x86_64")]
    if super::flat512::available() {
        let zps = (a_zp, b_zp);
        // SAFETY: as in `add`.
        return each(ctx, &|a, b, o| unsafe {
            super::flat512::mul(a, b, o, zps, scale, &out)
        });
    }
    each(ctx, &|a, b, o| {
        for (i, o) in o.iter_mut().enumerate() {
            let (a, b) = (a.get(i) as i32 - a_zp, b.get(i) as i32 - b_zp);
            *o = out.apply((a * b) as f32 * scale);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_strides() {
        let bc = Broadcast::new(&[1, 4, 4, 8], &[1, 1, 1, 8], &[1, 4, 4, 8]).unwrap();
        assert_eq!(bc.dims, [1, 1, 1, 4, 4, 8]);
        assert_eq!(bc.a, [0, 0, 0, 32, 8, 1]);
        assert_eq!(bc.b, [0, 0, 0, 0, 0, 1]);
        assert!(Broadcast::new(&[3], &[4], &[4]).is_err());
    }

    #[test]
    fn addition_parameters_as_xnnpack() {
        // Equal scales: both multipliers are 2^20 at shift 20.
        let p = AddParams::new((0.5, 3), (0.5, -2), 0.5).unwrap();
        assert_eq!((p.a_mult, p.b_mult, p.shift), (1 << 20, 1 << 20, 20));
        let out = Requant {
            zp: 1,
            lo: -128,
            hi: 127,
        };
        // (10 - 3) + (5 + 2) + 1
        assert_eq!(p.apply(10, 5, &out), 15);
    }
}
