//! The verified view of an ExecuTorch bundled program (`.bpte`): a serialized program
//! together with test cases for its methods, as `executorch.devtools.BundledProgram` writes
//! them (schema `bundled_program_schema.fbs`, file identifier `BP08`).
//!
//! Every test case is decoded and checked when the file is loaded: each value has a type,
//! each tensor a known dtype, non-negative sizes, a valid dim order and at least the bytes
//! its shape needs. Tensor data and the embedded program stay where they are in the file
//! (ranges into it, checked against it); [`BundledProgram::program`] loads the embedded
//! program as a zero-copy view of those bytes.

use crate::schema::bundled as fb;
use crate::{DataSource, Program, fb_err};
use etch_core::tensor::validate_dim_order;
use etch_core::{Error, MAX_DIMS, Result, ScalarType, checked_numel};
use planus::ReadAsRoot;
use std::ops::Range;
use std::sync::Arc;

/// The flatbuffer file identifier of bundled programs.
pub const BUNDLED_PROGRAM_IDENTIFIER: &[u8; 4] = b"BP08";
/// The alignment the stock writer gives the embedded program (`force_align: 32` in the
/// schema).
pub const EMBEDDED_PROGRAM_ALIGNMENT: usize = 32;

/// A tensor of a test case: its dtype, shape, dim order and where its bytes are.
#[derive(Debug, Clone, PartialEq)]
pub struct BundledTensor {
    /// Element type.
    pub dtype: ScalarType,
    /// Sizes.
    pub sizes: Vec<usize>,
    /// Dim order of the stored bytes (`0..n` for row-major).
    pub dim_order: Vec<u8>,
    /// The bytes' range in the file (exactly `numel * element size` bytes).
    pub data: Range<usize>,
}

impl BundledTensor {
    /// True when the bytes are stored row-major (dim order `0..n`).
    pub fn is_row_major(&self) -> bool {
        self.dim_order
            .iter()
            .enumerate()
            .all(|(i, &d)| i == d as usize)
    }
}

/// An input or expected output of a test case.
#[derive(Debug, Clone, PartialEq)]
pub enum BundledValue {
    /// A tensor.
    Tensor(BundledTensor),
    /// An `int`.
    Int(i64),
    /// A `bool`.
    Bool(bool),
    /// A `float` (double).
    Double(f64),
}

impl BundledValue {
    /// The value's type, as the schema names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            BundledValue::Tensor(_) => "Tensor",
            BundledValue::Int(_) => "Int",
            BundledValue::Bool(_) => "Bool",
            BundledValue::Double(_) => "Double",
        }
    }
}

/// One test: inputs for a method and the outputs eager PyTorch produced for them.
#[derive(Debug, Clone, PartialEq)]
pub struct BundledTestCase {
    /// The method's inputs, in order.
    pub inputs: Vec<BundledValue>,
    /// The expected outputs, in order (empty when the case was bundled without them).
    pub expected_outputs: Vec<BundledValue>,
}

/// The test cases of one method.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodTestSuite {
    /// The method the cases are for.
    pub method_name: String,
    /// The cases, in file order.
    pub test_cases: Vec<BundledTestCase>,
}

/// A loaded, verified bundled program. Cheap to clone (the bytes are shared).
#[derive(Clone)]
pub struct BundledProgram {
    source: Arc<DataSource>,
    version: u32,
    program: Range<usize>,
    suites: Arc<[MethodTestSuite]>,
}

impl std::fmt::Debug for BundledProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BundledProgram")
            .field("bytes", &self.source.len())
            .field("version", &self.version)
            .field("program", &self.program)
            .field("suites", &self.suites.len())
            .finish()
    }
}

impl BundledProgram {
    /// True when `bytes` carry the bundled-program file identifier (`BP08`).
    pub fn is_bundled_program(bytes: &[u8]) -> bool {
        bytes.get(4..8) == Some(&BUNDLED_PROGRAM_IDENTIFIER[..])
    }

    /// Verifies and wraps bundled-program bytes. Malformed bytes are an `InvalidProgram`
    /// error naming what is wrong; nothing is read outside the file.
    pub fn load(source: Arc<DataSource>) -> Result<Self> {
        let bytes = source.bytes();
        if bytes.len() < 8 {
            return Err(Error::invalid_program(format!(
                "file is {} bytes; too small to be a bundled program",
                bytes.len()
            )));
        }
        if !Self::is_bundled_program(bytes) {
            return Err(Error::invalid_program(format!(
                "not a bundled program: file identifier is {:?}, expected \"BP08\"",
                String::from_utf8_lossy(&bytes[4..8])
            )));
        }
        let root =
            fb::BundledProgramRef::read_as_root(bytes).map_err(fb_err("bundled program root"))?;
        let version = root.version().map_err(fb_err("bundled program version"))?;
        let program = root
            .program()
            .map_err(fb_err("embedded program"))?
            .filter(|p| !p.is_empty())
            .ok_or_else(|| Error::invalid_program("the bundled program embeds no program"))?;
        let program = range_in(bytes, program, "embedded program")?;
        let mut suites = Vec::new();
        if let Some(list) = root
            .method_test_suites()
            .map_err(fb_err("method test suites"))?
        {
            for (i, s) in list.iter().enumerate() {
                let s = s.map_err(fb_err("method test suite"))?;
                suites.push(read_suite(bytes, s).map_err(|e| e.context(format!("suite {i}")))?);
            }
        }
        Ok(BundledProgram {
            source,
            version,
            program,
            suites: suites.into(),
        })
    }

    /// Maps a file (zero-copy) and loads it.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::load(Arc::new(DataSource::map_file(path.as_ref())?))
    }

    /// Copies bytes into aligned memory and loads them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::load(Arc::new(DataSource::copy_from(bytes)?))
    }

    /// The schema version the writer recorded (executorch 1.5.1 writes 2).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The test suites, one per tested method (the stock writer sorts them by name).
    pub fn method_test_suites(&self) -> &[MethodTestSuite] {
        &self.suites
    }

    /// The embedded program's bytes.
    pub fn program_bytes(&self) -> &[u8] {
        self.source.bytes().get(self.program.clone()).unwrap_or(&[])
    }

    /// Loads the embedded program without copying it: the program's source is a view of
    /// this file's bytes, which it keeps alive. The stock writer aligns the embedded
    /// program to [`EMBEDDED_PROGRAM_ALIGNMENT`] bytes, so the program's constants keep the
    /// alignment they were written with; a program that lies less aligned in memory (a
    /// file from another writer) is copied into aligned memory instead.
    pub fn program(&self) -> Result<Program> {
        let source = if self.program_is_aligned() {
            DataSource::slice(Arc::clone(&self.source), self.program.clone())?
        } else {
            DataSource::copy_from(self.program_bytes())?
        };
        Program::load(Arc::new(source)).map_err(|e| e.context("embedded program"))
    }

    /// True when the embedded program starts at an [`EMBEDDED_PROGRAM_ALIGNMENT`]-aligned
    /// address, so that [`BundledProgram::program`] loads it without copying.
    pub fn program_is_aligned(&self) -> bool {
        (self.program_bytes().as_ptr() as usize).is_multiple_of(EMBEDDED_PROGRAM_ALIGNMENT)
    }

    /// A tensor's bytes (as stored, in its dim order).
    pub fn tensor_bytes(&self, t: &BundledTensor) -> &[u8] {
        self.source.bytes().get(t.data.clone()).unwrap_or(&[])
    }

    /// The shared data source.
    pub fn source(&self) -> &Arc<DataSource> {
        &self.source
    }
}

/// The range of `part` (a slice planus read from `bytes`) within `bytes`.
fn range_in(bytes: &[u8], part: &[u8], what: &str) -> Result<Range<usize>> {
    let start = (part.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if end <= bytes.len() => Ok(start..end),
        _ => Err(Error::invalid_program(format!(
            "{what} lies outside the file"
        ))),
    }
}

fn read_suite(bytes: &[u8], s: fb::BundledMethodTestSuiteRef<'_>) -> Result<MethodTestSuite> {
    let method_name = s
        .method_name()
        .map_err(fb_err("method name"))?
        .ok_or_else(|| Error::invalid_program("a test suite has no method name"))?
        .to_string();
    let mut test_cases = Vec::new();
    if let Some(cases) = s.test_cases().map_err(fb_err("test cases"))? {
        for (i, c) in cases.iter().enumerate() {
            let c = c.map_err(fb_err("test case"))?;
            let case = read_case(bytes, c)
                .map_err(|e| e.context(format!("method '{method_name}' test case {i}")))?;
            test_cases.push(case);
        }
    }
    Ok(MethodTestSuite {
        method_name,
        test_cases,
    })
}

fn read_case(bytes: &[u8], c: fb::BundledMethodTestCaseRef<'_>) -> Result<BundledTestCase> {
    let inputs = c.inputs().map_err(fb_err("test inputs"))?;
    let expected = c.expected_outputs().map_err(fb_err("expected outputs"))?;
    Ok(BundledTestCase {
        inputs: read_values(bytes, inputs, "input")?,
        expected_outputs: read_values(bytes, expected, "expected output")?,
    })
}

fn read_values(
    bytes: &[u8],
    list: Option<planus::Vector<'_, planus::Result<fb::ValueRef<'_>>>>,
    what: &str,
) -> Result<Vec<BundledValue>> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let v = v.map_err(fb_err(what))?;
        out.push(read_value(bytes, v).map_err(|e| e.context(format!("{what} {i}")))?);
    }
    Ok(out)
}

fn read_value(bytes: &[u8], v: fb::ValueRef<'_>) -> Result<BundledValue> {
    let val = v
        .val()
        .map_err(fb_err("value"))?
        .ok_or_else(|| Error::invalid_program("value has no type"))?;
    Ok(match val {
        fb::ValueUnionRef::Tensor(t) => BundledValue::Tensor(read_tensor(bytes, t)?),
        fb::ValueUnionRef::Int(x) => BundledValue::Int(x.int_val().map_err(fb_err("Int"))?),
        fb::ValueUnionRef::Bool(x) => BundledValue::Bool(x.bool_val().map_err(fb_err("Bool"))?),
        fb::ValueUnionRef::Double(x) => {
            BundledValue::Double(x.double_val().map_err(fb_err("Double"))?)
        }
    })
}

fn read_tensor(bytes: &[u8], t: fb::TensorRef<'_>) -> Result<BundledTensor> {
    let dtype = ScalarType::from_i8(i8::from(t.scalar_type().map_err(fb_err("tensor dtype"))?))?;
    let mut sizes = Vec::new();
    if let Some(s) = t.sizes().map_err(fb_err("tensor sizes"))? {
        for d in s.iter() {
            let d = usize::try_from(d)
                .map_err(|_| Error::invalid_program(format!("tensor size {d} is negative")))?;
            sizes.push(d);
        }
    }
    if sizes.len() > MAX_DIMS {
        return Err(Error::invalid_program(format!(
            "tensor has {} dims; at most {MAX_DIMS} are supported",
            sizes.len()
        )));
    }
    // The stock writer always stores the dim order; an absent one means row-major.
    let dim_order = match t.dim_order().map_err(fb_err("tensor dim order"))? {
        Some(d) => {
            validate_dim_order(d, sizes.len())?;
            d.to_vec()
        }
        None => (0..sizes.len() as u8).collect(),
    };
    let nbytes = checked_numel(&sizes)
        .and_then(|n| n.checked_mul(dtype.element_size()))
        .ok_or_else(|| Error::invalid_program(format!("tensor size {sizes:?} overflows")))?;
    let data = match t.data().map_err(fb_err("tensor data"))? {
        _ if nbytes == 0 => 0..0,
        Some(d) if d.len() >= nbytes => {
            let start = range_in(bytes, d, "tensor data")?.start;
            start..start + nbytes
        }
        d => {
            return Err(Error::invalid_program(format!(
                "tensor data is {} bytes; a {dtype} tensor of shape {sizes:?} needs {nbytes}",
                d.map_or(0, <[u8]>::len)
            )));
        }
    };
    Ok(BundledTensor {
        dtype,
        sizes,
        dim_order,
        data,
    })
}
