//! Floating-point dtype conversion of checkpoint tensors (f32, bf16, f16), for weights
//! loaded with `WeightOptions::convert_dtype`. Values go through f32 and are rounded to
//! nearest, ties to even, as PyTorch's `Tensor.to(dtype)` does.

use etch_core::{Error, Result, ScalarType, bf16, f16};

/// True for the dtypes [`convert`] handles.
pub(crate) fn is_convertible(d: ScalarType) -> bool {
    matches!(
        d,
        ScalarType::Float | ScalarType::BFloat16 | ScalarType::Half
    )
}

/// Applies `f` to each `A`-byte element of `src`, writing `B`-byte elements to `dst`.
fn map<const A: usize, const B: usize>(src: &[u8], dst: &mut [u8], f: impl Fn([u8; A]) -> [u8; B]) {
    for (s, d) in src.chunks_exact(A).zip(dst.chunks_exact_mut(B)) {
        let mut a = [0u8; A];
        a.copy_from_slice(s);
        d.copy_from_slice(&f(a));
    }
}

/// Converts the elements of `src` (dtype `from`) into `dst` (dtype `to`), which must hold
/// exactly as many elements. Equal dtypes copy.
pub(crate) fn convert(src: &[u8], from: ScalarType, dst: &mut [u8], to: ScalarType) -> Result<()> {
    if from != to && !(is_convertible(from) && is_convertible(to)) {
        return Err(Error::not_supported(format!(
            "cannot convert {from} to {to}: conversion is between float32, bfloat16 and float16 only"
        )));
    }
    let n = src.len() / from.element_size().max(1);
    if !src.len().is_multiple_of(from.element_size().max(1)) || dst.len() != n * to.element_size() {
        return Err(Error::internal(format!(
            "dtype conversion of {} bytes of {from} into {} bytes of {to}",
            src.len(),
            dst.len()
        )));
    }
    use ScalarType::{BFloat16 as B, Float as F, Half as H};
    let f32_of = f32::from_le_bytes;
    match (from, to) {
        _ if from == to => dst.copy_from_slice(src),
        (F, B) => map::<4, 2>(src, dst, |a| bf16::from_f32(f32_of(a)).to_le_bytes()),
        (F, H) => map::<4, 2>(src, dst, |a| f16::from_f32(f32_of(a)).to_le_bytes()),
        (B, F) => map::<2, 4>(src, dst, |a| bf16::from_le_bytes(a).to_f32().to_le_bytes()),
        (H, F) => map::<2, 4>(src, dst, |a| f16::from_le_bytes(a).to_f32().to_le_bytes()),
        (B, H) => map::<2, 2>(src, dst, |a| {
            f16::from_f32(bf16::from_le_bytes(a).to_f32()).to_le_bytes()
        }),
        (H, B) => map::<2, 2>(src, dst, |a| {
            bf16::from_f32(f16::from_le_bytes(a).to_f32()).to_le_bytes()
        }),
        _ => {
            return Err(Error::internal(format!(
                "no conversion from {from} to {to}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_f32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn rounds_to_nearest_even_and_round_trips() {
        // 1 + 2^-8 lies halfway between two bf16 values: ties to even gives 1.0.
        let v = [1.0f32, 1.0 + 1.0 / 256.0, -3.5, 65504.0];
        let src = bytes_f32(&v);
        let mut b = vec![0u8; 8];
        convert(&src, ScalarType::Float, &mut b, ScalarType::BFloat16).unwrap();
        let mut back = vec![0u8; 16];
        convert(&b, ScalarType::BFloat16, &mut back, ScalarType::Float).unwrap();
        let got: Vec<f32> = back
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(got, [1.0, 1.0, -3.5, 65536.0]);
        let mut h = vec![0u8; 8];
        convert(&b, ScalarType::BFloat16, &mut h, ScalarType::Half).unwrap();
        assert_eq!(f16::from_le_bytes([h[4], h[5]]).to_f32(), -3.5);
        assert!(f16::from_le_bytes([h[6], h[7]]).to_f32().is_infinite());
    }

    #[test]
    fn other_dtypes_and_sizes_are_errors() {
        let mut d = vec![0u8; 8];
        let e = convert(&[0u8; 8], ScalarType::Long, &mut d, ScalarType::Float).unwrap_err();
        assert!(e.message().contains("float32, bfloat16 and float16"), "{e}");
        assert!(convert(&[0u8; 4], ScalarType::Float, &mut d, ScalarType::Half).is_err());
    }
}
