//! Layout hooks ([`etch_core::LayoutFn`]) of the kernels that read and write every tensor
//! through its strides, so run channels-last feature maps as they are: elementwise
//! operators, batch norm, max pooling and the spatial mean. The convolution's own hook
//! lives with it (`conv::channels_last`). The runtime lays a portable program's feature
//! maps out channels-last at load where every call touching them has a hook that allows
//! it and some convolution gains.

use etch_core::{KernelContext, KernelRegistry, LayoutRule};

/// Elementwise operators of one tensor: `[self, .., out]`.
const UNARY: &[&str] = &[
    "aten::relu.out",
    "aten::sigmoid.out",
    "aten::hardtanh.out",
    "aten::clamp.out",
    "aten::silu.out",
    "aten::hardswish.out",
    "aten::hardsigmoid.out",
];

/// Elementwise operators of two tensors: `[self, other, .., out]`.
const BINARY: &[&str] = &[
    "aten::add.out",
    "aten::sub.out",
    "aten::mul.out",
    "aten::div.out",
];

/// The last argument: the out tensor of the operators here.
fn last(ctx: &KernelContext<'_>) -> Option<usize> {
    ctx.num_args().checked_sub(1)
}

/// Input and output share a layout.
fn unary(ctx: &KernelContext<'_>) -> Option<LayoutRule> {
    let out = last(ctx)?;
    let same = ctx.tensor(0).ok()?.sizes() == ctx.tensor(out).ok()?.sizes();
    same.then(|| LayoutRule {
        tied: vec![0, out],
        ..LayoutRule::default()
    })
}

/// The operands of the output's shape share its layout; a broadcast operand (a
/// `[n, c, 1, 1]` vector, a scalar) keeps its own.
fn binary(ctx: &KernelContext<'_>) -> Option<LayoutRule> {
    let out = last(ctx)?;
    let sizes = ctx.tensor(out).ok()?.sizes().to_vec();
    let mut tied = vec![out];
    for i in 0..2 {
        if let Ok(t) = ctx.tensor(i)
            && t.sizes() == sizes
        {
            tied.push(i);
        }
    }
    Some(LayoutRule {
        tied,
        ..LayoutRule::default()
    })
}

/// `_native_batch_norm_legit_no_training`: input and output (arguments 0 and 7).
fn batch_norm(_: &KernelContext<'_>) -> Option<LayoutRule> {
    Some(LayoutRule {
        tied: vec![0, 7],
        ..LayoutRule::default()
    })
}

/// `max_pool2d_with_indices`: input, output and indices (arguments 0, 6 and 7).
fn max_pool(_: &KernelContext<'_>) -> Option<LayoutRule> {
    Some(LayoutRule {
        tied: vec![0, 6, 7],
        ..LayoutRule::default()
    })
}

/// `mean.out` over the height and width of a 4-d tensor (arguments `[self, dim, keepdim,
/// dtype, out]`): the input in either layout; the `[n, c, 1, 1]` or `[n, c]` output is the
/// same bytes in both.
fn mean(ctx: &KernelContext<'_>) -> Option<LayoutRule> {
    let x = ctx.tensor(0).ok()?;
    let dims = ctx.opt_int_list(1).ok()??;
    let mut d: Vec<i64> = dims.iter().map(|&d| d.rem_euclid(4)).collect();
    d.sort_unstable();
    (x.dim() == 4 && d == [2, 3]).then(|| LayoutRule {
        tied: vec![0],
        ..LayoutRule::default()
    })
}

/// Registers the layout hooks of this module's operators.
pub fn register(reg: &mut KernelRegistry) {
    for op in UNARY {
        reg.register_layout(op, unary);
    }
    for op in BINARY {
        reg.register_layout(op, binary);
    }
    reg.register_layout("aten::_native_batch_norm_legit_no_training.out", batch_norm);
    reg.register_layout("aten::max_pool2d_with_indices.out", max_pool);
    reg.register_layout("aten::mean.out", mean);
}
