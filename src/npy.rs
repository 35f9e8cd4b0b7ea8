//! Reading and writing NumPy `.npy` files (format versions 1–3, little-endian, C order).

use crate::{Error, Result, ScalarType, Tensor};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

fn descr_to_dtype(descr: &str) -> Result<ScalarType> {
    Ok(match descr {
        "<f4" => ScalarType::Float,
        "<f8" => ScalarType::Double,
        "<f2" => ScalarType::Half,
        "<i8" => ScalarType::Long,
        "<i4" => ScalarType::Int,
        "<i2" => ScalarType::Short,
        "|i1" => ScalarType::Char,
        "|u1" => ScalarType::Byte,
        "|b1" => ScalarType::Bool,
        "<u2" => ScalarType::UInt16,
        "<u4" => ScalarType::UInt32,
        "<u8" => ScalarType::UInt64,
        other => {
            return Err(Error::not_supported(format!(
                "unsupported .npy dtype '{other}' (supported: float16/32/64, int8/16/32/64, uint8/16/32/64, bool; little-endian)"
            )));
        }
    })
}

fn dtype_to_descr(t: ScalarType) -> Result<&'static str> {
    Ok(match t {
        ScalarType::Float => "<f4",
        ScalarType::Double => "<f8",
        ScalarType::Half => "<f2",
        ScalarType::Long => "<i8",
        ScalarType::Int => "<i4",
        ScalarType::Short => "<i2",
        ScalarType::Char => "|i1",
        ScalarType::Byte => "|u1",
        ScalarType::Bool => "|b1",
        ScalarType::UInt16 => "<u2",
        ScalarType::UInt32 => "<u4",
        ScalarType::UInt64 => "<u8",
        other => {
            return Err(Error::not_supported(format!(
                "{other} cannot be written as .npy (numpy has no such dtype)"
            )));
        }
    })
}

/// Finds `'key': value` in the header dict and returns the raw value text.
fn header_field<'a>(header: &'a str, key: &str) -> Result<&'a str> {
    let pat = format!("'{key}':");
    let start = header
        .find(&pat)
        .ok_or_else(|| Error::invalid_argument(format!(".npy header has no '{key}'")))?
        + pat.len();
    let rest = header[start..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.find('\'').map(|i| i + 2)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(|| Error::invalid_argument(format!(".npy header field '{key}' is malformed")))?;
    Ok(rest[..end].trim())
}

/// Parses `.npy` bytes into a tensor.
pub fn parse(bytes: &[u8]) -> Result<Tensor> {
    let bad = |m: &str| Error::invalid_argument(format!("not a valid .npy file: {m}"));
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("missing magic"));
    }
    let major = bytes[6];
    let (hlen, hstart) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            let b = bytes.get(8..12).ok_or_else(|| bad("truncated header"))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        v => return Err(bad(&format!("unknown version {v}"))),
    };
    let header = bytes
        .get(hstart..hstart.saturating_add(hlen))
        .ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let descr = header_field(header, "descr")?.trim_matches('\'');
    let dtype = descr_to_dtype(descr)?;
    if header_field(header, "fortran_order")? != "False" {
        return Err(Error::not_supported(
            "Fortran-ordered .npy arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let shape_txt = header_field(header, "shape")?;
    let inner = shape_txt.trim_start_matches('(').trim_end_matches(')');
    let mut shape = Vec::new();
    for part in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        shape.push(
            part.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| bad(&format!("bad shape entry '{part}'")))?,
        );
    }
    let data = &bytes[hstart + hlen..];
    let need = etch_core::checked_numel(&shape)
        .and_then(|n| n.checked_mul(dtype.element_size()))
        .ok_or_else(|| bad("shape overflows"))?;
    if data.len() < need {
        return Err(bad(&format!(
            "{} data bytes for shape {shape:?} ({need} needed)",
            data.len()
        )));
    }
    Tensor::from_bytes(dtype, &shape, &data[..need])
}

/// Reads a `.npy` file.
pub fn read(path: impl AsRef<Path>) -> Result<Tensor> {
    let p = path.as_ref();
    let bytes = std::fs::read(p)
        .map_err(|e| Error::access_failed(format!("cannot read '{}': {e}", p.display())))?;
    parse(&bytes).map_err(|e| e.context(p.display()))
}

/// Serializes a tensor as `.npy` (version 1.0). BFloat16 is written as float32.
pub fn to_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let host;
    let t = if t.is_cpu() {
        t
    } else {
        host = t.to_cpu()?;
        &host
    };
    let converted;
    let t = if t.dtype() == ScalarType::BFloat16 {
        let v: Vec<f32> = t
            .as_slice::<half::bf16>()?
            .iter()
            .map(|x| x.to_f32())
            .collect();
        converted = Tensor::from_slice(&v, t.sizes())?;
        &converted
    } else {
        t
    };
    let descr = dtype_to_descr(t.dtype())?;
    let shape = match t.sizes().len() {
        0 => "()".to_string(),
        1 => format!("({},)", t.sizes()[0]),
        _ => format!(
            "({})",
            t.sizes()
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let data = t.as_bytes()?;
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    Ok(out)
}

/// Writes a tensor to a `.npy` file.
pub fn write(path: impl AsRef<Path>, t: &Tensor) -> Result<()> {
    let p = path.as_ref();
    std::fs::write(p, to_bytes(t)?)
        .map_err(|e| Error::access_failed(format!("cannot write '{}': {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Tensor::from_slice(&[1.0f32, -2.0, 3.5, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
        let b = to_bytes(&t).unwrap();
        assert_eq!((b.len() - t.nbytes()) % 64, 0);
        let r = parse(&b).unwrap();
        assert_eq!(r.sizes(), &[2, 3]);
        assert_eq!(r.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
        let s = Tensor::scalar(7i64).unwrap();
        let r = parse(&to_bytes(&s).unwrap()).unwrap();
        assert_eq!(r.sizes(), &[] as &[usize]);
        assert_eq!(r.to_vec::<i64>().unwrap(), vec![7]);
        assert!(parse(&b[..20]).is_err());
        assert!(parse(b"garbage!!!!!").is_err());
    }
}
