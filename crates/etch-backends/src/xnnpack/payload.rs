//! The XNNPACK delegate's processed payload: an optional `XH00` header, the XNNPACK graph
//! flatbuffer, and the constant data segment (executorch's `xnnpack_graph_serialize.py`).
//!
//! Header layout (little-endian), 30 bytes, written padded to 16:
//!
//! | bytes  | field                               |
//! |--------|-------------------------------------|
//! | 0..4   | zeros (the flatbuffer root offset slot) |
//! | 4..8   | magic `XH00`                        |
//! | 8..10  | header length (u16, 30)             |
//! | 10..14 | flatbuffer offset (u32)             |
//! | 14..18 | flatbuffer size (u32)               |
//! | 18..22 | constant data offset (u32)          |
//! | 22..30 | constant data size (u64)            |
//!
//! The magic sits where a flatbuffer's file identifier does, so a payload without the
//! header (older exporters) is a bare flatbuffer with identifier `XN00` or `XN01`.

use etch_core::{Error, Result};

/// The header's magic.
pub const HEADER_MAGIC: &[u8; 4] = b"XH00";
/// The header's length as serialized (before padding).
pub const HEADER_LEN: usize = 30;
/// File identifiers of the XNNPACK graph flatbuffer this reader accepts.
pub const GRAPH_IDENTIFIERS: [&[u8; 4]; 2] = [b"XN01", b"XN00"];

/// The parts of a payload, as range-checked slices of it.
#[derive(Debug, Clone, Copy)]
pub struct Payload<'a> {
    /// The XNNPACK graph flatbuffer.
    pub flatbuffer: &'a [u8],
    /// The constant data segment (empty when the payload has none).
    pub constant_data: &'a [u8],
}

fn le_u32(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as u64
}

/// Splits a payload into its flatbuffer and constant data, checking every range.
pub fn parse(bytes: &[u8]) -> Result<Payload<'_>> {
    if bytes.len() < 8 {
        return Err(Error::invalid_program(format!(
            "XNNPACK payload of {} bytes is too short",
            bytes.len()
        )));
    }
    let magic = &bytes[4..8];
    if magic != HEADER_MAGIC {
        if GRAPH_IDENTIFIERS.iter().any(|id| magic == &id[..]) {
            return Ok(Payload {
                flatbuffer: bytes,
                constant_data: &[],
            });
        }
        return Err(Error::invalid_program(format!(
            "XNNPACK payload starts with neither the XH00 header nor an XN00/XN01 flatbuffer (bytes 4..8 are {magic:02x?})"
        )));
    }
    if bytes.len() < HEADER_LEN {
        return Err(Error::invalid_program(format!(
            "XNNPACK payload of {} bytes is shorter than its {HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    if header_len < HEADER_LEN {
        return Err(Error::invalid_program(format!(
            "XNNPACK header declares {header_len} bytes; at least {HEADER_LEN} expected"
        )));
    }
    let fb_off = le_u32(bytes, 10);
    let fb_len = le_u32(bytes, 14);
    let cd_off = le_u32(bytes, 18);
    let cd_len = u64::from_le_bytes(bytes[22..30].try_into().expect("8 bytes"));
    let fb = etch_format::checked_range(fb_off, fb_len, bytes.len(), "XNNPACK flatbuffer")?;
    let cd = etch_format::checked_range(cd_off, cd_len, bytes.len(), "XNNPACK constant data")?;
    if fb.is_empty() || fb.start < header_len || cd.start < fb.end {
        return Err(Error::invalid_program(format!(
            "XNNPACK header: flatbuffer at {fb:?} and constant data at {cd:?} overlap the header or each other"
        )));
    }
    Ok(Payload {
        flatbuffer: &bytes[fb],
        constant_data: &bytes[cd],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(fb_off: u32, fb_len: u32, cd_off: u32, cd_len: u64) -> Vec<u8> {
        let mut h = vec![0u8; 4];
        h.extend_from_slice(HEADER_MAGIC);
        h.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        h.extend_from_slice(&fb_off.to_le_bytes());
        h.extend_from_slice(&fb_len.to_le_bytes());
        h.extend_from_slice(&cd_off.to_le_bytes());
        h.extend_from_slice(&cd_len.to_le_bytes());
        h.resize(32, 0);
        h
    }

    #[test]
    fn splits_a_payload() {
        let mut b = header(32, 8, 48, 4);
        b.extend_from_slice(&[1; 16]);
        b.extend_from_slice(&[2; 4]);
        let p = parse(&b).unwrap();
        assert_eq!(p.flatbuffer, &[1; 8]);
        assert_eq!(p.constant_data, &[2; 4]);
    }

    #[test]
    fn bare_flatbuffers_have_no_constant_data() {
        let b = [0, 0, 0, 0, b'X', b'N', b'0', b'1', 0, 0];
        let p = parse(&b).unwrap();
        assert_eq!(p.flatbuffer.len(), 10);
        assert!(p.constant_data.is_empty());
    }

    #[test]
    fn bad_payloads_are_typed_errors() {
        for b in [
            vec![],
            vec![0; 7],
            b"\0\0\0\0XX00zzzz".to_vec(),
            header(32, 8, 48, 4)[..20].to_vec(),
            header(32, 8, 48, 4), // ranges past the end
            header(32, 0, 32, 0), // empty flatbuffer
            {
                let mut b = header(0, 8, 48, 0); // flatbuffer over the header
                b.resize(64, 0);
                b
            },
            {
                let mut b = header(32, 20, 40, 0); // constant data inside the flatbuffer
                b.resize(64, 0);
                b
            },
            {
                let mut b = header(32, 8, 48, u64::MAX);
                b.resize(64, 0);
                b
            },
        ] {
            let e = parse(&b).unwrap_err();
            assert_eq!(e.code(), etch_core::ErrorCode::InvalidProgram, "{e}");
        }
    }
}
