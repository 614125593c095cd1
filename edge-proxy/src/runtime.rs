//! Thread-per-core `monoio` runtimes and the choice of I/O driver.
//!
//! One OS thread per worker, each running its own single-threaded monoio
//! runtime; nothing is shared between them but what is explicitly `Send`.
//! The driver choice (io_uring, or epoll where refused; `IOP_IO_DRIVER`
//! forces one) is [`framing::io_driver`]'s, and so is the ring's set-up
//! (task work deferred to the ring's own thread where the kernel has it).

use std::future::Future;
use std::io;

pub use framing::io_driver::{IO_DRIVER_ENV, IoDriver};
use framing::io_driver::{RingSetup, with_ring_setup};

/// Resolves the driver from `IOP_IO_DRIVER` and what this kernel supports.
pub fn driver_from_env() -> io::Result<IoDriver> {
    let requested = std::env::var(IO_DRIVER_ENV).ok();
    IoDriver::resolve(requested.as_deref(), monoio::utils::detect_uring())
        .map_err(|e| io::Error::new(io::ErrorKind::Unsupported, e))
}

/// Runs `future` to completion on a new monoio runtime with `driver` (timers
/// enabled) on the current thread.
pub fn block_on<F: Future>(driver: IoDriver, future: F) -> io::Result<F::Output> {
    ON_URING.set(driver == IoDriver::Uring);
    Ok(match driver {
        IoDriver::Uring => uring_runtime()?.block_on(future),
        IoDriver::Epoll => monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()?
            .block_on(future),
    })
}

thread_local! {
    static ON_URING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread's runtime (the last [`block_on`] here) is on
/// io_uring. There every read is a ring operation, answered only when the
/// run queue next empties, even when its bytes are already waiting; a
/// reader that knows they are can take them at once instead (the epoll
/// driver reads first and waits only for an empty socket).
pub fn on_uring() -> bool {
    ON_URING.get()
}

/// A monoio runtime on io_uring with timers, its ring set up as cheaply as
/// the kernel allows ([`with_ring_setup`]).
fn uring_runtime() -> io::Result<monoio::Runtime<monoio::time::TimeDriver<monoio::IoUringDriver>>> {
    with_ring_setup(|setup| {
        let mut ring = io_uring::IoUring::builder();
        match setup {
            RingSetup::Deferred => {
                ring.setup_coop_taskrun()
                    .setup_single_issuer()
                    .setup_defer_taskrun();
            }
            RingSetup::Cooperative => {
                ring.setup_coop_taskrun();
            }
            RingSetup::Plain => {}
        }
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .uring_builder(ring)
            .enable_timer()
            .build()
    })
}

/// Number of workers for `--workers N` (0 = one per available core).
pub fn worker_count(requested: usize) -> usize {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The I/O drivers this kernel has (epoll always; io_uring when it runs),
/// for tests that run on each.
#[cfg(test)]
pub(crate) fn drivers() -> Vec<IoDriver> {
    let mut all = vec![IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        all.push(IoDriver::Uring);
    }
    all
}

/// Runs `future` to its end; also whether its first poll had to wait (on
/// io_uring a ring operation always does: its completion is taken only
/// once the ring is entered), for tests of what is done at once.
#[cfg(test)]
pub(crate) async fn waited<F: std::future::Future>(future: F) -> (F::Output, bool) {
    let mut future = std::pin::pin!(future);
    let mut polls = 0;
    let output = std::future::poll_fn(|cx| {
        polls += 1;
        future.as_mut().poll(cx)
    })
    .await;
    (output, polls > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_drivers_run_a_future() {
        assert_eq!(block_on(IoDriver::Epoll, async { 7 }).unwrap(), 7);
        if monoio::utils::detect_uring() {
            assert_eq!(block_on(IoDriver::Uring, async { 8 }).unwrap(), 8);
        }
    }
}
