//! Operator signals, received synchronously: `SIGTERM`/`SIGINT` ask for a
//! graceful drain, `SIGHUP` for a config reload.
//!
//! [`OperatorSignals::block`] blocks the three signals in the calling thread
//! *before* any other thread starts, so every thread inherits the mask and
//! none is ever interrupted by them; [`OperatorSignals::wait`] then takes
//! them one at a time with `sigwait(3)`. No handler runs in signal context,
//! so nothing async-signal-unsafe can happen.

use std::io;

/// What an operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorSignal {
    /// `SIGTERM`: drain, then exit.
    Terminate,
    /// `SIGINT` (Ctrl-C): drain, then exit.
    Interrupt,
    /// `SIGHUP`: reload the config file.
    Reload,
}

impl OperatorSignal {
    /// The signal's conventional name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminate => "SIGTERM",
            Self::Interrupt => "SIGINT",
            Self::Reload => "SIGHUP",
        }
    }
}

/// The blocked set `{SIGTERM, SIGINT, SIGHUP}` (see the module docs).
#[derive(Debug)]
pub struct OperatorSignals {
    set: libc::sigset_t,
}

impl OperatorSignals {
    /// Blocks the operator signals in this thread (and so in every thread it
    /// starts afterwards). Call first thing in `main`.
    pub fn block() -> io::Result<Self> {
        // SAFETY: `sigset_t` is plain data; `sigemptyset` initialises it
        // before any other use, and the pointers are to a live local.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `set` is a valid, exclusively borrowed sigset.
        let rc = unsafe {
            libc::sigemptyset(&mut set)
                | libc::sigaddset(&mut set, libc::SIGTERM)
                | libc::sigaddset(&mut set, libc::SIGINT)
                | libc::sigaddset(&mut set, libc::SIGHUP)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `set` is initialised; a null old-set pointer is allowed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Self { set })
    }

    /// Waits for the next operator signal.
    pub fn wait(&self) -> io::Result<OperatorSignal> {
        loop {
            let mut signal: libc::c_int = 0;
            // SAFETY: `self.set` is an initialised sigset and `signal` a live
            // local the call writes to.
            let rc = unsafe { libc::sigwait(&self.set, &mut signal) };
            if rc == libc::EINTR {
                continue;
            }
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            return Ok(match signal {
                libc::SIGHUP => OperatorSignal::Reload,
                libc::SIGINT => OperatorSignal::Interrupt,
                _ => OperatorSignal::Terminate,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blocked signal sent to this thread is taken by `wait`, in order,
    /// and never runs the default action (which would end the test).
    #[test]
    fn blocked_signals_are_waited_for() {
        // The test harness runs this on its own thread: block there only.
        let signals = OperatorSignals::block().unwrap();
        for (raw, expected) in [
            (libc::SIGHUP, OperatorSignal::Reload),
            (libc::SIGTERM, OperatorSignal::Terminate),
            (libc::SIGINT, OperatorSignal::Interrupt),
        ] {
            // SAFETY: signals this thread itself, which has the signal blocked.
            let rc = unsafe { libc::pthread_kill(libc::pthread_self(), raw) };
            assert_eq!(rc, 0);
            assert_eq!(signals.wait().unwrap(), expected);
            assert!(!expected.as_str().is_empty());
        }
    }
}
