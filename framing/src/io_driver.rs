//! The choice of I/O driver for the Edge's and Node's monoio runtimes, as a
//! pure decision: the drivers pass in what the kernel supports.
//!
//! io_uring is used when the kernel allows it and epoll otherwise
//! (`kernel.io_uring_disabled`, or a seccomp profile such as Docker's default
//! refusing `io_uring_setup`). `IOP_IO_DRIVER=uring|epoll|auto` forces one;
//! forcing `uring` where it is refused is an error, not a silent fallback.

use std::fmt;

/// Environment variable that forces the I/O driver.
pub const IO_DRIVER_ENV: &str = "IOP_IO_DRIVER";

/// Which I/O driver a runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoDriver {
    /// io_uring.
    Uring,
    /// epoll (monoio's legacy driver).
    Epoll,
}

/// A driver request that cannot be met.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IoDriverError {
    /// `uring` was forced but the kernel refuses io_uring.
    #[error(
        "{IO_DRIVER_ENV}=uring, but io_uring is refused here (kernel.io_uring_disabled or seccomp)"
    )]
    UringRefused,
    /// The value is not a driver name.
    #[error("{IO_DRIVER_ENV}={0:?}: expected uring, epoll or auto")]
    Unknown(String),
}

impl IoDriver {
    /// The driver's name, as logged and as accepted in `IOP_IO_DRIVER`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Uring => "uring",
            Self::Epoll => "epoll",
        }
    }

    /// Resolves the driver: `requested` (the value of `IOP_IO_DRIVER`) when
    /// set, else io_uring when `uring_supported`, else epoll.
    pub fn resolve(requested: Option<&str>, uring_supported: bool) -> Result<Self, IoDriverError> {
        match requested.map(str::trim).filter(|s| !s.is_empty()) {
            None | Some("auto") => Ok(if uring_supported {
                Self::Uring
            } else {
                Self::Epoll
            }),
            Some("epoll") => Ok(Self::Epoll),
            Some("uring") if uring_supported => Ok(Self::Uring),
            Some("uring") => Err(IoDriverError::UringRefused),
            Some(other) => Err(IoDriverError::Unknown(other.to_owned())),
        }
    }
}

impl fmt::Display for IoDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_table() {
        assert_eq!(IoDriver::resolve(None, true), Ok(IoDriver::Uring));
        assert_eq!(IoDriver::resolve(None, false), Ok(IoDriver::Epoll));
        assert_eq!(
            IoDriver::resolve(Some(" auto "), false),
            Ok(IoDriver::Epoll)
        );
        assert_eq!(IoDriver::resolve(Some(""), true), Ok(IoDriver::Uring));
        assert_eq!(IoDriver::resolve(Some("epoll"), true), Ok(IoDriver::Epoll));
        assert_eq!(IoDriver::resolve(Some("uring"), true), Ok(IoDriver::Uring));
        assert_eq!(
            IoDriver::resolve(Some("uring"), false),
            Err(IoDriverError::UringRefused)
        );
        assert_eq!(
            IoDriver::resolve(Some("kqueue"), true),
            Err(IoDriverError::Unknown("kqueue".into()))
        );
    }
}
