//! The Module / MethodMeta / Method API: metadata, input checking and error codes.

mod common;

use common::fixtures_dir;
use etch::{ErrorCode, KernelRegistry, Module, ScalarType, Tag, Tensor, Value};
use std::sync::Arc;

fn module(name: &str) -> Module {
    Module::from_file(fixtures_dir().join(name).join("model.pte")).unwrap()
}

#[test]
fn method_meta_describes_inputs_outputs_and_buffers() {
    let m = module("mlp");
    assert_eq!(m.method_names(), ["forward"]);
    let meta = m.method_meta("forward").unwrap();
    assert_eq!(meta.num_inputs(), 1);
    assert_eq!(meta.num_outputs(), 1);
    let i = meta.input(0).unwrap();
    assert_eq!(i.tag, Tag::Tensor);
    let t = i.tensor.as_ref().unwrap();
    assert_eq!(t.dtype, ScalarType::Float);
    assert_eq!(t.sizes, [4, 16]);
    assert_eq!(t.dim_order, [0, 1]);
    assert_eq!(t.nbytes, 4 * 16 * 4);
    assert!(t.is_memory_planned);
    assert_eq!(meta.num_memory_planned_buffers(), 1);
    assert_eq!(meta.memory_planned_buffer_size(0).unwrap(), 2816);
    assert_eq!(
        meta.memory_planned_buffer_device(0).unwrap(),
        etch::Device::CPU
    );
    let e = meta.memory_planned_buffer_size(1).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(meta.memory_planned_buffer_device(1).is_err());
    assert!(meta.input(1).is_err());
    assert!(meta.operators().iter().any(|o| o == "aten::addmm.out"));
    assert_eq!(
        m.method_meta("nope").unwrap_err().code(),
        ErrorCode::NotFound
    );
}

#[test]
fn missing_operators_are_all_named_at_load() {
    let mut m = module("cnn").with_kernels(Arc::new(KernelRegistry::new()));
    let e = m.load_method("forward").unwrap_err();
    assert_eq!(e.code(), ErrorCode::OperatorMissing);
    for op in [
        "aten::convolution.out",
        "aten::_native_batch_norm_legit_no_training.out",
        "aten::relu.out",
        "aten::max_pool2d_with_indices.out",
        "aten::mean.out",
        "aten::addmm.out",
    ] {
        assert!(e.message().contains(op), "{op} not named in: {e}");
    }
}

#[test]
fn inputs_are_checked() {
    let mut m = module("mlp");
    let method = m.method("forward").unwrap();
    // Not set yet.
    assert_eq!(
        method.execute().unwrap_err().code(),
        ErrorCode::InvalidState
    );
    // Wrong dtype.
    let x = Tensor::zeros(ScalarType::Double, &[4, 16]).unwrap();
    let e = method.set_input(0, &Value::Tensor(x)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.message().contains("float32"), "{e}");
    // Wrong shape of a static input.
    let x = Tensor::zeros(ScalarType::Float, &[4, 15]).unwrap();
    assert_eq!(
        method.set_input(0, &Value::Tensor(x)).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    // Wrong rank, wrong tag, wrong index, wrong count.
    let x = Tensor::zeros(ScalarType::Float, &[64]).unwrap();
    assert!(method.set_input(0, &Value::Tensor(x)).is_err());
    assert_eq!(
        method.set_input(0, &Value::Int(3)).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    let x = Tensor::zeros(ScalarType::Float, &[4, 16]).unwrap();
    assert!(method.set_input(1, &Value::Tensor(x.clone())).is_err());
    assert!(method.set_inputs(&[]).is_err());
    // Right.
    method.set_input(0, &Value::Tensor(x)).unwrap();
    method.execute().unwrap();
    let out = method.output_tensor(0).unwrap();
    assert_eq!(out.sizes(), &[4, 10]);
    // Softmax rows of a zero input sum to one.
    let v = out.data::<f32>().unwrap();
    for row in v.chunks(10) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
    assert!(method.output_tensor(1).is_err());
}

#[test]
fn dynamic_inputs_resize_within_their_bound() {
    let mut m = module("dynamic_batch");
    let meta = m.method_meta("forward").unwrap();
    let t = meta.input(0).unwrap().tensor.clone().unwrap();
    assert_eq!(t.dynamism, etch::Dynamism::DynamicBound);
    assert_eq!(t.sizes, [32, 8]);
    let method = m.method("forward").unwrap();
    for batch in [32, 5, 1, 17] {
        let x = Tensor::zeros(ScalarType::Float, &[batch, 8]).unwrap();
        method.set_inputs(&[Value::Tensor(x)]).unwrap();
        method.execute().unwrap();
        assert_eq!(method.output_tensor(0).unwrap().sizes(), &[batch, 4]);
    }
    let x = Tensor::zeros(ScalarType::Float, &[33, 8]).unwrap();
    let e = method.set_inputs(&[Value::Tensor(x)]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let x = Tensor::zeros(ScalarType::Float, &[2, 9]).unwrap();
    assert!(method.set_inputs(&[Value::Tensor(x)]).is_err());
}

#[test]
fn bytes_and_file_loading_agree() {
    let bytes = std::fs::read(fixtures_dir().join("mlp/model.pte")).unwrap();
    let mut a = Module::from_bytes(&bytes).unwrap();
    let mut b = module("mlp");
    let x = Value::Tensor(Tensor::from_slice(&[0.25f32; 64], &[4, 16]).unwrap());
    let oa = a.forward(std::slice::from_ref(&x)).unwrap();
    let ob = b.forward(&[x]).unwrap();
    assert_eq!(
        oa[0].as_tensor().unwrap().to_vec::<f32>().unwrap(),
        ob[0].as_tensor().unwrap().to_vec::<f32>().unwrap()
    );
}

#[test]
fn not_a_program_is_invalid_program() {
    let e = Module::from_bytes(b"\x1c\x00\x00\x00XX12 and some more bytes").unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProgram);
    assert!(e.message().contains("ET12"), "{e}");
    let e = Module::from_file("/does/not/exist.pte").unwrap_err();
    assert_eq!(e.code(), ErrorCode::AccessFailed);
}

#[test]
fn unknown_backend_is_a_load_error_that_names_it() {
    let path = fixtures_dir().join("misc/xnnpack_linear.pte");
    // A registry without the XNNPACK backend etch registers by default.
    let mut m = Module::from_file(&path)
        .unwrap()
        .with_backends(std::sync::Arc::new(etch::BackendRegistry::new()));
    let meta = m.method_meta("forward").unwrap();
    assert!(meta.uses_backend("XnnpackBackend"));
    assert!(meta.delegates()[0].blob_size > 0);
    let e = m.load_method("forward").unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("XnnpackBackend"), "{e}");
    // The default registry runs it.
    let mut m = Module::from_file(&path).unwrap();
    m.load_method("forward").unwrap();
}

#[test]
fn kernel_outputs_overlapping_inputs_are_rejected() {
    // Found by the fuzzer (fuzz/load_and_run): a mutated transformer whose `mul` output is
    // planned over its input. Running it would alias a kernel's input and output.
    let path = fixtures_dir().join("misc/fuzz_out_overlaps_input.pte");
    let mut m = Module::from_file(path).unwrap();
    let e = m.load_method("forward").unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProgram);
    assert!(e.message().contains("overlaps"), "{e}");
}
