//! The choice of I/O driver for the Edge's and Node's monoio runtimes, as a
//! pure decision: the drivers pass in what the kernel supports.
//!
//! io_uring is used when the kernel allows it and epoll otherwise
//! (`kernel.io_uring_disabled`, or a seccomp profile such as Docker's default
//! refusing `io_uring_setup`). `IOP_IO_DRIVER=uring|epoll|auto` forces one;
//! forcing `uring` where it is refused is an error, not a silent fallback.
//!
//! An io_uring ring is set up as cheaply for the kernel as it allows
//! ([`with_ring_setup`], [`RingSetup`]):
//!
//! - `IORING_SETUP_COOP_TASKRUN` (5.19+): a completion that another CPU
//!   makes ready while the ring's thread runs then waits for the thread's
//!   next `io_uring_enter` instead of interrupting it with a reschedule
//!   IPI. A thread-per-core loop enters the kernel whenever it runs out of
//!   tasks, so nothing waits long, while on a VM each IPI is an exit on
//!   both ends: at 16 connections closed loop they were ~0.75 a request,
//!   and the Edge and the Node each spent ~15 % less CPU a request without
//!   them (bench-results/profiles.md, round 12).
//! - With it, `IORING_SETUP_SINGLE_ISSUER` and `IORING_SETUP_DEFER_TASKRUN`
//!   (6.1+): that work waits on a list of the ring's own until the thread
//!   asks for completions (monoio does when its run queue is empty), and
//!   then runs in one batch, without the kernel's shared task-work
//!   machinery. One thread owns each ring (thread-per-core), which is what
//!   single-issuer promises the kernel.

use std::{fmt, io};

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

/// How an io_uring ring is set up (see the module docs), from the most to
/// the least the kernel must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSetup {
    /// Cooperative, single issuer, task work deferred to the thread's own
    /// wait for completions (6.1+).
    Deferred,
    /// Cooperative task running only (5.19+).
    Cooperative,
    /// No set-up flags.
    Plain,
}

impl RingSetup {
    /// From the most to the least the kernel must have: the order
    /// [`with_ring_setup`] tries them in.
    pub const PREFERRED: [Self; 3] = [Self::Deferred, Self::Cooperative, Self::Plain];
}

/// `build(setup)` for the first [`RingSetup`] the kernel accepts: a kernel
/// that lacks a flag refuses the ring with `EINVAL`, and the next set-up is
/// tried. Any other error (ring limits, a seccomp refusal) is the caller's.
pub fn with_ring_setup<R>(build: impl Fn(RingSetup) -> io::Result<R>) -> io::Result<R> {
    let (last, earlier) = RingSetup::PREFERRED
        .split_last()
        .expect("at least one set-up");
    for &setup in earlier {
        match build(setup) {
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => continue,
            other => return other,
        }
    }
    build(*last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_kernel_gets_the_most_its_flags_allow() {
        const EINVAL: i32 = 22;
        for refused in 0..RingSetup::PREFERRED.len() {
            let tried = std::cell::RefCell::new(Vec::new());
            let built = with_ring_setup(|setup| {
                tried.borrow_mut().push(setup);
                if tried.borrow().len() <= refused {
                    Err(io::Error::from_raw_os_error(EINVAL))
                } else {
                    Ok(setup)
                }
            });
            assert_eq!(built.unwrap(), RingSetup::PREFERRED[refused]);
            assert_eq!(*tried.borrow(), RingSetup::PREFERRED[..=refused]);
        }

        // A kernel refusing even a plain ring: its error is reported.
        let refused =
            with_ring_setup(|_| -> io::Result<()> { Err(io::Error::from_raw_os_error(EINVAL)) });
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::InvalidInput);

        // Other errors are reported, not retried.
        let tried = std::cell::Cell::new(0);
        let refused = with_ring_setup(|_| -> io::Result<()> {
            tried.set(tried.get() + 1);
            Err(io::Error::from(io::ErrorKind::OutOfMemory))
        });
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(tried.get(), 1);
    }

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
