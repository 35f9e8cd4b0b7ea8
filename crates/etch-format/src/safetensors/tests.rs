//! Checkpoints made in memory or in temporary files: stacking at the real model's scale,
//! dtype conversion, caching, tensors of unsupported dtypes that are never requested, and
//! tensors streamed as sources (the device path) equal to the ones built on the host.

use super::{Safetensors, WeightOptions};
use crate::{DataSource, NamedDataMap, TensorLayout};
use etch_core::{ByteSource, ErrorCode, ScalarType, bf16};
use safetensors::tensor::{Dtype, TensorView, serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// A checkpoint of `(name, dtype, shape, bytes)` tensors.
fn checkpoint(
    tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)],
    options: WeightOptions,
) -> Safetensors {
    let views = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()));
    let bytes = serialize(views, None).unwrap();
    let mut s = Safetensors::new(options);
    s.add(Arc::new(DataSource::copy_from(&bytes).unwrap()), "memory")
        .unwrap();
    s
}

fn f32_bytes(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn layout(dtype: ScalarType, sizes: &[i64]) -> TensorLayout {
    TensorLayout {
        dtype,
        sizes: sizes.to_vec(),
        dim_order: (0..sizes.len() as u8).collect(),
    }
}

/// Value `j` of part `p` (0 gate, 1 up, 2 down) of expert `e` in layer `l`: exact in f32.
fn value(l: usize, e: usize, p: usize, j: usize) -> f32 {
    (((l * 256 + e) * 3 + p) * 2 + j) as f32
}

#[test]
fn stacks_256_experts_of_40_layers_in_order() {
    let (layers, experts) = (40, 256);
    let mut tensors = Vec::new();
    for l in 0..layers {
        for e in 0..experts {
            let p = format!("model.language_model.layers.{l}.mlp.experts.{e}");
            for (i, (proj, shape)) in [
                ("gate_proj", [1, 2]),
                ("up_proj", [1, 2]),
                ("down_proj", [2, 1]),
            ]
            .into_iter()
            .enumerate()
            {
                let data = f32_bytes((0..2).map(|j| value(l, e, i, j)));
                tensors.push((
                    format!("{p}.{proj}.weight"),
                    Dtype::F32,
                    shape.to_vec(),
                    data,
                ));
            }
        }
    }
    let ck = checkpoint(&tensors, WeightOptions::default());
    for l in [0, 17, 39] {
        let key = format!("model.layers.{l}.mlp.experts.gate_up_proj");
        let b = ck
            .get_tensor(&key, &layout(ScalarType::Float, &[256, 2, 2]))
            .unwrap()
            .unwrap();
        let v = f32s(b.data);
        for e in [0, 1, 255] {
            let row = |p: usize| [value(l, e, p, 0), value(l, e, p, 1)];
            assert_eq!(v[e * 4..e * 4 + 2], row(0), "gate of expert {e}, layer {l}");
            assert_eq!(
                v[e * 4 + 2..e * 4 + 4],
                row(1),
                "up of expert {e}, layer {l}"
            );
        }
        let key = format!("model.layers.{l}.mlp.experts.down_proj");
        let b = ck
            .get_tensor(&key, &layout(ScalarType::Float, &[256, 2, 1]))
            .unwrap()
            .unwrap();
        assert_eq!(
            f32s(b.data)[2 * 200..2 * 200 + 2],
            [value(l, 200, 2, 0), value(l, 200, 2, 1)]
        );
    }
    // The program expects another expert count: an error naming both, whether or not the
    // tensor was built for an earlier request.
    let want = layout(ScalarType::Float, &[128, 2, 1]);
    let e = ck
        .get_tensor("model.layers.5.mlp.experts.down_proj", &want)
        .unwrap_err();
    assert!(
        e.message().contains("256 experts") && e.message().contains("expects 128"),
        "{e}"
    );
    let e = ck
        .get_tensor("model.layers.0.mlp.experts.down_proj", &want)
        .unwrap_err();
    assert!(
        e.message().contains("[256, 2, 1]") && e.message().contains("[128, 2, 1]"),
        "{e}"
    );
}

#[test]
fn builds_once_converts_only_when_asked() {
    let tensors: Vec<_> = (0..3)
        .flat_map(|e| {
            ["gate_proj", "up_proj", "down_proj"].map(|p| {
                let data = f32_bytes([1.0 + 1.0 / 256.0, e as f32]);
                (
                    format!("experts.{e}.{p}.weight"),
                    Dtype::F32,
                    vec![1, 2],
                    data,
                )
            })
        })
        .collect();
    let expected = layout(ScalarType::BFloat16, &[3, 2, 2]);
    let strict = checkpoint(&tensors, WeightOptions::default());
    let e = strict
        .get_tensor("experts.gate_up_proj", &expected)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProgram);
    assert!(e.message().contains("--convert-dtype"), "{e}");
    // Without an expected layout: stacked as stored.
    let native = strict.get("experts.gate_up_proj").unwrap();
    assert_eq!(native.layout.unwrap().sizes, [3, 2, 2]);
    assert_eq!(native.layout.unwrap().dtype, ScalarType::Float);

    let ck = checkpoint(
        &tensors,
        WeightOptions {
            convert_dtype: true,
        },
    );
    let a = ck
        .get_tensor("experts.gate_up_proj", &expected)
        .unwrap()
        .unwrap();
    let b = ck
        .get_tensor("experts.gate_up_proj", &expected)
        .unwrap()
        .unwrap();
    assert_eq!(a.data.as_ptr(), b.data.as_ptr(), "built once");
    assert_eq!(a.layout.unwrap().dtype, ScalarType::BFloat16);
    let got: Vec<f32> = a
        .data
        .chunks_exact(2)
        .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert_eq!(got[8..12], [1.0, 2.0, 1.0, 2.0]);
    // A stored tensor converts once too; equal dtypes stay views of the file.
    let want = layout(ScalarType::Half, &[1, 2]);
    let c = ck
        .get_tensor("experts.1.down_proj.weight", &want)
        .unwrap()
        .unwrap();
    let d = ck
        .get_tensor("experts.1.down_proj.weight", &want)
        .unwrap()
        .unwrap();
    assert_eq!(c.data.as_ptr(), d.data.as_ptr());
    let view = ck.get("experts.1.down_proj.weight").unwrap();
    assert_eq!(view.data.len(), 8);
}

#[test]
fn unsupported_dtypes_matter_only_when_requested() {
    let tensors = vec![
        ("mtp.x".to_string(), Dtype::C64, vec![1], vec![0u8; 8]),
        (
            "model.norm.weight".to_string(),
            Dtype::F32,
            vec![2],
            f32_bytes([1.0, 2.0]),
        ),
    ];
    let ck = checkpoint(&tensors, WeightOptions::default());
    let b = ck
        .get_tensor("model.norm.weight", &layout(ScalarType::Float, &[2]))
        .unwrap()
        .unwrap();
    assert_eq!(f32s(b.data), [1.0, 2.0]);
    let e = ck
        .get_tensor("mtp.x", &layout(ScalarType::Float, &[2]))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotSupported);
    assert!(
        e.message().contains("mtp.x") && e.message().contains("C64"),
        "{e}"
    );
    let e = ck
        .get_tensor("model.gone", &layout(ScalarType::Float, &[2]))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("'model.language_model.gone'"), "{e}");
}

/// A checkpoint file of `(name, dtype, shape, bytes)` tensors in a fresh temporary folder.
fn checkpoint_file(name: &str, tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) -> PathBuf {
    let views = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()));
    let bytes = serialize(views, None).unwrap();
    let dir = std::env::temp_dir().join(format!("etch-st-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Per-expert f32 tensors of one layer: `experts` experts of [rows, cols] gate/up/down.
fn experts(experts: usize, rows: usize, cols: usize) -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    let mut v = Vec::new();
    for e in 0..experts {
        for (p, proj) in ["gate_proj", "up_proj", "down_proj"].iter().enumerate() {
            let shape = if p == 2 { [cols, rows] } else { [rows, cols] };
            // Values that bf16 rounds (ties and non-ties), different in every part.
            let data = f32_bytes((0..rows * cols).map(|j| {
                let k = ((e * 3 + p) * rows * cols + j) as f32;
                1.0 + k / 1024.0 + k.sin() / 3.0
            }));
            v.push((
                format!("model.layers.0.mlp.experts.{e}.{proj}.weight"),
                Dtype::F32,
                shape.to_vec(),
                data,
            ));
        }
    }
    v.push((
        "model.norm.weight".into(),
        Dtype::F32,
        vec![rows],
        f32_bytes((0..rows).map(|j| j as f32 / 7.0)),
    ));
    v
}

/// Reads a whole source in `step`-byte pieces, in reverse order.
fn read_all(src: &dyn ByteSource, step: usize) -> Vec<u8> {
    let mut out = vec![0u8; src.len()];
    let starts: Vec<usize> = (0..src.len()).step_by(step).collect();
    for &s in starts.iter().rev() {
        let n = step.min(src.len() - s);
        src.read_into(s, &mut out[s..s + n]).unwrap();
    }
    out
}

#[test]
fn sources_give_the_bytes_the_host_builds_without_building() {
    // Small experts, and a tensor larger than a conversion block.
    let mut tensors = experts(5, 12, 20);
    tensors.push((
        "model.embed_tokens.weight".into(),
        Dtype::F32,
        vec![256, 96],
        f32_bytes((0..256 * 96).map(|j| (j as f32 * 0.37).cos() * 100.0)),
    ));
    let path = checkpoint_file("sources", &tensors);
    let convert = WeightOptions {
        convert_dtype: true,
    };
    let ck = Safetensors::open_with(&path, convert).unwrap();
    let cases = [
        ("model.layers.0.mlp.experts.gate_up_proj", vec![5, 24, 20]),
        ("model.layers.0.mlp.experts.down_proj", vec![5, 20, 12]),
        ("model.norm.weight", vec![12]),
        ("model.embed_tokens.weight", vec![256, 96]),
    ];
    for (key, sizes) in cases {
        for dtype in [ScalarType::Float, ScalarType::BFloat16, ScalarType::Half] {
            let want = layout(dtype, &sizes);
            let src = ck.get_tensor_source(key, &want).unwrap().unwrap();
            assert_eq!(src.layout.as_ref(), Some(&want), "{key} {dtype}");
            // Read from the file: never a view of the mapped pages.
            assert!(src.bytes.as_slice().is_none(), "{key} {dtype}");
            let streamed: Vec<Vec<u8>> = [64, 192, 4096, 1 << 20]
                .iter()
                .map(|&step| read_all(&*src.bytes, step))
                .collect();
            // Nothing was built for the source.
            if let Some(s) = ck.stacks.get(key) {
                assert!(s.built.slot(Some(dtype)).get().is_none(), "{key} {dtype}");
            }
            let host = ck.get_tensor(key, &want).unwrap().unwrap();
            for s in &streamed {
                assert!(s.as_slice() == host.data, "{key} {dtype}");
            }
        }
    }
    // Reads must cover whole elements of the target dtype and stay inside the tensor.
    let want = layout(ScalarType::BFloat16, &[5, 24, 20]);
    let src = ck
        .get_tensor_source("model.layers.0.mlp.experts.gate_up_proj", &want)
        .unwrap()
        .unwrap();
    let mut d = [0u8; 4];
    assert!(src.bytes.read_into(1, &mut d).is_err());
    assert!(src.bytes.read_into(src.bytes.len() - 2, &mut d).is_err());
    assert!(src.bytes.read_into(usize::MAX - 1, &mut d).is_err());
    // The same checks as the host path: dtype conversion only when asked.
    let strict = Safetensors::open(&path).unwrap();
    let e = strict
        .get_tensor_source(
            "model.layers.0.mlp.experts.down_proj",
            &layout(ScalarType::Half, &[5, 20, 12]),
        )
        .unwrap_err();
    assert!(e.message().contains("--convert-dtype"), "{e}");
    let e = strict
        .get_tensor_source(
            "model.layers.0.mlp.experts.down_proj",
            &layout(ScalarType::Float, &[4, 20, 12]),
        )
        .unwrap_err();
    assert!(e.message().contains("expects 4"), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_file_truncated_after_opening_is_an_error_when_streamed() {
    let path = checkpoint_file("truncated", &experts(3, 8, 16));
    let ck = Safetensors::open(&path).unwrap();
    let want = layout(ScalarType::Float, &[3, 16, 16]);
    let src = ck
        .get_tensor_source("model.layers.0.mlp.experts.gate_up_proj", &want)
        .unwrap()
        .unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let mut out = vec![0u8; src.bytes.len()];
    let e = src.bytes.read_into(0, &mut out).unwrap_err();
    assert_eq!(e.code(), ErrorCode::AccessFailed, "{e}");
    assert!(
        e.message()
            .contains("model.layers.0.mlp.experts.gate_up_proj")
            && e.message().contains("truncated"),
        "{e}"
    );
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
