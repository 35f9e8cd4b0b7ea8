//! CUDA kernels for `ExecutorBackend` delegates on `cuda:N`.
//!
//! One module per op family, each with its CUDA source in `src/cuda/` (compiled per device
//! with NVRTC on first use, PTX cached on disk): elementwise maps, shape kernels, reductions,
//! normalisations, indexing, convolution and pooling, sorting, etch's own `etch::` ops
//! (Gated DeltaNet, mixture of experts, attention over a KV cache, sampling), and the ops
//! of ExecuTorch's LLM programs (`llama::` KV-cache attention, `quantized_decomposed::`
//! per-token quantization and quantized embeddings); matrix products on cuBLAS.
//! Every kernel runs on the stream of the `CudaAllocator` that owns the memory, so it is
//! ordered with the copies around it. Argument decoding and output shapes are shared with
//! the CPU kernels (`etch_kernels`) wherever the CPU code is written over data primitives.
#![warn(missing_docs)]

mod context;
mod conv;
mod elementwise;
pub(crate) mod etch_ops;
mod gemm;
mod graph;
mod index;
mod llama;
mod norm;
mod pool;
mod quantized;
mod reduce;
mod shape;
mod sort;
mod util;

pub use context::{
    CudaKernelContext, check_device_errors, compile, compile_fresh, nvrtc_available, source,
};
pub use graph::{CudaHooks, EventTimer};
pub use shape::CudaMover;

use etch_core::{Error, KernelFn, KernelRegistry, Result, ScalarType};

/// The op families, one CUDA source each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Elementwise maps, casts, fills (`cuda/elementwise.cu`).
    Elementwise,
    /// Reductions (`cuda/reduce.cu`).
    Reduce,
    /// Softmax and normalisations (`cuda/norm.cu`).
    Norm,
    /// Indexing: embedding, index_select, gather, scatter, index, index_put
    /// (`cuda/index.cu`).
    Index,
    /// Row kernels: cumsum, sort, topk (`cuda/sort.cu`).
    Sort,
    /// Integer matrix products (`cuda/linalg.cu`).
    Linalg,
    /// Convolution helpers, pooling and upsampling (`cuda/conv.cu`).
    Conv,
    /// `etch::gated_delta_net` (`cuda/gdn.cu`, then its chunked prefill kernels,
    /// `cuda/gdn_chunk.cu`).
    Gdn,
    /// `etch::moe` (`cuda/moe.cu`, then its tensor-core kernels, `cuda/moe_tc.cu`).
    Moe,
    /// `etch::attention` (`cuda/attention.cu`).
    Attention,
    /// `etch::sample` (`cuda/sample.cu`).
    Sample,
    /// `etch::rope` (`cuda/rope.cu`).
    Rope,
    /// ExecuTorch's `llama::` KV-cache and attention ops (`cuda/llama.cu`).
    Llama,
    /// `quantized_decomposed::` per-token quantization and quantized embeddings
    /// (`cuda/quantized.cu`).
    Quantized,
}

impl Family {
    /// Every family.
    pub const ALL: &'static [Family] = &[
        Family::Elementwise,
        Family::Reduce,
        Family::Norm,
        Family::Index,
        Family::Sort,
        Family::Linalg,
        Family::Conv,
        Family::Gdn,
        Family::Moe,
        Family::Attention,
        Family::Sample,
        Family::Rope,
        Family::Llama,
        Family::Quantized,
    ];

    /// The family's name (its `.cu` file stem).
    pub fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::Reduce => "reduce",
            Family::Norm => "norm",
            Family::Index => "index",
            Family::Sort => "sort",
            Family::Linalg => "linalg",
            Family::Conv => "conv",
            Family::Gdn => "gdn",
            Family::Moe => "moe",
            Family::Attention => "attention",
            Family::Sample => "sample",
            Family::Rope => "rope",
            Family::Llama => "llama",
            Family::Quantized => "quantized",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("cuda/elementwise.cu"),
            Family::Reduce => include_str!("cuda/reduce.cu"),
            Family::Norm => concat!(include_str!("cuda/io.cuh"), include_str!("cuda/norm.cu")),
            Family::Index => include_str!("cuda/index.cu"),
            Family::Sort => include_str!("cuda/sort.cu"),
            Family::Linalg => concat!(include_str!("cuda/io.cuh"), include_str!("cuda/linalg.cu")),
            Family::Conv => include_str!("cuda/conv.cu"),
            // The etch:: ops share their IO helpers (io.cuh).
            // The chunked prefill kernels (gdn_chunk.cu) share gdn.cu's arguments and conv.
            Family::Gdn => concat!(
                include_str!("cuda/io.cuh"),
                include_str!("cuda/gdn.cu"),
                include_str!("cuda/gdn_chunk.cu")
            ),
            // The tensor-core kernels (moe_tc.cu) share moe.cu's arguments and pair lists.
            Family::Moe => concat!(
                include_str!("cuda/io.cuh"),
                include_str!("cuda/moe.cu"),
                include_str!("cuda/moe_tc.cu")
            ),
            // The attention loop and merges (attn.cuh) are shared with llama::.
            Family::Attention => concat!(
                include_str!("cuda/io.cuh"),
                include_str!("cuda/attn.cuh"),
                include_str!("cuda/attention.cu")
            ),
            Family::Llama => concat!(
                include_str!("cuda/io.cuh"),
                include_str!("cuda/attn.cuh"),
                include_str!("cuda/llama.cu")
            ),
            Family::Quantized => concat!(
                include_str!("cuda/io.cuh"),
                include_str!("cuda/quantized.cu")
            ),
            Family::Sample => concat!(include_str!("cuda/io.cuh"), include_str!("cuda/sample.cu")),
            Family::Rope => concat!(include_str!("cuda/io.cuh"), include_str!("cuda/rope.cu")),
        }
    }
}

pub(crate) fn cuda_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("{what}: {e}"))
}

use ScalarType::{
    BFloat16 as BF16, Bool, Byte, Char, Double as F64, Float as F32, Half as F16, Int, Long, Short,
};

/// Every dtype the CUDA kernels load and store.
const ALL: &[ScalarType] = &[F32, F16, BF16, F64, Long, Int, Short, Char, Byte, Bool];
/// Numbers (no bool).
const NUMERIC: &[ScalarType] = &[F32, F16, BF16, F64, Long, Int, Short, Char, Byte];
/// Floating-point dtypes (and integer index tensors where an op takes them).
const FLOATS: &[ScalarType] = &[F32, F16, BF16, F64];
/// The `etch::` ops' IO dtypes.
const ETCH_IO: &[ScalarType] = &[F32, F16, BF16];
/// Max pooling: floating-point values and int64 indices.
const MAXPOOL: &[ScalarType] = &[F32, F16, BF16, F64, Long];
/// The `etch::` ops: f32/f16/bf16 IO, float32 states, int64 positions and tokens.
const ETCH: &[ScalarType] = &[F32, F16, BF16, Long];
/// `llama::gated_delta_rule`: float32 only, as ExecuTorch's kernel.
const GDR: &[ScalarType] = &[F32];
/// `llama::custom_quantized_sdpa`: int8 operands and zero points, f32 scales, mask and
/// output, an int64 position.
const QSDPA: &[ScalarType] = &[Char, F32, Long];
/// `choose_qparams_per_token_asymmetric` / `quantize_per_token`: f32 input, f64 scales,
/// int64 zero points, integer outputs.
const PER_TOKEN: &[ScalarType] = &[F32, F64, Long, Byte, Char, Short, Int];
/// Quantized embeddings: int8 / uint8 weights, f32/f16/bf16 parameters and output, int64
/// indices.
const QEMB: &[ScalarType] = &[Byte, Char, F32, F16, BF16, Long];

/// The kernel table: name, function, dtypes its tensors may have.
fn table() -> Vec<(&'static str, KernelFn, &'static [ScalarType])> {
    use elementwise as e;
    let mut t: Vec<(&'static str, KernelFn, &'static [ScalarType])> = vec![
        ("aten::add.out", e::add_out, ALL),
        ("aten::sub.out", e::sub_out, ALL),
        ("aten::mul.out", e::mul_out, ALL),
        ("aten::div.out", e::div_out, ALL),
        ("aten::div.out_mode", e::div_out_mode, ALL),
        ("aten::add.Scalar_out", e::add_scalar_out, ALL),
        ("aten::sub.Scalar_out", e::sub_scalar_out, ALL),
        ("aten::mul.Scalar_out", e::mul_scalar_out, ALL),
        ("aten::div.Scalar_out", e::div_scalar_out, ALL),
        ("aten::div.Scalar_mode_out", e::div_scalar_mode_out, ALL),
        ("aten::rsub.Scalar_out", e::rsub_scalar_out, ALL),
        ("aten::remainder.Tensor_out", e::remainder_tensor_out, ALL),
        ("aten::remainder.Scalar_out", e::remainder_scalar_out, ALL),
        ("aten::fmod.Tensor_out", e::fmod_tensor_out, ALL),
        ("aten::fmod.Scalar_out", e::fmod_scalar_out, ALL),
        ("aten::floor_divide.out", e::floor_divide_out, ALL),
        ("aten::maximum.out", e::maximum_out, ALL),
        ("aten::minimum.out", e::minimum_out, ALL),
        ("aten::atan2.out", e::atan2_out, ALL),
        ("aten::pow.Tensor_Tensor_out", e::pow_tt_out, ALL),
        ("aten::pow.Tensor_Scalar_out", e::pow_ts_out, ALL),
        ("aten::pow.Scalar_out", e::pow_st_out, ALL),
        ("aten::eq.Tensor_out", e::eq_t, ALL),
        ("aten::ne.Tensor_out", e::ne_t, ALL),
        ("aten::lt.Tensor_out", e::lt_t, ALL),
        ("aten::le.Tensor_out", e::le_t, ALL),
        ("aten::gt.Tensor_out", e::gt_t, ALL),
        ("aten::ge.Tensor_out", e::ge_t, ALL),
        ("aten::eq.Scalar_out", e::eq_s, ALL),
        ("aten::ne.Scalar_out", e::ne_s, ALL),
        ("aten::lt.Scalar_out", e::lt_s, ALL),
        ("aten::le.Scalar_out", e::le_s, ALL),
        ("aten::gt.Scalar_out", e::gt_s, ALL),
        ("aten::ge.Scalar_out", e::ge_s, ALL),
        ("aten::logical_and.out", e::logical_and_out, ALL),
        ("aten::logical_or.out", e::logical_or_out, ALL),
        ("aten::logical_xor.out", e::logical_xor_out, ALL),
        ("aten::logical_not.out", e::logical_not_out, ALL),
        ("aten::bitwise_and.Tensor_out", e::bitwise_and_t, ALL),
        ("aten::bitwise_or.Tensor_out", e::bitwise_or_t, ALL),
        ("aten::bitwise_xor.Tensor_out", e::bitwise_xor_t, ALL),
        ("aten::bitwise_and.Scalar_out", e::bitwise_and_s, ALL),
        ("aten::bitwise_not.out", e::bitwise_not_out, ALL),
        ("aten::where.self_out", e::where_out, ALL),
        ("aten::masked_fill.Scalar_out", e::masked_fill_out, ALL),
        ("aten::abs.out", e::abs_out, ALL),
        ("aten::neg.out", e::neg_out, ALL),
        ("aten::sign.out", e::sign_out, ALL),
        ("aten::relu.out", e::relu_out, ALL),
        ("aten::floor.out", e::floor_out, ALL),
        ("aten::ceil.out", e::ceil_out, ALL),
        ("aten::round.out", e::round_out, ALL),
        ("aten::trunc.out", e::trunc_out, ALL),
        ("aten::isnan.out", e::isnan_out, ALL),
        ("aten::isinf.out", e::isinf_out, ALL),
        ("aten::clamp.out", e::clamp_out, ALL),
        ("aten::hardtanh.out", e::hardtanh_out, ALL),
        ("aten::gelu.out", e::gelu_out, ALL),
        ("aten::elu.out", e::elu_out, ALL),
        ("aten::leaky_relu.out", e::leaky_relu_out, ALL),
        ("aten::sigmoid.out", e::sigmoid_out, ALL),
        ("aten::tanh.out", e::tanh_out, ALL),
        ("aten::exp.out", e::exp_out, ALL),
        ("aten::log.out", e::log_out, ALL),
        ("aten::sqrt.out", e::sqrt_out, ALL),
        ("aten::rsqrt.out", e::rsqrt_out, ALL),
        ("aten::sin.out", e::sin_out, ALL),
        ("aten::cos.out", e::cos_out, ALL),
        ("aten::tan.out", e::tan_out, ALL),
        ("aten::asin.out", e::asin_out, ALL),
        ("aten::acos.out", e::acos_out, ALL),
        ("aten::atan.out", e::atan_out, ALL),
        ("aten::sinh.out", e::sinh_out, ALL),
        ("aten::cosh.out", e::cosh_out, ALL),
        ("aten::asinh.out", e::asinh_out, ALL),
        ("aten::log2.out", e::log2_out, ALL),
        ("aten::log10.out", e::log10_out, ALL),
        ("aten::log1p.out", e::log1p_out, ALL),
        ("aten::expm1.out", e::expm1_out, ALL),
        ("aten::erf.out", e::erf_out, ALL),
        ("aten::reciprocal.out", e::reciprocal_out, ALL),
        ("aten::silu.out", e::silu_out, ALL),
        ("aten::mm.out", gemm::mm_out, NUMERIC),
        ("aten::bmm.out", gemm::bmm_out, NUMERIC),
        ("aten::addmm.out", gemm::addmm_out, NUMERIC),
        ("aten::baddbmm.out", gemm::baddbmm_out, NUMERIC),
        ("aten::linear.out", gemm::linear_out, NUMERIC),
        ("aten::sum.IntList_out", reduce::sum_out, ALL),
        ("aten::mean.out", reduce::mean_out, ALL),
        ("aten::amax.out", reduce::amax_out, ALL),
        ("aten::amin.out", reduce::amin_out, ALL),
        ("aten::max.unary_out", reduce::max_unary_out, ALL),
        ("aten::min.unary_out", reduce::min_unary_out, ALL),
        ("aten::argmax.out", reduce::argmax_out, ALL),
        ("aten::argmin.out", reduce::argmin_out, ALL),
        ("aten::any.out", reduce::any_out, ALL),
        ("aten::any.dims_out", reduce::any_dims_out, ALL),
        ("aten::any.all_out", reduce::any_all_out, ALL),
        ("aten::all.out", reduce::all_out, ALL),
        ("aten::all.all_out", reduce::all_all_out, ALL),
        ("aten::var.correction_out", reduce::var_out, FLOATS),
        ("aten::std.correction_out", reduce::std_out, FLOATS),
        ("aten::prod.int_out", reduce::prod_int_out, ALL),
        ("aten::prod.out", reduce::prod_out, ALL),
        ("aten::max.dim_max", reduce::max_dim, ALL),
        ("aten::min.dim_min", reduce::min_dim, ALL),
        ("aten::_softmax.out", norm::softmax_out, FLOATS),
        ("aten::_log_softmax.out", norm::log_softmax_out, FLOATS),
        ("aten::native_layer_norm.out", norm::layer_norm_out, FLOATS),
        ("etch::rms_norm.out", norm::etch_rms_norm_out, ETCH_IO),
        (
            "etch::add_rms_norm.out",
            norm::etch_add_rms_norm_out,
            ETCH_IO,
        ),
        (
            "etch::rms_norm_gated.out",
            norm::etch_rms_norm_gated_out,
            ETCH_IO,
        ),
        ("aten::embedding.out", index::embedding_out, ALL),
        ("aten::index_select.out", index::index_select_out, ALL),
        ("aten::gather.out", index::gather_out, ALL),
        ("aten::scatter.src_out", index::scatter_src_out, ALL),
        ("aten::index.Tensor_out", index::index_tensor_out, ALL),
        ("aten::index_put.out", index::index_put_out, ALL),
        ("aten::cumsum.out", sort::cumsum_out, ALL),
        ("aten::topk.values", sort::topk_values, ALL),
        ("aten::sort.values", sort::sort_values, ALL),
        ("aten::sort.values_stable", sort::sort_values_stable, ALL),
        (
            "aten::_native_batch_norm_legit_no_training.out",
            norm::batch_norm_no_training_out,
            FLOATS,
        ),
        (
            "aten::_native_batch_norm_legit.no_stats_out",
            norm::batch_norm_no_stats_out,
            FLOATS,
        ),
        ("aten::native_group_norm.out", norm::group_norm_out, FLOATS),
        ("aten::convolution.out", conv::convolution_out, FLOATS),
        (
            "aten::max_pool2d_with_indices.out",
            pool::max_pool2d_with_indices_out,
            MAXPOOL,
        ),
        ("aten::avg_pool2d.out", pool::avg_pool2d_out, FLOATS),
        (
            "aten::_adaptive_avg_pool2d.out",
            pool::adaptive_avg_pool2d_out,
            FLOATS,
        ),
        (
            "aten::upsample_nearest2d.vec_out",
            pool::upsample_nearest2d_out,
            ALL,
        ),
        (
            "aten::upsample_bilinear2d.vec_out",
            pool::upsample_bilinear2d_out,
            FLOATS,
        ),
        (
            "etch::gated_delta_net.out",
            etch_ops::gdn::gated_delta_net_out,
            ETCH,
        ),
        ("etch::moe.out", etch_ops::moe::moe_out, ETCH),
        (
            "etch::attention.out",
            etch_ops::attention::attention_out,
            ETCH,
        ),
        (
            "etch::gated_attention.out",
            etch_ops::attention::gated_attention_out,
            ETCH,
        ),
        ("etch::sample.out", etch_ops::sample::sample_out, ETCH),
        ("etch::rope.out", etch_ops::rope::rope_out, ETCH_IO),
        (
            "etch::qk_norm_rope.out",
            etch_ops::rope::qk_norm_rope_out,
            ETCH_IO,
        ),
        (
            "etch::rope_cos_sin.out",
            etch_ops::rope::rope_cos_sin_out,
            ETCH,
        ),
        (
            "etch::linear_group.out",
            etch_ops::linear_group::linear_group_out,
            ETCH_IO,
        ),
        // update_cache copies rows of any dtype (the quantized recipe's int8 caches, f32
        // scales and int8 zero points too).
        ("llama::update_cache.out", llama::update_cache_out, ALL),
        (
            "llama::update_cache_with_indices.out",
            llama::update_cache_with_indices_out,
            ALL,
        ),
        ("llama::custom_sdpa.out", llama::custom_sdpa_out, ETCH),
        (
            "llama::gated_delta_rule.out",
            llama::gated_delta_rule_out,
            GDR,
        ),
        (
            "llama::channelwise_gated_delta_rule.out",
            llama::gated_delta_rule_out,
            GDR,
        ),
        (
            "llama::sdpa_with_kv_cache.out",
            llama::sdpa_with_kv_cache_out,
            ETCH,
        ),
        (
            "llama::custom_quantized_sdpa.out",
            llama::custom_quantized_sdpa_out,
            QSDPA,
        ),
        (
            "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
            quantized::choose_qparams_per_token_out,
            PER_TOKEN,
        ),
        (
            "quantized_decomposed::quantize_per_token.out",
            quantized::quantize_per_token_out,
            PER_TOKEN,
        ),
        (
            "quantized_decomposed::embedding_byte.out",
            quantized::embedding_byte_out,
            QEMB,
        ),
        (
            "quantized_decomposed::embedding_byte.dtype_out",
            quantized::embedding_byte_dtype_out,
            QEMB,
        ),
        (
            "quantized_decomposed::embedding_4bit.out",
            quantized::embedding_4bit_out,
            QEMB,
        ),
        (
            "quantized_decomposed::embedding_4bit.dtype_out",
            quantized::embedding_4bit_dtype_out,
            QEMB,
        ),
    ];
    for (name, f) in etch_kernels::shape::kernels::<CudaMover>() {
        t.push((name, f, ALL));
    }
    for (name, f) in etch_kernels::prim::metadata_kernels() {
        t.push((name, f, ALL));
    }
    t
}

/// Registers the CUDA kernels.
pub fn register_cuda(reg: &mut KernelRegistry) -> Result<()> {
    for (name, f, _) in table() {
        reg.register(name, f)?;
    }
    Ok(())
}

/// A registry holding the CUDA kernels.
pub fn cuda_registry() -> KernelRegistry {
    let mut r = KernelRegistry::new();
    // A fresh registry cannot collide.
    let _ = register_cuda(&mut r);
    r
}

/// Every operator with a CUDA kernel and the dtypes its tensors may have (inputs and
/// outputs together): what `etch lower --ops cuda` asks before delegating an instruction.
pub fn op_support() -> Vec<(&'static str, &'static [ScalarType])> {
    table().into_iter().map(|(n, _, d)| (n, d)).collect()
}

#[cfg(test)]
mod tests {
    use super::Family;

    /// Kernels launch with programmatic dependent launch, so each must wait for the
    /// previous grid before it touches memory: `PDL_ENTRY()` opens every kernel body (or
    /// `PDL_EARLY()`, for the GEMVs that fetch weights before they wait).
    #[test]
    fn every_kernel_waits_for_the_previous_grid_first() {
        for &f in Family::ALL {
            let src = f.source();
            let mut rest = src;
            while let Some(i) = rest.find("__global__") {
                let after = &rest[i..];
                let body = after.find('{').expect("kernel body");
                let first = after[body + 1..].trim_start_matches([' ', '\n', '\\']);
                // Or PDL_EARLY() in a family whose source waits (PDL_WAIT) after reading
                // only constants.
                let early = first.starts_with("PDL_EARLY();") && src.contains("PDL_WAIT();");
                assert!(
                    first.starts_with("PDL_ENTRY();") || early,
                    "{f:?}: kernel does not start with PDL_ENTRY(): {}",
                    &after[..body.min(120)]
                );
                rest = &after[body..];
            }
        }
    }
}
