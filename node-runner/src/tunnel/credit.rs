//! [`Credit`]: one stream's flow-control window (WindowUpdate).

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// The byte credit of one tunnel stream: how many more body bytes the Node
/// may send on it. Starts at the stream's initial window; every
/// `WindowUpdate` for the stream [`grant`](Self::grant)s more.
///
/// # Contract (strict window)
/// Only body bytes count (the payload of `body` frames, not frame heads nor
/// status/headers/usage/terminal frames). The tunnel never sends more body
/// bytes than it was granted: a provider chunk larger than the credit left
/// is split (a zero-copy slice), the part that fits goes now and the rest
/// waits for a grant. So nothing is ever overdrawn and the Edge may hold the
/// Node to the window exactly; and since the remainder is a slice of a read
/// already done, a large chunk never deadlocks on a small window. While the
/// credit is spent the tunnel does not read from the provider, so a slow
/// client pauses only its own provider read; unread bytes stay in the
/// kernel's socket buffers and TCP pushes back on the provider.
///
/// Cheap to clone; clones share the window (the link reader keeps one to
/// grant, the tunnel task one to spend). Not `Send`: per core, like the
/// stream it belongs to.
#[derive(Clone, Debug)]
pub struct Credit {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    available: Cell<u64>,
    waiter: Cell<Option<Waker>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credit")
            .field("available", &self.available.get())
            .finish_non_exhaustive()
    }
}

impl Credit {
    /// A window of `initial` bytes.
    pub fn new(initial: u32) -> Self {
        let inner = Inner {
            available: Cell::new(u64::from(initial)),
            waiter: Cell::new(None),
        };
        Self {
            inner: Rc::new(inner),
        }
    }

    /// Adds `increment` bytes (a `WindowUpdate`) and wakes a waiting tunnel.
    pub fn grant(&self, increment: u32) {
        let now = self
            .inner
            .available
            .get()
            .saturating_add(u64::from(increment));
        self.inner.available.set(now);
        if now > 0 {
            if let Some(waker) = self.inner.waiter.take() {
                waker.wake();
            }
        }
    }

    /// Bytes that may be sent now.
    pub fn available(&self) -> u64 {
        self.inner.available.get()
    }

    /// Spends `n` bytes; `n` is at most [`available`](Self::available).
    pub(crate) fn spend(&self, n: usize) {
        let left = self.inner.available.get();
        debug_assert!(n as u64 <= left, "spent {n} bytes of {left} credit");
        self.inner.available.set(left.saturating_sub(n as u64));
    }

    /// Waits until some credit is available (at once if some is). One
    /// waiter at a time (the stream's tunnel task): a second waiter would
    /// replace the first one's waker.
    pub async fn ready(&self) {
        poll_fn(|cx| {
            if self.inner.available.get() > 0 {
                Poll::Ready(())
            } else {
                self.inner.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_wakes_a_spent_window() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(async {
                let credit = Credit::new(10);
                credit.ready().await;
                credit.spend(10);
                assert_eq!(credit.available(), 0);
                let granter = credit.clone();
                let waiting = monoio::spawn(async move {
                    credit.ready().await;
                    credit.available()
                });
                monoio::time::sleep(std::time::Duration::from_millis(5)).await;
                granter.grant(7);
                assert_eq!(waiting.await, 7);
                granter.grant(u32::MAX);
                assert_eq!(granter.available(), 7 + u64::from(u32::MAX));
            });
    }
}
