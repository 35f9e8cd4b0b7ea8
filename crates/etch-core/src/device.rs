//! Devices: where a tensor's bytes live.

use crate::{Error, Result};
use std::fmt;

/// Device type, with ExecuTorch's serialized values (`DeviceType` in program.fbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum DeviceType {
    /// Host memory.
    Cpu = 0,
    /// An NVIDIA GPU.
    Cuda = 1,
}

/// Number of device types (size of per-type tables), as upstream's `kNumDeviceTypes`.
pub const NUM_DEVICE_TYPES: usize = 2;

impl DeviceType {
    /// Decodes a serialized device type. Unknown values are an `InvalidProgram` error
    /// (upstream's portable parser casts any byte; etch rejects them).
    pub fn from_i8(v: i8) -> Result<Self> {
        match v {
            0 => Ok(DeviceType::Cpu),
            1 => Ok(DeviceType::Cuda),
            other => Err(Error::invalid_program(format!(
                "unknown device type {other} (known: 0=CPU, 1=CUDA)"
            ))),
        }
    }
    /// Lower-case name as used in device strings (`"cpu"`, `"cuda"`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Cuda => "cuda",
        }
    }
}

/// A device: a type and an index (`cuda:1`). Equality compares both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    /// The device type.
    pub kind: DeviceType,
    /// The index among devices of that type.
    pub index: i8,
}

impl Device {
    /// The host, `cpu:0`.
    pub const CPU: Device = Device {
        kind: DeviceType::Cpu,
        index: 0,
    };
    /// Makes a device.
    pub const fn new(kind: DeviceType, index: i8) -> Self {
        Device { kind, index }
    }
    /// `cuda:index`.
    pub const fn cuda(index: i8) -> Self {
        Device::new(DeviceType::Cuda, index)
    }
    /// True for host memory.
    pub fn is_cpu(self) -> bool {
        self.kind == DeviceType::Cpu
    }
    /// Decodes a serialized (type, index) pair, rejecting unknown types and negative
    /// accelerator indices with `InvalidProgram`.
    pub fn from_serialized(kind: i8, index: i8) -> Result<Self> {
        let kind = DeviceType::from_i8(kind)?;
        if kind != DeviceType::Cpu && index < 0 {
            return Err(Error::invalid_program(format!(
                "invalid device index {index} for {}",
                kind.name()
            )));
        }
        Ok(Device::new(kind, index))
    }
}

impl Default for Device {
    fn default() -> Self {
        Device::CPU
    }
}

impl From<DeviceType> for Device {
    fn from(kind: DeviceType) -> Self {
        Device::new(kind, 0)
    }
}

/// `cpu` for the host (unindexed, as ATen prints it), `cuda:N` for accelerators.
impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_cpu() && self.index == 0 {
            f.write_str("cpu")
        } else {
            write!(f, "{}:{}", self.kind.name(), self.index)
        }
    }
}

impl std::str::FromStr for Device {
    type Err = Error;
    /// Parses `cpu`, `cuda`, `cuda:1` (case-insensitive), as upstream's
    /// `_parse_device_spec_value`, but rejects negative and out-of-range indices.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let (name, index) = match s.split_once(':') {
            Some((n, i)) => {
                let idx: i64 = i.trim().parse().map_err(|_| {
                    Error::invalid_argument(format!("invalid device index '{i}' in '{s}'"))
                })?;
                (n.to_string(), idx)
            }
            None => (s.clone(), 0),
        };
        let kind = match name.as_str() {
            "cpu" => DeviceType::Cpu,
            "cuda" => DeviceType::Cuda,
            other => {
                return Err(Error::invalid_argument(format!(
                    "unknown device type '{other}'. Valid types: CPU, CUDA"
                )));
            }
        };
        if !(0..=i8::MAX as i64).contains(&index) {
            return Err(Error::invalid_argument(format!(
                "device index {index} out of range 0..=127 in '{s}'"
            )));
        }
        Ok(Device::new(kind, index as i8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_values_and_equality() {
        assert_eq!(DeviceType::Cpu as i8, 0);
        assert_eq!(DeviceType::Cuda as i8, 1);
        assert!(NUM_DEVICE_TYPES > DeviceType::Cuda as usize);
        assert_eq!(Device::default(), Device::CPU);
        assert!(Device::CPU.is_cpu());
        assert_ne!(Device::cuda(0), Device::cuda(1));
        assert_ne!(Device::CPU, Device::cuda(0));
        assert_eq!(Device::from(DeviceType::Cuda), Device::cuda(0));
    }

    #[test]
    fn parse() {
        assert_eq!("cuda:0".parse::<Device>().unwrap(), Device::cuda(0));
        assert_eq!("Cuda:2".parse::<Device>().unwrap(), Device::cuda(2));
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::CPU);
        assert!("tpu:0".parse::<Device>().is_err());
        assert!("cuda:-1".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
        assert!(Device::from_serialized(7, 0).is_err());
        assert!(Device::from_serialized(1, -1).is_err());
    }
}
