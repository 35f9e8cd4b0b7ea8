//! Scalar (element) types, with ExecuTorch's serialized values.

use crate::{Error, Result};
use half::{bf16, f16};

/// Element type of a tensor. The discriminants are the values ExecuTorch serializes
/// (`scalar_type.fbs`, the same as c10's `ScalarType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum ScalarType {
    /// `uint8`
    Byte = 0,
    /// `int8`
    Char = 1,
    /// `int16`
    Short = 2,
    /// `int32`
    Int = 3,
    /// `int64`
    Long = 4,
    /// IEEE `float16`
    Half = 5,
    /// `float32`
    Float = 6,
    /// `float64`
    Double = 7,
    /// `bool`, one byte per element
    Bool = 11,
    /// Quantized `int8`
    QInt8 = 12,
    /// Quantized `uint8`
    QUInt8 = 13,
    /// Quantized `int32`
    QInt32 = 14,
    /// `bfloat16`
    BFloat16 = 15,
    /// Two 4-bit unsigned values per byte
    QUInt4x2 = 16,
    /// Four 2-bit unsigned values per byte
    QUInt2x4 = 17,
    /// 16 opaque bits
    Bits16 = 22,
    /// `float8_e5m2`
    Float8E5M2 = 23,
    /// `float8_e4m3fn`
    Float8E4M3FN = 24,
    /// `float8_e5m2fnuz`
    Float8E5M2FNUZ = 25,
    /// `float8_e4m3fnuz`
    Float8E4M3FNUZ = 26,
    /// `uint16`
    UInt16 = 27,
    /// `uint32`
    UInt32 = 28,
    /// `uint64`
    UInt64 = 29,
}

impl ScalarType {
    /// Decodes a serialized value; unknown values are an `InvalidProgram` error.
    pub fn from_i8(v: i8) -> Result<Self> {
        use ScalarType::*;
        Ok(match v {
            0 => Byte,
            1 => Char,
            2 => Short,
            3 => Int,
            4 => Long,
            5 => Half,
            6 => Float,
            7 => Double,
            11 => Bool,
            12 => QInt8,
            13 => QUInt8,
            14 => QInt32,
            15 => BFloat16,
            16 => QUInt4x2,
            17 => QUInt2x4,
            22 => Bits16,
            23 => Float8E5M2,
            24 => Float8E4M3FN,
            25 => Float8E5M2FNUZ,
            26 => Float8E4M3FNUZ,
            27 => UInt16,
            28 => UInt32,
            29 => UInt64,
            other => {
                return Err(Error::invalid_program(format!(
                    "unknown scalar type {other}"
                )));
            }
        })
    }

    /// Size of one element in bytes.
    pub fn element_size(self) -> usize {
        use ScalarType::*;
        match self {
            Byte | Char | Bool | QInt8 | QUInt8 | QUInt4x2 | QUInt2x4 => 1,
            Float8E5M2 | Float8E4M3FN | Float8E5M2FNUZ | Float8E4M3FNUZ => 1,
            Short | Half | BFloat16 | Bits16 | UInt16 => 2,
            Int | Float | QInt32 | UInt32 => 4,
            Long | Double | UInt64 => 8,
        }
    }

    /// The PyTorch-style name, e.g. `"float32"`.
    pub fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            Byte => "uint8",
            Char => "int8",
            Short => "int16",
            Int => "int32",
            Long => "int64",
            Half => "float16",
            Float => "float32",
            Double => "float64",
            Bool => "bool",
            QInt8 => "qint8",
            QUInt8 => "quint8",
            QInt32 => "qint32",
            BFloat16 => "bfloat16",
            QUInt4x2 => "quint4x2",
            QUInt2x4 => "quint2x4",
            Bits16 => "bits16",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3FN => "float8_e4m3fn",
            Float8E5M2FNUZ => "float8_e5m2fnuz",
            Float8E4M3FNUZ => "float8_e4m3fnuz",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
        }
    }

    /// True for floating-point types (including half, bfloat16 and float8).
    pub fn is_floating(self) -> bool {
        use ScalarType::*;
        matches!(
            self,
            Half | Float
                | Double
                | BFloat16
                | Float8E5M2
                | Float8E4M3FN
                | Float8E5M2FNUZ
                | Float8E4M3FNUZ
        )
    }

    /// True for integral types (bool excluded).
    pub fn is_integral(self) -> bool {
        use ScalarType::*;
        matches!(
            self,
            Byte | Char | Short | Int | Long | UInt16 | UInt32 | UInt64
        )
    }

    /// True when etch's CPU kernels compute on this type.
    pub fn is_compute_supported(self) -> bool {
        use ScalarType::*;
        matches!(
            self,
            Byte | Char | Short | Int | Long | Half | Float | Double | Bool | BFloat16
        )
    }
}

impl std::fmt::Display for ScalarType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be an element of a tensor.
///
/// # Safety
/// `SCALAR.element_size()` must equal `size_of::<Self>()`, and every bit pattern of that
/// size must be a valid value (bool excluded: see [`ScalarType::Bool`] handling in kernels,
/// which read bools as `u8`).
pub unsafe trait Element:
    Copy + Send + Sync + 'static + std::fmt::Debug + PartialEq
{
    /// The scalar type this Rust type represents.
    const SCALAR: ScalarType;
    /// Converts to `f64` (lossless for all but 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from `f64` the way PyTorch's `static_cast` would (saturation aside).
    fn from_f64(v: f64) -> Self;
    /// Converts to `i64` (truncating floats toward zero).
    fn to_i64(self) -> i64;
    /// Converts from `i64`.
    fn from_i64(v: i64) -> Self;
}

macro_rules! int_element {
    ($t:ty, $s:ident) => {
        // SAFETY: the sizes match and every bit pattern is a valid integer.
        unsafe impl Element for $t {
            const SCALAR: ScalarType = ScalarType::$s;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}
int_element!(u8, Byte);
int_element!(i8, Char);
int_element!(i16, Short);
int_element!(i32, Int);
int_element!(i64, Long);
int_element!(u16, UInt16);
int_element!(u32, UInt32);
int_element!(u64, UInt64);

macro_rules! float_element {
    ($t:ty, $s:ident) => {
        // SAFETY: the sizes match and every bit pattern is a valid float.
        unsafe impl Element for $t {
            const SCALAR: ScalarType = ScalarType::$s;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}
float_element!(f32, Float);
float_element!(f64, Double);

macro_rules! half_element {
    ($t:ty, $s:ident) => {
        // SAFETY: the sizes match and every bit pattern is a valid half float.
        unsafe impl Element for $t {
            const SCALAR: ScalarType = ScalarType::$s;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                <$t>::from_f64(v as f64)
            }
        }
    };
}
half_element!(f16, Half);
half_element!(bf16, BFloat16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_serialized_value_round_trips() {
        for v in i8::MIN..=i8::MAX {
            if let Ok(t) = ScalarType::from_i8(v) {
                assert_eq!(t as i8, v);
                assert!(t.element_size() >= 1);
            }
        }
        assert!(ScalarType::from_i8(8).is_err());
        assert_eq!(ScalarType::from_i8(15).unwrap(), ScalarType::BFloat16);
    }
}
