//! Typed errors carrying ExecuTorch's numeric error codes.

use std::fmt;

/// ExecuTorch's runtime error codes (`runtime/core/error.h`), with the same numeric values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    /// An internal error: a bug, or a failure of a lower layer (e.g. a device copy).
    Internal = 0x01,
    /// The object is not in a state that allows the call.
    InvalidState = 0x02,
    /// The method has no more instructions to execute.
    EndOfMethod = 0x03,
    /// The operation is not supported in this build or configuration.
    NotSupported = 0x10,
    /// The operation is not implemented yet.
    NotImplemented = 0x11,
    /// An argument is invalid (out of range, wrong shape, ...).
    InvalidArgument = 0x12,
    /// A value has the wrong type (e.g. an Int where a Tensor was expected).
    InvalidType = 0x13,
    /// An operator the program needs has no registered kernel.
    OperatorMissing = 0x14,
    /// A requested object (method, allocator, backend, named data) does not exist.
    NotFound = 0x20,
    /// Memory could not be allocated.
    MemoryAllocationFailed = 0x21,
    /// Data could not be read or written (file, mapping, device).
    AccessFailed = 0x22,
    /// The program is malformed.
    InvalidProgram = 0x23,
    /// The program carries external data that was not provided.
    InvalidExternalData = 0x24,
    /// Out of resources.
    OutOfResources = 0x25,
    /// A delegate's processed data is incompatible with its backend.
    DelegateInvalidCompatibility = 0x30,
    /// A delegate could not allocate memory.
    DelegateMemoryAllocationFailed = 0x31,
    /// A delegate's handle is invalid.
    DelegateInvalidHandle = 0x32,
}

impl ErrorCode {
    /// The upstream name of the code, e.g. `"InvalidProgram"`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Internal => "Internal",
            ErrorCode::InvalidState => "InvalidState",
            ErrorCode::EndOfMethod => "EndOfMethod",
            ErrorCode::NotSupported => "NotSupported",
            ErrorCode::NotImplemented => "NotImplemented",
            ErrorCode::InvalidArgument => "InvalidArgument",
            ErrorCode::InvalidType => "InvalidType",
            ErrorCode::OperatorMissing => "OperatorMissing",
            ErrorCode::NotFound => "NotFound",
            ErrorCode::MemoryAllocationFailed => "MemoryAllocationFailed",
            ErrorCode::AccessFailed => "AccessFailed",
            ErrorCode::InvalidProgram => "InvalidProgram",
            ErrorCode::InvalidExternalData => "InvalidExternalData",
            ErrorCode::OutOfResources => "OutOfResources",
            ErrorCode::DelegateInvalidCompatibility => "DelegateInvalidCompatibility",
            ErrorCode::DelegateMemoryAllocationFailed => "DelegateMemoryAllocationFailed",
            ErrorCode::DelegateInvalidHandle => "DelegateInvalidHandle",
        }
    }
}

/// An error: an ExecuTorch error code plus a message a user can act on.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
}

/// `Result` with etch's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Makes an error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
        }
    }
    /// The error code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }
    /// The message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Prefixes the message with more context, keeping the code.
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.message = format!("{ctx}: {}", self.message);
        self
    }
}

macro_rules! ctor {
    ($($fn:ident => $code:ident),* $(,)?) => {
        impl Error {
            $(
                #[doc = concat!("An error with code `", stringify!($code), "`.")]
                pub fn $fn(message: impl Into<String>) -> Self {
                    Error::new(ErrorCode::$code, message)
                }
            )*
        }
    };
}
ctor! {
    internal => Internal,
    invalid_state => InvalidState,
    not_supported => NotSupported,
    not_implemented => NotImplemented,
    invalid_argument => InvalidArgument,
    invalid_type => InvalidType,
    operator_missing => OperatorMissing,
    not_found => NotFound,
    memory_allocation_failed => MemoryAllocationFailed,
    access_failed => AccessFailed,
    invalid_program => InvalidProgram,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.code.name(),
            self.code as u32,
            self.message
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::access_failed(e.to_string())
    }
}

/// Returns early with an error of the given code if the condition does not hold.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $ctor:ident, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::Error::$ctor(format!($($fmt)+)));
        }
    };
}
