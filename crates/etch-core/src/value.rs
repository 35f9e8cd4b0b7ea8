//! Values: the method-internal [`EValue`] and the owned, user-facing [`Value`].

use crate::{Error, Result, Tensor, TensorImpl};

/// The tag of a value, as ExecuTorch names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// No value.
    None,
    /// A 64-bit integer (also symbolic sizes).
    Int,
    /// A double.
    Double,
    /// A bool.
    Bool,
    /// A string.
    String,
    /// A tensor.
    Tensor,
    /// A list of integers.
    IntList,
    /// A list of doubles.
    DoubleList,
    /// A list of bools.
    BoolList,
    /// A list of tensors.
    TensorList,
    /// A list of optional tensors.
    OptionalTensorList,
}

impl Tag {
    /// Upstream-style name (`"Tensor"`, `"Int"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Tag::None => "None",
            Tag::Int => "Int",
            Tag::Double => "Double",
            Tag::Bool => "Bool",
            Tag::String => "String",
            Tag::Tensor => "Tensor",
            Tag::IntList => "IntList",
            Tag::DoubleList => "DoubleList",
            Tag::BoolList => "BoolList",
            Tag::TensorList => "TensorList",
            Tag::OptionalTensorList => "OptionalTensorList",
        }
    }
}

/// A list of integers whose items are other values (ExecuTorch's boxed list): each item is
/// the index of an `Int` value, which may change at run time (symbolic sizes).
#[derive(Debug, Clone)]
pub struct IntList {
    /// Indices of the `Int` values making up the list.
    pub items: Box<[u32]>,
    /// The unboxed values, refreshed before each kernel call when `dynamic`.
    pub vals: Box<[i64]>,
    /// True when some item is produced at run time.
    pub dynamic: bool,
}

/// A value inside a loaded method.
///
/// Tensors are stored inline (no box) so kernels read their metadata without an extra
/// indirection; the value table is allocated once per method.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum EValue {
    /// No value (also optional arguments left out).
    None,
    /// An integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// A bool.
    Bool(bool),
    /// A string.
    String(Box<str>),
    /// A tensor (metadata over memory owned elsewhere).
    Tensor(TensorImpl),
    /// A list of integers.
    IntList(IntList),
    /// A list of doubles.
    DoubleList(Box<[f64]>),
    /// A list of bools.
    BoolList(Box<[bool]>),
    /// A list of tensors, as indices of tensor values.
    TensorList(Box<[u32]>),
    /// A list of optional tensors, as indices of tensor or None values.
    OptionalTensorList(Box<[Option<u32>]>),
}

impl EValue {
    /// The value's tag.
    pub fn tag(&self) -> Tag {
        match self {
            EValue::None => Tag::None,
            EValue::Int(_) => Tag::Int,
            EValue::Double(_) => Tag::Double,
            EValue::Bool(_) => Tag::Bool,
            EValue::String(_) => Tag::String,
            EValue::Tensor(_) => Tag::Tensor,
            EValue::IntList(_) => Tag::IntList,
            EValue::DoubleList(_) => Tag::DoubleList,
            EValue::BoolList(_) => Tag::BoolList,
            EValue::TensorList(_) => Tag::TensorList,
            EValue::OptionalTensorList(_) => Tag::OptionalTensorList,
        }
    }
    /// The tensor, or `InvalidType`.
    pub fn as_tensor(&self) -> Result<&TensorImpl> {
        match self {
            EValue::Tensor(t) => Ok(t),
            other => Err(type_error(Tag::Tensor, other.tag())),
        }
    }
    /// The tensor, writable, or `InvalidType`.
    pub fn as_tensor_mut(&mut self) -> Result<&mut TensorImpl> {
        match self {
            EValue::Tensor(t) => Ok(t),
            other => Err(type_error(Tag::Tensor, other.tag())),
        }
    }
}

pub(crate) fn type_error(want: Tag, got: Tag) -> Error {
    Error::invalid_type(format!("expected {}, got {}", want.name(), got.name()))
}

/// A value owned by the caller: method inputs and outputs in the [`Module`] API.
///
/// [`Module`]: https://docs.rs/etch
#[derive(Debug, Clone)]
pub enum Value {
    /// No value.
    None,
    /// An integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// A bool.
    Bool(bool),
    /// A string.
    String(String),
    /// A tensor.
    Tensor(Tensor),
    /// A list of integers.
    IntList(Vec<i64>),
    /// A list of doubles.
    DoubleList(Vec<f64>),
    /// A list of bools.
    BoolList(Vec<bool>),
    /// A list of tensors.
    TensorList(Vec<Tensor>),
    /// A list of optional tensors.
    OptionalTensorList(Vec<Option<Tensor>>),
}

impl Value {
    /// The value's tag.
    pub fn tag(&self) -> Tag {
        match self {
            Value::None => Tag::None,
            Value::Int(_) => Tag::Int,
            Value::Double(_) => Tag::Double,
            Value::Bool(_) => Tag::Bool,
            Value::String(_) => Tag::String,
            Value::Tensor(_) => Tag::Tensor,
            Value::IntList(_) => Tag::IntList,
            Value::DoubleList(_) => Tag::DoubleList,
            Value::BoolList(_) => Tag::BoolList,
            Value::TensorList(_) => Tag::TensorList,
            Value::OptionalTensorList(_) => Tag::OptionalTensorList,
        }
    }
    /// The tensor, or `InvalidType`.
    pub fn as_tensor(&self) -> Result<&Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(type_error(Tag::Tensor, other.tag())),
        }
    }
    /// Takes the tensor out, or `InvalidType`.
    pub fn into_tensor(self) -> Result<Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(type_error(Tag::Tensor, other.tag())),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
