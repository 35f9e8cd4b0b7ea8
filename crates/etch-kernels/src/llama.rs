//! ExecuTorch's LLM custom operators (`llama::` namespace, from
//! `executorch/extension/llm/custom_ops`): the KV-cache update and the attention over a KV
//! cache that `export_llm` programs call.
//!
//! Layouts are sequence-major, as in ExecuTorch: queries, keys and values are
//! `[batch, seq, heads, head_dim]` and the caches `[batch, max_seq, kv_heads, head_dim]`,
//! all in the contiguous dim order. Query heads share KV heads in groups (GQA): query head
//! `h` reads KV head `h / (heads / kv_heads)`.
//!
//! - `update_cache.out(value, cache, start_pos, *, out)`: `cache[:, start_pos:start_pos+S] =
//!   value` (S = `value.size(1)`), in place; `out` is a placeholder left untouched.
//! - `update_cache_with_indices.out(value, cache, start_pos, indices, *, out)`:
//!   `cache[b, indices[b, s]] = value[b, s]`.
//! - `custom_sdpa.out(query, key_cache, value_cache, start_pos, attn_mask?, dropout_p,
//!   is_causal, scale?, *, out)`: softmax attention of each query row over the cache.
//!   Without a mask the keys are `0..start_pos+S`, and with `is_causal` query row `r` (at
//!   position `start_pos + r`) sees keys `0..=start_pos+r`. With a mask (2-D
//!   `[S, max_seq]`, added to the scaled scores) the keys are the whole cache; a mask and
//!   `is_causal` together are rejected. `scale` defaults to `1/sqrt(head_dim)`; dropout is
//!   ignored (inference), as in ExecuTorch.
//! - `sdpa_with_kv_cache.out(query, key, value, key_cache, value_cache, start_pos, seq_len,
//!   attn_mask?, dropout_p, is_causal, scale?, *, out)`: `update_cache` of both caches,
//!   then `custom_sdpa`.
//! - `custom_quantized_sdpa.out(query, key, value, start_pos, attn_mask?, dropout_p,
//!   is_causal, scale?, q_zero_points?, q_scales?, k_zero_points?, k_scales?,
//!   v_zero_points?, v_scales?, is_seq_at_dim_2, *, out)`: `custom_sdpa` over int8 query
//!   and caches with one (int8 zero point, f32 scale) pair per `head_dim` row
//!   (`[batch, seq, heads, 1]`), as `export_llm`'s quantized KV-cache recipe calls it:
//!   scores `sum((q - zq) * (k - zk)) * sq * sk * scale` (the sum exact in int32), softmax
//!   in f32, output `sum_j p_j * (v_j - zv_j) * sv_j` in f32. The mask, if any, is f32.
//!   `is_seq_at_dim_2` (`[batch, heads, seq, head_dim]` operands) is not implemented.
//! - `gated_delta_rule.out` (and `channelwise_gated_delta_rule.out`): in
//!   [`crate::llama_gdr`] (head-major operands).
//!
//! Half types compute in `f32` (scores, softmax and the weighted sum) and round once.
//!
//! `start_pos` is an Int (the SymInt ExecuTorch's programs compute with
//! `_local_scalar_dense(input_pos)`), or a one-element int64 tensor holding it: `etch lower`
//! passes the tensor instead when it can ([`StartPos`]), so that a device kernel reads the
//! position where it lives, with no host sync, and a CUDA graph recorded at one position
//! replays at the next. The `*_call` decoders check everything but a tensor position's
//! value (it may live on a device); the CPU kernels read it and check it then.

use crate::dispatch_float;
use crate::scratch;
use crate::threads::{self, SharedMut};
use crate::util::*;
use etch_core::{Error, KernelContext, KernelRegistry, Result, ScalarType, TensorRef};

/// Multiply-adds below which attention stays on the calling thread, and the least a
/// thread is given.
const ATTN_TASK: usize = 1 << 15;

fn require_4d(op: &str, what: &str, t: &TensorRef<'_>) -> Result<()> {
    if t.dim() != 4 {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} must be 4-D [batch, seq, heads, head_dim], got {:?}",
            t.sizes()
        )));
    }
    require_contiguous(op, what, t)
}

fn non_negative(op: &str, what: &str, v: i64) -> Result<usize> {
    usize::try_from(v)
        .map_err(|_| Error::invalid_argument(format!("{op}: {what} is negative ({v})")))
}

/// Where a call's `start_pos` comes from.
// Built on the stack per call; boxing the tensor would allocate on the execute path.
#[allow(clippy::large_enum_variant)]
pub enum StartPos<'a> {
    /// An Int argument, known on the host.
    Value(i64),
    /// A one-element int64 tensor holding it (on the host or a device).
    Tensor(TensorRef<'a>),
}

impl StartPos<'_> {
    /// The position, reading a tensor on the host (host-accessible memory only).
    pub fn read(&self) -> Result<i64> {
        match self {
            StartPos::Value(v) => Ok(*v),
            StartPos::Tensor(t) => Ok(t.data::<i64>()?[0]),
        }
    }

    /// The position when it is an Int argument (`None` for a tensor, not read here).
    pub fn value(&self) -> Option<i64> {
        match self {
            StartPos::Value(v) => Some(*v),
            StartPos::Tensor(_) => None,
        }
    }
}

/// Argument `i` as a start position: an Int, or a one-element int64 tensor.
pub fn start_pos<'a>(ctx: &KernelContext<'a>, i: usize) -> Result<StartPos<'a>> {
    let op = ctx.op_name();
    if !matches!(ctx.value(i)?, etch_core::EValue::Tensor(_)) {
        return Ok(StartPos::Value(ctx.int(i)?));
    }
    let t = ctx.tensor(i)?;
    if t.dtype() != ScalarType::Long || t.numel() != 1 {
        return Err(Error::invalid_argument(format!(
            "{op}: a start_pos tensor must hold one int64, got {} {:?}",
            t.dtype(),
            t.sizes()
        )));
    }
    Ok(StartPos::Tensor(t))
}

/// Checks `value` against `cache` for a copy into rows `start..start + value.size(1)`.
pub(crate) fn check_update(
    op: &str,
    value: &TensorRef<'_>,
    cache: &TensorRef<'_>,
    start: Option<usize>,
) -> Result<()> {
    require_4d(op, "value", value)?;
    require_4d(op, "cache", cache)?;
    same_dtype(op, value.dtype(), cache.dtype())?;
    let (v, c) = (value.sizes(), cache.sizes());
    if v[0] != c[0] || v[2] != c[2] || v[3] != c[3] {
        return Err(Error::invalid_argument(format!(
            "{op}: value {v:?} does not match cache {c:?} in batch, heads or head_dim"
        )));
    }
    if let Some(start) = start
        && (start >= c[1] || v[1] > c[1] - start)
    {
        return Err(Error::invalid_argument(format!(
            "{op}: start_pos {start} + seq_len {} does not fit the cache's {} positions",
            v[1], c[1]
        )));
    }
    disjoint_from_cache(op, "value", value, cache)
}

/// Rejects a tensor whose memory overlaps the cache's: the cache is written in place (it
/// is not an `out` argument, so the loader's aliasing check does not cover it) while the
/// tensor is read. A malformed program's memory plan could otherwise make the kernel copy
/// between overlapping slices.
fn disjoint_from_cache(
    op: &str,
    what: &str,
    t: &TensorRef<'_>,
    cache: &TensorRef<'_>,
) -> Result<()> {
    if let (Some(a), Some(b)) = (t.imp().memory_range(), cache.imp().memory_range())
        && a.start < b.end
        && b.start < a.end
    {
        return Err(Error::invalid_program(format!(
            "{op}: the {what}'s memory overlaps the cache it is written into"
        )));
    }
    Ok(())
}

/// Copies `value` into `cache` at sequence position `start` (both checked by
/// [`check_update`]).
pub(crate) fn copy_into_cache(
    value: &TensorRef<'_>,
    cache: &mut TensorRef<'_>,
    start: usize,
) -> Result<()> {
    let es = value.dtype().element_size();
    let (b, s) = (value.sizes()[0], value.sizes()[1]);
    let row = value.sizes()[2] * value.sizes()[3] * es;
    let src = value.bytes()?;
    let dst = cache.bytes_mut()?;
    let cache_batch = cache.sizes()[1] * row;
    for bi in 0..b {
        let d = bi * cache_batch + start * row;
        dst[d..d + s * row].copy_from_slice(&src[bi * s * row..(bi + 1) * s * row]);
    }
    Ok(())
}

/// A decoded `llama::update_cache.out` call.
pub struct UpdateCacheCall<'a> {
    /// `[batch, seq, heads, head_dim]`, the cache's dtype.
    pub value: TensorRef<'a>,
    /// `[batch, positions, heads, head_dim]`, updated in place.
    pub cache: TensorRef<'a>,
    /// Where the rows go (an Int checked here, or a tensor checked where it is read).
    pub start: StartPos<'a>,
}

/// Decodes and checks `llama::update_cache.out`: args [value, cache, start_pos, out,
/// (ret)]. `out` is a placeholder no kernel writes (as in ExecuTorch).
pub fn update_cache_call<'a>(ctx: &mut KernelContext<'a>) -> Result<UpdateCacheCall<'a>> {
    let op = ctx.op_name();
    let value = ctx.tensor(0)?;
    let start = start_pos(ctx, 2)?;
    let host = start
        .value()
        .map(|v| non_negative(op, "start_pos", v))
        .transpose()?;
    let sizes = Shape::from_slice(ctx.tensor(1)?.sizes())?;
    let cache = ctx.resize_out(1, &sizes)?;
    check_update(op, &value, &cache, host)?;
    Ok(UpdateCacheCall {
        value,
        cache,
        start,
    })
}

/// `llama::update_cache.out` on the CPU.
fn update_cache_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = update_cache_call(ctx)?;
    let start = non_negative(op, "start_pos", c.start.read()?)?;
    check_update(op, &c.value, &c.cache, Some(start))?;
    copy_into_cache(&c.value, &mut c.cache, start)
}

/// A decoded `llama::update_cache_with_indices.out` call.
pub struct UpdateCacheIndicesCall<'a> {
    /// `[batch, seq, heads, head_dim]`, the cache's dtype.
    pub value: TensorRef<'a>,
    /// `[batch, positions, heads, head_dim]`, updated in place.
    pub cache: TensorRef<'a>,
    /// int64 `[batch, seq]`: the cache row of each value row (checked where read).
    pub indices: TensorRef<'a>,
}

/// Decodes and checks `llama::update_cache_with_indices.out`: args [value, cache,
/// start_pos, indices, out, (ret)]; `start_pos` is unused (as in ExecuTorch).
pub fn update_cache_with_indices_call<'a>(
    ctx: &mut KernelContext<'a>,
) -> Result<UpdateCacheIndicesCall<'a>> {
    let op = ctx.op_name();
    let value = ctx.tensor(0)?;
    let indices = ctx.tensor(3)?;
    let sizes = Shape::from_slice(ctx.tensor(1)?.sizes())?;
    let cache = ctx.resize_out(1, &sizes)?;
    check_update(op, &value, &cache, None)?;
    if indices.dtype() != ScalarType::Long
        || indices.dim() != 2
        || indices.sizes() != &value.sizes()[..2]
    {
        return Err(Error::invalid_argument(format!(
            "{op}: indices must be int64 [batch, seq] = {:?}, got {} {:?}",
            &value.sizes()[..2],
            indices.dtype(),
            indices.sizes()
        )));
    }
    require_contiguous(op, "indices", &indices)?;
    disjoint_from_cache(op, "indices", &indices, &cache)?;
    Ok(UpdateCacheIndicesCall {
        value,
        cache,
        indices,
    })
}

/// `llama::update_cache_with_indices.out` on the CPU.
fn update_cache_with_indices_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = update_cache_with_indices_call(ctx)?;
    let idx = c.indices.data::<i64>()?;
    let es = c.value.dtype().element_size();
    let (b, s) = (c.value.sizes()[0], c.value.sizes()[1]);
    let max = c.cache.sizes()[1];
    let row = c.value.sizes()[2] * c.value.sizes()[3] * es;
    if let Some(&bad) = idx.iter().find(|&&p| p < 0 || p as usize >= max) {
        return Err(Error::invalid_argument(format!(
            "{op}: index {bad} is out of bounds for a cache of {max} positions"
        )));
    }
    let src = c.value.bytes()?;
    let dst = c.cache.bytes_mut()?;
    for bi in 0..b {
        for si in 0..s {
            let p = idx[bi * s + si] as usize;
            let d = (bi * max + p) * row;
            let o = (bi * s + si) * row;
            dst[d..d + row].copy_from_slice(&src[o..o + row]);
        }
    }
    Ok(())
}

/// The shapes and options of one attention call, checked; the start position apart (it
/// may be a tensor on a device).
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Batch items.
    pub batch: usize,
    /// Query rows per batch item (`S`).
    pub seq: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads (`heads` is a multiple).
    pub kv_heads: usize,
    /// Head dimension.
    pub dim: usize,
    /// Positions in the caches (`L`).
    pub max_seq: usize,
    /// An additive `[S, L]` mask is given: every row attends to the whole cache.
    pub masked: bool,
    /// Query row `r` attends to keys `0..=start + r`.
    pub causal: bool,
    /// The score scale (`1/sqrt(dim)` unless given).
    pub scale: f64,
}

impl AttnShape {
    /// The call at position `start`, checked against the cache.
    pub fn at(&self, op: &str, start: i64) -> Result<Attn> {
        let start = non_negative(op, "start_pos", start)?;
        let (seq, max_seq) = (self.seq, self.max_seq);
        if start >= max_seq || seq > max_seq - start {
            return Err(Error::invalid_argument(format!(
                "{op}: start_pos {start} + seq_len {seq} does not fit the cache's {max_seq} positions"
            )));
        }
        let kv_len = if self.masked { max_seq } else { start + seq };
        Ok(Attn {
            batch: self.batch,
            seq,
            heads: self.heads,
            kv_heads: self.kv_heads,
            dim: self.dim,
            max_seq,
            kv_len,
            start,
            causal: self.causal,
            scale: self.scale,
        })
    }
}

/// What one attention call reads: shapes, options and the start position, checked.
pub struct Attn {
    batch: usize,
    seq: usize,
    heads: usize,
    kv_heads: usize,
    dim: usize,
    /// Positions in the caches.
    max_seq: usize,
    /// Keys attended: `start_pos + seq`, or the whole cache with a mask.
    kv_len: usize,
    start: usize,
    causal: bool,
    scale: f64,
}

impl Attn {
    /// Query row `idx` (over batch, position, head) as `(batch, position, head)`, and how
    /// many cache rows it attends to.
    fn row(&self, idx: usize) -> (usize, usize, usize, usize) {
        let (b, s, h) = (
            idx / (self.seq * self.heads),
            (idx / self.heads) % self.seq,
            idx % self.heads,
        );
        let n_keys = if self.causal {
            (self.start + s + 1).min(self.kv_len)
        } else {
            self.kv_len
        };
        (b, s, h, n_keys)
    }
}

/// Checks a custom_sdpa call: `q` against the caches, the mask and the options.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_attn(
    op: &str,
    q: &TensorRef<'_>,
    k: &TensorRef<'_>,
    v: &TensorRef<'_>,
    mask: &Option<TensorRef<'_>>,
    start: i64,
    causal: bool,
    scale: Option<f64>,
) -> Result<Attn> {
    check_attn_shape(op, q, k, v, mask, q.dtype(), causal, scale)?.at(op, start)
}

/// Checks the shapes and options of an attention call: `q` against the caches, the mask
/// (of `mask_dtype`: the query's, or f32 for int8 queries) and the options.
#[allow(clippy::too_many_arguments)]
pub fn check_attn_shape(
    op: &str,
    q: &TensorRef<'_>,
    k: &TensorRef<'_>,
    v: &TensorRef<'_>,
    mask: &Option<TensorRef<'_>>,
    mask_dtype: ScalarType,
    causal: bool,
    scale: Option<f64>,
) -> Result<AttnShape> {
    require_4d(op, "query", q)?;
    require_4d(op, "key cache", k)?;
    require_4d(op, "value cache", v)?;
    same_dtype(op, q.dtype(), k.dtype())?;
    same_dtype(op, q.dtype(), v.dtype())?;
    let [batch, seq, heads, dim] = [q.sizes()[0], q.sizes()[1], q.sizes()[2], q.sizes()[3]];
    let (ks, vs) = (k.sizes(), v.sizes());
    if ks != vs || ks[0] != batch || ks[3] != dim {
        return Err(Error::invalid_argument(format!(
            "{op}: caches {ks:?} and {vs:?} do not match query {:?}",
            q.sizes()
        )));
    }
    let (max_seq, kv_heads) = (ks[1], ks[2]);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(Error::invalid_argument(format!(
            "{op}: {heads} query heads are not a multiple of {kv_heads} KV heads"
        )));
    }
    if let Some(m) = mask {
        if causal {
            return Err(Error::invalid_argument(format!(
                "{op}: attn_mask and is_causal cannot be set together"
            )));
        }
        same_dtype(op, mask_dtype, m.dtype())?;
        require_contiguous(op, "attn_mask", m)?;
        if m.sizes() != [seq, max_seq] {
            return Err(Error::invalid_argument(format!(
                "{op}: attn_mask must be [seq_len, cache positions] = [{seq}, {max_seq}], got {:?}",
                m.sizes()
            )));
        }
    }
    Ok(AttnShape {
        batch,
        seq,
        heads,
        kv_heads,
        dim,
        max_seq,
        masked: mask.is_some(),
        causal,
        scale: scale.unwrap_or(1.0 / (dim as f64).sqrt()),
    })
}

/// `<a, b>` in the compute type, over eight partial sums (so that it vectorizes).
#[inline(always)]
fn dot<T: FElem>(a: &[T], b: &[T]) -> T::F {
    const L: usize = 8;
    let mut acc = [T::F::ZERO; L];
    let (ac, at) = a.split_at(a.len() / L * L);
    let (bc, bt) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(L).zip(bc.chunks_exact(L)) {
        for l in 0..L {
            acc[l] += x[l].to_f() * y[l].to_f();
        }
    }
    for (x, y) in at.iter().zip(bt) {
        acc[0] += x.to_f() * y.to_f();
    }
    let a4 = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (a4[0] + a4[2]) + (a4[1] + a4[3])
}

/// Attention of `q` over the caches into `out` (resized to `q`'s shape).
pub(crate) fn attend(
    op: &str,
    a: &Attn,
    q: &TensorRef<'_>,
    k: &TensorRef<'_>,
    v: &TensorRef<'_>,
    mask: &Option<TensorRef<'_>>,
    out: &mut TensorRef<'_>,
) -> Result<()> {
    same_dtype(op, q.dtype(), out.dtype())?;
    require_contiguous(op, "out", out)?;
    let rows = a.batch * a.seq * a.heads;
    let (d, hk) = (a.dim, a.kv_heads);
    let group = a.heads / hk;
    dispatch_float!(q.dtype(), op, "query", |T| {
        type F = <T as FElem>::F;
        let (qs, ks, vs) = (q.data::<T>()?, k.data::<T>()?, v.data::<T>()?);
        let ms = match mask {
            Some(m) => Some(m.data::<T>()?),
            None => None,
        };
        let o = SharedMut::new(out.data_mut::<T>()?);
        let scale = <F as Compute>::from_f64(a.scale);
        let tasks = threads::tasks_for(rows * a.kv_len * d * 2, ATTN_TASK).clamp(1, rows.max(1));
        // One scratch buffer taken here, a slice per task: scores, then the weighted sum.
        let per_task = a.kv_len + d;
        let mut buf = scratch::take(tasks * per_task, F::ZERO);
        let bufs = SharedMut::new(&mut buf[..]);
        threads::run(tasks, &|t| {
            // SAFETY: task `t` alone uses slice `t` of the scratch buffer.
            let (scores, acc) =
                unsafe { bufs.slice(t * per_task, per_task) }.split_at_mut(a.kv_len);
            for idx in threads::part(rows, tasks, t) {
                let (b, s, h, n_keys) = a.row(idx);
                let qrow = &qs[idx * d..(idx + 1) * d];
                let kv_base = |j: usize| ((b * a.max_seq + j) * hk + h / group) * d;
                let mut mx = F::NEG_INFINITY;
                for j in 0..n_keys {
                    let krow = &ks[kv_base(j)..kv_base(j) + d];
                    let mut sc = dot(qrow, krow) * scale;
                    if let Some(ms) = ms {
                        sc += ms[s * a.max_seq + j].to_f();
                    }
                    scores[j] = sc;
                    if sc > mx || sc.is_nan() {
                        mx = sc;
                    }
                }
                let mut sum = F::ZERO;
                for sc in scores[..n_keys].iter_mut() {
                    *sc = sc.sub(mx).exp();
                    sum += *sc;
                }
                acc.fill(F::ZERO);
                for j in 0..n_keys {
                    let p = scores[j];
                    let vrow = &vs[kv_base(j)..kv_base(j) + d];
                    for (x, y) in acc.iter_mut().zip(vrow) {
                        *x += p * y.to_f();
                    }
                }
                let inv = F::ONE.div(sum);
                // SAFETY: output row `idx` is this task's alone.
                let orow = unsafe { o.slice(idx * d, d) };
                for (y, &x) in orow.iter_mut().zip(acc.iter()) {
                    *y = T::from_f(x * inv);
                }
            }
        });
        Ok(())
    })
}

/// A decoded `llama::custom_sdpa.out` call (and the attention of `sdpa_with_kv_cache`).
pub struct SdpaCall<'a> {
    /// `[batch, seq, heads, head_dim]`.
    pub q: TensorRef<'a>,
    /// `[batch, positions, kv_heads, head_dim]`, the query's dtype.
    pub k_cache: TensorRef<'a>,
    /// Shaped like `k_cache`.
    pub v_cache: TensorRef<'a>,
    /// Additive `[seq, positions]` mask of the query's dtype, if any.
    pub mask: Option<TensorRef<'a>>,
    /// The position of query row 0 (an Int checked here, or a tensor checked where read).
    pub start: StartPos<'a>,
    /// Shapes and options, checked.
    pub shape: AttnShape,
    /// Shaped like the query.
    pub out: TensorRef<'a>,
}

/// Checks an Int start position against the shapes now (a tensor's is checked where it is
/// read).
fn check_host_start(op: &str, shape: &AttnShape, start: &StartPos<'_>) -> Result<()> {
    match start.value() {
        Some(v) => shape.at(op, v).map(|_| ()),
        None => Ok(()),
    }
}

/// The attention part of both sdpa decoders: query `q_i`, caches `k_i`/`v_i` (already
/// resized), start `s_i`, then `attn_mask?, dropout_p, is_causal, scale?` from `mask_i`,
/// and `out` at `out_i`.
fn sdpa_args<'a>(
    ctx: &mut KernelContext<'a>,
    k_cache: TensorRef<'a>,
    v_cache: TensorRef<'a>,
    s_i: usize,
    mask_i: usize,
    out_i: usize,
) -> Result<SdpaCall<'a>> {
    let op = ctx.op_name();
    let q = ctx.tensor(0)?;
    let start = start_pos(ctx, s_i)?;
    let mask = ctx.opt_tensor(mask_i)?;
    let _dropout = ctx.double(mask_i + 1)?;
    let causal = ctx.bool(mask_i + 2)?;
    let scale = ctx.opt_double(mask_i + 3)?;
    let shape = check_attn_shape(op, &q, &k_cache, &v_cache, &mask, q.dtype(), causal, scale)?;
    check_host_start(op, &shape, &start)?;
    let out = ctx.resize_out(out_i, q.sizes())?;
    same_dtype(op, q.dtype(), out.dtype())?;
    require_contiguous(op, "out", &out)?;
    Ok(SdpaCall {
        q,
        k_cache,
        v_cache,
        mask,
        start,
        shape,
        out,
    })
}

/// Decodes and checks `llama::custom_sdpa.out`: args [query, key_cache, value_cache,
/// start_pos, attn_mask?, dropout_p, is_causal, scale?, out, (ret)].
pub fn custom_sdpa_call<'a>(ctx: &mut KernelContext<'a>) -> Result<SdpaCall<'a>> {
    let k = ctx.tensor(1)?;
    let v = ctx.tensor(2)?;
    sdpa_args(ctx, k, v, 3, 4, 8)
}

/// `llama::custom_sdpa.out` on the CPU.
fn custom_sdpa_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = custom_sdpa_call(ctx)?;
    let a = c.shape.at(op, c.start.read()?)?;
    attend(op, &a, &c.q, &c.k_cache, &c.v_cache, &c.mask, &mut c.out)
}

/// A decoded `llama::sdpa_with_kv_cache.out` call: the cache update, then `sdpa`.
pub struct SdpaWithKvCacheCall<'a> {
    /// New keys `[batch, seq, kv_heads, head_dim]`, written into `sdpa.k_cache`.
    pub key: TensorRef<'a>,
    /// New values, written into `sdpa.v_cache`.
    pub value: TensorRef<'a>,
    /// The attention over the updated caches (which it holds, resized in place).
    pub sdpa: SdpaCall<'a>,
}

/// Cache argument `i` (resized in place), checked against `rows`, the new rows of
/// `seq` positions written into it.
fn new_rows_cache<'a>(
    ctx: &mut KernelContext<'a>,
    i: usize,
    rows: &TensorRef<'_>,
    seq: usize,
) -> Result<TensorRef<'a>> {
    let op = ctx.op_name();
    let sizes = Shape::from_slice(ctx.tensor(i)?.sizes())?;
    let cache = ctx.resize_out(i, &sizes)?;
    check_update(op, rows, &cache, None)?;
    if rows.sizes()[1] != seq {
        return Err(Error::invalid_argument(format!(
            "{op}: seq_len {seq} differs from the key/value's {:?}",
            rows.sizes()
        )));
    }
    Ok(cache)
}

/// Decodes and checks `llama::sdpa_with_kv_cache.out`: args [query, key, value, key_cache,
/// value_cache, start_pos, seq_len, attn_mask?, dropout_p, is_causal, scale?, out, (ret)].
pub fn sdpa_with_kv_cache_call<'a>(ctx: &mut KernelContext<'a>) -> Result<SdpaWithKvCacheCall<'a>> {
    let op = ctx.op_name();
    let q_seq = ctx.tensor(0)?.sizes().get(1).copied().unwrap_or(0);
    let key = ctx.tensor(1)?;
    let value = ctx.tensor(2)?;
    let seq_len = ctx.int(6)?;
    if non_negative(op, "seq_len", seq_len)? != q_seq {
        return Err(Error::invalid_argument(format!(
            "{op}: seq_len {seq_len} differs from the query's {q_seq}"
        )));
    }
    let k_cache = new_rows_cache(ctx, 3, &key, q_seq)?;
    let v_cache = new_rows_cache(ctx, 4, &value, q_seq)?;
    let sdpa = sdpa_args(ctx, k_cache, v_cache, 5, 7, 11)?;
    Ok(SdpaWithKvCacheCall { key, value, sdpa })
}

/// `llama::sdpa_with_kv_cache.out` on the CPU.
fn sdpa_with_kv_cache_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = sdpa_with_kv_cache_call(ctx)?;
    let s = &mut c.sdpa;
    let a = s.shape.at(op, s.start.read()?)?;
    copy_into_cache(&c.key, &mut s.k_cache, a.start)?;
    copy_into_cache(&c.value, &mut s.v_cache, a.start)?;
    attend(op, &a, &s.q, &s.k_cache, &s.v_cache, &s.mask, &mut s.out)
}

/// The int8 operands of `custom_quantized_sdpa` and their per-row parameters: row `r`
/// (a `[head_dim]` vector of a `[batch, seq, heads, head_dim]` tensor, in that order)
/// dequantizes to `(x - zero_points[r]) * scales[r]`.
pub struct QuantizedOperand<'a> {
    /// `[batch, seq, heads, head_dim]`, int8.
    pub data: TensorRef<'a>,
    /// `[batch, seq, heads, 1]`, int8.
    pub zero_points: TensorRef<'a>,
    /// `[batch, seq, heads, 1]`, f32.
    pub scales: TensorRef<'a>,
}

/// A decoded `llama::custom_quantized_sdpa.out` call.
pub struct QuantizedSdpaCall<'a> {
    /// The query.
    pub q: QuantizedOperand<'a>,
    /// The key cache.
    pub k: QuantizedOperand<'a>,
    /// The value cache.
    pub v: QuantizedOperand<'a>,
    /// Optional additive f32 mask `[seq, max_seq]`.
    pub mask: Option<TensorRef<'a>>,
    /// The position of query row 0 (an Int checked here, or a tensor checked where read).
    pub start: StartPos<'a>,
    /// Shapes and options, checked.
    pub shape: AttnShape,
    /// `out`, f32, shaped like the query.
    pub out: TensorRef<'a>,
}

/// Checks one int8 operand of `custom_quantized_sdpa` and its parameters.
fn quantized_operand<'a>(
    ctx: &KernelContext<'a>,
    what: &str,
    data: usize,
    zp: usize,
    scale: usize,
) -> Result<QuantizedOperand<'a>> {
    let op = ctx.op_name();
    let data = ctx.tensor(data)?;
    let (Some(zero_points), Some(scales)) = (ctx.opt_tensor(zp)?, ctx.opt_tensor(scale)?) else {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} needs its zero points and scales"
        )));
    };
    if data.dtype() != ScalarType::Char
        || zero_points.dtype() != ScalarType::Char
        || scales.dtype() != ScalarType::Float
    {
        return Err(Error::invalid_argument(format!(
            "{op}: {what} must be int8 with int8 zero points and f32 scales, got {}, {} and {}",
            data.dtype(),
            zero_points.dtype(),
            scales.dtype()
        )));
    }
    require_4d(op, what, &data)?;
    let rows = &data.sizes()[..3];
    for (t, name) in [(&zero_points, "zero points"), (&scales, "scales")] {
        if t.dim() != 4 || &t.sizes()[..3] != rows || t.sizes()[3] != 1 {
            return Err(Error::invalid_argument(format!(
                "{op}: {what} {name} must be {:?} + [1], got {:?}",
                rows,
                t.sizes()
            )));
        }
        require_contiguous(op, name, t)?;
    }
    Ok(QuantizedOperand {
        data,
        zero_points,
        scales,
    })
}

/// Decodes and checks `llama::custom_quantized_sdpa.out`: args [query, key, value,
/// start_pos, attn_mask?, dropout_p, is_causal, scale?, q_zero_points?, q_scales?,
/// k_zero_points?, k_scales?, v_zero_points?, v_scales?, is_seq_at_dim_2, out, (ret)].
pub fn quantized_sdpa_call<'a>(ctx: &mut KernelContext<'a>) -> Result<QuantizedSdpaCall<'a>> {
    let op = ctx.op_name();
    let q = quantized_operand(ctx, "query", 0, 8, 9)?;
    let k = quantized_operand(ctx, "key cache", 1, 10, 11)?;
    let v = quantized_operand(ctx, "value cache", 2, 12, 13)?;
    let start = start_pos(ctx, 3)?;
    let mask = ctx.opt_tensor(4)?;
    let _dropout = ctx.double(5)?;
    let causal = ctx.bool(6)?;
    let scale = ctx.opt_double(7)?;
    if ctx.bool(14)? {
        return Err(Error::not_supported(format!(
            "{op}: is_seq_at_dim_2 ([batch, heads, seq, head_dim] layouts) is not implemented"
        )));
    }
    let shape = check_attn_shape(
        op,
        &q.data,
        &k.data,
        &v.data,
        &mask,
        ScalarType::Float,
        causal,
        scale,
    )?;
    check_host_start(op, &shape, &start)?;
    let out = ctx.resize_out(15, q.data.sizes())?;
    if out.dtype() != ScalarType::Float {
        return Err(bad_dtype(op, "out", out.dtype()));
    }
    require_contiguous(op, "out", &out)?;
    Ok(QuantizedSdpaCall {
        q,
        k,
        v,
        mask,
        start,
        shape,
        out,
    })
}

/// `sum((a - za) * (b - zb))`, exact in i32 (|terms| <= 255^2, rows < 2^15).
#[inline(always)]
fn dot_i8(a: &[i8], za: i32, b: &[i8], zb: i32) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (i32::from(x) - za) * (i32::from(y) - zb))
        .sum()
}

/// Attention over dequantized operands: scores `dot_i8 * q_scale * k_scale * scale`,
/// softmax in f32, then the weighted sum of `(v - v_zp) * v_scale`.
fn attend_quantized(op: &str, c: &mut QuantizedSdpaCall<'_>) -> Result<()> {
    let a = &c.shape.at(op, c.start.read()?)?;
    let rows = a.batch * a.seq * a.heads;
    let (d, hk) = (a.dim, a.kv_heads);
    let group = a.heads / hk;
    if d >= 1 << 15 {
        return Err(Error::not_supported(format!(
            "{op}: head_dim {d} overflows the int32 dot product"
        )));
    }
    let (qs, ks, vs) = (
        c.q.data.data::<i8>()?,
        c.k.data.data::<i8>()?,
        c.v.data.data::<i8>()?,
    );
    let (qz, kz, vz) = (
        c.q.zero_points.data::<i8>()?,
        c.k.zero_points.data::<i8>()?,
        c.v.zero_points.data::<i8>()?,
    );
    let (qsc, ksc, vsc) = (
        c.q.scales.data::<f32>()?,
        c.k.scales.data::<f32>()?,
        c.v.scales.data::<f32>()?,
    );
    let ms = match &c.mask {
        Some(m) => Some(m.data::<f32>()?),
        None => None,
    };
    let o = SharedMut::new(c.out.data_mut::<f32>()?);
    let scale = a.scale as f32;
    let tasks = threads::tasks_for(rows * a.kv_len * d * 2, ATTN_TASK).clamp(1, rows.max(1));
    let per_task = a.kv_len + d;
    let mut buf = scratch::take(tasks * per_task, 0f32);
    let bufs = SharedMut::new(&mut buf[..]);
    threads::run(tasks, &|t| {
        // SAFETY: task `t` alone uses slice `t` of the scratch buffer.
        let (scores, acc) = unsafe { bufs.slice(t * per_task, per_task) }.split_at_mut(a.kv_len);
        for idx in threads::part(rows, tasks, t) {
            let (b, s, h, n_keys) = a.row(idx);
            let qrow = &qs[idx * d..(idx + 1) * d];
            let (qzp, qscale) = (i32::from(qz[idx]), qsc[idx]);
            // Row index of key/value `j` in the caches (and in their parameters).
            let kv_row = |j: usize| (b * a.max_seq + j) * hk + h / group;
            let mut mx = f32::NEG_INFINITY;
            for j in 0..n_keys {
                let r = kv_row(j);
                let dot = dot_i8(qrow, qzp, &ks[r * d..(r + 1) * d], i32::from(kz[r]));
                let mut sc = dot as f32 * qscale * ksc[r] * scale;
                if let Some(ms) = ms {
                    sc += ms[s * a.max_seq + j];
                }
                scores[j] = sc;
                if sc > mx || sc.is_nan() {
                    mx = sc;
                }
            }
            let mut sum = 0f32;
            for sc in scores[..n_keys].iter_mut() {
                *sc = (*sc - mx).exp();
                sum += *sc;
            }
            acc.fill(0.0);
            for j in 0..n_keys {
                let r = kv_row(j);
                let (p, z) = (scores[j] * vsc[r], i32::from(vz[r]));
                for (x, &y) in acc.iter_mut().zip(&vs[r * d..(r + 1) * d]) {
                    *x += p * (i32::from(y) - z) as f32;
                }
            }
            let inv = 1.0 / sum;
            // SAFETY: output row `idx` is this task's alone.
            let orow = unsafe { o.slice(idx * d, d) };
            for (y, &x) in orow.iter_mut().zip(acc.iter()) {
                *y = x * inv;
            }
        }
    });
    Ok(())
}

/// `llama::custom_quantized_sdpa.out` on the CPU.
fn custom_quantized_sdpa_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let mut c = quantized_sdpa_call(ctx)?;
    attend_quantized(op, &mut c)
}

/// Registers the `llama::` custom-op kernels.
pub fn register(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("llama::update_cache.out", update_cache_out)?;
    reg.register(
        "llama::update_cache_with_indices.out",
        update_cache_with_indices_out,
    )?;
    reg.register("llama::custom_sdpa.out", custom_sdpa_out)?;
    reg.register("llama::sdpa_with_kv_cache.out", sdpa_with_kv_cache_out)?;
    reg.register(
        "llama::custom_quantized_sdpa.out",
        custom_quantized_sdpa_out,
    )?;
    crate::llama_gdr::register(reg)
}
