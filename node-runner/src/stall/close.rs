//! The explicit close of a stalled stream's provider call (F21's
//! close-grace fence).
//!
//! The provider work (a tunnel's relay) takes a [`CloseSignal`] and runs
//! each provider await through [`CloseSignal::or_close`]. After the stall
//! claim the watcher [`signal`](CloseSignal::signal)s it and keeps driving
//! that work: at its next await the work sees the close, drops its
//! provider response (closing the connection) and returns. Its return,
//! observed by the watcher inside the close grace, is the confirmation
//! that makes the stall `retryable`; a work that does not return in time
//! leaves it unconfirmed.

use std::cell::Cell;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// Asks a provider call to close; shared by the watcher and the work.
#[derive(Debug, Clone, Default)]
pub struct CloseSignal {
    inner: Rc<CloseState>,
}

impl fmt::Debug for CloseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloseState")
            .field("closing", &self.closing.get())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct CloseState {
    closing: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl CloseSignal {
    /// A signal not yet given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the work to close, waking it.
    pub fn signal(&self) {
        self.inner.closing.set(true);
        if let Some(waker) = self.inner.waker.take() {
            waker.wake();
        }
    }

    /// Whether the close was asked for.
    pub fn is_closing(&self) -> bool {
        self.inner.closing.get()
    }

    /// Runs `future` until it completes (`Some`) or the close is asked for
    /// (`None`; the future is dropped). The close is checked first.
    pub async fn or_close<F: Future>(&self, future: F) -> Option<F::Output> {
        let mut future = pin!(future);
        poll_fn(|cx| {
            if self.inner.closing.get() {
                return Poll::Ready(None);
            }
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            self.inner.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        })
        .await
    }
}
