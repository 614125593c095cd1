//! A one-way close signal for a single-threaded task, and a future's race
//! against it.
//!
//! One side [`signal`](CloseSignal::signal)s; the other runs its awaits
//! through [`CloseSignal::or_close`], which drops the awaited future and
//! returns `None` once the close is asked for. Dropping a runtime's I/O
//! future cancels its operation, so a read a task is parked on ends with
//! the signal, whoever holds the socket.
//!
//! Uses:
//! - the Node's close-grace fence (F21): after a stall claim the watcher
//!   signals the tunnel's relay, which drops its provider response
//!   (closing the connection) at its next await and returns;
//! - the Edge's and the Node's link readers: the link's writer, which ends
//!   the session, signals the reader parked on its socket.
//!
//! # Invariants
//! - The close is checked before the future is polled: a future raced
//!   after the signal never runs.
//! - One waiter at a time (`!Send`, `Rc`): the last task to park is the
//!   one woken. A signal is never taken back.
//! - No allocation and no lock a race: a flag and the last waker.

use std::cell::Cell;
use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// Asks a task to stop awaiting; shared by the side that closes and the
/// task ([`CloseSignal::or_close`]). Clones share one signal.
#[derive(Debug, Clone, Default)]
pub struct CloseSignal {
    inner: Rc<CloseState>,
}

#[derive(Default)]
struct CloseState {
    closing: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl fmt::Debug for CloseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloseState")
            .field("closing", &self.closing.get())
            .finish_non_exhaustive()
    }
}

impl CloseSignal {
    /// A signal not yet given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the task to close, waking it.
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

    /// [`or_close`](Self::or_close) for a read that hands its buffer back
    /// with its result (as an io_uring read does): a read the signal ends
    /// reads as one that failed (`ConnectionAborted`) into an empty buffer,
    /// the one in flight being dropped with the read.
    pub async fn read_or_close<B: Default>(
        &self,
        read: impl Future<Output = (io::Result<usize>, B)>,
    ) -> (io::Result<usize>, B) {
        self.or_close(read)
            .await
            .unwrap_or_else(|| (Err(io::ErrorKind::ConnectionAborted.into()), B::default()))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::{Future, pending, poll_fn, ready};
    use std::pin::pin;
    use std::rc::Rc;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    use super::CloseSignal;

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future that records that it was dropped.
    struct Dropped<'a>(&'a Cell<bool>);

    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }

    #[test]
    fn a_finished_future_passes_its_output_on() {
        let signal = CloseSignal::new();
        let mut race = pin!(signal.or_close(ready(7)));
        let poll = race.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert_eq!(poll, Poll::Ready(Some(7)));
        assert!(!signal.is_closing());
    }

    #[test]
    fn the_signal_wakes_the_parked_task_and_drops_its_future() {
        let signal = CloseSignal::new();
        let dropped = Cell::new(false);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let guard = Dropped(&dropped);
        let mut race = pin!(signal.or_close(async move {
            let _guard = guard;
            pending::<()>().await
        }));
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Pending);
        assert!(!dropped.get(), "still awaited");
        signal.clone().signal();
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "the parked task is woken"
        );
        assert_eq!(race.as_mut().poll(&mut cx), Poll::Ready(None));
        assert!(signal.is_closing());
        assert!(dropped.get(), "dropped by the time the race returns");
    }

    #[test]
    fn a_read_the_signal_ends_fails_as_aborted_into_an_empty_buffer() {
        let signal = CloseSignal::new();
        let cx = &mut Context::from_waker(Waker::noop());
        let read = async { (Ok(3), vec![1u8, 2, 3]) };
        let poll = pin!(signal.read_or_close(read)).poll(cx);
        assert!(matches!(poll, Poll::Ready((Ok(3), ref buf)) if buf == &[1, 2, 3]));
        signal.signal();
        let read = pending::<(std::io::Result<usize>, Vec<u8>)>();
        let Poll::Ready((result, buf)) = pin!(signal.read_or_close(read)).poll(cx) else {
            panic!("the signal ends the read");
        };
        assert_eq!(
            result.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionAborted
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn a_future_raced_after_the_signal_never_runs() {
        let signal = CloseSignal::new();
        signal.signal();
        let polled = Rc::new(Cell::new(false));
        let seen = polled.clone();
        let mut race = pin!(signal.or_close(poll_fn(move |_| {
            seen.set(true);
            Poll::Ready(())
        })));
        let poll = race.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert_eq!(poll, Poll::Ready(None));
        assert!(!polled.get(), "the close is checked first");
    }
}
