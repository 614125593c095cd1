//! Graceful drain of the Node (operator `SIGTERM`/`SIGINT`).
//!
//! ```text
//! begin ─▶ NodeDrainNotice to the Edge (it stops dispatching here at once)
//!       ─▶ a request that crossed the notice is refused: FAILURE_CODE_UNSUPPORTED,
//!          side NODE ("the node is draining")
//!       ─▶ wait until no run or tunnel is in flight, or the grace is spent
//!       ─▶ the link closes (`shutdown`) and the supervisor does not reconnect
//!       ─▶ the process exits 0
//! ```
//!
//! The drain is process-wide ([`node_drain`]), like the metrics: the signal
//! loop flips it from its own thread; the link core watches it.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use proto::v1::envelope::Msg;
use proto::v1::{FailureCode, FailureSide, ProviderTunnelFrame, provider_tunnel_frame};
use tokio::sync::Notify;

use crate::adapter::{RuntimeEvent, failure};

/// Default grace for in-flight runs and tunnels, ms.
pub const DEFAULT_DRAIN_GRACE_MS: u64 = 30_000;

/// The Node's drain switch and its grace.
#[derive(Debug)]
pub struct NodeDrain {
    draining: AtomicBool,
    grace_ms: AtomicU64,
    flipped: Notify,
}

impl Default for NodeDrain {
    fn default() -> Self {
        Self {
            draining: AtomicBool::new(false),
            grace_ms: AtomicU64::new(DEFAULT_DRAIN_GRACE_MS),
            flipped: Notify::new(),
        }
    }
}

/// The process's drain switch.
pub fn node_drain() -> &'static NodeDrain {
    static DRAIN: OnceLock<NodeDrain> = OnceLock::new();
    DRAIN.get_or_init(NodeDrain::default)
}

impl NodeDrain {
    /// Sets the grace (`--drain-grace-ms`).
    pub fn set_grace_ms(&self, grace_ms: u64) {
        self.grace_ms.store(grace_ms, Ordering::Release);
    }

    /// The grace, ms.
    pub fn grace_ms(&self) -> u64 {
        self.grace_ms.load(Ordering::Acquire)
    }

    /// Starts the drain; true the first time.
    pub fn begin(&self) -> bool {
        let first = !self.draining.swap(true, Ordering::AcqRel);
        if first {
            self.flipped.notify_waiters();
        }
        first
    }

    /// Whether the drain has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Returns once the drain has begun (at once if it has).
    pub async fn wait(&self) {
        let flipped = self.flipped.notified();
        tokio::pin!(flipped);
        flipped.as_mut().enable();
        if self.is_draining() {
            return;
        }
        flipped.await;
    }
}

/// The answer to a work request that arrives while draining: a typed
/// terminal (`FAILURE_CODE_UNSUPPORTED`, side NODE) on its stream, so the
/// Edge ends it at once. `None` for anything that is not new work.
pub fn refusal(msg: &Msg) -> Option<Msg> {
    let refused = || {
        failure(
            FailureCode::Unsupported,
            FailureSide::Node,
            "the node is draining and takes no new work",
        )
    };
    match msg {
        Msg::RunRequest(_) => Some(Msg::RunEvent(Box::new(
            RuntimeEvent::Error(refused()).into_run_event(1),
        ))),
        Msg::ProviderTunnelRequest(_) => Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
            frame: Some(provider_tunnel_frame::Frame::Error(refused())),
        })),
        _ => None,
    }
}

/// Where a drain stands at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// Work is in flight and the grace is not spent.
    Wait,
    /// Close the link: nothing in flight, or the grace ran out.
    Close {
        /// The grace ran out with work in flight.
        grace_exceeded: bool,
    },
}

/// The step `elapsed_ms` into a drain with `grace_ms` and `in_flight` work.
pub fn step(elapsed_ms: u64, grace_ms: u64, in_flight: u64) -> DrainStep {
    if in_flight == 0 {
        DrainStep::Close {
            grace_exceeded: false,
        }
    } else if elapsed_ms >= grace_ms {
        DrainStep::Close {
            grace_exceeded: true,
        }
    } else {
        DrainStep::Wait
    }
}

/// What an operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorSignal {
    /// `SIGTERM`: drain, then exit.
    Terminate,
    /// `SIGINT`: drain, then exit.
    Interrupt,
    /// `SIGHUP`: nothing to reload on a Node (its config comes from the Edge).
    Hangup,
}

/// `{SIGTERM, SIGINT, SIGHUP}` blocked in this thread and every thread it
/// starts afterwards, then taken synchronously with `sigwait(3)`: no
/// handler runs in signal context.
#[derive(Debug)]
pub struct OperatorSignals {
    set: libc::sigset_t,
}

#[allow(unsafe_code)]
impl OperatorSignals {
    /// Blocks the operator signals. Call first thing in `main`.
    pub fn block() -> io::Result<Self> {
        // SAFETY: `sigset_t` is plain data, initialised by `sigemptyset`
        // before any other use; the pointers are to a live local.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, exclusively borrowed sigset.
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
            // SAFETY: `self.set` is initialised; `signal` is a live local.
            let rc = unsafe { libc::sigwait(&self.set, &mut signal) };
            if rc == libc::EINTR {
                continue;
            }
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            return Ok(match signal {
                libc::SIGHUP => OperatorSignal::Hangup,
                libc::SIGINT => OperatorSignal::Interrupt,
                _ => OperatorSignal::Terminate,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_in_flight_until_the_grace_is_spent() {
        assert_eq!(
            step(0, 1_000, 0),
            DrainStep::Close {
                grace_exceeded: false
            }
        );
        assert_eq!(step(0, 1_000, 2), DrainStep::Wait);
        assert_eq!(step(999, 1_000, 1), DrainStep::Wait);
        assert_eq!(
            step(1_000, 1_000, 1),
            DrainStep::Close {
                grace_exceeded: true
            }
        );
    }

    #[test]
    fn new_work_is_refused_with_a_typed_terminal() {
        let Some(Msg::RunEvent(event)) = refusal(&Msg::RunRequest(Box::default())) else {
            panic!("a run event");
        };
        assert_eq!(event.seq, 1);
        let failure = event.failure.expect("a failure");
        assert_eq!(failure.code(), FailureCode::Unsupported);
        assert_eq!(failure.side(), FailureSide::Node);
        let Some(Msg::ProviderTunnelFrame(frame)) =
            refusal(&Msg::ProviderTunnelRequest(Box::default()))
        else {
            panic!("a tunnel frame");
        };
        let Some(provider_tunnel_frame::Frame::Error(failure)) = frame.frame else {
            panic!("an error frame");
        };
        assert_eq!(failure.code(), FailureCode::Unsupported);
        assert!(refusal(&Msg::WindowUpdate(Default::default())).is_none());
    }

    #[test]
    fn the_switch_flips_once() {
        let drain = NodeDrain::default();
        assert!(!drain.is_draining());
        assert!(drain.begin());
        assert!(!drain.begin());
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap()
            .block_on(drain.wait());
    }

    #[test]
    fn blocked_signals_are_waited_for() {
        let signals = OperatorSignals::block().unwrap();
        for (raw, expected) in [
            (libc::SIGHUP, OperatorSignal::Hangup),
            (libc::SIGTERM, OperatorSignal::Terminate),
            (libc::SIGINT, OperatorSignal::Interrupt),
        ] {
            // SAFETY: signals this thread, which has the signal blocked.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::pthread_kill(libc::pthread_self(), raw) };
            assert_eq!(rc, 0);
            assert_eq!(signals.wait().unwrap(), expected);
        }
    }
}
