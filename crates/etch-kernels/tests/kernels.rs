//! Kernel tests: build a small value table, call kernels through the portable registry and
//! compare with hand-computed or PyTorch-computed results (see `golden/mod.rs`).

mod golden;

mod env;

use env::*;

// ---------------------------------------------------------------- binary / unary

#[test]
fn add_broadcast_alpha_and_promotion() {
    let mut e = Env::default();
    let a = e.t(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = e.t(&[10.0f32, 20.0, 30.0], &[3]);
    let alpha = e.int(2);
    let o = e.out(ScalarType::Float, &[2, 3]);
    e.run("aten::add.out", &[a, b, alpha, o, o]).unwrap();
    assert_eq!(e.get::<f32>(o), vec![21.0, 42.0, 63.0, 24.0, 45.0, 66.0]);

    // Long + Float -> Float; column broadcast on the left operand.
    let l = e.t(&[1i64, 2], &[2, 1]);
    let f = e.t(&[0.5f32, 0.25, 0.125], &[1, 3]);
    let one = e.int(1);
    let o2 = e.out(ScalarType::Float, &[2, 3]);
    e.run("aten::add.out", &[l, f, one, o2, o2]).unwrap();
    assert_eq!(e.get::<f32>(o2), vec![1.5, 1.25, 1.125, 2.5, 2.25, 2.125]);

    // Float result into a Long out is refused (no float -> int cast).
    let bad = e.out(ScalarType::Long, &[2, 3]);
    code(
        e.run("aten::add.out", &[l, f, one, bad, bad]),
        ErrorCode::InvalidArgument,
    );
}

/// Per-channel broadcasts of float32 (`[n, c, h, w]` with `[1, c, 1, 1]`, `[c, 1, 1]`,
/// `[c]` last, either operand order; a squeeze-excitation's `x · s`) take the per-plane and
/// per-row kernels: each element is `op(x, v[ch])` rounded once, as the walk computes it,
/// for 1 and 3 threads.
#[test]
fn per_channel_broadcasts() {
    let cases: [(&[usize], &[usize], usize); 5] = [
        (&[2, 5, 7, 9], &[1, 5, 1, 1], 63),
        (&[1, 24, 28, 28], &[24, 1, 1], 784),
        (&[3, 40], &[40], 1),
        (&[1, 16, 33], &[1, 16, 1], 33),
        (&[4, 6, 5], &[6, 1], 5),
    ];
    for threads in [1, 3] {
        etch_kernels::threads::set_num_threads(threads);
        for (xs, vs, hw) in cases {
            let n: usize = xs.iter().product();
            let c: usize = vs.iter().product();
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
            let v: Vec<f32> = (0..c).map(|i| 0.5 + i as f32 * 0.173).collect();
            for (op, f) in [
                ("aten::mul.out", (|a, b| a * b) as fn(f32, f32) -> f32),
                ("aten::div.out", |a, b| a / b),
                ("aten::sub.out", |a, b| a - b),
            ] {
                for swap in [false, true] {
                    let mut e = Env::default();
                    let (xt, vt) = (e.t(&x, xs), e.t(&v, vs));
                    let o = e.out(ScalarType::Float, xs);
                    let (p, q) = if swap { (vt, xt) } else { (xt, vt) };
                    let mut args = vec![p, q];
                    if op == "aten::sub.out" {
                        args.push(e.int(1));
                    }
                    args.extend([o, o]);
                    e.run(op, &args).unwrap();
                    let got = e.get::<f32>(o);
                    for (i, (&g, &a)) in got.iter().zip(&x).enumerate() {
                        let b = v[i / hw % c];
                        let want = if swap { f(b, a) } else { f(a, b) };
                        assert_eq!(
                            g.to_bits(),
                            want.to_bits(),
                            "{op} {xs:?} {vs:?} {swap} @{i}"
                        );
                    }
                }
            }
        }
    }
    etch_kernels::threads::set_num_threads(0);
}

#[test]
fn mul_scalar_promotes_and_integer_ops_wrap() {
    let mut e = Env::default();
    let a = e.t(&[1i64, -2, 3], &[3]);
    let s = e.dbl(0.5);
    let o = e.out(ScalarType::Float, &[3]);
    e.run("aten::mul.Scalar_out", &[a, s, o, o]).unwrap();
    assert_eq!(e.get::<f32>(o), vec![0.5, -1.0, 1.5]);

    let x = e.t(&[100i8, -100, 7], &[3]);
    let y = e.t(&[100i8, -100, 2], &[3]);
    let one = e.int(1);
    let o8 = e.out(ScalarType::Char, &[3]);
    e.run("aten::add.out", &[x, y, one, o8, o8]).unwrap();
    assert_eq!(e.get::<i8>(o8), vec![-56, 56, 9]);

    // Integer floor division and the zero-divisor error.
    let p = e.t(&[-7i32, 7, 6], &[3]);
    let q = e.t(&[2i32, -2, 3], &[3]);
    let mode = e.string("floor");
    let oi = e.out(ScalarType::Int, &[3]);
    e.run("aten::div.out_mode", &[p, q, mode, oi, oi]).unwrap();
    assert_eq!(e.get::<i32>(oi), vec![-4, -4, 2]);
    let z = e.t(&[1i32, 0, 1], &[3]);
    code(
        e.run("aten::div.out_mode", &[p, z, mode, oi, oi]),
        ErrorCode::InvalidArgument,
    );

    // True division of ints gives floats.
    let of = e.out(ScalarType::Float, &[3]);
    e.run("aten::div.out", &[p, q, of, of]).unwrap();
    assert_eq!(e.get::<f32>(of), vec![-3.5, -3.5, 2.0]);
}

#[test]
fn half_and_bfloat_elementwise() {
    let mut e = Env::default();
    let h: Vec<f16> = [1.0f32, 2.5, -3.0]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let a = e.t(&h, &[3]);
    let b = e.t(&h, &[3]);
    let o = e.out(ScalarType::Half, &[3]);
    e.run("aten::mul.out", &[a, b, o, o]).unwrap();
    assert_eq!(e.getf(o), vec![1.0, 6.25, 9.0]);
    let bfv: Vec<bf16> = [1.0f32, 2.0].iter().map(|&v| bf16::from_f32(v)).collect();
    let c = e.t(&bfv, &[2]);
    let ob = e.out(ScalarType::BFloat16, &[2]);
    e.run("aten::exp.out", &[c, ob, ob]).unwrap();
    assert_eq!(e.getf(ob), vec![2.71875, 7.375]);
}

#[test]
fn comparisons_where_and_logical() {
    let mut e = Env::default();
    let x = e.t(&[f32::NEG_INFINITY, 0.0, 1.0, f32::NEG_INFINITY], &[2, 2]);
    let s = e.dbl(f64::NEG_INFINITY);
    let m = e.out(ScalarType::Bool, &[2, 2]);
    e.run("aten::eq.Scalar_out", &[x, s, m, m]).unwrap();
    assert_eq!(e.get::<u8>(m), vec![1, 0, 0, 1]);
    let n = e.out(ScalarType::Bool, &[2, 2]);
    e.run("aten::logical_not.out", &[m, n, n]).unwrap();
    assert_eq!(e.get::<u8>(n), vec![0, 1, 1, 0]);
    // where with a [2,1] condition broadcast over [2,2].
    let c = e.t(&[1u8, 0], &[2, 1]);
    let c = {
        let imp = e.imp(c).with_dtype(ScalarType::Bool);
        e.vals[c as usize] = EValue::Tensor(imp);
        c
    };
    let a = e.t(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let b = e.t(&[9.0f32], &[1]);
    let o = e.out(ScalarType::Float, &[2, 2]);
    e.run("aten::where.self_out", &[c, a, b, o, o]).unwrap();
    assert_eq!(e.get::<f32>(o), vec![1.0, 2.0, 9.0, 9.0]);
    // Int tensor vs tensor comparison with mixed dtypes.
    let i = e.t(&[1i64, 5], &[2]);
    let f = e.t(&[1.5f32, 4.5], &[2]);
    let g = e.out(ScalarType::Bool, &[2]);
    e.run("aten::gt.Tensor_out", &[i, f, g, g]).unwrap();
    assert_eq!(e.get::<u8>(g), vec![0, 1]);
}

#[test]
fn activations_match_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(32, 10), &[4, 8]);
    let none = e.string("none");
    let tanh = e.string("tanh");
    let o = e.out(ScalarType::Float, &[4, 8]);
    e.run("aten::gelu.out", &[x, none, o, o]).unwrap();
    close(&e.getf(o), golden::GELU, 1e-6);
    let o2 = e.out(ScalarType::Float, &[4, 8]);
    e.run("aten::gelu.out", &[x, tanh, o2, o2]).unwrap();
    close(&e.getf(o2), golden::GELU_TANH, 1e-6);
    let h: Vec<f16> = inp(32, 10).iter().map(|&v| f16::from_f32(v)).collect();
    let xh = e.t(&h, &[4, 8]);
    let oh = e.out(ScalarType::Half, &[4, 8]);
    e.run("aten::gelu.out", &[xh, none, oh, oh]).unwrap();
    close(&e.getf(oh), golden::GELU_F16, 0.0);
    let bad = e.string("fast");
    code(
        e.run("aten::gelu.out", &[x, bad, o, o]),
        ErrorCode::InvalidArgument,
    );

    let r = e.t(&[-1.0f32, 0.5, f32::NAN], &[3]);
    let ro = e.out(ScalarType::Float, &[3]);
    e.run("aten::relu.out", &[r, ro, ro]).unwrap();
    let got = e.get::<f32>(ro);
    assert_eq!(&got[..2], &[0.0, 0.5]);
    assert!(got[2].is_nan());
    let lo = e.dbl(-0.5);
    let hi = e.none();
    let co = e.out(ScalarType::Float, &[3]);
    e.run("aten::clamp.out", &[r, lo, hi, co, co]).unwrap();
    assert_eq!(&e.get::<f32>(co)[..2], &[-0.5, 0.5]);
}

#[test]
fn vectorised_sigmoid_and_silu_do_not_depend_on_the_thread_count() {
    // Large enough to be split over threads, at offsets that fall inside vectors.
    let n = 77_777;
    let data: Vec<f32> = (0..n).map(|i| (i as f32 * 0.013).sin() * 40.0).collect();
    for op in ["aten::sigmoid.out", "aten::silu.out"] {
        let mut first: Option<Vec<u32>> = None;
        for threads in [1, 2, 3, 7] {
            etch_kernels::threads::set_num_threads(threads);
            let mut e = Env::default();
            let x = e.t(&data, &[n]);
            let o = e.out(ScalarType::Float, &[n]);
            e.run(op, &[x, o, o]).unwrap();
            let got = e.get::<f32>(o);
            for (&x, &y) in data.iter().zip(&got) {
                let x = x as f64;
                let s = 1.0 / (1.0 + (-x).exp());
                let want = if op == "aten::silu.out" { x * s } else { s };
                assert!(
                    (y as f64 - want).abs() <= 1e-6 * want.abs().max(1e-30),
                    "{op}({x})"
                );
            }
            let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            match &first {
                None => first = Some(bits),
                Some(f) => assert!(*f == bits, "{op}: differs with {threads} threads"),
            }
        }
    }
    etch_kernels::threads::set_num_threads(0);
}

#[test]
fn static_and_dynamic_outs() {
    let mut e = Env::default();
    let a = e.t(&[1.0f32, -2.0], &[2]);
    let wrong = e.out(ScalarType::Float, &[3]);
    code(
        e.run("aten::relu.out", &[a, wrong, wrong]),
        ErrorCode::InvalidArgument,
    );
    let d = e.dyn_out(ScalarType::Float, &[4]);
    e.run("aten::relu.out", &[a, d, d]).unwrap();
    assert_eq!(e.sizes(d), vec![2]);
    assert_eq!(e.get::<f32>(d), vec![1.0, 0.0]);
    let wrong_dtype = e.out(ScalarType::Int, &[2]);
    code(
        e.run("aten::relu.out", &[a, wrong_dtype, wrong_dtype]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn size_zero_dims() {
    let mut e = Env::default();
    let a = e.t::<f32>(&[], &[0, 3]);
    let b = e.t(&[1.0f32, 2.0, 3.0], &[3]);
    let one = e.int(1);
    let o = e.out(ScalarType::Float, &[0, 3]);
    e.run("aten::add.out", &[a, b, one, o, o]).unwrap();
    assert_eq!(e.sizes(o), vec![0, 3]);
    let dims = e.ints(&[0]);
    let f = e.boolean(false);
    let n = e.none();
    let s = e.out(ScalarType::Float, &[3]);
    e.run("aten::sum.IntList_out", &[a, dims, f, n, s, s])
        .unwrap();
    assert_eq!(e.get::<f32>(s), vec![0.0; 3]);
}

// ---------------------------------------------------------------- linalg / conv

#[test]
fn matmul_family() {
    let mut e = Env::default();
    let bias = e.t(&inp(4, 13), &[4]);
    let m1 = e.t(&inp(15, 11), &[3, 5]);
    let m2 = e.t(&inp(20, 12), &[5, 4]);
    let beta = e.dbl(0.5);
    let alpha = e.dbl(2.0);
    let o = e.out(ScalarType::Float, &[3, 4]);
    e.run("aten::addmm.out", &[bias, m1, m2, beta, alpha, o, o])
        .unwrap();
    close(&e.getf(o), golden::ADDMM, 1e-5);

    let conv = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let bb = e.t(&conv(&inp(4, 13)), &[4]);
    let b1 = e.t(&conv(&inp(15, 11)), &[3, 5]);
    let b2 = e.t(&conv(&inp(20, 12)), &[5, 4]);
    let one = e.int(1);
    let ob = e.out(ScalarType::BFloat16, &[3, 4]);
    e.run("aten::addmm.out", &[bb, b1, b2, one, one, ob, ob])
        .unwrap();
    close(&e.getf(ob), golden::ADDMM_BF16, 0.0);

    // bmm against mm, batch by batch.
    let x = e.t(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2]);
    let y = e.t(&[1.0f32, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0], &[2, 2, 2]);
    let ob2 = e.out(ScalarType::Float, &[2, 2, 2]);
    e.run("aten::bmm.out", &[x, y, ob2, ob2]).unwrap();
    assert_eq!(
        e.get::<f32>(ob2),
        vec![1.0, 2.0, 3.0, 4.0, 6.0, 5.0, 8.0, 7.0]
    );

    // Shape mismatch is an error.
    let om = e.out(ScalarType::Float, &[3, 4]);
    code(
        e.run("aten::mm.out", &[m1, m1, om, om]),
        ErrorCode::InvalidArgument,
    );

    // linear: x [2,3] · w[2,3]^T + b
    let lx = e.t(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let lw = e.t(&[1.0f32, 0.0, 0.0, 0.0, 1.0, 1.0], &[2, 3]);
    let lb = e.t(&[0.5f32, -0.5], &[2]);
    let lo = e.out(ScalarType::Float, &[2, 2]);
    e.run("aten::linear.out", &[lx, lw, lb, lo, lo]).unwrap();
    assert_eq!(e.get::<f32>(lo), vec![1.5, 4.5, 4.5, 10.5]);
}

/// `etch::linear_group` (made by `etch lower` from sibling linears) gives each output
/// exactly what `aten::linear` gives for its pair, for f32 and bf16, one row or several;
/// mismatched weights, no weights and K = 0 are errors.
#[test]
fn linear_group_equals_its_linears() {
    for (dt, rows) in [
        (ScalarType::Float, 1),
        (ScalarType::Float, 3),
        (ScalarType::BFloat16, 2),
    ] {
        let mut e = Env::default();
        let k = 37;
        let t = |e: &mut Env, n: usize, seed: usize| {
            let v = inp(n, seed);
            match dt {
                ScalarType::Float => e.t(&v, &[n / k, k]),
                _ => e.t(
                    &v.iter()
                        .map(|&x| etch_core::bf16::from_f32(x))
                        .collect::<Vec<_>>(),
                    &[n / k, k],
                ),
            }
        };
        let x = t(&mut e, rows * k, 1);
        let ns = [5usize, 1, 64];
        let ws: Vec<u32> = ns
            .iter()
            .enumerate()
            .map(|(j, &n)| t(&mut e, n * k, 2 + j))
            .collect();
        let outs: Vec<u32> = ns.iter().map(|&n| e.out(dt, &[rows, n])).collect();
        let (wl, ol) = (e.list(&ws), e.list(&outs));
        e.run("etch::linear_group.out", &[x, wl, ol]).unwrap();
        for (j, &n) in ns.iter().enumerate() {
            let (none, o) = (e.none(), e.out(dt, &[rows, n]));
            e.run("aten::linear.out", &[x, ws[j], none, o, o]).unwrap();
            assert_eq!(e.getf(outs[j]), e.getf(o), "{dt} rows {rows} linear {j}");
        }
        let bad = t(&mut e, 4 * (k - 1) + 4, 9);
        let (bl, ol1, empty, eo) = (
            e.list(&[ws[0], bad]),
            e.list(&outs[..2]),
            e.list(&[]),
            e.list(&[]),
        );
        code(
            e.run("etch::linear_group.out", &[x, bl, ol1]),
            ErrorCode::InvalidArgument,
        );
        code(
            e.run("etch::linear_group.out", &[x, empty, eo]),
            ErrorCode::InvalidArgument,
        );
    }
}

#[test]
fn convolution_matches_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(150, 1), &[2, 3, 5, 5]);
    let w = e.t(&inp(108, 2), &[4, 3, 3, 3]);
    let b = e.t(&inp(4, 3), &[4]);
    let (s, p, d, z) = (
        e.ints(&[1, 1]),
        e.ints(&[1, 1]),
        e.ints(&[1, 1]),
        e.ints(&[0, 0]),
    );
    let f = e.boolean(false);
    let g1 = e.int(1);
    let o = e.out(ScalarType::Float, &[2, 4, 5, 5]);
    e.run("aten::convolution.out", &[x, w, b, s, p, d, f, z, g1, o, o])
        .unwrap();
    close(&e.getf(o), golden::CONV2D, 1e-5);

    // Channels-last input and output give the same values.
    let xs = inp(150, 1);
    let mut cl = vec![0f32; 150];
    for n in 0..2 {
        for c in 0..3 {
            for h in 0..5 {
                for ww in 0..5 {
                    cl[((n * 5 + h) * 5 + ww) * 3 + c] = xs[((n * 3 + c) * 5 + h) * 5 + ww];
                }
            }
        }
    }
    let xcl = e.t_ordered(&cl, &[2, 3, 5, 5], &[0, 2, 3, 1]);
    let ocl = e.out_ordered(ScalarType::Float, &[2, 4, 5, 5], &[0, 2, 3, 1]);
    e.run(
        "aten::convolution.out",
        &[xcl, w, b, s, p, d, f, z, g1, ocl, ocl],
    )
    .unwrap();
    let oc = e.out(ScalarType::Float, &[2, 4, 5, 5]);
    let mf = e.none();
    e.run("aten::clone.out", &[ocl, mf, oc, oc]).unwrap();
    close(&e.getf(oc), golden::CONV2D_CL_IN, 1e-5);

    // Groups, stride and dilation.
    let x2 = e.t(&inp(144, 4), &[1, 4, 6, 6]);
    let w2 = e.t(&inp(108, 5), &[6, 2, 3, 3]);
    let nb = e.none();
    let (s2, p2, d2) = (e.ints(&[2, 2]), e.ints(&[1, 1]), e.ints(&[2, 2]));
    let g2 = e.int(2);
    let o2 = e.out(ScalarType::Float, &[1, 6, 2, 2]);
    e.run(
        "aten::convolution.out",
        &[x2, w2, nb, s2, p2, d2, f, z, g2, o2, o2],
    )
    .unwrap();
    close(&e.getf(o2), golden::CONV2D_G2_S2_D2, 1e-5);

    // 1-D.
    let x1 = e.t(&inp(48, 6), &[2, 3, 8]);
    let w1 = e.t(&inp(36, 7), &[4, 3, 3]);
    let b1 = e.t(&inp(4, 8), &[4]);
    let (s1, p1, d1, z1) = (e.ints(&[2]), e.ints(&[1]), e.ints(&[1]), e.ints(&[0]));
    let o1 = e.out(ScalarType::Float, &[2, 4, 4]);
    e.run(
        "aten::convolution.out",
        &[x1, w1, b1, s1, p1, d1, f, z1, g1, o1, o1],
    )
    .unwrap();
    close(&e.getf(o1), golden::CONV1D, 1e-5);

    // Transposed convolution reads the weight as [in, out/groups, kh, kw]: this weight
    // ([4, 3, 3, 3]) wants 4 input channels, the input has 3.
    let t = e.boolean(true);
    code(
        e.run("aten::convolution.out", &[x, w, b, s, p, d, t, z, g1, o, o]),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn pooling_matches_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(150, 9), &[2, 3, 5, 5]);
    let (k, s, p, d) = (
        e.ints(&[2, 2]),
        e.ints(&[2, 2]),
        e.ints(&[0, 0]),
        e.ints(&[1, 1]),
    );
    let ceil = e.boolean(true);
    let o = e.out(ScalarType::Float, &[2, 3, 3, 3]);
    let i = e.out(ScalarType::Long, &[2, 3, 3, 3]);
    let ret = e.list(&[o, i]);
    e.run(
        "aten::max_pool2d_with_indices.out",
        &[x, k, s, p, d, ceil, o, i, ret],
    )
    .unwrap();
    close(&e.getf(o), golden::MAXPOOL_V, 0.0);
    assert_eq!(e.get::<i64>(i), golden::MAXPOOL_I);

    let (k3, s2, p1) = (e.ints(&[3, 3]), e.ints(&[2, 2]), e.ints(&[1, 1]));
    let f = e.boolean(false);
    let n = e.none();
    let oa = e.out(ScalarType::Float, &[2, 3, 3, 3]);
    e.run("aten::avg_pool2d.out", &[x, k3, s2, p1, f, f, n, oa, oa])
        .unwrap();
    close(&e.getf(oa), golden::AVGPOOL, 1e-6);

    let os = e.ints(&[2, 3]);
    let ad = e.out(ScalarType::Float, &[2, 3, 2, 3]);
    e.run("aten::_adaptive_avg_pool2d.out", &[x, os, ad, ad])
        .unwrap();
    close(&e.getf(ad), golden::ADAPTIVE, 1e-6);
}

// ---------------------------------------------------------------- norms / reductions

#[test]
fn softmax_and_norms_match_pytorch() {
    let mut e = Env::default();
    let x = e.t(&inp(32, 10), &[4, 8]);
    let (dm1, d0) = (e.int(-1), e.int(0));
    let f = e.boolean(false);
    let o = e.out(ScalarType::Float, &[4, 8]);
    e.run("aten::_softmax.out", &[x, dm1, f, o, o]).unwrap();
    close(&e.getf(o), golden::SOFTMAX, 1e-6);
    let ol = e.out(ScalarType::Float, &[4, 8]);
    e.run("aten::_log_softmax.out", &[x, d0, f, ol, ol])
        .unwrap();
    close(&e.getf(ol), golden::LOG_SOFTMAX0, 1e-6);

    let lx = e.t(&inp(48, 14), &[2, 3, 8]);
    let ns = e.ints(&[8]);
    let lw = e.t(&inp(8, 15), &[8]);
    let lb = e.t(&inp(8, 16), &[8]);
    let eps = e.dbl(1e-5);
    let (o0, o1, o2) = (
        e.out(ScalarType::Float, &[2, 3, 8]),
        e.out(ScalarType::Float, &[2, 3, 1]),
        e.out(ScalarType::Float, &[2, 3, 1]),
    );
    let ret = e.list(&[o0, o1, o2]);
    e.run(
        "aten::native_layer_norm.out",
        &[lx, ns, lw, lb, eps, o0, o1, o2, ret],
    )
    .unwrap();
    close(&e.getf(o0), golden::LN, 1e-5);
    close(&e.getf(o1), golden::LN_MEAN, 1e-6);
    close(&e.getf(o2), golden::LN_RSTD, 1e-5);

    let bx = e.t(&inp(24, 17), &[2, 3, 2, 2]);
    let bw = e.t(&inp(3, 18), &[3]);
    let bb = e.t(&inp(3, 19), &[3]);
    let rm = e.t(&inp(3, 20), &[3]);
    let rv = e.t(golden::BN_RV, &[3]);
    let mom = e.dbl(0.1);
    let (b0, b1, b2) = (
        e.out(ScalarType::Float, &[2, 3, 2, 2]),
        e.out(ScalarType::Float, &[0]),
        e.out(ScalarType::Float, &[0]),
    );
    let ret = e.list(&[b0, b1, b2]);
    e.run(
        "aten::_native_batch_norm_legit_no_training.out",
        &[bx, bw, bb, rm, rv, mom, eps, b0, b1, b2, ret],
    )
    .unwrap();
    close(&e.getf(b0), golden::BN, 1e-5);
}

#[test]
fn reductions() {
    let mut e = Env::default();
    let x = e.t(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let d = e.ints(&[0]);
    let f = e.boolean(false);
    let t = e.boolean(true);
    let n = e.none();
    let o = e.out(ScalarType::Float, &[3]);
    e.run("aten::mean.out", &[x, d, f, n, o, o]).unwrap();
    assert_eq!(e.get::<f32>(o), vec![2.5, 3.5, 4.5]);
    let all = e.ints(&[]);
    let s = e.out(ScalarType::Float, &[]);
    e.run("aten::sum.IntList_out", &[x, all, f, n, s, s])
        .unwrap();
    assert_eq!(e.get::<f32>(s), vec![21.0]);
    let dn = e.ints(&[-1, -2]);
    let k = e.out(ScalarType::Float, &[1, 1]);
    e.run("aten::mean.out", &[x, dn, t, n, k, k]).unwrap();
    assert_eq!(e.get::<f32>(k), vec![3.5]);
    // sum of ints into Long, amax over dim 1.
    let xi = e.t(&[1i32, 2, 3, 4], &[2, 2]);
    let d1 = e.ints(&[1]);
    let long = e.int(ScalarType::Long as i64);
    let si = e.out(ScalarType::Long, &[2]);
    e.run("aten::sum.IntList_out", &[xi, d1, f, long, si, si])
        .unwrap();
    assert_eq!(e.get::<i64>(si), vec![3, 7]);
    let am = e.out(ScalarType::Float, &[2, 1]);
    e.run("aten::amax.out", &[x, d1, t, am, am]).unwrap();
    assert_eq!(e.get::<f32>(am), vec![3.0, 6.0]);
    // argmax: first index wins ties.
    let y = e.t(&[1.0f32, 3.0, 3.0, 0.0, -1.0, -1.0], &[2, 3]);
    let dm = e.int(-1);
    let ai = e.out(ScalarType::Long, &[2]);
    e.run("aten::argmax.out", &[y, dm, f, ai, ai]).unwrap();
    assert_eq!(e.get::<i64>(ai), vec![1, 0]);
    // any over the last dim with keepdim.
    let b = e.t(&[0u8, 1, 0, 0], &[2, 2]);
    let b = {
        let imp = e.imp(b).with_dtype(ScalarType::Bool);
        e.vals[b as usize] = EValue::Tensor(imp);
        b
    };
    let ao = e.out(ScalarType::Bool, &[2, 1]);
    e.run("aten::any.out", &[b, dm, t, ao, ao]).unwrap();
    assert_eq!(e.get::<u8>(ao), vec![1, 0]);
}

#[test]
fn topk_sorted_with_ties() {
    let mut e = Env::default();
    let x = e.t(&[1.0f32, 5.0, 3.0, 5.0, 2.0, 0.0, 0.0, 9.0], &[2, 4]);
    let k = e.int(3);
    let d = e.int(-1);
    let (t, f) = (e.boolean(true), e.boolean(false));
    let v = e.out(ScalarType::Float, &[2, 3]);
    let i = e.out(ScalarType::Long, &[2, 3]);
    let ret = e.list(&[v, i]);
    e.run("aten::topk.values", &[x, k, d, t, t, v, i, ret])
        .unwrap();
    assert_eq!(e.get::<f32>(v), vec![5.0, 5.0, 3.0, 9.0, 2.0, 0.0]);
    assert_eq!(e.get::<i64>(i), vec![1, 3, 2, 3, 0, 1]);
    e.run("aten::topk.values", &[x, k, d, f, t, v, i, ret])
        .unwrap();
    assert_eq!(e.get::<f32>(v), vec![1.0, 3.0, 5.0, 0.0, 0.0, 2.0]);
    assert_eq!(e.get::<i64>(i), vec![0, 2, 1, 1, 2, 0]);
    let big = e.int(5);
    code(
        e.run("aten::topk.values", &[x, big, d, t, t, v, i, ret]),
        ErrorCode::InvalidArgument,
    );
}

// ---------------------------------------------------------------- indexing

#[test]
fn embedding_and_gather() {
    let mut e = Env::default();
    let w = e.t(&[0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2]);
    let ix = e.t(&[2i64, 0, 1, 2], &[2, 2]);
    let (m1, f) = (e.int(-1), e.boolean(false));
    let o = e.out(ScalarType::Float, &[2, 2, 2]);
    e.run("aten::embedding.out", &[w, ix, m1, f, f, o, o])
        .unwrap();
    assert_eq!(
        e.get::<f32>(o),
        vec![20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 20.0, 21.0]
    );
    let bad = e.t(&[3i64], &[1]);
    let ob = e.out(ScalarType::Float, &[1, 2]);
    code(
        e.run("aten::embedding.out", &[w, bad, m1, f, f, ob, ob]),
        ErrorCode::InvalidArgument,
    );

    let d1 = e.int(1);
    // PyTorch's gather rejects negative indices (see the op table), so none here.
    let gi = e.t(&[1i64, 0, 1, 1], &[2, 2]);
    let go = e.out(ScalarType::Float, &[2, 2]);
    let sg = e.boolean(false);
    e.run("aten::gather.out", &[w, d1, gi, sg, go, go]).unwrap();
    assert_eq!(e.get::<f32>(go), vec![1.0, 0.0, 11.0, 11.0]);
    let gbad = e.t(&[2i64, 0, 0, 0], &[2, 2]);
    code(
        e.run("aten::gather.out", &[w, d1, gbad, sg, go, go]),
        ErrorCode::InvalidArgument,
    );

    let d0 = e.int(0);
    let si = e.t(&[2i64, 2], &[2]);
    let so = e.out(ScalarType::Float, &[2, 2]);
    e.run("aten::index_select.out", &[w, d0, si, so, so])
        .unwrap();
    assert_eq!(e.get::<f32>(so), vec![20.0, 21.0, 20.0, 21.0]);

    // x[:, [1, 0]] on a [3, 2] tensor, via index.Tensor with a leading None.
    let col = e.t(&[1i64, 0], &[2]);
    let list = e.push(EValue::OptionalTensorList(vec![None, Some(col)].into()));
    let io = e.out(ScalarType::Float, &[3, 2]);
    e.run("aten::index.Tensor_out", &[w, list, io, io]).unwrap();
    assert_eq!(e.get::<f32>(io), vec![1.0, 0.0, 11.0, 10.0, 21.0, 20.0]);
}

#[test]
fn boolean_mask_index_resizes_the_out_within_its_capacity() {
    let mut e = Env::default();
    let w = e.t(&[0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2]);
    use etch_kernels::util::Bool;
    let mask = e.t(&[Bool(1), Bool(0), Bool(1)], &[3]);
    let list = e.push(EValue::OptionalTensorList(vec![Some(mask)].into()));
    // The out's capacity (3×2) bounds the data-dependent result (2×2): resized down.
    let o = e.dyn_out(ScalarType::Float, &[3, 2]);
    e.run("aten::index.Tensor_out", &[w, list, o, o]).unwrap();
    assert_eq!(e.sizes(o), vec![2, 2]);
    assert_eq!(e.get::<f32>(o), vec![0.0, 1.0, 20.0, 21.0]);
    // A result larger than the out's capacity is a typed error, not a panic.
    let small = e.dyn_out(ScalarType::Float, &[1, 2]);
    code(
        e.run("aten::index.Tensor_out", &[w, list, small, small]),
        ErrorCode::InvalidArgument,
    );
}

// ---------------------------------------------------------------- shape ops

#[test]
fn tiled_transposes_match_a_plain_copy() {
    // Odd sizes around the 32×32 tiles, batched and not, several thread counts.
    for (sizes, perm) in [
        (vec![70usize, 45], vec![1i64, 0]),
        (vec![400, 333], vec![1, 0]), // large enough to split over threads
        (vec![3, 40, 33], vec![0, 2, 1]),
        (vec![5, 2, 37, 64], vec![2, 1, 0, 3]),
        (vec![2, 65, 3, 31], vec![0, 3, 2, 1]),
    ] {
        let n: usize = sizes.iter().product();
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let out_sizes: Vec<usize> = perm.iter().map(|&d| sizes[d as usize]).collect();
        // The expected result, index by index.
        let mut in_strides = vec![1usize; sizes.len()];
        for d in (0..sizes.len() - 1).rev() {
            in_strides[d] = in_strides[d + 1] * sizes[d + 1];
        }
        let mut want = Vec::with_capacity(n);
        let mut idx = vec![0usize; sizes.len()];
        for _ in 0..n {
            let off: usize = idx
                .iter()
                .zip(&perm)
                .map(|(&i, &d)| i * in_strides[d as usize])
                .sum();
            want.push(off as f32);
            for k in (0..idx.len()).rev() {
                idx[k] += 1;
                if idx[k] < out_sizes[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        for threads in [1, 3] {
            etch_kernels::threads::set_num_threads(threads);
            let mut e = Env::default();
            let x = e.t(&data, &sizes);
            let p = e.ints(&perm);
            let o = e.out(ScalarType::Float, &out_sizes);
            e.run("aten::permute_copy.out", &[x, p, o, o]).unwrap();
            assert_eq!(e.get::<f32>(o), want, "{sizes:?} by {perm:?}");
        }
        etch_kernels::threads::set_num_threads(0);
    }
}

#[test]
fn view_like_copies() {
    let mut e = Env::default();
    let x = e.t(&[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    let perm = e.ints(&[1, 0]);
    let p = e.out(ScalarType::Float, &[3, 2]);
    e.run("aten::permute_copy.out", &[x, perm, p, p]).unwrap();
    assert_eq!(e.get::<f32>(p), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let sz = e.ints(&[-1, 2]);
    let v = e.out(ScalarType::Float, &[3, 2]);
    e.run("aten::view_copy.out", &[x, sz, v, v]).unwrap();
    assert_eq!(e.get::<f32>(v), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let bad = e.ints(&[4, -1]);
    code(
        e.run("aten::view_copy.out", &[x, bad, v, v]),
        ErrorCode::InvalidArgument,
    );

    let r = e.t(&[1.0f32, 2.0], &[2, 1]);
    let es = e.ints(&[2, 2, -1, 3]);
    let f = e.boolean(false);
    let ex = e.out(ScalarType::Float, &[2, 2, 1, 3]);
    code(
        e.run("aten::expand_copy.out", &[r, es, f, ex, ex]),
        ErrorCode::InvalidArgument,
    );
    let es = e.ints(&[2, 2, 3]);
    let ex = e.out(ScalarType::Float, &[2, 2, 3]);
    e.run("aten::expand_copy.out", &[r, es, f, ex, ex]).unwrap();
    assert_eq!(
        e.get::<f32>(ex),
        vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    );

    let (d0, d1, dm2) = (e.int(0), e.int(1), e.int(-2));
    let sel = e.out(ScalarType::Float, &[2]);
    e.run("aten::select_copy.int_out", &[x, d1, dm2, sel, sel])
        .unwrap();
    assert_eq!(e.get::<f32>(sel), vec![1.0, 4.0]);
    let u = e.out(ScalarType::Float, &[2, 1, 3]);
    e.run("aten::unsqueeze_copy.out", &[x, d1, u, u]).unwrap();
    let sq = e.ints(&[-2, 0]);
    let so = e.out(ScalarType::Float, &[2, 3]);
    e.run("aten::squeeze_copy.dims_out", &[u, sq, so, so])
        .unwrap();
    assert_eq!(e.get::<f32>(so), e.get::<f32>(x));

    // slice [:, 1::2] and cat along dim 1 (with an empty 1-D tensor skipped).
    let (st, en, step) = (e.int(1), e.none(), e.int(2));
    let sl = e.out(ScalarType::Float, &[2, 1]);
    e.run(
        "aten::slice_copy.Tensor_out",
        &[x, d1, st, en, step, sl, sl],
    )
    .unwrap();
    assert_eq!(e.get::<f32>(sl), vec![1.0, 4.0]);
    let empty = e.t::<f32>(&[], &[0]);
    let l = e.list(&[x, empty, sl]);
    let c = e.out(ScalarType::Float, &[2, 4]);
    e.run("aten::cat.out", &[l, d1, c, c]).unwrap();
    assert_eq!(
        e.get::<f32>(c),
        vec![0.0, 1.0, 2.0, 1.0, 3.0, 4.0, 5.0, 4.0]
    );

    // split_with_sizes into preallocated outs.
    let (a, b) = (
        e.out(ScalarType::Float, &[2, 1]),
        e.out(ScalarType::Float, &[2, 2]),
    );
    let outs = e.list(&[a, b]);
    let sizes = e.ints(&[1, 2]);
    e.run("aten::split_with_sizes_copy.out", &[x, sizes, d1, outs])
        .unwrap();
    assert_eq!(e.get::<f32>(a), vec![0.0, 3.0]);
    assert_eq!(e.get::<f32>(b), vec![1.0, 2.0, 4.0, 5.0]);
    let _ = d0;

    // A 0-d tensor cannot be split or unbound (found by tests/robustness.rs).
    let s0 = e.t(&[1f32], &[]);
    let o0 = e.out(ScalarType::Float, &[]);
    let outs0 = e.list(&[o0]);
    let z = e.int(0);
    let one = e.ints(&[1]);
    for (op, args) in [
        ("aten::split_with_sizes_copy.out", vec![s0, one, z, outs0]),
        ("aten::split_copy.Tensor_out", vec![s0, z, z, outs0]),
        ("aten::unbind_copy.int_out", vec![s0, z, outs0]),
    ] {
        code(e.run(op, &args), ErrorCode::InvalidArgument);
    }
}

#[test]
fn dim_order_and_dtype_conversions() {
    let mut e = Env::default();
    // The two_methods pattern: a Long 0-d constant converted to Float.
    let l = e.t(&[2i64], &[]);
    let f = e.boolean(false);
    let empty = e.ints(&[]);
    let o = e.out(ScalarType::Float, &[]);
    e.run(
        "dim_order_ops::_to_dim_order_copy.out",
        &[l, f, empty, o, o],
    )
    .unwrap();
    assert_eq!(e.get::<f32>(o), vec![2.0]);

    // Contiguous -> channels-last -> contiguous round trip.
    let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = e.t(&data, &[1, 2, 3, 4]);
    let cl_order = e.ints(&[0, 2, 3, 1]);
    let cl = e.out_ordered(ScalarType::Float, &[1, 2, 3, 4], &[0, 2, 3, 1]);
    e.run(
        "dim_order_ops::_to_dim_order_copy.out",
        &[x, f, cl_order, cl, cl],
    )
    .unwrap();
    let mem = e.get::<f32>(cl);
    assert_eq!(&mem[..4], &[0.0, 12.0, 1.0, 13.0]);
    let contig = e.ints(&[0, 1, 2, 3]);
    let back = e.out(ScalarType::Float, &[1, 2, 3, 4]);
    e.run(
        "dim_order_ops::_clone_dim_order.out",
        &[cl, f, contig, back, back],
    )
    .unwrap();
    assert_eq!(e.get::<f32>(back), data);
    // A dim_order argument that does not match the out tensor is refused.
    code(
        e.run(
            "dim_order_ops::_clone_dim_order.out",
            &[cl, f, cl_order, back, back],
        ),
        ErrorCode::InvalidArgument,
    );

    // In-place copy_ (the stateful fixture) with broadcasting and dtype conversion.
    let buf = e.t(&[0.0f32; 4], &[4]);
    let src = e.t(&[7i64], &[1]);
    e.run("aten::copy_", &[buf, src, f, buf]).unwrap();
    assert_eq!(e.get::<f32>(buf), vec![7.0; 4]);

    let fl = e.t(&[0.0f32; 4], &[2, 2]);
    let v = e.int(0);
    let m = e.int(1);
    let fo = e.out(ScalarType::Float, &[2, 2]);
    e.run("aten::full_like.out", &[fl, v, m, fo, fo]).unwrap();
    assert_eq!(e.get::<f32>(fo), vec![0.0; 4]);
    let (s0, s1, st) = (e.int(0), e.int(5), e.int(2));
    let ar = e.dyn_out(ScalarType::Long, &[8]);
    e.run("aten::arange.start_out", &[s0, s1, st, ar, ar])
        .unwrap();
    assert_eq!(e.get::<i64>(ar), vec![0, 2, 4]);
}

// ---------------------------------------------------------------- prim ops

#[test]
fn prim_ops() {
    let mut e = Env::default();
    let (a, b) = (e.int(-7), e.int(2));
    let r = e.none();
    e.run("executorch_prim::floordiv.Scalar", &[a, b, r])
        .unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Int(-4)));
    e.run("executorch_prim::mod.Scalar", &[a, b, r]).unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Int(1)));
    e.run("executorch_prim::truediv.Scalar", &[a, b, r])
        .unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Double(v) if v == -3.5));
    let z = e.int(0);
    code(
        e.run("executorch_prim::floordiv.Scalar", &[a, z, r]),
        ErrorCode::InvalidArgument,
    );
    let h = e.dbl(0.5);
    e.run("executorch_prim::mul.Scalar", &[a, h, r]).unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Double(v) if v == -3.5));
    e.run("executorch_prim::lt.Scalar", &[a, b, r]).unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Bool(true)));

    let x = e.t(&[0.0f32; 6], &[2, 3]);
    let dm1 = e.int(-1);
    e.run("aten::sym_size.int", &[x, dm1, r]).unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Int(3)));
    e.run("aten::sym_numel", &[x, r]).unwrap();
    assert!(matches!(e.vals[r as usize], EValue::Int(6)));

    let sz = e.ints(&[3, -1]);
    let v = e.out(ScalarType::Float, &[3, 2]);
    e.run("executorch_prim::et_view.default", &[x, sz, v])
        .unwrap();
    assert_eq!(e.sizes(v), vec![3, 2]);
    assert_eq!(e.imp(v).data_ptr(), e.imp(x).data_ptr());
}

#[test]
fn fixture_operators_are_registered() {
    let reg = portable_registry();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/OPS.md");
    let Ok(ops) = std::fs::read_to_string(path) else {
        return; // The fixtures are generated separately.
    };
    for line in ops.lines().filter(|l| l.starts_with("- `")) {
        let name = line[3..].split('`').next().unwrap_or("");
        let name = name.replace(" (overload \"\")", "");
        if name.starts_with("et_copy::") {
            continue;
        }
        assert!(reg.contains(&name), "{name} is not registered");
    }
}
