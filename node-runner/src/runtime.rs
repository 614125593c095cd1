//! The Node's monoio runtimes: one per worker thread, on the I/O driver
//! [`framing::io_driver`] resolves, io_uring rings set up as cheaply as the
//! kernel allows ([`with_ring_setup`]).
//!
//! The Edge has the same few lines (`edge-proxy/src/runtime.rs`): the Edge
//! and the Node share no runtime code by design (DESIGN.md); the decisions
//! both make are in `framing::io_driver`.

use std::future::Future;
use std::io;

use framing::io_driver::{IoDriver, RingSetup, with_ring_setup};

/// Runs `future` on a new monoio runtime with `driver` (timers enabled) on
/// this thread.
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

/// Workers for `--workers N`: N, or one per available core for 0.
pub fn worker_count(requested: usize) -> usize {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, usize::from)
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
