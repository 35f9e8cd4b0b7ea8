//! Tests for the kernels added for the issue-3 coverage models (torchvision, HuggingFace,
//! `torch.nn` layers), against PyTorch outputs in `golden_models/mod.rs`
//! (`tools/export/gen_kernel_golden_models.py`).

mod golden_models;

mod env;

use env::*;
use golden_models as g;

fn dbls(e: &mut Env, v: &[f64]) -> u32 {
    e.push(EValue::DoubleList(v.into()))
}

#[test]
fn cumsum_float_int_and_negative_dim() {
    let mut e = Env::default();
    let x = e.t(&inp(24, 0), &[2, 3, 4]);
    let d = e.int(1);
    let none = e.none();
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::cumsum.out", &[x, d, none, o]).unwrap();
    close(&e.getf(o), g::CUMSUM_D1, 1e-6);
    let d = e.int(-1);
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::cumsum.out", &[x, d, none, o]).unwrap();
    close(&e.getf(o), g::CUMSUM_DNEG1, 1e-6);
    // Integers (and bools) sum into int64.
    let xi = e.t(&[1i32, 2, 3, 4, 5, 6], &[2, 3]);
    let d = e.int(1);
    let o = e.out(ScalarType::Long, &[2, 3]);
    e.run("aten::cumsum.out", &[xi, d, none, o]).unwrap();
    assert_eq!(e.get::<i64>(o), vec![1, 3, 6, 4, 9, 15]);
    let o = e.out(ScalarType::Int, &[2, 3]);
    code(
        e.run("aten::cumsum.out", &[xi, d, none, o]),
        ErrorCode::InvalidArgument,
    );
    let d = e.int(2);
    let o = e.out(ScalarType::Long, &[2, 3]);
    code(
        e.run("aten::cumsum.out", &[xi, d, none, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn flip_dims_and_channels_last() {
    let mut e = Env::default();
    let x = e.t(&inp(24, 0), &[2, 3, 4]);
    let dims = e.ints(&[0, -1]);
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::flip.out", &[x, dims, o]).unwrap();
    close(&e.getf(o), g::FLIP_0_2, 0.0);
    let xi = e.t(&[1i64, 2, 3, 4, 5, 6], &[2, 3]);
    let dims = e.ints(&[1]);
    let o = e.out_ordered(ScalarType::Long, &[2, 3], &[1, 0]);
    e.run("aten::flip.out", &[xi, dims, o]).unwrap();
    // [[3,2,1],[6,5,4]] stored column-major.
    assert_eq!(e.get::<i64>(o), vec![3, 6, 2, 5, 1, 4]);
    let dims = e.ints(&[1, 1]);
    let o = e.out(ScalarType::Long, &[2, 3]);
    code(
        e.run("aten::flip.out", &[xi, dims, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn as_strided_copy_windows_and_bounds() {
    let mut e = Env::default();
    let data: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let x = e.t(&data, &[3, 4]);
    let size = e.ints(&[3, 3]);
    let stride = e.ints(&[2, 1]);
    let off = e.int(1);
    let o = e.out(ScalarType::Float, &[3, 3]);
    e.run("aten::as_strided_copy.out", &[x, size, stride, off, o])
        .unwrap();
    assert_eq!(
        e.get::<f32>(o),
        vec![1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 5.0, 6.0, 7.0]
    );
    let off = e.int(6);
    let o = e.out(ScalarType::Float, &[3, 3]);
    code(
        e.run("aten::as_strided_copy.out", &[x, size, stride, off, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn native_group_norm_matches_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(72, 1), &[2, 4, 3, 3]);
    let w = e.t(&inp(4, 2), &[4]);
    let b = e.t(&inp(4, 3), &[4]);
    let (n, c, hw, grp) = (e.int(2), e.int(4), e.int(9), e.int(2));
    let eps = e.dbl(1e-5);
    let o = e.out(ScalarType::Float, &[2, 4, 3, 3]);
    let m = e.out(ScalarType::Float, &[2, 2]);
    let r = e.out(ScalarType::Float, &[2, 2]);
    e.run(
        "aten::native_group_norm.out",
        &[x, w, b, n, c, hw, grp, eps, o, m, r],
    )
    .unwrap();
    close(&e.getf(o), g::GROUP_NORM, 1e-5);
    close(&e.getf(m), g::GROUP_NORM_MEAN, 1e-5);
    close(&e.getf(r), g::GROUP_NORM_RSTD, 1e-5);
    let grp = e.int(3);
    code(
        e.run(
            "aten::native_group_norm.out",
            &[x, w, b, n, c, hw, grp, eps, o, m, r],
        ),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn upsample_nearest_sizes_and_scales() {
    let mut e = Env::default();
    let x = e.t(&inp(24, 4), &[1, 2, 3, 4]);
    let size = e.ints(&[5, 7]);
    let none = e.none();
    let o = e.dyn_out(ScalarType::Float, &[1, 2, 8, 8]);
    e.run("aten::upsample_nearest2d.vec_out", &[x, size, none, o])
        .unwrap();
    assert_eq!(e.sizes(o), vec![1, 2, 5, 7]);
    close(&e.getf(o), g::NEAREST_5X7, 0.0);
    let sc = dbls(&mut e, &[1.7, 1.7]);
    let o = e.dyn_out(ScalarType::Float, &[1, 2, 8, 8]);
    e.run("aten::upsample_nearest2d.vec_out", &[x, none, sc, o])
        .unwrap();
    assert_eq!(e.sizes(o), vec![1, 2, 5, 6]);
    close(&e.getf(o), g::NEAREST_SCALE_1_7, 0.0);
    let o = e.dyn_out(ScalarType::Float, &[1, 2, 8, 8]);
    code(
        e.run("aten::upsample_nearest2d.vec_out", &[x, none, none, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn upsample_bilinear_align_corners_and_scales() {
    let mut e = Env::default();
    let x = e.t(&inp(24, 4), &[1, 2, 3, 4]);
    let size = e.ints(&[5, 7]);
    let none = e.none();
    for (ac, want) in [(false, g::BILINEAR_5X7), (true, g::BILINEAR_5X7_AC)] {
        let a = e.boolean(ac);
        let o = e.out(ScalarType::Float, &[1, 2, 5, 7]);
        e.run("aten::upsample_bilinear2d.vec_out", &[x, size, a, none, o])
            .unwrap();
        close(&e.getf(o), want, 1e-6);
    }
    // Channels-last out.
    let a = e.boolean(false);
    let o = e.out_ordered(ScalarType::Float, &[1, 2, 5, 7], &[0, 2, 3, 1]);
    e.run("aten::upsample_bilinear2d.vec_out", &[x, size, a, none, o])
        .unwrap();
    let got = e.getf(o);
    let mut nchw = vec![0.0; got.len()];
    for c in 0..2 {
        for p in 0..35 {
            nchw[c * 35 + p] = got[p * 2 + c];
        }
    }
    close(&nchw, g::BILINEAR_5X7, 1e-6);
    let sc = dbls(&mut e, &[0.6, 1.5]);
    let o = e.dyn_out(ScalarType::Float, &[1, 2, 8, 8]);
    e.run("aten::upsample_bilinear2d.vec_out", &[x, none, a, sc, o])
        .unwrap();
    assert_eq!(e.sizes(o), vec![1, 2, 1, 6]);
    close(&e.getf(o), g::BILINEAR_SCALE, 1e-6);
    let xi = e.t(&[1i64; 4], &[1, 1, 2, 2]);
    let o = e.out(ScalarType::Long, &[1, 1, 5, 7]);
    code(
        e.run("aten::upsample_bilinear2d.vec_out", &[xi, size, a, none, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn transposed_convolution_matches_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(36, 5), &[1, 4, 3, 3]);
    let w = e.t(&inp(108, 6), &[4, 3, 3, 3]);
    let b = e.t(&inp(6, 7), &[6]);
    let (s, p, d, op) = (
        e.ints(&[2, 2]),
        e.ints(&[1, 1]),
        e.ints(&[1, 1]),
        e.ints(&[1, 1]),
    );
    let tr = e.boolean(true);
    let grp = e.int(2);
    let o = e.out(ScalarType::Float, &[1, 6, 6, 6]);
    e.run("aten::convolution.out", &[x, w, b, s, p, d, tr, op, grp, o])
        .unwrap();
    close(&e.getf(o), g::CONV_T, 1e-5);
    // Dilation, no bias, one group: weight [4, 2, 3, 3].
    let w2: Vec<f32> = inp(108, 6)
        .chunks(27)
        .flat_map(|c| c[..18].to_vec())
        .collect();
    let w2 = e.t(&w2, &[4, 2, 3, 3]);
    let none = e.none();
    let (s, p, d, op) = (
        e.ints(&[1, 1]),
        e.ints(&[0, 0]),
        e.ints(&[2, 2]),
        e.ints(&[0, 0]),
    );
    let one = e.int(1);
    let o = e.out(ScalarType::Float, &[1, 2, 7, 7]);
    e.run(
        "aten::convolution.out",
        &[x, w2, none, s, p, d, tr, op, one, o],
    )
    .unwrap();
    close(&e.getf(o), g::CONV_T_DIL, 1e-5);
    // output_padding must be smaller than stride or dilation.
    let op = e.ints(&[2, 2]);
    code(
        e.run(
            "aten::convolution.out",
            &[x, w2, none, s, p, d, tr, op, one, o],
        ),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn activations_leaky_elu_log1p_expm1() {
    let mut e = Env::default();
    let x = e.t(&inp(24, 8), &[2, 3, 4]);
    let slope = e.dbl(0.2);
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::leaky_relu.out", &[x, slope, o]).unwrap();
    close(&e.getf(o), g::LEAKY_RELU, 1e-6);
    let (al, sc, isc) = (e.dbl(1.5), e.dbl(1.2), e.dbl(0.8));
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::elu.out", &[x, al, sc, isc, o]).unwrap();
    close(&e.getf(o), g::ELU, 1e-6);
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::expm1.out", &[x, o]).unwrap();
    close(&e.getf(o), g::EXPM1, 1e-6);
    let ax: Vec<f32> = inp(24, 8).iter().map(|v| v.abs()).collect();
    let xa = e.t(&ax, &[2, 3, 4]);
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::log1p.out", &[xa, o]).unwrap();
    close(&e.getf(o), g::LOG1P, 1e-6);
    let xi = e.t(&[1i32, 2], &[2]);
    let o = e.out(ScalarType::Int, &[2]);
    code(
        e.run("aten::leaky_relu.out", &[xi, slope, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn bitwise_not_ints_and_bools() {
    let mut e = Env::default();
    let x = e.t(&[0i64, 5, -3], &[3]);
    let o = e.out(ScalarType::Long, &[3]);
    e.run("aten::bitwise_not.out", &[x, o]).unwrap();
    assert_eq!(e.get::<i64>(o), vec![-1, -6, 2]);
    let xb = {
        let t = Tensor::from_slice(&[1u8, 0, 1], &[3]).unwrap();
        let b = TensorImpl::new(
            ScalarType::Bool,
            &[3],
            None,
            Dynamism::Static,
            Device::CPU,
            t.as_bytes().unwrap().as_ptr() as *mut u8,
            3,
        )
        .unwrap();
        e.bufs.push(t);
        e.push(EValue::Tensor(b))
    };
    let o = e.out(ScalarType::Bool, &[3]);
    e.run("aten::bitwise_not.out", &[xb, o]).unwrap();
    assert_eq!(e.get::<u8>(o), vec![0, 1, 0]);
    let xf = e.t(&[1.0f32], &[1]);
    let o = e.out(ScalarType::Float, &[1]);
    code(
        e.run("aten::bitwise_not.out", &[xf, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn constant_pad_repeat_and_slice_scatter() {
    let mut e = Env::default();
    let x = e.t(&inp(24, 8), &[2, 3, 4]);
    let pad = e.ints(&[1, 2, -1, 1]);
    let v = e.dbl(0.5);
    let o = e.out(ScalarType::Float, &[2, 3, 7]);
    e.run("aten::constant_pad_nd.out", &[x, pad, v, o]).unwrap();
    close(&e.getf(o), g::PAD, 0.0);
    let pad = e.ints(&[0, 0, -2, -2]);
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    code(
        e.run("aten::constant_pad_nd.out", &[x, pad, v, o]),
        ErrorCode::InvalidArgument,
    );
    let x0 = e.t(&inp(24, 8)[..12], &[3, 4]);
    let reps = e.ints(&[2, 1, 2]);
    let o = e.out(ScalarType::Float, &[2, 3, 8]);
    e.run("aten::repeat.out", &[x0, reps, o]).unwrap();
    close(&e.getf(o), g::REPEAT, 0.0);
    let reps = e.ints(&[2]);
    code(
        e.run("aten::repeat.out", &[x0, reps, o]),
        ErrorCode::InvalidArgument,
    );
    let src = e.t(&inp(12, 9), &[2, 3, 2]);
    let (d, s0, e4, st) = (e.int(-1), e.int(0), e.int(4), e.int(2));
    let o = e.out(ScalarType::Float, &[2, 3, 4]);
    e.run("aten::slice_scatter.out", &[x, src, d, s0, e4, st, o])
        .unwrap();
    close(&e.getf(o), g::SLICE_SCATTER, 0.0);
    let st = e.int(1);
    code(
        e.run("aten::slice_scatter.out", &[x, src, d, s0, e4, st, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn batch_norm_no_stats_matches_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(48, 10), &[2, 3, 2, 4]);
    let w = e.t(&inp(3, 11), &[3]);
    let b = e.t(&inp(3, 12), &[3]);
    let (tr, mom, eps) = (e.boolean(true), e.dbl(0.1), e.dbl(1e-5));
    let o = e.out(ScalarType::Float, &[2, 3, 2, 4]);
    let m = e.out(ScalarType::Float, &[3]);
    let r = e.out(ScalarType::Float, &[3]);
    e.run(
        "aten::_native_batch_norm_legit.no_stats_out",
        &[x, w, b, tr, mom, eps, o, m, r],
    )
    .unwrap();
    close(&e.getf(o), g::BN_NO_STATS, 1e-5);
    close(&e.getf(m), g::BN_NO_STATS_MEAN, 1e-5);
    close(&e.getf(r), g::BN_NO_STATS_RSTD, 1e-5);
}

#[test]
fn trig_and_log_unaries() {
    let mut e = Env::default();
    let t: Vec<f32> = inp(12, 13).iter().map(|v| v * 0.45).collect();
    let pos: Vec<f32> = t.iter().map(|v| v.abs() + 0.1).collect();
    let cases: [(&str, &[f32], &[f32]); 9] = [
        ("aten::tan.out", &t, g::U_TAN),
        ("aten::asin.out", &t, g::U_ASIN),
        ("aten::acos.out", &t, g::U_ACOS),
        ("aten::atan.out", &t, g::U_ATAN),
        ("aten::sinh.out", &t, g::U_SINH),
        ("aten::cosh.out", &t, g::U_COSH),
        ("aten::asinh.out", &t, g::U_ASINH),
        ("aten::log2.out", &pos, g::U_LOG2),
        ("aten::log10.out", &pos, g::U_LOG10),
    ];
    for (op, x, want) in cases {
        let x = e.t(x, &[12]);
        let o = e.out(ScalarType::Float, &[12]);
        e.run(op, &[x, o]).unwrap();
        close(&e.getf(o), want, 1e-6);
    }
    // Integer inputs compute in the (float) out dtype.
    let xi = e.t(&[1i64, 10, 100], &[3]);
    let o = e.out(ScalarType::Float, &[3]);
    e.run("aten::log10.out", &[xi, o]).unwrap();
    close(&e.getf(o), &[0.0, 1.0, 2.0], 1e-6);
}
